// The pieces the MLA composite (fk/tasks/deepseek.h) is glued from: strided views and copies
// (Tensor::as_strided, copy_strided_), the batched GEMM of the absorption (gemm_strided_batched)
// and rotary embedding over heads that are not contiguous (q_pe inside q). Each is checked
// against a host computation in double.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "fk/kernels/gemm.h"
#include "fk/kernels/reference/rotary_embedding_ref.cuh"
#include "fk/kernels/rotary_embedding.cuh"
#include "fk/tasks/rotary_embedding.h"
#include "gpu_test_util.h"

namespace fk::testing {
namespace {

std::vector<float> host_f32(const Tensor& t) { return to_host<float>(fk::tasks::to_f32(t)); }

TEST(MlaGlue, CopyStridedBroadcastsAndGathers) {
  FK_REQUIRE_GPU();
  constexpr int64_t T = 5, H = 3, P = 4, R = 2, W = 11;  // src rows of W: [.. | k_pe (R) at column 7]
  Tensor src = empty({T, W}, DType::kBF16);
  fill_normal(src, 1);
  Tensor dst = empty({T, H, P + R}, DType::kBF16);
  fill_normal(dst, 2);
  const std::vector<float> before = host_f32(dst), s = host_f32(src);
  Tensor kpe = src.narrow_last(7, R);
  copy_strided_(dst.narrow_last(P, R), kpe.as_strided({T, H, R}, {kpe.stride(0), 0, 1}));
  const std::vector<float> after = host_f32(dst);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < P + R; ++d) {
        const size_t i = (t * H + h) * (P + R) + d;
        EXPECT_EQ(after[i], d < P ? before[i] : s[t * W + 7 + d - P]) << t << "," << h << "," << d;
      }
}

TEST(MlaGlue, AsStridedRejectsViewsPastTheStorage) {
  FK_REQUIRE_GPU();
  Tensor a = empty({4, 8}, DType::kF32);
  EXPECT_NO_THROW(a.as_strided({4, 3, 2}, {8, 0, 1}, 6));
  EXPECT_THROW(a.as_strided({4, 3, 2}, {8, 0, 1}, 7), std::exception);
  EXPECT_THROW(a.as_strided({2, 2}, {8}, 0), std::exception);
}

// c[:, h] = a[:, h] @ w_h over strided per-head views, as the MLA absorption uses it.
void check_bmm(bool trans, bool out_f32) {
  constexpr int64_t T = 7, H = 4, K = 48, N = 40, ROWS = 100;  // w: per head a [ROWS, K or N] block
  const int64_t lda = H * (K + 8), stride_a = K + 8;              // a rows carry 8 extra columns per head
  Tensor a = empty({T, H, K + 8}, DType::kBF16);
  const int64_t wcols = trans ? K : N, row0 = 3;
  Tensor w = empty({H * ROWS, wcols}, DType::kBF16);
  fill_normal(a, 3);
  fill_normal(w, 4);
  Tensor c = empty({T, H, N + 5}, out_f32 ? DType::kF32 : DType::kBF16);
  fk::kernels::gemm_strided_batched(c.data_ptr(), H * (N + 5), N + 5, a.data_ptr(), lda, stride_a,
                                    static_cast<const bf16*>(w.data_ptr()) + row0 * wcols, wcols, ROWS * wcols, trans, H, T,
                                    N, K, fk::kernels::GemmDType::kBF16, out_f32, current_stream());
  FK_CHECK_LAUNCH();
  const std::vector<float> ha = host_f32(a), hw = host_f32(w), hc = host_f32(c);
  double err = 0, ref2 = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double wv = trans ? hw[(h * ROWS + row0 + n) * wcols + k] : hw[(h * ROWS + row0 + k) * wcols + n];
          s += double(ha[t * lda + h * stride_a + k]) * wv;
        }
        const double got = hc[(t * H + h) * (N + 5) + n];
        err += (got - s) * (got - s);
        ref2 += s * s;
        EXPECT_NEAR(got, s, (out_f32 ? 1e-3 : 2e-2) * (1 + std::fabs(s))) << t << "," << h << "," << n;
      }
  EXPECT_LT(std::sqrt(err / ref2), out_f32 ? 1e-5 : 4e-3);
}
TEST(MlaGlue, BatchedGemmPlain) { FK_REQUIRE_GPU(); check_bmm(false, false); }
TEST(MlaGlue, BatchedGemmTransposedWeights) { FK_REQUIRE_GPU(); check_bmm(true, false); }
TEST(MlaGlue, BatchedGemmF32Out) { FK_REQUIRE_GPU(); check_bmm(true, true); }

