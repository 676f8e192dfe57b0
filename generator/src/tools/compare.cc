// `fastkernels compare` (see fk/gen/compare.h and docs/candidates.md, "Comparing runs and the score").
#include "fk/gen/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fk/gen/config.h"
#include "fk/gen/format.h"
#include "fk/gen/repo.h"

namespace fk::gen::compare {

namespace fs = std::filesystem;
using nlohmann::json;

// Note [Compare input errors]
// compare judges files that a driver script assembled from several machines, so it trusts none
// of them: every message names the file (and the line, in JSON lines), the JSON path and what was
// expected, in the generator's style (`<file>:<line>: $.time_us.median: expected number, got
// "fast"`). Keys compare does not read are ignored (fk_bench and fk_model records carry many), but
// every key it reads is type-checked. Files are also checked against each other (a candidate case
// the baseline never ran, a set's `affected` list that disagrees with the manifest, a stale
// bench.jsonl beside a failed build, ...). All problems are reported, then compare exits 2 and
// writes nothing.

namespace {

const std::vector<std::string> kCaseStatuses = {"PASSED", "INCORRECT", "RUNTIME_ERROR", "TIMEOUT", "SUSPECT", "SKIPPED", "INFRA_ERROR"};
const std::vector<std::string> kVerdicts = {"PASSED", "INTERFACE_MISMATCH", "COMPILE_ERROR", "SUSPECT", "UNCHECKED"};
/// Final statuses, most severe first (docs/candidates.md).
// INFRA_ERROR (the runner, a reference or a peer failed: no result) ranks below every finding
// about the candidate itself and above PASSED: it is never a speedup (Note [Infrastructure
// failures] in runtime/src/runner.cc).
const std::vector<std::string> kPrecedence = {"INTERFACE_MISMATCH", "COMPILE_ERROR", "TIMEOUT", "RUNTIME_ERROR",
                                              "INCORRECT",          "SUSPECT",       "INFRA_ERROR", "PASSED"};

int severity(const std::string& status) {
  return static_cast<int>(std::find(kPrecedence.begin(), kPrecedence.end(), status) - kPrecedence.begin());
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::string got(const json& v) { return short_json(v.dump()); }

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

/// Logit gaps in messages: three significant digits (0.12, 1.5, 12.3).
std::string gap_text(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

/// "near-tie bound 0.632 (auto: 2 x (0.160 + 0.156) from the L4 checks against fp32)", "near-tie
/// bound 0.3 (fixed: no L4 check of model_l in baseline/bench.jsonl)", "near-tie bound 0.5 (fixed)".
std::string bound_text(const GreedyCheck& g) {
  const bool measured = g.tie_gap_source.rfind("auto", 0) == 0;
  return "near-tie bound " + (measured ? fixed(g.tie_gap, 3) : canonical_double(g.tie_gap)) + " (" + g.tie_gap_source + ")";
}

/// nlohmann's parse error without its "[json.exception...] " prefix; in one line of a JSONL file
/// the line number is ours, so only the column is kept.
std::string parse_error_text(const std::string& what, bool one_line) {
  std::string s = json_error_text(what);
  if (one_line) s = std::regex_replace(s, std::regex("^parse error at line [0-9]+, "), "");
  return s;
}

/// Typed, checked access to one JSON document (a file, or one line of a JSONL file): each getter
/// records a message on a missing or ill-typed value and returns nullopt (Note [Compare input errors]).
class Doc {
 public:
  Doc(std::string where, Diagnostics& diag) : where_(std::move(where)), diag_(diag) {}

  void error(const std::string& path, const std::string& what) {
    diag_.error(where_ + ": " + path + ": " + what);
    ok_ = false;
  }
  bool ok() const { return ok_; }

  /// obj[key]; nullptr when absent (an error when `required`).
  const json* field(const json& obj, const std::string& path, const std::string& key, const std::string& what, bool required) {
    auto it = obj.find(key);
    if (it != obj.end()) return &*it;
    if (required) error(path + "." + key, "expected " + what + ", got nothing");
    return nullptr;
  }

  std::optional<std::string> str(const json& obj, const std::string& path, const std::string& key, bool required = true) {
    const json* v = field(obj, path, key, "string", required);
    if (!v) return std::nullopt;
    if (!v->is_string()) return fail<std::string>(path + "." + key, "string", *v);
    return v->get<std::string>();
  }

  std::optional<std::string> one_of(const json& obj, const std::string& path, const std::string& key,
                                    const std::vector<std::string>& allowed, bool required = true) {
    const std::string what = allowed.size() == 1 ? json_quote(allowed[0]) : "one of " + join(allowed, ", ");
    const json* v = field(obj, path, key, what, required);
    if (!v) return std::nullopt;
    if (!v->is_string() || std::find(allowed.begin(), allowed.end(), v->get<std::string>()) == allowed.end())
      return fail<std::string>(path + "." + key, what, *v);
    return v->get<std::string>();
  }

  std::optional<int64_t> integer(const json& obj, const std::string& path, const std::string& key, int64_t min,
                                 int64_t max = INT64_MAX, bool required = true) {
    const std::string what = max == INT64_MAX ? "integer >= " + std::to_string(min)
                                              : "integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    const json* v = field(obj, path, key, what, required);
    if (!v) return std::nullopt;
    return as_integer(*v, path + "." + key, what, min, max);
  }

  std::optional<int64_t> as_integer(const json& v, const std::string& path, const std::string& what, int64_t min, int64_t max) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      return fail<int64_t>(path, what, v);
    const int64_t x = v.get<int64_t>();
    if (x < min || x > max) return fail<int64_t>(path, what, v);
    return x;
  }

  /// A finite number (> 0 when `positive`).
  std::optional<double> number(const json& obj, const std::string& path, const std::string& key, bool positive,
                               bool required = true) {
    const std::string what = positive ? "positive number" : "number";
    const json* v = field(obj, path, key, what, required);
    if (!v) return std::nullopt;
    return as_number(*v, path + "." + key, positive);
  }

  std::optional<double> as_number(const json& v, const std::string& path, bool positive) {
    const std::string what = positive ? "positive number" : "number";
    if (!v.is_number() || !std::isfinite(v.get<double>()) || (positive && !(v.get<double>() > 0)))
      return fail<double>(path, what, v);
    return v.get<double>();
  }

  std::optional<bool> boolean(const json& obj, const std::string& path, const std::string& key) {
    const json* v = field(obj, path, key, "boolean", true);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return fail<bool>(path + "." + key, "boolean", *v);
    return v->get<bool>();
  }

  std::optional<std::vector<std::string>> strings(const json& obj, const std::string& path, const std::string& key,
                                                  bool required = true) {
    const json* v = field(obj, path, key, "array of strings", required);
    if (!v) return std::nullopt;
    if (!v->is_array()) return fail<std::vector<std::string>>(path + "." + key, "array of strings", *v);
    std::vector<std::string> out;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) return fail<std::vector<std::string>>(path + "." + key + "[" + std::to_string(i) + "]", "string", (*v)[i]);
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  /// obj[key] when it is an array (an error otherwise, or when absent and required).
  const json* array(const json& obj, const std::string& path, const std::string& key, bool required = true) {
    const json* v = field(obj, path, key, "array", required);
    if (v && !v->is_array()) {
      fail<int>(path + "." + key, "array", *v);
      return nullptr;
    }
    return v;
  }

  /// `v` when it is an object (an error otherwise).
  const json* object(const json& v, const std::string& path) {
    if (v.is_object()) return &v;
    fail<int>(path, "object", v);
    return nullptr;
  }

 private:
  template <typename T>
  std::optional<T> fail(const std::string& path, const std::string& what, const json& v) {
    error(path, "expected " + what + ", got " + got(v));
    return std::nullopt;
  }

  std::string where_;
  Diagnostics& diag_;
  bool ok_ = true;
};

/// Reads a whole-file JSON document; nullopt (after an error, unless the file is missing) when
/// unusable. `missing` is set when the file cannot be read.
std::optional<json> read_json_file(const fs::path& p, Diagnostics& diag, bool* missing) {
  auto text = read_text(p);
  *missing = !text;
  if (!text) return std::nullopt;
  try {
    return json::parse(*text);
  } catch (const json::parse_error& e) {
    diag.error(p.generic_string() + ": invalid JSON: " + parse_error_text(e.what(), false));
    return std::nullopt;
  }
}

/// Calls `record` for each non-blank line of a JSON-lines file that holds a JSON object; false
/// when the file cannot be read.
bool for_each_record(const fs::path& p, Diagnostics& diag, const std::function<void(Doc&, const json&, int)>& record) {
  auto text = read_text(p);
  if (!text) return false;
  const std::string file = p.generic_string();
  std::istringstream in(*text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Doc doc(file + ":" + std::to_string(n), diag);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      diag.error(file + ":" + std::to_string(n) + ": invalid JSON: " + parse_error_text(e.what(), true));
      continue;
    }
    if (doc.object(j, "$")) record(doc, j, n);
  }
  return true;
}

/// An fk_bench JSON-lines file (records in docs/candidates.md); nullopt when it cannot be read.
std::optional<BenchRun> load_bench(const fs::path& p, bool baseline, Diagnostics& diag) {
  BenchRun run;
  run.file = p.generic_string();
  bool env_seen = false;
  int summary_line = 0;
  const bool readable = for_each_record(p, diag, [&](Doc& d, const json& j, int line) {
    auto type = d.one_of(j, "$", "type", {"env", "case", "summary"});
    if (!type) return;
    if (summary_line) {
      d.error("$.type", "expected nothing after the summary record (line " + std::to_string(summary_line) + "), got " + json_quote(*type));
      return;
    }
    if (*type == "env") {
      if (env_seen) return d.error("$.type", "expected one env record, the first, got another");
      env_seen = true;
      run.env_line = line;
      run.gpu = d.str(j, "$", "gpu").value_or("");
      run.commit = d.str(j, "$", "commit").value_or("");
      run.date = d.str(j, "$", "date").value_or("");
      run.candidate_tasks = d.strings(j, "$", "candidate_tasks", /*required=*/false).value_or(std::vector<std::string>{});
      if (baseline && !run.candidate_tasks.empty())
        d.error("$.candidate_tasks", "expected none in the baseline run, got " + got(j.at("candidate_tasks")));
      return;
    }
    if (!env_seen) {
      env_seen = true;  // said once
      d.error("$.type", "expected the env record first, got " + json_quote(*type));
    }
    if (*type == "summary") {
      for (const char* k : {"passed", "failed", "skipped"}) d.integer(j, "$", k, 0);
      summary_line = line;
      run.has_summary = true;
      return;
    }
    BenchCase c;
    c.line = line;
    auto task = d.str(j, "$", "task");
    auto level = d.integer(j, "$", "level", 1, 4);
    auto name = d.str(j, "$", "case");
    auto regime = d.one_of(j, "$", "regime", {"decode", "prefill"});
    auto status = d.one_of(j, "$", "status", kCaseStatuses);
    c.reason = d.str(j, "$", "reason", false).value_or("");
    c.message = d.str(j, "$", "message", false).value_or("");
    if (const json* t = d.field(j, "$", "time_us", "object", false))
      if (d.object(*t, "$.time_us")) c.median_us = d.number(*t, "$.time_us", "median", /*positive=*/true);
    // The logits errors of L4 checks measure the near-tie bound (Note [Near-tie bound]): the
    // checks before timing ($.check) and the one after it ($.recheck_after_timing), both against
    // the fp32 reference.
    if (level && *level == 4)
      for (const char* key : {"check", "recheck_after_timing"})
        if (const json* chk = d.field(j, "$", key, "object", false); chk && d.object(*chk, std::string("$.") + key))
          if (const json* outs = d.array(*chk, std::string("$.") + key, "outputs", /*required=*/false))
            for (size_t i = 0; i < outs->size(); ++i) {
              const std::string path = std::string("$.") + key + ".outputs[" + std::to_string(i) + "]";
              const json* o = d.object((*outs)[i], path);
              if (!o) continue;
              auto out_name = d.str(*o, path, "name");
              if (!out_name || *out_name != "logits") continue;
              // fk_bench writes a NaN error as null.
              const json* err = d.field(*o, path, "max_abs_err", "number >= 0 or null", true);
              if (!err) continue;
              if (err->is_null()) c.logits_errors.push_back(std::nullopt);
              else if (err->is_number() && std::isfinite(err->get<double>()) && err->get<double>() >= 0)
                c.logits_errors.push_back(err->get<double>());
              else d.error(path + ".max_abs_err", "expected number >= 0 or null, got " + got(*err));
            }
    if (!d.ok()) return;
    c.task = *task, c.level = static_cast<int>(*level), c.name = *name, c.regime = *regime, c.status = *status;
    run.cases.push_back(std::move(c));
  });
  if (!readable) return std::nullopt;
  if (!env_seen) diag.error(run.file + ": expected the env record first, got an empty file");
  return run;
}

/// An `fk_model --bench` JSON-lines file; nullopt when it cannot be read. Memory records are skipped.
std::optional<ModelRun> load_model(const fs::path& p, Diagnostics& diag) {
  ModelRun run;
  run.file = p.generic_string();
  const bool readable = for_each_record(p, diag, [&](Doc& d, const json& j, int line) {
    d.one_of(j, "$", "tool", {"fk_model"});
    auto mode = d.one_of(j, "$", "mode", {"decode", "prefill", "memory"});
    if (!mode || *mode == "memory") return;
    ModelRecord r;
    r.line = line;
    r.mode = *mode;
    r.arch = d.str(j, "$", "arch").value_or("");
    r.task = d.str(j, "$", "task").value_or("");
    r.batch = d.integer(j, "$", "batch", 1).value_or(0);
    r.tokens_per_s = d.number(j, "$", "tokens_per_s", /*positive=*/true).value_or(0);
    if (r.mode == "decode") r.graph = d.boolean(j, "$", "graph");
    else r.seq_len = d.integer(j, "$", "seq_len", 1);
    if (d.ok()) run.records.push_back(std::move(r));
  });
  if (!readable) return std::nullopt;
  return run;
}

/// The head every `fk_model` run file starts with (tool, `mode` when given, arch, task, layers),
/// read into `run`; the parsed file, or nullopt when it is missing (`*missing`) or no object.
template <class Run>
std::optional<json> read_run_head(const fs::path& p, Diagnostics& diag, Run& run, bool* missing, const char* mode = nullptr) {
  run.file = p.generic_string();
  auto j = read_json_file(p, diag, missing);
  if (*missing) return std::nullopt;
  Doc d(run.file, diag);
  if (!j || !d.object(*j, "$")) return std::nullopt;
  d.one_of(*j, "$", "tool", {"fk_model"});
  if (mode) d.one_of(*j, "$", "mode", {mode});
  run.arch = d.str(*j, "$", "arch").value_or("");
  run.task = d.str(*j, "$", "task").value_or("");
  run.layers = d.integer(*j, "$", "layers", 1).value_or(0);
  return j;
}

/// An `fk_model --greedy` JSON file; nullopt when it cannot be read.
std::optional<GreedyRun> load_greedy(const fs::path& p, Diagnostics& diag) {
  GreedyRun g;
  bool missing = false;
  auto j = read_run_head(p, diag, g, &missing);
  if (missing) return std::nullopt;
  if (!j) return g;
  Doc d(g.file, diag);
  auto steps = d.integer(*j, "$", "steps", 0);
  const json* seqs = d.array(*j, "$", "sequences");
  if (!steps || !seqs) return g;
  g.steps = *steps;
  if (seqs->empty()) d.error("$.sequences", "expected at least one sequence, got []");
  for (size_t i = 0; i < seqs->size(); ++i) {
    const std::string path = "$.sequences[" + std::to_string(i) + "]";
    const json* s = d.object((*seqs)[i], path);
    if (!s) continue;
    GreedySequence q;
    q.prompt_len = d.integer(*s, path, "prompt_len", 1).value_or(0);
    const json* tokens = d.array(*s, path, "tokens");
    const json* gaps = d.array(*s, path, "gaps");
    if (!tokens || !gaps) continue;
    const size_t n = static_cast<size_t>(g.steps) + 1;
    if (tokens->size() != n)
      d.error(path + ".tokens", "expected steps + 1 = " + std::to_string(n) + " token ids, got " + std::to_string(tokens->size()));
    if (gaps->size() != tokens->size())
      d.error(path + ".gaps", "expected one gap per token (" + std::to_string(tokens->size()) + "), got " + std::to_string(gaps->size()));
    for (size_t t = 0; t < tokens->size(); ++t)
      q.tokens.push_back(d.as_integer((*tokens)[t], path + ".tokens[" + std::to_string(t) + "]", "integer >= 0", 0, INT64_MAX).value_or(-1));
    for (size_t t = 0; t < gaps->size(); ++t)
      q.gaps.push_back(d.as_number((*gaps)[t], path + ".gaps[" + std::to_string(t) + "]", /*positive=*/false).value_or(0));
    g.sequences.push_back(std::move(q));
  }
  return g;
}

/// <stem>.json and <stem>-<tag>.json of a folder (one fk_model run per architecture), sorted:
/// stem "greedy" (--greedy) or "teacher" (--teacher-forced).
std::vector<fs::path> model_run_files(const fs::path& folder, const std::string& stem) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name == stem + ".json" || (name.rfind(stem + "-", 0) == 0 && e.path().extension() == ".json")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// An `fk_model --teacher-forced` JSON file; nullopt when it cannot be read.
std::optional<TeacherForcedRun> load_teacher(const fs::path& p, Diagnostics& diag) {
  TeacherForcedRun t;
  bool missing = false;
  auto j = read_run_head(p, diag, t, &missing, "teacher-forced");
  if (missing) return std::nullopt;
  if (!j) return t;
  Doc d(t.file, diag);
  t.seed = static_cast<uint64_t>(d.integer(*j, "$", "seed", 0).value_or(0));
  t.graph = d.boolean(*j, "$", "graph").value_or(true);
  t.ref_logit_std = d.number(*j, "$", "ref_logit_std", /*positive=*/false).value_or(0);
  auto steps = d.integer(*j, "$", "steps", 0);
  const json* seqs = d.array(*j, "$", "sequences");
  if (!steps || !seqs) return t;
  t.steps = *steps;
  if (seqs->empty()) d.error("$.sequences", "expected at least one sequence, got []");
  const size_t n = static_cast<size_t>(t.steps) + 1;
  for (size_t i = 0; i < seqs->size(); ++i) {
    const std::string path = "$.sequences[" + std::to_string(i) + "]";
    const json* s = d.object((*seqs)[i], path);
    if (!s) continue;
    TeacherForcedSequence q;
    q.prompt_len = d.integer(*s, path, "prompt_len", 1).value_or(0);
    const json* tokens = d.array(*s, path, "tokens");
    const json* rel = d.array(*s, path, "rel_l2");
    const json* top = d.array(*s, path, "ref_top");
    const json* top_logit = d.array(*s, path, "ref_top_logit");
    if (!tokens || !rel || !top || !top_logit) continue;
    bool sized = true;
    for (auto [name, a] : {std::pair<const char*, const json*>{"tokens", tokens}, {"rel_l2", rel}, {"ref_top", top}, {"ref_top_logit", top_logit}})
      if (a->size() != n) {
        d.error(path + "." + name, "expected steps + 1 = " + std::to_string(n) + " entries, got " + std::to_string(a->size()));
        sized = false;
      }
    if (!sized) continue;
    for (size_t r = 0; r < n; ++r) {
      const std::string at = "[" + std::to_string(r) + "]";
      q.tokens.push_back(d.as_integer((*tokens)[r], path + ".tokens" + at, "integer >= 0", 0, INT64_MAX).value_or(-1));
      // null: the row's error was not finite (fk_model writes NaN and inf as null).
      if ((*rel)[r].is_null()) q.rel_l2.push_back(std::nullopt);
      else q.rel_l2.push_back(d.as_number((*rel)[r], path + ".rel_l2" + at, /*positive=*/false).value_or(0));
      q.ref_top.push_back(d.as_integer((*top)[r], path + ".ref_top" + at, "integer >= 0", 0, INT64_MAX).value_or(-1));
      q.ref_top_logit.push_back(d.as_number((*top_logit)[r], path + ".ref_top_logit" + at, /*positive=*/false).value_or(0));
    }
    t.sequences.push_back(std::move(q));
  }
  return t;
}

/// Every <stem>*.json run of a folder through `load`, at most one per architecture (`what` names
/// the kind of run in the message).
template <class Run, class Load>
std::vector<Run> load_model_runs(const fs::path& folder, const std::string& stem, const std::string& what, Load load,
                                 Diagnostics& diag) {
  std::vector<Run> out;
  for (const auto& f : model_run_files(folder, stem)) {
    std::optional<Run> r = load(f, diag);
    if (!r) {
      diag.error(f.generic_string() + ": cannot read");
      continue;
    }
    for (const auto& prev : out)
      if (!r->arch.empty() && prev.arch == r->arch)
        diag.error(r->file + ": $.arch: expected one " + what + " run per architecture, got " + json_quote(r->arch) + " again (" +
                   prev.file + ")");
    out.push_back(std::move(*r));
  }
  return out;
}

std::vector<GreedyRun> load_greedy_files(const fs::path& folder, Diagnostics& diag) {
  return load_model_runs<GreedyRun>(folder, "greedy", "greedy", load_greedy, diag);
}

std::vector<TeacherForcedRun> load_teacher_files(const fs::path& folder, Diagnostics& diag) {
  return load_model_runs<TeacherForcedRun>(folder, "teacher", "teacher-forced", load_teacher, diag);
}

/// <dir>/<name>/status.json and the candidate run's outputs beside it.
CandidateSet load_set(const fs::path& dir, const std::string& name, Diagnostics& diag) {
  CandidateSet set;
  set.name = name;
  const fs::path folder = dir / name;
  set.status_file = (folder / "status.json").generic_string();
  bool missing = false;
  auto j = read_json_file(folder / "status.json", diag, &missing);
  if (missing) diag.error(set.status_file + ": cannot read");
  Doc d(set.status_file, diag);
  if (!j || !d.object(*j, "$")) return set;
  if (auto s = d.str(*j, "$", "set"); s && *s != name)
    d.error("$.set", "expected the folder name " + json_quote(name) + ", got " + json_quote(*s));
  if (const json* cands = d.array(*j, "$", "candidates")) {
    if (cands->empty()) d.error("$.candidates", "expected at least one candidate, got []");
    for (size_t i = 0; i < cands->size(); ++i) {
      const std::string path = "$.candidates[" + std::to_string(i) + "]";
      const json* c = d.object((*cands)[i], path);
      if (!c) continue;
      auto task = d.str(*c, path, "task");
      auto level = d.integer(*c, path, "level", 1, 4);
      auto file = d.str(*c, path, "file");
      if (!task || !level || !file) continue;
      for (const auto& prev : set.candidates)
        if (prev.task == *task) d.error(path + ".task", "expected each task once, got " + json_quote(*task) + " again");
      set.candidates.push_back({*task, static_cast<int>(*level), *file});
    }
  }
  if (const json* statics = d.array(*j, "$", "static")) {
    std::set<std::string> listed;  // tasks with an entry, valid or not (one message per problem)
    for (size_t i = 0; i < statics->size(); ++i) {
      const std::string path = "$.static[" + std::to_string(i) + "]";
      const json* s = d.object((*statics)[i], path);
      if (!s) continue;
      auto task = d.str(*s, path, "task");
      auto verdict = d.one_of(*s, path, "verdict", kVerdicts);
      // exit: null when the check did not run (UNCHECKED).
      const json* exit_v = d.field(*s, path, "exit", "integer >= 0 or null", true);
      std::optional<int64_t> exit;
      if (exit_v && !exit_v->is_null()) exit = d.as_integer(*exit_v, path + ".exit", "integer >= 0 or null", 0, INT64_MAX);
      auto flags = d.strings(*s, path, "flags", /*required=*/false);
      auto diagnostics = d.str(*s, path, "diagnostics", /*required=*/false);
      if (!task) continue;
      const bool known = std::any_of(set.candidates.begin(), set.candidates.end(), [&](const SetCandidate& c) { return c.task == *task; });
      if (!known) d.error(path + ".task", "expected a task of $.candidates, got " + json_quote(*task));
      else if (!listed.insert(*task).second) d.error(path + ".task", "expected each candidate once, got " + json_quote(*task) + " again");
      else if (verdict && exit_v && (exit_v->is_null() || exit))
        set.statics[*task] = {*verdict, exit, flags.value_or(std::vector<std::string>{}), diagnostics.value_or("")};
    }
    for (const auto& c : set.candidates)
      if (!listed.count(c.task)) d.error("$.static", "expected an entry for every candidate, got none for " + json_quote(c.task));
  }
  set.build_ok = d.one_of(*j, "$", "build", {"OK", "COMPILE_ERROR"}).value_or("") == "OK";
  set.build_log = d.str(*j, "$", "build_log", /*required=*/false).value_or("");
  set.affected = d.strings(*j, "$", "affected").value_or(std::vector<std::string>{});
  set.max_level = static_cast<int>(d.integer(*j, "$", "max_level", 1, 4, /*required=*/false).value_or(4));
  if (j->contains("arch")) set.arch = d.str(*j, "$", "arch").value_or("");
  if (!d.ok()) return set;

  if (set.build_ok) {
    set.bench = load_bench(folder / "bench.jsonl", /*baseline=*/false, diag);
    if (!set.bench)
      diag.error((folder / "bench.jsonl").generic_string() +
                 ": cannot read (status.json says the build is OK, so the candidate run must have written it)");
    set.model = load_model(folder / "model.jsonl", diag);
    set.greedy = load_greedy_files(folder, diag);
    set.teacher = load_teacher_files(folder, diag);
  } else {
    std::vector<std::string> stale;
    for (const char* f : {"bench.jsonl", "model.jsonl"})
      if (fs::exists(folder / f)) stale.push_back((folder / f).generic_string());
    for (const char* stem : {"greedy", "teacher"})
      for (const auto& g : model_run_files(folder, stem)) stale.push_back(g.generic_string());
    for (const auto& f : stale)
      diag.error(f + ": expected no run output, since " + set.status_file + " says the build failed (a file left from an earlier session?)");
  }
  return set;
}

}  // namespace

// ---- load ------------------------------------------------------------------------------------

std::string ModelRecord::key() const {
  std::string k = arch + " " + mode + " b" + std::to_string(batch);
  if (graph) k += *graph ? " graph" : " eager";
  if (seq_len) k += " s" + std::to_string(*seq_len);
  return k;
}

std::set<std::string> TaskGraph::ancestors(const std::string& task) const {
  std::set<std::string> out;
  std::vector<std::string> todo = {task};
  while (!todo.empty()) {
    const std::string t = todo.back();
    todo.pop_back();
    for (const auto& [name, info] : tasks)
      if (!out.count(name) && std::count(info.children.begin(), info.children.end(), t)) {
        out.insert(name);
        todo.push_back(name);
      }
  }
  return out;
}

std::optional<TaskGraph> load_manifest(const fs::path& file, Diagnostics& diag) {
  TaskGraph g;
  g.file = file.generic_string();
  bool missing = false;
  auto j = read_json_file(file, diag, &missing);
  if (missing) {
    diag.error(g.file + ": cannot read (run `fastkernels generate`, or pass --manifest)");
    return std::nullopt;
  }
  Doc d(g.file, diag);
  if (!j || !d.object(*j, "$")) return std::nullopt;
  std::map<std::string, std::string> family_of_arch;
  if (const json* archs = d.array(*j, "$", "archs")) {
    for (size_t i = 0; i < archs->size(); ++i) {
      const std::string path = "$.archs[" + std::to_string(i) + "]";
      const json* a = d.object((*archs)[i], path);
      if (!a) continue;
      auto id = d.str(*a, path, "id");
      auto descriptor = d.str(*a, path, "descriptor");
      if (!id || !descriptor) continue;
      // A family is its descriptor's basename: generator/descriptors/llama.json -> llama.
      family_of_arch[*id] = fs::path(*descriptor).stem().string();
    }
  }
  std::set<std::string> families;
  for (const auto& [id, family] : family_of_arch) families.insert(family);
  g.families.assign(families.begin(), families.end());
  std::vector<std::pair<std::string, std::string>> child_refs;  // (json path, task name)
  if (const json* tasks = d.array(*j, "$", "tasks")) {
    for (size_t i = 0; i < tasks->size(); ++i) {
      const std::string path = "$.tasks[" + std::to_string(i) + "]";
      const json* t = d.object((*tasks)[i], path);
      if (!t) continue;
      auto name = d.str(*t, path, "name");
      auto level = d.integer(*t, path, "level", 1, 4);
      auto archs = d.strings(*t, path, "archs");
      if (!name || !level || !archs) continue;
      TaskGraph::Task task;
      task.level = static_cast<int>(*level);
      std::set<std::string> fams;
      for (const auto& a : *archs) {
        auto f = family_of_arch.find(a);
        if (f == family_of_arch.end()) d.error(path + ".archs", "expected ids of $.archs, got " + json_quote(a));
        else fams.insert(f->second);
      }
      task.families.assign(fams.begin(), fams.end());
      task.archs = *archs;
      if (const json* children = d.field(*t, path, "children", "object", false)) {
        if (d.object(*children, path + ".children")) {
          for (const auto& [role, child] : children->items()) {
            if (child.is_null()) continue;  // an optional role the config leaves out
            if (!child.is_string()) {
              d.error(path + ".children." + role, "expected task name or null, got " + got(child));
              continue;
            }
            task.children.push_back(child.get<std::string>());
            child_refs.push_back({path + ".children." + role, child.get<std::string>()});
          }
        }
      }
      if (g.tasks.count(*name)) d.error(path + ".name", "expected each task once, got " + json_quote(*name) + " again");
      g.tasks[*name] = std::move(task);
    }
  }
  for (const auto& [path, child] : child_refs)
    if (!g.tasks.count(child)) d.error(path, "expected a task of $.tasks, got " + json_quote(child));
  if (!d.ok()) return std::nullopt;
  return g;
}

std::optional<Session> load_session(const fs::path& dir, Diagnostics& diag) {
  Session s;
  s.dir = dir.generic_string();
  const fs::path base = dir / "baseline";
  auto bench = load_bench(base / "bench.jsonl", /*baseline=*/true, diag);
  if (!bench) {
    diag.error((base / "bench.jsonl").generic_string() + ": cannot read (expected the baseline's fk_bench JSON lines; "
               "layout: <results-dir>/baseline/bench.jsonl beside one <results-dir>/<set>/status.json per candidate set)");
    return std::nullopt;
  }
  s.baseline = std::move(*bench);
  s.baseline_model = load_model(base / "model.jsonl", diag);
  s.baseline_greedy = load_greedy_files(base, diag);
  s.baseline_teacher = load_teacher_files(base, diag);
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "baseline" && e.is_directory() && fs::exists(e.path() / "status.json")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) diag.error(s.dir + ": expected at least one candidate set (a folder holding status.json beside baseline/), got none");
  for (const auto& name : names) s.sets.push_back(load_set(dir, name, diag));
  return s;
}

