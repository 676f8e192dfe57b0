// Unit tests for the generator's pieces: canonical numbers, expressions, the alias table,
// text_config nesting, head_dim derivation, rope scaling, task naming, case registries.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "fk/gen/format.h"
#include "fk/gen/kinds.h"
#include "fk/gen/pipeline.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;

// --- canonical numbers (Note [Canonical numbers]) ---------------------------------------------
TEST(CanonicalDouble, ShortestRoundTrip) {
  EXPECT_EQ(canonical_double(1e-05), "1e-05");
  EXPECT_EQ(canonical_double(1e-06), "1e-06");
  EXPECT_EQ(canonical_double(500000.0), "500000");
  EXPECT_EQ(canonical_double(1000000.0), "1000000");
  EXPECT_EQ(canonical_double(8.0), "8");
  EXPECT_EQ(canonical_double(0.25), "0.25");
  EXPECT_EQ(canonical_double(0.0001), "0.0001");
  EXPECT_EQ(canonical_double(3.5), "3.5");
  EXPECT_EQ(canonical_double(-2.5), "-2.5");
  EXPECT_EQ(canonical_double(0.0), "0");
  EXPECT_EQ(canonical_double(-0.0), "0");
  EXPECT_EQ(canonical_double(1e16), "1e+16");
  EXPECT_EQ(canonical_double(123456789012345.0), "123456789012345");
  EXPECT_EQ(canonical_double(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(canonical_double(std::pow(128.0, -0.5)), "0.08838834764831845");
  for (double x : {1e-05, 0.1, 2.0 / 3.0, 1e300, 5e-324, 6.02214076e23})
    EXPECT_EQ(std::strtod(canonical_double(x).c_str(), nullptr), x) << canonical_double(x);
}

TEST(CanonicalDouble, NamesDropPlus) {
  EXPECT_EQ(name_double(1e16), "1e16");
  EXPECT_EQ(name_double(1e-05), "1e-05");
  EXPECT_EQ(name_double(500000.0), "500000");
}

TEST(Format, IdentAndLiterals) {
  EXPECT_EQ(to_ident("rms_norm_h4096_eps1e-05_bf16"), "rms_norm_h4096_eps1e_05_bf16");
  EXPECT_EQ(to_ident("a.b+c"), "a_b_c");
  EXPECT_EQ(cpp_string_literal("a\"b\\c"), "\"a\\\"b\\\\c\"");
}

// --- expressions ----------------------------------------------------------------------------
Value eval(const std::string& text, std::map<std::string, Value> env = {}) {
  return Expr::parse(text).eval([&](const std::string& n) -> std::optional<Value> {
    auto it = env.find(n);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(Expr, ArithmeticAndLogic) {
  EXPECT_EQ(eval("hidden / heads", {{"hidden", int64_t{4096}}, {"heads", int64_t{32}}}), Value(int64_t{128}));
  EXPECT_EQ(eval("2 + 3 * 4"), Value(int64_t{14}));
  EXPECT_EQ(eval("(2 + 3) * 4"), Value(int64_t{20}));
  EXPECT_EQ(eval("pow(64, -0.5)"), Value(0.125));
  EXPECT_EQ(eval("log(1)"), Value(0.0));
  // DeepSeek-V3's softmax scale: 192^-0.5 * (0.1 * 1 * ln 40 + 1)^2.
  EXPECT_NEAR(std::get<double>(eval("pow(192, -0.5) * pow(0.1 * m * log(f) + 1, 2)", {{"m", 1.0}, {"f", 40.0}})),
              0.1352337788608801, 1e-15);
  EXPECT_EQ(eval("layer == 0 || !flag", {{"layer", int64_t{3}}, {"flag", false}}), Value(true));
  EXPECT_EQ(eval("x == null", {{"x", std::monostate{}}}), Value(true));
  EXPECT_EQ(eval("t == 'silu'", {{"t", std::string("silu")}}), Value(true));
  EXPECT_EQ(eval("1e-05"), Value(1e-05));
  EXPECT_EQ(eval("rope_scaling.factor * 2", {{"rope_scaling.factor", 8.0}}), Value(16.0));
  // select evaluates only the chosen branch: the null window is never compared.
  EXPECT_EQ(eval("select(w == null, 0, select(w < 4096, w, 0))", {{"w", std::monostate{}}}), Value(int64_t{0}));
  EXPECT_EQ(eval("select(w == null, 0, select(w < 4096, w, 0))", {{"w", int64_t{2047}}}), Value(int64_t{2047}));
  EXPECT_EQ(eval("select(w == null, 0, select(w < 4096, w, 0))", {{"w", int64_t{8192}}}), Value(int64_t{0}));
  // Lists (layer_types) are comma-joined text: len() counts the items, item() picks one.
  const std::pair<std::string, Value> lt{"lt", std::string("sliding_attention,full_attention,sliding_attention")};
  EXPECT_EQ(eval("len(lt)", {lt}), Value(int64_t{3}));
  EXPECT_EQ(eval("len(e)", {{"e", std::string()}}), Value(int64_t{0}));
  EXPECT_EQ(eval("item(lt, 1)", {lt}), Value(std::string("full_attention")));
  EXPECT_EQ(eval("item(lt, layer) == 'sliding_attention'", {lt, {"layer", int64_t{2}}}), Value(true));
}

TEST(Expr, Errors) {
  auto msg = [](const std::string& text) {
    try {
      eval(text, {{"a", int64_t{100}}, {"b", int64_t{3}}});
    } catch (const GenError& e) {
      return e.message;
    }
    return std::string("no error");
  };
  EXPECT_EQ(msg("a / b"), "100 is not divisible by 3");
  EXPECT_EQ(msg("c + 1"), "unknown name 'c'");
  EXPECT_EQ(msg("a && true"), "operator && cannot apply to 100");
  EXPECT_EQ(msg("sqrt(a)"), "unknown function 'sqrt' (known: float, int, item, len, log, max, min, pow, select)");
  EXPECT_EQ(msg("log(0)"), "log() needs a positive argument, got 0");
  EXPECT_EQ(msg("len(a)"), "len() needs a list (a string of comma-joined items), got 100");
  EXPECT_EQ(msg("item('x,y', 2)"), "item() index 2 out of range (the list has 2 items)");
  EXPECT_EQ(msg("item('x,y', 'a')"), "item() needs an integer index, got \"a\"");
  EXPECT_EQ(msg("select(a, 1)"), "select() takes 3 argument(s)");
  EXPECT_EQ(msg("select(a, 1, 2)"), "select() needs a boolean condition, got 100");
  EXPECT_EQ(msg("(a"), "invalid expression \"(a\": missing ')'");
}

// --- parse: the alias table and text_config ---------------------------------------------------
ParsedConfig parse_ok(const std::string& text) {
  Diagnostics diag;
  auto p = parse_config("x/config.json", text, diag, /*whole_config=*/false);
  EXPECT_TRUE(diag.ok()) << diag.text();
  return p ? *p : ParsedConfig{};
}

TEST(AliasTable, GptStyleNamesMapToCanonicalFields) {
  ParsedConfig p = parse_ok(R"({"n_head": 12, "n_layer": 6, "n_embd": 768, "num_local_experts": 8, "dtype": "float16"})");
  ASSERT_TRUE(p.get("num_attention_heads"));
  EXPECT_EQ(p.get("num_attention_heads")->value, Value(int64_t{12}));
  EXPECT_EQ(p.get("num_attention_heads")->path, "$.n_head");
  EXPECT_EQ(p.get("num_hidden_layers")->value, Value(int64_t{6}));
  EXPECT_EQ(p.get("hidden_size")->value, Value(int64_t{768}));
  EXPECT_EQ(p.get("num_experts")->value, Value(int64_t{8}));
  EXPECT_EQ(p.get("num_experts")->path, "$.num_local_experts");
  EXPECT_EQ(p.get("torch_dtype")->value, Value(std::string("float16")));
}

TEST(AliasTable, EveryAliasIsUnique) {
  std::set<std::string> seen;
  for (const auto& f : field_table()) {
    EXPECT_TRUE(seen.insert(f.name).second) << f.name;
    for (const auto& a : f.aliases) EXPECT_TRUE(seen.insert(a).second) << a;
    EXPECT_EQ(find_field(f.name), &f);
  }
}

TEST(TextConfig, NestedFieldsTakePrecedence) {
  ParsedConfig p = parse_ok(R"({"model_type": "mistral3", "hidden_size": 1, "vision_config": {},
                               "text_config": {"model_type": "mistral", "hidden_size": 5120, "n_head": 32}})");
  EXPECT_EQ(p.get("model_type")->value, Value(std::string("mistral")));
  EXPECT_EQ(p.get("hidden_size")->value, Value(int64_t{5120}));
  EXPECT_EQ(p.get("hidden_size")->path, "$.text_config.hidden_size");
  EXPECT_EQ(p.get("num_attention_heads")->path, "$.text_config.n_head");
  ASSERT_EQ(p.unrecognised.size(), 1u);
  EXPECT_EQ(p.unrecognised[0].path, "$.vision_config");
}

// --- rope scaling -----------------------------------------------------------------------------
TEST(RopeScaling, Llama3) {
  ParsedConfig p = parse_ok(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(p.rope_scaling.type, "llama3");
  EXPECT_EQ(p.rope_scaling.factor, 8.0);
  EXPECT_EQ(p.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(p.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(p.rope_scaling.original_max_position, 8192);
}

TEST(RopeScaling, LinearWithLegacyTypeKey) {
  ParsedConfig p = parse_ok(R"({"rope_scaling": {"type": "linear", "factor": 2}})");
  EXPECT_EQ(p.rope_scaling.type, "linear");
  EXPECT_EQ(p.rope_scaling.factor, 2.0);
  EXPECT_EQ(p.rope_scaling.original_max_position, 0);
}

TEST(RopeScaling, YarnDefaultsBetas) {
  ParsedConfig p = parse_ok(R"({"rope_scaling": {"rope_type": "yarn", "type": "yarn", "factor": 4.0,
                               "original_max_position_embeddings": 32768}})");
  EXPECT_EQ(p.rope_scaling.type, "yarn");
  EXPECT_EQ(p.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(p.rope_scaling.beta_slow, 1.0);
  ParsedConfig q = parse_ok(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 16, "beta_slow": 2,
                               "original_max_position_embeddings": 32768}})");
  EXPECT_EQ(q.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(q.rope_scaling.beta_slow, 2.0);
}

TEST(RopeScaling, NullAndDefaultMeanNone) {
  EXPECT_EQ(parse_ok(R"({"rope_scaling": null})").rope_scaling.type, "none");
  EXPECT_EQ(parse_ok(R"({"rope_scaling": {"rope_type": "default"}})").rope_scaling.type, "none");
  EXPECT_EQ(parse_ok(R"({})").rope_scaling.type, "none");
}

// --- resolve: head_dim and per-model-type constants --------------------------------------------
ResolvedConfig resolve_ok(const std::string& text) {
  Diagnostics diag;
  Generation g = run_pipeline(source_dir(), {ConfigFile{"t/t", "t/config.json", text}}, false, diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  return g.resolved.empty() ? ResolvedConfig{} : g.resolved[0];
}

const char* kBase = R"("hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
  "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16")";

TEST(Resolve, HeadDimDerivedUnlessExplicit) {
  ResolvedConfig d = resolve_ok(std::string(R"({"model_type": "llama", )") + kBase + "}");
  EXPECT_EQ(d.values.at("head_dim"), Value(int64_t{128}));
  EXPECT_EQ(d.origin.at("head_dim"), "default");
  EXPECT_EQ(d.values.at("num_key_value_heads"), Value(int64_t{32}));  // defaults to num_attention_heads
  ResolvedConfig e = resolve_ok(std::string(R"({"model_type": "qwen3", "head_dim": 64, )") + kBase + "}");
  EXPECT_EQ(e.values.at("head_dim"), Value(int64_t{64}));
  EXPECT_EQ(e.origin.at("head_dim"), "$.head_dim");
  ResolvedConfig n = resolve_ok(std::string(R"({"model_type": "llama", "head_dim": null, )") + kBase + "}");
  EXPECT_EQ(n.values.at("head_dim"), Value(int64_t{128}));
}

TEST(Resolve, ModelTypeConstants) {
  ResolvedConfig q2 = resolve_ok(std::string(R"({"model_type": "qwen2", )") + kBase + "}");
  EXPECT_EQ(q2.values.at("qkv_bias"), Value(true));
  EXPECT_EQ(q2.values.at("o_proj_bias"), Value(false));
  EXPECT_EQ(q2.values.at("qk_norm"), Value(false));
  ResolvedConfig q3 = resolve_ok(std::string(R"({"model_type": "qwen3", )") + kBase + "}");
  EXPECT_EQ(q3.values.at("qk_norm"), Value(true));
  ResolvedConfig l = resolve_ok(std::string(R"({"model_type": "llama", "attention_bias": true, )") + kBase + "}");
  EXPECT_EQ(l.values.at("qkv_bias"), Value(true));
  EXPECT_EQ(l.values.at("o_proj_bias"), Value(true));
  EXPECT_EQ(l.values.at("softmax_scale"), Value(std::pow(128.0, -0.5)));
}

TEST(Resolve, ModelTypeFromArchitecturesWhenAbsent) {
  ResolvedConfig r = resolve_ok(std::string(R"({"architectures": ["MistralForCausalLM"], )") + kBase + "}");
  EXPECT_EQ(r.model_type, "mistral");
}

// --- configs as users bring them (Note [Python JSON literals], [Tool-only keys], [User choices]) ---
std::string run_with(const std::string& text, const UserChoices& choices, Generation* out = nullptr) {
  Diagnostics diag;
  Generation g = run_pipeline(source_dir(), {ConfigFile{"t/t", "t/config.json", text, choices}}, false, diag);
  if (out) *out = g;
  return diag.text();
}

// --- Note [Parallel layouts]: per-rank constants, names, refusals -------------------------------
const OpInstance* op_named(const LoweredModel& m, const std::string& name) {
  for (const OpInstance& op : m.ops)
    if (op.name == name) return &op;
  return nullptr;
}
const ModuleInstance* module_named(const LoweredModel& m, const std::string& name) {
  for (const ModuleInstance& mod : m.modules)
    if (mod.name == name) return &mod;
  return nullptr;
}

TEST(ParallelLayouts, PerRankConstantsAndNamesAtTp2To16) {
  // Llama-3.1-8B's shape: 32 heads, 8 KV heads, intermediate 14336, vocabulary 128256.
  const std::string text = R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 128256, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.parallel = {{2, 1}, {4, 1}, {8, 1}, {16, 1}};
  Generation g;
  ASSERT_EQ(run_with(text, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 5u);
  EXPECT_EQ(g.lowered[0].id, "t/t");
  const int64_t tps[] = {2, 4, 8, 16};
  for (size_t i = 0; i < 4; ++i) {
    const LoweredModel& m = g.lowered[i + 1];
    const int64_t tp = tps[i];
    EXPECT_EQ(m.id, "t/t@tp" + std::to_string(tp));
    const OpInstance* qkv = op_named(m, "blk.1.qkv_proj");
    ASSERT_TRUE(qkv);
    EXPECT_EQ(qkv->params.at("num_heads"), Value(32 / tp));
    EXPECT_EQ(qkv->params.at("num_kv_heads"), Value(std::max<int64_t>(1, 8 / tp)));  // replicated from tp 8 on
    const OpInstance* o = op_named(m, "blk.1.o_proj");
    EXPECT_EQ(o->params.at("input_size"), Value(4096 / tp));
    EXPECT_EQ(o->params.at("tp_size"), Value(tp));
    EXPECT_EQ(op_named(m, "blk.1.down_proj")->params.at("input_size"), Value(14336 / tp));
    EXPECT_EQ(op_named(m, "blk.1.act_fn")->params.at("intermediate_size"), Value(14336 / tp));
    EXPECT_EQ(op_named(m, "embed_tokens")->params.at("num_embeddings"), Value(128256 / tp));
    EXPECT_EQ(op_named(m, "lm_head")->params.at("num_embeddings"), Value(128256 / tp));
    const ModuleInstance* model = module_named(m, "model");
    ASSERT_TRUE(model);
    EXPECT_EQ(model->params.at("vocab_size"), Value(int64_t{128256}));  // the gathered logits' width
    EXPECT_EQ(model->params.at("tp_size"), Value(tp));
    // Communicating kinds spell the layout; local ones do not (shared with any model of that shape).
    EXPECT_EQ(o->kind->name(o->params, "bf16"), "row_parallel_linear_k" + std::to_string(4096 / tp) + "_n4096_nobias_tp" + std::to_string(tp) + "_bf16");
    EXPECT_EQ(qkv->kind->name(qkv->params, "bf16"),
              "qkv_parallel_linear_h4096_d128_hq" + std::to_string(32 / tp) + "_hkv" + std::to_string(std::max<int64_t>(1, 8 / tp)) + "_nobias_bf16");
    // Note [Replicated KV heads]: one KV head per rank is split at TP 8 (8 heads) and shared by 2 ranks at TP 16;
    // the attention, the layer and the model say so, and their names spell it (one head per rank is ambiguous otherwise).
    const int64_t replicas = tp > 8 ? tp / 8 : 1;
    for (const char* name : {"self_attn", "layer", "model"}) {
      const ModuleInstance* mod = module_named(m, name);
      ASSERT_TRUE(mod) << name;
      EXPECT_EQ(mod->params.at("kv_head_replicas"), Value(replicas)) << name << " at tp " << tp;
    }
    const ModuleInstance* attn = module_named(m, "self_attn");
    EXPECT_EQ(attn->kind->name(attn->params, "bf16").find("_kvrep") != std::string::npos, replicas > 1) << attn->kind->name(attn->params, "bf16");
    if (replicas > 1) EXPECT_NE(attn->kind->name(attn->params, "bf16").find("_hkv1_d128_kvrep2"), std::string::npos);
  }
  // Unsharded, nothing changes: no suffix, the full sizes.
  const OpInstance* o1 = op_named(g.lowered[0], "blk.1.o_proj");
  EXPECT_EQ(o1->kind->name(o1->params, "bf16"), "row_parallel_linear_k4096_n4096_nobias_bf16");
}

TEST(ParallelLayouts, MixtureOfExpertsShardsEveryExpertsIntermediateAtTp2To8) {
  // Mixtral-8x7B's shape: 32 heads, 8 KV heads, 8 experts of intermediate 14336, top 2, vocabulary 32000.
  const std::string text = R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 32000, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.parallel = {{2, 1}, {4, 1}, {8, 1}};
  Generation g;
  ASSERT_EQ(run_with(text, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 4u);
  const int64_t tps[] = {2, 4, 8};
  for (size_t i = 0; i < 3; ++i) {
    const LoweredModel& m = g.lowered[i + 1];
    const int64_t tp = tps[i];
    EXPECT_EQ(m.id, "t/t@tp" + std::to_string(tp));
    EXPECT_EQ(op_named(m, "blk.1.qkv_proj")->params.at("num_heads"), Value(32 / tp));
    EXPECT_EQ(op_named(m, "blk.1.o_proj")->params.at("tp_size"), Value(tp));
    // Every expert keeps its rank's slice of the intermediate; the router sees every expert.
    EXPECT_EQ(op_named(m, "blk.1.experts_w13")->params.at("n"), Value(2 * 14336 / tp));
    EXPECT_EQ(op_named(m, "blk.1.experts_w2")->params.at("k"), Value(14336 / tp));
    EXPECT_EQ(op_named(m, "blk.1.experts_w2")->params.at("num_experts"), Value(int64_t{8}));
    EXPECT_EQ(op_named(m, "blk.1.gate")->params.at("output_size"), Value(int64_t{8}));
    EXPECT_EQ(op_named(m, "embed_tokens")->params.at("num_embeddings"), Value(32000 / tp));
    const ModuleInstance* block = module_named(m, "mlp");
    ASSERT_TRUE(block);
    EXPECT_EQ(block->params.at("tp_size"), Value(tp));  // the block reduces its experts' partial sums
    EXPECT_EQ(block->params.at("moe_intermediate_size"), Value(14336 / tp));
    EXPECT_EQ(module_named(m, "model")->params.at("tp_size"), Value(tp));
    EXPECT_EQ(module_named(m, "model")->params.at("vocab_size"), Value(int64_t{32000}));
  }
  // An expert width that does not split: Qwen3-30B-A3B's shape with experts of 770 at TP 4 (the heads split).
  const std::string q = R"({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 770,
    "num_attention_heads": 32, "num_key_value_heads": 4, "num_hidden_layers": 2, "num_experts": 128, "num_experts_per_tok": 8,
    "vocab_size": 151936, "max_position_embeddings": 40960, "head_dim": 128, "torch_dtype": "bfloat16"})";
  c.parallel = {{4, 1}};
  const std::string out = run_with(q, c);
  EXPECT_NE(out.find("$.moe_intermediate_size: expected an expert intermediate size (intermediate_size for Mixtral, "
                     "moe_intermediate_size for Qwen3-MoE) that divides by the layout's tp_size"),
            std::string::npos)
      << out;
}

// Note [DeepSeek sharding]: DeepSeek-V3's shape (4 layers, 3 dense) at TP 2, 4 and 8 and at TP 8 + EP 8.
TEST(ParallelLayouts, DeepseekShardsHeadsExpertsAndSharedExpertsAtTp2To8AndEp) {
  const std::string text = R"({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
    "num_hidden_layers": 4, "first_k_dense_replace": 3, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8,
    "topk_group": 4, "n_shared_experts": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "routed_scaling_factor": 2.5, "vocab_size": 129280,
    "max_position_embeddings": 163840, "torch_dtype": "bfloat16"})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.parallel = {{2, 1}, {4, 1}, {8, 1}, {8, 8}};
  Generation g;
  ASSERT_EQ(run_with(text, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 5u);
  const int64_t tps[] = {2, 4, 8, 8}, eps[] = {1, 1, 1, 8};
  for (size_t i = 0; i < 4; ++i) {
    const LoweredModel& m = g.lowered[i + 1];
    const int64_t tp = tps[i], ep = eps[i];
    SCOPED_TRACE(m.id);
    // MLA: the LoRA down-projection replicated, q_b / kv_b by heads, o_proj row-parallel.
    EXPECT_EQ(op_named(m, "blk.3.fused_qkv_a_proj")->params.at("n0"), Value(int64_t{1536}));
    EXPECT_EQ(op_named(m, "blk.3.q_b_proj")->params.at("output_size"), Value(128 / tp * 192));
    EXPECT_EQ(op_named(m, "blk.3.kv_b_proj")->params.at("output_size"), Value(128 / tp * 256));
    EXPECT_EQ(op_named(m, "blk.3.attn_decode")->params.at("num_heads"), Value(128 / tp));
    EXPECT_EQ(op_named(m, "blk.3.o_proj")->params.at("tp_size"), Value(tp));
    // Dense MLP split by its intermediate; routed experts by theirs (tp) or whole per rank (ep); the router whole.
    EXPECT_EQ(op_named(m, "blk.0.down_proj")->params.at("input_size"), Value(18432 / tp));
    EXPECT_EQ(op_named(m, "blk.3.experts_w2")->params.at("k"), Value(ep > 1 ? int64_t{2048} : 2048 / tp));
    EXPECT_EQ(op_named(m, "blk.3.experts_w2")->params.at("num_experts"), Value(256 / ep));
    EXPECT_EQ(op_named(m, "blk.3.router")->params.at("num_experts"), Value(int64_t{256}));
    // The shared experts leave their partial sum to the block, which reduces it with the routed experts'.
    EXPECT_EQ(op_named(m, "blk.3.shared_down_proj")->params.at("input_size"), Value(2048 / tp));
    const auto task_of = [&](const std::string& name, bool module) {
      const auto& list = module ? g.tasks.models[i + 1].modules : g.tasks.models[i + 1].ops;
      for (const auto& [n, t] : list)
        if (n == name) return g.tasks.tasks.at(t);
      ADD_FAILURE() << "no " << name;
      return Task{};
    };
    ASSERT_EQ(g.tasks.models[i + 1].id, m.id);
    const Task shared_down = task_of("blk.3.shared_down_proj", false), dense_down = task_of("blk.0.down_proj", false);
    EXPECT_NE(shared_down.name.find("_partial_tp" + std::to_string(tp)), std::string::npos) << shared_down.name;
    EXPECT_TRUE(shared_down.children.empty());  // no all-reduce of its own
    ASSERT_EQ(dense_down.children.size(), 1u);
    EXPECT_EQ(dense_down.children[0].second, "all_reduce_n7168_tp" + std::to_string(tp) + "_bf16");
    const Task block = task_of("mlp", true);
    EXPECT_NE(block.name.find(ep > 1 ? "_tp8_ep8_" : "_tp" + std::to_string(tp) + "_"), std::string::npos) << block.name;
    bool reduces = false;
    for (const auto& [slot, child] : block.children) reduces |= slot == "collective" && child == "all_reduce_n7168_tp" + std::to_string(tp) + "_bf16";
    EXPECT_TRUE(reduces) << block.name;
    EXPECT_EQ(module_named(m, "model")->params.at("tp_size"), Value(tp));
  }
  // Unsharded, the shared experts' down projection is the reducing one's task (nothing to reduce).
  for (const auto& [n, t] : g.tasks.models[0].ops)
    if (n == "blk.3.shared_down_proj") EXPECT_EQ(t, "row_parallel_linear_k2048_n7168_nobias_bf16");
  // Heads that do not split (128 over 6 ranks) are refused, naming the field.
  c.parallel = {{6, 1}};
  const std::string out = run_with(text, c);
  EXPECT_NE(out.find("$.num_attention_heads: expected a multiple of the layout's tp_size (the MLA heads"), std::string::npos) << out;
  // 16 ranks leave 8 MLA heads each: the decode kernel serves multiples of 16 (said at generate time, naming the op).
  c.parallel = {{16, 1}};
  const std::string tp16 = run_with(text, c);
  EXPECT_NE(tp16.find("attn_decode"), std::string::npos) << tp16;
  EXPECT_NE(tp16.find("num_heads 8 (per rank): the MLA decode kernel serves a positive multiple of 16 heads"), std::string::npos) << tp16;
  // Expert parallelism outside the tensor-parallel group is not a layout yet.
  c.parallel = {{2, 4}};
  EXPECT_NE(run_with(text, c).find("a layout whose ep equals its tp"), std::string::npos);
  // Data-parallel attention at EP 2 (Note [Data-parallel expert MoE]): MLA, the dense layers and the shared experts
  // whole on every rank (the unsharded tasks), half the routed experts per rank, the MoE block of 2 ranks without tp.
  c.parallel = {{1, 2}};
  Generation dp;
  ASSERT_EQ(run_with(text, c, &dp), "");
  ASSERT_EQ(dp.lowered.size(), 2u);
  const LoweredModel& m = dp.lowered[1];
  EXPECT_EQ(m.id, "t/t@ep2");
  EXPECT_EQ(op_named(m, "blk.3.experts_w13")->params.at("num_experts"), Value(int64_t{128}));
  const ModuleInstance* block = module_named(m, "mlp");
  ASSERT_TRUE(block);
  EXPECT_EQ(block->params.at("ep_size"), Value(int64_t{2}));
  EXPECT_EQ(block->params.at("tp_size"), Value(int64_t{1}));
  EXPECT_NE(block->kind->name(block->params, "bf16").find("_ep2_bf16"), std::string::npos) << block->kind->name(block->params, "bf16");
  for (const char* op : {"blk.3.q_b_proj", "blk.3.o_proj", "blk.0.down_proj", "blk.3.shared_down_proj", "blk.3.attn_decode"}) {
    const OpInstance* sharded = op_named(m, op);
    const OpInstance* whole = op_named(dp.lowered[0], op);
    ASSERT_TRUE(sharded && whole) << op;
    EXPECT_EQ(sharded->kind->name(sharded->params, "bf16"), whole->kind->name(whole->params, "bf16")) << op;
  }
}

TEST(ParallelLayouts, MixtureOfExpertsModelsReplicateTheirKvHeadsPastTheirCount) {
  // Qwen3-30B-A3B's shape (4 KV heads) at TP 4 (one head per rank, split) and TP 8 (each head on 2 ranks).
  const std::string q = R"({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_attention_heads": 32, "num_key_value_heads": 4, "num_hidden_layers": 2, "num_experts": 128, "num_experts_per_tok": 8,
    "vocab_size": 151936, "max_position_embeddings": 40960, "head_dim": 128, "torch_dtype": "bfloat16"})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.parallel = {{4, 1}, {8, 1}, {4, 4}};
  Generation g;
  ASSERT_EQ(run_with(q, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 4u);
  const int64_t want[] = {1, 2, 1};
  for (size_t i = 0; i < 3; ++i) {
    const LoweredModel& m = g.lowered[i + 1];
    EXPECT_EQ(op_named(m, "blk.1.qkv_proj")->params.at("num_kv_heads"), Value(int64_t{1})) << m.id;
    for (const char* name : {"self_attn", "layer", "model"}) {
      const ModuleInstance* mod = module_named(m, name);
      ASSERT_TRUE(mod) << name;
      EXPECT_EQ(mod->params.at("kv_head_replicas"), Value(want[i])) << name << " of " << m.id;
      EXPECT_EQ(mod->kind->name(mod->params, "bf16").find("_kvrep2") != std::string::npos, want[i] == 2)
          << mod->kind->name(mod->params, "bf16");
    }
  }
}

TEST(ParallelLayouts, ExpertParallelLayoutsSplitTheExpertsWholeInsideTheTensorParallelGroup) {
  // Mixtral-8x7B's shape at TP 2 / 4 / 8 with EP equal (Note [Expert-parallel MoE]).
  const std::string text = R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 32000, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.parallel = {{2, 2}, {4, 4}, {8, 8}};
  Generation g;
  ASSERT_EQ(run_with(text, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 4u);
  const int64_t sizes[] = {2, 4, 8};
  for (size_t i = 0; i < 3; ++i) {
    const LoweredModel& m = g.lowered[i + 1];
    const int64_t n = sizes[i];
    EXPECT_EQ(m.id, "t/t@tp" + std::to_string(n) + "_ep" + std::to_string(n));
    EXPECT_EQ(op_named(m, "blk.1.qkv_proj")->params.at("num_heads"), Value(32 / n));  // attention: tensor-parallel
    // Each rank holds 8 / n whole experts; the router still sees all 8.
    EXPECT_EQ(op_named(m, "blk.1.experts_w13")->params.at("n"), Value(int64_t{2 * 14336}));
    EXPECT_EQ(op_named(m, "blk.1.experts_w13")->params.at("num_experts"), Value(8 / n));
    EXPECT_EQ(op_named(m, "blk.1.experts_w2")->params.at("k"), Value(int64_t{14336}));
    EXPECT_EQ(op_named(m, "blk.1.gate")->params.at("output_size"), Value(int64_t{8}));
    const ModuleInstance* block = module_named(m, "mlp");
    ASSERT_TRUE(block);
    EXPECT_EQ(block->params.at("ep_size"), Value(n));
    EXPECT_EQ(block->params.at("tp_size"), Value(n));
    EXPECT_EQ(block->params.at("num_experts"), Value(int64_t{8}));
    EXPECT_EQ(block->kind->name(block->params, "bf16"), "sparse_moe_block_e8_top2_h4096_i14336_renorm_tp" + std::to_string(n) + "_ep" +
                                                            std::to_string(n) + "_bf16");
    EXPECT_EQ(module_named(m, "model")->params.at("ep_size"), Value(n));
  }
  // EP without TP: data-parallel attention (Note [Data-parallel expert MoE]): attention, norms and router whole on every
  // rank, 8 / n whole experts per rank, a block of n ranks with no tensor parallelism (no all-reduce child).
  c.parallel = {{1, 2}, {1, 4}};
  Generation dp;
  ASSERT_EQ(run_with(text, c, &dp), "");
  ASSERT_EQ(dp.lowered.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    const LoweredModel& m = dp.lowered[i + 1];
    const int64_t n = i == 0 ? 2 : 4;
    EXPECT_EQ(m.id, "t/t@ep" + std::to_string(n));
    EXPECT_EQ(op_named(m, "blk.1.qkv_proj")->params.at("num_heads"), Value(int64_t{32}));
    EXPECT_EQ(op_named(m, "blk.1.qkv_proj")->params.at("num_kv_heads"), Value(int64_t{8}));
    EXPECT_EQ(op_named(m, "blk.1.o_proj")->params.at("tp_size"), Value(int64_t{1}));
    EXPECT_EQ(op_named(m, "blk.1.experts_w13")->params.at("num_experts"), Value(8 / n));
    EXPECT_EQ(op_named(m, "blk.1.experts_w13")->params.at("n"), Value(int64_t{2 * 14336}));
    EXPECT_EQ(op_named(m, "blk.1.gate")->params.at("output_size"), Value(int64_t{8}));
    const ModuleInstance* block = module_named(m, "mlp");
    ASSERT_TRUE(block);
    EXPECT_EQ(block->params.at("ep_size"), Value(n));
    EXPECT_EQ(block->params.at("tp_size"), Value(int64_t{1}));
    EXPECT_EQ(block->kind->name(block->params, "bf16"), "sparse_moe_block_e8_top2_h4096_i14336_renorm_ep" + std::to_string(n) + "_bf16");
    EXPECT_EQ(module_named(m, "model")->params.at("ep_size"), Value(n));
    EXPECT_EQ(module_named(m, "model")->params.at("tp_size"), Value(int64_t{1}));
  }
  // Experts that do not split are refused.
  c.parallel = {{16, 16}};
  std::string out = run_with(text, c);
  EXPECT_NE(out.find("t/config.json: $.num_local_experts: expected a multiple of the layout's ep_size (each expert-parallel rank holds num_experts / ep_size whole experts), got 8 (layout tp16_ep16"), std::string::npos) << out;
}

TEST(ParallelLayouts, IndivisibleLayoutsAndUnshardedFamiliesAreRefusedNamingTheField) {
  const std::string text = R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 128256, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.parallel = {{3, 1}};
  const std::string out = run_with(text, c);
  EXPECT_NE(out.find("t/config.json: $.num_attention_heads: expected a multiple of the layout's tp_size (the heads are split over the "
                     "tensor-parallel ranks), got 32 (layout tp3 recorded in t/fastkernels.json)"),
            std::string::npos)
      << out;
  // 48 heads and 12 KV heads at TP 8: the heads divide, the KV heads neither divide nor replicate evenly.
  const std::string odd = R"({"model_type": "llama", "hidden_size": 6144, "intermediate_size": 16384, "num_attention_heads": 48,
    "num_key_value_heads": 12, "num_hidden_layers": 2, "vocab_size": 128256, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})";
  c.parallel = {{8, 1}};
  const std::string kv = run_with(odd, c);
  EXPECT_NE(kv.find("t/config.json: $.num_key_value_heads: expected a multiple or a divisor of the layout's tp_size (KV heads split over "
                    "the ranks, or replicated as vLLM's QKVParallelLinear does), got 12 (layout tp8 recorded in t/fastkernels.json)"),
            std::string::npos)
      << kv;
  // BERT has no sharded forward: its descriptor never reads tp_size.
  const std::string bert = slurp(source_dir() / "hf_configs/google-bert/bert-base-uncased/config.json");
  c.parallel = {{2, 1}};
  c.dtype = "bfloat16";
  EXPECT_NE(run_with(bert, c).find("t/fastkernels.json: $.parallel: layout tp2: family bert has no tensor-parallel forward"), std::string::npos)
      << run_with(bert, c);
}

TEST(ParallelLayouts, SidecarSyntax) {
  Diagnostics d;
  UserChoices c = parse_user_choices("x/fastkernels.json", R"({"parallel": [{"tp": 4}, {"tp": 2}, {"ep": 2}, {"tp": 2, "ep": 2}]})", d);
  EXPECT_TRUE(d.ok()) << d.text();
  ASSERT_EQ(c.parallel.size(), 4u);
  EXPECT_EQ(c.parallel[0].suffix(), "ep2");  // sorted by (tp, ep)
  EXPECT_EQ(c.parallel[1].suffix(), "tp2");
  EXPECT_EQ(c.parallel[2].suffix(), "tp2_ep2");
  EXPECT_EQ(c.parallel[3].suffix(), "tp4");
  EXPECT_EQ(user_choices_text(c), "{\n  \"parallel\": [\n    {\n      \"ep\": 2\n    },\n    {\n      \"tp\": 2\n    },\n    {\n      \"ep\": 2,\n"
                                  "      \"tp\": 2\n    },\n    {\n      \"tp\": 4\n    }\n  ]\n}\n");
  for (const char* bad : {R"({"parallel": [{"tp": 0}]})", R"({"parallel": [{"pp": 2}]})", R"({"parallel": [{"tp": 1}]})",
                          R"({"parallel": [{"tp": 2}, {"tp": 2}]})", R"({"parallel": [{"tp": 2, "ep": 4}]})", R"({"parallel": {"tp": 2}})"}) {
    Diagnostics e;
    parse_user_choices("x/fastkernels.json", bad, e);
    EXPECT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.text().find("x/fastkernels.json: $.parallel"), std::string::npos) << e.text();
  }
  EXPECT_EQ(parse_layout("tp8")->tp, 8);
  EXPECT_EQ(parse_layout("tp2_ep2")->ep, 2);
  EXPECT_FALSE(parse_layout("tp"));
  EXPECT_FALSE(parse_layout(""));
}

TEST(UserConfigs, PythonNonFiniteLiteralsInKeysNoForwardPassReads) {
  const std::string text = std::string(R"({"model_type": "llama", "initializer_range": NaN, "attention_dropout": -Infinity,
    "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16"}, "cap": Infinity}, "label2id": {"NaN": 0}, )") + kBase + "}";
  EXPECT_EQ(run_with(text, {}), "");
}

