// rms_norm / fused_add_rms_norm: baseline kernel vs the fp64 reference, and the task harness.
#include <algorithm>
#include <cmath>

#include "fk/tasks/rms_norm.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kH> void check_rms_norm(int64_t tokens, bool fused, int64_t x_stride = kH) {
  const float eps = 1e-5f;
  Tensor xs = empty({tokens, x_stride}, dtype_of<T>);
  Tensor x = xs.narrow_last(0, kH);
  Tensor w = empty({kH}, dtype_of<T>);
  fill_normal(xs, 11);
  fill_normal(w, 12, 1.f, 0.1f);
  Tensor ref = empty({tokens, kH}, DType::kF32);
  const Tolerance tol = default_tolerance(dtype_of<T>);
  if (!fused) {
    Tensor out = empty({tokens, kH}, dtype_of<T>);
    fk::kernels::rms_norm<kH, T>(out.data<T>(), kH, x.data<T>(), x_stride, w.data<T>(), tokens, eps, current_stream());
    FK_CHECK_LAUNCH();
    fk::kernels::reference::rms_norm_ref<T>(ref.data<float>(), nullptr, x.data<T>(), x_stride, nullptr, 0, w.data<T>(),
                                            tokens, kH, eps, current_stream());
    FK_CHECK_LAUNCH();
    FK_EXPECT_CLOSE(out, ref, tol);
  } else {
    Tensor xc = empty({tokens, kH}, dtype_of<T>), res = empty({tokens, kH}, dtype_of<T>);
    fill_normal(xc, 13);
    fill_normal(res, 14);
    Tensor x0 = empty_like(xc), r0 = empty_like(res);
    copy_(x0, xc);
    copy_(r0, res);
    Tensor ref_res = empty({tokens, kH}, DType::kF32);
    fk::kernels::fused_add_rms_norm<kH, T>(xc.data<T>(), kH, res.data<T>(), kH, w.data<T>(), tokens, eps,
                                           current_stream());
    FK_CHECK_LAUNCH();
    fk::kernels::reference::rms_norm_ref<T>(ref.data<float>(), ref_res.data<float>(), x0.data<T>(), kH, r0.data<T>(), kH,
                                            w.data<T>(), tokens, kH, eps, current_stream());
    FK_CHECK_LAUNCH();
    FK_EXPECT_CLOSE(xc, ref, tol);
    FK_EXPECT_CLOSE(res, ref_res, tol);
  }
}

