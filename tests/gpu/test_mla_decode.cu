// DeepSeek-V3 MLA absorbed decode (fk/kernels/mla_decode.cuh) against the fp32 reference
// (fk/kernels/reference/mla_decode_ref.cuh), and the reference against a double-precision host
// computation. Shapes: Hq 16 (TP8), 32, 64 and 128 (TP1) query heads, one 576-wide latent row
// per token (c_kv 512 | k_pe 64); single-split and split-KV paths; ragged lengths; caches that
// hold more sequences than the batch.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "fk/kernels/mla_decode.cuh"
#include "fk/kernels/reference/mla_decode_ref.cuh"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

constexpr int kDkv = 512, kDr = 64, kD = kDkv + kDr;

// DeepSeek-V3's softmax scale: qk_head_dim^-1/2 (192 = 128 nope + 64 rope) times mscale^2 with
// YaRN's mscale = 0.1 * mscale_all_dim * ln(factor) + 1 (factor 40, mscale_all_dim 1), as vLLM's
// DeepseekV2MLAAttention computes it. With q and rows ~ N(0, 1) the scores have a standard
// deviation of about 0.135 * 24 = 3.2: a peaked softmax, as in the model.
float deepseek_v3_scale() {
  const double mscale = 0.1 * 1.0 * std::log(40.0) + 1.0;
  return static_cast<float>(mscale * mscale / std::sqrt(192.0));
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

// Tolerance. The kernel's scores, softmax and accumulation are fp32 (tensor-core products of
// T inputs are exact); it rounds twice: the probabilities P to T before O += P V (relative
// 2^-9 for bf16, with the row sums taken over the rounded values, so the weights stay a convex
// combination perturbed by at most 2^-8 relative each), and the output to T (2^-9 of |out|).
// Both are at most ~0.4% of the typical output magnitude; the reference keeps everything in
// fp32. atol 1% of the output's RMS (outputs are weighted means of N(0, 1) rows, their size
// shrinks with the spread of the attention), rtol 1%, and the relative L2 error under 0.5%: a
// factor 2.5 or more above the worst case, far below any indexing or masking bug (which moves
// outputs by O(RMS)). fp16 rounds with 2^-11: the same bounds hold with room to spare.
Tolerance mla_tolerance(double typical) { return {1e-2 * typical, 1e-2, 5e-3}; }

/// Runs mla_decode<Hq> on `batch` sequences of a cache holding `cache_seqs` (>= batch)
/// sequences of `max_len` rows, lengths `lens`, and compares with the reference. want_split: -1
/// any, 0 the single-split path, 1 the split path (checked against mla_decode_split).
/// nan_tail: the cache rows past every sequence's length are NaN (never written slots of a
/// production cache hold anything; the kernel must not let them reach the output).
template <int Hq, class T = bf16>
void check_mla(int64_t batch, int64_t cache_seqs, int64_t max_len, const std::vector<int32_t>& lens, int want_split = -1,
               float scale = deepseek_v3_scale(), bool nan_tail = false) {
  ASSERT_EQ(static_cast<int64_t>(lens.size()), batch);
  ASSERT_GE(cache_seqs, batch);
  const DType dt = dtype_of<T>;
  Tensor q = empty({batch, Hq, kD}, dt), kv = empty({cache_seqs * max_len, kD}, dt), out = empty({batch, Hq, kDkv}, dt);
  fill_normal(q, 11 + Hq);
  fill_normal(kv, 12 + Hq);
  if (nan_tail) {
    for (int64_t b = 0; b < cache_seqs; ++b) {
      const int64_t used = b < batch ? lens[b] : 0;
      FK_CUDA_CHECK(cudaMemsetAsync(kv.data<T>() + (b * max_len + used) * kD, 0xFF,
                                    static_cast<size_t>(max_len - used) * kD * sizeof(T), current_stream()));
    }
  }
  poison(out);
  Tensor lens_d = to_device(lens, {batch});
  const auto sp = fk::kernels::mla_decode_split<Hq, kDkv, kDr>(batch, max_len);
  if (want_split >= 0) EXPECT_EQ(sp.splits > 1, want_split == 1) << "splits " << sp.splits;
  const size_t ws_bytes = fk::kernels::mla_decode_workspace_bytes<Hq, kDkv, kDr>(batch, max_len);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4 + 4)}, DType::kF32);
  if (ws_bytes > 0) poison(ws);  // unwritten partials must never be read
  fk::kernels::mla_decode<Hq, kDkv, kDr, T>(out.data<T>(), q.data<T>(), kv.data<T>(), lens_d.data<int32_t>(), batch,
                                            max_len, scale, ws_bytes > 0 ? ws.data_ptr() : nullptr, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({batch, Hq, kDkv}, DType::kF32);
  fk::kernels::reference::mla_decode_ref<T>(ref.data<float>(), q.data<T>(), kv.data<T>(), lens_d.data<int32_t>(), batch,
                                            max_len, Hq, kDkv, kDr, scale, current_stream());
  FK_CHECK_LAUNCH();
  const double typical = rms(to_host<float>(ref));
  const CompareResult r = compare(out, ref, mla_tolerance(typical));
  std::printf("[ mla_decode ] hq%d b%lld cache_seqs %lld max_len %lld splits %d chunk %d: rms %.3g, %s\n", Hq,
              static_cast<long long>(batch), static_cast<long long>(cache_seqs), static_cast<long long>(max_len),
              sp.splits, sp.chunk, typical, r.summary().c_str());
  EXPECT_TRUE(r.passed) << r.summary();
}

