// `fastkernels compare` (docs/candidates.md, "Comparing runs and the score") on the hand-written
// sessions of tests/fixtures/compare/ (README there): statuses, speedups, greedy check, score, and
// the exact messages for malformed input.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fk/gen/compare.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;
namespace cmp = fk::gen::compare;

fs::path dir(const std::string& scenario = "") { return fixtures() / "compare" / scenario; }
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

const cmp::CandidateResult* candidate(const cmp::Report& r, const std::string& set, const std::string& task) {
  for (const auto& c : r.candidates)
    if (c.set == set && c.task == task) return &c;
  return nullptr;
}

const cmp::FamilyScore* family(const cmp::SetScore& s, const std::string& name) {
  for (const auto& f : s.families)
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
  // Neither run benched model_l with a logits check, so the bound is the fixed 0.30.
  EXPECT_EQ(c->reason,
            "greedy token differs at step 2 of sequence 1 where the baseline's top-2 gap is 2.5 > near-tie bound 0.3 "
            "(fixed: no L4 check of model_l in baseline/bench.jsonl and gap/bench.jsonl) (model_l)");
  ASSERT_EQ(c->greedy.size(), 1u);
  EXPECT_EQ(c->greedy[0].outcome, "INCORRECT");
  EXPECT_EQ(c->greedy[0].matched, 7);
  EXPECT_EQ(c->greedy[0].tie_gap, cmp::kFallbackTieGap);
  // The same divergence under a looser bound is a near-tie.
  cmp::Options loose;
  loose.tie_gap = 2.5;
  const cmp::Report r2 = judge("session", loose);
  EXPECT_EQ(candidate(r2, "embed_l")->status, "PASSED");
  EXPECT_EQ(candidate(r2, "embed_l")->greedy[0].outcome, "near-tie");
  EXPECT_EQ(candidate(r2, "embed_l")->greedy[0].tie_gap, 2.5);
  EXPECT_EQ(candidate(r2, "embed_l")->greedy[0].tie_gap_source, "fixed");
}

// ---- the near-tie bound (tie_auto/: E_base 0.160, four sets of mlp_l; see the README there) ----

TEST(Compare, NearTieBoundIsMeasuredFromTheL4Checks) {
  const cmp::Report r = judge("tie_auto");
  // near: diverges where the baseline's gap is 0.625 <= 2 x (0.160 + 0.156) = 0.632.
  const cmp::CandidateResult* near = candidate(r, "near", "mlp_l");
  ASSERT_NE(near, nullptr);
  EXPECT_EQ(near->status, "PASSED") << near->reason;
  ASSERT_EQ(near->greedy.size(), 1u);
  const cmp::GreedyCheck& g = near->greedy[0];
  // E_base: the larger of model_l's two logits errors (0.125, 0.160); layer_l's check (0.5) is no L4 check.
  ASSERT_TRUE(g.baseline_logits_err && g.candidate_logits_err);
  EXPECT_EQ(*g.baseline_logits_err, 0.160);
  EXPECT_EQ(*g.candidate_logits_err, 0.156);  // of 0.156 and 0.141
  EXPECT_EQ(g.tie_gap, 2 * (0.160 + 0.156));
  EXPECT_EQ(g.tie_gap_source, "auto: 2 x (0.160 + 0.156) from the L4 checks against fp32");
  EXPECT_EQ(g.outcome, "near-tie");
  EXPECT_EQ(g.matched, 6);
  ASSERT_EQ(g.sequences.size(), 2u);
  EXPECT_EQ(*g.sequences[0].step, 1);
  EXPECT_EQ(*g.sequences[0].gap, 0.625);

  // far: the same bound (its errors are 0.141 and 0.156), a divergence at a gap of 0.7.
  const cmp::CandidateResult* far = candidate(r, "far", "mlp_l");
  ASSERT_NE(far, nullptr);
  EXPECT_EQ(far->status, "INCORRECT");
  EXPECT_EQ(far->reason,
            "greedy token differs at step 3 of sequence 1 where the baseline's top-2 gap is 0.7 > near-tie bound 0.632 "
            "(auto: 2 x (0.160 + 0.156) from the L4 checks against fp32) (model_l)");
  EXPECT_EQ(far->greedy[0].tie_gap, 2 * (0.160 + 0.156));
  EXPECT_EQ(far->greedy[0].outcome, "INCORRECT");
  EXPECT_EQ(far->greedy[0].matched, 8);
}

