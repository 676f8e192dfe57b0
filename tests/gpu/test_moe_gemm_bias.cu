// moe_grouped_gemm (fk/kernels/moe_gemm.cuh) with and without the per-expert bias (gpt-oss
// experts: C = (A W_e^T + b_e) x routing weight, vLLM fused_moe_kernel HAS_BIAS) against
// reference::moe_gemm_ref, for block_m 16 (mma.sync), 64, 128 and 192 (the default: wgmma on an
// sm_90 device built for sm_90a; and mma.sync forced), routed weights on and off, at gpt-oss-20b's
// shapes: E 32, top 4, hidden 2880, w13 N 5760 (2 x 2880, K 2880), w2 N 2880 (K 2880).
// N 2880 is not a multiple of the 128- and 256-column tiles, so the last n-block is partial.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "fk/kernels/moe_gemm.cuh"
#include "fk/kernels/reference/moe_gemm_ref.cuh"
#include "fk/tasks/harness.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

constexpr int kE = 32, kTopK = 4, kHidden = 2880;

/// Random routing (distinct experts per token) aligned as vLLM moe_align_block_size does, on the
/// host: per-expert segments padded to block_m with the sentinel num_valid, -1 blocks at the end.
struct Routing {
  std::vector<int32_t> ids, sorted, eids;
  std::vector<float> weights;
  int32_t ntpp = 0;
  int64_t max_blocks = 0;
};
Routing make_routing(int64_t tokens, int bm, uint64_t seed) {
  Routing r;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uw(0.1f, 1.f);
  std::vector<int32_t> perm(kE);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < kTopK; ++j) {
      r.ids.push_back(perm[j]);
      r.weights.push_back(uw(rng));
    }
  }
  const int64_t numel = static_cast<int64_t>(r.ids.size());
  std::vector<int64_t> cnt(kE, 0), off(kE + 1, 0);
  for (int32_t e : r.ids) ++cnt[e];
  for (int e = 0; e < kE; ++e) off[e + 1] = off[e] + (cnt[e] + bm - 1) / bm * bm;
  r.ntpp = static_cast<int32_t>(off[kE]);
  const int64_t max_padded = numel + int64_t(kE) * (bm - 1);
  r.max_blocks = (max_padded + bm - 1) / bm;
  r.sorted.assign(max_padded, static_cast<int32_t>(numel));
  r.eids.assign(r.max_blocks, -1);
  for (int e = 0; e < kE; ++e)
    for (int64_t b = off[e] / bm; b < off[e + 1] / bm; ++b) r.eids[b] = e;
  std::vector<int64_t> pos(off.begin(), off.end() - 1);
  for (int64_t s = 0; s < numel; ++s) r.sorted[pos[r.ids[s]]++] = static_cast<int32_t>(s);
  for (int e = 0; e < kE; ++e) std::shuffle(r.sorted.begin() + off[e], r.sorted.begin() + off[e] + cnt[e], rng);
  return r;
}

enum class Path { kDefault, kMmaSync };

