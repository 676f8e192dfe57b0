// silu_and_mul: baseline kernel vs the fp64 reference, and the harness.
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
  fk::kernels::reference::silu_and_mul_ref<T>(ref.data<float>(), x.data<T>(), 2 * kI, tokens, kI, current_stream(),
                                              kAct == fk::kernels::GatedAct::kGeluTanh);
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

}  // namespace
}  // namespace fk::testing
