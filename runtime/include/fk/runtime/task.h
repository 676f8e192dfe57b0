// The task interface every generated task implements, and the registry the runner reads.
//
// Note [Task protocol]
// A task (one generated source) registers a TaskInfo: identity, level, production counterpart,
// the architectures that use it, and its input registry (ShapeCase list). For one case the
// runner asks `make` for a TaskInstance: the production-mirroring module with its weights and
// `num_sets()` rotating input sets already allocated. The runner then
//   checks:  randomize(seed of the round); for each set: prepare(set) (restores in-place inputs,
//            poisons preallocated outputs), fingerprint inputs(set), run(set), compare with
//            reference(set), fingerprint inputs(set) again;
//   times:   run(set) with sets rotating; before every timed call (outside the timed events)
//            refresh(set, fresh seed) gives the set new inputs and the L2 is flushed; the last
//            timed output of every set, and one timed call chosen at random, are compared with
//            the reference afterwards (Note [Timed calls are checked] in runner.cc).
// Allocations made while checking are poisoned, so an output that `forward` allocates and a
// kernel leaves unwritten reads as NaN and fails.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fk/runtime/model.h"
#include "fk/runtime/tensor.h"

namespace fk {

/// One entry of a task's input registry (decode or prefill), e.g. {"t256", "decode", {{"num_tokens", 256}}}.
struct ShapeCase {
  std::string name;
  std::string regime;  ///< "decode" or "prefill"
  std::vector<std::pair<std::string, int64_t>> dims;

  /// Value of a dimension; throws naming the case when it is missing.
  int64_t get(const std::string& key) const;
  bool has(const std::string& key) const;
};

/// |actual - expected| <= atol + rtol * |expected| elementwise, and
/// ||actual - expected||_2 / ||expected||_2 <= max_rel_l2; NaN/Inf never pass.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  double max_rel_l2 = 0;
};
/// Per-dtype defaults for elementwise outputs (bf16: rtol 1.6e-2, ...).
Tolerance default_tolerance(DType d);

/// An output to compare: `actual` in the task's dtype, `expected` in fp32 from the reference.
struct CheckedOutput {
  std::string name;
  Tensor actual;
  Tensor expected;
  Tolerance tol;
};

/// FLOPs and the fewest bytes the task must move (each input read once, each output written once).
struct Cost {
  double flops = 0;
  double bytes = 0;
};

/// Thrown by TaskInfo::make when a case cannot run here (e.g. does not fit in memory).
class SkipCase : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One shape case of one task, materialised on the GPU (see Note [Task protocol]).
class TaskInstance {
 public:
  virtual ~TaskInstance() = default;
  virtual int num_sets() const = 0;
  /// Fresh random weights and inputs for every set.
  virtual void randomize(uint64_t seed) = 0;
  /// Fresh random activations for `set` alone (new token ids, hidden states, q/k/v, routing...),
  /// restoring the pristine copies of in-place inputs; weights, state shared by the sets and the
  /// other sets stay as they are, so the other sets' last outputs remain checkable. The runner
  /// calls it before every timed call, outside the timed events (Note [Timed calls are checked]).
  virtual void refresh(int set, uint64_t seed) = 0;
  /// False when the sets share state that a call writes (an in-place KV cache): then only the
  /// set of the last call has a checkable output after a run of calls.
  virtual bool sets_independent() const { return true; }
  /// Before a checked run: restore in-place inputs, poison preallocated outputs.
  virtual void prepare(int set) { (void)set; }
  /// The module call under test, on fk::current_stream().
  virtual void run(int set) = 0;
  /// Read-only inputs (weights included) that run(set) must leave unmodified.
  virtual std::vector<Tensor> inputs(int set) = 0;
  /// Computes the fp32 reference for `set` and pairs it with the outputs of the last run(set).
  virtual std::vector<CheckedOutput> reference(int set) = 0;
  virtual Cost cost() const = 0;
  /// Optional production-library peer timed beside the task in the same run (e.g. "cublas").
  virtual std::string peer_name() const { return ""; }
  virtual void run_peer(int set) { (void)set; }
};

/// Static description of a task; what a generated source registers.
struct TaskInfo {
  std::string name;        ///< spells every inlined constant, e.g. rms_norm_h4096_eps1e-05_bf16
  int level = 1;           ///< 1..4
  std::string kind;        ///< template/task kind, e.g. rms_norm
  std::string production;  ///< mirrored module, e.g. vllm.model_executor.layers.layernorm.RMSNorm
  std::string source;      ///< generated source path, repository-relative
  std::vector<std::string> archs;  ///< config ids (org/model) that use the task
  std::vector<ShapeCase> cases;
  bool memory_bound = true;  ///< report % of copy bandwidth (true) or % of matrix peak (false)
  std::function<std::unique_ptr<TaskInstance>(const ShapeCase&)> make;
  /// L4 tasks only: the whole model with `num_layers` decoder layers (fk_model, parity).
  std::function<std::unique_ptr<CausalLM>(int64_t num_layers)> make_model = nullptr;
  /// L4 encoder tasks only: the whole encoder with `num_layers` layers (fk_model --embed, parity).
  std::function<std::unique_ptr<EncoderModel>(int64_t num_layers)> make_encoder = nullptr;
  /// L4 image-encoder tasks only: the whole vision encoder with `num_layers` layers (fk_model, parity).
  std::function<std::unique_ptr<ImageEncoderModel>(int64_t num_layers)> make_image_encoder = nullptr;
  /// L4 vision-tower tasks only (dynamic resolution): the whole tower with `num_layers` blocks (fk_model, parity).
  std::function<std::unique_ptr<VisionTowerModel>(int64_t num_layers)> make_vision_tower = nullptr;
  /// The tensor-parallel size a task communicates at (Note [Parallel layouts] in
  /// generator/include/fk/gen/config.h): a row-parallel linear, a vocabulary-parallel embedding and
  /// every composite above one in a tpN layout; 1: not sharded, or a local computation (a
  /// column-parallel linear's per-rank shape is an ordinary task). fk_bench --world-size N runs the
  /// tasks of size N; whole-model runners tell sharded models by it. Every sharded task also says so
  /// itself when it is made (fk::tasks::require_layout).
  int tp_size = 1;
};

/// Adds a task; a second task with the same name is a hard error (names are identities).
bool register_task(TaskInfo info);
/// All registered tasks, sorted by name.
std::vector<const TaskInfo*> all_tasks();

// The allocator's checking modes (poisoned and guarded allocations) are not part of this header:
// nothing a task can include says whether a call is being checked (Note [Watched and unwatched
// calls] in runner.cc). The runner's private header is runtime/src/checking_modes.h.

}  // namespace fk

#define FK_TASK_CONCAT_(a, b) a##b
#define FK_TASK_CONCAT(a, b) FK_TASK_CONCAT_(a, b)
/// Registers a TaskInfo at static-initialisation time (generated sources are linked as objects).
#define FK_REGISTER_TASK(info_expr) \
  static const bool FK_TASK_CONCAT(fk_task_registered_, __LINE__) = ::fk::register_task(info_expr)