std::vector<int32_t> spread(int64_t batch, int32_t max_len) {  // decode_seq_lens' spread
  std::vector<int32_t> l;
  for (int64_t b = 0; b < batch; ++b) l.push_back(static_cast<int32_t>(max_len - b * max_len / (2 * batch)));
  return l;
}

// Hq 128 (DeepSeek-V3 at TP1: two 64-head blocks per sequence).
TEST(Kernels, MlaDecode_bf16_hq128_b1_kv1) { FK_REQUIRE_GPU(); check_mla<128>(1, 1, 1, {1}, 0); }
TEST(Kernels, MlaDecode_bf16_hq128_b1_kv17) { FK_REQUIRE_GPU(); check_mla<128>(1, 1, 17, {17}, 0); }
TEST(Kernels, MlaDecode_bf16_hq128_b1_kv64) { FK_REQUIRE_GPU(); check_mla<128>(1, 1, 64, {64}, 0); }
TEST(Kernels, MlaDecode_bf16_hq128_b1_kv1000) { FK_REQUIRE_GPU(); check_mla<128>(1, 1, 1000, {1000}, 1); }
TEST(Kernels, MlaDecode_bf16_hq128_b1_kv4097) { FK_REQUIRE_GPU(); check_mla<128>(1, 1, 4097, {4097}, 1); }
TEST(Kernels, MlaDecode_bf16_hq128_b3_mixed_cache5) {
  FK_REQUIRE_GPU();
  check_mla<128>(3, 5, 4100, {1000, 17, 4097}, 1);
}
TEST(Kernels, MlaDecode_bf16_hq128_b16_mixed) {
  FK_REQUIRE_GPU();
  check_mla<128>(16, 16, 1000, {1000, 1, 17, 64, 65, 999, 500, 128, 127, 300, 2, 63, 700, 1000, 250, 33}, 1);
}
// One CTA per (head block, sequence) once batch * 2 fills the GPU: the single-split path with
// ragged lengths.
TEST(Kernels, MlaDecode_bf16_hq128_b70_kv300_single_split) {
  FK_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int b = 0; b < 70; ++b) lens.push_back(300 - 4 * b);
  check_mla<128>(70, 72, 300, lens, 0);
}