TEST(Compare, NearTieBoundFallsBackWithoutAnL4LogitsCheck) {
  const cmp::Report r = judge("tie_auto");
  // nolog: model_l's records hold no check.outputs entry named "logits", so 0.625 > 0.30.
  const cmp::CandidateResult* nolog = candidate(r, "nolog", "mlp_l");
  ASSERT_NE(nolog, nullptr);
  EXPECT_EQ(nolog->status, "INCORRECT");
  EXPECT_EQ(nolog->reason,
            "greedy token differs at step 1 of sequence 0 where the baseline's top-2 gap is 0.625 > near-tie bound 0.3 "
            "(fixed: no L4 check of model_l in nolog/bench.jsonl) (model_l)");
  const cmp::GreedyCheck& g = nolog->greedy[0];
  EXPECT_EQ(g.tie_gap, cmp::kFallbackTieGap);
  EXPECT_EQ(g.tie_gap_source, "fixed: no L4 check of model_l in nolog/bench.jsonl");
  EXPECT_FALSE(g.baseline_logits_err);
  EXPECT_FALSE(g.candidate_logits_err);
  // nan: a null (NaN) logits error measures nothing either; the L4 case itself makes it INCORRECT.
  const cmp::CandidateResult* nan = candidate(r, "nan", "mlp_l");
  ASSERT_NE(nan, nullptr);
  EXPECT_EQ(nan->status, "INCORRECT");
  EXPECT_EQ(nan->greedy[0].tie_gap, cmp::kFallbackTieGap);
  EXPECT_EQ(nan->greedy[0].tie_gap_source, "fixed: a non-finite logits error in the L4 check of model_l in nan/bench.jsonl");
  ASSERT_EQ(nan->findings.size(), 2u);
  EXPECT_EQ(nan->findings[1].message,
            "greedy token differs at step 1 of sequence 0 where the baseline's top-2 gap is 0.625 > near-tie bound 0.3 "
            "(fixed: a non-finite logits error in the L4 check of model_l in nan/bench.jsonl) (model_l)");
  // Neither run of session/ has an L4 check: both files are named.
  const cmp::Report s = judge("session");
  const cmp::CandidateResult* fast = candidate(s, "fast_norm", "norm");
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->greedy[0].tie_gap_source, "fixed: no L4 check of model_l in baseline/bench.jsonl and fast_norm/bench.jsonl");
}

TEST(Compare, ExplicitTieGapOverridesTheMeasuredBound) {
  cmp::Options tight;
  tight.tie_gap = 0.5;
  const cmp::Report r = judge("tie_auto", tight);
  const cmp::CandidateResult* near = candidate(r, "near", "mlp_l");
  ASSERT_NE(near, nullptr);
  EXPECT_EQ(near->status, "INCORRECT");
  EXPECT_EQ(near->reason,
            "greedy token differs at step 1 of sequence 0 where the baseline's top-2 gap is 0.625 > near-tie bound 0.5 "
            "(fixed) (model_l)");
  EXPECT_EQ(near->greedy[0].tie_gap, 0.5);
  EXPECT_EQ(near->greedy[0].tie_gap_source, "fixed");
  EXPECT_FALSE(near->greedy[0].baseline_logits_err);

  cmp::Options loose;
  loose.tie_gap = 0.7;
  const cmp::Report r2 = judge("tie_auto", loose);
  for (const char* set : {"near", "far", "nolog"}) {
    const cmp::CandidateResult* c = candidate(r2, set, "mlp_l");
    ASSERT_NE(c, nullptr) << set;
    EXPECT_EQ(c->status, "PASSED") << set << ": " << c->reason;
    EXPECT_EQ(c->greedy[0].outcome, "near-tie") << set;
    EXPECT_EQ(c->greedy[0].tie_gap, 0.7) << set;
  }
}