/// gemm1: A = hidden [T, K] (a_div_topk), else A = activation [T * top_k, K]. bias: with the
/// per-expert bias (std 1, as large as the matmul part of the output).
void check_moe_gemm(int bm, int64_t tokens, int N, int K, bool gemm1, bool mul, bool bias, Path path) {
  const Routing r = make_routing(tokens, bm, 100 + bm + N);
  const int64_t nv = static_cast<int64_t>(r.ids.size());
  const int64_t a_rows = gemm1 ? tokens : nv;
  Tensor a = empty({a_rows, K}, DType::kBF16), w = empty({kE, N, K}, DType::kBF16), b = empty({kE, N}, DType::kBF16);
  fill_normal(a, 61);
  fill_normal(w, 62, 0.f, 1.f / std::sqrt(float(K)));  // outputs ~N(0, 1)
  fill_normal(b, 63);
  Tensor ids = to_device(r.ids, {nv}), tw = to_device(r.weights, {nv});
  Tensor sorted = to_device(r.sorted, {static_cast<int64_t>(r.sorted.size())});
  Tensor eids = to_device(r.eids, {r.max_blocks});
  Tensor ntpp = to_device(std::vector<int32_t>{r.ntpp}, {1});
  Tensor c = empty({nv, N}, DType::kBF16);
  poison(c);
  const bf16* bias_p = bias ? b.data<bf16>() : nullptr;
  if (path == Path::kDefault) {
    fk::kernels::moe_grouped_gemm<bf16>(c.data<bf16>(), N, a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(),
                                        sorted.data<int32_t>(), eids.data<int32_t>(), ntpp.data<int32_t>(), nv, kTopK,
                                        gemm1, mul, N, K, r.max_blocks, bm, current_stream(), bias_p);
  } else {
    fk::kernels::moe_grouped_gemm<bf16, fk::kernels::MoeGemmImpl::kMmaSync>(
        c.data<bf16>(), N, a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(), sorted.data<int32_t>(),
        eids.data<int32_t>(), ntpp.data<int32_t>(), nv, kTopK, gemm1, mul, N, K, r.max_blocks, bm, current_stream(),
        bias_p);
  }
  FK_CHECK_LAUNCH();
  Tensor ref = empty({nv, N}, DType::kF32);
  fk::kernels::reference::moe_gemm_ref<bf16>(ref.data<float>(), a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(),
                                             ids.data<int32_t>(), nv, kTopK, gemm1, mul, N, K, kE, current_stream(),
                                             bias_p);
  FK_CHECK_LAUNCH();
  const auto tol = fk::tasks::matmul_tolerance(DType::kBF16, 1.0);
  const CompareResult res = compare(c, ref, tol);
  std::printf("[ moe_gemm ] bm%d T%lld N%d K%d %s mul%d bias%d %s: %s\n", bm, static_cast<long long>(tokens), N, K,
              gemm1 ? "w13" : "w2", int(mul), int(bias), path == Path::kDefault ? "default" : "mma.sync",
              res.summary().c_str());
  EXPECT_TRUE(res.passed) << res.summary();
  if (bias) {
    // The bias must matter: the same output against the bias-free reference fails.
    Tensor ref0 = empty({nv, N}, DType::kF32);
    fk::kernels::reference::moe_gemm_ref<bf16>(ref0.data<float>(), a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(),
                                               ids.data<int32_t>(), nv, kTopK, gemm1, mul, N, K, kE, current_stream());
    FK_CHECK_LAUNCH();
    EXPECT_FALSE(compare(c, ref0, tol).passed);
  } else {
    // bias = nullptr is the bias-free kernel, bit for bit the call without the argument.
    Tensor c2 = empty({nv, N}, DType::kBF16);
    poison(c2);
    if (path == Path::kDefault) {
      fk::kernels::moe_grouped_gemm<bf16>(c2.data<bf16>(), N, a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(),
                                          sorted.data<int32_t>(), eids.data<int32_t>(), ntpp.data<int32_t>(), nv, kTopK,
                                          gemm1, mul, N, K, r.max_blocks, bm, current_stream());
    } else {
      fk::kernels::moe_grouped_gemm<bf16, fk::kernels::MoeGemmImpl::kMmaSync>(
          c2.data<bf16>(), N, a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(), sorted.data<int32_t>(),
          eids.data<int32_t>(), ntpp.data<int32_t>(), nv, kTopK, gemm1, mul, N, K, r.max_blocks, bm, current_stream());
    }
    FK_CHECK_LAUNCH();
    const std::vector<bf16> h1 = to_host<bf16>(c), h2 = to_host<bf16>(c2);
    EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.size() * sizeof(bf16)), 0);
  }
}

constexpr int kW13N = 2 * kHidden, kW2N = kHidden, kK = kHidden;  // gpt-oss-20b: intermediate 2880

// Decode (block_m 16; always mma.sync): 8 tokens.
TEST(Kernels, MoeGemm_bf16_e32_top4_bm16_w13_n5760_k2880_bias) { FK_REQUIRE_GPU(); check_moe_gemm(16, 8, kW13N, kK, true, false, true, Path::kDefault); }
TEST(Kernels, MoeGemm_bf16_e32_top4_bm16_w13_n5760_k2880_bias_weighted) { FK_REQUIRE_GPU(); check_moe_gemm(16, 8, kW13N, kK, true, true, true, Path::kDefault); }
TEST(Kernels, MoeGemm_bf16_e32_top4_bm16_w2_n2880_k2880_bias_weighted) { FK_REQUIRE_GPU(); check_moe_gemm(16, 8, kW2N, kK, false, true, true, Path::kDefault); }
TEST(Kernels, MoeGemm_bf16_e32_top4_bm16_w2_n2880_k2880_bias) { FK_REQUIRE_GPU(); check_moe_gemm(16, 8, kW2N, kK, false, false, true, Path::kDefault); }
TEST(Kernels, MoeGemm_bf16_e32_top4_bm16_w2_n2880_k2880_nobias_weighted) { FK_REQUIRE_GPU(); check_moe_gemm(16, 8, kW2N, kK, false, true, false, Path::kDefault); }

