// flash_prefill (fk/kernels/flash_prefill.cuh): causal varlen prefill with soft-capping and a
// sliding window against the fp32 reference, for D 64/128/256 and the GQA shapes of Gemma 2
// (16/8, D 256), Llama (32/8, D 128) and a 4/1 group.
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "fk/kernels/flash_prefill.cuh"
#include "fk/kernels/reference/attention_ref.cuh"
#include "fk/tasks/attention.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

// Lengths around the tile sizes (64, 128 rows; 32, 64 keys): a single token, partial tiles,
// exact tiles and long sequences, ragged in one batch.
const std::vector<int64_t> kRagged = {1, 17, 64, 129, 300, 1000};

// Rows are built as check_prefill in test_attention.cu builds them: each query's key range from
// fk::tasks::window_range, so the reference shares nothing with the kernel's masks.
// Cfg: the tile shape (prefill_detail::PrefillCfg); void: flash_prefill's default for D.
template <int Hq, int Hkv, int D, class Cfg = void>
void check_flash_prefill(const std::vector<int64_t>& lens, int window, float softcap) {
  std::vector<int32_t> cu{0}, begin, len;
  int64_t max_len = 0;
  for (int64_t l : lens) {
    for (int64_t p = 0; p < l; ++p) {
      const auto [first, count] = fk::tasks::window_range(p, window);
      begin.push_back(static_cast<int32_t>(cu.back() + first));
      len.push_back(static_cast<int32_t>(count));
    }
    cu.push_back(static_cast<int32_t>(cu.back() + l));
    max_len = std::max(max_len, l);
  }
  const int64_t total = cu.back();
  Tensor q = empty({total, Hq, D}, DType::kBF16), k = empty({total, Hkv, D}, DType::kBF16),
         v = empty({total, Hkv, D}, DType::kBF16), out = empty({total, Hq, D}, DType::kBF16);
  // With the cap, scores ~ N(0, 16) so that tanh(s / 50) is far from linear on the largest ones.
  fill_normal(q, 11, 0.f, softcap > 0.f ? 4.f : 1.f);
  fill_normal(k, 12);
  fill_normal(v, 13);
  poison(out);
  Tensor cu_d = to_device(cu, {static_cast<int64_t>(cu.size())});
  Tensor begin_d = to_device(begin, {total}), len_d = to_device(len, {total});
  const float scale = 1.f / std::sqrt(float(D));
  if constexpr (std::is_void_v<Cfg>) {
    fk::kernels::flash_prefill<Hq, Hkv, D>(out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), cu_d.data<int32_t>(),
                                           static_cast<int64_t>(lens.size()), max_len, total, scale, window, softcap,
                                           current_stream());
  } else {
    static_assert(Cfg::kD == D);
    fk::kernels::flash_prefill_cfg<Cfg, Hq, Hkv>(out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                 cu_d.data<int32_t>(), static_cast<int64_t>(lens.size()), max_len, total,
                                                 scale, window, softcap, current_stream());
  }
  FK_CHECK_LAUNCH();
  Tensor ref = empty({total, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), Hq * D, k.data<bf16>(), v.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), len_d.data<int32_t>(), total, Hq,
                                              Hkv, D, scale, current_stream(), softcap);
  FK_CHECK_LAUNCH();
  const CompareResult r = compare(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 1.0));  // as check_prefill
  using Shown = std::conditional_t<std::is_void_v<Cfg>, typename fk::kernels::prefill_detail::PrefillDefault<D>::type, Cfg>;
  std::printf("[ flash_prefill ] hq%d hkv%d d%d window %d softcap %g tokens %lld (%s bm%d bn%d wgmma%d): %s\n", Hq, Hkv, D,
              window, softcap, static_cast<long long>(total), std::is_void_v<Cfg> ? "default" : "cfg", Shown::kBM,
              Shown::kBN, int(Shown::kWgmma), r.summary().c_str());
  EXPECT_TRUE(r.passed) << r.summary();
}

