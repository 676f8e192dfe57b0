// silu_and_mul and swigluoai_and_mul: baseline kernels vs the fp64 references, and the harness.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fk/kernels/reference/silu_and_mul_ref.cuh"
#include "fk/kernels/silu_and_mul.cuh"
#include "fk/tasks/silu_and_mul.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kI, fk::kernels::GatedAct kAct = fk::kernels::GatedAct::kSilu>
void check_silu_and_mul(int64_t tokens) {
  Tensor x = empty({tokens, 2 * kI}, dtype_of<T>);
  fill_normal(x, 41, 0.f, 2.f);
  Tensor out = empty({tokens, kI}, dtype_of<T>);
  poison(out);
  fk::kernels::silu_and_mul<T, kI, kAct>(out.data<T>(), kI, x.data<T>(), 2 * kI, tokens, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({tokens, kI}, DType::kF32);
  fk::kernels::reference::silu_and_mul_ref<T>(ref.data<float>(), x.data<T>(), 2 * kI, tokens, kI, current_stream(), kAct);
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

#define FK_SILU_TESTS(D, I)                                                                                \
  TEST(Kernels, SiluAndMul_##D##_i##I##_t1) { FK_REQUIRE_GPU(); check_silu_and_mul<D, I>(1); }            \
  TEST(Kernels, SiluAndMul_##D##_i##I##_t7) { FK_REQUIRE_GPU(); check_silu_and_mul<D, I>(7); }            \
  TEST(Kernels, SiluAndMul_##D##_i##I##_t256) { FK_REQUIRE_GPU(); check_silu_and_mul<D, I>(256); }        \
  TEST(Kernels, SiluAndMul_##D##_i##I##_t4096) { FK_REQUIRE_GPU(); check_silu_and_mul<D, I>(4096); }

FK_SILU_TESTS(bf16, 14336)
FK_SILU_TESTS(bf16, 18944)
FK_SILU_TESTS(bf16, 12288)
FK_SILU_TESTS(f16, 14336)
FK_SILU_TESTS(f32, 1000)

// GeluAndMul(approximate="tanh") (kind gelu_tanh_and_mul): Gemma 3 1B's and Gemma 2 9B's sizes.
constexpr auto kGelu = fk::kernels::GatedAct::kGeluTanh;
TEST(Kernels, GeluTanhAndMul_bf16_i6912_t1) { FK_REQUIRE_GPU(); check_silu_and_mul<bf16, 6912, kGelu>(1); }
TEST(Kernels, GeluTanhAndMul_bf16_i6912_t4096) { FK_REQUIRE_GPU(); check_silu_and_mul<bf16, 6912, kGelu>(4096); }
TEST(Kernels, GeluTanhAndMul_bf16_i14336_t256) { FK_REQUIRE_GPU(); check_silu_and_mul<bf16, 14336, kGelu>(256); }
TEST(Kernels, GeluTanhAndMul_f32_i1000_t7) { FK_REQUIRE_GPU(); check_silu_and_mul<float, 1000, kGelu>(7); }

// GeluAndMul() (exact erf GELU; kind gelu_and_mul): BERT-style gated widths and a Llama width.
constexpr auto kGeluErf = fk::kernels::GatedAct::kGelu;
TEST(Kernels, GeluAndMul_bf16_i3072_t1) { FK_REQUIRE_GPU(); check_silu_and_mul<bf16, 3072, kGeluErf>(1); }
TEST(Kernels, GeluAndMul_bf16_i3072_t4096) { FK_REQUIRE_GPU(); check_silu_and_mul<bf16, 3072, kGeluErf>(4096); }
TEST(Kernels, GeluAndMul_f16_i14336_t256) { FK_REQUIRE_GPU(); check_silu_and_mul<f16, 14336, kGeluErf>(256); }
TEST(Kernels, GeluAndMul_f32_i1000_t7) { FK_REQUIRE_GPU(); check_silu_and_mul<float, 1000, kGeluErf>(7); }

// SwiGLU-OAI (gpt-oss experts, vLLM swigluoai_and_mul): interleaved gate/up, alpha 1.702,
// limit 7. Inputs ~N(0, std^2) with std 4 put ~8% of them beyond +-limit (std 10: ~48%), so both
// clamps bind. x_pad: extra elements per input row (x_stride = 2I + x_pad).
template <class T, int kI>
void check_swigluoai(int64_t tokens, float std = 4.f, int64_t x_pad = 0, float alpha = 1.702f, float limit = 7.f) {
  const int64_t x_stride = 2 * kI + x_pad;
  Tensor x = empty({tokens, x_stride}, dtype_of<T>);
  fill_normal(x, 43, 0.f, std);
  Tensor out = empty({tokens, kI}, dtype_of<T>);
  poison(out);
  fk::kernels::swigluoai_and_mul<T, kI>(out.data<T>(), kI, x.data<T>(), x_stride, tokens, alpha, limit, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({tokens, kI}, DType::kF32);
  fk::kernels::reference::swigluoai_and_mul_ref<T>(ref.data<float>(), x.data<T>(), x_stride, tokens, kI, alpha, limit,
                                                   current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

TEST(Kernels, SwigluOaiAndMul_bf16_i2880_t1) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 2880>(1); }
TEST(Kernels, SwigluOaiAndMul_bf16_i2880_t7) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 2880>(7); }
TEST(Kernels, SwigluOaiAndMul_bf16_i2880_t256) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 2880>(256); }
TEST(Kernels, SwigluOaiAndMul_bf16_i2880_t4096) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 2880>(4096); }
TEST(Kernels, SwigluOaiAndMul_bf16_i2880_t300_beyond_limit) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 2880>(300, 10.f); }
TEST(Kernels, SwigluOaiAndMul_bf16_i2880_t33_xpad) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 2880>(33, 4.f, 64); }
TEST(Kernels, SwigluOaiAndMul_bf16_i64_t5_alpha1_limit2) { FK_REQUIRE_GPU(); check_swigluoai<bf16, 64>(5, 4.f, 0, 1.f, 2.f); }
TEST(Kernels, SwigluOaiAndMul_f16_i2880_t64) { FK_REQUIRE_GPU(); check_swigluoai<f16, 2880>(64); }
TEST(Kernels, SwigluOaiAndMul_f32_i2880_t17) { FK_REQUIRE_GPU(); check_swigluoai<f32, 2880>(17, 10.f); }

// The clamps bind at the edges: gate = 8 -> 7, up = 8 -> 7, up = -8 -> -7; gate very negative
// (sigmoid -> 0, no NaN); exact expected values from the formula.
TEST(Kernels, SwigluOaiAndMul_f32_i4_t1_clamps) {
  FK_REQUIRE_GPU();
  // (gate, up) pairs
  const std::vector<float> xs = {8.f, 8.f, 8.f, -8.f, -100.f, 3.f, 0.5f, -0.25f};
  Tensor x = to_device(xs, {1, 8});
  Tensor out = empty({1, 4}, DType::kF32);
  fk::kernels::swigluoai_and_mul<float, 4>(out.data<float>(), 4, x.data<float>(), 8, 1, 1.702f, 7.f, current_stream());
  FK_CHECK_LAUNCH();
  const std::vector<float> o = to_host<float>(out);
  auto f = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::max(std::min(u, 7.0), -7.0);
    return (u + 1.0) * g / (1.0 + std::exp(-1.702 * g));
  };
  EXPECT_NEAR(o[0], f(8, 8), 1e-4 * 56);
  EXPECT_NEAR(o[1], f(8, -8), 1e-4 * 42);
  EXPECT_NEAR(o[2], f(-100, 3), 1e-6);
  EXPECT_NEAR(o[3], f(0.5, -0.25), 1e-5);
}

struct SiluCfg {
  static constexpr int64_t intermediate_size = 14336;
  using scalar_t = bf16;
};
class TestSiluAndMul {  // shaped like templates/silu_and_mul.cu.mustache
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::silu_and_mul_forward<SiluCfg>(x); }
};

TEST(Tasks, SiluAndMul_bf16_i14336_t32) {
  FK_REQUIRE_GPU();
  fk::tasks::SiluAndMulInstance<TestSiluAndMul, SiluCfg> inst(tokens_case(32));
  check_task_instance(inst);
}
TEST(Tasks, SiluAndMul_bf16_i14336_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::SiluAndMulInstance<TestSiluAndMul, SiluCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}
struct GeluCfg {
  static constexpr int64_t intermediate_size = 6912;
  static constexpr fk::kernels::GatedAct activation = fk::kernels::GatedAct::kGeluTanh;
  using scalar_t = bf16;
};
class TestGeluAndMul {
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::silu_and_mul_forward<GeluCfg>(x); }
};
TEST(Tasks, GeluTanhAndMul_bf16_i6912_t1024) {
  FK_REQUIRE_GPU();
  fk::tasks::SiluAndMulInstance<TestGeluAndMul, GeluCfg> inst(tokens_case(1024));
  check_task_instance(inst);
}
struct GeluErfCfg {
  static constexpr int64_t intermediate_size = 3072;
  static constexpr fk::kernels::GatedAct activation = fk::kernels::GatedAct::kGelu;
  using scalar_t = bf16;
};
class TestGeluErfAndMul {
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::silu_and_mul_forward<GeluErfCfg>(x); }
};
TEST(Tasks, GeluAndMul_bf16_i3072_t512) {
  FK_REQUIRE_GPU();
  fk::tasks::SiluAndMulInstance<TestGeluErfAndMul, GeluErfCfg> inst(tokens_case(512));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
