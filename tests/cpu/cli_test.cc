// The `fastkernels` binary: verbs, --help, exit codes, `add`, and `generate --check` against the
// committed repository tree (generated/ must be up to date in every commit).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;


TEST(Cli, CommittedTreeIsUpToDate) {
  std::string out;
  int rc = run(bin() + " generate --check --root " + q(source_dir()), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("generated/ is up to date"), std::string::npos) << out;
}

TEST(Cli, HelpOnEveryVerbDocumentsExitCodes) {
  for (const std::string verb : {"", " parse", " list", " add", " generate"}) {
    std::string out;
    EXPECT_EQ(run(bin() + verb + " --help", &out), 0) << verb;
    EXPECT_NE(out.find("3  `generate --check`"), std::string::npos) << verb << ":\n" << out;
    EXPECT_NE(out.find("4  I/O error"), std::string::npos) << verb;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  std::string out;
  EXPECT_EQ(run(bin() + " frobnicate", &out), 2) << out;
  EXPECT_EQ(run(bin(), &out), 2) << out;
  EXPECT_EQ(run(bin() + " parse", &out), 2) << out;  // missing positional
  EXPECT_EQ(run(bin() + " generate --bogus", &out), 2) << out;
}

TEST(Cli, ParsePrintsResolvedValuesAndTasks) {
  std::string out;
  int rc = run(bin() + " parse --root " + q(source_dir()) + " " +
                   q(fixtures() / "golden" / "root" / "hf_configs" / "tiny" / "qwen3-tiny" / "config.json"),
               &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("model_type  qwen3"), std::string::npos) << out;
  EXPECT_NE(out.find("  head_dim = 32  [$.head_dim]"), std::string::npos) << out;
  EXPECT_NE(out.find("  torch_dtype = \"float16\"  [$.dtype]"), std::string::npos) << out;
  EXPECT_NE(out.find("  qk_norm_hq4_hkv1_d32_eps1e-06_f16"), std::string::npos) << out;
}

TEST(Cli, ParseErrorsExitOneAndIoErrorsExitFour) {
  std::string out;
  EXPECT_EQ(run(bin() + " parse --root " + q(source_dir()) + " " + q(fixtures() / "bad_configs" / "unknown_key.json"), &out), 1);
  EXPECT_NE(out.find("tests/fixtures/bad_configs/unknown_key.json: $.use_fancy_attention: unknown key"), std::string::npos) << out;
  EXPECT_EQ(run(bin() + " parse --root " + q(source_dir()) + " /nonexistent/config.json", &out), 4) << out;
}

TEST(Cli, AddStoresVerbatimGeneratesAndRefusesOverwrite) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  ASSERT_EQ(run(bin() + " generate --root " + q(tmp.path()), &out), 0) << out;

  // A config spelled unusually (key order, spacing) is stored byte for byte.
  const std::string cfg =
      "{\"vocab_size\": 300,  \"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"max_position_embeddings\": 1024,\n"
      " \"torch_dtype\": \"bfloat16\", \"_name_or_path\": \"acme/llama-mini\"}\n";
  spit(tmp.path() / "in" / "config.json", cfg);
  ASSERT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in" / "config.json"), &out), 0) << out;
  EXPECT_EQ(slurp(tmp.path() / "hf_configs" / "acme" / "llama-mini" / "config.json"), cfg);
  EXPECT_TRUE(fs::exists(tmp.path() / "generated" / "L1" / "parallel_lm_head_v300_h64_bf16.cu"));
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 0) << out;
  // add also refreshes the coverage audit's docs/coverage.md, which then names the new config.
  EXPECT_EQ(run(bin() + " audit --check --root " + q(tmp.path()), &out), 0) << out;
  EXPECT_NE(slurp(tmp.path() / "docs" / "coverage.md").find("acme/llama-mini"), std::string::npos);

  // --name wins; the same bytes again are fine; different bytes under an existing name are refused.
  ASSERT_EQ(run(bin() + " add --root " + q(tmp.path()) + " --name acme/other " + q(tmp.path() / "in" / "config.json"), &out), 0) << out;
  EXPECT_TRUE(fs::exists(tmp.path() / "hf_configs" / "acme" / "other" / "config.json"));
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " --name acme/other " + q(tmp.path() / "in" / "config.json"), &out), 0) << out;
  spit(tmp.path() / "in2" / "config.json", cfg + " ");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " --name acme/other " + q(tmp.path() / "in2" / "config.json"), &out), 1);
  EXPECT_NE(out.find("hf_configs/acme/other/config.json: already exists with different content"), std::string::npos) << out;

  // No --name, no _name_or_path and a file name that says nothing: asks for --name, stores nothing.
  spit(tmp.path() / "in3" / "lonely.json", "{\"model_type\": \"llama\"}\n");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in3" / "lonely.json"), &out), 1);
  EXPECT_NE(out.find("pass --name <org>/<model>"), std::string::npos) << out;
  // The file name org__model.json names it, and add says so.
  const std::string unnamed =
      "{\"vocab_size\": 310, \"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"max_position_embeddings\": 1024, \"torch_dtype\": \"bfloat16\"}\n";
  spit(tmp.path() / "in4" / "acme__from-file.json", unnamed);
  ASSERT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(tmp.path() / "in4" / "acme__from-file.json"), &out), 0) << out;
  EXPECT_NE(out.find("name     acme/from-file (from the file name"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(tmp.path() / "hf_configs" / "acme" / "from-file" / "config.json"));

  // An invalid config is not stored.
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " --name acme/bad " + q(fixtures() / "bad_configs" / "bad_dtype.json"), &out), 1);
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme" / "bad"));
}

