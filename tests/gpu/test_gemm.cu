// GEMM for the linear kinds: the GEMV (small M), the cuBLASLt path and the cuBLAS peer against
// the fp32 reference GEMM, and the linear harness (dispatch included) through the task protocol.
#include <cmath>

#include "fk/kernels/gemm.h"
#include "fk/kernels/gemv.cuh"
#include "fk/kernels/reference/gemm_ref.cuh"
#include "fk/tasks/linear.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

enum class Path { kGemv, kCublasLt, kCublasDefault };

template <class T, int kK, int kW = 4, int kU = 4, int kMode = 0, int kL2 = 0>
void check_gemm(Path path, int64_t m, int64_t n, bool with_bias) {
  Tensor x = empty({m, kK}, dtype_of<T>);
  Tensor w = empty({n, kK}, dtype_of<T>);
  Tensor bias = with_bias ? empty({n}, dtype_of<T>) : Tensor();
  fill_normal(x, 11);
  fill_normal(w, 12, 0.f, static_cast<float>(1.0 / std::sqrt(double(kK))));
  if (with_bias) fill_normal(bias, 13);
  Tensor y = empty({m, n}, dtype_of<T>);
  poison(y);
  const T* b = with_bias ? bias.data<T>() : nullptr;
  const auto dt = std::is_same_v<T, bf16> ? fk::kernels::GemmDType::kBF16 : fk::kernels::GemmDType::kF16;
  switch (path) {
    case Path::kGemv:
      ASSERT_TRUE(fk::kernels::gemv_supported(m, n, x.data_ptr(), kK, w.data_ptr()));
      fk::kernels::gemv<kK, T, kW, kU, kMode, kL2>(y.data<T>(), n, x.data<T>(), kK, w.data<T>(), b, m, n, current_stream());
      FK_CHECK_LAUNCH();
      break;
    case Path::kCublasLt:
      fk::kernels::gemm_cublaslt(y.data_ptr(), n, x.data_ptr(), kK, w.data_ptr(), b, m, n, kK, dt, current_stream());
      break;
    case Path::kCublasDefault:
      fk::kernels::gemm_cublas_default(y.data_ptr(), n, x.data_ptr(), kK, w.data_ptr(), b, m, n, kK, dt, current_stream());
      break;
  }
  Tensor ref = empty({m, n}, DType::kF32);
  fk::kernels::reference::gemm_ref<T>(ref.data<float>(), n, x.data<T>(), kK, w.data<T>(), kK, b, m, n, kK, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(y, ref, fk::tasks::matmul_tolerance(dtype_of<T>, with_bias ? 1.1 : 0.8));
}

// GEMV (tensor-core GEMV, M <= 16): every M regime (one n8 tile, two, partial tiles).
TEST(Kernels, Gemv_bf16_m1_n6144_k4096) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kGemv, 1, 6144, false); }
TEST(Kernels, Gemv_bf16_m3_n4096_k4096_bias) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kGemv, 3, 4096, true); }
TEST(Kernels, Gemv_bf16_m8_n28672_k4096) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kGemv, 8, 28672, false); }
TEST(Kernels, Gemv_bf16_m13_n4096_k14336) { FK_REQUIRE_GPU(); check_gemm<bf16, 14336>(Path::kGemv, 13, 4096, false); }
TEST(Kernels, Gemv_bf16_m16_n4096_k14336) { FK_REQUIRE_GPU(); check_gemm<bf16, 14336>(Path::kGemv, 16, 4096, false); }
TEST(Kernels, Gemv_bf16_m1_n512_k3584_bias) { FK_REQUIRE_GPU(); check_gemm<bf16, 3584>(Path::kGemv, 1, 512, true); }
TEST(Kernels, Gemv_bf16_m2_n1024_k11008) { FK_REQUIRE_GPU(); check_gemm<bf16, 11008>(Path::kGemv, 2, 1024, false); }
TEST(Kernels, Gemv_f16_m4_n2048_k4096) { FK_REQUIRE_GPU(); check_gemm<f16, 4096>(Path::kGemv, 4, 2048, false); }