// Rope over q_pe = q.view(T, H, P + R)[..., P:] (heads P + R apart) and a 1-head k_pe view,
// against the reference run on contiguous copies.
TEST(MlaGlue, RotaryOverStridedHeads) {
  FK_REQUIRE_GPU();
  constexpr int64_t T = 9, H = 6, P = 32, R = 64, KW = 80;
  fk::tasks::RopeParams p;
  p.rotary_dim = R, p.max_position = 4096, p.base = 10000;
  Tensor cache = fk::tasks::compute_cos_sin_cache(p);
  Tensor q = empty({T, H, P + R}, DType::kBF16), kbuf = empty({T, KW}, DType::kBF16), pos = empty({T}, DType::kI64);
  fill_normal(q, 5);
  fill_normal(kbuf, 6);
  fill_randint(pos, 7, 0, 4096);
  const std::vector<float> q0 = host_f32(q), k0 = host_f32(kbuf);
  // Reference on contiguous copies of the rotated parts.
  Tensor qc = empty({T, H * R}, DType::kBF16), kc = empty({T, R}, DType::kBF16);
  copy_strided_(qc.view({T, H, R}), q.narrow_last(P, R));
  copy_strided_(kc, kbuf.narrow_last(16, R));
  Tensor eq = empty({T, H * R}, DType::kF32), ek = empty({T, R}, DType::kF32);
  namespace ref = fk::kernels::reference;
  ref::rotary_embedding_ref<bf16>(eq.data<float>(), H * R, qc.data<bf16>(), H * R, pos.data<int64_t>(), cache.data<float>(), T,
                                  H, R, R, false, current_stream());
  ref::rotary_embedding_ref<bf16>(ek.data<float>(), R, kc.data<bf16>(), R, pos.data<int64_t>(), cache.data<float>(), T, 1, R, R,
                                  false, current_stream());
  FK_CHECK_LAUNCH();
  fk::kernels::rotary_embedding<bf16, R, R, false, H, 1>(pos.data<int64_t>(), q.data<bf16>() + P, H * (P + R),
                                                         kbuf.data<bf16>() + 16, KW, cache.data<float>(), T, current_stream(),
                                                         P + R, R);
  FK_CHECK_LAUNCH();
  Tensor got_q = empty({T, H * R}, DType::kBF16), got_k = empty({T, R}, DType::kBF16);
  copy_strided_(got_q.view({T, H, R}), q.narrow_last(P, R));
  copy_strided_(got_k, kbuf.narrow_last(16, R));
  FK_EXPECT_CLOSE(got_q, eq, default_tolerance(DType::kBF16));
  FK_EXPECT_CLOSE(got_k, ek, default_tolerance(DType::kBF16));
  // Nothing outside the rotated parts moved.
  const std::vector<float> q1 = host_f32(q), k1 = host_f32(kbuf);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < P; ++d) EXPECT_EQ(q1[(t * H + h) * (P + R) + d], q0[(t * H + h) * (P + R) + d]);
    for (int64_t d = 0; d < KW; ++d)
      if (d < 16 || d >= 16 + R) EXPECT_EQ(k1[t * KW + d], k0[t * KW + d]);
  }
}

}  // namespace
}  // namespace fk::testing