TEST(Compare, NearTieBoundIsReportedPerGreedyCheck) {
  TempDir tmp;
  const fs::path jsonl = tmp.path() / "tie.jsonl", md = tmp.path() / "tie.md";
  std::string out;
  ASSERT_EQ(run(compare_cmd("tie_auto") + " --jsonl " + q(jsonl) + " --markdown " + q(md), &out), 1) << out;
  for (const char* line : {
           "greedy near-tie bound per check (--tie-gap auto):\n"
           "  set far, org/llama-tiny: near-tie bound 0.632 (auto: 2 x (0.160 + 0.156) from the L4 checks against fp32): "
           "INCORRECT 8/10\n"
           "  set nan, org/llama-tiny: near-tie bound 0.3 (fixed: a non-finite logits error in the L4 check of model_l in "
           "nan/bench.jsonl): INCORRECT 6/10\n"
           "  set near, org/llama-tiny: near-tie bound 0.632 (auto: 2 x (0.160 + 0.156) from the L4 checks against fp32): "
           "near-tie 6/10\n"
           "  set nolog, org/llama-tiny: near-tie bound 0.3 (fixed: no L4 check of model_l in nolog/bench.jsonl): "
           "INCORRECT 6/10\n",
           "near      | mlp_l | 2     | PASSED    | 1.250x (1.250-1.250)      | -/1.000x/1.000x | near-tie 6/10  | -              | -             |\n",
       })
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "\n---\n" << out;

  std::vector<nlohmann::json> records;
  std::istringstream in(slurp(jsonl));
  for (std::string l; std::getline(in, l);) records.push_back(nlohmann::json::parse(l));
  ASSERT_GE(records.size(), 4u);
  const nlohmann::json& near = records[2];  // sets in folder order: far, nan, near, nolog
  ASSERT_EQ(near["set"], "near");
  const nlohmann::json& g = near["greedy"][0];
  EXPECT_EQ(g["outcome"], "near-tie");
  EXPECT_EQ(g["tie_gap"].get<double>(), 2 * (0.160 + 0.156));
  EXPECT_EQ(g["tie_gap_source"], "auto: 2 x (0.160 + 0.156) from the L4 checks against fp32");
  EXPECT_EQ(g["baseline_logits_err"].get<double>(), 0.160);
  EXPECT_EQ(g["candidate_logits_err"].get<double>(), 0.156);
  EXPECT_EQ(records[3]["greedy"][0]["tie_gap_source"], "fixed: no L4 check of model_l in nolog/bench.jsonl");
  EXPECT_TRUE(records[3]["greedy"][0]["baseline_logits_err"].is_null());
  int scores = 0;
  for (const auto& rec : records)
    if (rec["type"] == "score") {
      ++scores;
      EXPECT_EQ(rec["tie_gap"], "auto");
    }
  EXPECT_EQ(scores, 4);

  const std::string m = slurp(md);
  for (const char* line : {
           "- scope: all; greedy near-tie bound: auto (per greedy check: 2 x the largest logits errors of the baseline's "
           "and the candidate's L4 checks against fp32; 0.3 where a run has none)\n",
           "- set near, org/llama-tiny: near-tie bound 0.632 (auto: 2 x (0.160 + 0.156) from the L4 checks against fp32): "
           "near-tie 6/10\n",
           "- set nolog, org/llama-tiny: near-tie bound 0.3 (fixed: no L4 check of model_l in nolog/bench.jsonl): "
           "INCORRECT 6/10\n",
       })
    EXPECT_NE(m.find(line), std::string::npos) << "missing: " << line << "\n---\n" << m;

  // --tie-gap N: every check uses N.
  ASSERT_EQ(run(compare_cmd("tie_auto") + " --tie-gap 0.7 --jsonl " + q(jsonl) + " --markdown " + q(md), &out), 1) << out;
  EXPECT_NE(out.find("greedy near-tie bound per check (--tie-gap 0.7):\n"
                     "  set far, org/llama-tiny: near-tie bound 0.7 (fixed): near-tie 8/10\n"),
            std::string::npos)
      << out;
  records.clear();
  std::istringstream in2(slurp(jsonl));
  for (std::string l; std::getline(in2, l);) records.push_back(nlohmann::json::parse(l));
  EXPECT_EQ(records[0]["greedy"][0]["tie_gap"].get<double>(), 0.7);
  EXPECT_EQ(records[0]["greedy"][0]["tie_gap_source"], "fixed");
  EXPECT_EQ(records.back()["type"], "score");
  EXPECT_EQ(records.back()["tie_gap"].get<double>(), 0.7);
  EXPECT_NE(slurp(md).find("- scope: all; greedy near-tie bound: 0.7 logits (fixed, --tie-gap)\n"), std::string::npos);
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
  // A beyond-hardware-limit case is timed, but a case is a speedup only where both runs passed
  // every check: only the other case (2x) counts.
  EXPECT_NEAR(*rt->speedup.geomean, 2.0, kEps);
  EXPECT_NEAR(*rt->speedup.max, 2.0, kEps);

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

TEST(Compare, InfraErrorIsNeverASpeedup) {
  // score/ with act_l's prefill case INFRA_ERROR (timed at 1 us against the baseline's 20).
  const cmp::Report r = judge("infra");
  const cmp::CandidateResult* c = candidate(r, "act_l");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "INFRA_ERROR");
  EXPECT_EQ(c->reason.rfind("case prefill_s128: INFRA_ERROR (infra): reference failed", 0), 0u) << c->reason;
  ASSERT_TRUE(c->speedup.geomean);
  EXPECT_NEAR(*c->speedup.geomean, 1.25, kEps) << "only the decode case, which both runs passed";
  EXPECT_NEAR(*c->speedup.max, 1.25, kEps);
  const cmp::FamilyScore* llama = family(*r.score_of("a"), "llama");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->correct, 1) << "norm only";
}

