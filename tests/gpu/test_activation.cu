// activation (single-tensor GELU, GELU-tanh, QuickGELU, ReLU, SiLU, Sigmoid, Tanh): the baseline
// kernel against the fp64 reference at encoder and vision MLP widths (BERT/ViT 3072, XLM-R-large
// 4096, SigLIP-so400m 4304, Qwen2-VL vision 5120) and an odd f32 width, every dtype, strided input
// rows (fc1's output viewed as a column slice), 1 to 4096 tokens; and the task harness.
#include "fk/kernels/reference/activation_ref.cuh"
#include "fk/tasks/activation.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::kernels::Act;

template <class T, int kH, Act kAct> void check_activation(int64_t tokens, int64_t x_stride = kH) {
  Tensor xs = empty({tokens, x_stride}, dtype_of<T>);
  fill_normal(xs, 51, 0.f, 3.f);
  Tensor out = empty({tokens, kH}, dtype_of<T>);
  poison(out);
  fk::kernels::activation<T, kH, kAct>(out.data<T>(), xs.data<T>(), x_stride, tokens, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({tokens, kH}, DType::kF32);
  fk::kernels::reference::activation_ref<T>(ref.data<float>(), xs.data<T>(), x_stride, tokens, kH, kAct, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

#define FK_ACT_TESTS(NAME, ACT)                                                                                      \
  TEST(Kernels, Activation_##NAME##_bf16_h3072_t1) { FK_REQUIRE_GPU(); check_activation<bf16, 3072, ACT>(1); }        \
  TEST(Kernels, Activation_##NAME##_bf16_h3072_t4096) { FK_REQUIRE_GPU(); check_activation<bf16, 3072, ACT>(4096); }  \
  TEST(Kernels, Activation_##NAME##_bf16_h4304_t197_strided) {                                                         \
    FK_REQUIRE_GPU();                                                                                                  \
    check_activation<bf16, 4304, ACT>(197, 4304 + 64);                                                                 \
  }                                                                                                                    \
  TEST(Kernels, Activation_##NAME##_f16_h5120_t33) { FK_REQUIRE_GPU(); check_activation<f16, 5120, ACT>(33); }         \
  TEST(Kernels, Activation_##NAME##_f32_h1000_t7) { FK_REQUIRE_GPU(); check_activation<float, 1000, ACT>(7); }

FK_ACT_TESTS(Gelu, Act::kGelu)
FK_ACT_TESTS(GeluTanh, Act::kGeluTanh)
FK_ACT_TESTS(QuickGelu, Act::kQuickGelu)
FK_ACT_TESTS(Relu, Act::kRelu)
FK_ACT_TESTS(Silu, Act::kSilu)
FK_ACT_TESTS(Sigmoid, Act::kSigmoid)
FK_ACT_TESTS(Tanh, Act::kTanh)
FK_ACT_TESTS(Relu2, Act::kRelu2)

// The reference itself, at points where the value is known in closed form.
TEST(Kernels, ActivationReferenceKnownValues) {
  FK_REQUIRE_GPU();
  const std::vector<float> xs = {0.f, 1.f, -1.f, 2.f};
  Tensor x = to_device(xs, {1, 4});
  Tensor out = empty({1, 4}, DType::kF32);
  auto run = [&](Act a) {
    fk::kernels::reference::activation_ref<float>(out.data<float>(), x.data<float>(), 4, 1, 4, a, current_stream());
    FK_CHECK_LAUNCH();
    return to_host<float>(out);
  };
  std::vector<float> o = run(Act::kGelu);  // x * Phi(x): Phi(1) = 0.8413447
  EXPECT_NEAR(o[0], 0.f, 1e-7);
  EXPECT_NEAR(o[1], 0.8413447f, 1e-6);
  EXPECT_NEAR(o[2], -0.1586553f, 1e-6);
  o = run(Act::kRelu);
  EXPECT_EQ(o[2], 0.f);
  EXPECT_EQ(o[3], 2.f);
  o = run(Act::kSigmoid);
  EXPECT_NEAR(o[0], 0.5f, 1e-7);
  EXPECT_NEAR(o[1], 0.7310586f, 1e-6);
  o = run(Act::kTanh);
  EXPECT_NEAR(o[1], 0.7615942f, 1e-6);
  o = run(Act::kQuickGelu);  // x * sigmoid(1.702 x)
  EXPECT_NEAR(o[1], 1.f / (1.f + std::exp(-1.702f)), 1e-6);
  o = run(Act::kSilu);
  EXPECT_NEAR(o[3], 2.f / (1.f + std::exp(-2.f)), 1e-6);
  o = run(Act::kGeluTanh);
  EXPECT_NEAR(o[1], 0.8411920f, 1e-6);
}

struct GeluCfg {
  static constexpr int64_t hidden_size = 3072;
  static constexpr Act activation = Act::kGelu;
  using scalar_t = bf16;
};
class TestGelu {  // shaped like templates/activation.h.mustache
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::activation_forward<GeluCfg>(x); }
};
struct QuickCfg {
  static constexpr int64_t hidden_size = 4304;
  static constexpr Act activation = Act::kQuickGelu;
  using scalar_t = f16;
};
class TestQuick {
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::activation_forward<QuickCfg>(x); }
};

TEST(Tasks, Activation_Gelu_bf16_h3072_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::ActivationInstance<TestGelu, GeluCfg> inst(tokens_case(7));
  check_task_instance(inst);
}
TEST(Tasks, Activation_Gelu_bf16_h3072_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::ActivationInstance<TestGelu, GeluCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}
TEST(Tasks, Activation_QuickGelu_f16_h4304_t256) {
  FK_REQUIRE_GPU();
  fk::tasks::ActivationInstance<TestQuick, QuickCfg> inst(tokens_case(256));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