// block_m 64: 512 tokens (64 rows per expert on average).
#define FK_MOE_BIAS_TESTS(BM, T)                                                                                   \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w13_n5760_k2880_bias) {                                             \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW13N, kK, true, false, true, Path::kDefault);                                           \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w13_n5760_k2880_bias_weighted) {                                    \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW13N, kK, true, true, true, Path::kDefault);                                            \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w2_n2880_k2880_bias_weighted) {                                     \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW2N, kK, false, true, true, Path::kDefault);                                            \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w2_n2880_k2880_bias) {                                              \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW2N, kK, false, false, true, Path::kDefault);                                           \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w2_n2880_k2880_nobias_weighted) {                                   \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW2N, kK, false, true, false, Path::kDefault);                                           \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w13_n5760_k2880_bias_mma) {                                         \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW13N, kK, true, false, true, Path::kMmaSync);                                           \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w2_n2880_k2880_bias_weighted_mma) {                                 \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW2N, kK, false, true, true, Path::kMmaSync);                                            \
  }                                                                                                                \
  TEST(Kernels, MoeGemm_bf16_e32_top4_bm##BM##_w2_n2880_k2880_nobias_weighted_mma) {                               \
    FK_REQUIRE_GPU();                                                                                              \
    check_moe_gemm(BM, T, kW2N, kK, false, true, false, Path::kMmaSync);                                           \
  }
FK_MOE_BIAS_TESTS(64, 512)
// block_m 128: 2048 tokens (256 rows per expert on average).
FK_MOE_BIAS_TESTS(128, 2048)
// block_m 192: 1024 tokens (128 rows per expert on average: a 192-row tile holds all of an
// expert's rows plus padding, some of its 64-row warpgroups on padding only).
FK_MOE_BIAS_TESTS(192, 1024)
#undef FK_MOE_BIAS_TESTS

// The other wgmma tile shapes (moe_grouped_gemm_cfg), with the bias: 1 warpgroup x 128 columns
// and 2 x 128 rows.
template <class Cfg>
void check_cfg_bias(int64_t tokens, int N, bool gemm1, bool mul) {
  const int bm = Cfg::kBM;
  const Routing r = make_routing(tokens, bm, 200 + bm + N);
  const int64_t nv = static_cast<int64_t>(r.ids.size());
  const int K = kK;
  Tensor a = empty({gemm1 ? tokens : nv, K}, DType::kBF16), w = empty({kE, N, K}, DType::kBF16), b = empty({kE, N}, DType::kBF16);
  fill_normal(a, 71);
  fill_normal(w, 72, 0.f, 1.f / std::sqrt(float(K)));
  fill_normal(b, 73);
  Tensor ids = to_device(r.ids, {nv}), tw = to_device(r.weights, {nv});
  Tensor sorted = to_device(r.sorted, {static_cast<int64_t>(r.sorted.size())});
  Tensor eids = to_device(r.eids, {r.max_blocks});
  Tensor ntpp = to_device(std::vector<int32_t>{r.ntpp}, {1});
  Tensor c = empty({nv, N}, DType::kBF16);
  poison(c);
  fk::kernels::moe_grouped_gemm_cfg<Cfg, bf16>(c.data<bf16>(), N, a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(),
                                               sorted.data<int32_t>(), eids.data<int32_t>(), ntpp.data<int32_t>(), nv,
                                               kTopK, gemm1, mul, N, K, r.max_blocks, bm, current_stream(), b.data<bf16>());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({nv, N}, DType::kF32);
  fk::kernels::reference::moe_gemm_ref<bf16>(ref.data<float>(), a.data<bf16>(), K, w.data<bf16>(), tw.data<float>(),
                                             ids.data<int32_t>(), nv, kTopK, gemm1, mul, N, K, kE, current_stream(),
                                             b.data<bf16>());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(c, ref, fk::tasks::matmul_tolerance(DType::kBF16, 1.0));
}
TEST(Kernels, MoeGemm_bf16_e32_top4_wgmma64_w2_n2880_k2880_bias_weighted) {
  FK_REQUIRE_GPU();
  if (!fk::kernels::moe_gemm_detail::device_is_sm90()) GTEST_SKIP() << "wgmma needs an sm_90 device";
  check_cfg_bias<fk::kernels::moe_gemm_cfg::Wgmma64>(512, kW2N, false, true);
}
TEST(Kernels, MoeGemm_bf16_e32_top4_wgmma128x128_w13_n5760_k2880_bias) {
  FK_REQUIRE_GPU();
  if (!fk::kernels::moe_gemm_detail::device_is_sm90()) GTEST_SKIP() << "wgmma needs an sm_90 device";
  check_cfg_bias<fk::kernels::moe_gemm_cfg::Wgmma128x128>(2048, kW13N, true, false);
}

}  // namespace
}  // namespace fk::testing
