// `fastkernels compare` (docs/candidates.md, "Comparing runs and the score") on the hand-written
// sessions of tests/fixtures/compare/ (README there): statuses, speedups, greedy check, score, and
// the exact messages for malformed input.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "fk/gen/compare.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;
namespace cmp = fk::gen::compare;

fs::path dir(const std::string& scenario = "") { return fixtures() / "compare" / scenario; }
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
std::string bin() { return FK_FASTKERNELS_BIN; }
std::string compare_cmd(const std::string& scenario) {
  return bin() + " compare " + q(dir(scenario)) + " --manifest " + q(dir("manifest.json"));
}

/// Loads and judges one fixture session; every input must be valid.
cmp::Report judge(const std::string& scenario, const cmp::Options& o = {}) {
  Diagnostics diag;
  auto graph = cmp::load_manifest(dir("manifest.json"), diag);
  auto session = cmp::load_session(dir(scenario), diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  if (!diag.ok()) return {};
  cmp::Report r = cmp::evaluate(*session, *graph, o, diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  return r;
}

const cmp::CandidateResult* candidate(const cmp::Report& r, const std::string& task) {
  for (const auto& c : r.candidates)
    if (c.task == task) return &c;
  return nullptr;
}

const cmp::FamilyScore* family(const cmp::Report& r, const std::string& name) {
  for (const auto& f : r.families)
    if (f.family == name) return &f;
  return nullptr;
}

constexpr double kEps = 1e-12;

// ---- statuses -----------------------------------------------------------------------------------

TEST(Compare, PassingCandidateSpeedupsEffectsGreedyAndEndToEnd) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* c = candidate(r, "norm");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->set, "fast_norm");
  EXPECT_EQ(c->status, "PASSED");
  EXPECT_EQ(c->reason, "");
  EXPECT_TRUE(c->findings.empty());
  // Cases 10 -> 8 us and 20 -> 10 us.
  ASSERT_EQ(c->cases.size(), 2u);
  EXPECT_NEAR(*c->cases[0].speedup, 1.25, kEps);
  EXPECT_NEAR(*c->cases[1].speedup, 2.0, kEps);
  EXPECT_NEAR(*c->speedup.geomean, std::sqrt(1.25 * 2.0), kEps);
  EXPECT_NEAR(*c->speedup.min, 1.25, kEps);
  EXPECT_NEAR(*c->speedup.max, 2.0, kEps);
  EXPECT_EQ(c->speedup.cases, 2);
  // norm is in both decoder layers and both models (no L2 task includes it).
  ASSERT_EQ(c->effects.size(), 2u);
  EXPECT_EQ(c->effects[0].level, 3);
  EXPECT_EQ(c->effects[0].tasks, (std::vector<std::string>{"layer_l", "layer_q"}));
  EXPECT_EQ(c->effects[0].speedup.cases, 4);  // layer_l 100 -> 95, 200 -> 190; layer_q 100 -> 98, 200 -> 196
  EXPECT_NEAR(*c->effects[0].speedup.geomean, std::sqrt((100.0 / 95) * (100.0 / 98)), kEps);
  EXPECT_EQ(c->effects[1].level, 4);
  EXPECT_EQ(c->effects[1].tasks, (std::vector<std::string>{"model_l", "model_q"}));
  EXPECT_NEAR(*c->effects[1].speedup.geomean, std::sqrt(1000.0 / 990), kEps);  // model_q unchanged
  ASSERT_EQ(c->greedy.size(), 1u);
  EXPECT_EQ(c->greedy[0].arch, "org/llama-tiny");
  EXPECT_EQ(c->greedy[0].task, "model_l");
  EXPECT_EQ(c->greedy[0].outcome, "match");
  EXPECT_EQ(c->greedy[0].matched, 10);
  EXPECT_EQ(c->greedy[0].total, 10);
  // End to end: both models include norm; 8 records matched (the memory record is not compared).
  ASSERT_EQ(c->e2e.size(), 8u);
  EXPECT_EQ(c->e2e[0].key, "org/llama-tiny decode b1 eager");
  EXPECT_NEAR(c->e2e[0].speedup, 840.0 / 800, kEps);
  EXPECT_EQ(c->e2e[1].key, "org/llama-tiny decode b1 graph");
  EXPECT_NEAR(c->e2e[1].speedup, 1.1, kEps);
  EXPECT_EQ(c->e2e[3].key, "org/llama-tiny prefill b1 s128");
  EXPECT_NEAR(*c->e2e_decode_b1, std::sqrt(1.1 * 1.0), kEps);  // llama 1100/1000, qwen 1000/1000
}

