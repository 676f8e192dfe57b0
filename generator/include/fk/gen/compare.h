// `fastkernels compare`: judges a candidate benchmark session (docs/candidates.md, "Comparing
// runs and the score"). Three passes, one job each:
//   load     strict parse of the session's files (fk_bench / fk_model output, status.json) and of
//            the manifest into the typed records below; every problem goes to Diagnostics
//   evaluate cross-checks the files against each other and the manifest, then computes each
//            candidate's final status, speedups, effect at higher levels, greedy check, end-to-end
//            speedup, and the score of each candidate set; pure (reads no file)
//   render   terminal table, JSONL, markdown; strings only (the caller writes files)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fk/gen/diag.h"

namespace fk::gen::compare {

// ---- Inputs (the load pass) ------------------------------------------------------------------

/// One `{"type":"case"}` record of fk_bench JSONL.
struct BenchCase {
  int line = 0;                     ///< 1-based line in its file, for messages
  std::string task;
  int level = 0;
  std::string name;                 ///< $.case: decode_b1, prefill_s128, ...
  std::string regime;               ///< decode | prefill
  std::string status;               ///< PASSED INCORRECT RUNTIME_ERROR TIMEOUT SUSPECT SKIPPED
  std::string reason;               ///< mismatch, oob-write, timeout, ... ("" when absent)
  std::string message;              ///< "" when absent
  std::optional<double> median_us;  ///< $.time_us.median, when the case was timed
  /// Level-4 records only: $.check.outputs[].max_abs_err of each entry named "logits" (the
  /// model's logits against the fp32 reference), file order; nullopt where fk_bench wrote null
  /// (a non-finite error). Empty when the record has no check or no such entry.
  std::vector<std::optional<double>> logits_errors;
};

/// One fk_bench JSONL file: an env record, the cases, then (unless the run stopped early) a summary.
struct BenchRun {
  std::string file;                          ///< as shown in messages
  std::string gpu, commit, date;             ///< from the env record
  int env_line = 0;                          ///< its line
  std::vector<std::string> candidate_tasks;  ///< env $.candidate_tasks (empty for the baseline)
  std::vector<BenchCase> cases;              ///< file order
  bool has_summary = false;                  ///< false: the run stopped early (timeout or crash)
};

/// One decode or prefill record of `fk_model --bench` (memory records are not compared).
struct ModelRecord {
  int line = 0;
  std::string arch, task, mode;    ///< mode: decode | prefill
  int64_t batch = 0;
  std::optional<bool> graph;       ///< decode only
  std::optional<int64_t> seq_len;  ///< prefill only
  double tokens_per_s = 0;
  /// What a baseline and a candidate record are matched by: "<arch> decode b1 graph",
  /// "<arch> decode b1 eager", "<arch> prefill b1 s128".
  std::string key() const;
};

struct ModelRun {
  std::string file;
  std::vector<ModelRecord> records;
};

struct GreedySequence {
  int64_t prompt_len = 0;
  std::vector<int64_t> tokens;  ///< steps + 1 tokens; tokens[0] is picked from the prefill logits
  std::vector<double> gaps;     ///< top-1 minus top-2 logit of the distribution each token was picked from
};

/// `fk_model --greedy` output: greedy.json, or greedy-<tag>.json per architecture.
struct GreedyRun {
  std::string file;
  std::string arch, task;
  int64_t layers = 0, steps = 0;
  std::vector<GreedySequence> sequences;
};

/// One sequence of an `fk_model --teacher-forced` run: every step's row scored against the
/// composite fp32 reference (Note [Teacher-forced check] in runtime/runner/model_main.cu).
struct TeacherForcedSequence {
  int64_t prompt_len = 0;
  std::vector<int64_t> tokens;                ///< the tokens fed (steps + 1; the last is not fed)
  std::vector<std::optional<double>> rel_l2;  ///< per row; nullopt: non-finite
  std::vector<int64_t> ref_top;               ///< the reference's top token per row
  std::vector<double> ref_top_logit;          ///< and its logit
};

/// `fk_model --teacher-forced` output: teacher.json, or teacher-<tag>.json per architecture.
struct TeacherForcedRun {
  std::string file;
  std::string arch, task;
  int64_t layers = 0, steps = 0;
  uint64_t seed = 0;
  bool graph = true;
  double ref_logit_std = 0;
  std::vector<TeacherForcedSequence> sequences;
};

/// A candidate as status.json lists it.
struct SetCandidate {
  std::string task;
  int level = 0;
  std::string file;  ///< candidates/L1/<task>.cu
};

/// `fastkernels check` outcome of one candidate, as the driver recorded it in status.json.
struct StaticCheck {
  std::string verdict;  ///< PASSED INTERFACE_MISMATCH COMPILE_ERROR SUSPECT UNCHECKED
  std::optional<int64_t> exit;     ///< absent (null) when the check did not run
  std::vector<std::string> flags;  ///< SUSPECT categories: baseline-call, ...
  std::string diagnostics;
};

/// <results-dir>/<set>/: status.json and the outputs of the candidate build.
struct CandidateSet {
  std::string name;  ///< the folder name (= status.json $.set)
  std::string status_file;
  std::vector<SetCandidate> candidates;
  std::map<std::string, StaticCheck> statics;  ///< by task
  bool build_ok = false;
  std::string build_log;
  std::vector<std::string> affected;  ///< tasks up to max_level that include a candidate, transitively
  int max_level = 4;                  ///< highest level of affected tasks built and run
  /// A regex (ECMAScript, searched) the run's architectures matched (bench_candidates.py --arch): only tasks of a
  /// matching architecture are expected among the affected ones; empty: every architecture.
  std::string arch;
  std::optional<BenchRun> bench;      ///< absent when the build failed
  std::optional<ModelRun> model;
  std::vector<GreedyRun> greedy;      ///< at most one per architecture
  std::vector<TeacherForcedRun> teacher;  ///< at most one per architecture
};

/// Everything under <results-dir>.
struct Session {
  std::string dir;
  BenchRun baseline;
  std::optional<ModelRun> baseline_model;
  std::vector<GreedyRun> baseline_greedy;  ///< at most one per architecture
  std::vector<TeacherForcedRun> baseline_teacher;  ///< at most one per architecture
  std::vector<CandidateSet> sets;  ///< sorted by folder name
};

/// The manifest's task graph: what includes what, and which families use a task.
struct TaskGraph {
  struct Task {
    int level = 0;
    std::vector<std::string> families;  ///< descriptor basenames of the archs that use the task, sorted
    std::vector<std::string> children;  ///< tasks this one includes directly
    std::vector<std::string> archs;     ///< the ids of the configs (and layouts) that use the task
  };
  std::string file;
  std::map<std::string, Task> tasks;
  std::vector<std::string> families;  ///< every family of the manifest, sorted