// ---- evaluate ----------------------------------------------------------------------------------

namespace {

using CaseKey = std::pair<std::string, std::string>;  // (task, case)

/// The cases of one run, by (task, case) and by task (file order).
struct RunIndex {
  std::map<CaseKey, const BenchCase*> by_key;
  std::map<std::string, std::vector<const BenchCase*>> by_task;

  const BenchCase* find(const std::string& task, const std::string& name) const {
    auto it = by_key.find({task, name});
    return it == by_key.end() ? nullptr : it->second;
  }
};

RunIndex index_run(const BenchRun& run, Diagnostics& diag) {
  RunIndex idx;
  for (const auto& c : run.cases) {
    auto [it, fresh] = idx.by_key.insert({{c.task, c.name}, &c});
    if (!fresh) {
      diag.error(run.file + ":" + std::to_string(c.line) + ": $.case: expected each (task, case) once, got " + c.task + "/" +
                 c.name + " again (first at line " + std::to_string(it->second->line) + ")");
      continue;
    }
    idx.by_task[c.task].push_back(&c);
  }
  return idx;
}

/// Geometric mean, min and max of positive ratios.
Speedup summarize(const std::vector<double>& ratios) {
  Speedup s;
  s.cases = static_cast<int>(ratios.size());
  if (ratios.empty()) return s;
  double log_sum = 0;
  for (double r : ratios) log_sum += std::log(r);
  s.geomean = std::exp(log_sum / ratios.size());
  s.min = *std::min_element(ratios.begin(), ratios.end());
  s.max = *std::max_element(ratios.begin(), ratios.end());
  return s;
}

std::string case_outcome(const BenchCase& c) {
  std::string s = c.status;
  if (!c.reason.empty()) s += " (" + c.reason + ")";
  if (!c.message.empty()) s += ": " + c.message;
  return s;
}

/// Why the cases after the last record of a run without a summary never ran, and the status
/// that implies for a candidate whose cases are among them.
Finding stop_cause(const BenchRun& run) {
  const BenchCase* timeout = nullptr;
  for (const auto& c : run.cases)
    if (c.status == "TIMEOUT") timeout = &c;
  if (timeout) return {"TIMEOUT", "the run stopped after " + timeout->task + "/" + timeout->name + " timed out"};
  if (run.cases.empty()) return {"RUNTIME_ERROR", "the run ended before its first case, without a summary record (a crash?)"};
  const BenchCase& last = run.cases.back();
  return {"RUNTIME_ERROR", "the run ended after " + last.task + "/" + last.name + " without a summary record (a crash?)"};
}

/// A line of a build log worth quoting for `file`: an error line naming it, else the first error
/// line, else the last non-blank line.
std::string build_log_line(const std::string& log, const std::string& file) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);)
    if (l.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(l.substr(l.find_first_not_of(" \t")));
  if (lines.empty()) return "(empty build log)";
  const std::string base = fs::path(file).filename().string();
  const std::string* pick = nullptr;
  for (const auto& l : lines)
    if (l.find("error") != std::string::npos && !base.empty() && l.find(base) != std::string::npos) {
      pick = &l;
      break;
    }
  for (const auto& l : lines)
    if (!pick && l.find("error") != std::string::npos) pick = &l;
  std::string s = pick ? *pick : lines.back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s.size() > 200 ? s.substr(0, 197) + "..." : s;
}

