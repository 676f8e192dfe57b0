// Dedupe (shared tasks merge; one name with two contents is an error), the template engine's
// unknown/unused placeholder errors, and descriptor validation messages.
#include <gtest/gtest.h>

#include "fk/gen/emit.h"
#include "fk/gen/pipeline.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;

LoweredModel model(const std::string& id, double softmax_scale, int64_t max_position) {
  LoweredModel m;
  m.id = id;
  m.file = "hf_configs/" + id + "/config.json";
  m.model_type = "llama";
  m.descriptor_file = "generator/descriptors/llama.json";
  OpInstance norm{"blk.0.input_layernorm", find_kind("rms_norm"), "bfloat16", {{"hidden_size", int64_t{64}}, {"eps", 1e-05}}};
  OpInstance attn{"blk.0.attn_decode", find_kind("flash_attn_decode"), "bfloat16",
                  {{"num_heads", int64_t{4}}, {"num_kv_heads", int64_t{2}}, {"head_dim", int64_t{16}},
                   {"softmax_scale", softmax_scale}, {"sliding_window", int64_t{0}}, {"softcap", 0.0}, {"sinks", false},
                   {"max_position", max_position}}};
  m.ops = {norm, attn};
  return m;
}

TEST(Dedupe, TwoConfigsShareTasks) {
  Diagnostics diag;
  TaskSet set = dedupe({model("org/b", 0.25, 8192), model("org/a", 0.25, 2048)}, diag);
  ASSERT_TRUE(diag.ok()) << diag.text();
  ASSERT_EQ(set.tasks.size(), 2u);
  const Task& norm = set.tasks.at("rms_norm_h64_eps1e-05_bf16");
  EXPECT_EQ(norm.archs, (std::set<std::string>{"org/a", "org/b"}));
  EXPECT_EQ(norm.configs, (std::set<std::string>{"hf_configs/org/a/config.json", "hf_configs/org/b/config.json"}));
  EXPECT_EQ(norm.source, "generated/L1/rms_norm_h64_eps1e-05_bf16.cu");
  // Input cases are the union of both registries, in registry order.
  const Task& attn = set.tasks.at("flash_attn_decode_hq4_hkv2_d16_bf16");
  std::vector<std::string> cases;
  for (const auto& c : attn.cases) cases.push_back(c.name);
  EXPECT_EQ(cases, (std::vector<std::string>{"b1_kv1024", "b1_kv2048", "b1_kv8192", "b8_kv1024", "b8_kv2048", "b8_kv8192",
                                             "b32_kv1024", "b32_kv2048", "b32_kv8192", "b64_kv1024", "b64_kv2048", "b64_kv8192"}));
  ASSERT_EQ(set.models.size(), 2u);
  EXPECT_EQ(set.models[0].id, "org/a");  // sorted by id
  EXPECT_EQ(set.models[0].ops[1], (std::pair<std::string, std::string>{"blk.0.attn_decode", "flash_attn_decode_hq4_hkv2_d16_bf16"}));
}

TEST(Dedupe, SameNameDifferentContentIsAnError) {
  Diagnostics diag;
  // Scales within 1e-12 of head_dim^-0.5 are not spelled (attn_extra_spelling), so these two collide.
  dedupe({model("org/a", 0.25, 2048), model("org/b", 0.25000000000000006, 2048)}, diag);
  EXPECT_EQ(diag.text(),
            "task flash_attn_decode_hq4_hkv2_d16_bf16: same name, different content: softmax_scale = 0.25 from "
            "hf_configs/org/a/config.json (blk.0.attn_decode) vs softmax_scale = 0.25000000000000006 from hf_configs/org/b/config.json "
            "(blk.0.attn_decode); a task name must spell every constant it inlines (Note [Task naming] in "
            "generator/include/fk/gen/kinds.h)\n");
}

// --- template engine ----------------------------------------------------------------------------
std::optional<std::string> render_one(const std::string& text, const Bindings& values, Diagnostics& diag) {
  auto out = render_templates({{"templates/t.cu.mustache", text}}, values, diag);
  if (!out) return std::nullopt;
  return out->at(0);
}

TEST(Templates, RendersWithoutHtmlEscaping) {
  Diagnostics diag;
  auto out = render_one("a={{a}} b={{b}}\n", {{"a", "x<y && \"q\""}, {"b", "2"}}, diag);
  ASSERT_TRUE(out) << diag.text();
  EXPECT_EQ(*out, "a=x<y && \"q\" b=2\n");
}