  /// Tasks that include `task`, directly or transitively (not `task` itself).
  std::set<std::string> ancestors(const std::string& task) const;
};

/// Reads generated/manifest.json (or a fixture): $.archs[].{id,descriptor},
/// $.tasks[].{name,level,archs,children}. Other keys are ignored.
std::optional<TaskGraph> load_manifest(const std::filesystem::path& file, Diagnostics& diag);

/// Reads <dir>/baseline/ and every <dir>/<set>/ holding status.json (layout in docs/candidates.md).
/// Returns nullopt when the baseline's bench.jsonl is unusable; otherwise a session holding
/// everything that parsed (the caller checks diag.ok()).
std::optional<Session> load_session(const std::filesystem::path& dir, Diagnostics& diag);

// ---- Results (the evaluate pass) ---------------------------------------------------------------

/// The near-tie bound where it cannot be measured (and the fixed bound of docs/parity.md), logits.
constexpr double kFallbackTieGap = 0.30;

struct Options {
  /// Greedy near-tie bound in logits; nullopt (`--tie-gap auto`): measured per greedy check from
  /// the L4 checks of both runs, else kFallbackTieGap (Note [Near-tie bound] in compare.cc).
  std::optional<double> tie_gap;
  int scope_level = 0;  ///< score only tasks of this level; 0: all levels
};

/// One case of a candidate's own task: the candidate run against the baseline.
struct CaseResult {
  std::string task, name, regime;
  std::string status;           ///< the candidate run's status, or NOT_RUN
  std::string baseline_status;
  std::string reason, message;  ///< the candidate run's (NOT_RUN: why)
  std::optional<double> baseline_us, candidate_us;
  std::optional<double> speedup;  ///< baseline_us / candidate_us, when both were timed
};

/// Geometric mean, min and max over the cases timed in both runs.
struct Speedup {
  std::optional<double> geomean, min, max;  ///< absent when no case was timed in both runs
  int cases = 0;
};

/// The candidate's effect on the tasks of one level that include it.
struct LevelEffect {
  int level = 0;
  std::vector<std::string> tasks;
  Speedup speedup;
};

struct GreedySequenceCheck {
  std::string outcome;  ///< match | near-tie | INCORRECT
  int64_t matched = 0;  ///< tokens equal before the first difference
  int64_t total = 0;
  std::optional<int64_t> step;  ///< index into tokens of the first difference
  std::optional<double> gap;    ///< the baseline's top-2 gap there
};

/// The L4 greedy-token check of one architecture, shown for each candidate its model includes.
struct GreedyCheck {
  std::string arch;
  std::string task;     ///< the L4 task
  std::string outcome;  ///< INCORRECT if any sequence is, else near-tie if any, else match
  int64_t matched = 0, total = 0;
  std::vector<GreedySequenceCheck> sequences;
  /// The near-tie bound used (logits) and where it comes from: "fixed" (--tie-gap N),
  /// "auto: 2 x (0.160 + 0.156) from the L4 checks against fp32", or, when a run has no usable
  /// L4 check, "fixed: no L4 check of <task> in <set>/bench.jsonl" (Note [Near-tie bound]).
  double tie_gap = kFallbackTieGap;
  std::string tie_gap_source;
  /// E_base, E_cand: each run's largest logits max_abs_err over the L4 checks of `task`, when found.
  std::optional<double> baseline_logits_err, candidate_logits_err;
};

/// Bounds of the teacher-forced check (Note [Teacher-forced bound] in compare.cc).
constexpr double kTeacherRmsRatio = 1.3;    ///< RMS of the candidate's row errors over the baseline's
constexpr double kTeacherRowRatio = 3.0;    ///< a row is an outlier past 3 x the baseline's error there ...
constexpr double kTeacherRowFloor = 0.002;  ///< ... plus 0.2% (relative L2)
constexpr double kTeacherOutlierShare = 0.02;  ///< outlier rows allowed: this share of the rows, at least 1

/// The L4 teacher-forced check of one architecture, shown for each candidate its model includes.
struct TeacherForcedCheck {
  std::string arch;
  std::string task;     ///< the L4 task
  std::string outcome;  ///< match | INCORRECT
  std::string message;  ///< why INCORRECT ("" on a match)
  int64_t rows = 0;
  double baseline_rms = 0, candidate_rms = 0;  ///< RMS of the rows' relative L2 errors
  std::optional<double> ratio;                 ///< candidate_rms / baseline_rms
  int64_t outliers = 0, allowed_outliers = 0;
  int64_t reference_mismatches = 0, nonfinite_rows = 0;
  /// The row where the candidate's error exceeds the baseline's most (sequence, step, errors).
  int64_t worst_sequence = 0, worst_step = 0;
  double worst_candidate = 0, worst_baseline = 0;
};

/// One fk_model --bench record matched between the two runs.
struct EndToEnd {
  std::string key;  ///< ModelRecord::key()
  std::string task;
  double baseline_tokens_per_s = 0, candidate_tokens_per_s = 0;
  double speedup = 0;  ///< candidate / baseline tokens per second
  bool decode_b1_graph = false;
};

/// Why a candidate is not PASSED; the final status is the most severe finding's.
struct Finding {
  std::string status;
  std::string message;
};

struct CandidateResult {
  std::string set, task, file;
  int level = 0;
  std::string status;  ///< INTERFACE_MISMATCH COMPILE_ERROR TIMEOUT RUNTIME_ERROR INCORRECT SUSPECT PASSED
  std::string reason;  ///< the deciding finding's message ("" when PASSED)
  std::vector<Finding> findings;
  std::vector<std::string> flags;  ///< static SUSPECT flags
  Speedup speedup;
  std::vector<LevelEffect> effects;  ///< levels 2..4 that hold a task including the candidate
  std::vector<GreedyCheck> greedy;  ///< one per model (architecture) that includes the candidate
  std::vector<TeacherForcedCheck> teacher;  ///< likewise
  std::vector<EndToEnd> e2e;
  std::optional<double> e2e_decode_b1;  ///< geomean over the "decode b1 graph" rows
  std::vector<CaseResult> cases;        ///< the own task's cases, baseline order
};

/// One family's part of the score (Note [Score] in compare.cc).
struct FamilyScore {
  std::string family;
  int tasks = 0;  ///< tasks of the family within scope
  std::vector<std::string> attempted_tasks;
  int correct = 0;
  std::optional<double> speedup;           ///< geomean of the correct candidates' task speedups
  std::optional<double> fraction_correct;  ///< correct / attempted (absent when nothing attempted)
  double coverage = 0;                     ///< attempted / tasks
  double score = 0;
};

/// The score of one candidate set, over that set's candidates only (Note [Score] in compare.cc):
/// each set is one alternative, so several sets may hold a candidate for the same task.
struct SetScore {
  std::string set;
  std::vector<FamilyScore> families;  ///< families with at least one task in scope
  double score = 0;                   ///< mean family score
};

struct Report {
  std::string dir;
  std::string gpu;
  std::string baseline_commit, baseline_date;
  std::vector<std::pair<std::string, std::string>> set_commits;  ///< (set, "commit date" or "-")
  Options options;
  std::vector<CandidateResult> candidates;  ///< one per (set, candidate): by set, then status.json order
  std::vector<SetScore> scores;             ///< one per judged set, in set order

  bool all_passed() const;
  /// The score of `set`; nullptr when no set of that name was judged.
  const SetScore* score_of(const std::string& set) const;
};

/// Scope as written on the command line: "all", "L1".."L4".
std::string scope_name(int scope_level);

/// Cross-checks `s` against itself and `g` (errors to `diag`) and computes the report.
Report evaluate(const Session& s, const TaskGraph& g, const Options& o, Diagnostics& diag);

std::string render_terminal(const Report& r);
std::string render_jsonl(const Report& r);
std::string render_markdown(const Report& r);

}  // namespace fk::gen::compare