/// " (exit N)" of a static check ("" when it did not run).
std::string exit_text(const StaticCheck& st) { return st.exit ? " (exit " + std::to_string(*st.exit) + ")" : ""; }

/// The first line of `fastkernels check` output that says "error" (else the first line).
std::string first_error_line(const std::string& diagnostics) {
  std::istringstream in(diagnostics);
  std::string first;
  for (std::string l; std::getline(in, l);) {
    if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (l.find("error") != std::string::npos) return l;
    if (first.empty()) first = l;
  }
  return first.empty() ? "(no diagnostics recorded)" : first;
}

class Evaluator {
 public:
  Evaluator(const Session& s, const TaskGraph& g, const Options& o, Diagnostics& diag)
      : s_(s), g_(g), o_(o), diag_(diag), base_(index_run(s.baseline, diag)) {
    if (s.baseline_model) base_model_ = index_model(*s.baseline_model);
  }

  Report run() {
    Report r;
    r.dir = s_.dir;
    r.gpu = s_.baseline.gpu;
    r.baseline_commit = s_.baseline.commit;
    r.baseline_date = s_.baseline.date;
    r.options = o_;
    for (const auto& set : s_.sets) {
      r.set_commits.push_back({set.name, set.bench ? set.bench->commit + " (" + set.bench->date + ")" : "- (build failed)"});
      const size_t errors = diag_.errors().size();
      SetView v = view(set);
      if (diag_.errors().size() != errors) continue;  // inconsistent inputs: judged after they are fixed
      for (const auto& c : set.candidates) r.candidates.push_back(judge(set, c, v));
      r.scores.push_back(score(set.name, r.candidates));
    }
    return r;
  }