// The cap must change the result (guards against a kernel that ignores it): the same inputs
// without the cap differ from the capped reference by far more than the tolerance.
TEST(Kernels, FlashPrefill_bf16_hq16_hkv8_d256_softcap50_matters) {
  FK_REQUIRE_GPU();
  constexpr int Hq = 16, Hkv = 8, D = 256;
  const int64_t n = 200;
  const std::vector<int32_t> cu{0, static_cast<int32_t>(n)};
  std::vector<int32_t> begin(n, 0), len(n);
  for (int64_t p = 0; p < n; ++p) len[p] = static_cast<int32_t>(p + 1);
  Tensor q = empty({n, Hq, D}, DType::kBF16), k = empty({n, Hkv, D}, DType::kBF16), v = empty({n, Hkv, D}, DType::kBF16);
  Tensor out = empty({n, Hq, D}, DType::kBF16);
  fill_normal(q, 21, 0.f, 16.f);  // scores ~ N(0, 256): capping dominates
  fill_normal(k, 22);
  fill_normal(v, 23);
  Tensor cu_d = to_device(cu, {2}), begin_d = to_device(begin, {n}), len_d = to_device(len, {n});
  const float scale = 1.f / 16.f;
  fk::kernels::flash_prefill<Hq, Hkv, D>(out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), cu_d.data<int32_t>(), 1,
                                         n, n, scale, 0, 0.f, current_stream());
  Tensor capped = empty({n, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(capped.data<float>(), q.data<bf16>(), Hq * D, k.data<bf16>(), v.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), len_d.data<int32_t>(), n, Hq, Hkv, D,
                                              scale, current_stream(), 50.f);
  FK_CHECK_LAUNCH();
  EXPECT_FALSE(compare(out, capped, fk::tasks::matmul_tolerance(DType::kBF16, 1.0)).passed);
}

#define FK_PREFILL_TEST(name, Hq, Hkv, D, lens, window, softcap) \
  TEST(Kernels, FlashPrefill_bf16_##name) {                      \
    FK_REQUIRE_GPU();                                            \
    check_flash_prefill<Hq, Hkv, D>(lens, window, softcap);      \
  }

// Gemma 2 9B: 16/8 heads, D 256, softcap 50, alternating global and 4096-key sliding layers.
FK_PREFILL_TEST(hq16_hkv8_d256_ragged, 16, 8, 256, kRagged, 0, 0.f)
FK_PREFILL_TEST(hq16_hkv8_d256_softcap50_ragged, 16, 8, 256, kRagged, 0, 50.f)
FK_PREFILL_TEST(hq16_hkv8_d256_sw100_ragged, 16, 8, 256, kRagged, 100, 0.f)
FK_PREFILL_TEST(hq16_hkv8_d256_sw100_softcap50_ragged, 16, 8, 256, kRagged, 100, 50.f)
FK_PREFILL_TEST(hq16_hkv8_d256_softcap50_s2048, 16, 8, 256, std::vector<int64_t>{2048}, 0, 50.f)
FK_PREFILL_TEST(hq16_hkv8_d256_sw100_softcap50_s2048, 16, 8, 256, std::vector<int64_t>{2048}, 100, 50.f)
FK_PREFILL_TEST(hq16_hkv8_d256_sw1_ragged, 16, 8, 256, kRagged, 1, 50.f)  // each token sees itself only
// Less than one wave of 128-row CTAs: flash_prefill runs the 64-row wgmma shape instead.
FK_PREFILL_TEST(hq16_hkv8_d256_softcap50_s300_small_grid, 16, 8, 256, std::vector<int64_t>{300}, 0, 50.f)
FK_PREFILL_TEST(hq16_hkv8_d256_sw100_small_grid, 16, 8, 256, (std::vector<int64_t>{5, 130}), 100, 0.f)
// Llama shapes (32/8, D 128).
FK_PREFILL_TEST(hq32_hkv8_d128_ragged, 32, 8, 128, kRagged, 0, 0.f)
FK_PREFILL_TEST(hq32_hkv8_d128_softcap50_ragged, 32, 8, 128, kRagged, 0, 50.f)
FK_PREFILL_TEST(hq32_hkv8_d128_sw100_ragged, 32, 8, 128, kRagged, 100, 0.f)
FK_PREFILL_TEST(hq32_hkv8_d128_sw100_softcap50_ragged, 32, 8, 128, kRagged, 100, 50.f)
FK_PREFILL_TEST(hq32_hkv8_d128_s2048, 32, 8, 128, std::vector<int64_t>{2048}, 0, 0.f)
// A 4/1 group (one KV head) and D 64.
FK_PREFILL_TEST(hq4_hkv1_d64_ragged, 4, 1, 64, kRagged, 0, 0.f)
FK_PREFILL_TEST(hq4_hkv1_d64_softcap50_ragged, 4, 1, 64, kRagged, 0, 50.f)
FK_PREFILL_TEST(hq4_hkv1_d64_sw100_ragged, 4, 1, 64, kRagged, 100, 0.f)
FK_PREFILL_TEST(hq4_hkv1_d64_sw100_softcap50_ragged, 4, 1, 64, kRagged, 100, 50.f)
FK_PREFILL_TEST(hq4_hkv1_d64_s2048, 4, 1, 64, std::vector<int64_t>{2048}, 0, 50.f)
FK_PREFILL_TEST(hq4_hkv1_d256_sw100_softcap50_ragged, 4, 1, 256, kRagged, 100, 50.f)
FK_PREFILL_TEST(hq4_hkv1_d128_softcap50_ragged, 4, 1, 128, kRagged, 0, 50.f)