TEST(Compare, InterfaceMismatchOutranksTheBuildFailure) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* c = candidate(r, "act_q");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "INTERFACE_MISMATCH");
  EXPECT_EQ(c->reason,
            "static check: INTERFACE_MISMATCH (exit 1): candidates/L1/act_q.cu:12:3: error: [INTERFACE_MISMATCH] "
            "SiluAndMul::forward: parameter 1 `x` has type `fk::Tensor &`, expected `const fk::Tensor &` (+1 more)");
  ASSERT_EQ(c->findings.size(), 2u);
  EXPECT_EQ(c->findings[1].status, "COMPILE_ERROR");
}

TEST(Compare, BuildCompileErrorIsSharedByTheSet) {
  const cmp::Report r = judge("session");
  const std::string reason =
      "build of set broken_build failed: candidates/L1/proj_l.cu(42): error: identifier \"tile\" is undefined "
      "(shared: the build of set broken_build holds 2 candidates: act_l, proj_l)";
  for (const char* task : {"act_l", "proj_l"}) {
    const cmp::CandidateResult* c = candidate(r, task);
    ASSERT_NE(c, nullptr) << task;
    EXPECT_EQ(c->status, "COMPILE_ERROR") << task;
    EXPECT_EQ(c->reason, reason) << task;
    EXPECT_FALSE(c->speedup.geomean) << task;
    ASSERT_EQ(c->cases.size(), 2u);
    EXPECT_EQ(c->cases[0].status, "NOT_RUN");
    EXPECT_EQ(c->cases[0].message, "no candidate run (the build failed)");
  }
}

TEST(Compare, IncorrectOwnCase) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* c = candidate(r, "rope_l");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "INCORRECT");
  EXPECT_EQ(c->reason, "case prefill_s128: INCORRECT (mismatch): output 0: max abs error 0.25 > tolerance 0.0156 at [3, 17]");
  EXPECT_EQ(c->speedup.cases, 1);  // the incorrect case was not timed
  EXPECT_NEAR(*c->speedup.geomean, 10.0 / 9, kEps);
}

TEST(Compare, IncorrectOnlyAtL3IsAttributedToEveryCandidateItIncludes) {
  const cmp::Report r = judge("session");
  for (const char* task : {"attn_l", "qknorm_l"}) {
    const cmp::CandidateResult* c = candidate(r, task);
    ASSERT_NE(c, nullptr) << task;
    EXPECT_EQ(c->status, "INCORRECT") << task;
    EXPECT_EQ(c->reason,
              "L3 task layer_l, case decode_b1: INCORRECT (mismatch): output 0: max abs error 0.5 > tolerance 0.02 at "
              "[0, 5] (the baseline PASSED) (shared: layer_l includes 2 candidates of set wrong_l3: attn_l, qknorm_l)")
        << task;
    for (const auto& k : c->cases) EXPECT_EQ(k.status, "PASSED") << task << " " << k.name;
  }
}