 private:
  /// What one set's candidates share: the candidate run's index, greedy check and e2e rows.
  struct SetView {
    RunIndex run;
    Finding stop;                              ///< why cases are missing (runs without a summary)
    std::map<std::string, std::set<std::string>> ancestors;  ///< by candidate task, up to the set's max_level
    std::vector<GreedyCheck> greedy;
    std::vector<TeacherForcedCheck> teacher;
    std::vector<EndToEnd> e2e;
  };

  /// (key -> record); duplicates are errors.
  std::map<std::string, const ModelRecord*> index_model(const ModelRun& run) {
    std::map<std::string, const ModelRecord*> out;
    for (const auto& r : run.records) {
      auto [it, fresh] = out.insert({r.key(), &r});
      if (!fresh)
        diag_.error(run.file + ":" + std::to_string(r.line) + ": expected each (arch, mode, batch, graph, seq_len) once, got " +
                    r.key() + " again (first at line " + std::to_string(it->second->line) + ")");
    }
    return out;
  }

  /// Checks `set` against the manifest, the baseline and itself; builds what its candidates share.
  SetView view(const CandidateSet& set) {
    SetView v;
    const std::string& st = set.status_file;
    std::set<std::string> expected_affected;
    const std::optional<std::regex> arch = arch_filter(set);
    bool known = true;
    for (size_t i = 0; i < set.candidates.size(); ++i) {
      const SetCandidate& c = set.candidates[i];
      const std::string path = st + ": $.candidates[" + std::to_string(i) + "]";
      auto t = g_.tasks.find(c.task);
      if (t == g_.tasks.end()) {
        diag_.error(path + ".task: expected a task of " + g_.file + ", got " + json_quote(c.task));
        known = false;
        continue;
      }
      if (t->second.level != c.level)
        diag_.error(path + ".level: expected " + std::to_string(t->second.level) + " (the level of " + c.task + " in " + g_.file +
                    "), got " + std::to_string(c.level));
      std::set<std::string>& anc = v.ancestors[c.task];
      for (const auto& a : g_.ancestors(c.task))
        if (g_.tasks.at(a).level <= set.max_level && of_arch(arch, a)) anc.insert(a);
      expected_affected.insert(anc.begin(), anc.end());
    }
    if (!known) return v;
    // `affected` lists the tasks run besides the candidates themselves.
    for (const auto& c : set.candidates) expected_affected.erase(c.task);
    const std::set<std::string> affected(set.affected.begin(), set.affected.end());
    std::vector<std::string> missing, extra;
    std::set_difference(expected_affected.begin(), expected_affected.end(), affected.begin(), affected.end(), std::back_inserter(missing));
    std::set_difference(affected.begin(), affected.end(), expected_affected.begin(), expected_affected.end(), std::back_inserter(extra));
    if (!missing.empty())
      diag_.error(st + ": $.affected: expected every task up to level " + std::to_string(set.max_level) +
                  " that includes a candidate (per " + g_.file + "), got none of: " + join(missing, ", "));
    if (!extra.empty())
      diag_.error(st + ": $.affected: expected only tasks up to level " + std::to_string(set.max_level) +
                  " that include a candidate and are no candidate themselves (per " + g_.file + "), got also: " + join(extra, ", "));

    std::vector<std::string> judged;  // candidate and affected tasks
    for (const auto& c : set.candidates) judged.push_back(c.task);
    judged.insert(judged.end(), expected_affected.begin(), expected_affected.end());
    for (const auto& t : judged)
      if (!base_.by_task.count(t))
        diag_.error(s_.baseline.file + ": expected the cases of " + t + " (a candidate or affected task of set " + set.name +
                    "), got none");
    if (set.bench) check_run(set, *set.bench, judged, v);
    for (const auto& g : set.greedy)
      if (auto check = greedy_check(set, g, v.run)) v.greedy.push_back(*check);
    for (const auto& t : set.teacher)
      if (auto check = teacher_check(set, t)) v.teacher.push_back(*check);
    v.e2e = end_to_end(set);
    return v;
  }

  // The architectures the set's runs selected ($.arch); nullopt: every architecture (none given, or an invalid one,
  // reported here).
  std::optional<std::regex> arch_filter(const CandidateSet& set) {
    if (set.arch.empty()) return std::nullopt;
    try {
      return std::regex(set.arch);
    } catch (const std::regex_error&) {
      diag_.error(set.status_file + ": $.arch: expected a regular expression, got " + json_quote(set.arch));
      return std::nullopt;
    }
  }
  // Whether task `t` belongs to an architecture `arch` selects.
  bool of_arch(const std::optional<std::regex>& arch, const std::string& t) const {
    if (!arch) return true;
    for (const auto& a : g_.tasks.at(t).archs)
      if (std::regex_search(a, *arch)) return true;
    return false;
  }

  void check_run(const CandidateSet& set, const BenchRun& run, const std::vector<std::string>& judged, SetView& v) {
    v.run = index_run(run, diag_);
    v.stop = stop_cause(run);
    for (const auto& c : run.cases)
      if (!base_.find(c.task, c.name))
        diag_.error(run.file + ":" + std::to_string(c.line) + ": $.case: expected a case the baseline ran, got " + c.task + "/" +
                    c.name + " (not in " + s_.baseline.file + ")");
    if (!run.candidate_tasks.empty()) {
      std::set<std::string> want, have(run.candidate_tasks.begin(), run.candidate_tasks.end());
      for (const auto& c : set.candidates) want.insert(c.task);
      if (want != have)
        diag_.error(run.file + ":" + std::to_string(run.env_line) + ": $.candidate_tasks: expected the candidates of " + set.status_file + " (" +
                    join({want.begin(), want.end()}, ", ") + "), got " + join({have.begin(), have.end()}, ", "));
    }
    if (run.gpu != s_.baseline.gpu)
      diag_.error(run.file + ":" + std::to_string(run.env_line) + ": $.gpu: expected the baseline's " + json_quote(s_.baseline.gpu) + ", got " +
                  json_quote(run.gpu) + " (speedups across GPUs mean nothing)");
    if (!run.has_summary) return;  // stopped early: the missing cases are NOT_RUN
    for (const auto& t : judged) {
      auto cases = base_.by_task.find(t);
      if (cases == base_.by_task.end()) continue;
      for (const BenchCase* b : cases->second)
        if (!v.run.find(t, b->name))
          diag_.error(run.file + ": expected a record of case " + t + "/" + b->name +
                      " (the run has a summary, so it ran to the end: it must run every case of the candidate and affected "
                      "tasks), got none");
    }
  }