TEST(UserConfigs, AllowUnknownKeysByNameOnly) {
  const std::string text = std::string(R"({"model_type": "llama", "use_fancy_attention": true, )") + kBase + "}";
  EXPECT_NE(run_with(text, {}).find("unknown key \"use_fancy_attention\""), std::string::npos);
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.allow_unknown = {"use_fancy_attention"};
  Generation g;
  EXPECT_EQ(run_with(text, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 1u);
  EXPECT_EQ(g.lowered[0].allowed_unknown, std::vector<std::string>{"use_fancy_attention"});
  c.allow_unknown = {"use_fancy_attention", "not_there"};
  EXPECT_EQ(run_with(text, c),
            "t/fastkernels.json: $.allow_unknown: \"not_there\" is not an unknown key of t/config.json (remove it: only keys "
            "the config has and the family does not know can be allowed)\n");
}

TEST(UserConfigs, QuantisedCheckpointsOnlyWithDequantize) {
  const std::string text =
      std::string(R"({"model_type": "llama", "quantization_config": {"quant_method": "mxfp4"}, )") + kBase + "}";
  EXPECT_EQ(run_with(text, {}),
            "t/config.json: $.quantization_config: quantised checkpoint (quant_method \"mxfp4\"): no kind serves mxfp4 weights "
            "yet; pass `add --dequantize` to generate bf16 tasks for this config knowingly (recorded beside it and in the "
            "manifest)\n");
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.dequantize = true;
  Generation g;
  EXPECT_EQ(run_with(text, c, &g), "");
  EXPECT_EQ(g.lowered.at(0).dequantized_from, "mxfp4");
  EXPECT_EQ(run_with(std::string(R"({"model_type": "llama", )") + kBase + "}", c),
            "t/fastkernels.json: $.dequantize: t/config.json has no quantization_config (remove dequantize)\n");
}

TEST(UserConfigs, Float32CheckpointsOnlyWithADtypeChoice) {
  std::string base = kBase;
  const size_t at = base.find("\"bfloat16\"");
  ASSERT_NE(at, std::string::npos);
  const std::string f32 = std::string(R"({"model_type": "llama", )") + base.replace(at, 10, "\"float32\"") + "}";
  EXPECT_EQ(run_with(f32, {}),
            "t/config.json: $.torch_dtype: float32 checkpoint: no kind serves fp32 weights (the kernels serve \"bfloat16\" "
            "and \"float16\"); pass `add --dtype bfloat16` (or float16) to generate 16-bit tasks for it knowingly, as "
            "vLLM's dtype=\"auto\" serves fp32 checkpoints (recorded beside it and in the manifest)\n");
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.dtype = "float16";
  Generation g;
  EXPECT_EQ(run_with(f32, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 1u);
  EXPECT_EQ(g.lowered[0].dtype_from, "float32");
  for (const OpInstance& op : g.lowered[0].ops) EXPECT_EQ(op.dtype, "float16") << op.name;
  // The choice must change something: the checkpoint's own dtype is an error naming the sidecar.
  c.dtype = "bfloat16";
  EXPECT_EQ(run_with(std::string(R"({"model_type": "llama", )") + kBase + "}", c),
            "t/fastkernels.json: $.dtype: t/config.json already has torch_dtype \"bfloat16\" (remove dtype)\n");
}

TEST(UserConfigs, ServedAsAKnownModelTypeOnlyWhenAskedAndOnlyForUnknownOnes) {
  const std::string acme = std::string(R"({"model_type": "acme_llama", "architectures": ["AcmeForCausalLM"], )") + kBase + "}";
  EXPECT_EQ(run_with(acme, {}),
            "t/config.json: $.model_type: unknown model_type \"acme_llama\"; known: bert, deepseek_v3, dinov3_vit, gemma2, gemma3_text, gpt_oss, "
            "granite, llama, mistral, mixtral, olmo2, phi3, qwen2, qwen2_5_vl_text, qwen2_5_vl_vision, qwen2_vl_text, qwen2_vl_vision, qwen3, qwen3_moe, qwen3_vl_text, qwen3_vl_vision, siglip2_vision_model, siglip_vision_model, vit, xlm-roberta; add a descriptor under "
            "generator/descriptors/, or, if its forward pass is one of those model types', pass `add --as <model_type>` to "
            "lower it as that one knowingly\n");
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.served_as = "llama";
  Generation g;
  EXPECT_EQ(run_with(acme, c, &g), "");
  ASSERT_EQ(g.lowered.size(), 1u);
  EXPECT_EQ(g.lowered[0].served_as, "llama");
  EXPECT_EQ(g.lowered[0].model_type, "acme_llama");  // the manifest keeps the config's own
  c.served_as = "qwen2";  // the model type's constants apply (qkv bias)
  Generation g2;
  EXPECT_EQ(run_with(acme, c, &g2), "");
  bool bias = false;
  for (const OpInstance& op : g2.lowered.at(0).ops) bias |= op.name == "blk.0.qkv_proj" && std::get<bool>(op.params.at("bias"));
  EXPECT_TRUE(bias);
  c.served_as = "acme";
  EXPECT_EQ(run_with(acme, c),
            "t/fastkernels.json: $.served_as: unknown model_type \"acme\"; known: bert, deepseek_v3, dinov3_vit, gemma2, gemma3_text, gpt_oss, "
            "granite, llama, mistral, mixtral, olmo2, phi3, qwen2, qwen2_5_vl_text, qwen2_5_vl_vision, qwen2_vl_text, qwen2_vl_vision, qwen3, qwen3_moe, qwen3_vl_text, qwen3_vl_vision, siglip2_vision_model, siglip_vision_model, vit, xlm-roberta\n");
  c.served_as = "llama";
  EXPECT_EQ(run_with(std::string(R"({"model_type": "qwen2", )") + kBase + "}", c),
            "t/fastkernels.json: $.served_as: model_type \"qwen2\" of t/config.json is known (generator/descriptors/llama.json); "
            "remove served_as\n");
}

TEST(UserConfigs, SeparateOutputProjectionBias) {
  // Seed-OSS: q/k/v bias without an o_proj bias (attention_out_bias), served as llama.
  const std::string seed = std::string(R"({"model_type": "seed_oss", "attention_bias": true, "attention_out_bias": false, )") +
                           "\"residual_dropout\": 0.1, " + kBase + "}";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.served_as = "llama";
  for (const char* out_bias : {"false", "true", ""}) {
    std::string text = seed;
    const std::string key = "\"attention_out_bias\": false, ";
    text.replace(text.find(key), key.size(), *out_bias ? std::string("\"attention_out_bias\": ") + out_bias + ", " : std::string());
    Generation g;
    ASSERT_EQ(run_with(text, c, &g), "") << out_bias;
    std::optional<bool> qkv, o;
    for (const OpInstance& op : g.lowered.at(0).ops) {
      if (op.name == "blk.0.qkv_proj") qkv = std::get<bool>(op.params.at("bias"));
      if (op.name == "blk.0.o_proj") o = std::get<bool>(op.params.at("bias"));
    }
    ASSERT_TRUE(qkv && o) << out_bias;
    EXPECT_TRUE(*qkv) << out_bias;
    EXPECT_EQ(*o, std::string(out_bias) != "false") << out_bias;  // absent: attention_bias's value
  }
}

TEST(UserConfigs, RobertaPositionsFromThePaddingIndex) {
  // xlm-roberta numbers positions from pad_token_id + 1; BERT ignores pad_token_id; a token id
  // field takes any integer or null for the families that do not read it.
  const std::string enc = R"("hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 1,
    "vocab_size": 100, "max_position_embeddings": 66, "torch_dtype": "bfloat16", "type_vocab_size": 1)";
  auto offset = [&](const std::string& extra, const char* type) {
    Generation g;
    const std::string err = run_with(std::string("{\"model_type\": \"") + type + "\", " + extra + enc + "}", {}, &g);
    EXPECT_EQ(err, "") << type << " " << extra;
    return g.resolved.empty() ? int64_t{-1} : std::get<int64_t>(g.resolved[0].values.at("position_offset"));
  };
  EXPECT_EQ(offset(R"("pad_token_id": 1, )", "xlm-roberta"), 2);
  EXPECT_EQ(offset("", "xlm-roberta"), 2);  // XLMRobertaConfig's default padding index 1
  EXPECT_EQ(offset(R"("pad_token_id": 0, )", "bert"), 0);
  EXPECT_EQ(offset(R"("pad_token_id": -1, )", "bert"), 0);
  EXPECT_EQ(offset(R"("pad_token_id": null, )", "xlm-roberta"), 2);  // null is the key's absence
  EXPECT_EQ(run_with(std::string(R"({"model_type": "xlm-roberta", "pad_token_id": -1, )") + enc + "}", {}),
            "t/config.json: $.pad_token_id: expected a token id >= 0 (RoBERTa-style encoders number positions from "
            "padding_idx + 1), got -1\n");
  EXPECT_EQ(run_with(std::string(R"({"model_type": "llama", "pad_token_id": -1, )") + kBase + "}", {}), "");
  EXPECT_NE(run_with(std::string(R"({"model_type": "llama", "pad_token_id": "x", )") + kBase + "}", {}).find(
                "$.pad_token_id: expected integer or null"),
            std::string::npos);
}

TEST(UserConfigs, VisionTransformerImagesAndPooler) {
  // ViT: tokens per image from image_size / patch_size (+ the class token); the pooler's width and
  // activation from pooler_output_size / pooler_act (HF's newer keys; absent: hidden_size, tanh);
  // images must be whole patches; a list-valued image_size (non-square) is refused by its type.
  const std::string vit = R"("hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 1,
    "torch_dtype": "bfloat16", "patch_size": 8)";
  auto resolved = [&](const std::string& extra) {
    Generation g;
    const std::string err = run_with(std::string(R"({"model_type": "vit", )") + extra + vit + "}", {}, &g);
    EXPECT_EQ(err, "") << extra;
    return g.resolved.empty() ? std::map<std::string, Value>() : g.resolved[0].values;
  };
  auto v = resolved(R"("image_size": 32, )");
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(std::get<int64_t>(v.at("tokens_per_image")), 17);
  EXPECT_EQ(std::get<int64_t>(v.at("pool_size")), 64);
  EXPECT_EQ(std::get<std::string>(v.at("pool_act")), "tanh");
  v = resolved(R"("image_size": 32, "pooler_output_size": 32, "pooler_act": "gelu_new", )");
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(std::get<int64_t>(v.at("pool_size")), 32);
  EXPECT_EQ(std::get<std::string>(v.at("pool_act")), "gelu_tanh");
  EXPECT_EQ(run_with(std::string(R"({"model_type": "vit", "image_size": 36, )") + vit + "}", {}),
            "t/config.json: $.image_size: expected a multiple of patch_size (whole patches; ViT crops or resizes images to "
            "image_size), got 36\n");
  EXPECT_NE(run_with(std::string(R"({"model_type": "vit", "image_size": [32, 48], )") + vit + "}", {}).find("$.image_size: expected"),
            std::string::npos);
}