// Hq 16 (TP8: one 16-head block, bandwidth bound).
TEST(Kernels, MlaDecode_bf16_hq16_b1_kv1) { FK_REQUIRE_GPU(); check_mla<16>(1, 1, 1, {1}, 0); }
TEST(Kernels, MlaDecode_bf16_hq16_b1_kv64) { FK_REQUIRE_GPU(); check_mla<16>(1, 1, 64, {64}, 0); }
TEST(Kernels, MlaDecode_bf16_hq16_b1_kv4097) { FK_REQUIRE_GPU(); check_mla<16>(1, 1, 4097, {4097}, 1); }
TEST(Kernels, MlaDecode_bf16_hq16_b3_mixed_cache4) { FK_REQUIRE_GPU(); check_mla<16>(3, 4, 4097, {1, 4097, 1000}, 1); }
TEST(Kernels, MlaDecode_bf16_hq16_b16_spread) { FK_REQUIRE_GPU(); check_mla<16>(16, 16, 1000, spread(16, 1000), 1); }

// Hq 32 (TP4) and 64 (TP2).
TEST(Kernels, MlaDecode_bf16_hq32_b3_mixed) { FK_REQUIRE_GPU(); check_mla<32>(3, 3, 4097, {17, 4097, 64}); }
TEST(Kernels, MlaDecode_bf16_hq64_b1_kv1000) { FK_REQUIRE_GPU(); check_mla<64>(1, 1, 1000, {1000}); }
TEST(Kernels, MlaDecode_bf16_hq64_b16_spread_cache20) { FK_REQUIRE_GPU(); check_mla<64>(16, 20, 4097, spread(16, 4097)); }

// A small softmax scale (nearly uniform attention over long caches: tiny, averaged outputs).
TEST(Kernels, MlaDecode_bf16_hq128_b3_small_scale) {
  FK_REQUIRE_GPU();
  check_mla<128>(3, 3, 4097, {4097, 1, 1000}, 1, 0.01f);
}

// Never-written cache slots (NaN) past every sequence, on both paths and with the paired
// head blocks (Hq 128) and a single one (Hq 16).
TEST(Kernels, MlaDecode_bf16_hq128_b3_nan_tail_split) {
  FK_REQUIRE_GPU();
  check_mla<128>(3, 4, 1000, {1000, 17, 130}, 1, deepseek_v3_scale(), true);
}
TEST(Kernels, MlaDecode_bf16_hq128_b70_nan_tail_single_split) {
  FK_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int b = 0; b < 70; ++b) lens.push_back(300 - 4 * b);
  check_mla<128>(70, 70, 300, lens, 0, deepseek_v3_scale(), true);
}
TEST(Kernels, MlaDecode_bf16_hq16_b3_nan_tail) {
  FK_REQUIRE_GPU();
  check_mla<16>(3, 3, 4097, {1, 4000, 65}, 1, deepseek_v3_scale(), true);
}

// fp16.
TEST(Kernels, MlaDecode_f16_hq16_b3_mixed) { FK_REQUIRE_GPU(); check_mla<16, f16>(3, 4, 4097, {1, 4097, 1000}, 1); }
TEST(Kernels, MlaDecode_f16_hq128_b16_mixed) {
  FK_REQUIRE_GPU();
  check_mla<128, f16>(16, 16, 1000, {1000, 1, 17, 64, 65, 999, 500, 128, 127, 300, 2, 63, 700, 1000, 250, 33}, 1);
}