  // Note [Near-tie bound]
  // A greedy divergence is a near-tie, accepted, when the baseline's top-2 gap g there is at most
  // a bound B. With `--tie-gap auto` (the default) B is measured for each greedy check of L4 task
  // T: E_run = the largest `max_abs_err` of the $.check.outputs and
  // $.recheck_after_timing.outputs entries named "logits" in T's case records of that run's
  // bench.jsonl, and B = 2 x (E_base + E_cand). Worst case: both runs'
  // logits are within E_base and E_cand of the same fp32 reference, so they differ by at most
  // D = E_base + E_cand per entry. The candidate picks another token k only if its logit of k
  // reaches its logit of the baseline's pick: l_k + D >= l_1 - D, and l_1 - l_k >= g (the
  // baseline's top-2 gap), so g <= 2 D. A divergence at a wider gap takes errors larger than
  // either run showed in its own check: INCORRECT. B comes from the L4 checks at their own shapes (batches, kv lengths), not from
  // the greedy run's context: it is as good as those shapes are representative. Where a run has no
  // such record (T not benched, records without a logits output, or a null error), B falls back to
  // kFallbackTieGap and the check says why; `--tie-gap N` fixes B = N for every check.

  /// The bound for a greedy check of `task` (Note [Near-tie bound]), into gc.
  void near_tie_bound(const CandidateSet& set, const std::string& task, const RunIndex& cand, GreedyCheck& gc) const {
    if (o_.tie_gap) {
      gc.tie_gap = *o_.tie_gap;
      gc.tie_gap_source = "fixed";
      return;
    }
    std::vector<std::string> none, nonfinite;  // files without a usable error
    auto largest = [&](const RunIndex& run, const std::string& file) -> std::optional<double> {
      std::optional<double> e;
      bool finite = true;
      auto it = run.by_task.find(task);
      if (it != run.by_task.end())
        for (const BenchCase* c : it->second)
          for (const auto& err : c->logits_errors) {
            if (!err) finite = false;
            else if (!e || *err > *e) e = *err;
          }
      if (!finite) {
        nonfinite.push_back(file);
        return std::nullopt;
      }
      if (!e) none.push_back(file);
      return e;
    };
    gc.baseline_logits_err = largest(base_, "baseline/bench.jsonl");
    gc.candidate_logits_err = largest(cand, set.name + "/bench.jsonl");
    if (gc.baseline_logits_err && gc.candidate_logits_err) {
      gc.tie_gap = 2 * (*gc.baseline_logits_err + *gc.candidate_logits_err);
      gc.tie_gap_source = "auto: 2 x (" + fixed(*gc.baseline_logits_err, 3) + " + " + fixed(*gc.candidate_logits_err, 3) +
                          ") from the L4 checks against fp32";
      return;
    }
    gc.baseline_logits_err.reset();
    gc.candidate_logits_err.reset();
    std::vector<std::string> why;
    if (!none.empty()) why.push_back("no L4 check of " + task + " in " + join(none, " and "));
    if (!nonfinite.empty()) why.push_back("a non-finite logits error in the L4 check of " + task + " in " + join(nonfinite, " and "));
    gc.tie_gap = kFallbackTieGap;
    gc.tie_gap_source = "fixed: " + join(why, "; ");
  }

  /// The baseline's run of `c`'s architecture among `runs` (of kind `what`), or nullptr and a message.
  template <class Run>
  const Run* baseline_run(const std::vector<Run>& runs, const Run& c, const std::string& what, const CandidateSet& set) {
    std::vector<std::string> archs;
    for (const auto& b : runs) {
      if (b.arch == c.arch) return &b;
      archs.push_back(json_quote(b.arch));
    }
    diag_.error(c.file + ": $.arch: expected an architecture of the baseline's " + what + " runs (" +
                (archs.empty() ? "none in " + s_.dir + "/baseline/" : join(archs, ", ")) + ") to compare with, got " +
                json_quote(c.arch) + " (set " + set.name + ")");
    return nullptr;
  }

  /// The candidate's greedy run `c` against the baseline's run of the same architecture; `cand`
  /// indexes the candidate's bench.jsonl (for the near-tie bound).
  std::optional<GreedyCheck> greedy_check(const CandidateSet& set, const GreedyRun& c, const RunIndex& cand) {
    const GreedyRun* base = baseline_run(s_.baseline_greedy, c, "greedy", set);
    if (!base) return std::nullopt;
    const GreedyRun& b = *base;
    const size_t errors = diag_.errors().size();
    auto differ = [&](const std::string& path, const std::string& want, const std::string& have) {
      if (want != have) diag_.error(c.file + ": " + path + ": expected the baseline's " + want + ", got " + have);
    };
    differ("$.task", json_quote(b.task), json_quote(c.task));
    differ("$.layers", std::to_string(b.layers), std::to_string(c.layers));
    differ("$.steps", std::to_string(b.steps), std::to_string(c.steps));
    differ("$.sequences", std::to_string(b.sequences.size()) + " sequences", std::to_string(c.sequences.size()) + " sequences");
    for (size_t j = 0; j < std::min(b.sequences.size(), c.sequences.size()); ++j)
      differ("$.sequences[" + std::to_string(j) + "].prompt_len", std::to_string(b.sequences[j].prompt_len),
             std::to_string(c.sequences[j].prompt_len));
    if (!g_.tasks.count(b.task)) diag_.error(b.file + ": $.task: expected a task of " + g_.file + ", got " + json_quote(b.task));
    if (diag_.errors().size() != errors) return std::nullopt;
    GreedyCheck gc;
    gc.arch = b.arch;
    gc.task = b.task;
    gc.outcome = "match";
    near_tie_bound(set, b.task, cand, gc);
    for (size_t j = 0; j < b.sequences.size(); ++j) {
      const GreedySequence& bs = b.sequences[j];
      const GreedySequence& cs = c.sequences[j];
      GreedySequenceCheck q;
      q.outcome = "match";
      q.total = static_cast<int64_t>(bs.tokens.size());
      q.matched = q.total;
      for (size_t i = 0; i < bs.tokens.size(); ++i) {
        if (cs.tokens[i] == bs.tokens[i]) continue;
        // Past the first difference the two runs condition on different prefixes: nothing later compares.
        q.matched = static_cast<int64_t>(i);
        q.step = static_cast<int64_t>(i);
        q.gap = bs.gaps[i];
        q.outcome = bs.gaps[i] <= gc.tie_gap ? "near-tie" : "INCORRECT";
        break;
      }
      if (q.outcome == "INCORRECT") gc.outcome = "INCORRECT";
      else if (q.outcome == "near-tie" && gc.outcome == "match") gc.outcome = "near-tie";
      gc.matched += q.matched;
      gc.total += q.total;
      gc.sequences.push_back(q);
    }
    return gc;
  }

  // Note [Teacher-forced bound]
  // Both runs fed the same tokens at every step and scored every step's logits row r = (sequence,
  // step) against the same composite fp32 reference (Note [Teacher-forced check] in
  // runtime/runner/model_main.cu): e_B(r), e_C(r) are the relative L2 errors of the baseline's and
  // the candidate's rows. The reference is a function of the weights, prompts and forced tokens
  // alone, so its top token and logit must agree row for row; where they do not, the candidate run
  // changed the weights or inputs under it (INCORRECT). The bound of each row is the baseline's
  // own error at that row: same depth, batch, position, KV length and graph setting. The candidate
  // is INCORRECT when
  //   (a) a row's error is not finite;
  //   (b) RMS_r e_C(r) > 1.3 RMS_r e_B(r), over the rows less the allowed outliers of (c) (those
  //       where e_C - e_B is largest, so that one bad row cannot swamp the mean): on the whole its
  //       logits are 30% further from fp32 than the baseline's. Two honest builds round at the same
  //       points (bf16 activations between the same operators) and differ in accumulation order,
  //       which leaves the error's size about the same: measured 0.88-1.00 for the honest norm and
  //       flash-decode candidates on Llama-3.1-8B, Mistral-7B and Qwen2.5-7B at 4 layers (H100,
  //       bench/results/2026-11-26-h100-teacher-forced/). A corruption that each L1 check tolerates
  //       (bad_layer_drift: a +-0.7% per-channel scale in the norm, within the L1 tolerance)
  //       compounds over the layers: 1.55 there, while its greedy tokens diverge only at top-2 gaps
  //       of 0.03 or less, which the greedy check accepts;
  //   (c) more than max(1, 2% of the rows) rows have e_C(r) > 3 e_B(r) + 0.002: damage to some steps,
  //       positions or sequences only, which the RMS dilutes. The allowance absorbs the rows where
  //       one build routes a token to another expert than fp32 does (an MoE router near-tie: the
  //       reference adopts no routing, so on MoE models these rows dominate the RMS, and (c) is
  //       what judges; Mixtral at 4 layers: 3 outlier rows for the honest norm, 10 for
  //       bad_layer_drift, 5 allowed of 260).
  // The measured ratios of honest candidates are in bench/results (docs/candidates.md).