TEST(Templates, UnknownPlaceholderIsAnError) {
  Diagnostics diag;
  auto out = render_one("{{a}} {{hiden_size}}\n", {{"a", "1"}}, diag);
  EXPECT_FALSE(out);
  EXPECT_EQ(diag.text(), "templates/t.cu.mustache: placeholder {{hiden_size}} is not provided by the generator (provided: a)\n");
}

TEST(Templates, UnusedPlaceholderIsAnError) {
  Diagnostics diag;
  auto out = render_one("{{a}}\n", {{"a", "1"}, {"eps", "1e-05"}}, diag);
  EXPECT_FALSE(out);
  EXPECT_EQ(diag.text(),
            "templates/t.cu.mustache: placeholder {{eps}} is provided but never used (the templates must bind every "
            "placeholder in docs/task-kinds.md)\n");
}

TEST(Templates, InvalidTemplateIsAnError) {
  Diagnostics diag;
  EXPECT_FALSE(render_one("{{#a}} no close\n", {{"a", "1"}}, diag));
  ASSERT_EQ(diag.errors().size(), 1u);
  EXPECT_EQ(diag.errors()[0].rfind("templates/t.cu.mustache: invalid template: ", 0), 0u) << diag.text();
}

TEST(Templates, HeaderAndSourceAreOneContract) {
  // A placeholder may be used by either file of a kind; unknown ones are reported per file,
  // unused ones only when neither file uses them (naming both).
  Diagnostics diag;
  auto out = render_templates({{"templates/t.h.mustache", "{{a}}\n"}, {"templates/t.cu.mustache", "{{b}} {{header}}\n"}},
                              {{"a", "1"}, {"b", "2"}, {"header", "L1/t.h"}}, diag);
  ASSERT_TRUE(out) << diag.text();
  EXPECT_EQ(*out, (std::vector<std::string>{"1\n", "2 L1/t.h\n"}));
  Diagnostics bad;
  EXPECT_FALSE(render_templates({{"templates/t.h.mustache", "{{a}} {{c}}\n"}, {"templates/t.cu.mustache", "{{a}}\n"}},
                                {{"a", "1"}, {"b", "2"}}, bad));
  EXPECT_EQ(bad.text(), "templates/t.h.mustache: placeholder {{c}} is not provided by the generator (provided: a, b)\n");
  Diagnostics unused;
  EXPECT_FALSE(render_templates({{"templates/t.h.mustache", "{{a}}\n"}, {"templates/t.cu.mustache", "{{a}}\n"}},
                                {{"a", "1"}, {"b", "2"}}, unused));
  EXPECT_EQ(unused.text(),
            "templates/t.h.mustache + templates/t.cu.mustache: placeholder {{b}} is provided but never used (the "
            "templates must bind every placeholder in docs/task-kinds.md)\n");
}

