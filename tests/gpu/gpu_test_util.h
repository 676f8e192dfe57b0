// Shared testbed for GPU tests: skip cleanly without a GPU; helpers to compare with references.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "fk/runtime/check.h"
#include "fk/runtime/random.h"
#include "fk/runtime/tensor.h"

namespace fk::testing {

/// True when a CUDA device is usable (cached).
inline bool have_gpu() {
  static const bool ok = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return ok;
}

}  // namespace fk::testing

/// First statement of every GPU test.
#define FK_REQUIRE_GPU()                                              \
  do {                                                                \
    if (!::fk::testing::have_gpu()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

/// Asserts that `actual` matches the fp32 `expected` within `tol` (prints the comparison).
#define FK_EXPECT_CLOSE(actual, expected, tol)                                   \
  do {                                                                           \
    const ::fk::CompareResult fk_cmp_ = ::fk::compare((actual), (expected), (tol)); \
    EXPECT_TRUE(fk_cmp_.passed) << fk_cmp_.summary();                            \
  } while (0)