  /// The candidate's teacher-forced run `c` against the baseline's run of the same architecture.
  std::optional<TeacherForcedCheck> teacher_check(const CandidateSet& set, const TeacherForcedRun& c) {
    const TeacherForcedRun* base = baseline_run(s_.baseline_teacher, c, "teacher-forced", set);
    if (!base) return std::nullopt;
    const TeacherForcedRun& b = *base;
    const size_t errors = diag_.errors().size();
    auto differ = [&](const std::string& path, const std::string& want, const std::string& have) {
      if (want != have) diag_.error(c.file + ": " + path + ": expected the baseline's " + want + ", got " + have);
    };
    differ("$.task", json_quote(b.task), json_quote(c.task));
    differ("$.layers", std::to_string(b.layers), std::to_string(c.layers));
    differ("$.steps", std::to_string(b.steps), std::to_string(c.steps));
    differ("$.seed", std::to_string(b.seed), std::to_string(c.seed));
    differ("$.graph", b.graph ? "true" : "false", c.graph ? "true" : "false");
    differ("$.sequences", std::to_string(b.sequences.size()) + " sequences", std::to_string(c.sequences.size()) + " sequences");
    for (size_t j = 0; j < std::min(b.sequences.size(), c.sequences.size()); ++j) {
      const std::string at = "$.sequences[" + std::to_string(j) + "]";
      differ(at + ".prompt_len", std::to_string(b.sequences[j].prompt_len), std::to_string(c.sequences[j].prompt_len));
      if (b.sequences[j].tokens != c.sequences[j].tokens)
        diag_.error(c.file + ": " + at + ".tokens: expected the tokens the baseline was fed (both runs force the baseline's greedy "
                    "tokens), got others");
    }
    if (!g_.tasks.count(b.task)) diag_.error(b.file + ": $.task: expected a task of " + g_.file + ", got " + json_quote(b.task));
    if (diag_.errors().size() != errors) return std::nullopt;
    TeacherForcedCheck tc;
    tc.arch = b.arch;
    tc.task = b.task;
    struct Row {
      double eb, ec;
      int64_t seq, step;
    };
    std::vector<Row> rows;  // rows where both errors are finite
    for (size_t j = 0; j < b.sequences.size(); ++j) {
      const TeacherForcedSequence& bs = b.sequences[j];
      const TeacherForcedSequence& cs = c.sequences[j];
      for (size_t r = 0; r < bs.rel_l2.size(); ++r) {
        ++tc.rows;
        const double top_tol = 1e-3 * std::max(1.0, std::abs(bs.ref_top_logit[r]));
        if (bs.ref_top[r] != cs.ref_top[r] || std::abs(bs.ref_top_logit[r] - cs.ref_top_logit[r]) > top_tol) ++tc.reference_mismatches;
        if (!cs.rel_l2[r]) ++tc.nonfinite_rows;
        else if (bs.rel_l2[r])  // where the baseline's own row is broken, nothing holds the candidate's
          rows.push_back({*bs.rel_l2[r], *cs.rel_l2[r], static_cast<int64_t>(j), static_cast<int64_t>(r)});
      }
    }
    tc.allowed_outliers = std::max<int64_t>(1, static_cast<int64_t>(kTeacherOutlierShare * double(tc.rows)));
    // Largest excess over the baseline first; the allowed outliers are left out of the RMS.
    std::stable_sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.ec - x.eb > y.ec - y.eb; });
    double sb = 0, sc = 0;
    int64_t kept = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].ec > kTeacherRowRatio * rows[i].eb + kTeacherRowFloor) ++tc.outliers;
      if (static_cast<int64_t>(i) < tc.allowed_outliers) continue;
      sb += rows[i].eb * rows[i].eb;
      sc += rows[i].ec * rows[i].ec;
      ++kept;
    }
    if (!rows.empty()) {
      tc.worst_sequence = rows[0].seq;
      tc.worst_step = rows[0].step;
      tc.worst_candidate = rows[0].ec;
      tc.worst_baseline = rows[0].eb;
    }
    tc.baseline_rms = kept ? std::sqrt(sb / double(kept)) : 0;
    tc.candidate_rms = kept ? std::sqrt(sc / double(kept)) : 0;
    if (tc.baseline_rms > 0) tc.ratio = tc.candidate_rms / tc.baseline_rms;
    std::vector<std::string> why;
    const std::string where = " (" + b.task + ", " + std::to_string(tc.rows) + " rows)";
    if (tc.reference_mismatches > 0)
      why.push_back("the fp32 reference differs from the baseline's at " + std::to_string(tc.reference_mismatches) +
                    " rows: the candidate run changed the weights or inputs under it");
    if (tc.nonfinite_rows > 0) why.push_back(std::to_string(tc.nonfinite_rows) + " rows with a non-finite error");
    if (tc.ratio && *tc.ratio > kTeacherRmsRatio)
      why.push_back("RMS relative L2 error " + fixed(tc.candidate_rms, 4) + " vs the baseline's " + fixed(tc.baseline_rms, 4) + " (" +
                    fixed(*tc.ratio, 2) + "x > " + fixed(kTeacherRmsRatio, 1) + "x)");
    if (tc.outliers > tc.allowed_outliers)
      why.push_back(std::to_string(tc.outliers) + " rows beyond 3 x the baseline's error + 0.002 (at most " +
                    std::to_string(tc.allowed_outliers) + " allowed); worst: sequence " + std::to_string(tc.worst_sequence) + " step " +
                    std::to_string(tc.worst_step) + ", " + fixed(tc.worst_candidate, 4) + " vs " + fixed(tc.worst_baseline, 4));
    tc.outcome = why.empty() ? "match" : "INCORRECT";
    if (!why.empty()) tc.message = "teacher-forced logits: " + join(why, "; ") + where;
    return tc;
  }

  std::vector<EndToEnd> end_to_end(const CandidateSet& set) {
    std::vector<EndToEnd> out;
    if (!set.model) return out;
    if (!s_.baseline_model) {
      diag_.error(s_.dir + "/baseline/model.jsonl: cannot read (set " + set.name + " has a model.jsonl to compare with it)");
      return out;
    }
    const auto cand = index_model(*set.model);
    for (const auto& [key, c] : cand) {
      const std::string where = set.model->file + ":" + std::to_string(c->line);
      auto b = base_model_.find(key);
      if (b == base_model_.end()) {
        diag_.error(where + ": expected a record the baseline has, got " + key + " (not in " + s_.baseline_model->file + ")");
        continue;
      }
      if (b->second->task != c->task) {
        diag_.error(where + ": $.task: expected the baseline's " + json_quote(b->second->task) + " for " + key + ", got " + json_quote(c->task));
        continue;
      }
      if (!g_.tasks.count(c->task)) {
        diag_.error(where + ": $.task: expected a task of " + g_.file + ", got " + json_quote(c->task));
        continue;
      }
      EndToEnd e;
      e.key = key;
      e.task = c->task;
      e.baseline_tokens_per_s = b->second->tokens_per_s;
      e.candidate_tokens_per_s = c->tokens_per_s;
      e.speedup = c->tokens_per_s / b->second->tokens_per_s;
      e.decode_b1_graph = c->mode == "decode" && c->batch == 1 && c->graph.value_or(false);
      out.push_back(e);
    }
    return out;
  }

  /// " (shared: ...)" when the failing `task` includes several candidates of the set, so each of
  /// them gets the status (nothing tells which one broke it).
  static std::string shared_note(const CandidateSet& set, const SetView& v, const std::string& task) {
    std::vector<std::string> feeders;
    for (const auto& c : set.candidates)
      if (c.task == task || v.ancestors.at(c.task).count(task)) feeders.push_back(c.task);
    if (feeders.size() < 2) return "";
    return " (shared: " + task + " includes " + std::to_string(feeders.size()) + " candidates of set " + set.name + ": " +
           join(feeders, ", ") + ")";
  }

  CandidateResult judge(const CandidateSet& set, const SetCandidate& cand, const SetView& v) const {
    CandidateResult r;
    r.set = set.name;
    r.task = cand.task;
    r.file = cand.file;
    r.level = cand.level;
    const StaticCheck& st = set.statics.at(cand.task);
    r.flags = st.flags;
    const std::set<std::string>& ancestors = v.ancestors.at(cand.task);
    std::vector<Finding> findings;
    if (st.verdict == "INTERFACE_MISMATCH" || st.verdict == "COMPILE_ERROR")
      findings.push_back({st.verdict, "static check: " + st.verdict + exit_text(st) + ": " + first_error_line(st.diagnostics)});
    if (!set.build_ok) {
      std::string shared;
      if (set.candidates.size() > 1) {
        std::vector<std::string> all;
        for (const auto& c : set.candidates) all.push_back(c.task);
        shared = " (shared: the build of set " + set.name + " holds " + std::to_string(all.size()) + " candidates: " + join(all, ", ") + ")";
      }
      findings.push_back({"COMPILE_ERROR", "build of set " + set.name + " failed: " + build_log_line(set.build_log, cand.file) + shared});
    }

    // Own cases, baseline order; a case the candidate run lacks is NOT_RUN.
    std::vector<std::string> not_run;
    std::vector<double> ratios;
    for (const BenchCase* b : base_.by_task.at(cand.task)) {
      CaseResult c;
      c.task = b->task, c.name = b->name, c.regime = b->regime;
      c.baseline_status = b->status;
      c.baseline_us = b->median_us;
      const BenchCase* k = set.bench ? v.run.find(b->task, b->name) : nullptr;
      if (!k) {
        c.status = "NOT_RUN";
        c.message = set.bench ? v.stop.message : "no candidate run (the build failed)";
        if (set.bench) not_run.push_back(b->task + "/" + b->name);
      } else {
        c.status = k->status, c.reason = k->reason, c.message = k->message;
        c.candidate_us = k->median_us;
        // A speedup only where both runs passed every check of the case (a timed but failed or
        // INFRA_ERROR case is no result).
        if (c.baseline_us && c.candidate_us && k->status == "PASSED" && b->status == "PASSED") {
          c.speedup = *c.baseline_us / *c.candidate_us;
          ratios.push_back(*c.speedup);
        }
        if (k->status == "SKIPPED" && b->status != "SKIPPED")
          findings.push_back({"RUNTIME_ERROR", "case " + k->name + ": SKIPPED in the candidate run but run by the baseline" +
                                                   (k->message.empty() ? "" : ": " + k->message)});
        else if (k->status != "PASSED" && k->status != "SKIPPED")
          findings.push_back({k->status, "case " + k->name + ": " + case_outcome(*k)});
        if (b->status == "INFRA_ERROR" && k->status != "INFRA_ERROR")
          findings.push_back({"INFRA_ERROR", "case " + b->name + ": the baseline's run of it ended in INFRA_ERROR, so it has no result to compare"});
      }
      r.cases.push_back(c);
    }
    r.speedup = summarize(ratios);

    // Tasks that include the candidate: failures the baseline does not have, and the effect per level.
    std::vector<Finding> affected;
    for (int level = 2; level <= 4; ++level) {
      LevelEffect e;
      e.level = level;
      std::vector<double> level_ratios;
      for (const auto& t : ancestors) {
        if (g_.tasks.at(t).level != level) continue;
        e.tasks.push_back(t);
        if (!set.bench) continue;
        for (const BenchCase* b : base_.by_task.at(t)) {
          const BenchCase* k = v.run.find(t, b->name);
          if (!k) {
            not_run.push_back(t + "/" + b->name);
            continue;
          }
          if (b->median_us && k->median_us && b->status == "PASSED" && k->status == "PASSED")
            level_ratios.push_back(*b->median_us / *k->median_us);
          std::string status;  // what this case says about the candidate
          if ((k->status == "INCORRECT" || k->status == "RUNTIME_ERROR") && b->status == "PASSED") status = "INCORRECT";
          else if ((k->status == "TIMEOUT" || k->status == "SUSPECT") && b->status != k->status) status = k->status;
          else if ((k->status == "INFRA_ERROR" || b->status == "INFRA_ERROR") && k->status != b->status) status = "INFRA_ERROR";
          if (!status.empty())
            affected.push_back({status, "L" + std::to_string(level) + " task " + t + ", case " + k->name + ": " + case_outcome(*k) +
                                            " (the baseline " + b->status + ")" + shared_note(set, v, t)});
        }
      }
      e.speedup = summarize(level_ratios);
      if (!e.tasks.empty()) r.effects.push_back(e);
    }
    if (!not_run.empty())
      findings.push_back({v.stop.status, std::to_string(not_run.size()) + " case(s) not run (first: " + not_run.front() + "): " + v.stop.message});
    findings.insert(findings.end(), affected.begin(), affected.end());

    for (const auto& gc : v.greedy) {
      if (gc.task != cand.task && !ancestors.count(gc.task)) continue;
      r.greedy.push_back(gc);
      for (size_t j = 0; j < gc.sequences.size(); ++j) {
        const GreedySequenceCheck& q = gc.sequences[j];
        if (q.outcome != "INCORRECT") continue;
        findings.push_back({"INCORRECT", "greedy token differs at step " + std::to_string(*q.step) + " of sequence " + std::to_string(j) +
                                             " where the baseline's top-2 gap is " + gap_text(*q.gap) + " > " +
                                             bound_text(gc) + " (" + gc.task + ")" + shared_note(set, v, gc.task)});
        break;
      }
    }

    for (const auto& tc : v.teacher) {
      if (tc.task != cand.task && !ancestors.count(tc.task)) continue;
      r.teacher.push_back(tc);
      if (tc.outcome == "INCORRECT") findings.push_back({"INCORRECT", tc.message + shared_note(set, v, tc.task)});
    }

    std::vector<double> decode_b1;
    for (const auto& e : v.e2e)
      if (e.task == cand.task || ancestors.count(e.task)) {
        r.e2e.push_back(e);
        if (e.decode_b1_graph) decode_b1.push_back(e.speedup);
      }
    r.e2e_decode_b1 = summarize(decode_b1).geomean;

    if (st.verdict == "SUSPECT")
      findings.push_back({"SUSPECT", "static check: SUSPECT" + exit_text(st) + ", flags: " +
                                         (st.flags.empty() ? "none recorded" : join(st.flags, ", "))});

    std::stable_sort(findings.begin(), findings.end(),
                     [](const Finding& a, const Finding& b) { return severity(a.status) < severity(b.status); });
    r.findings = findings;
    r.status = findings.empty() ? "PASSED" : findings.front().status;
    if (!findings.empty())
      r.reason = findings.front().message + (findings.size() > 1 ? " (+" + std::to_string(findings.size() - 1) + " more)" : "");
    return r;
  }

  // Note [Score]
  // The score is computed per candidate set, over that set's candidates only: a set is one
  // alternative (one version of some kernels, or a suite of known-bad candidates), so several sets
  // may hold a candidate for the same task, and each set's score counts it once (load_set allows
  // a task once per set). For each family F (a descriptor basename; a task belongs to the families
  // of the archs that use it) with at least one task within --scope:
  //   tasks(F)   = F's tasks within scope;  attempted = the set's candidate tasks in tasks(F)
  //   correct    = attempted whose final status is PASSED (SUSPECT, INCORRECT, ... are not)
  //   speedup    = geometric mean of the correct candidates' task speedups (none if none correct)
  //   fraction   = correct / attempted;   coverage = attempted / |tasks(F)|
  //   score(F)   = speedup x fraction x coverage   (0 when nothing is correct)
  // The set's overall score is the mean of score(F); a family with nothing attempted scores 0 and
  // counts.
  SetScore score(const std::string& set, const std::vector<CandidateResult>& candidates) const {
    SetScore r;
    r.set = set;
    double sum = 0;
    for (const auto& f : g_.families) {
      FamilyScore fam;
      fam.family = f;
      std::set<std::string> in_scope;
      for (const auto& [name, t] : g_.tasks)
        if ((o_.scope_level == 0 || t.level == o_.scope_level) && std::count(t.families.begin(), t.families.end(), f))
          in_scope.insert(name);
      if (in_scope.empty()) continue;
      fam.tasks = static_cast<int>(in_scope.size());
      std::vector<double> speedups;
      for (const auto& c : candidates) {
        if (c.set != set || !in_scope.count(c.task)) continue;
        fam.attempted_tasks.push_back(c.task);
        if (c.status != "PASSED") continue;
        ++fam.correct;
        if (c.speedup.geomean) speedups.push_back(*c.speedup.geomean);
      }
      std::sort(fam.attempted_tasks.begin(), fam.attempted_tasks.end());
      const double attempted = static_cast<double>(fam.attempted_tasks.size());
      if (attempted > 0) fam.fraction_correct = fam.correct / attempted;
      fam.coverage = attempted / fam.tasks;
      fam.speedup = summarize(speedups).geomean;
      fam.score = fam.speedup ? *fam.speedup * *fam.fraction_correct * fam.coverage : 0.0;
      sum += fam.score;
      r.families.push_back(fam);
    }
    r.score = r.families.empty() ? 0.0 : sum / r.families.size();
    return r;
  }

  const Session& s_;
  const TaskGraph& g_;
  const Options& o_;
  Diagnostics& diag_;
  const RunIndex base_;
  std::map<std::string, const ModelRecord*> base_model_;
};

}  // namespace

