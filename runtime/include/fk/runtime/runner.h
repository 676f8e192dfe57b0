// The benchmark runner: selects tasks and cases, checks each against its reference, times it,
// and writes JSON lines + a markdown table + a closing `N passed, N failed` line.
#pragma once

#include <cstdint>
#include <iosfwd>
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
  uint64_t seed = 20261122;
  bool time = true;          ///< false: check only
  bool graph = false;        ///< also time CUDA-graph replays for launch-bound cases
  double graph_below_us = 50; ///< ... whose median is below this
  std::string jsonl_path;    ///< results as JSON lines ("" = none)
  std::string markdown_path; ///< markdown table ("" = none)
  std::string command;       ///< the command line, recorded in the environment block
  bool stream_check = true;  ///< one gated call per case (Note [Stream gate] in runner.cc)
  double case_timeout_s = 0; ///< > 0: watchdog per case (Note [Case watchdog]); 0 = none
  bool resume = false;       ///< append to an existing jsonl_path, skipping the cases it holds
  std::string candidate_tasks; ///< comma-separated tasks replaced by candidates in this build
  TimingOptions timing;
};

/// Exit codes of fk_bench (documented in --help). kExitTimeout and kExitContextLost end the
/// process after writing the case's record; rerun with --resume to continue after it.
enum ExitCode : int { kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitNoGpu = 3, kExitTimeout = 4, kExitContextLost = 5 };

// Statuses and reasons of a case record (docs/candidates.md):
//   PASSED
//   INCORRECT      mismatch | nonfinite | stale-output (passed, then failed on fresh inputs in the
//                  same buffers, or after timing) | input-mutated | oob-write (guard bytes changed)
//   SUSPECT        foreign-stream (memory changed while the task's stream was held back) |
//                  beyond-hardware-limit (faster than DRAM bandwidth / tensor peak allow)
//   RUNTIME_ERROR  error (a CUDA error or exception) | context-lost (sticky CUDA error)
//   TIMEOUT        timeout (--case-timeout)
//   SKIPPED        the case does not fit here

struct Selection {
  const TaskInfo* task;
  const ShapeCase* shape;
};

/// Tasks × cases that match the filters, in registry order (by task name, then case order).
std::vector<Selection> select_cases(const RunnerOptions& opt);

/// Outcome of checking one case (no timing): status PASSED, INCORRECT, RUNTIME_ERROR or SKIPPED.
struct CheckOutcome {
  std::string status;
  std::string message;
  std::string reason;  ///< see "Statuses and reasons" below
};

/// Runs the correctness protocol of Note [Task protocol] for one case on the current stream.
CheckOutcome check_task_case(const TaskInfo& task, const ShapeCase& shape, int rounds, uint64_t seed);

/// The same protocol on an instance that is already made (e.g. a harness built by a test).
CheckOutcome check_instance(TaskInstance& inst, int rounds, uint64_t seed);

/// Checks and times every selected case; returns an ExitCode.
int run_benchmark(const RunnerOptions& opt, std::ostream& log);

}  // namespace fk