TEST(Cli, AddServesFloat32AndUnknownModelTypesOnlyAsAskedAndRecordsIt) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  const std::string cfg =
      "{\"vocab_size\": 320, \"model_type\": \"acme_llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"max_position_embeddings\": 1024, \"torch_dtype\": \"float32\"}\n";
  spit(tmp.path() / "in" / "config.json", cfg);
  const std::string add = bin() + " add --root " + q(tmp.path()) + " --name acme/f32 " + q(tmp.path() / "in" / "config.json");
  EXPECT_EQ(run(add, &out), 1);
  EXPECT_NE(out.find("unknown model_type \"acme_llama\""), std::string::npos) << out;
  EXPECT_EQ(run(add + " --as llama", &out), 1);
  EXPECT_NE(out.find("$.torch_dtype: float32 checkpoint"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme" / "f32"));
  EXPECT_EQ(run(add + " --as llama --dtype float32", &out), 2) << out;  // not a dtype the kernels serve
  ASSERT_EQ(run(add + " --as llama --dtype bfloat16", &out), 0) << out;
  EXPECT_NE(out.find("recorded hf_configs/acme/f32/fastkernels.json (dtype bfloat16) (as llama)"), std::string::npos) << out;
  EXPECT_EQ(slurp(tmp.path() / "hf_configs" / "acme" / "f32" / "fastkernels.json"),
            "{\n  \"dtype\": \"bfloat16\",\n  \"served_as\": \"llama\"\n}\n");
  const std::string manifest = slurp(tmp.path() / "generated" / "manifest.json");
  EXPECT_NE(manifest.find("\"dtype_from\": \"float32\""), std::string::npos);
  EXPECT_NE(manifest.find("\"served_as\": \"llama\""), std::string::npos);
  EXPECT_NE(manifest.find("\"model_type\": \"acme_llama\""), std::string::npos);
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 0) << out;
}