// ---- the teacher-forced check (teacher/: 2 sequences x 25 rows, the baseline's rows all 0.01) ----

TEST(Compare, TeacherForcedLogitsAreHeldToTheBaselinesErrorRowByRow) {
  const cmp::Report r = judge("teacher");
  auto check = [&](const std::string& set) -> const cmp::TeacherForcedCheck& {
    const cmp::CandidateResult* c = candidate(r, set, "mlp_l");
    EXPECT_NE(c, nullptr) << set;
    EXPECT_EQ(c->teacher.size(), 1u) << set;
    return c->teacher.at(0);
  };
  // honest: 0.011 and 0.0105 against 0.01 (one row left out of the RMS as the allowed outlier).
  const cmp::TeacherForcedCheck& h = check("honest");
  EXPECT_EQ(candidate(r, "honest", "mlp_l")->status, "PASSED") << candidate(r, "honest", "mlp_l")->reason;
  EXPECT_EQ(h.outcome, "match");
  EXPECT_EQ(h.rows, 50);
  EXPECT_EQ(h.allowed_outliers, 1);
  EXPECT_EQ(h.outliers, 0);
  ASSERT_TRUE(h.ratio);
  EXPECT_NEAR(*h.ratio, std::sqrt((24 * 0.011 * 0.011 + 25 * 0.0105 * 0.0105) / 49) / 0.01, 1e-12);
  // oneoff: one row at 0.2 is the one allowed outlier; the rest match.
  const cmp::TeacherForcedCheck& o = check("oneoff");
  EXPECT_EQ(candidate(r, "oneoff", "mlp_l")->status, "PASSED");
  EXPECT_EQ(o.outliers, 1);
  EXPECT_NEAR(*o.ratio, 1.0, 1e-12);
  EXPECT_EQ(o.worst_sequence, 0);
  EXPECT_EQ(o.worst_step, 3);
  // drift: every row 1.6-2x the baseline's: the RMS ratio fails.
  const cmp::CandidateResult* d = candidate(r, "drift", "mlp_l");
  EXPECT_EQ(d->status, "INCORRECT");
  EXPECT_EQ(d->reason,
            "teacher-forced logits: RMS relative L2 error 0.0181 vs the baseline's 0.0100 (1.81x > 1.3x) (model_l, 50 rows)");
  // local: two rows past 3 x 0.01 + 0.002, one allowed; the RMS alone (1.14x) would pass.
  const cmp::CandidateResult* l = candidate(r, "local", "mlp_l");
  EXPECT_EQ(l->status, "INCORRECT");
  EXPECT_EQ(l->reason,
            "teacher-forced logits: 2 rows beyond 3 x the baseline's error + 0.002 (at most 1 allowed); worst: sequence 1 step "
            "21, 0.0500 vs 0.0100 (model_l, 50 rows)");
  EXPECT_LT(*check("local").ratio, cmp::kTeacherRmsRatio);
  // nan: a non-finite row; refdiff: the fp32 reference's top token differs at one row.
  EXPECT_EQ(candidate(r, "nan", "mlp_l")->reason, "teacher-forced logits: 1 rows with a non-finite error (model_l, 50 rows)");
  EXPECT_EQ(candidate(r, "refdiff", "mlp_l")->reason,
            "teacher-forced logits: the fp32 reference differs from the baseline's at 1 rows: the candidate run changed the weights "
            "or inputs under it (model_l, 50 rows)");
}