TEST(Compare, GreedyDivergenceAtANearTieIsAccepted) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* c = candidate(r, "mlp_l");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "PASSED") << c->reason;
  EXPECT_NEAR(*c->speedup.geomean, 1.25, kEps);
  // This set's greedy run is named greedy-<arch>.json, as the driver writes one per architecture;
  // it is matched with the baseline's greedy.json by $.arch.
  ASSERT_EQ(c->greedy.size(), 1u);
  const cmp::GreedyCheck& g = c->greedy[0];
  EXPECT_EQ(g.outcome, "near-tie");
  EXPECT_EQ(g.matched, 7);  // 2 of sequence 0, all 5 of sequence 1
  EXPECT_EQ(g.total, 10);
  ASSERT_EQ(g.sequences.size(), 2u);
  EXPECT_EQ(g.sequences[0].outcome, "near-tie");
  EXPECT_EQ(*g.sequences[0].step, 2);
  EXPECT_NEAR(*g.sequences[0].gap, 0.12, kEps);  // the baseline's gap, not the candidate's
  EXPECT_EQ(g.sequences[1].outcome, "match");
  EXPECT_FALSE(g.sequences[1].step);
}

TEST(Compare, GreedyDivergenceAtAClearGapIsIncorrect) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* c = candidate(r, "embed_l");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "INCORRECT");
  EXPECT_EQ(c->reason, "greedy token differs at step 2 of sequence 1 where the baseline's top-2 gap is 2.5 > 0.3 (model_l)");
  ASSERT_EQ(c->greedy.size(), 1u);
  EXPECT_EQ(c->greedy[0].outcome, "INCORRECT");
  EXPECT_EQ(c->greedy[0].matched, 7);
  // The same divergence under a looser bound is a near-tie.
  cmp::Options loose;
  loose.tie_gap = 2.5;
  const cmp::Report r2 = judge("session", loose);
  EXPECT_EQ(candidate(r2, "embed_l")->status, "PASSED");
  EXPECT_EQ(candidate(r2, "embed_l")->greedy[0].outcome, "near-tie");
}

TEST(Compare, TimeoutLeavesLaterCasesNotRun) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* c = candidate(r, "proj_q");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "TIMEOUT");
  EXPECT_EQ(c->reason, "case decode_b1: TIMEOUT (timeout): exceeded the 30 s case limit (+1 more)");
  ASSERT_EQ(c->cases.size(), 2u);
  EXPECT_EQ(c->cases[0].status, "TIMEOUT");
  EXPECT_EQ(c->cases[1].name, "prefill_s128");
  EXPECT_EQ(c->cases[1].status, "NOT_RUN");
  EXPECT_EQ(c->cases[1].message, "the run stopped after proj_q/decode_b1 timed out");
  ASSERT_EQ(c->findings.size(), 2u);
  // Its other case plus both cases of mlp_q, layer_q and model_q.
  EXPECT_EQ(c->findings[1].status, "TIMEOUT");
  EXPECT_EQ(c->findings[1].message, "7 case(s) not run (first: proj_q/prefill_s128): the run stopped after proj_q/decode_b1 timed out");
  EXPECT_FALSE(c->speedup.geomean);
}

TEST(Compare, SuspectAtRuntimeAndStatically) {
  const cmp::Report r = judge("session");
  const cmp::CandidateResult* rt = candidate(r, "mlp_q");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->status, "SUSPECT");
  EXPECT_EQ(rt->reason, "case prefill_s128: SUSPECT (beyond-hardware-limit): 41.0 TB/s exceeds the measured copy bandwidth 3.2 TB/s");
  // A beyond-hardware-limit case is timed, so it counts in the (reported, not scored) speedup.
  EXPECT_NEAR(*rt->speedup.geomean, std::sqrt(2.0 * 40.0), kEps);
  EXPECT_NEAR(*rt->speedup.max, 40.0, kEps);

  const cmp::CandidateResult* st = candidate(r, "layer_q");
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->status, "SUSPECT");
  EXPECT_EQ(st->reason, "static check: SUSPECT (exit 5), flags: baseline-call, vendor-library");
  EXPECT_EQ(st->flags, (std::vector<std::string>{"baseline-call", "vendor-library"}));
  EXPECT_EQ(st->level, 3);
  ASSERT_EQ(st->effects.size(), 1u);
  EXPECT_EQ(st->effects[0].tasks, std::vector<std::string>{"model_q"});
}

