// layer_norm / fused_add_layer_norm: the baseline kernel against the fp64 reference at the
// encoder and vision-tower widths (BERT/ViT 768, XLM-R/DINOv3-L 1024, SigLIP-so400m 1152,
// Qwen2-VL vision 1280, DINOv3-7B 4096), odd token counts, every dtype, with and without bias;
// and the task harness under the runner's own checks.
#include <tuple>

#include "fk/kernels/reference/rms_norm_ref.cuh"
#include "fk/tasks/layer_norm.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kH, bool kBias>
void check_layer_norm(int64_t tokens, bool fused, int64_t x_stride = kH) {
  const float eps = 1e-6f;
  Tensor xs = empty({tokens, x_stride}, dtype_of<T>);
  Tensor x = xs.narrow_last(0, kH);
  Tensor res = empty({tokens, kH}, dtype_of<T>);
  Tensor w = empty({kH}, dtype_of<T>), b = empty({kH}, dtype_of<T>);
  fill_normal(xs, 21, 0.75f, 1.5f);  // a large mean: the subtraction is exercised
  fill_normal(res, 22, -0.5f, 1.f);
  fill_normal(w, 23, 1.f, 0.1f);
  fill_normal(b, 24, 0.f, 0.2f);
  Tensor out = empty({tokens, kH}, dtype_of<T>), sum = empty({tokens, kH}, dtype_of<T>);
  poison(out);
  poison(sum);
  Tensor ref = empty({tokens, kH}, DType::kF32), ref_sum = empty({tokens, kH}, DType::kF32);
  const T* bias = kBias ? b.data<T>() : nullptr;
  if (fused) {
    fk::kernels::fused_add_layer_norm<kH, T, kBias>(out.data<T>(), sum.data<T>(), x.data<T>(), x_stride, res.data<T>(), kH,
                                                    w.data<T>(), bias, tokens, eps, current_stream());
  } else {
    fk::kernels::layer_norm<kH, T, kBias>(out.data<T>(), x.data<T>(), x_stride, w.data<T>(), bias, tokens, eps,
                                          current_stream());
  }
  FK_CHECK_LAUNCH();
  fk::kernels::reference::layer_norm_ref<T>(ref.data<float>(), fused ? ref_sum.data<float>() : nullptr, x.data<T>(),
                                            x_stride, fused ? res.data<T>() : nullptr, kH, w.data<T>(), bias, tokens, kH,
                                            eps, current_stream());
  FK_CHECK_LAUNCH();
  const Tolerance tol = default_tolerance(dtype_of<T>);
  FK_EXPECT_CLOSE(out, ref, tol);
  if (fused) FK_EXPECT_CLOSE(sum, ref_sum, tol);
}

#define FK_LN_TESTS(D, H)                                                                                          \
  TEST(Kernels, LayerNorm_##D##_h##H##_t1) { FK_REQUIRE_GPU(); check_layer_norm<D, H, true>(1, false); }            \
  TEST(Kernels, LayerNorm_##D##_h##H##_t7_nobias) { FK_REQUIRE_GPU(); check_layer_norm<D, H, false>(7, false); }    \
  TEST(Kernels, LayerNorm_##D##_h##H##_t257) { FK_REQUIRE_GPU(); check_layer_norm<D, H, true>(257, false); }        \
  TEST(Kernels, FusedAddLayerNorm_##D##_h##H##_t1) { FK_REQUIRE_GPU(); check_layer_norm<D, H, true>(1, true); }     \
  TEST(Kernels, FusedAddLayerNorm_##D##_h##H##_t4099_nobias) {                                                     \
    FK_REQUIRE_GPU();                                                                                              \
    check_layer_norm<D, H, false>(4099, true);                                                                     \
  }

FK_LN_TESTS(bf16, 768)
FK_LN_TESTS(bf16, 1024)
FK_LN_TESTS(bf16, 1152)
FK_LN_TESTS(bf16, 1280)
FK_LN_TESTS(bf16, 4096)
FK_LN_TESTS(f16, 768)
FK_LN_TESTS(f32, 1152)

// Rows one stride apart inside a wider buffer (a slice of a fused projection's output).
TEST(Kernels, LayerNorm_bf16_h768_strided) { FK_REQUIRE_GPU(); check_layer_norm<bf16, 768, true>(33, false, 768 * 3); }

// The harness's inputs have a mean of 0.5, so a kernel that skipped the centring (an RMSNorm
// in disguise) cannot pass: on such rows RMSNorm's output is far outside LayerNorm's tolerance.
TEST(Kernels, LayerNorm_SkippingTheMeanFailsOnTheHarnessInputs) {
  FK_REQUIRE_GPU();
  constexpr int kH = 768;
  Tensor x = empty({16, kH}, dtype_of<bf16>), w = empty({kH}, dtype_of<bf16>);
  fill_normal(x, 31, 0.5f, 1.f);
  fill_normal(w, 32, 1.f, 0.1f);
  Tensor out = empty({16, kH}, dtype_of<bf16>), uncentred = empty({16, kH}, DType::kF32);
  fk::kernels::layer_norm<kH, bf16, false>(out.data<bf16>(), x.data<bf16>(), kH, w.data<bf16>(), nullptr, 16, 1e-6f,
                                           current_stream());
  FK_CHECK_LAUNCH();
  fk::kernels::reference::rms_norm_ref<bf16>(uncentred.data<float>(), nullptr, x.data<bf16>(), kH, nullptr, 0,
                                             w.data<bf16>(), 16, kH, 1e-6f, current_stream());
  FK_CHECK_LAUNCH();
  EXPECT_FALSE(fk::compare(out, uncentred, default_tolerance(DType::kBF16)).passed);
}

// The harness under the runner's own checks (fresh inputs, poisoned outputs, every set against
// the reference), with the Config and module a generated header declares.
template <bool kBias> struct Cfg {
  static constexpr int64_t hidden_size = 1152;
  static constexpr double eps = 1e-6;
  static constexpr bool bias = kBias;
  using scalar_t = bf16;
};
template <bool kBias> struct Module {
  Module(int64_t h, double e)
      : weight(empty({h}, dtype_of<bf16>)), bias(kBias ? empty({h}, dtype_of<bf16>) : Tensor()), eps(e) {}
  Tensor forward(const Tensor& x) { return fk::tasks::layer_norm_forward<Cfg<kBias>>(x, weight, bias, eps); }
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& r) {
    return fk::tasks::fused_add_layer_norm_forward<Cfg<kBias>>(x, r, weight, bias, eps);
  }
  Tensor weight, bias;
  double eps;
};
TEST(Harness, LayerNorm_bf16_h1152_bias_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::LayerNormInstance<Module<true>, Cfg<true>, false> inst(tokens_case(7));
  check_task_instance(inst);
}
TEST(Harness, FusedAddLayerNorm_bf16_h1152_nobias_t257) {
  FK_REQUIRE_GPU();
  fk::tasks::LayerNormInstance<Module<false>, Cfg<false>, true> inst(tokens_case(257));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