// GEMV layout variants (warps x unroll, k-split mode, L2 prefetch), as timed by bench/micro.
TEST(Kernels, GemvVariants_bf16_m1_n6144_k4096) {
  FK_REQUIRE_GPU();
  check_gemm<bf16, 4096, 8, 2, 0, 0>(Path::kGemv, 1, 6144, true);
  check_gemm<bf16, 4096, 4, 4, 1, 0>(Path::kGemv, 1, 6144, true);
  check_gemm<bf16, 4096, 8, 2, 1, 2>(Path::kGemv, 1, 6144, true);
  check_gemm<bf16, 4096, 4, 4, 0, 2>(Path::kGemv, 1, 6144, true);
  check_gemm<bf16, 4096, 8, 4, 1, 2>(Path::kGemv, 1, 6144, true);
  check_gemm<bf16, 4096, 4, 8, 1, 0>(Path::kGemv, 1, 6144, true);
}
TEST(Kernels, GemvVariants_bf16_m13_n4096_k14336) {
  FK_REQUIRE_GPU();
  check_gemm<bf16, 14336, 8, 2, 0, 0>(Path::kGemv, 13, 4096, false);
  check_gemm<bf16, 14336, 4, 4, 1, 0>(Path::kGemv, 13, 4096, false);
  check_gemm<bf16, 14336, 8, 2, 1, 2>(Path::kGemv, 13, 4096, false);
  check_gemm<bf16, 14336, 4, 4, 0, 2>(Path::kGemv, 13, 4096, false);
  check_gemm<bf16, 14336, 8, 4, 1, 2>(Path::kGemv, 13, 4096, false);
  check_gemm<bf16, 14336, 4, 8, 1, 0>(Path::kGemv, 13, 4096, false);
}
TEST(Kernels, GemvVariants_bf16_m2_n1024_k11008) {
  FK_REQUIRE_GPU();
  check_gemm<bf16, 11008, 4, 4, 1, 2>(Path::kGemv, 2, 1024, false);
  check_gemm<bf16, 11008, 8, 2, 1, 2>(Path::kGemv, 2, 1024, false);
  check_gemm<bf16, 11008, 4, 8, 1, 0>(Path::kGemv, 2, 1024, false);
}

// cuBLASLt with cached plans (decode and prefill M; bias epilogue).
TEST(Kernels, Gemm_bf16_m1_n6144_k4096) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kCublasLt, 1, 6144, false); }
TEST(Kernels, Gemm_bf16_m16_n6144_k4096_bias) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kCublasLt, 16, 6144, true); }
TEST(Kernels, Gemm_bf16_m256_n28672_k4096) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kCublasLt, 256, 28672, false); }
TEST(Kernels, Gemm_bf16_m1000_n4096_k14336) { FK_REQUIRE_GPU(); check_gemm<bf16, 14336>(Path::kCublasLt, 1000, 4096, false); }
TEST(Kernels, Gemm_bf16_m4096_n6144_k4096_bias) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kCublasLt, 4096, 6144, true); }
TEST(Kernels, Gemm_f16_m64_n4096_k4096) { FK_REQUIRE_GPU(); check_gemm<f16, 4096>(Path::kCublasLt, 64, 4096, false); }
// The peer.
TEST(Kernels, GemmCublasDefault_bf16_m1_n6144_k4096) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kCublasDefault, 1, 6144, false); }
TEST(Kernels, GemmCublasDefault_bf16_m512_n4096_k4096_bias) { FK_REQUIRE_GPU(); check_gemm<bf16, 4096>(Path::kCublasDefault, 512, 4096, true); }

// The harness and the dispatch, shaped like templates/linear.cu.mustache.
struct QkvCfg {  // Qwen2-7B-like qkv_proj with bias
  static constexpr int64_t in_features = 3584;
  static constexpr int64_t out_features = (28 + 2 * 4) * 128;
  static constexpr bool has_bias = true;
  static constexpr bool returns_bias = true;
  using scalar_t = bf16;
};
struct LmHeadCfg {
  static constexpr int64_t in_features = 4096;
  static constexpr int64_t out_features = 32000;
  static constexpr bool has_bias = false;
  static constexpr bool returns_bias = false;
  using scalar_t = bf16;
};
template <class Config> class TestLinear {
 public:
  explicit TestLinear(fk::tasks::FromConfig)
      : weight(empty({Config::out_features, Config::in_features}, dtype_of<bf16>)),
        bias(Config::has_bias ? empty({Config::out_features}, dtype_of<bf16>) : Tensor()) {}
  auto forward(const Tensor& input) {
    Tensor output = fk::tasks::linear_forward<Config>(input, weight, bias);
    if constexpr (Config::returns_bias) {
      return std::make_tuple(output, Tensor());
    } else {
      return output;
    }
  }
  Tensor weight, bias;
};

TEST(Tasks, Linear_qkv_bf16_k3584_n4608_bias_t1) {
  FK_REQUIRE_GPU();
  fk::tasks::LinearInstance<TestLinear<QkvCfg>, QkvCfg> inst(tokens_case(1));
  check_task_instance(inst);
}
TEST(Tasks, Linear_qkv_bf16_k3584_n4608_bias_t8) {
  FK_REQUIRE_GPU();
  fk::tasks::LinearInstance<TestLinear<QkvCfg>, QkvCfg> inst(tokens_case(8));
  check_task_instance(inst);
}
TEST(Tasks, Linear_qkv_bf16_k3584_n4608_bias_t1024) {
  FK_REQUIRE_GPU();
  fk::tasks::LinearInstance<TestLinear<QkvCfg>, QkvCfg> inst(tokens_case(1024));
  check_task_instance(inst);
}
TEST(Tasks, Linear_lm_head_bf16_k4096_n32000_t1) {
  FK_REQUIRE_GPU();
  fk::tasks::LinearInstance<TestLinear<LmHeadCfg>, LmHeadCfg> inst(tokens_case(1));
  check_task_instance(inst);
}
TEST(Tasks, Linear_lm_head_bf16_k4096_n32000_t256) {
  FK_REQUIRE_GPU();
  fk::tasks::LinearInstance<TestLinear<LmHeadCfg>, LmHeadCfg> inst(tokens_case(256));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