TEST(Compare, UncheckedAndMaxLevel) {
  // status.json: verdict UNCHECKED with "exit": null; "max_level": 3, so the models are not run
  // and `affected` holds the decoder layers only.
  const cmp::Report r = judge("pass");
  ASSERT_EQ(r.candidates.size(), 1u);
  const cmp::CandidateResult& c = r.candidates[0];
  EXPECT_EQ(c.status, "PASSED") << c.reason;
  EXPECT_TRUE(c.findings.empty());
  ASSERT_EQ(c.effects.size(), 1u);
  EXPECT_EQ(c.effects[0].level, 3);
  EXPECT_TRUE(r.all_passed());
}

// ---- score ------------------------------------------------------------------------------------

TEST(Compare, ScoreTwoFamiliesWithPartialCoverage) {
  // norm (both families) PASSED x2.0; act_l (llama) PASSED x1.25; act_q (qwen) INCORRECT.
  const cmp::Report all = judge("score");
  ASSERT_EQ(all.families.size(), 2u);
  const cmp::FamilyScore* llama = family(all, "llama");
  const cmp::FamilyScore* qwen = family(all, "qwen");
  ASSERT_TRUE(llama && qwen);
  EXPECT_EQ(llama->tasks, 10);
  EXPECT_EQ(llama->attempted_tasks, (std::vector<std::string>{"act_l", "norm"}));
  EXPECT_EQ(llama->correct, 2);
  EXPECT_NEAR(*llama->speedup, std::sqrt(2.0 * 1.25), kEps);
  EXPECT_NEAR(*llama->fraction_correct, 1.0, kEps);
  EXPECT_NEAR(llama->coverage, 0.2, kEps);
  EXPECT_NEAR(llama->score, std::sqrt(2.5) * 0.2, kEps);
  EXPECT_EQ(qwen->tasks, 6);
  EXPECT_EQ(qwen->attempted_tasks, (std::vector<std::string>{"act_q", "norm"}));
  EXPECT_EQ(qwen->correct, 1);
  EXPECT_NEAR(*qwen->speedup, 2.0, kEps);
  EXPECT_NEAR(*qwen->fraction_correct, 0.5, kEps);
  EXPECT_NEAR(qwen->coverage, 2.0 / 6, kEps);
  EXPECT_NEAR(qwen->score, 2.0 * 0.5 / 3, kEps);
  EXPECT_NEAR(all.score, (std::sqrt(2.5) * 0.2 + 1.0 / 3) / 2, kEps);
  EXPECT_FALSE(all.all_passed());

  cmp::Options l1;
  l1.scope_level = 1;  // llama has 7 L1 tasks, qwen 3
  const cmp::Report r1 = judge("score", l1);
  EXPECT_NEAR(family(r1, "llama")->coverage, 2.0 / 7, kEps);
  EXPECT_NEAR(family(r1, "qwen")->coverage, 2.0 / 3, kEps);
  EXPECT_NEAR(r1.score, (std::sqrt(2.5) * 2 / 7 + 2.0 * 0.5 * 2 / 3) / 2, kEps);

  cmp::Options l4;
  l4.scope_level = 4;  // one model per family, neither attempted: both score 0 and count
  const cmp::Report r4 = judge("score", l4);
  ASSERT_EQ(r4.families.size(), 2u);
  for (const auto& f : r4.families) {
    EXPECT_EQ(f.tasks, 1) << f.family;
    EXPECT_TRUE(f.attempted_tasks.empty()) << f.family;
    EXPECT_FALSE(f.speedup) << f.family;
    EXPECT_FALSE(f.fraction_correct) << f.family;
    EXPECT_EQ(f.score, 0.0) << f.family;
  }
  EXPECT_EQ(r4.score, 0.0);
}

