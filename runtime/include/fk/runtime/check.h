// Comparing an output with its fp32 reference (see Tolerance in task.h).
#pragma once

#include <string>

#include "fk/runtime/task.h"

namespace fk {

struct CompareResult {
  bool passed = false;
  int64_t numel = 0;
  int64_t mismatches = 0;  ///< elements outside atol + rtol*|expected|
  int64_t nonfinite = 0;   ///< NaN/Inf in actual (never pass)
  double max_abs_err = 0;
  double rel_l2 = 0;        ///< ||a - e|| / ||e||
  int64_t first_bad = -1;   ///< flat index of the first failing element
  std::string summary() const;
};

/// Compares on the device; `actual` may be bf16/f16/f32/i32/i64, `expected` f32 (or the same
/// integer dtype), same shape. Synchronises the current stream.
CompareResult compare(const Tensor& actual, const Tensor& expected, const Tolerance& tol);

}  // namespace fk
