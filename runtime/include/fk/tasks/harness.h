// Helpers shared by the per-kind task harnesses (fk/tasks/<kind>.h). A harness implements
// fk::TaskInstance for one task kind, templated on the generated module class and its Config;
// generated sources only bind constants and instantiate it (see Note [Task protocol]).
#pragma once

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "fk/runtime/check.h"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/random.h"
#include "fk/runtime/task.h"
#include "fk/runtime/tensor.h"

namespace fk::tasks {

/// How many rotating input sets to allocate: enough that the sets together exceed the L2
/// several times over when they are small, never more than 8, at least 1, within a budget.
inline int rotating_sets(double bytes_per_set, double budget_bytes = 8.0 * (1ull << 30)) {
  int n = bytes_per_set < 32.0 * (1 << 20) ? 8 : (bytes_per_set < 512.0 * (1 << 20) ? 4 : 2);
  while (n > 1 && n * bytes_per_set > budget_bytes) --n;
  return n;
}

/// N(0, 1) fills of several tensors, tensor i from mix_seed(seed, i) (a set's q, k, v).
inline void fill_normal_each(std::initializer_list<std::reference_wrapper<Tensor>> ts, uint64_t seed) {
  uint64_t i = 0;
  for (Tensor& t : ts) fill_normal(t, mix_seed(seed, i++));
}

/// Throws SkipCase when `bytes` of new device memory would not fit (keeps 2 GiB spare).
void require_device_memory(double bytes, const std::string& what);

/// fp32 copy of a tensor (for references that need an fp32 view of a model-dtype tensor).
Tensor to_f32(const Tensor& t);

/// Elementwise tolerance for outputs that are sums over `k` products of bf16/f16 values:
/// atol scales with the typical magnitude of the output.
Tolerance matmul_tolerance(DType d, double typical_abs);

}  // namespace fk::tasks