TEST(UserConfigs, BertDecoderWithCrossAttention) {
  // BERT as bert2bert's decoder: is_decoder makes self-attention causal, add_cross_attention adds a
  // cross-attention block per layer (query linear, fused key/value linear over the encoder states,
  // the cross_attention kind over its cache, output dense + residual + LayerNorm); names say so.
  // Cross-attention without is_decoder and pruned heads are refused; an empty pruned_heads and
  // transformers 4.x generation defaults are not forward-pass keys.
  const std::string dec = R"("model_type": "bert", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
    "num_hidden_layers": 1, "vocab_size": 100, "max_position_embeddings": 66, "torch_dtype": "bfloat16", "pruned_heads": {},
    "num_beams": 1, "max_length": 20, "use_bfloat16": false, "chunk_size_feed_forward": 0)";
  Generation g;
  ASSERT_EQ(run_with(R"({"is_decoder": true, "add_cross_attention": true, )" + dec + "}", {}, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"cross_attention_hq2_hkv2_d32_bf16", "flash_attn_prefill_hq2_hkv2_d32_causal_bf16",
                           "merged_column_parallel_linear_k64_n64_64_bias_bf16", "column_parallel_linear_k64_n64_bias_bf16",
                           "bert_attention_h64_hq2_d32_causal_eps1e-12_bias_bf16", "bert_cross_attention_h64_hq2_d32_eps1e-12_bias_bf16",
                           "bert_layer_h64_i128_hq2_d32_gelu_eps1e-12_bias_causal_xattn_bf16",
                           "bert_model_l1_v100_tt2_pos66_h64_i128_hq2_d32_gelu_eps1e-12_bias_causal_xattn_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  Generation causal_only;
  ASSERT_EQ(run_with(R"({"is_decoder": true, )" + dec + "}", {}, &causal_only), "");
  bool has_cross = false;
  for (const auto& [name, t] : causal_only.tasks.tasks) has_cross |= t.kind == "cross_attention" || t.kind == "bert_cross_attention";
  EXPECT_FALSE(has_cross);
  EXPECT_TRUE(causal_only.tasks.tasks.count("bert_layer_h64_i128_hq2_d32_gelu_eps1e-12_bias_causal_bf16"));
  EXPECT_EQ(run_with(R"({"add_cross_attention": true, )" + dec + "}", {}),
            "t/config.json: $.add_cross_attention: expected false unless is_decoder is true (HF BertLayer refuses cross-attention in "
            "an encoder), got true\n");
  std::string pruned = dec;
  pruned.replace(pruned.find(R"("pruned_heads": {})"), 18, R"("pruned_heads": {"0": [1]})");
  EXPECT_NE(run_with("{" + pruned + "}", {}).find("$.pruned_heads: pruned attention heads ({\"0\":[1]}) change the forward pass"),
            std::string::npos)
      << run_with("{" + pruned + "}", {});
}

TEST(UserConfigs, VisionEncoderServedAtAnotherResolution) {
  // `add --image-size`: ViT serves images of that size; the patch embedding and the cases follow it,
  // and the model resizes the checkpoint's position grid (bicubic, half-pixel, NHWC: the interpolate
  // kind) in its pos_interp child, spelled _pos{grid} in the model's name. The config cannot set it,
  // it must be whole patches, and families without a resolution refuse it.
  const std::string vit = R"({"model_type": "vit", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
    "num_hidden_layers": 1, "torch_dtype": "bfloat16", "patch_size": 8, "image_size": 32})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.image_size = 48;
  Generation g;
  ASSERT_EQ(run_with(vit, c, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"interpolate_bicubic_hp_c64_4x4_to_6x6_nhwc_bf16", "patch_embedding_c3_p8_s48_h64_bias_bf16",
                           "vit_model_l1_c3_p8_s48_pos4_h64_i128_hq2_d32_gelu_eps1e-12_qkvbias_pool64_tanh_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  EXPECT_EQ(std::get<int64_t>(g.resolved[0].values.at("tokens_per_image")), 37);
  Generation same;  // served at the checkpoint's own resolution: no interpolation, the usual names
  ASSERT_EQ(run_with(vit, {}, &same), "");
  for (const auto& [name, t] : same.tasks.tasks) EXPECT_NE(t.kind, "interpolate") << name;
  EXPECT_TRUE(same.tasks.tasks.count("vit_model_l1_c3_p8_s32_h64_i128_hq2_d32_gelu_eps1e-12_qkvbias_pool64_tanh_bf16"));
  c.image_size = 44;  // not whole 8-pixel patches
  EXPECT_NE(run_with(vit, c).find("$.serve_image_size: expected a multiple of patch_size (whole patches), got 44"), std::string::npos)
      << run_with(vit, c);
  std::string set_in_config = vit;
  set_in_config.insert(1, R"("serve_image_size": 48, )");
  EXPECT_NE(run_with(set_in_config, {}).find("serve_image_size is a choice recorded beside the config, not a config key: use `add "
                                             "--image-size`"),
            std::string::npos);
  c.image_size = 48;
  EXPECT_EQ(run_with(std::string("{\"model_type\": \"llama\", ") + kBase + "}", c),
            "t/fastkernels.json: $.image_size: family llama has no image resolution to choose (remove image_size)\n");
}

TEST(UserConfigs, Dinov3ChecksAndVariants) {
  // DINOv3: registers shift the rope's unrotated prefix; SwiGLU takes the merged projection and silu_and_mul;
  // a gated exact GELU is refused (no composite reference yet), and so is a head size the 2-D rope cannot split.
  const std::string base = R"("model_type": "dinov3_vit", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
    "num_hidden_layers": 1, "torch_dtype": "bfloat16", "patch_size": 16, "image_size": 64)";
  Generation g;
  ASSERT_EQ(run_with("{" + base + R"(, "num_register_tokens": 4, "use_gated_mlp": true, "hidden_act": "silu"})", {}, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"vision_rope_2d_hq2_d32_g4x4_p5_m1_centered_theta100_bf16", "silu_and_mul_i128_bf16",
                           "merged_column_parallel_linear_k64_n128_128_bias_bf16", "layer_scale_h64_bf16",
                           "dinov3_mlp_h64_i128_silu_gated_bias_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  EXPECT_NE(run_with("{" + base + R"(, "use_gated_mlp": true, "hidden_act": "gelu"})", {}).find("$.hidden_act: expected with use_gated_mlp"),
            std::string::npos);
  EXPECT_NE(run_with("{" + base + R"(, "num_attention_heads": 32})", {}).find("$.head_dim: expected a multiple of 4"), std::string::npos)
      << run_with("{" + base + R"(, "num_attention_heads": 32})", {});
}

TEST(UserConfigs, ComponentOfACompositeConfig) {
  // `add --component vision_config` (Note [Config components]): a SiglipConfig's vision tower is lowered from its
  // nested vision_config (SiglipVisionConfig defaults for the keys it omits), the composite's dtype carried over;
  // the top level's other keys (text_config, initializer_factor) are not read. Without the choice the composite's
  // own model type decides (and siglip has no descriptor); a missing component and a tower without its pooling
  // head are refused.
  const std::string siglip = R"({"model_type": "siglip", "initializer_factor": 1.0, "torch_dtype": "bfloat16",
    "text_config": {"model_type": "siglip_text_model", "vocab_size": 256000},
    "vision_config": {"model_type": "siglip_vision_model", "image_size": 64, "hidden_size": 64, "intermediate_size": 128,
                      "num_attention_heads": 2, "num_hidden_layers": 1}})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.component = "vision_config";
  Generation g;
  ASSERT_EQ(run_with(siglip, c, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"siglip_vision_model_l1_c3_p16_s64_h64_i128_hq2_d32_gelu_tanh_eps1e-06_qkvbias_bf16",
                           "siglip_map_head_h64_hq2_d32_i128_gelu_tanh_eps1e-06_bf16", "vit_layer_h64_i128_hq2_d32_gelu_tanh_eps1e-06_qkvbias_siglip_bf16",
                           "flash_attn_prefill_hq2_hkv2_d32_bidir_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  EXPECT_NE(run_with(siglip, {}).find("unknown model_type \"siglip_text_model\""), std::string::npos) << run_with(siglip, {});
  c.component = "audio_config";
  EXPECT_EQ(run_with(siglip, c), "t/config.json: $.audio_config: expected an object (the component that `add --component audio_config` lowers), "
                                 "got nothing\n");
  c.component = "vision_config";
  std::string headless = siglip;
  headless.insert(headless.find("\"image_size\": 64"), "\"vision_use_head\": false, ");
  EXPECT_NE(run_with(headless, c).find("$.vision_config.vision_use_head: expected true"), std::string::npos) << run_with(headless, c);
  Diagnostics diag;
  parse_user_choices("f.json", R"({"component": "vision"})", diag);
  EXPECT_NE(diag.text().find("$.component: expected the key of a nested component config"), std::string::npos) << diag.text();
}

