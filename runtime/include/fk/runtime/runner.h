// The benchmark runner: selects tasks and cases, checks each against its reference, times it,
// and writes JSON lines + a markdown table + a closing `N passed, N failed` line.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "fk/runtime/task.h"
#include "fk/runtime/timing.h"

namespace fk {

struct RunnerOptions {
  std::string arch_regex;    ///< matched against each task's archs (any)
  std::string task_regex;    ///< matched against the task name
  std::string case_regex;    ///< matched against the case name
  std::string regime;        ///< "", "decode" or "prefill"
  int level = 0;             ///< 0 = all
  int rounds = 3;            ///< correctness rounds, fresh inputs each
  uint64_t seed = 20261122;  ///< fk_bench draws a new one per run unless --seed (Note [Off-registry shapes])
  int off_registry = 1;      ///< off-registry cases per task and regime (Note [Off-registry shapes]); 0 = none
  int smallest = 0;          ///< > 0: only each task's N smallest selected registry cases (product of dims)
  int64_t max_length = 0;    ///< > 0: lengths of the selected cases capped here (Note [Capped cases])
  bool time = true;          ///< false: check only
  bool graph = false;        ///< also time CUDA-graph replays for launch-bound cases
  bool cupti = false;        ///< CUPTI cross-check of the GPU work of checked and timed calls (Note [CUPTI cross-check])
  double graph_below_us = 50; ///< ... whose median is below this
  std::string jsonl_path;    ///< results as JSON lines ("" = none)
  std::string markdown_path; ///< markdown table ("" = none)
  std::string command;       ///< the command line, recorded in the environment block
  bool stream_check = true;  ///< one gated call per case (Note [Stream gate] in runner.cc)
  double case_timeout_s = 0; ///< > 0: watchdog per case (Note [Case watchdog]); 0 = none
  bool resume = false;       ///< append to an existing jsonl_path, skipping the cases it holds
  std::string candidate_tasks; ///< comma-separated tasks replaced by candidates in this build
  TimingOptions timing;
  /// A job of several ranks (fk_bench --world-size; Note [Lockstep ranks] in runner.cc): this rank, the
  /// world, and every rank's value of a string in rank order (one round through the job's store; every
  /// rank must call it the same number of times). Unset: a single process.
  int rank = 0, world_size = 1;
  std::function<std::vector<std::string>(const std::string&)> all_ranks;
};

/// Exit codes of fk_bench (documented in --help). kExitTimeout and kExitContextLost end the
/// process after writing the case's record; rerun with --resume to continue after it.
enum ExitCode : int { kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitNoGpu = 3, kExitTimeout = 4, kExitContextLost = 5 };

// Statuses and reasons of a case record (docs/candidates.md):
//   PASSED
//   INCORRECT      mismatch | nonfinite | stale-output (passed, then failed on fresh inputs in the
//                  same buffers, or after timing) | input-mutated | oob-write (guard bytes changed)
//                  | degenerate-output (constant, or an input echoed, where the reference is not)
//                  | wrong-shape (an output undefined, strided, or of another shape than its reference)
//                  | timed-output (a timed call's output or inputs failed the check made after it:
//                  Note [Timed calls are checked])
//   SUSPECT        foreign-stream (memory changed while the task's stream was held back) |
//                  beyond-hardware-limit (faster than DRAM bandwidth / tensor peak allow) |
//                  persisting-l2 (the task left a persisting-L2 set-aside: Note [Persisting L2]) |
//                  kernel-set, event-time (with --cupti: Note [CUPTI cross-check])
//   RUNTIME_ERROR  error (a CUDA error or exception in task code) | context-lost (sticky CUDA error)
//   INFRA_ERROR    infra (the runner, a reference or a peer failed, not the task: never a result)
//   TIMEOUT        timeout (--case-timeout)
//   SKIPPED        the case does not fit here

struct Selection {
  const TaskInfo* task;
  const ShapeCase* shape;
  std::shared_ptr<const ShapeCase> owned;  ///< an off-registry case (shape points here)
  bool off_registry = false;
};

/// Tasks × cases that match the filters, in registry order (by task name, then case order),
/// each task's selected cases followed by its off-registry cases (Note [Off-registry shapes]).
std::vector<Selection> select_cases(const RunnerOptions& opt);

/// The off-registry cases of one task for its selected registry cases `selected`, drawn from
/// `seed` (`per_regime` per regime); `note` says why a task gets none (dims the rule does not know).
std::vector<ShapeCase> off_registry_cases(const TaskInfo& task, const std::vector<const ShapeCase*>& selected,
                                          uint64_t seed, int per_regime, std::string* note = nullptr);

/// `c` with its lengths (num_tokens, seq_len, kv_len) capped at `max_length` and named
/// `<name>_cap<N>`; nullopt when every length is within it (Note [Capped cases] in runner.cc).
std::optional<ShapeCase> capped_case(const ShapeCase& c, int64_t max_length);

/// True when the process runs under compute-sanitizer (its injection library is loaded).
bool under_compute_sanitizer();

/// Outcome of checking one case: status PASSED, INCORRECT, SUSPECT, RUNTIME_ERROR, INFRA_ERROR or SKIPPED.
struct CheckOutcome {
  std::string status;
  std::string message;
  std::string reason;  ///< see "Statuses and reasons" below
};

/// Runs the correctness protocol of Note [Task protocol] for one case on the current stream.
CheckOutcome check_task_case(const TaskInfo& task, const ShapeCase& shape, int rounds, uint64_t seed);

/// The same protocol on an instance that is already made (e.g. a harness built by a test).
CheckOutcome check_instance(TaskInstance& inst, int rounds, uint64_t seed);

/// The same checks, then timed calls as fk_bench times them, checked as fk_bench checks them
/// (Note [Timed calls are checked] in runner.cc); for tests of the protocol.
CheckOutcome check_and_time_instance(TaskInstance& inst, int rounds, uint64_t seed, const TimingOptions& timing);

/// Checks and times every selected case; returns an ExitCode.
int run_benchmark(const RunnerOptions& opt, std::ostream& log);

}  // namespace fk