#undef FK_PREFILL_TEST

// The other tile shapes (prefill_detail::PrefillCfg), wgmma (sm_90a) for S = Q K^T included.
namespace pd = fk::kernels::prefill_detail;
#define FK_PREFILL_CFG_TEST(name, Hq, Hkv, D, lens, window, softcap, ...)           \
  TEST(Kernels, FlashPrefill_bf16_##name) {                                         \
    FK_REQUIRE_GPU();                                                               \
    check_flash_prefill<Hq, Hkv, D, pd::PrefillCfg<__VA_ARGS__>>(lens, window, softcap); \
  }
// The all-mma.sync shapes (the pre-wgmma defaults) and the other wgmma shapes.
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_sw100_softcap50_ragged_mma_bm64_bn32, 16, 8, 256, kRagged, 100, 50.f, 256, 64, 32, 4)
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_softcap50_s2048_mma_bm64_bn32, 16, 8, 256, std::vector<int64_t>{2048}, 0, 50.f, 256, 64, 32, 4)
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_softcap50_ragged_mma_bm128_bn64, 16, 8, 256, kRagged, 0, 50.f, 256, 128, 64, 8)
FK_PREFILL_CFG_TEST(hq32_hkv8_d128_sw100_softcap50_ragged_mma_bm128_bn32, 32, 8, 128, kRagged, 100, 50.f, 128, 128, 32, 4)
FK_PREFILL_CFG_TEST(hq32_hkv8_d128_ragged_mma_bm128_bn32, 32, 8, 128, kRagged, 0, 0.f, 128, 128, 32, 4)
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_sw100_softcap50_ragged_wgmma_bm64_bn32, 16, 8, 256, kRagged, 100, 50.f, 256, 64, 32, 4, 1, false, true)
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_softcap50_ragged_wgmma_bm64_bn64, 16, 8, 256, kRagged, 0, 50.f, 256, 64, 64, 4, 1, false, true)
FK_PREFILL_CFG_TEST(hq32_hkv8_d128_ragged_wgmma_bm128_bn64, 32, 8, 128, kRagged, 0, 0.f, 128, 128, 64, 8, 1, false, true)
FK_PREFILL_CFG_TEST(hq4_hkv1_d64_softcap50_ragged_wgmma_bm64_bn64, 4, 1, 64, kRagged, 0, 50.f, 64, 64, 64, 4, 1, false, true)
// The two-warpgroup pipeline (capped) with 32-key tiles.
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_sw100_softcap50_ragged_wgmma_bm128_bn32, 16, 8, 256, kRagged, 100, 50.f, 256, 128, 32, 8, 1, false, true)
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_softcap50_s2048_wgmma_bm128_bn32, 16, 8, 256, std::vector<int64_t>{2048}, 0, 50.f, 256, 128, 32, 8, 1, false, true)
FK_PREFILL_CFG_TEST(hq16_hkv8_d256_softcap50_ragged_fasttanh, 16, 8, 256, kRagged, 0, 50.f, 256, 128, 64, 8, 1, true, true)
#undef FK_PREFILL_CFG_TEST

}  // namespace
}  // namespace fk::testing