TEST(UserConfigs, Siglip2NaflexTowerComponent) {
  // SigLIP-2 NaFlex (Note [NaFlex positions]): the vision_config of a siglip2 checkpoint lowers as
  // siglip2_vision_model: the patch embedding a Linear over C * P * P = 768 pixel values, SigLIP's layers and
  // head (shared with the fixed-resolution tower's tasks), the model's cases grids of the 16 x 16 table, an
  // elongated and a mixed batch. A position table that is not square is refused, naming the field.
  const std::string naflex = R"({"model_type": "siglip2", "torch_dtype": "float32",
    "text_config": {"model_type": "siglip2_text_model", "vocab_size": 256000},
    "vision_config": {"model_type": "siglip2_vision_model", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
                      "num_hidden_layers": 1, "num_patches": 256, "patch_size": 16}})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.component = "vision_config";
  c.dtype = "bfloat16";
  Generation g;
  ASSERT_EQ(run_with(naflex, c, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  const std::string model = "siglip2_vision_model_l1_c3_p16_pe256_h64_i128_hq2_d32_gelu_tanh_eps1e-06_qkvbias_bf16";
  for (const std::string& want : {model, std::string("replicated_linear_k768_n64_bias_bf16"),
                                  std::string("siglip_map_head_h64_hq2_d32_i128_gelu_tanh_eps1e-06_bf16"),
                                  std::string("vit_layer_h64_i128_hq2_d32_gelu_tanh_eps1e-06_qkvbias_siglip_bf16")})
    EXPECT_TRUE(names.count(want)) << want;
  ASSERT_TRUE(g.tasks.tasks.count(model));
  std::vector<std::string> cases;
  for (const auto& sc : g.tasks.tasks.at(model).cases) cases.push_back(sc.name);
  EXPECT_EQ(cases, (std::vector<std::string>{"b1_g16x16", "b8_g16x16", "b32_g16x16", "b8_g8x32", "b8_mixed"}));
  std::string oblong = naflex;
  const std::string square = "\"num_patches\": 256";
  oblong.replace(oblong.find(square), square.size(), "\"num_patches\": 200");
  EXPECT_NE(run_with(oblong, c).find("$.vision_config.num_patches: expected a square number"), std::string::npos) << run_with(oblong, c);
}

TEST(UserConfigs, Qwen2VlVisionTowerComponent) {
  // Qwen2-VL's vision_config repeats the composite's model type ("qwen2_vl", as transformers 4.4x wrote it) and
  // Qwen2.5-VL's leaves it out: the component's type is then the composite's + "_vision" (transformers' sub-config
  // class name). The tower's width is embed_dim, hidden_size the merger's output; depth and num_heads are aliases;
  // the legacy keys in_chans / spatial_patch_size must agree with what transformers reads; the benchmark grid is
  // whole merge windows of the served size.
  const std::string vl = R"({"model_type": "qwen2_vl", "torch_dtype": "bfloat16", "hidden_size": 3584,
    "vision_config": {"model_type": "qwen2_vl", "depth": 2, "embed_dim": 64, "hidden_size": 96, "num_heads": 4, "in_chans": 3,
                      "spatial_patch_size": 14}})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.component = "vision_config";
  Generation g;
  ASSERT_EQ(run_with(vl, c, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"qwen2_vl_vision_model_l2_c3_t2_p14_h64_i256_hq4_d16_quick_gelu_eps1e-06_m2_g32_theta10000_o96_bf16",
                           "patch_embedding_3d_c3_t2_p14_h64_nobias_bf16", "qwen2_vl_patch_merger_h64_m2_o96_eps1e-06_bf16",
                           "vision_rope_2d_hq4_d16_g32x32_p0_m2_grid_theta10000_bf16", "flash_attn_prefill_hq4_hkv4_d16_bidir_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  std::string untyped = vl;  // Qwen2.5-VL style: no model_type in the component
  untyped.erase(untyped.find(R"("model_type": "qwen2_vl", "depth")"), std::string(R"("model_type": "qwen2_vl", )").size());
  Generation g2;
  ASSERT_EQ(run_with(untyped, c, &g2), "");
  EXPECT_EQ(g2.tasks.tasks.size(), g.tasks.tasks.size());
  std::string bad = vl;
  bad.replace(bad.find(R"("in_chans": 3)"), 13, R"("in_chans": 1)");
  EXPECT_NE(run_with(bad, c).find("$.vision_config.in_chans: expected the value of in_channels"), std::string::npos) << run_with(bad, c);
  c.image_size = 20;  // less than one 28-pixel merge window
  EXPECT_NE(run_with(vl, c).find("serve_image_size: expected at least one merge window"), std::string::npos) << run_with(vl, c);
  c.image_size = 300;  // 10 whole windows of 28 pixels: a 20 x 20 grid
  Generation g3;
  ASSERT_EQ(run_with(vl, c, &g3), "");
  EXPECT_TRUE(g3.tasks.tasks.count("vision_rope_2d_hq4_d16_g20x20_p0_m2_grid_theta10000_bf16"));
}

TEST(UserConfigs, Qwen25AndQwen3VlVisionTowerComponents) {
  // Qwen2.5-VL's tower (no model_type in the component: qwen2_5_vl_vision): the width is hidden_size, the merger's
  // out_hidden_size; the window size and the full-attention blocks name the model task (Note [Vision windows]);
  // the gated MLP's width need not be a whole 16-byte vector (3420 in the released model). Qwen3-VL's (the
  // component repeats "qwen3_vl": qwen3_vl_vision): the learned position table must be square, the deepstack
  // blocks name the model task and get a postshuffle merger.
  const std::string vl25 = R"({"model_type": "qwen2_5_vl", "torch_dtype": "bfloat16", "hidden_size": 3584,
    "vision_config": {"depth": 4, "hidden_size": 64, "out_hidden_size": 96, "intermediate_size": 108, "num_heads": 4,
                      "in_chans": 3, "hidden_act": "silu", "window_size": 112, "fullatt_block_indexes": [1, 3], "tokens_per_second": 2}})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.component = "vision_config";
  Generation g;
  ASSERT_EQ(run_with(vl25, c, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"qwen2_5_vl_vision_model_l4_c3_t2_p14_h64_i108_hq4_d16_silu_eps1e-06_m2_g32_theta10000_o96_win112_full1x3_bf16",
                           "qwen2_5_vl_vision_block_h64_i108_hq4_d16_silu_eps1e-06_m2_g32_theta10000_bf16",
                           "qwen2_5_vl_patch_merger_h64_m2_o96_eps1e-06_bf16", "llama_mlp_h64_i108_bias_bf16", "silu_and_mul_i108_bf16",
                           "qwen2_vl_vision_attention_h64_hq4_d16_m2_g32_theta10000_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  std::string gelu = vl25;
  gelu.replace(gelu.find(R"("hidden_act": "silu")"), 20, R"("hidden_act": "gelu")");
  EXPECT_NE(run_with(gelu, c).find("$.vision_config.hidden_act: expected \"silu\""), std::string::npos) << run_with(gelu, c);
  std::string late = vl25;
  late.replace(late.find("[1, 3]"), 6, "[1, 4]");  // block 4 of a 4-block tower
  EXPECT_NE(run_with(late, c).find("fullatt_block_indexes \"1,4\" must list distinct blocks in [0, 4)"), std::string::npos)
      << run_with(late, c);
  std::string small = vl25;
  small.replace(small.find(R"("window_size": 112)"), 18, R"("window_size": 20)");
  EXPECT_NE(run_with(small, c).find("$.vision_config.window_size: expected at least one merge unit"), std::string::npos)
      << run_with(small, c);

  const std::string vl3 = R"({"model_type": "qwen3_vl", "torch_dtype": "bfloat16",
    "vision_config": {"model_type": "qwen3_vl", "depth": 3, "hidden_size": 64, "out_hidden_size": 96, "intermediate_size": 128,
                      "num_heads": 4, "in_channels": 3, "num_position_embeddings": 64, "deepstack_visual_indexes": [1],
                      "hidden_act": "gelu_pytorch_tanh", "patch_size": 16}})";
  Generation g3;
  ASSERT_EQ(run_with(vl3, c, &g3), "");
  std::set<std::string> names3;
  for (const auto& [name, t] : g3.tasks.tasks) names3.insert(name);
  for (const char* want : {"qwen3_vl_vision_model_l3_c3_t2_p16_h64_i128_hq4_d16_gelu_tanh_eps1e-06_m2_g28_theta10000_o96_pe64_ds1_bf16",
                           "qwen3_vl_patch_merger_h64_m2_o96_eps1e-06_bf16", "qwen3_vl_patch_merger_h64_m2_o96_eps1e-06_post_bf16",
                           "qwen3_vl_vision_mlp_h64_i128_gelu_tanh_bf16", "patch_embedding_3d_c3_t2_p16_h64_bias_bf16",
                           "layer_norm_h256_eps1e-06_bias_bf16"})
    EXPECT_TRUE(names3.count(want)) << want;
  std::string nosq = vl3;
  nosq.replace(nosq.find(R"("num_position_embeddings": 64)"), 29, R"("num_position_embeddings": 60)");
  EXPECT_NE(run_with(nosq, c).find("$.vision_config.num_position_embeddings: expected a square number"), std::string::npos)
      << run_with(nosq, c);
  std::string nods = vl3;
  nods.replace(nods.find(R"("deepstack_visual_indexes": [1])"), 31, R"("deepstack_visual_indexes": [])");
  Generation g4;
  ASSERT_EQ(run_with(nods, c, &g4), "");
  bool post = false;
  for (const auto& [name, t] : g4.tasks.tasks) post = post || name.find("_post_") != std::string::npos;
  EXPECT_FALSE(post);  // no deepstack: no postshuffle merger
}