TEST(Templates, RealTemplatesBindExactlyTheContract) {
  // Every template in templates/ renders for a task of each kind that uses it, with no
  // unknown or unused placeholder (docs/task-kinds.md is the contract).
  Diagnostics diag;
  auto configs = discover_configs(source_dir(), diag);
  Generation g = run_pipeline(source_dir(), configs, /*emit_outputs=*/true, diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  EXPECT_EQ(g.outputs.size(), 2 * g.tasks.tasks.size() + 1);  // a header and a source per task, and the manifest
}

// --- descriptors --------------------------------------------------------------------------------
TEST(Descriptors, RejectsUnboundParameterUnknownKindAndUnknownName) {
  Diagnostics diag;
  auto d = load_descriptor("generator/descriptors/x.json", R"({
    "family": "x", "model_types": {"x": {"architectures": ["XForCausalLM"]}},
    "fields": {"hidden_size": {"required": true}, "torch_dtype": {"required": true}},
    "forward": [
      {"op": "norm", "kind": "rms_norm", "bind": {"hidden_size": "hidden_size"}},
      {"op": "mix", "kind": "mamba_mixer", "bind": {}},
      {"op": "act", "kind": "silu_and_mul", "bind": {"intermediate_size": "ffn"}},
      {"op": "mlp", "kind": "llama_mlp", "bind": {}}
    ],
    "extra": 1
  })", diag);
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(diag.text(),
            "generator/descriptors/x.json: $.extra: unknown key (known: checks, constants, doc, family, fields, forward, ignored_keys, model_types, modules)\n"
            "generator/descriptors/x.json: $.forward[0].bind.eps: expected number expression for parameter eps of kind rms_norm, got nothing\n"
            "generator/descriptors/x.json: $.forward[1].kind: expected one of activation, all_gather, all_gather_rows, all_reduce, column_parallel_linear, concat_and_cache_mla, cross_attention, embedding_pooler, ep_all_to_all, flash_attn_decode, flash_attn_prefill, "
            "fused_add_layer_norm, fused_add_rms_norm, gelu_and_mul, gelu_tanh_and_mul, gemma_fused_add_rms_norm, gemma_qk_norm, gemma_rms_norm, grouped_topk, interpolate, l2_normalize, layer_norm, layer_scale, merged_column_parallel_linear, mla_decode, mla_prefill, moe_align_block_size, moe_grouped_gemm, moe_sum, mrope, olmo2_qk_norm, parallel_lm_head, patch_embedding, patch_embedding_3d, "
            "qk_norm, qkv_parallel_linear, reduce_scatter, replicated_linear, rms_norm, rotary_embedding, row_parallel_linear, scaled_word_embedding, silu_and_mul, "
            "store_kvcache, swigluoai_and_mul, token_classifier, topk_softmax, vision_rope_2d, vocab_parallel_embedding, got \"mamba_mixer\"\n"
            "generator/descriptors/x.json: $.forward[3].kind: expected one of activation, all_gather, all_gather_rows, all_reduce, column_parallel_linear, concat_and_cache_mla, cross_attention, embedding_pooler, ep_all_to_all, flash_attn_decode, flash_attn_prefill, "
            "fused_add_layer_norm, fused_add_rms_norm, gelu_and_mul, gelu_tanh_and_mul, gemma_fused_add_rms_norm, gemma_qk_norm, gemma_rms_norm, grouped_topk, interpolate, l2_normalize, layer_norm, layer_scale, merged_column_parallel_linear, mla_decode, mla_prefill, moe_align_block_size, moe_grouped_gemm, moe_sum, mrope, olmo2_qk_norm, parallel_lm_head, patch_embedding, patch_embedding_3d, "
            "qk_norm, qkv_parallel_linear, reduce_scatter, replicated_linear, rms_norm, rotary_embedding, row_parallel_linear, scaled_word_embedding, silu_and_mul, "
            "store_kvcache, swigluoai_and_mul, token_classifier, topk_softmax, vision_rope_2d, vocab_parallel_embedding, got \"llama_mlp\" "
            "(a composite kind: declare it in $.modules)\n"
            "generator/descriptors/x.json: $.forward[2].bind.intermediate_size: unknown name 'ffn' in expression \"ffn\" "
            "(names: the family's fields and constants, tp_size, ep_size)\n");
}

TEST(Descriptors, AVariantNeedsNoCode) {
  // A new model_type of a known family is data only: add it to a copy of the descriptor.
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string text = slurp(tmp.path() / "generator" / "descriptors" / "llama.json");
  const std::string anchor = "\"mistral\": {\"architectures\": [\"MistralForCausalLM\"]},";
  ASSERT_NE(text.find(anchor), std::string::npos);
  text.replace(text.find(anchor), anchor.size(),
               anchor + "\n    \"granite_lite\": {\"architectures\": [\"GraniteLiteForCausalLM\"], \"constants\": {\"qkv_bias\": true}},");
  spit(tmp.path() / "generator" / "descriptors" / "llama.json", text);
  spit(tmp.path() / "hf_configs" / "ibm" / "granite-lite" / "config.json",
       R"({"model_type": "granite_lite", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_hidden_layers": 1, "vocab_size": 100, "max_position_embeddings": 1024, "torch_dtype": "bfloat16"})");
  Diagnostics diag;
  Generation g = run_pipeline(tmp.path(), discover_configs(tmp.path(), diag), true, diag);
  ASSERT_TRUE(diag.ok()) << diag.text();
  EXPECT_TRUE(g.tasks.tasks.count("qkv_parallel_linear_h64_d16_hq4_hkv4_bias_bf16"));
}

}  // namespace
}  // namespace fk::gen
