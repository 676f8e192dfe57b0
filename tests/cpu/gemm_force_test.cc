// FK_GEMM_FORCE's reading of a dispatch key (Note [Forced GEMM dispatch] in fk/kernels/gemm.h): which option of a
// measured choice each forced value picks, and the error for a value it does not know.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "fk/kernels/gemm.h"

namespace {

using fk::kernels::forced_choice;

TEST(ForcedGemmDispatch, EachValuePicksThePathItNames) {
  const std::string gemv_or_library = "linear_bf16_k4096_n28672_nobias_m1 gemv|library";
  const std::string lt_or_blas = "linear_bf16_k4096_n28672_nobias_m1 cublaslt|cublas";
  EXPECT_TRUE(forced_choice(gemv_or_library, "gemv"));
  EXPECT_FALSE(forced_choice(gemv_or_library, "cublaslt"));
  EXPECT_FALSE(forced_choice(gemv_or_library, "cublas"));
  EXPECT_TRUE(forced_choice(lt_or_blas, "cublaslt"));
  EXPECT_FALSE(forced_choice(lt_or_blas, "cublas"));
  EXPECT_TRUE(forced_choice(lt_or_blas, "gemv"));  // names neither: the first option
  EXPECT_TRUE(forced_choice("a key without options", "cublas"));
}

TEST(ForcedGemmDispatch, UnknownValueIsAnErrorNamingTheVariable) {
  try {
    forced_choice("x gemv|library", "cuBLAS");
    FAIL() << "no error for an unknown value";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FK_GEMM_FORCE='cuBLAS'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gemv, cublaslt or cublas"), std::string::npos) << e.what();
  }
}

}  // namespace