TEST(UserConfigs, MropeTextDecoderComponent) {
  // The text model of a VLM (Note [mrope sections], Note [Config components]): `--component text_config` of a
  // legacy layout (Qwen2-VL / Qwen2.5-VL: the text keys at the top level) takes the top-level keys but the other
  // components, the architectures and the image-token ids, as the type qwen2_vl_text; rope_scaling's
  // mrope_section ("type": "mrope" is transformers' legacy name of default rope with sections) makes the
  // rotary child an mrope task, spelled in every name above it; interleaved sections (Qwen3-VL) spell "i".
  const std::string vl = R"({"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"], "torch_dtype": "bfloat16",
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
    "max_position_embeddings": 256, "vocab_size": 100, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "image_token_id": 7,
    "vision_start_token_id": 5, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "vision_config": {"depth": 2, "embed_dim": 64, "hidden_size": 96, "num_heads": 4}})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.component = "text_config";
  Generation g;
  ASSERT_EQ(run_with(vl, c, &g), "");
  ASSERT_EQ(g.resolved.size(), 1u);
  EXPECT_EQ(g.resolved[0].model_type, "qwen2_vl_text");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"mrope_d16_rot16_pos256_base1000000_none_neox_mrope2x3x3_hq4_hkv2_bf16",
                           "qkv_rope_cache_h64_hq4_hkv2_d16_rot16_pos256_base1000000_none_neox_mrope2x3x3_bias_bf16",
                           "qkv_parallel_linear_h64_d16_hq4_hkv2_bias_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  for (const auto& n : names) EXPECT_EQ(n.find("rotary_embedding"), std::string::npos) << n;
  // The sections must cover rotary_dim / 2 = 8 frequencies.
  std::string bad = vl;
  bad.replace(bad.find("[2, 3, 3]"), 9, "[2, 3, 4]");
  EXPECT_NE(run_with(bad, c).find("sums to 9, expected rotary_dim / 2 = 8"), std::string::npos) << run_with(bad, c);
  // Without the component, the composite is not a text model: its vision_config says how to lower it.
  UserChoices whole;
  whole.file = "t/fastkernels.json";
  EXPECT_NE(run_with(vl, whole).find("unknown model_type \"qwen2_vl\""), std::string::npos) << run_with(vl, whole);
  // Qwen3-VL: text_config nested, interleaved sections, q/k norm; the composite's tie_word_embeddings is inherited.
  const std::string v3 = R"({"model_type": "qwen3_vl", "tie_word_embeddings": true, "text_config": {"model_type": "qwen3_vl_text",
    "dtype": "bfloat16", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "num_hidden_layers": 2, "max_position_embeddings": 256, "vocab_size": 100, "rope_theta": 5000000,
    "rope_scaling": {"rope_type": "default", "mrope_section": [3, 3, 2], "mrope_interleaved": true}},
    "vision_config": {"depth": 2}})";
  Generation g3;
  ASSERT_EQ(run_with(v3, c, &g3), "");
  names.clear();
  for (const auto& [name, t] : g3.tasks.tasks) names.insert(name);
  EXPECT_TRUE(names.count("mrope_d16_rot16_pos256_base5000000_none_neox_mropei3x3x2_hq4_hkv2_bf16"));
  bool tied = false;
  for (const auto& n : names) tied |= n.find("_tied_") != std::string::npos;
  EXPECT_TRUE(tied);
  // A family that does not lower mrope refuses the sections instead of rotating by the temporal position alone.
  const std::string gemma = R"({"model_type": "gemma2", "torch_dtype": "bfloat16", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "max_position_embeddings": 256,
    "vocab_size": 100, "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]}})";
  UserChoices plain;
  plain.file = "t/fastkernels.json";
  EXPECT_NE(run_with(gemma, plain).find("$.rope_scaling.mrope_section: family gemma does not lower multimodal rope"), std::string::npos)
      << run_with(gemma, plain);
  // Malformed sections and interleaving without sections are named.
  std::string three = vl;
  three.replace(three.find("[2, 3, 3]"), 9, "[2, 6]");
  EXPECT_NE(run_with(three, c).find("$.rope_scaling.mrope_section: expected a list of three non-negative integers"), std::string::npos)
      << run_with(three, c);
  std::string il = vl;
  const std::string sections = R"({"type": "mrope", "mrope_section": [2, 3, 3]})";
  il.replace(il.find(sections), sections.size(), R"({"rope_type": "default", "mrope_interleaved": true})");
  EXPECT_NE(run_with(il, c).find("$.rope_scaling.mrope_interleaved: expected false or nothing without mrope_section"), std::string::npos)
      << run_with(il, c);
}

TEST(UserConfigs, EmbeddingModelTokenHeads) {
  // `add --multi-vector N --sparse --head-bias --drop-special-tokens` (Note [Embedding heads]): the model gets
  // the projection + normalisation and the sparse classifier as children, spelled in its name; the sidecar
  // round-trips; the config cannot set them; the head flags need a head; families without heads, and
  // decoders, refuse them.
  const std::string bert = R"({"model_type": "bert", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
    "num_hidden_layers": 1, "torch_dtype": "bfloat16", "max_position_embeddings": 32, "vocab_size": 100})";
  UserChoices c;
  c.file = "t/fastkernels.json";
  c.multi_vector = 16;
  c.sparse = true;
  c.head_bias = true;
  c.drop_special_tokens = true;
  Generation g;
  ASSERT_EQ(run_with(bert, c, &g), "");
  std::set<std::string> names;
  for (const auto& [name, t] : g.tasks.tasks) names.insert(name);
  for (const char* want : {"replicated_linear_k64_n16_bias_bf16", "l2_normalize_h16_bf16", "token_classifier_n1_h64_relu_bias_bf16",
                           "bert_model_l1_v100_tt2_pos32_h64_i128_hq2_d32_gelu_eps1e-12_bias_mv16_sparse_hbias_dropse_bf16"})
    EXPECT_TRUE(names.count(want)) << want;
  Diagnostics diag;
  EXPECT_EQ(user_choices_text(parse_user_choices("f.json", user_choices_text(c), diag)), user_choices_text(c));
  EXPECT_EQ(diag.text(), "");
  EXPECT_EQ(user_choices_text(c), "{\n  \"drop_special_tokens\": true,\n  \"head_bias\": true,\n  \"multi_vector\": 16,\n  \"sparse\": true\n}\n");
  UserChoices colbert;  // ColBERT: a bias-free projection, every token kept
  colbert.file = "t/fastkernels.json";
  colbert.multi_vector = 8;
  Generation g2;
  ASSERT_EQ(run_with(bert, colbert, &g2), "");
  EXPECT_TRUE(g2.tasks.tasks.count("replicated_linear_k64_n8_nobias_bf16"));
  EXPECT_TRUE(g2.tasks.tasks.count("bert_model_l1_v100_tt2_pos32_h64_i128_hq2_d32_gelu_eps1e-12_bias_mv8_bf16"));
  for (const auto& [name, t] : g2.tasks.tasks) EXPECT_NE(t.kind, "token_classifier") << name;
  std::string set_in_config = bert;
  set_in_config.insert(1, R"("multi_vector_dim": 8, )");
  EXPECT_NE(run_with(set_in_config, {}).find("multi_vector_dim is a choice recorded beside the config, not a config key"), std::string::npos)
      << run_with(set_in_config, {});
  Diagnostics d2;
  parse_user_choices("f.json", R"({"head_bias": true, "multi_vector": 0})", d2);
  EXPECT_NE(d2.text().find("$.multi_vector: expected the width of the token vectors (1 to 65536), got 0"), std::string::npos) << d2.text();
  EXPECT_NE(d2.text().find("$.head_bias: head_bias applies to the token heads; add multi_vector and/or sparse"), std::string::npos)
      << d2.text();
  EXPECT_EQ(run_with(std::string("{\"model_type\": \"llama\", ") + kBase + "}", c),
            "t/fastkernels.json: $.multi_vector: family llama has no per-token heads to choose (remove multi_vector, sparse, head_bias, "
            "drop_special_tokens)\n");
  std::string decoder = bert;
  decoder.insert(1, R"("is_decoder": true, )");
  EXPECT_NE(run_with(decoder, c).find("no token heads on a decoder"), std::string::npos) << run_with(decoder, c);
}