bool Report::all_passed() const {
  return std::all_of(candidates.begin(), candidates.end(), [](const CandidateResult& c) { return c.status == "PASSED"; });
}

const SetScore* Report::score_of(const std::string& set) const {
  for (const auto& s : scores)
    if (s.set == set) return &s;
  return nullptr;
}

std::string scope_name(int scope_level) { return scope_level == 0 ? "all" : "L" + std::to_string(scope_level); }

Report evaluate(const Session& s, const TaskGraph& g, const Options& o, Diagnostics& diag) {
  return Evaluator(s, g, o, diag).run();
}

// ---- render ------------------------------------------------------------------------------------

namespace {

std::string ratio_cell(const std::optional<double>& x) { return x ? fixed(*x, 3) + "x" : "-"; }

std::string speedup_cell(const Speedup& s) {
  if (!s.geomean) return "-";
  return fixed(*s.geomean, 3) + "x (" + fixed(*s.min, 3) + "-" + fixed(*s.max, 3) + ")";
}

/// "<L2>/<L3>/<L4>": "-" where no task of that level includes the candidate, "untimed" where no
/// case of those tasks was timed in both runs.
std::string effects_cell(const CandidateResult& c) {
  std::vector<std::string> cells;
  for (int level = 2; level <= 4; ++level) {
    std::string cell = "-";
    for (const auto& e : c.effects)
      if (e.level == level) cell = e.speedup.geomean ? fixed(*e.speedup.geomean, 3) + "x" : "untimed";
    cells.push_back(cell);
  }
  return join(cells, "/");
}

/// Over every model that includes the candidate: INCORRECT if any, else near-tie if any, else
/// match; then matched / total tokens.
std::string greedy_cell(const CandidateResult& c) {
  if (c.greedy.empty()) return "-";
  std::string outcome = "match";
  int64_t matched = 0, total = 0;
  for (const auto& g : c.greedy) {
    if (g.outcome == "INCORRECT" || (g.outcome == "near-tie" && outcome == "match")) outcome = g.outcome;
    matched += g.matched;
    total += g.total;
  }
  return outcome + " " + std::to_string(matched) + "/" + std::to_string(total);
}

/// Over every model that includes the candidate: INCORRECT if any, else match; then the largest
/// RMS error ratio to the baseline (Note [Teacher-forced bound]).
std::string teacher_cell(const CandidateResult& c) {
  if (c.teacher.empty()) return "-";
  std::string outcome = "match";
  std::optional<double> ratio;
  for (const auto& t : c.teacher) {
    if (t.outcome == "INCORRECT") outcome = t.outcome;
    if (t.ratio && (!ratio || *t.ratio > *ratio)) ratio = t.ratio;
  }
  return outcome + (ratio ? " " + fixed(*ratio, 2) + "x" : "");
}

std::vector<std::string> candidate_row(const CandidateResult& c) {
  return {c.set, c.task, std::to_string(c.level), c.status, speedup_cell(c.speedup), effects_cell(c), greedy_cell(c),
          teacher_cell(c), ratio_cell(c.e2e_decode_b1), c.reason};
}

const std::vector<std::string> kCandidateHeader = {"candidate", "task", "level", "status", "speedup geomean (min-max)",
                                                   "L2/L3/L4 effect", "greedy", "teacher-forced", "e2e decode b1", "reason"};

std::string fraction_cell(const FamilyScore& f) {
  return (f.fraction_correct ? fixed(*f.fraction_correct, 3) : "-") + " (" + std::to_string(f.correct) + "/" +
         std::to_string(f.attempted_tasks.size()) + ")";
}

std::string coverage_cell(const FamilyScore& f) {
  return fixed(f.coverage, 3) + " (" + std::to_string(f.attempted_tasks.size()) + "/" + std::to_string(f.tasks) + ")";
}

/// The candidates of `set`, or of every set when `set` is empty (report order).
std::vector<const CandidateResult*> candidates_of(const Report& r, const std::string& set = "") {
  std::vector<const CandidateResult*> out;
  for (const auto& c : r.candidates)
    if (set.empty() || c.set == set) out.push_back(&c);
  return out;
}

bool all_passed(const std::vector<const CandidateResult*>& cands) {
  return std::all_of(cands.begin(), cands.end(), [](const CandidateResult* c) { return c->status == "PASSED"; });
}

std::string status_counts(const std::vector<const CandidateResult*>& cands) {
  std::map<int, std::pair<std::string, int>> counts;
  for (const CandidateResult* c : cands) {
    auto& e = counts[severity(c->status)];
    e.first = c->status;
    ++e.second;
  }
  std::vector<std::string> parts;
  for (auto it = counts.rbegin(); it != counts.rend(); ++it) parts.push_back(std::to_string(it->second.second) + " " + it->second.first);
  return std::to_string(cands.size()) + " candidate(s): " + join(parts, ", ");
}

/// "(mean over 2 families)"
std::string mean_over(const SetScore& s) {
  return "(mean over " + std::to_string(s.families.size()) + " famil" + (s.families.size() == 1 ? "y" : "ies") + ")";
}

std::string set_commit(const Report& r, const std::string& set) {
  for (const auto& [name, commit] : r.set_commits)
    if (name == set) return commit;
  return "-";
}

/// The --tie-gap setting in words (markdown header).
std::string tie_gap_option(const Options& o) {
  if (o.tie_gap) return canonical_double(*o.tie_gap) + " logits (fixed, --tie-gap)";
  return "auto (per greedy check: 2 x the largest logits errors of the baseline's and the candidate's L4 checks "
         "against fp32; " + canonical_double(kFallbackTieGap) + " where a run has none)";
}

/// One line per greedy check of each set (a set's check is shown once, not per candidate):
/// "set s, org/llama-tiny (model_l): near-tie bound 0.632 (auto: ...): near-tie 7/10".
std::vector<std::string> bound_lines(const Report& r) {
  std::vector<std::string> out;
  std::set<std::pair<std::string, std::string>> seen;  // (set, arch)
  for (const auto& c : r.candidates)
    for (const auto& g : c.greedy)
      if (seen.insert({c.set, g.arch}).second)
        out.push_back("set " + c.set + ", " + g.arch + ": " + bound_text(g) + ": " + g.outcome + " " +
                      std::to_string(g.matched) + "/" + std::to_string(g.total));
  return out;
}

/// One line per teacher-forced check of each set: "set s, org/llama-tiny (model_l): match, RMS
/// relative L2 0.0061 vs 0.0059 (1.03x), 1 of 260 rows beyond 3x + 0.002 (5 allowed)".
std::vector<std::string> teacher_lines(const Report& r) {
  std::vector<std::string> out;
  std::set<std::pair<std::string, std::string>> seen;  // (set, arch)
  for (const auto& c : r.candidates)
    for (const auto& t : c.teacher)
      if (seen.insert({c.set, t.arch}).second)
        out.push_back("set " + c.set + ", " + t.arch + ": " + t.outcome + ", RMS relative L2 " + fixed(t.candidate_rms, 4) + " vs " +
                      fixed(t.baseline_rms, 4) + (t.ratio ? " (" + fixed(*t.ratio, 2) + "x)" : "") + ", " + std::to_string(t.outliers) +
                      " of " + std::to_string(t.rows) + " rows beyond 3x + 0.002 (" + std::to_string(t.allowed_outliers) + " allowed)");
  return out;
}

using ojson = nlohmann::ordered_json;  // keeps "type" first in each record

ojson opt(const std::optional<double>& x) { return x ? ojson(*x) : ojson(nullptr); }

ojson speedup_json(const Speedup& s) {
  return {{"geomean", opt(s.geomean)}, {"min", opt(s.min)}, {"max", opt(s.max)}, {"cases", s.cases}};
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

std::string md_row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const auto& c : cells) out += " " + md_escape(c) + " |";
  return out + "\n";
}

}  // namespace

