// Helpers for the memory-bound kernel tests (rms_norm, qk_norm, rotary_embedding, silu_and_mul,
// vocab_parallel_embedding, store_kvcache): dtype aliases for test names and the Note [Task
// protocol] sequence run against a harness instance.
#pragma once

#include <string>
#include <vector>

#include "fk/runtime/runner.h"
#include "fk/runtime/task.h"
#include "gpu_test_util.h"

namespace fk::testing {

// Aliases so that a dtype token in a test name is also the C++ type.
using bf16 = ::fk::bf16;
using f16 = ::fk::f16;
using f32 = float;

/// Runs the runner's correctness protocol (Note [Task protocol]: fresh inputs, poisoned
/// allocations, every set compared with the reference, inputs fingerprinted) on `inst`.
inline void check_task_instance(TaskInstance& inst, uint64_t seed = 1234) {
  ASSERT_GE(inst.num_sets(), 1);
  const CheckOutcome o = check_instance(inst, /*rounds=*/1, seed);
  EXPECT_EQ(o.status, "PASSED") << o.message;
  EXPECT_GT(inst.cost().bytes, 0);
}

inline ShapeCase tokens_case(int64_t t) { return {"t" + std::to_string(t), t <= 256 ? "decode" : "prefill", {{"num_tokens", t}}}; }

}  // namespace fk::testing