TEST(Compare, TeacherForcedRunsMustMatchTheBaselinesSettings) {
  const fs::path tmp = fs::path(::testing::TempDir()) / "teacher_mismatch";
  fs::remove_all(tmp);
  fs::copy(dir("teacher"), tmp, fs::copy_options::recursive);
  const fs::path f = tmp / "honest" / "teacher-org__llama-tiny.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(f));
  j["seed"] = 2;
  j["sequences"][1]["tokens"][4] = 7;
  std::ofstream(f) << j.dump();
  Diagnostics diag;
  auto graph = cmp::load_manifest(dir("manifest.json"), diag);
  auto session = cmp::load_session(tmp, diag);
  ASSERT_TRUE(diag.ok()) << diag.text();
  cmp::evaluate(*session, *graph, {}, diag);
  const std::string all = diag.text();
  EXPECT_NE(all.find(f.generic_string() + ": $.seed: expected the baseline's 1, got 2"), std::string::npos) << all;
  EXPECT_NE(all.find(f.generic_string() + ": $.sequences[1].tokens: expected the tokens the baseline was fed"), std::string::npos) << all;
}

TEST(Compare, ScoreTwoFamiliesWithPartialCoverage) {
  // One set `a`: norm (both families) PASSED x2.0; act_l (llama) PASSED x1.25; act_q (qwen) INCORRECT.
  const cmp::Report all = judge("score");
  ASSERT_EQ(all.scores.size(), 1u);
  const cmp::SetScore* a = all.score_of("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->families.size(), 2u);
  const cmp::FamilyScore* llama = family(*a, "llama");
  const cmp::FamilyScore* qwen = family(*a, "qwen");
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
  EXPECT_NEAR(a->score, (std::sqrt(2.5) * 0.2 + 1.0 / 3) / 2, kEps);
  EXPECT_FALSE(all.all_passed());

  cmp::Options l1;
  l1.scope_level = 1;  // llama has 7 L1 tasks, qwen 3
  const cmp::Report r1 = judge("score", l1);
  ASSERT_NE(r1.score_of("a"), nullptr);
  EXPECT_NEAR(family(*r1.score_of("a"), "llama")->coverage, 2.0 / 7, kEps);
  EXPECT_NEAR(family(*r1.score_of("a"), "qwen")->coverage, 2.0 / 3, kEps);
  EXPECT_NEAR(r1.score_of("a")->score, (std::sqrt(2.5) * 2 / 7 + 2.0 * 0.5 * 2 / 3) / 2, kEps);

  cmp::Options l4;
  l4.scope_level = 4;  // one model per family, neither attempted: both score 0 and count
  const cmp::Report r4 = judge("score", l4);
  ASSERT_NE(r4.score_of("a"), nullptr);
  ASSERT_EQ(r4.score_of("a")->families.size(), 2u);
  for (const auto& f : r4.score_of("a")->families) {
    EXPECT_EQ(f.tasks, 1) << f.family;
    EXPECT_TRUE(f.attempted_tasks.empty()) << f.family;
    EXPECT_FALSE(f.speedup) << f.family;
    EXPECT_FALSE(f.fraction_correct) << f.family;
    EXPECT_EQ(f.score, 0.0) << f.family;
  }
  EXPECT_EQ(r4.score_of("a")->score, 0.0);
}

TEST(Compare, SetsSharingATaskAreJudgedAndScoredSeparately) {
  // Two alternatives both hold a candidate for norm: v1 = {norm PASSED x2.0}; v2 = {norm INCORRECT,
  // act_l PASSED x1.25}. Each (set, candidate) is a row; each set is scored over its own candidates.
  const cmp::Report r = judge("alternatives");
  ASSERT_EQ(r.candidates.size(), 3u);
  const cmp::CandidateResult* v1_norm = candidate(r, "v1", "norm");
  const cmp::CandidateResult* v2_norm = candidate(r, "v2", "norm");
  const cmp::CandidateResult* v2_act = candidate(r, "v2", "act_l");
  ASSERT_TRUE(v1_norm && v2_norm && v2_act);
  EXPECT_EQ(v1_norm->status, "PASSED") << v1_norm->reason;
  EXPECT_NEAR(*v1_norm->speedup.geomean, 2.0, kEps);
  EXPECT_EQ(v2_norm->status, "INCORRECT");
  EXPECT_EQ(v2_norm->reason, "case decode_b1: INCORRECT (nonfinite): output 0 holds NaN at [0, 7]");
  EXPECT_NEAR(*v2_norm->speedup.geomean, 1.0, kEps);  // only prefill_s128 was timed, 20 -> 20 us
  EXPECT_EQ(v2_act->status, "PASSED") << v2_act->reason;
  EXPECT_NEAR(*v2_act->speedup.geomean, 1.25, kEps);

  ASSERT_EQ(r.scores.size(), 2u);
  EXPECT_EQ(r.scores[0].set, "v1");
  EXPECT_EQ(r.scores[1].set, "v2");
  // v1: llama 2.0 x 1/1 x 1/10, qwen 2.0 x 1/1 x 1/6.
  const cmp::SetScore& v1 = r.scores[0];
  ASSERT_EQ(v1.families.size(), 2u);
  EXPECT_EQ(family(v1, "llama")->attempted_tasks, std::vector<std::string>{"norm"});
  EXPECT_NEAR(family(v1, "llama")->score, 0.2, kEps);
  EXPECT_NEAR(family(v1, "qwen")->score, 2.0 / 6, kEps);
  EXPECT_NEAR(v1.score, (0.2 + 2.0 / 6) / 2, kEps);
  // v2: llama 1.25 x 1/2 x 2/10; qwen: norm attempted, none correct: 0.
  const cmp::SetScore& v2 = r.scores[1];
  const cmp::FamilyScore* llama = family(v2, "llama");
  const cmp::FamilyScore* qwen = family(v2, "qwen");
  ASSERT_TRUE(llama && qwen);
  EXPECT_EQ(llama->attempted_tasks, (std::vector<std::string>{"act_l", "norm"}));
  EXPECT_EQ(llama->correct, 1);
  EXPECT_NEAR(*llama->speedup, 1.25, kEps);
  EXPECT_NEAR(*llama->fraction_correct, 0.5, kEps);
  EXPECT_NEAR(llama->coverage, 0.2, kEps);
  EXPECT_NEAR(llama->score, 0.125, kEps);
  EXPECT_EQ(qwen->attempted_tasks, std::vector<std::string>{"norm"});
  EXPECT_EQ(qwen->correct, 0);
  EXPECT_FALSE(qwen->speedup);
  EXPECT_NEAR(*qwen->fraction_correct, 0.0, kEps);
  EXPECT_NEAR(qwen->coverage, 1.0 / 6, kEps);
  EXPECT_EQ(qwen->score, 0.0);
  EXPECT_NEAR(v2.score, 0.0625, kEps);

  // The command line: both rows, one score block / record pair / table per set.
  TempDir tmp;
  const fs::path jsonl = tmp.path() / "alt.jsonl", md = tmp.path() / "alt.md";
  std::string out;
  ASSERT_EQ(run(compare_cmd("alternatives") + " --jsonl " + q(jsonl) + " --markdown " + q(md), &out), 1) << out;
  for (const char* line : {
           "v1        | norm  | 1     | PASSED    | 2.000x (2.000-2.000)      | -/1.000x/1.000x      | -      | -              | -             |\n",
           "v2        | norm  | 1     | INCORRECT | 1.000x (1.000-1.000)      | -/1.000x/1.000x      | -      | -              | -             | "
           "case decode_b1: INCORRECT (nonfinite): output 0 holds NaN at [0, 7]\n",
           "v2        | act_l | 1     | PASSED    | 1.250x (1.250-1.250)      | 1.000x/1.000x/1.000x | -      | -              | -             |\n",
           "3 candidate(s): 2 PASSED, 1 INCORRECT\n",
           "set v1: 1 candidate(s): 1 PASSED\n"
           "  llama: 0.200 = 2.000 x 1.000 (1/1) x 0.100 (1/10)\n"
           "  qwen: 0.333 = 2.000 x 1.000 (1/1) x 0.167 (1/6)\n"
           "  overall score of set v1: 0.267 (mean over 2 families)\n",
           "set v2: 2 candidate(s): 1 PASSED, 1 INCORRECT\n"
           "  llama: 0.125 = 1.250 x 0.500 (1/2) x 0.200 (2/10)\n"
           "  qwen: 0.000 = - x 0.000 (0/1) x 0.167 (1/6)\n"
           "  overall score of set v2: 0.062 (mean over 2 families)\n",
       })
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "\n---\n" << out;

  std::vector<nlohmann::json> records;
  std::istringstream in(slurp(jsonl));
  for (std::string l; std::getline(in, l);) records.push_back(nlohmann::json::parse(l));
  // 3 candidates, then per set: 2 families and a score.
  ASSERT_EQ(records.size(), 3u + 3u + 3u);
  EXPECT_EQ(records[0]["set"], "v1");
  EXPECT_EQ(records[1]["set"], "v2");
  EXPECT_EQ(records[1]["task"], "norm");
  EXPECT_EQ(records[1]["status"], "INCORRECT");
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"family", "v1"}, {"family", "v1"}, {"score", "v1"}, {"family", "v2"}, {"family", "v2"}, {"score", "v2"}};
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(records[3 + i]["type"], kinds[i].first) << i;
    EXPECT_EQ(records[3 + i]["set"], kinds[i].second) << i;
  }
  EXPECT_NEAR(records[5]["score"].get<double>(), (0.2 + 2.0 / 6) / 2, kEps);
  EXPECT_EQ(records[5]["candidates"], 1);
  EXPECT_EQ(records[5]["all_passed"], true);
  EXPECT_EQ(records[6]["family"], "llama");
  EXPECT_NEAR(records[6]["fraction_correct"].get<double>(), 0.5, kEps);
  EXPECT_NEAR(records[8]["score"].get<double>(), 0.0625, kEps);
  EXPECT_EQ(records[8]["candidates"], 2);
  EXPECT_EQ(records[8]["all_passed"], false);

  const std::string m = slurp(md);
  for (const char* line : {
           "| v1 | norm | 1 | PASSED | 2.000x (2.000-2.000) | -/1.000x/1.000x | - | - | - |  |\n",
           "| v2 | norm | 1 | INCORRECT | 1.000x (1.000-1.000) | -/1.000x/1.000x | - | - | - | "
           "case decode_b1: INCORRECT (nonfinite): output 0 holds NaN at [0, 7] |\n",
           "### Set `v1`\n\n1 candidate(s): 1 PASSED\n\n",
           "| qwen | 0.333 | 2.000 | 1.000 (1/1) | 0.167 (1/6) |\n",
           "**Overall score of set `v1`: 0.267** (mean over 2 families)\n",
           "### Set `v2`\n\n2 candidate(s): 1 PASSED, 1 INCORRECT\n\n",
           "| llama | 0.125 | 1.250 | 0.500 (1/2) | 0.200 (2/10) |\n",
           "| qwen | 0.000 | - | 0.000 (0/1) | 0.167 (1/6) |\n",
           "**Overall score of set `v2`: 0.062** (mean over 2 families)\n",
           "### `v1`: norm (PASSED)\n",
           "### `v2`: norm (INCORRECT)\n",
       })
    EXPECT_NE(m.find(line), std::string::npos) << "missing: " << line << "\n---\n" << m;
}