TEST(UserConfigs, ChoicesFileIsStrict) {
  Diagnostics diag;
  UserChoices c = parse_user_choices("f.json", R"({"dequantize": "yes", "allow_unknown": ["a", 3, "a"], "force": true, "dtype": "float32"})", diag);
  EXPECT_EQ(diag.text(),
            "f.json: $.allow_unknown[1]: expected a config key, got 3\n"
            "f.json: $.dequantize: expected boolean, got \"yes\"\n"
            "f.json: $.dtype: expected \"bfloat16\" or \"float16\", got \"float32\"\n"
            "f.json: $.force: unknown key \"force\" (expected dequantize, allow_unknown, dtype, served_as, pooling, normalize, "
            "image_size, multi_vector, sparse, head_bias, drop_special_tokens, component, parallel)\n");
  EXPECT_EQ(c.allow_unknown, std::vector<std::string>{"a"});
  UserChoices w;
  w.dequantize = true;
  w.allow_unknown = {"k1", "k2"};
  EXPECT_EQ(user_choices_text(w), "{\n  \"allow_unknown\": [\n    \"k1\",\n    \"k2\"\n  ],\n  \"dequantize\": true\n}\n");
  w.dtype = "float16";
  EXPECT_EQ(user_choices_text(w),
            "{\n  \"allow_unknown\": [\n    \"k1\",\n    \"k2\"\n  ],\n  \"dequantize\": true,\n  \"dtype\": \"float16\"\n}\n");
  // The pooling choice: cls/mean/last, normalize only with it.
  Diagnostics d2;
  UserChoices p = parse_user_choices("f.json", R"({"pooling": "max", "normalize": 1})", d2);
  EXPECT_EQ(d2.text(),
            "f.json: $.normalize: expected boolean, got 1\n"
            "f.json: $.pooling: expected \"cls\", \"mean\" or \"last\", got \"max\"\n");
  Diagnostics d3;
  parse_user_choices("f.json", R"({"normalize": true})", d3);
  EXPECT_EQ(d3.text(), "f.json: $.normalize: normalize applies to a pooling choice; add pooling (\"cls\", \"mean\" or \"last\")\n");
  Diagnostics d4;
  p = parse_user_choices("f.json", R"({"pooling": "mean", "normalize": true})", d4);
  EXPECT_EQ(d4.text(), "");
  EXPECT_EQ(user_choices_text(p), "{\n  \"normalize\": true,\n  \"pooling\": \"mean\"\n}\n");
}

TEST(UserConfigs, PoolingChoiceOfEmbeddingModels) {
  // An encoder's pooled output: its BertPooler unless the user chose a pooling (vLLM's PoolerConfig);
  // the choice names the model task (_cls_norm) and the Pooler child; families without a pooled
  // output refuse it; the config itself cannot set it.
  const std::string enc = R"("model_type": "bert", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
    "num_hidden_layers": 1, "vocab_size": 100, "max_position_embeddings": 66, "torch_dtype": "bfloat16")";
  UserChoices c;
  c.file = "t/fastkernels.json";
  Generation g;
  EXPECT_EQ(run_with("{" + enc + "}", {}, &g), "");
  ASSERT_FALSE(g.resolved.empty());
  EXPECT_EQ(std::get<std::string>(g.resolved[0].values.at("pooling_type")), "pooler");
  c.pooling = "cls";
  c.normalize = true;
  Generation g2;
  EXPECT_EQ(run_with("{" + enc + "}", c, &g2), "");
  ASSERT_FALSE(g2.resolved.empty());
  EXPECT_EQ(std::get<std::string>(g2.resolved[0].values.at("pooling_type")), "cls");
  EXPECT_EQ(std::get<bool>(g2.resolved[0].values.at("pooling_normalize")), true);
  EXPECT_EQ(run_with(std::string("{\"model_type\": \"llama\", ") + kBase + "}", c),
            "t/fastkernels.json: $.pooling: family llama has no pooled output to choose (remove pooling)\n");
  EXPECT_NE(run_with("{" + enc + R"(, "pooling_type": "mean"})", {}).find(
                "$.pooling_type: pooling_type is a choice recorded beside the config, not a config key: use `add --pooling`"),
            std::string::npos);
}

// --- lower: forward-pass walk and stable op names ---------------------------------------------
TEST(Lower, OpNamesFollowTheForwardPass) {
  Diagnostics diag;
  std::string text = std::string(R"({"model_type": "qwen3", )") + kBase + "}";
  Generation g = run_pipeline(source_dir(), {ConfigFile{"t/t", "t/config.json", text}}, false, diag);
  ASSERT_TRUE(diag.ok()) << diag.text();
  std::vector<std::string> names;
  for (const auto& op : g.lowered.at(0).ops) names.push_back(op.name + ":" + op.kind->kind);
  std::vector<std::string> layer0 = {"embed_tokens:vocab_parallel_embedding",
                                     "blk.0.input_layernorm:rms_norm",
                                     "blk.0.qkv_proj:qkv_parallel_linear",
                                     "blk.0.qk_norm:qk_norm",
                                     "blk.0.rotary_emb:rotary_embedding",
                                     "blk.0.kv_cache_write:store_kvcache",
                                     "blk.0.attn_prefill:flash_attn_prefill",
                                     "blk.0.attn_decode:flash_attn_decode",
                                     "blk.0.o_proj:row_parallel_linear",
                                     "blk.0.post_attention_layernorm:fused_add_rms_norm",
                                     "blk.0.gate_up_proj:merged_column_parallel_linear",
                                     "blk.0.act_fn:silu_and_mul",
                                     "blk.0.down_proj:row_parallel_linear",
                                     "blk.1.input_layernorm:fused_add_rms_norm"};
  ASSERT_EQ(names.size(), 1u + 2 * 12 + 2);  // 12 ops per qwen3 layer
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + layer0.size()), layer0);
  EXPECT_EQ(names[names.size() - 2], "norm:fused_add_rms_norm");
  EXPECT_EQ(names.back(), "lm_head:parallel_lm_head");
}

// --- task naming (Note [Task naming]) ---------------------------------------------------------
std::string name_of(const std::string& kind, Params p, const std::string& dtype = "bfloat16") {
  return find_kind(kind)->name(p, dtype_suffix(dtype));
}

TEST(TaskNaming, EveryKindSpellsItsConstants) {
  EXPECT_EQ(name_of("rms_norm", {{"hidden_size", int64_t{4096}}, {"eps", 1e-05}}), "rms_norm_h4096_eps1e-05_bf16");
  EXPECT_EQ(name_of("fused_add_rms_norm", {{"hidden_size", int64_t{3584}}, {"eps", 1e-06}}, "float16"),
            "fused_add_rms_norm_h3584_eps1e-06_f16");
  EXPECT_EQ(name_of("qk_norm", {{"num_heads", int64_t{32}}, {"num_kv_heads", int64_t{8}}, {"head_dim", int64_t{128}}, {"eps", 1e-06}}),
            "qk_norm_hq32_hkv8_d128_eps1e-06_bf16");
  Params rope = {{"head_size", int64_t{128}}, {"rotary_dim", int64_t{128}}, {"max_position", int64_t{131072}},
                 {"base", 500000.0}, {"is_neox_style", true}, {"num_heads", int64_t{32}}, {"num_kv_heads", int64_t{8}},
                 {"scaling_type", std::string("llama3")}, {"scaling_factor", 8.0}, {"low_freq_factor", 1.0},
                 {"high_freq_factor", 4.0}, {"original_max_position", int64_t{8192}}, {"beta_fast", 0.0}, {"beta_slow", 0.0}};
  EXPECT_EQ(name_of("rotary_embedding", rope),
            "rotary_embedding_d128_rot128_pos131072_base500000_llama3_f8_lf1_hf4_omp8192_neox_hq32_hkv8_bf16");
  rope["scaling_type"] = std::string("linear");
  rope["scaling_factor"] = 2.5;
  rope["is_neox_style"] = false;
  EXPECT_EQ(name_of("rotary_embedding", rope),
            "rotary_embedding_d128_rot128_pos131072_base500000_linear_f2.5_gptj_hq32_hkv8_bf16");
  rope["scaling_type"] = std::string("yarn");
  rope["beta_fast"] = 32.0;
  rope["beta_slow"] = 1.0;
  EXPECT_EQ(name_of("rotary_embedding", rope),
            "rotary_embedding_d128_rot128_pos131072_base500000_yarn_f2.5_omp8192_bf32_bs1_gptj_hq32_hkv8_bf16");
  rope["scaling_type"] = std::string("none");
  rope["base"] = 1e16;
  EXPECT_EQ(name_of("rotary_embedding", rope), "rotary_embedding_d128_rot128_pos131072_base1e16_none_gptj_hq32_hkv8_bf16");
  // LongRoPE (Note [LongRoPE names]): the cos/sin scale, the original length, a digest of the lists.
  {
    Params lr = rope;
    lr["rotary_dim"] = int64_t{4};
    lr["scaling_type"] = std::string("longrope");
    lr["scaling_factor"] = 1.25;
    lr["original_max_position"] = int64_t{4096};
    lr["long_factor"] = std::string("1,2");
    lr["short_factor"] = std::string("1,1");
    const std::string n = name_of("rotary_embedding", lr);
    EXPECT_EQ(n.substr(0, 70), "rotary_embedding_d128_rot4_pos131072_base1e16_longrope_a1.25_omp4096_x");
    lr["long_factor"] = std::string("1,3");
    EXPECT_NE(name_of("rotary_embedding", lr), n);  // other lists, other name
  }
  // Multimodal rope (Note [mrope sections]): the sections after the style, "i" when interleaved; the
  // sections must cover rotary_dim / 2 frequencies.
  {
    Params m = {{"head_size", int64_t{128}}, {"rotary_dim", int64_t{128}}, {"max_position", int64_t{32768}},
                {"base", 1000000.0}, {"is_neox_style", true}, {"num_heads", int64_t{28}}, {"num_kv_heads", int64_t{4}},
                {"mrope_section", std::string("16,24,24")}, {"mrope_interleaved", false}};
    EXPECT_EQ(name_of("mrope", m), "mrope_d128_rot128_pos32768_base1000000_none_neox_mrope16x24x24_hq28_hkv4_bf16");
    m["mrope_section"] = std::string("24,20,20");
    m["mrope_interleaved"] = true;
    EXPECT_EQ(name_of("mrope", m), "mrope_d128_rot128_pos32768_base1000000_none_neox_mropei24x20x20_hq28_hkv4_bf16");
    m["mrope_section"] = std::string("24,20,24");
    EXPECT_THROW(name_of("mrope", m), GenError);  // sums to 68, not 64
    m["mrope_section"] = std::string("32,32");
    EXPECT_THROW(name_of("mrope", m), GenError);  // two sections
  }
  rope["scaling_type"] = std::string("deepseek_yarn");
  EXPECT_EQ(name_of("rotary_embedding", rope),
            "rotary_embedding_d128_rot128_pos131072_base1e16_deepseek_yarn_f2.5_omp8192_bf32_bs1_gptj_hq32_hkv8_bf16");
  EXPECT_EQ(name_of("grouped_topk", {{"num_experts", int64_t{256}}, {"top_k", int64_t{8}}, {"num_expert_group", int64_t{8}},
                                     {"topk_group", int64_t{4}}, {"scoring_func", std::string("sigmoid")},
                                     {"renormalize", true}, {"routed_scaling_factor", 2.5}, {"correction_bias", true}}),
            "grouped_topk_e256_top8_g8_tg4_sigmoid_renorm_rs2.5_bias_bf16");
  EXPECT_EQ(name_of("mla_prefill", {{"num_heads", int64_t{16}}, {"qk_head_dim", int64_t{192}}, {"v_head_dim", int64_t{128}},
                                    {"softmax_scale", 1.0 / std::sqrt(192.0)}, {"max_position", int64_t{4096}}}),
            "mla_prefill_hq16_dqk192_dv128_causal_bf16");
  EXPECT_EQ(name_of("mla_decode", {{"num_heads", int64_t{16}}, {"kv_lora_rank", int64_t{512}}, {"qk_rope_head_dim", int64_t{64}},
                                   {"softmax_scale", 0.125}, {"max_position", int64_t{4096}}}),
            "mla_decode_hq16_kv512_r64_scale0.125_bf16");
  EXPECT_EQ(name_of("concat_and_cache_mla", {{"kv_lora_rank", int64_t{512}}, {"qk_rope_head_dim", int64_t{64}}}),
            "concat_and_cache_mla_kv512_r64_bf16");
  EXPECT_EQ(name_of("silu_and_mul", {{"intermediate_size", int64_t{14336}}}, "float32"), "silu_and_mul_i14336_f32");
  EXPECT_EQ(name_of("vocab_parallel_embedding", {{"num_embeddings", int64_t{128256}}, {"embedding_dim", int64_t{4096}}}),
            "vocab_parallel_embedding_v128256_h4096_bf16");
  EXPECT_EQ(name_of("qkv_parallel_linear", {{"hidden_size", int64_t{3584}}, {"head_size", int64_t{128}}, {"num_heads", int64_t{28}},
                                            {"num_kv_heads", int64_t{4}}, {"bias", true}}),
            "qkv_parallel_linear_h3584_d128_hq28_hkv4_bias_bf16");
  EXPECT_EQ(name_of("merged_column_parallel_linear",
                    {{"input_size", int64_t{4096}}, {"n0", int64_t{14336}}, {"n1", int64_t{14336}}, {"bias", false}}),
            "merged_column_parallel_linear_k4096_n14336_14336_nobias_bf16");
  EXPECT_EQ(name_of("row_parallel_linear", {{"input_size", int64_t{4096}}, {"output_size", int64_t{4096}}, {"bias", false}}),
            "row_parallel_linear_k4096_n4096_nobias_bf16");
  EXPECT_EQ(name_of("parallel_lm_head", {{"num_embeddings", int64_t{32768}}, {"embedding_dim", int64_t{4096}}}),
            "parallel_lm_head_v32768_h4096_bf16");
  Params attn = {{"num_heads", int64_t{32}}, {"num_kv_heads", int64_t{8}}, {"head_dim", int64_t{128}},
                 {"softmax_scale", 0.08838834764831845}, {"sliding_window", int64_t{0}}, {"softcap", 0.0},
                 {"sinks", false}, {"max_position", int64_t{32768}}};
  EXPECT_EQ(name_of("flash_attn_prefill", attn), "flash_attn_prefill_hq32_hkv8_d128_causal_bf16");
  EXPECT_EQ(name_of("flash_attn_decode", attn), "flash_attn_decode_hq32_hkv8_d128_bf16");
  attn["sliding_window"] = int64_t{2047};  // a window is spelled; none (0) is not
  EXPECT_EQ(name_of("flash_attn_prefill", attn), "flash_attn_prefill_hq32_hkv8_d128_causal_sw2047_bf16");
  EXPECT_EQ(name_of("flash_attn_decode", attn), "flash_attn_decode_hq32_hkv8_d128_sw2047_bf16");
  // A scale other than head_dim^-0.5 (Gemma's query_pre_attn_scalar) and soft-capping are spelled.
  attn["softmax_scale"] = 0.125;
  attn["softcap"] = 50.0;
  EXPECT_EQ(name_of("flash_attn_prefill", attn), "flash_attn_prefill_hq32_hkv8_d128_causal_sw2047_scale0.125_cap50_bf16");
  attn["softcap"] = -1.0;
  EXPECT_THROW(name_of("flash_attn_decode", attn), GenError);
  // The elementwise kinds move 16-byte vectors: a row width that is no multiple of them is refused.
  EXPECT_EQ(find_kind("activation")->served({{"activation", std::string("gelu")}, {"hidden_size", int64_t{3072}}}, "bfloat16"), "");
  EXPECT_EQ(find_kind("activation")->served({{"activation", std::string("gelu")}, {"hidden_size", int64_t{1001}}}, "float32"),
            "hidden_size 1001: the elementwise kernels serve rows of a multiple of 4 elements (16 bytes) in float32");
  // The gated kinds serve any width: rows that are no whole 16-byte vectors take the narrow kernel
  // (Qwen2.5-VL's vision MLP: 3420).
  EXPECT_FALSE(static_cast<bool>(find_kind("gelu_and_mul")->served));
  EXPECT_FALSE(static_cast<bool>(find_kind("silu_and_mul")->served));
  EXPECT_EQ(name_of("silu_and_mul", {{"intermediate_size", int64_t{3420}}}), "silu_and_mul_i3420_bf16");
  // Prefill cases: the registry entries that fit the context, or, for an encoder's short context,
  // whole-context batches of 1, 8 and 32.
  // Bidirectional attention at a short context: batches of 1 and 32 whole contexts of exactly that many
  // tokens (the SDPA peers' dense shapes) and one ragged batch of 8.
  auto case_names = [](int64_t max_position, bool causal = true) {
    std::vector<std::string> out;
    Params q = {{"max_position", max_position}, {"causal", causal}};
    for (const ShapeCase& c : find_kind("flash_attn_prefill")->cases(q)) out.push_back(c.name);
    return out;
  };
  EXPECT_EQ(case_names(4096), (std::vector<std::string>{"b1_s1024", "b1_s4096", "b4_s2048", "b16_s1024"}));
  EXPECT_EQ(case_names(512), (std::vector<std::string>{"b1_s512", "b8_s512", "b32_s512"}));
  EXPECT_EQ(case_names(197, false), (std::vector<std::string>{"b1_s197", "b32_s197", "b8_s197_ragged"}));
  for (const ShapeCase& c : find_kind("flash_attn_prefill")->cases({{"max_position", int64_t{197}}, {"causal", false}}))
    if (c.name != "b8_s197_ragged")
      EXPECT_NE(std::find(c.dims.begin(), c.dims.end(), std::pair<std::string, int64_t>{"uniform", 1}), c.dims.end()) << c.name;
  // Bidirectional prefill (encoders): spelled bidir; it serves no window, soft-capping or sinks.
  Params bidir = {{"num_heads", int64_t{12}}, {"num_kv_heads", int64_t{12}}, {"head_dim", int64_t{64}},
                  {"softmax_scale", 0.125}, {"sliding_window", int64_t{0}}, {"softcap", 0.0},
                  {"sinks", false}, {"max_position", int64_t{512}}, {"causal", false}};
  // 2-D vision rope: DINOv3's (normalised patch centres, a class token not rotated) and Qwen2-VL's
  // (integer grid positions in 2 x 2 merge windows); whole windows and quarters of the head dim only.
  Params vrope = {{"head_dim", int64_t{64}}, {"num_heads", int64_t{3}}, {"rope_theta", 100.0}, {"grid_h", int64_t{14}},
                  {"grid_w", int64_t{14}}, {"prefix_tokens", int64_t{1}}, {"merge_size", int64_t{1}}, {"centered", true},
                  {"max_position", int64_t{197}}};
  EXPECT_EQ(name_of("vision_rope_2d", vrope), "vision_rope_2d_hq3_d64_g14x14_p1_m1_centered_theta100_bf16");
  EXPECT_EQ(find_kind("vision_rope_2d")->production(vrope), "transformers DINOv3ViTRopePositionEmbedding + apply_rotary_pos_emb");
  std::vector<std::string> vcases;
  for (const ShapeCase& c : find_kind("vision_rope_2d")->cases(vrope)) vcases.push_back(c.name);
  EXPECT_EQ(vcases, (std::vector<std::string>{"b1_s197", "b8_s197", "b32_s197"}));
  Params qwen = vrope;
  qwen["head_dim"] = int64_t{80};
  qwen["num_heads"] = int64_t{16};
  qwen["rope_theta"] = 10000.0;
  qwen["grid_h"] = qwen["grid_w"] = int64_t{16};
  qwen["prefix_tokens"] = int64_t{0};
  qwen["merge_size"] = int64_t{2};
  qwen["centered"] = false;
  qwen["max_position"] = int64_t{256};
  EXPECT_EQ(name_of("vision_rope_2d", qwen), "vision_rope_2d_hq16_d80_g16x16_p0_m2_grid_theta10000_bf16");
  Params bad = qwen;
  bad["grid_w"] = int64_t{15};  // not whole 2 x 2 windows
  EXPECT_THROW(name_of("vision_rope_2d", bad), GenError);
  bad = qwen;
  bad["head_dim"] = int64_t{66};  // no four quarters
  EXPECT_THROW(name_of("vision_rope_2d", bad), GenError);
  bad = qwen;
  bad["max_position"] = int64_t{257};  // tokens per image are prefix + grid
  EXPECT_THROW(name_of("vision_rope_2d", bad), GenError);
  // Squared ReLU (HF "relu2": Nemotron, Persimmon, Primer) is one more value of the activation kind.
  Params relu2 = {{"activation", std::string("relu2")}, {"hidden_size", int64_t{3072}}};
  EXPECT_EQ(name_of("activation", relu2), "activation_relu2_h3072_bf16");
  EXPECT_EQ(find_kind("activation")->production(relu2),
            "vllm.model_executor.layers.activation.get_act_fn: transformers ReLUSquaredActivation");
  // Cross-attention: decode steps over a cached encoder output, first steps that write the cache.
  Params xattn = {{"num_heads", int64_t{20}}, {"num_kv_heads", int64_t{20}}, {"head_dim", int64_t{64}},
                  {"softmax_scale", 0.125}, {"max_position", int64_t{448}}, {"max_encoder_len", int64_t{1500}}};
  EXPECT_EQ(name_of("cross_attention", xattn), "cross_attention_hq20_hkv20_d64_bf16");
  EXPECT_EQ(find_kind("cross_attention")->production(xattn), "vllm.attention.layers.cross_attention.CrossAttention");
  std::vector<std::string> xcases;
  for (const ShapeCase& c : find_kind("cross_attention")->cases(xattn)) xcases.push_back(c.name);
  EXPECT_EQ(xcases, (std::vector<std::string>{"b1_q1_kv1500", "b8_q1_kv1500", "b32_q1_kv1500", "b64_q1_kv1500",
                                              "b32_q1_kv1500_ragged", "b1_q128_kv1500_write", "b32_q128_kv1500_write",
                                              "b8_q128_kv1500_write_ragged"}));
  EXPECT_EQ(find_kind("cross_attention")->served(xattn, "bfloat16"), "");
  xattn["softmax_scale"] = 1.0;  // T5-style unscaled scores are spelled
  EXPECT_EQ(name_of("cross_attention", xattn), "cross_attention_hq20_hkv20_d64_scale1_bf16");
  xattn["num_kv_heads"] = int64_t{3};
  EXPECT_NE(find_kind("cross_attention")->served(xattn, "bfloat16"), "");  // 20 query heads over 3 kv heads
  xattn["num_kv_heads"] = int64_t{20};
  xattn["max_encoder_len"] = int64_t{0};
  EXPECT_EQ(find_kind("cross_attention")->served(xattn, "bfloat16"), "max_encoder_len must be >= 1, got 0");
  EXPECT_EQ(name_of("flash_attn_prefill", bidir), "flash_attn_prefill_hq12_hkv12_d64_bidir_bf16");
  EXPECT_EQ(find_kind("flash_attn_prefill")->served(bidir, "bfloat16"), "");
  bidir["sliding_window"] = int64_t{128};
  EXPECT_EQ(find_kind("flash_attn_prefill")->served(bidir, "bfloat16"),
            "bidirectional (causal false) prefill serves no sliding window, soft-capping or sinks");
  // Attention sinks (gpt-oss) are spelled last.
  attn["softcap"] = 0.0;
  attn["softmax_scale"] = 0.08838834764831845;
  attn["sinks"] = true;
  EXPECT_EQ(name_of("flash_attn_decode", attn), "flash_attn_decode_hq32_hkv8_d128_sw2047_sinks_bf16");
  EXPECT_EQ(name_of("swigluoai_and_mul", {{"intermediate_size", int64_t{2880}}, {"alpha", 1.702}, {"limit", 7.0}}),
            "swigluoai_and_mul_i2880_a1.702_lim7_bf16");
  EXPECT_THROW(name_of("swigluoai_and_mul", {{"intermediate_size", int64_t{2880}}, {"alpha", 1.702}, {"limit", 0.0}}), GenError);
  Params gemm = {{"num_experts", int64_t{32}}, {"top_k", int64_t{4}}, {"n", int64_t{5760}}, {"k", int64_t{2880}},
                 {"per_slot_rows", false}, {"mul_routed_weight", false}, {"bias", true}};
  EXPECT_EQ(name_of("moe_grouped_gemm", gemm), "moe_grouped_gemm_e32_top4_n5760_k2880_bias_bf16");
  EXPECT_EQ(name_of("gemma_qk_norm", {{"num_heads", int64_t{4}}, {"num_kv_heads", int64_t{1}}, {"head_dim", int64_t{256}}, {"eps", 1e-06}}),
            "gemma_qk_norm_hq4_hkv1_d256_eps1e-06_bf16");
  EXPECT_EQ(name_of("scaled_word_embedding",
                    {{"num_embeddings", int64_t{262144}}, {"embedding_dim", int64_t{1152}}, {"embed_scale", std::sqrt(1152.0)}}),
            "scaled_word_embedding_v262144_h1152_scaled_bf16");
  EXPECT_EQ(name_of("scaled_word_embedding",
                    {{"num_embeddings", int64_t{262144}}, {"embedding_dim", int64_t{1152}}, {"embed_scale", 2.0}}),
            "scaled_word_embedding_v262144_h1152_s2_bf16");
  EXPECT_EQ(name_of("store_kvcache", {{"num_kv_heads", int64_t{8}}, {"head_dim", int64_t{128}}}), "store_kvcache_hkv8_d128_bf16");
}