TEST(Cli, AddRecordsParallelLayoutsAndGeneratesEach) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  const std::string cfg =
      "{\"vocab_size\": 320, \"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 1, \"max_position_embeddings\": 1024,"
      " \"torch_dtype\": \"bfloat16\"}\n";
  spit(tmp.path() / "in" / "config.json", cfg);
  const std::string add = bin() + " add --root " + q(tmp.path()) + " --name acme/tp " + q(tmp.path() / "in" / "config.json");
  EXPECT_EQ(run(add + " --parallel tp2,tp0", &out), 2) << out;
  EXPECT_NE(out.find("--parallel tp0: expected a layout such as tp2"), std::string::npos) << out;
  EXPECT_EQ(run(add + " --parallel tp3", &out), 1) << out;  // 4 heads do not split 3 ways
  EXPECT_NE(out.find("$.num_attention_heads: expected a multiple of the layout's tp_size"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme" / "tp"));
  ASSERT_EQ(run(add + " --parallel tp4,tp2", &out), 0) << out;
  EXPECT_EQ(slurp(tmp.path() / "hf_configs" / "acme" / "tp" / "fastkernels.json"),
            "{\n  \"parallel\": [\n    {\n      \"tp\": 2\n    },\n    {\n      \"tp\": 4\n    }\n  ]\n}\n");
  const std::string manifest = slurp(tmp.path() / "generated" / "manifest.json");
  for (const char* id : {"\"acme/tp\"", "\"acme/tp@tp2\"", "\"acme/tp@tp4\""}) EXPECT_NE(manifest.find(id), std::string::npos) << id;
  EXPECT_TRUE(fs::exists(tmp.path() / "generated" / "L1" / "row_parallel_linear_k32_n64_nobias_tp2_bf16.h"));
  EXPECT_TRUE(fs::exists(tmp.path() / "generated" / "L1" / "row_parallel_linear_k16_n64_nobias_tp4_bf16.h"));
  EXPECT_TRUE(fs::exists(tmp.path() / "generated" / "L1" / "qkv_parallel_linear_h64_d16_hq1_hkv1_nobias_bf16.h"));  // KV replicated at 4
  // Note [Collective tasks]: each layout's all-reduce (the row-parallel linears' output, the embedding's hidden size) and
  // the logits' all-gather (the vocabulary padded to 64 = 320, one rank's rows) are L1 tasks, the communicating tasks' children.
  for (const char* t : {"all_reduce_n64_tp2_bf16", "all_reduce_n64_tp4_bf16", "all_gather_n160_tp2_bf16", "all_gather_n80_tp4_bf16"})
    EXPECT_TRUE(fs::exists(tmp.path() / "generated" / "L1" / (std::string(t) + ".h"))) << t;
  const auto j = nlohmann::json::parse(slurp(tmp.path() / "generated" / "manifest.json"));
  int checked = 0;
  for (const auto& t : j["tasks"]) {
    const std::string name = t["name"];
    if (name == "row_parallel_linear_k32_n64_nobias_tp2_bf16" || name.rfind("vocab_parallel_embedding_v160_h64_tp2", 0) == 0) {
      EXPECT_EQ(t["children"], (nlohmann::json{{"collective", "all_reduce_n64_tp2_bf16"}})) << name;
      ++checked;
    } else if (t["kind"] == "llama_for_causal_lm" && t["archs"] == nlohmann::json{"acme/tp@tp4"}) {
      EXPECT_EQ(t["children"]["collective"], "all_gather_n80_tp4_bf16") << name;
      ++checked;
    } else if (name == "row_parallel_linear_k64_n64_nobias_bf16") {
      EXPECT_FALSE(t.contains("children")) << name;  // unsharded: no collective
      ++checked;
    } else if (name == "matmul_reduce_scatter_k32_n64_tp2_bf16") {
      // Note [Overlapped linear tasks]: o_proj (2 heads of 16 a rank) with the reduce-scatter of its 64 output columns
      EXPECT_EQ(t["children"], (nlohmann::json{{"collective", "reduce_scatter_n64_tp2_bf16"}, {"linear", "row_parallel_linear_k32_n64_nobias_tp2_bf16"}}))
          << name;
      ++checked;
    } else if (t["kind"] == "all_gather_matmul" && t["archs"] == nlohmann::json{"acme/tp@tp4"}) {
      EXPECT_EQ(t["children"]["collective"], "all_gather_rows_n64_tp4_bf16") << name;  // the hidden size's chunks
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 + 1 + 2) << "the sharded linear, embedding and model, the unsharded linear, the TP 2 o_proj's overlapped "
                                   "linear and TP 4's two gathering ones (qkv_proj, gate_up_proj), each once";
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 0) << out;
}

TEST(Cli, AddRecordsAPoolingChoiceForEmbeddingModels) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  fs::copy(source_dir() / "templates", tmp.path() / "templates", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::string out;
  const std::string cfg =
      "{\"model_type\": \"bert\", \"architectures\": [\"BertModel\"], \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"vocab_size\": 100, \"max_position_embeddings\": 128,\n"
      " \"torch_dtype\": \"bfloat16\"}\n";
  spit(tmp.path() / "in" / "config.json", cfg);
  const std::string add = bin() + " add --root " + q(tmp.path()) + " --name acme/enc " + q(tmp.path() / "in" / "config.json");
  EXPECT_EQ(run(add + " --normalize", &out), 2) << out;  // normalize needs a pooling
  EXPECT_NE(out.find("--normalize applies to a pooling choice"), std::string::npos) << out;
  EXPECT_EQ(run(add + " --pooling max", &out), 2) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme" / "enc"));
  ASSERT_EQ(run(add + " --pooling mean --normalize", &out), 0) << out;
  EXPECT_NE(out.find("recorded hf_configs/acme/enc/fastkernels.json (pooling mean, normalized)"), std::string::npos) << out;
  EXPECT_EQ(slurp(tmp.path() / "hf_configs" / "acme" / "enc" / "fastkernels.json"), "{\n  \"normalize\": true,\n  \"pooling\": \"mean\"\n}\n");
  const std::string manifest = slurp(tmp.path() / "generated" / "manifest.json");
  EXPECT_NE(manifest.find("\"pooling\": \"mean+normalize\""), std::string::npos);
  EXPECT_NE(manifest.find("bert_model_l1_v100_tt2_pos128_h64_i128_hq2_d32_gelu_eps1e-12_bias_mean_norm_bf16"), std::string::npos);
  EXPECT_NE(manifest.find("embedding_pooler_mean_norm_h64_bf16"), std::string::npos);
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 0) << out;
  // A family without a pooled output refuses the choice; nothing is stored.
  const std::string llama =
      "{\"vocab_size\": 320, \"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"max_position_embeddings\": 1024, \"torch_dtype\": \"bfloat16\"}\n";
  spit(tmp.path() / "in2" / "config.json", llama);
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " --name acme/dec --pooling cls " + q(tmp.path() / "in2" / "config.json"), &out), 1);
  EXPECT_NE(out.find("$.pooling: family llama has no pooled output to choose (remove pooling)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme" / "dec"));
}

