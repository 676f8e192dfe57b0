// The HF transformers audit (`fastkernels audit --hf`, docs/audit-rules.md) on a fixture package
// (tests/fixtures/hf_audit/transformers: one tiny model folder per verdict), the strict rules
// loader (tests/fixtures/hf_audit/bad_rules: one problem per file, messages pinned), the JSON
// summary read back, and `fastkernels add` for a model type without a descriptor.
#include <gtest/gtest.h>

#include "fk/gen/hf_audit.h"
#include "fk/gen/repo.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;
namespace hfa = fk::gen::hfaudit;

fs::path fixture_pkg() { return fixtures() / "hf_audit" / "transformers"; }
std::string audit_cmd() { return bin() + " audit --root " + q(source_dir()) + " --hf " + q(fixtures() / "hf_audit"); }

hfa::Rules real_rules() {
  Diagnostics diag;
  auto r = hfa::load_rules_file(source_dir() / "generator" / "audit" / "hf_rules.json", "generator/audit/hf_rules.json", diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  return *r;
}

hfa::Audit fixture_audit(const hfa::Rules& rules) {
  Diagnostics diag;
  auto a = hfa::audit_package(fixture_pkg(), rules, diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  return *a;
}

std::vector<std::string> op_ids(const hfa::ModelAudit& m) {
  std::vector<std::string> out;
  for (const auto& [id, f] : m.ops) out.push_back(id);
  return out;
}

TEST(HfAudit, CommittedRulesLoadAndNameOnlyExistingKinds) {
  // load_rules rejects a kind that generator/kinds/*.json does not hold, so loading proves it.
  hfa::Rules r = real_rules();
  EXPECT_GT(r.operators.size(), 50u);
  EXPECT_GT(r.rules.size(), 50u);
  ASSERT_NE(r.op("layer_norm"), nullptr);
  EXPECT_EQ(r.op("layer_norm")->coverage, hfa::Coverage::kKinds);
  EXPECT_EQ(r.op("bidirectional_attention")->coverage, hfa::Coverage::kKinds);  // flash_attn_prefill, causal false
  EXPECT_EQ(r.op("cross_attention")->coverage, hfa::Coverage::kKinds);  // bound by bert2bert's decoder
  EXPECT_EQ(r.op("window_attention")->coverage, hfa::Coverage::kMissing);
  EXPECT_EQ(r.op("selective_scan")->coverage, hfa::Coverage::kNewKernel);
  EXPECT_EQ(r.op("rms_norm")->coverage, hfa::Coverage::kKinds);
  for (const auto& op : r.operators) EXPECT_FALSE(op.doc.empty()) << op.id;
  for (const auto& rule : r.rules) EXPECT_FALSE(rule.doc.empty()) << rule.id;
}

TEST(HfAudit, FixtureVerdictsOnePerCase) {
  const hfa::Rules rules = real_rules();
  const hfa::Audit a = fixture_audit(rules);
  EXPECT_EQ(a.version, "0.0.1.fixture");
  EXPECT_EQ(a.version_source, "transformers/__init__.py");
  ASSERT_EQ(a.models.size(), 7u);
  EXPECT_EQ(a.skipped, (std::vector<std::string>{"auto", "tinytok"}));  // skip_folders; no modeling code

  auto verdict = [&](const std::string& folder) { return std::string(hfa::verdict_name(a.find(folder)->verdict)); };
  EXPECT_EQ(verdict("tinyllama"), "covered");
  EXPECT_EQ(verdict("tinygpt"), "composition");
  EXPECT_EQ(verdict("tinybert"), "composition");  // bidirectional attention, layer_norm, gelu: kinds now
  EXPECT_EQ(verdict("tinylstm"), "partial");
  EXPECT_EQ(verdict("tinymamba"), "new-kernel");
  EXPECT_EQ(verdict("tinyvlm"), "partial");  // its sub-models' operators count (Note [Sub-models])
  // Its own code is covered, but the checkpoint picks its sub-models: it cannot be called covered.
  EXPECT_EQ(verdict("tinywrap"), "unclassified");
  EXPECT_EQ(op_ids(*a.find("tinywrap")), (std::vector<std::string>{"linear"}));
  EXPECT_TRUE(a.find("tinywrap")->uses_folders.empty());  // the skipped auto folder is no sub-model
  EXPECT_EQ(a.count(hfa::Verdict::kPartial), 2u);

  // Comments, docstrings and import lines do not count: no LayerNorm, Conv2d or bidirectional mask.
  EXPECT_EQ(op_ids(*a.find("tinyllama")),
            (std::vector<std::string>{"causal_attention", "linear", "rms_norm", "rope", "silu_and_mul", "token_embedding"}));
  // ACT2FN[config.activation_function] -> "gelu_pytorch_tanh" (old-style keyword default), gated.
  EXPECT_EQ(op_ids(*a.find("tinygpt")), (std::vector<std::string>{"causal_attention", "conv1d_linear", "gelu_tanh_and_mul",
                                                                    "learned_absolute_position", "rms_norm", "token_embedding"}));
  // ACT2FN[config.hidden_act] -> "gelu", not gated: plain GELU; the configuration's position type.
  const auto& bert = *a.find("tinybert");
  for (const char* id : {"layer_norm", "gelu", "bidirectional_attention", "tanh", "learned_absolute_position"})
    EXPECT_TRUE(bert.ops.count(id)) << id;
  EXPECT_FALSE(bert.ops.count("causal_attention"));
  // A multi-line Conv1d with symmetric padding is an ordinary conv1d; Mamba's is causal.
  EXPECT_EQ(op_ids(*a.find("tinylstm")), (std::vector<std::string>{"conv1d", "linear", "lstm"}));
  const auto& mamba = *a.find("tinymamba");
  EXPECT_TRUE(mamba.ops.count("causal_conv1d"));
  EXPECT_FALSE(mamba.ops.count("conv1d"));
  EXPECT_TRUE(mamba.ops.count("selective_scan"));
  ASSERT_EQ(mamba.unresolved.size(), 1u);  // ACT2FN[act_name]: a constructor argument without a default
  EXPECT_EQ(mamba.unresolved[0].line, 23);
  // Sub-models: a configuration default (tinyllama) and an imported encoder (tinylstm).
  const auto& vlm = *a.find("tinyvlm");
  EXPECT_EQ(vlm.uses, (std::vector<std::string>{"tinyllama"}));
  EXPECT_EQ(vlm.uses_folders, (std::vector<std::string>{"tinylstm"}));
  EXPECT_TRUE(vlm.ops.count("lstm"));
  EXPECT_TRUE(vlm.ops.count("silu_and_mul"));
  EXPECT_TRUE(vlm.via_ops.count("lstm"));
  EXPECT_FALSE(vlm.via_ops.count("linear"));  // its own projector
  // find() by model type as well as folder.
  EXPECT_EQ(a.find("tinybert"), &bert);
  EXPECT_EQ(a.find("nosuchmodel"), nullptr);
}

TEST(HfAudit, ExplainKeepsRuleFileLineAndText) {
  std::string out;
  ASSERT_EQ(run(audit_cmd() + " --explain tinylstm", &out), 0) << out;
  EXPECT_NE(out.find("models/tinylstm: partial"), std::string::npos) << out;
  EXPECT_NE(out.find("      nn-lstm: models/tinylstm/modeling_tinylstm.py:14: self.lstm = nn.LSTM(config.hidden_size, "
                     "config.hidden_size, batch_first=True)\n"),
            std::string::npos)
      << out;
  // a logical line: the call spans five physical lines, evidence points at the first
  EXPECT_NE(out.find("      nn-conv1d: models/tinylstm/modeling_tinylstm.py:8: self.conv = nn.Conv1d( config.hidden_size, "
                     "config.hidden_size, kernel_size=3, padding=(3 - 1) // 2, )\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  recurrence lstm                      missing: no LSTM kind (cuDNN RNN)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: partial; not covered: conv1d, lstm\n"), std::string::npos) << out;

  // The activation chain: the ACT2FN reference, the configuration default, the gating line.
  ASSERT_EQ(run(audit_cmd() + " --explain tinyllama", &out), 0) << out;
  EXPECT_NE(out.find("      activations: models/tinyllama/modeling_tinyllama.py:31: self.act_fn = ACT2FN[config.hidden_act]\n"
                     "        ACT2FN[config.hidden_act]: hidden_act = \"silu\" (models/tinyllama/configuration_tinyllama.py:14); "
                     "gated: line 34 `return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))`\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("verdict: covered\n"), std::string::npos) << out;

  // By model type; new-kernel operators say so; unresolved references are listed, not counted.
  ASSERT_EQ(run(audit_cmd() + " --explain tinymamba", &out), 0) << out;
  EXPECT_NE(out.find("  recurrence selective_scan            new kernel: Mamba selective scan"), std::string::npos) << out;
  EXPECT_NE(out.find("not counted (could not be resolved):\n      activations: models/tinymamba/modeling_tinymamba.py:23: "
                     "self.act = ACT2FN[act_name]\n        ACT2FN[act_name]: no default for `act_name` in the configuration\n"),
            std::string::npos)
      << out;

  // Sub-model operators are marked and point at the sub-model's source.
  ASSERT_EQ(run(audit_cmd() + " --explain tinyvlm", &out), 0) << out;
  EXPECT_NE(out.find("  recurrence lstm                      [sub-model] missing: no LSTM kind (cuDNN RNN)\n"
                     "      nn-lstm: models/tinylstm/modeling_tinylstm.py:14: "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("        via models/tinylstm\n"), std::string::npos) << out;
}

TEST(HfAudit, ReportPrintsVersionCountsAndUncoveredWithReasons) {
  std::string out;
  ASSERT_EQ(run(audit_cmd(), &out), 0) << out;
  EXPECT_NE(out.find("HF transformers audit: transformers 0.0.1.fixture (transformers/__init__.py), rules "
                     "generator/audit/hf_rules.json\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("7 model folders audited, 2 without modeling code skipped\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  covered      1    every operator"), std::string::npos) << out;
  EXPECT_NE(out.find("  new-kernel   1    some operator needs a genuinely new kernel"), std::string::npos) << out;
  EXPECT_NE(out.find("  2    lstm                      recurrence no LSTM kind (cuDNN RNN)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  tinymamba                   new-kernel causal_conv1d (new kernel), selective_scan (new kernel)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("unclassified (no rule matched, or the checkpoint picks the sub-models): tinywrap\n"), std::string::npos) << out;
  EXPECT_NE(out.find("summary: transformers 0.0.1.fixture: 1 covered, 2 composition, 2 partial, 1 new-kernel, 1 unclassified; "
                     "1 activation reference(s) not resolved"),
            std::string::npos)
      << out;

  // Markdown and JSON outputs; the JSON reads back as the summary `add` uses.
  TempDir tmp;
  ASSERT_EQ(run("cd " + q(tmp.path()) + " && " + audit_cmd() + " --hf-markdown r.md --hf-json r.json", &out), 0) << out;
  const std::string md = slurp(tmp.path() / "r.md");
  EXPECT_NE(md.find("| partial | 2 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tinymamba | tinymamba | new-kernel | causal_conv1d (new kernel), selective_scan (new kernel) |  |"),
            std::string::npos)
      << md;
  Diagnostics diag;
  auto s = hfa::load_summary("r.json", slurp(tmp.path() / "r.json"), diag);
  ASSERT_TRUE(s) << diag.text();
  EXPECT_EQ(s->version, "0.0.1.fixture");
  const hfa::SummaryModel* bert = s->find("tinybert");
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ(bert->verdict, "composition");
  EXPECT_FALSE(bert->by_coverage.count("missing"));
  EXPECT_EQ(bert->by_coverage.at("kinds"),
            (std::vector<std::string>{"bidirectional_attention", "gelu", "layer_norm", "linear", "tanh", "token_embedding"}));
  EXPECT_EQ(bert->by_coverage.at("composition"), (std::vector<std::string>{"learned_absolute_position"}));
  EXPECT_EQ(s->operators.at("layer_norm").detail, "layer_norm, fused_add_layer_norm");
  EXPECT_EQ(s->operators.at("bidirectional_attention").detail, "flash_attn_prefill");
  EXPECT_EQ(s->operators.at("cross_attention").coverage, "kinds");
  EXPECT_EQ(s->operators.at("cross_attention").detail, "cross_attention");
  EXPECT_EQ(s->operators.at("window_attention").coverage, "missing");
}

TEST(HfAudit, BadRulesNameFileFieldAndExpectation) {
  const std::map<std::string, std::string> expected = {
      {"activation_unknown_operator.json", "$.activations.names.silu[1]: expected the id of an operator in $.operators, got \"silu_and_mul\""},
      {"bad_category.json", "$.operators[0].category: expected one of norm, activation, attention, position, moe, conv, recurrence, "
                            "pooling, embedding, other, got \"normalisation\""},
      {"bad_regex.json", "$.rules[0].regex: expected an ECMAScript regular expression ("},
      {"bad_schema.json", "$.schema: expected 1, got 2"},
      {"composition_without_how.json", "$.operators[0].how: missing (required)"},
      {"malformed.json", "malformed JSON: parse error at line 4, column 1"},
      {"missing_doc.json", "$.rules[0].doc: missing (required)"},
      {"new_kernel_not_bool.json", "$.operators[0].new_kernel: expected true or false, got \"yes\""},
      {"two_coverages.json", "$.operators[0]: expected exactly one of \"kinds\", \"composition\" or \"missing\" (how our task kinds "
                             "cover the operator)"},
      {"unknown_key.json", "$.operators[0].coverage: unknown key \"coverage\" (expected one of id, category, doc, kinds, composition, "
                           "how, missing, new_kernel, requires, subsumed_by)"},
      {"unknown_kind.json", "$.operators[0].kinds[0]: expected a task kind of generator/kinds/*.json (activation, all_gather, all_gather_matmul, all_gather_rows, all_reduce, all_reduce_add_rms_norm, attention_o_proj, "},
      {"unknown_operator.json", "$.rules[0].operator: expected the id of an operator in $.operators, got \"rmsnorm\""},
      {"values_without_group.json", "$.rules[0].regex: expected a regular expression with a capture group (group 1 is the value), "
                                    "got \"rope_type\""},
  };
  size_t seen = 0;
  for (const auto& e : fs::directory_iterator(fixtures() / "hf_audit" / "bad_rules")) {
    const std::string name = e.path().filename().string();
    ASSERT_TRUE(expected.count(name)) << "no expected message for " << name;
    ++seen;
    Diagnostics diag;
    const std::string file = "tests/fixtures/hf_audit/bad_rules/" + name;
    EXPECT_FALSE(hfa::load_rules(file, slurp(e.path()), diag)) << name;
    ASSERT_EQ(diag.errors().size(), 1u) << diag.text();
    EXPECT_EQ(diag.errors()[0].rfind(file + ": " + expected.at(name), 0), 0u) << diag.errors()[0];
  }
  EXPECT_EQ(seen, expected.size());
  EXPECT_NE(expected.at("unknown_kind.json").find("generator/kinds/*.json"), std::string::npos);

  // Through the CLI: exit 1, the file as given (repository-relative), nothing else run.
  std::string out;
  EXPECT_EQ(run(audit_cmd() + " --rules " + q(fixtures() / "hf_audit" / "bad_rules" / "unknown_kind.json"), &out), 1) << out;
  EXPECT_NE(out.find("tests/fixtures/hf_audit/bad_rules/unknown_kind.json: $.operators[0].kinds[0]: expected a task kind of "
                     "generator/kinds/*.json ("),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(", got \"linear_fancy\"\n"), std::string::npos) << out;
}

TEST(HfAudit, BadInputsGiveClearErrors) {
  std::string out;
  EXPECT_EQ(run(bin() + " audit --root " + q(source_dir()) + " --hf /nonexistent/transformers", &out), 4) << out;
  EXPECT_NE(out.find("/nonexistent/transformers: no such directory (--hf expects the transformers package directory"),
            std::string::npos)
      << out;
  EXPECT_EQ(run(bin() + " audit --root " + q(source_dir()) + " --hf " + q(fixtures() / "hf_audit" / "bad_rules"), &out), 1) << out;
  EXPECT_NE(out.find("bad_rules: not a transformers package (expected models/ and __init__.py in it"), std::string::npos) << out;
  EXPECT_EQ(run(audit_cmd() + " --explain llama", &out), 1) << out;
  EXPECT_NE(out.find("fastkernels audit --explain: unknown model \"llama\": neither a folder under models/ nor a model_type of "
                     "transformers 0.0.1.fixture; close: tinyllama\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(run(bin() + " audit --root " + q(source_dir()) + " --explain tinyllama", &out), 2) << out;
  EXPECT_NE(out.find("--explain, --rules, --hf-json and --hf-markdown need --hf <transformers dir>"), std::string::npos) << out;
  EXPECT_EQ(run(audit_cmd() + " --csv x.csv", &out), 2) << out;
  EXPECT_EQ(run(audit_cmd() + " --rules /nonexistent/rules.json", &out), 4) << out;
  EXPECT_NE(out.find("/nonexistent/rules.json: cannot read the audit rules file"), std::string::npos) << out;
  // dist-info fallback for the version
  TempDir tmp;
  fs::copy(fixture_pkg(), tmp.path() / "transformers", fs::copy_options::recursive);
  spit(tmp.path() / "transformers" / "__init__.py", "# no version here\n");
  spit(tmp.path() / "transformers-9.9.9.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: transformers\nVersion: 9.9.9\n");
  ASSERT_EQ(run(bin() + " audit --root " + q(source_dir()) + " --hf " + q(tmp.path()), &out), 0) << out;
  EXPECT_NE(out.find("transformers 9.9.9 (transformers-9.9.9.dist-info/METADATA)"), std::string::npos) << out;
}

TEST(HfAudit, CommittedSummaryMatchesTheRules) {
  // generator/audit/hf_audit_summary.json (scripts/audit_hf.sh --update) carries the operator
  // catalogue of the rules it was made with: editing the rules means regenerating it.
  const hfa::Rules rules = real_rules();
  const fs::path path = source_dir() / hfa::kSummaryPath;
  Diagnostics diag;
  auto s = hfa::load_summary(hfa::kSummaryPath, slurp(path), diag);
  ASSERT_TRUE(s) << diag.text();
  EXPECT_EQ(s->operators.size(), rules.operators.size()) << "regenerate: scripts/audit_hf.sh --update";
  for (const auto& op : rules.operators) {
    auto it = s->operators.find(op.id);
    ASSERT_NE(it, s->operators.end()) << op.id << " missing from the summary; regenerate: scripts/audit_hf.sh --update";
    EXPECT_EQ(it->second.coverage, hfa::coverage_name(op.coverage)) << op.id;
    EXPECT_EQ(it->second.category, op.category) << op.id;
  }
  const hfa::SummaryModel* llama = s->find("llama");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->verdict, "covered");
  const hfa::SummaryModel* bert = s->find("bert");
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ(bert->verdict, "composition");  // learned positions and token types are compositions
  const hfa::SummaryModel* whisper = s->find("whisper");
  ASSERT_NE(whisper, nullptr);
  EXPECT_EQ(whisper->verdict, "partial");  // conv1d front end
}

TEST(HfAudit, AddNamesTheComponentsOfACompositeConfig) {
  // A VLM's composite config (the legacy layout: the text keys at the top level): the add error names each
  // component with the model type it is lowered as and the family that claims it.
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  spit(tmp.path() / "in" / "config.json",
       "{\"model_type\": \"qwen2_5_vl\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"vision_config\": {\"depth\": 2}}\n");
  std::string out;
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "config.json"), &out), 1) << out;
  EXPECT_NE(out.find("It is a composite config: each component is a model of its own, lowered by `add --component <key>`:\n"
                     "  text_config (the top-level text keys): model_type \"qwen2_5_vl_text\", family llama (generator/descriptors/llama.json)\n"
                     "  vision_config: model_type \"qwen2_5_vl_vision\", family qwen2_5_vl_vision (generator/descriptors/qwen2_5_vl_vision.json)\n"),
            std::string::npos)
      << out;
}

TEST(HfAudit, AddReportsWhatTheAuditKnowsForAModelTypeWithoutDescriptor) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  // No summary yet: the error, and how to get one.
  spit(tmp.path() / "in" / "config.json", "{\"model_type\": \"tinybert\", \"_name_or_path\": \"acme/tinybert\", \"hidden_size\": 64}\n");
  const std::string add = bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "config.json");
  EXPECT_EQ(run(add, &out), 1) << out;
  EXPECT_NE(out.find("$.model_type: unknown model_type \"tinybert\"; known: bert, deepseek_v3, "), std::string::npos) << out;
  EXPECT_NE(out.find("no audit summary at generator/audit/hf_audit_summary.json"), std::string::npos) << out;

  // With the fixture audit's summary in place.
  ASSERT_EQ(run(audit_cmd() + " --hf-json " + q(tmp.path() / "generator" / "audit" / "hf_audit_summary.json"), &out), 0) << out;
  EXPECT_EQ(run(add, &out), 1) << out;
  EXPECT_NE(out.find("What the transformers audit knows about model_type \"tinybert\" (models/tinybert, transformers 0.0.1.fixture, "
                     "generator/audit/hf_audit_summary.json):\n  verdict: composition\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  covered by our task kinds:\n    bidirectional_attention   attention  flash_attn_prefill\n"
                     "    gelu                      activation activation\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("\n    linear                    other      replicated_linear, "), std::string::npos) << out;
  EXPECT_NE(out.find("  covered by composition:\n    learned_absolute_position position   vocab_parallel_embedding, "
                     "fused_add_rms_norm: a vocab_parallel_embedding lookup"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("    layer_norm                norm       layer_norm, fused_add_layer_norm\n"),
            std::string::npos)
      << out;
  // Every operator covered: the way on is a descriptor, or `add --as` for a known model type's forward.
  EXPECT_NE(out.find("`fastkernels add --as <that model_type>` lowers this config as it"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme"));  // nothing written

  // And the nearest descriptors (Note [Nearest descriptor]): a BERT-shaped config ranks family bert first (the
  // most of the audit's kinds, every key read but the one it does not know), with the fields to map.
  spit(tmp.path() / "in" / "tinybert.json",
       "{\"model_type\": \"tinybert\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 2, "
       "\"num_hidden_layers\": 1, \"max_position_embeddings\": 32, \"vocab_size\": 100, \"type_vocab_size\": 2, "
       "\"layer_norm_eps\": 1e-12, \"hidden_act\": \"gelu\", \"frobnicate\": 3}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "tinybert.json"), &out), 1) << out;
  const size_t near = out.find("Nearest descriptors (Note [Nearest descriptor]");
  ASSERT_NE(near, std::string::npos) << out;
  EXPECT_NE(out.find("  1. family bert (generator/descriptors/bert.json; model types bert, xlm-roberta): ", near), std::string::npos) << out;
  EXPECT_NE(out.find("       fields it reads: hidden_act, hidden_size, intermediate_size, layer_norm_eps, max_position_embeddings, "
                     "num_attention_heads, num_hidden_layers, type_vocab_size, vocab_size\n",
                     near),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("or accepted with `add --allow-unknown`): frobnicate\n", near), std::string::npos) << out;
  EXPECT_NE(out.find("try: fastkernels add <config> --as <bert | xlm-roberta> --allow-unknown frobnicate", near), std::string::npos) << out;
  EXPECT_NE(out.find("  2. family ", near), std::string::npos) << out;

  // A partial model type: add the kinds first.
  spit(tmp.path() / "in" / "lstm.json", "{\"model_type\": \"tinylstm\"}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "lstm.json"), &out), 1) << out;
  EXPECT_NE(out.find("  verdict: partial\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Next steps:\n  1. add task kinds for the missing operators (docs/HOWTO-add-architecture.md"), std::string::npos)
      << out;

  // New-kernel and covered model types get their own next steps.
  spit(tmp.path() / "in" / "mamba.json", "{\"model_type\": \"tinymamba\"}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "mamba.json"), &out), 1) << out;
  EXPECT_NE(out.find("  needs a new kernel:\n    causal_conv1d "), std::string::npos) << out;
  EXPECT_NE(out.find("the new-kernel ones need kernels of their own"), std::string::npos) << out;
  spit(tmp.path() / "in" / "llama.json", "{\"model_type\": \"tinyllama\"}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "llama.json"), &out), 1) << out;
  EXPECT_NE(out.find("  verdict: covered\n"), std::string::npos) << out;
  EXPECT_NE(out.find("add\n  \"tinyllama\" to that descriptor's model_types"), std::string::npos) << out;

  // Unknown to the audit too.
  spit(tmp.path() / "in" / "other.json", "{\"model_type\": \"nosuchmodel\"}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "other.json"), &out), 1) << out;
  EXPECT_NE(out.find("model_type \"nosuchmodel\" is unknown to the transformers audit too (generator/audit/hf_audit_summary.json, "
                     "transformers 0.0.1.fixture)"),
            std::string::npos)
      << out;

  // A model type with a descriptor goes the usual way (the audit says nothing).
  spit(tmp.path() / "in" / "llama2.json", "{\"model_type\": \"llama\", \"_name_or_path\": \"acme/x\", \"hidden_size\": \"big\"}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "llama2.json"), &out), 1) << out;
  EXPECT_EQ(out.find("transformers audit"), std::string::npos) << out;
}

}  // namespace
}  // namespace fk::gen