std::string render_terminal(const Report& r) {
  std::ostringstream out;
  out << "fastkernels compare " << r.dir << ": gpu " << r.gpu << "; baseline " << r.baseline_commit << " (" << r.baseline_date << ")\n";
  for (const auto& [set, commit] : r.set_commits) out << "  set " << set << ": " << commit << "\n";
  out << "\n";
  std::vector<std::vector<std::string>> rows = {kCandidateHeader};
  for (const auto& c : r.candidates) rows.push_back(candidate_row(c));
  std::vector<size_t> width(kCandidateHeader.size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t i = 0; i < row.size(); ++i) {
      s += row[i];
      if (i + 1 < row.size()) s += std::string(width[i] - row[i].size(), ' ') + " | ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(rows[0]);
  std::vector<std::string> rule;
  for (size_t i = 0; i < width.size(); ++i) rule.push_back(std::string(i + 1 < width.size() ? width[i] : kCandidateHeader.back().size(), '-'));
  line(rule);
  for (size_t i = 1; i < rows.size(); ++i) line(rows[i]);
  out << "\n" << status_counts(candidates_of(r)) << "\n";
  const auto bounds = bound_lines(r);
  if (!bounds.empty()) {
    out << "\ngreedy near-tie bound per check (--tie-gap " << (r.options.tie_gap ? canonical_double(*r.options.tie_gap) : "auto") << "):\n";
    for (const auto& line : bounds) out << "  " << line << "\n";
  }
  const auto teacher = teacher_lines(r);
  if (!teacher.empty()) {
    out << "\nteacher-forced logits per check (Note [Teacher-forced bound]):\n";
    for (const auto& line : teacher) out << "  " << line << "\n";
  }
  out << "\nscore per candidate set, over its own candidates (scope " << scope_name(r.options.scope_level)
      << "): family score = speedup x fraction correct x coverage\n";
  for (const auto& sc : r.scores) {
    out << "\nset " << sc.set << ": " << status_counts(candidates_of(r, sc.set)) << "\n";
    for (const auto& f : sc.families)
      out << "  " << f.family << ": " << fixed(f.score, 3) << " = " << (f.speedup ? fixed(*f.speedup, 3) : "-") << " x "
          << fraction_cell(f) << " x " << coverage_cell(f) << "\n";
    out << "  overall score of set " << sc.set << ": " << fixed(sc.score, 3) << " " << mean_over(sc) << "\n";
  }
  return out.str();
}

std::string render_jsonl(const Report& r) {
  std::string out;
  for (const auto& c : r.candidates) {
    ojson j = {{"type", "candidate"}, {"set", c.set}, {"task", c.task}, {"level", c.level}, {"file", c.file},
               {"status", c.status},  {"reason", c.reason}};
    ojson findings = ojson::array();
    for (const auto& f : c.findings) findings.push_back({{"status", f.status}, {"message", f.message}});
    j["findings"] = findings;
    j["flags"] = c.flags;
    j["speedup"] = speedup_json(c.speedup);
    ojson effects = ojson::array();
    for (const auto& e : c.effects) effects.push_back({{"level", e.level}, {"tasks", e.tasks}, {"speedup", speedup_json(e.speedup)}});
    j["effects"] = effects;
    ojson greedy = ojson::array();
    for (const auto& g : c.greedy) {
      ojson seqs = ojson::array();
      for (const auto& q : g.sequences)
        seqs.push_back({{"outcome", q.outcome}, {"matched", q.matched}, {"total", q.total},
                        {"step", q.step ? ojson(*q.step) : ojson(nullptr)}, {"gap", opt(q.gap)}});
      greedy.push_back({{"arch", g.arch}, {"task", g.task}, {"outcome", g.outcome}, {"matched", g.matched},
                        {"total", g.total}, {"tie_gap", g.tie_gap}, {"tie_gap_source", g.tie_gap_source},
                        {"baseline_logits_err", opt(g.baseline_logits_err)},
                        {"candidate_logits_err", opt(g.candidate_logits_err)}, {"sequences", seqs}});
    }
    j["greedy"] = greedy;
    ojson teacher = ojson::array();
    for (const auto& t : c.teacher)
      teacher.push_back({{"arch", t.arch}, {"task", t.task}, {"outcome", t.outcome}, {"message", t.message}, {"rows", t.rows},
                         {"baseline_rms", t.baseline_rms}, {"candidate_rms", t.candidate_rms}, {"ratio", opt(t.ratio)},
                         {"outliers", t.outliers}, {"allowed_outliers", t.allowed_outliers},
                         {"reference_mismatches", t.reference_mismatches}, {"nonfinite_rows", t.nonfinite_rows},
                         {"worst", {{"sequence", t.worst_sequence}, {"step", t.worst_step}, {"candidate", t.worst_candidate},
                                    {"baseline", t.worst_baseline}}}});
    j["teacher_forced"] = teacher;
    ojson e2e = ojson::array();
    for (const auto& e : c.e2e)
      e2e.push_back({{"key", e.key}, {"task", e.task}, {"baseline_tokens_per_s", e.baseline_tokens_per_s},
                     {"candidate_tokens_per_s", e.candidate_tokens_per_s}, {"speedup", e.speedup}});
    j["e2e"] = e2e;
    j["e2e_decode_b1"] = opt(c.e2e_decode_b1);
    ojson cases = ojson::array();
    for (const auto& k : c.cases)
      cases.push_back({{"task", k.task}, {"case", k.name}, {"regime", k.regime}, {"status", k.status},
                       {"baseline_status", k.baseline_status}, {"reason", k.reason}, {"message", k.message},
                       {"baseline_us", opt(k.baseline_us)}, {"candidate_us", opt(k.candidate_us)}, {"speedup", opt(k.speedup)}});
    j["cases"] = cases;
    out += j.dump() + "\n";
  }
  for (const auto& sc : r.scores) {
    for (const auto& f : sc.families) {
      ojson j = {{"type", "family"},
                 {"set", sc.set},
                 {"family", f.family},
                 {"tasks", f.tasks},
                 {"attempted", f.attempted_tasks.size()},
                 {"correct", f.correct},
                 {"attempted_tasks", f.attempted_tasks},
                 {"speedup", opt(f.speedup)},
                 {"fraction_correct", opt(f.fraction_correct)},
                 {"coverage", f.coverage},
                 {"score", f.score}};
      out += j.dump() + "\n";
    }
    const auto cands = candidates_of(r, sc.set);
    ojson j = {{"type", "score"},
               {"set", sc.set},
               {"scope", scope_name(r.options.scope_level)},
               {"tie_gap", r.options.tie_gap ? ojson(*r.options.tie_gap) : ojson("auto")},
               {"families", sc.families.size()},
               {"score", sc.score},
               {"candidates", cands.size()},
               {"all_passed", all_passed(cands)},
               {"gpu", r.gpu},
               {"baseline_commit", r.baseline_commit},
               {"baseline_date", r.baseline_date},
               {"set_commit", set_commit(r, sc.set)}};
    out += j.dump() + "\n";
  }
  return out;
}

std::string render_markdown(const Report& r) {
  std::ostringstream out;
  out << "# Candidate comparison: " << md_escape(r.dir) << "\n\n";
  out << "- gpu: " << md_escape(r.gpu) << "\n";
  out << "- baseline: commit " << md_escape(r.baseline_commit) << ", date " << md_escape(r.baseline_date) << "\n";
  for (const auto& [set, commit] : r.set_commits) out << "- set `" << set << "`: " << md_escape(commit) << "\n";
  out << "- scope: " << scope_name(r.options.scope_level) << "; greedy near-tie bound: " << tie_gap_option(r.options) << "\n";
  for (const auto& line : bound_lines(r)) out << "- " << md_escape(line) << "\n";
  for (const auto& line : teacher_lines(r)) out << "- teacher-forced: " << md_escape(line) << "\n";
  out << "\n";
  out << "## Candidates\n\n" << md_row(kCandidateHeader) << "|---|---|---:|---|---|---|---|---|---|---|\n";
  for (const auto& c : r.candidates) out << md_row(candidate_row(c));
  out << "\n" << status_counts(candidates_of(r)) << "\n\n## Score\n\n";
  out << "One score per candidate set, over that set's candidates only; family score = speedup × fraction correct × "
         "coverage (docs/candidates.md, \"Comparing runs and the score\").\n";
  for (const auto& sc : r.scores) {
    out << "\n### Set `" << sc.set << "`\n\n" << status_counts(candidates_of(r, sc.set)) << "\n\n";
    out << md_row({"family", "score", "speedup", "fraction correct", "coverage"}) << "|---|---:|---:|---:|---:|\n";
    for (const auto& f : sc.families)
      out << md_row({f.family, fixed(f.score, 3), f.speedup ? fixed(*f.speedup, 3) : "-", fraction_cell(f), coverage_cell(f)});
    out << "\n**Overall score of set `" << sc.set << "`: " << fixed(sc.score, 3) << "** " << mean_over(sc) << "\n";
  }
  out << "\n## Per-case detail\n";
  for (const auto& c : r.candidates) {
    out << "\n### `" << c.set << "`: " << md_escape(c.task) << " (" << c.status << ")\n\n";
    out << md_row({"case", "regime", "baseline", "candidate", "baseline µs", "candidate µs", "speedup", "message"})
        << "|---|---|---|---|---:|---:|---:|---|\n";
    for (const auto& k : c.cases)
      out << md_row({k.name, k.regime, k.baseline_status, k.status + (k.reason.empty() ? "" : " (" + k.reason + ")"),
                     k.baseline_us ? fixed(*k.baseline_us, 2) : "-", k.candidate_us ? fixed(*k.candidate_us, 2) : "-",
                     ratio_cell(k.speedup), k.message});
  }
  return out.str();
}

}  // namespace fk::gen::compare