TEST(Cli, AddRefusesQuantisedAndUnknownUnlessAskedAndRecordsTheChoice) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  const std::string cfg =
      "{\"vocab_size\": 320, \"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"max_position_embeddings\": 1024, \"torch_dtype\": \"bfloat16\",\n"
      " \"initializer_range\": NaN, \"use_fancy_attention\": false,\n"
      " \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}\n";
  spit(tmp.path() / "in" / "config.json", cfg);
  const std::string add = bin() + " add --root " + q(tmp.path()) + " --name acme/q8 " + q(tmp.path() / "in" / "config.json");
  EXPECT_EQ(run(add, &out), 1);
  EXPECT_NE(out.find("$.quantization_config: quantised checkpoint (quant_method \"fp8\")"), std::string::npos) << out;
  EXPECT_NE(out.find("`add --allow-unknown use_fancy_attention`"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "acme" / "q8"));
  ASSERT_EQ(run(add + " --dequantize --allow-unknown use_fancy_attention", &out), 0) << out;
  EXPECT_NE(out.find("recorded hf_configs/acme/q8/fastkernels.json (dequantize) (allow use_fancy_attention)"), std::string::npos) << out;
  EXPECT_EQ(slurp(tmp.path() / "hf_configs" / "acme" / "q8" / "config.json"), cfg);
  EXPECT_EQ(slurp(tmp.path() / "hf_configs" / "acme" / "q8" / "fastkernels.json"),
            "{\n  \"allow_unknown\": [\n    \"use_fancy_attention\"\n  ],\n  \"dequantize\": true\n}\n");
  const std::string manifest = slurp(tmp.path() / "generated" / "manifest.json");
  EXPECT_NE(manifest.find("\"dequantized_from\": \"fp8\""), std::string::npos);
  EXPECT_NE(manifest.find("\"allowed_unknown\": [\n        \"use_fancy_attention\""), std::string::npos);
  // generate reads the recorded choice: the tree stays up to date and parse agrees.
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 0) << out;
  EXPECT_EQ(run(bin() + " parse --root " + q(tmp.path()) + " " + q(tmp.path() / "hf_configs" / "acme" / "q8" / "config.json"), &out), 0)
      << out;
}

TEST(Cli, CheckExitsThreeListingStaleFiles) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 3) << out;
  EXPECT_NE(out.find("missing: generated/manifest.json"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "generated"));  // --check writes nothing
  ASSERT_EQ(run(bin() + " generate --root " + q(tmp.path()), &out), 0) << out;
  spit(tmp.path() / "generated" / "L1" / "silu_and_mul_i128_bf16.cu", "x\n");
  spit(tmp.path() / "generated" / "L1" / "silu_and_mul_i128_bf16.h", "x\n");
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 3) << out;
  EXPECT_NE(out.find("stale:   generated/L1/silu_and_mul_i128_bf16.cu"), std::string::npos) << out;
  EXPECT_NE(out.find("stale:   generated/L1/silu_and_mul_i128_bf16.h"), std::string::npos) << out;
}