TEST(TaskNaming, CompositeKindsSpellTheirConstants) {
  Params p = {{"hidden_size", int64_t{4096}}, {"num_heads", int64_t{32}}, {"num_kv_heads", int64_t{8}},
              {"head_dim", int64_t{128}}, {"qkv_bias", false}, {"qk_norm", false}, {"rms_norm_eps", 1e-05},
              {"rotary_dim", int64_t{128}}, {"max_position", int64_t{131072}}, {"rope_theta", 500000.0},
              {"is_neox_style", true}, {"scaling_type", std::string("llama3")}, {"scaling_factor", 8.0},
              {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}, {"original_max_position", int64_t{8192}},
              {"beta_fast", 0.0}, {"beta_slow", 0.0}, {"o_proj_bias", false}, {"intermediate_size", int64_t{14336}},
              {"mlp_bias", false}, {"num_hidden_layers", int64_t{32}}, {"vocab_size", int64_t{128256}},
              {"tie_word_embeddings", false}, {"sliding_window", int64_t{0}},
              {"softmax_scale", 0.08838834764831845}, {"softcap", 0.0}, {"sinks", false}};
  const std::string rope = "rot128_pos131072_base500000_llama3_f8_lf1_hf4_omp8192_neox";
  EXPECT_EQ(name_of("qkv_rope_cache", p), "qkv_rope_cache_h4096_hq32_hkv8_d128_" + rope + "_nobias_bf16");
  EXPECT_EQ(name_of("attention_o_proj", p), "attention_o_proj_hq32_hkv8_d128_h4096_nobias_bf16");
  EXPECT_EQ(name_of("gate_up_silu", p), "gate_up_silu_h4096_i14336_nobias_bf16");
  EXPECT_EQ(name_of("llama_mlp", p), "llama_mlp_h4096_i14336_nobias_bf16");
  EXPECT_EQ(name_of("llama_attention", p), "llama_attention_h4096_hq32_hkv8_d128_" + rope + "_qkvnobias_onobias_bf16");
  EXPECT_EQ(name_of("llama_decoder_layer", p),
            "llama_decoder_layer_h4096_i14336_hq32_hkv8_d128_eps1e-05_" + rope + "_qkvnobias_onobias_mlpnobias_bf16");
  EXPECT_EQ(name_of("llama_for_causal_lm", p),
            "llama_for_causal_lm_l32_v128256_untied_h4096_i14336_hq32_hkv8_d128_eps1e-05_" + rope +
                "_qkvnobias_onobias_mlpnobias_bf16");
  // The q/k norm adds its epsilon where nothing else spells it; tied embeddings and biases are words.
  p["qk_norm"] = true;
  p["qkv_bias"] = true;
  p["tie_word_embeddings"] = true;
  p["scaling_type"] = std::string("none");
  EXPECT_EQ(name_of("qkv_rope_cache", p),
            "qkv_rope_cache_h4096_hq32_hkv8_d128_rot128_pos131072_base500000_none_neox_bias_qknorm_eps1e-05_bf16");
  EXPECT_EQ(name_of("llama_attention", p),
            "llama_attention_h4096_hq32_hkv8_d128_rot128_pos131072_base500000_none_neox_qkvbias_onobias_qknorm_eps1e-05_bf16");
  EXPECT_EQ(name_of("llama_for_causal_lm", p),
            "llama_for_causal_lm_l32_v128256_tied_h4096_i14336_hq32_hkv8_d128_eps1e-05_rot128_pos131072_base500000_none_neox_"
            "qkvbias_onobias_mlpnobias_qknorm_bf16");
  // A sliding window is spelled after the heads by every kind whose attention it changes (not qkv_rope_cache).
  p["sliding_window"] = int64_t{4096};
  EXPECT_EQ(name_of("attention_o_proj", p), "attention_o_proj_hq32_hkv8_d128_sw4096_h4096_nobias_bf16");
  EXPECT_EQ(name_of("qkv_rope_cache", p),
            "qkv_rope_cache_h4096_hq32_hkv8_d128_rot128_pos131072_base500000_none_neox_bias_qknorm_eps1e-05_bf16");
  EXPECT_EQ(name_of("llama_decoder_layer", p),
            "llama_decoder_layer_h4096_i14336_hq32_hkv8_d128_sw4096_eps1e-05_rot128_pos131072_base500000_none_neox_"
            "qkvbias_onobias_mlpnobias_qknorm_bf16");
  // Gemma: soft-capping (and a non-standard scale) after the window; the model spells its local layers.
  p["softcap"] = 50.0;
  EXPECT_EQ(name_of("gemma_decoder_layer", p),
            "gemma_decoder_layer_h4096_i14336_hq32_hkv8_d128_sw4096_cap50_eps1e-05_rot128_pos131072_base500000_none_neox_"
            "qkvbias_onobias_mlpnobias_qknorm_bf16");
  p["sliding_window"] = int64_t{0};
  p["local_sliding_window"] = int64_t{4096};
  p["local_rope_theta"] = 10000.0;
  p["full_every"] = int64_t{2};
  p["final_softcap"] = 30.0;
  EXPECT_EQ(name_of("gemma_for_causal_lm", p),
            "gemma_for_causal_lm_l32_v128256_tied_h4096_i14336_hq32_hkv8_d128_cap50_eps1e-05_rot128_pos131072_base500000_"
            "none_neox_qkvbias_onobias_mlpnobias_qknorm_local_sw4096_base10000_every2_fcap30_bf16");
  p["full_every"] = int64_t{0};
  EXPECT_THROW(name_of("gemma_for_causal_lm", p), GenError);
}