#define FK_RMS_TESTS(D, H)                                                                               \
  TEST(Kernels, RmsNorm_##D##_h##H##_t1) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(1, false); }            \
  TEST(Kernels, RmsNorm_##D##_h##H##_t7) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(7, false); }            \
  TEST(Kernels, RmsNorm_##D##_h##H##_t256) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(256, false); }        \
  TEST(Kernels, RmsNorm_##D##_h##H##_t4096) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(4096, false); }      \
  TEST(Kernels, FusedAddRmsNorm_##D##_h##H##_t1) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(1, true); }     \
  TEST(Kernels, FusedAddRmsNorm_##D##_h##H##_t7) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(7, true); }     \
  TEST(Kernels, FusedAddRmsNorm_##D##_h##H##_t256) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(256, true); } \
  TEST(Kernels, FusedAddRmsNorm_##D##_h##H##_t4096) { FK_REQUIRE_GPU(); check_rms_norm<D, H>(4096, true); }

FK_RMS_TESTS(bf16, 4096)
FK_RMS_TESTS(bf16, 3584)
FK_RMS_TESTS(f16, 4096)
FK_RMS_TESTS(f32, 2048)

TEST(Kernels, RmsNorm_bf16_h4096_t7_strided) { FK_REQUIRE_GPU(); check_rms_norm<bf16, 4096>(7, false, 4096 + 1024); }

// The harness, through a module shaped like templates/rms_norm.cu.mustache.
struct RmsCfg {
  static constexpr int64_t hidden_size = 4096;
  static constexpr double eps = 1e-5;
  using scalar_t = bf16;
};
class TestRMSNorm {
 public:
  explicit TestRMSNorm(int64_t hidden_size, double eps = 1e-6)
      : weight(empty({hidden_size}, dtype_of<bf16>)), variance_epsilon(eps) {}
  Tensor forward(const Tensor& x) { return fk::tasks::rms_norm_forward<RmsCfg>(x, weight, variance_epsilon); }
  std::tuple<Tensor, Tensor> forward(Tensor& x, Tensor& residual) {
    return fk::tasks::fused_add_rms_norm_forward<RmsCfg>(x, residual, weight, variance_epsilon);
  }
  Tensor weight;
  double variance_epsilon;
};

TEST(Tasks, RmsNorm_bf16_h4096_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::RmsNormInstance<TestRMSNorm, RmsCfg, false> inst(tokens_case(7));
  check_task_instance(inst);
}
TEST(Tasks, FusedAddRmsNorm_bf16_h4096_t256) {
  FK_REQUIRE_GPU();
  fk::tasks::RmsNormInstance<TestRMSNorm, RmsCfg, true> inst(tokens_case(256));
  check_task_instance(inst);
}

// GemmaRMSNorm (kinds gemma_rms_norm / gemma_fused_add_rms_norm): Gemma 3 1B's and Gemma 2 9B's
// hidden sizes, plain and with the residual, against the fp64 reference with weight 1 + w.
template <int64_t H> struct GemmaCfg {
  static constexpr int64_t hidden_size = H;
  static constexpr double eps = 1e-6;
  static constexpr bool gemma = true;
  using scalar_t = bf16;
};
template <int64_t H> class TestGemmaRMSNorm {
 public:
  explicit TestGemmaRMSNorm(int64_t hidden_size, double eps = 1e-6)
      : weight(empty({hidden_size}, dtype_of<bf16>)), variance_epsilon(eps) {}
  Tensor forward(const Tensor& x) { return fk::tasks::rms_norm_forward<GemmaCfg<H>>(x, weight, variance_epsilon); }
  std::tuple<Tensor, Tensor> forward(Tensor& x, Tensor& residual) {
    return fk::tasks::fused_add_rms_norm_forward<GemmaCfg<H>>(x, residual, weight, variance_epsilon);
  }
  Tensor weight;
  double variance_epsilon;
};
TEST(Tasks, GemmaRmsNorm_bf16_h1152_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::RmsNormInstance<TestGemmaRMSNorm<1152>, GemmaCfg<1152>, false> inst(tokens_case(7));
  check_task_instance(inst);
}
TEST(Tasks, GemmaFusedAddRmsNorm_bf16_h1152_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::RmsNormInstance<TestGemmaRMSNorm<1152>, GemmaCfg<1152>, true> inst(tokens_case(4096));
  check_task_instance(inst);
}
TEST(Tasks, GemmaFusedAddRmsNorm_bf16_h3584_t256) {
  FK_REQUIRE_GPU();
  fk::tasks::RmsNormInstance<TestGemmaRMSNorm<3584>, GemmaCfg<3584>, true> inst(tokens_case(256));
  check_task_instance(inst);
}
// The Gemma form differs from the plain one: the same inputs give different outputs (1 + w vs w).
TEST(Kernels, GemmaRmsNormDiffersFromRmsNorm_bf16_h1152) {
  FK_REQUIRE_GPU();
  constexpr int kH = 1152;
  Tensor x = empty({16, kH}, DType::kBF16), w = empty({kH}, DType::kBF16);
  fill_normal(x, 1);
  fill_normal(w, 2, 0.f, 0.1f);
  Tensor a = empty({16, kH}, DType::kBF16), b = empty({16, kH}, DType::kBF16), ref = empty({16, kH}, DType::kF32);
  fk::kernels::rms_norm<kH, bf16, 0, -1, true>(a.data<bf16>(), kH, x.data<bf16>(), kH, w.data<bf16>(), 16, 1e-6f, current_stream());
  fk::kernels::rms_norm<kH, bf16>(b.data<bf16>(), kH, x.data<bf16>(), kH, w.data<bf16>(), 16, 1e-6f, current_stream());
  fk::kernels::reference::rms_norm_ref<bf16>(ref.data<float>(), nullptr, x.data<bf16>(), kH, nullptr, 0, w.data<bf16>(), 16,
                                             kH, 1e-6f, current_stream(), 1.f);
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(a, ref, default_tolerance(DType::kBF16));
  const auto ha = fk::to_host<float>(fk::tasks::to_f32(a)), hb = fk::to_host<float>(fk::tasks::to_f32(b));
  double diff = 0;
  for (size_t i = 0; i < ha.size(); ++i) diff = std::max(diff, double(std::abs(ha[i] - hb[i])));
  EXPECT_GT(diff, 0.5);
}

}  // namespace
}  // namespace fk::testing