TEST(Cli, DependencyCheckAllowsGeneratedTaskHeadersOnly) {
  // scripts/check_deps.sh checks the tree it lives in: run a copy beside a small generated/.
  TempDir tmp;
  fs::create_directories(tmp.path() / "scripts");
  fs::copy(source_dir() / "scripts" / "check_deps.sh", tmp.path() / "scripts" / "check_deps.sh");
  const std::string ok =
      "#include \"fk/tasks/llama.h\"\n#include <fk/runtime/task.h>\n#include \"L1/rms_norm_h64_eps1e-05_bf16.h\"\n"
      "#include \"L2/llama_mlp_h64_i128_nobias_bf16.h\"\n";
  spit(tmp.path() / "generated" / "L3" / "layer.h", ok);
  std::string out;
  EXPECT_EQ(run("bash " + q(tmp.path() / "scripts" / "check_deps.sh"), &out), 0) << out;
  spit(tmp.path() / "generated" / "L3" / "layer.cu", "#include \"../L1/x.h\"\n#include \"fk/gen/kinds.h\"\n#include <vector>\n");
  EXPECT_EQ(run("bash " + q(tmp.path() / "scripts" / "check_deps.sh"), &out), 1) << out;
  EXPECT_NE(out.find("generated/L3/layer.cu:1:#include \"../L1/x.h\""), std::string::npos) << out;
  EXPECT_NE(out.find("generated/L3/layer.cu:2:#include \"fk/gen/kinds.h\""), std::string::npos) << out;
  EXPECT_NE(out.find("generated/L3/layer.cu:3:#include <vector>"), std::string::npos) << out;
  EXPECT_EQ(out.find("layer.h"), std::string::npos) << out;
}

TEST(Cli, ListCountsConfigsAndTasks) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  ASSERT_EQ(run(bin() + " list --root " + q(tmp.path()), &out), 0) << out;
  EXPECT_NE(out.find("tiny/qwen3-tiny  hf_configs/tiny/qwen3-tiny/config.json  family=llama model_type=qwen3 ops=27 modules=7 "
                     "tasks=21"),
            std::string::npos) << out;
  EXPECT_NE(out.find("tiny/qwen3-moe  hf_configs/tiny/qwen3-moe/config.json  family=moe model_type=qwen3_moe ops=35 modules=7 "
                     "tasks=25"),
            std::string::npos) << out;
  EXPECT_NE(out.find("5 config(s), 85 distinct task(s)"), std::string::npos) << out;
  ASSERT_EQ(run(bin() + " list --tasks --root " + q(tmp.path()), &out), 0) << out;
  EXPECT_NE(out.find("rms_norm_h64_eps1e-05_bf16  kind=rms_norm level=1 archs=2 (tiny/llama-tiny, tiny/mistral-tiny)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("llama_mlp_h64_i128_nobias_bf16  kind=llama_mlp level=2 archs=2 (tiny/llama-tiny, tiny/mistral-tiny)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("_f16  kind=llama_decoder_layer level=3 archs=1 (tiny/qwen3-tiny)"), std::string::npos) << out;
  EXPECT_NE(out.find("_f16  kind=llama_for_causal_lm level=4 archs=1 (tiny/qwen3-tiny)"), std::string::npos) << out;
}

}  // namespace
}  // namespace fk::gen

namespace fk::gen {
namespace {
using namespace fk::gen::testing;

TEST(Cli, AddThatFailsToGenerateLeavesNothingBehind) {
  // The golden root has no Gemma templates: the config validates, generation then fails, and the
  // config stored for it goes again, so that later adds and generates do not trip over it.
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  ASSERT_EQ(run(bin() + " generate --root " + q(tmp.path()), &out), 0) << out;
  const auto before = read_tree(tmp.path() / "hf_configs");
  EXPECT_EQ(run(bin() + " add --root " + q(tmp.path()) + " " + q(fixtures() / "config_corpus" / "google__gemma-3-1b-it.json"), &out), 1);
  EXPECT_NE(out.find("template templates/gemma_decoder_layer.h.mustache not found"), std::string::npos) << out;
  EXPECT_NE(out.find("fastkernels add: generation failed, so hf_configs/google/gemma-3-1b-it/config.json was removed again; "
                     "nothing was added"),
            std::string::npos)
      << out;
  EXPECT_EQ(read_tree(tmp.path() / "hf_configs"), before);
  EXPECT_FALSE(fs::exists(tmp.path() / "hf_configs" / "google"));
  EXPECT_EQ(run(bin() + " generate --check --root " + q(tmp.path()), &out), 0) << out;
}

}  // namespace
}  // namespace fk::gen