TEST(TaskKinds, ClassNamesAndSlots) {
  std::map<std::string, std::string> l1 = {
      {"rms_norm", "RMSNorm"}, {"fused_add_rms_norm", "RMSNorm"}, {"qk_norm", "QKNorm"}, {"gemma_qk_norm", "GemmaQKNorm"},
      {"olmo2_qk_norm", "Olmo2QKNorm"}, {"activation", "Activation"}, {"gelu_and_mul", "GeluAndMul"},
      {"scaled_word_embedding", "ScaledWordEmbedding"},
      {"gemma_rms_norm", "GemmaRMSNorm"}, {"gemma_fused_add_rms_norm", "GemmaRMSNorm"},
      {"rotary_embedding", "RotaryEmbedding"}, {"silu_and_mul", "SiluAndMul"}, {"gelu_tanh_and_mul", "GeluAndMul"},
      {"vocab_parallel_embedding", "VocabParallelEmbedding"}, {"qkv_parallel_linear", "QKVParallelLinear"},
      {"merged_column_parallel_linear", "MergedColumnParallelLinear"}, {"row_parallel_linear", "RowParallelLinear"},
      {"parallel_lm_head", "ParallelLMHead"}, {"flash_attn_prefill", "FlashAttnPrefill"},
      {"flash_attn_decode", "FlashAttnDecode"}, {"store_kvcache", "StoreKVCache"},
      {"replicated_linear", "ReplicatedLinear"}, {"topk_softmax", "TopKSoftmax"},
      {"moe_align_block_size", "MoeAlignBlockSize"}, {"moe_grouped_gemm", "MoeGroupedGemm"}, {"moe_sum", "MoeSum"},
      {"swigluoai_and_mul", "SwigluOAIAndMul"}, {"column_parallel_linear", "ColumnParallelLinear"},
      {"grouped_topk", "GroupedTopK"}, {"concat_and_cache_mla", "ConcatAndCacheMLA"}, {"mla_prefill", "MLAPrefill"},
      {"mla_decode", "MLADecode"}, {"layer_norm", "LayerNorm"}, {"fused_add_layer_norm", "LayerNorm"},
      {"embedding_pooler", "Pooler"}, {"l2_normalize", "L2Normalize"}, {"token_classifier", "TokenClassifier"}, {"layer_scale", "LayerScale"}, {"patch_embedding", "PatchEmbedding"},
      {"patch_embedding_3d", "PatchEmbedding3D"}, {"vision_rope_2d", "VisionRope2D"}, {"cross_attention", "CrossAttention"}, {"interpolate", "Interpolate"},
      {"mrope", "MRotaryEmbedding"}, {"all_reduce", "AllReduce"}, {"all_gather", "AllGather"},
      {"reduce_scatter", "ReduceScatter"}, {"all_gather_rows", "AllGatherRows"}, {"ep_all_to_all", "EpAllToAll"}};
  std::vector<std::string> names;
  for (const auto& [kind, cls] : l1) {
    names.push_back(kind);
    EXPECT_EQ(find_kind(kind)->class_name, cls) << kind;
    EXPECT_EQ(find_kind(kind)->level, 1) << kind;
    EXPECT_TRUE(find_kind(kind)->slots.empty()) << kind;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(kind_names(false), names);
  std::set<std::string> classes;
  for (const auto& k : kind_names(false)) classes.insert(find_kind(k)->class_name);
  for (const auto& k : kind_names(true)) classes.insert(find_kind(k)->class_name);
  std::map<std::string, std::vector<std::string>> slots;
  for (const auto& k : kind_names(true)) {
    EXPECT_GT(find_kind(k)->level, 1) << k;
    for (const auto& s : find_kind(k)->slots) {
      slots[k].push_back(s.name + (s.fallback.empty() ? "" : "?"));
      // "A|B": each alternative is a real class.
      for (size_t start = 0, bar = 0; bar != std::string::npos; start = bar + 1) {
        bar = s.class_name.find('|', start);
        const std::string cls = s.class_name.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
        EXPECT_TRUE(classes.count(cls)) << k << "." << s.name << ": " << cls;
        EXPECT_TRUE(slot_accepts(s, cls)) << k << "." << s.name << ": " << cls;
      }
    }
  }
  EXPECT_EQ(slots, (std::map<std::string, std::vector<std::string>>{
      {"all_reduce_add_rms_norm", {"norm"}},
      {"matmul_reduce_scatter", {"linear"}},
      {"all_gather_matmul", {"linear"}},
      {"bert_attention", {"qkv_proj", "attn", "dense", "layernorm"}},
      {"bert_mlp", {"intermediate_dense", "act_fn", "output_dense", "layernorm"}},
      {"bert_cross_attention", {"q_proj", "kv_proj", "attn", "dense", "layernorm"}},
      {"bert_layer", {"attention", "crossattention?", "mlp"}},
      {"vit_attention", {"qkv_proj", "attn", "dense"}},
      {"vit_mlp", {"intermediate_dense", "act_fn", "output_dense"}},
      {"vit_layer", {"layernorm_before", "attention", "layernorm_after", "mlp"}},
      {"vit_model", {"patch_embeddings", "pos_interp?", "layers", "layernorm", "pooler_dense", "pooler_act"}},
      {"dinov3_attention", {"qkv_proj", "rotary_emb", "attn", "o_proj"}},
      {"dinov3_mlp", {"up_proj", "act_fn", "down_proj"}},
      {"dinov3_layer", {"norm1", "attention", "layer_scale1", "norm2", "mlp", "layer_scale2"}},
      {"dinov3_model", {"patch_embeddings", "layers", "norm"}},
      {"siglip_map_head", {"q_proj", "kv_proj", "attn", "out_proj", "layernorm", "mlp"}},
      {"siglip_vision_model", {"patch_embeddings", "layers", "post_layernorm", "head"}},
      {"siglip2_vision_model", {"patch_embedding", "layers", "post_layernorm", "head"}},
      {"qwen2_vl_vision_attention", {"qkv", "rotary_emb", "attn", "proj"}},
      {"qwen2_vl_vision_mlp", {"fc1", "act", "fc2"}},
      {"qwen2_vl_vision_block", {"norm1", "attn", "norm2", "mlp"}},
      {"qwen2_vl_patch_merger", {"ln_q", "fc1", "act", "fc2"}},
      {"qwen2_vl_vision_model", {"patch_embed", "blocks", "merger"}},
      {"qwen2_5_vl_vision_block", {"norm1", "attn", "norm2", "mlp"}},
      {"qwen2_5_vl_patch_merger", {"ln_q", "fc1", "act", "fc2"}},
      {"qwen2_5_vl_vision_model", {"patch_embed", "blocks", "merger"}},
      {"qwen3_vl_vision_mlp", {"fc1", "act", "fc2"}},
      {"qwen3_vl_vision_block", {"norm1", "attn", "norm2", "mlp"}},
      {"qwen3_vl_patch_merger", {"norm", "fc1", "act", "fc2"}},
      {"qwen3_vl_vision_model", {"patch_embed", "blocks", "merger", "deepstack_merger?"}},
      {"bert_model", {"word_embeddings", "position_embeddings", "token_type_embeddings?", "embeddings_layernorm", "layers",
                      "pooler_dense?", "pooler_act?", "pooler?", "colbert_linear?", "colbert_norm?", "sparse_linear?"}},
      {"deepseek_decoder_layer", {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}},
      {"deepseek_for_causal_lm", {"embed_tokens", "dense_layers", "moe_layers", "norm", "lm_head"}},
      {"deepseek_mla_attention", {"fused_qkv_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_layernorm", "kv_b_proj", "rotary_emb",
                                  "kv_cache_write", "attn_prefill", "attn_decode", "o_proj"}},
      {"deepseek_moe", {"gate", "router", "experts", "shared_experts"}},
                       {"attention_o_proj", {"attn_prefill", "attn_decode", "o_proj"}},
                       {"fused_experts", {"moe_align", "w13", "act_fn", "w2", "moe_sum"}},
                       {"gate_up_silu", {"gate_up_proj", "act_fn"}},
                       {"gemma_attention", {"qkv_proj", "qk_norm?", "rotary_emb", "kv_cache_write", "attn_prefill", "attn_decode", "o_proj"}},
                       {"gemma_decoder_layer", {"input_layernorm", "self_attn", "post_attention_layernorm", "pre_feedforward_layernorm",
                                                "mlp", "post_feedforward_layernorm"}},
                       {"gemma_for_causal_lm", {"embed_tokens", "sliding_layers", "full_layers", "norm", "lm_head"}},
                       {"gemma_mlp", {"gate_up_proj", "act_fn", "down_proj"}},
                       {"gpt_oss_for_causal_lm", {"embed_tokens", "sliding_layers", "full_layers", "norm", "lm_head"}},
                       {"llama_attention", {"qkv_proj", "qk_norm?", "rotary_emb", "kv_cache_write", "attn_prefill", "attn_decode", "o_proj"}},
                       {"llama_decoder_layer", {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}},
                       {"llama_for_causal_lm", {"embed_tokens", "layers", "norm", "lm_head"}},
                       {"llama_mlp", {"gate_up_proj", "act_fn", "down_proj"}},
                       {"moe_decoder_layer", {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}},
                       {"moe_for_causal_lm", {"embed_tokens", "layers", "norm", "lm_head"}},
                       {"olmo2_attention", {"qkv_proj", "qk_norm", "rotary_emb", "kv_cache_write", "attn_prefill", "attn_decode", "o_proj"}},
      {"olmo2_decoder_layer", {"self_attn", "post_attention_layernorm", "mlp", "post_feedforward_layernorm"}},
      {"olmo2_for_causal_lm", {"embed_tokens", "layers", "norm", "lm_head"}},
      {"qkv_rope_cache", {"qkv_proj", "qk_norm?", "rotary_emb", "kv_cache_write"}},
                       {"sparse_moe_block", {"gate", "router", "experts"}}}));
  EXPECT_EQ(find_kind("qkv_rope_cache")->slots[1].fallback, "fk::tasks::NoQKNorm");
  EXPECT_FALSE(slot_accepts(find_kind("qkv_rope_cache")->slots[1], "QKNormX"));
  EXPECT_FALSE(slot_accepts(find_kind("qkv_rope_cache")->slots[1], "QKNorm|GemmaQKNorm"));
  EXPECT_EQ(slot_classes_text(find_kind("qkv_rope_cache")->slots[1]), "QKNorm or GemmaQKNorm");
}

TEST(TaskNaming, LinearPlaceholders) {
  auto ph = find_kind("qkv_parallel_linear")
                ->placeholders({{"hidden_size", int64_t{4096}}, {"head_size", int64_t{128}}, {"num_heads", int64_t{32}},
                                {"num_kv_heads", int64_t{8}}, {"bias", false}});
  std::map<std::string, std::string> m(ph.begin(), ph.end());
  EXPECT_EQ(m["class_name"], "QKVParallelLinear");
  EXPECT_EQ(m["ctor_params"], "int64_t hidden_size, int64_t head_size, int64_t total_num_heads, int64_t total_num_kv_heads, bool bias");
  EXPECT_EQ(m["ctor_check"], "hidden_size == 4096 && head_size == 128 && total_num_heads == 32 && total_num_kv_heads == 8 && bias == false");
  EXPECT_EQ(m["in_features"], "4096");
  EXPECT_EQ(m["out_features"], "6144");
  EXPECT_EQ(m["has_bias"], "false");
  EXPECT_EQ(m["returns_bias"], "true");
  auto lm = find_kind("parallel_lm_head")->placeholders({{"num_embeddings", int64_t{1000}}, {"embedding_dim", int64_t{64}}});
  std::map<std::string, std::string> l(lm.begin(), lm.end());
  EXPECT_EQ(l["returns_bias"], "false");
  EXPECT_EQ(l["in_features"], "64");
  EXPECT_EQ(l["out_features"], "1000");
}

// --- case registries (Note [Case registry]) ----------------------------------------------------
std::vector<std::string> case_names(const std::string& kind, Params p) {
  std::vector<std::string> out;
  for (const auto& c : find_kind(kind)->cases(p)) out.push_back(c.name);
  return out;
}

TEST(CaseRegistry, TokensAttentionAndLmHead) {
  EXPECT_EQ(case_names("silu_and_mul", {{"intermediate_size", int64_t{8}}}),
            (std::vector<std::string>{"t1", "t8", "t32", "t64", "t256", "t1024", "t4096", "t16384"}));
  EXPECT_EQ(case_names("parallel_lm_head", {{"num_embeddings", int64_t{8}}, {"embedding_dim", int64_t{8}}}),
            (std::vector<std::string>{"t1", "t8", "t32", "t64", "t256"}));
  Params attn = {{"num_heads", int64_t{32}}, {"num_kv_heads", int64_t{8}}, {"head_dim", int64_t{128}},
                 {"softmax_scale", 0.088}, {"sliding_window", int64_t{0}}, {"max_position", int64_t{4096}}};
  EXPECT_EQ(case_names("flash_attn_prefill", attn), (std::vector<std::string>{"b1_s1024", "b1_s4096", "b4_s2048", "b16_s1024"}));
  EXPECT_EQ(case_names("flash_attn_decode", attn),
            (std::vector<std::string>{"b1_kv1024", "b1_kv4096", "b8_kv1024", "b8_kv4096", "b32_kv1024", "b32_kv4096",
                                      "b64_kv1024", "b64_kv4096"}));
  attn["max_position"] = int64_t{131072};
  EXPECT_EQ(case_names("flash_attn_decode", attn),
            (std::vector<std::string>{"b1_kv1024", "b1_kv8192", "b1_kv32768", "b1_kv131072", "b8_kv1024", "b8_kv8192",
                                      "b8_kv32768", "b8_kv131072", "b32_kv1024", "b32_kv8192", "b32_kv32768",
                                      "b64_kv1024", "b64_kv8192"}));
  EXPECT_EQ(case_initializer(find_kind("flash_attn_prefill")->cases(attn)[4]), "{\"b4_s2048\", \"prefill\", {{\"batch\", 4}, {\"seq_len\", 2048}}}");
}

TEST(CaseRegistry, CompositeStepsClipToMaxPosition) {
  Params p = {{"num_heads", int64_t{4}}, {"num_kv_heads", int64_t{2}}, {"head_dim", int64_t{16}}, {"hidden_size", int64_t{64}},
              {"o_proj_bias", false}, {"sliding_window", int64_t{0}}, {"max_position", int64_t{32768}}};
  EXPECT_EQ(case_names("attention_o_proj", p),
            (std::vector<std::string>{"b1_kv2048", "b8_kv2048", "b32_kv2048", "b64_kv2048", "b1_s2048", "b8_s2048"}));
  p["sliding_window"] = int64_t{2047};  // sequences of twice the window, so the window masks most of them
  EXPECT_EQ(case_names("attention_o_proj", p),
            (std::vector<std::string>{"b1_kv4094", "b8_kv4094", "b32_kv4094", "b64_kv4094", "b1_s4094", "b8_s2048"}));
  p["max_position"] = int64_t{1024};
  EXPECT_EQ(case_names("attention_o_proj", p),
            (std::vector<std::string>{"b1_kv1024", "b8_kv1024", "b32_kv1024", "b64_kv1024", "b1_s1024", "b8_s1024"}));
  EXPECT_EQ(case_names("gate_up_silu", {{"hidden_size", int64_t{8}}, {"intermediate_size", int64_t{8}}, {"mlp_bias", false}}),
            (std::vector<std::string>{"t1", "t8", "t32", "t64", "t256", "t1024", "t4096", "t16384"}));
}

}  // namespace
}  // namespace fk::gen