// The reference against a double-precision host computation (2 sequences, 16 heads).
TEST(Kernels, MlaDecodeRef_f32_vs_host_double) {
  FK_REQUIRE_GPU();
  constexpr int kHq = 16;
  const int64_t batch = 2, max_len = 300;
  const std::vector<int32_t> lens = {300, 17};
  const float scale = deepseek_v3_scale();
  Tensor q = empty({batch, kHq, kD}, DType::kBF16), kv = empty({batch * max_len, kD}, DType::kBF16);
  fill_normal(q, 21);
  fill_normal(kv, 22);
  Tensor lens_d = to_device(lens, {batch});
  Tensor ref = empty({batch, kHq, kDkv}, DType::kF32);
  fk::kernels::reference::mla_decode_ref<bf16>(ref.data<float>(), q.data<bf16>(), kv.data<bf16>(), lens_d.data<int32_t>(),
                                               batch, max_len, kHq, kDkv, kDr, scale, current_stream());
  FK_CHECK_LAUNCH();
  const std::vector<bf16> qh = to_host<bf16>(q), kvh = to_host<bf16>(kv);
  const std::vector<float> got = to_host<float>(ref);
  double max_err = 0, max_abs = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int h = 0; h < kHq; ++h) {
      const bf16* qr = &qh[(b * kHq + h) * kD];
      std::vector<double> s(lens[b]);
      double mx = -INFINITY;
      for (int p = 0; p < lens[b]; ++p) {
        const bf16* row = &kvh[(b * max_len + p) * kD];
        double dot = 0;
        for (int i = 0; i < kD; ++i) dot += double(__bfloat162float(qr[i])) * double(__bfloat162float(row[i]));
        s[p] = dot * scale;
        mx = std::max(mx, s[p]);
      }
      double den = 0;
      for (double& x : s) den += (x = std::exp(x - mx));
      for (int c = 0; c < kDkv; ++c) {
        double num = 0;
        for (int p = 0; p < lens[b]; ++p) num += s[p] * double(__bfloat162float(kvh[(b * max_len + p) * kD + c]));
        const double want = num / den;
        max_err = std::max(max_err, std::abs(want - double(got[(b * kHq + h) * kDkv + c])));
        max_abs = std::max(max_abs, std::abs(want));
      }
    }
  std::printf("[ mla_decode_ref ] vs host double: max_abs_err %.3g (max |out| %.3g)\n", max_err, max_abs);
  EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_abs));
}

// Argument errors: std::invalid_argument naming the problem, before anything is launched.
TEST(Kernels, MlaDecode_bf16_argument_errors) {
  FK_REQUIRE_GPU();
  Tensor q = empty({2, 16, kD}, DType::kBF16), kv = empty({2 * 4096, kD}, DType::kBF16), out = empty({2, 16, kDkv}, DType::kBF16);
  Tensor lens_d = to_device(std::vector<int32_t>{128, 5}, {2});
  const float scale = deepseek_v3_scale();
  auto call = [&](int64_t batch, int64_t max_len, float s, const bf16* qp, void* ws) {
    fk::kernels::mla_decode<16, kDkv, kDr, bf16>(out.data<bf16>(), qp, kv.data<bf16>(), lens_d.data<int32_t>(), batch,
                                                  max_len, s, ws, current_stream());
  };
  auto expect_message = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no exception; expected one mentioning \"" << needle << "\"";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_message([&] { call(0, 128, scale, q.data<bf16>(), nullptr); }, "batch must be >= 1, got 0");
  expect_message([&] { call(-3, 128, scale, q.data<bf16>(), nullptr); }, "batch must be >= 1, got -3");
  expect_message([&] { call(70000, 128, scale, q.data<bf16>(), nullptr); }, "batch must be <= 65535");
  expect_message([&] { call(2, 0, scale, q.data<bf16>(), nullptr); }, "max_len must be >= 1, got 0");
  expect_message([&] { call(2, 128, scale, nullptr, nullptr); }, "got a null one");
  expect_message([&] { call(2, 128, scale, q.data<bf16>() + 1, nullptr); }, "16-byte aligned");
  expect_message([&] { call(2, 128, NAN, q.data<bf16>(), nullptr); }, "softmax_scale must be positive and finite");
  expect_message([&] { call(2, 128, -1.f, q.data<bf16>(), nullptr); }, "softmax_scale must be positive and finite");
  ASSERT_GT((fk::kernels::mla_decode_workspace_bytes<16, kDkv, kDr>(2, 4096)), 0u);  // 2 long sequences split
  expect_message([&] { call(2, 4096, scale, q.data<bf16>(), nullptr); }, "needs a 16-byte aligned workspace");
  EXPECT_THROW((fk::kernels::mla_decode_workspace_bytes<16, kDkv, kDr>(0, 128)), std::invalid_argument);
}

}  // namespace
}  // namespace fk::testing