// ---- the command line -------------------------------------------------------------------------

TEST(Compare, ExitCodesTerminalJsonlAndMarkdown) {
  std::string out;
  EXPECT_EQ(run(compare_cmd("pass"), &out), 0) << out;
  TempDir tmp;
  const fs::path jsonl = tmp.path() / "out" / "score.jsonl", md = tmp.path() / "score.md";
  ASSERT_EQ(run(compare_cmd("score") + " --jsonl " + q(jsonl) + " --markdown " + q(md), &out), 1) << out;
  for (const char* line : {
           "  llama: 0.316 = 1.581 x 1.000 (2/2) x 0.200 (2/10)\n",
           "  qwen: 0.333 = 2.000 x 0.500 (1/2) x 0.333 (2/6)\n",
           "overall score: 0.325 (mean over 2 families)\n",
           "3 candidate(s): 2 PASSED, 1 INCORRECT\n",
           "c         | act_q | 1     | INCORRECT | 1.000x (1.000-1.000)      | 1.000x/1.000x/1.000x | -      | -             | "
           "case decode_b1: INCORRECT (nonfinite): output 0 holds NaN at [0, 0]\n",
       })
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "\n---\n" << out;

  std::vector<nlohmann::json> records;
  std::istringstream in(slurp(jsonl));
  for (std::string l; std::getline(in, l);) records.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(records.size(), 3u + 2u + 1u);
  EXPECT_EQ(records[0]["type"], "candidate");
  EXPECT_EQ(records[0]["task"], "norm");
  EXPECT_EQ(records[0]["status"], "PASSED");
  EXPECT_NEAR(records[0]["speedup"]["geomean"].get<double>(), 2.0, kEps);
  EXPECT_EQ(records[2]["findings"][0]["status"], "INCORRECT");
  EXPECT_EQ(records[3]["type"], "family");
  EXPECT_EQ(records[3]["family"], "llama");
  EXPECT_EQ(records[3]["attempted"], 2);
  EXPECT_NEAR(records[3]["coverage"].get<double>(), 0.2, kEps);
  EXPECT_EQ(records[5]["type"], "score");
  EXPECT_EQ(records[5]["scope"], "all");
  EXPECT_NEAR(records[5]["score"].get<double>(), (std::sqrt(2.5) * 0.2 + 1.0 / 3) / 2, kEps);
  EXPECT_EQ(records[5]["baseline_commit"], "b0a5e11");

  const std::string m = slurp(md);
  for (const char* line : {
           "- gpu: NVIDIA H100 80GB HBM3\n",
           "- baseline: commit b0a5e11, date 2025-06-01\n",
           "- set `a`: c4nd1da (2025-06-02)\n",
           "| a | norm | 1 | PASSED | 2.000x (2.000-2.000) | -/1.000x/1.000x | - | - |  |\n",
           "| qwen | 0.333 | 2.000 | 0.500 (1/2) | 0.333 (2/6) |\n",
           "**Overall score: 0.325** (mean over 2 families)\n",
           "| decode_b1 | decode | PASSED | INCORRECT (nonfinite) | 10.00 | - | - | output 0 holds NaN at [0, 0] |\n",
       })
    EXPECT_NE(m.find(line), std::string::npos) << "missing: " << line << "\n---\n" << m;
}

TEST(Compare, UsageErrors) {
  std::string out;
  EXPECT_EQ(run(compare_cmd("score") + " --scope L5", &out), 2) << out;
  EXPECT_NE(out.find("--scope"), std::string::npos) << out;
  EXPECT_EQ(run(compare_cmd("score") + " --tie-gap -1", &out), 2) << out;
  EXPECT_NE(out.find("--tie-gap"), std::string::npos) << out;
  EXPECT_EQ(run(bin() + " compare", &out), 2) << out;
  EXPECT_EQ(run(bin() + " compare " + q(dir("score")) + " --manifest /nonexistent/manifest.json", &out), 2) << out;
  EXPECT_NE(out.find("/nonexistent/manifest.json: cannot read (run `fastkernels generate`, or pass --manifest)"), std::string::npos) << out;
}