// ---- the command line -------------------------------------------------------------------------

TEST(Compare, ExitCodesTerminalJsonlAndMarkdown) {
  std::string out;
  EXPECT_EQ(run(compare_cmd("pass"), &out), 0) << out;
  TempDir tmp;
  const fs::path jsonl = tmp.path() / "out" / "score.jsonl", md = tmp.path() / "score.md";
  ASSERT_EQ(run(compare_cmd("score") + " --jsonl " + q(jsonl) + " --markdown " + q(md), &out), 1) << out;
  for (const char* line : {
           "set a: 3 candidate(s): 2 PASSED, 1 INCORRECT\n"
           "  llama: 0.316 = 1.581 x 1.000 (2/2) x 0.200 (2/10)\n"
           "  qwen: 0.333 = 2.000 x 0.500 (1/2) x 0.333 (2/6)\n"
           "  overall score of set a: 0.325 (mean over 2 families)\n",
           "a         | act_q | 1     | INCORRECT | 1.000x (1.000-1.000)      | 1.000x/1.000x/1.000x | -      | -              | -             | "
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
  EXPECT_EQ(records[3]["set"], "a");
  EXPECT_EQ(records[5]["type"], "score");
  EXPECT_EQ(records[5]["set"], "a");
  EXPECT_EQ(records[5]["scope"], "all");
  EXPECT_NEAR(records[5]["score"].get<double>(), (std::sqrt(2.5) * 0.2 + 1.0 / 3) / 2, kEps);
  EXPECT_EQ(records[5]["baseline_commit"], "b0a5e11");
  EXPECT_EQ(records[5]["set_commit"], "c4nd1da (2025-06-02)");

  const std::string m = slurp(md);
  for (const char* line : {
           "- gpu: NVIDIA H100 80GB HBM3\n",
           "- baseline: commit b0a5e11, date 2025-06-01\n",
           "- set `a`: c4nd1da (2025-06-02)\n",
           "| a | norm | 1 | PASSED | 2.000x (2.000-2.000) | -/1.000x/1.000x | - | - | - |  |\n",
           "| qwen | 0.333 | 2.000 | 0.500 (1/2) | 0.333 (2/6) |\n",
           "**Overall score of set `a`: 0.325** (mean over 2 families)\n",
           "| decode_b1 | decode | PASSED | INCORRECT (nonfinite) | 10.00 | - | - | output 0 holds NaN at [0, 0] |\n",
       })
    EXPECT_NE(m.find(line), std::string::npos) << "missing: " << line << "\n---\n" << m;
}

TEST(Compare, UsageErrors) {
  std::string out;
  EXPECT_EQ(run(compare_cmd("score") + " --scope L5", &out), 2) << out;
  EXPECT_NE(out.find("--scope"), std::string::npos) << out;
  EXPECT_EQ(run(compare_cmd("score") + " --tie-gap -1", &out), 2) << out;
  EXPECT_NE(out.find("--tie-gap: expected `auto` or a number >= 0, got -1"), std::string::npos) << out;
  EXPECT_EQ(run(compare_cmd("score") + " --tie-gap measured", &out), 2) << out;
  EXPECT_NE(out.find("--tie-gap: expected `auto` or a number >= 0, got measured"), std::string::npos) << out;
  EXPECT_EQ(run(compare_cmd("score") + " --tie-gap auto", &out), 1) << out;
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
        "baseline/bench.jsonl:3: $.status: expected one of PASSED, INCORRECT, RUNTIME_ERROR, TIMEOUT, SUSPECT, SKIPPED, INFRA_ERROR, got \"OK\"",
        "baseline/bench.jsonl:4: $.check.outputs[0].max_abs_err: expected number >= 0 or null, got \"small\"",
        "baseline/bench.jsonl:4: $.check.outputs[1].name: expected string, got nothing",
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
