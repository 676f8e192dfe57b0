// Helpers for the memory-bound kernel tests (rms_norm, qk_norm, rotary_embedding, silu_and_mul,
// vocab_parallel_embedding, store_kvcache): dtype aliases for test names and the Note [Task
// protocol] sequence run against a harness instance.
#pragma once

#include <string>
#include <vector>

#include "fk/runtime/task.h"
#include "gpu_test_util.h"

namespace fk::testing {

// Aliases so that a dtype token in a test name is also the C++ type.
using bf16 = ::fk::bf16;
using f16 = ::fk::f16;
using f32 = float;

/// Runs the checking half of Note [Task protocol] on sets 0 and num_sets()-1 of `inst`:
/// randomize, prepare, fingerprint inputs, run, compare with reference, inputs unchanged.
inline void check_task_instance(TaskInstance& inst, uint64_t seed = 1234) {
  set_poison_allocations(true);
  inst.randomize(seed);
  ASSERT_GE(inst.num_sets(), 1);
  std::vector<int> sets = {0};
  if (inst.num_sets() > 1) sets.push_back(inst.num_sets() - 1);
  for (int s : sets) {
    inst.prepare(s);
    std::vector<uint64_t> before;
    for (const Tensor& t : inst.inputs(s)) before.push_back(fingerprint(t));
    inst.run(s);
    for (const CheckedOutput& o : inst.reference(s)) {
      const CompareResult r = compare(o.actual, o.expected, o.tol);
      EXPECT_TRUE(r.passed) << "set " << s << ", output " << o.name << ": " << r.summary();
    }
    std::vector<Tensor> ins = inst.inputs(s);
    for (size_t i = 0; i < ins.size(); ++i)
      EXPECT_EQ(before[i], fingerprint(ins[i])) << "set " << s << ": input " << i << " (" << ins[i].str() << ") was modified";
  }
  set_poison_allocations(false);
  const Cost c = inst.cost();
  EXPECT_GT(c.bytes, 0);
}

inline ShapeCase tokens_case(int64_t t) { return {"t" + std::to_string(t), t <= 256 ? "decode" : "prefill", {{"num_tokens", t}}}; }

}  // namespace fk::testing