// Each bad_* session breaks input rules; every problem is listed (file, line, JSON path, what was
// expected), the exit code is 2 and nothing is written.
TEST(Compare, MalformedInputsAreListedAndNothingIsWritten) {
  const std::string m = dir("manifest.json").generic_string();
  struct Bad {
    const char* scenario;
    std::vector<std::string> errors;  // without the "<fixture dir>/<scenario>/" prefix
  };
  const std::vector<Bad> cases = {
      {"bad_missing_baseline",
       {"baseline/bench.jsonl: cannot read (expected the baseline's fk_bench JSON lines; layout: "
        "<results-dir>/baseline/bench.jsonl beside one <results-dir>/<set>/status.json per candidate set)"}},
      {"bad_json_line",
       {"baseline/bench.jsonl:3: invalid JSON: column 106: syntax error while parsing value - invalid string: missing "
        "closing quote; last read: '\"PASS'"}},
      {"bad_fields",
       {"baseline/bench.jsonl:1: $.commit: expected string, got nothing",
        "baseline/bench.jsonl:2: $.time_us.median: expected positive number, got \"fast\"",
        "baseline/bench.jsonl:3: $.status: expected one of PASSED, INCORRECT, RUNTIME_ERROR, TIMEOUT, SUSPECT, SKIPPED, got \"OK\"",
        "s1/status.json: $.static[0].verdict: expected one of PASSED, INTERFACE_MISMATCH, COMPILE_ERROR, SUSPECT, UNCHECKED, got \"FINE\"",
        "s1/status.json: $.build: expected one of OK, COMPILE_ERROR, got \"FAILED\"",
        "s1/status.json: $.affected: expected array of strings, got nothing"}},
      {"bad_cross",
       {"s1/status.json: $.affected: expected every task up to level 4 that includes a candidate (per " + m + "), got none of: model_l",
        "s1/bench.jsonl:4: $.case: expected a case the baseline ran, got embed_l/decode_b8 (not in " +
            dir("bad_cross").generic_string() + "/baseline/bench.jsonl)",
        "s1/bench.jsonl:1: $.gpu: expected the baseline's \"NVIDIA H100 80GB HBM3\", got \"NVIDIA H200\" (speedups across GPUs mean nothing)",
        "s1/bench.jsonl: expected a record of case model_l/decode_b1 (the run has a summary, so it ran to the end: it must run every "
        "case of the candidate and affected tasks), got none",
        "s1/bench.jsonl: expected a record of case model_l/prefill_s128 (the run has a summary, so it ran to the end: it must run "
        "every case of the candidate and affected tasks), got none"}},
      {"bad_stale",
       {"s1/bench.jsonl: expected no run output, since " + dir("bad_stale").generic_string() +
            "/s1/status.json says the build failed (a file left from an earlier session?)",
        "s1/greedy-org__llama-tiny.json: expected no run output, since " + dir("bad_stale").generic_string() +
            "/s1/status.json says the build failed (a file left from an earlier session?)"}},
  };
  for (const auto& c : cases) {
    TempDir tmp;
    const fs::path jsonl = tmp.path() / "out.jsonl";
    std::string out;
    EXPECT_EQ(run(bin() + " compare " + q(dir(c.scenario)) + " --manifest " + q(m) + " --jsonl " + q(jsonl), &out), 2)
        << c.scenario << ":\n" << out;
    std::string expected;
    for (const auto& e : c.errors) expected += dir(c.scenario).generic_string() + "/" + e + "\n";
    expected += "fastkernels compare: " + std::to_string(c.errors.size()) + " error(s); nothing written\n";
    EXPECT_EQ(out, expected) << c.scenario;
    EXPECT_FALSE(fs::exists(jsonl)) << c.scenario;
  }
}

}  // namespace
}  // namespace fk::gen
