// Composite kinds (Note [Composite kinds] in fk/gen/kinds.h): the descriptor's `modules` lowered
// for the four real configs (children resolved per config, Note [Last-layer roles], optional
// qk_norm, sharing across configs), their placeholders and manifest entries, the dedupe error for
// a same-named composite with other children, and every descriptor error of `modules`
// (tests/fixtures/bad_descriptors/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "fk/gen/format.h"
#include "fk/gen/pipeline.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;

const Generation& real() {
  static const Generation g = [] {
    Diagnostics diag;
    Generation out = run_pipeline(source_dir(), discover_configs(source_dir(), diag), /*emit_outputs=*/false, diag);
    EXPECT_TRUE(diag.ok()) << diag.text();
    return out;
  }();
  return g;
}

const ModelTasks& model(const std::string& id) {
  for (const auto& m : real().tasks.models)
    if (m.id == id) return m;
  throw std::runtime_error("no model " + id);
}

// Tests name tasks by their full spelling (Note [Long task names]: a name over 120 characters is
// cut); these helpers accept either and answer with spellings.
const Task& task_of(const std::string& name) {
  const auto& ts = real().tasks.tasks;
  if (auto it = ts.find(name); it != ts.end()) return it->second;
  for (const auto& [n, t] : ts)
    if (t.spelled == name) return t;
  throw std::out_of_range("no task named or spelled " + name);
}

std::string spelled_of(const std::string& name) { return name.empty() ? name : task_of(name).spelled; }
std::string name_of(const std::string& spelled) { return task_of(spelled).name; }

std::map<std::string, std::string> modules(const std::string& id) {
  std::map<std::string, std::string> out;
  for (const auto& [module, task] : model(id).modules) out[module] = spelled_of(task);
  return out;
}

std::map<std::string, std::string> children(const std::string& task) {
  std::map<std::string, std::string> out;
  for (const auto& [slot, child] : task_of(task).children) out[slot] = spelled_of(child);
  return out;
}

std::map<std::string, std::string> placeholders(const std::string& task) {
  const auto& p = task_of(task).placeholders;
  return {p.begin(), p.end()};
}

const char* kLlama = "meta-llama/Llama-3.1-8B-Instruct";
const char* kMistral = "mistralai/Mistral-7B-Instruct-v0.3";
const char* kQwen2 = "Qwen/Qwen2.5-7B-Instruct";
const char* kQwen3 = "Qwen/Qwen3-8B";

TEST(Composites, ModulesInDeclarationOrder) {
  std::vector<std::string> names;
  for (const auto& [name, _] : model(kLlama).modules) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.qkv_rope_cache", "self_attn.attention_o_proj", "mlp.gate_up_silu",
                                             "mlp", "self_attn", "layer", "model"}));
  for (const auto& [_, task] : model(kLlama).modules) EXPECT_TRUE(model(kLlama).tasks.count(task)) << task;
}

TEST(Composites, LlamaChildrenUseTheLastLayer) {
  auto m = modules(kLlama);
  const std::string attn =
      "llama_attention_h4096_hq32_hkv8_d128_rot128_pos131072_base500000_llama3_f8_lf1_hf4_omp8192_neox_qkvnobias_onobias_bf16";
  const std::string layer =
      "llama_decoder_layer_h4096_i14336_hq32_hkv8_d128_eps1e-05_rot128_pos131072_base500000_llama3_f8_lf1_hf4_omp8192_neox_"
      "qkvnobias_onobias_mlpnobias_bf16";
  EXPECT_EQ(m["self_attn"], attn);
  EXPECT_EQ(m["layer"], layer);
  EXPECT_EQ(m["model"],
            "llama_for_causal_lm_l32_v128256_untied_h4096_i14336_hq32_hkv8_d128_eps1e-05_rot128_pos131072_base500000_llama3_"
            "f8_lf1_hf4_omp8192_neox_qkvnobias_onobias_mlpnobias_bf16");
  EXPECT_EQ(m["self_attn.qkv_rope_cache"],
            "qkv_rope_cache_h4096_hq32_hkv8_d128_rot128_pos131072_base500000_llama3_f8_lf1_hf4_omp8192_neox_nobias_bf16");
  EXPECT_EQ(m["self_attn.attention_o_proj"], "attention_o_proj_hq32_hkv8_d128_h4096_nobias_bf16");
  EXPECT_EQ(children(attn), (std::map<std::string, std::string>{
                                {"qkv_proj", "qkv_parallel_linear_h4096_d128_hq32_hkv8_nobias_bf16"},
                                {"qk_norm", ""},
                                {"rotary_emb", "rotary_embedding_d128_rot128_pos131072_base500000_llama3_f8_lf1_hf4_omp8192_neox_hq32_hkv8_bf16"},
                                {"kv_cache_write", "store_kvcache_hkv8_d128_bf16"},
                                {"attn_prefill", "flash_attn_prefill_hq32_hkv8_d128_causal_bf16"},
                                {"attn_decode", "flash_attn_decode_hq32_hkv8_d128_bf16"},
                                {"o_proj", "row_parallel_linear_k4096_n4096_nobias_bf16"}}));
  // Layer 0's input_layernorm is rms_norm; the module takes layer 31's (Note [Last-layer roles]).
  EXPECT_EQ(children(layer), (std::map<std::string, std::string>{{"input_layernorm", "fused_add_rms_norm_h4096_eps1e-05_bf16"},
                                                                 {"self_attn", attn},
                                                                 {"post_attention_layernorm", "fused_add_rms_norm_h4096_eps1e-05_bf16"},
                                                                 {"mlp", "llama_mlp_h4096_i14336_nobias_bf16"}}));
  EXPECT_EQ(children(m["model"]), (std::map<std::string, std::string>{{"embed_tokens", "vocab_parallel_embedding_v128256_h4096_bf16"},
                                                                      {"layers", layer},
                                                                      {"norm", "fused_add_rms_norm_h4096_eps1e-05_bf16"},
                                                                      {"lm_head", "parallel_lm_head_v128256_h4096_bf16"}}));
  EXPECT_EQ(children(m["mlp"]), (std::map<std::string, std::string>{
                                    {"gate_up_proj", "merged_column_parallel_linear_k4096_n14336_14336_nobias_bf16"},
                                    {"act_fn", "silu_and_mul_i14336_bf16"},
                                    {"down_proj", "row_parallel_linear_k14336_n4096_nobias_bf16"}}));
}

TEST(Composites, QkNormOnlyForQwen3) {
  for (const char* id : {kLlama, kMistral, kQwen2, kQwen3}) {
    auto m = modules(id);
    bool qwen3 = std::string(id) == kQwen3;
    for (const char* mod : {"self_attn", "self_attn.qkv_rope_cache"}) {
      std::string qk = children(m[mod]).at("qk_norm");
      EXPECT_EQ(qk, qwen3 ? "qk_norm_hq32_hkv8_d128_eps1e-06_bf16" : "") << id << " " << mod;
      auto ph = placeholders(m[mod]);
      EXPECT_EQ(ph["qk_norm_t"], qwen3 ? "fk::generated::qk_norm_hq32_hkv8_d128_eps1e_06_bf16::QKNorm" : "fk::tasks::NoQKNorm");
      EXPECT_EQ(ph["qk_norm_task"], qwen3 ? "qk_norm_hq32_hkv8_d128_eps1e-06_bf16" : "none");
      EXPECT_EQ(ph["qk_norm"], qwen3 ? "true" : "false");
      // rms_norm_eps only matters with the q/k norm (Note [Composite kinds]).
      EXPECT_EQ(ph["rms_norm_eps"], qwen3 ? "1e-06" : "0") << id;
    }
  }
  EXPECT_EQ(modules(kQwen3)["self_attn"],
            "llama_attention_h4096_hq32_hkv8_d128_rot128_pos40960_base1000000_none_neox_qkvnobias_onobias_qknorm_eps1e-06_bf16");
  EXPECT_EQ(modules(kQwen2)["self_attn.qkv_rope_cache"],
            "qkv_rope_cache_h3584_hq28_hkv4_d128_rot128_pos32768_base1000000_none_neox_bias_bf16");
}

TEST(Composites, LlamaAndMistralShareTheMlp) {
  for (const char* name : {"llama_mlp_h4096_i14336_nobias_bf16", "gate_up_silu_h4096_i14336_nobias_bf16"}) {
    EXPECT_EQ(real().tasks.tasks.at(name).archs, (std::set<std::string>{kLlama, kMistral})) << name;
    EXPECT_EQ(modules(kLlama)[std::string(name).rfind("llama_mlp", 0) == 0 ? "mlp" : "mlp.gate_up_silu"], name);
  }
  // Mixtral's attention is Mistral's (same heads, rope base and max position).
  EXPECT_EQ(real().tasks.tasks.at("attention_o_proj_hq32_hkv8_d128_h4096_nobias_bf16").archs,
            (std::set<std::string>{kLlama, kMistral, kQwen3, "mistralai/Mixtral-8x7B-v0.1"}));
}

TEST(Composites, LevelsPathsAndNameLength) {
  std::map<std::string, int> levels = {{"qkv_rope_cache", 2},      {"attention_o_proj", 2}, {"gate_up_silu", 2},
                                       {"llama_mlp", 2},           {"llama_attention", 2},  {"llama_decoder_layer", 3},
                                       {"llama_for_causal_lm", 4}, {"fused_experts", 2},      {"sparse_moe_block", 2},
                                       {"moe_decoder_layer", 3},   {"moe_for_causal_lm", 4},    {"gemma_mlp", 2},
                                       {"gemma_attention", 2},     {"gemma_decoder_layer", 3},  {"gemma_for_causal_lm", 4},
                                       {"gpt_oss_for_causal_lm", 4}, {"deepseek_mla_attention", 2}, {"deepseek_moe", 2},
                                       {"deepseek_decoder_layer", 3}, {"deepseek_for_causal_lm", 4}, {"olmo2_attention", 2},
                                       {"olmo2_decoder_layer", 3}, {"olmo2_for_causal_lm", 4}, {"bert_attention", 2},
                                       {"bert_mlp", 2},            {"bert_layer", 3},           {"bert_model", 4},
                                       {"vit_attention", 2},       {"vit_mlp", 2},              {"vit_layer", 3},
                                       {"vit_model", 4},           {"bert_cross_attention", 2}, {"dinov3_attention", 2},
                                       {"dinov3_mlp", 2},          {"dinov3_layer", 3},         {"dinov3_model", 4},
                                       {"siglip_map_head", 2},     {"siglip_vision_model", 4}, {"siglip2_vision_model", 4},
                                       {"qwen2_vl_vision_attention", 2}, {"qwen2_vl_vision_mlp", 2}, {"qwen2_vl_vision_block", 3},
                                       {"qwen2_vl_patch_merger", 2}, {"qwen2_vl_vision_model", 4},
                                       {"qwen2_5_vl_vision_block", 3}, {"qwen2_5_vl_patch_merger", 2}, {"qwen2_5_vl_vision_model", 4},
                                       {"qwen3_vl_vision_mlp", 2}, {"qwen3_vl_vision_block", 3}, {"qwen3_vl_patch_merger", 2},
                                       {"qwen3_vl_vision_model", 4}, {"all_reduce_add_rms_norm", 2},
                                       {"matmul_reduce_scatter", 2}, {"all_gather_matmul", 2}};
  int composites = 0;
  for (const auto& [name, t] : real().tasks.tasks) {
    EXPECT_LE(name.size(), kMaxTaskName) << name;
    EXPECT_EQ(t.header, "generated/L" + std::to_string(t.level) + "/" + name + ".h");
    EXPECT_EQ(t.source, "generated/L" + std::to_string(t.level) + "/" + name + ".cu");
    if (t.level == 1) continue;
    ++composites;
    EXPECT_EQ(t.level, levels.at(t.kind)) << name;
  }
  // Llama family: 7 per config (7 configs, Phi-3, Phi-4-mini and Granite among them), minus 6 shared
  // (2 MLPs, 1 attention_o_proj x2; Phi-4-mini's llama_mlp and gate_up_silu are Phi-3-mini's). MoE family: 7 per config, minus Mixtral's 3 attention composites (Mistral's).
  // Gemma: 10 modules per config (two layer variants); Gemma 2's variants share qkv_rope_cache
  // (one rope base, the window is not in it). gpt-oss: qkv_rope_cache, fused_experts,
  // sparse_moe_block, two variants of attention_o_proj, llama_attention and moe_decoder_layer, the model.
  // DeepSeek-V3: the MLA attention, the dense MLP and the shared experts (two llama_mlp), fused_experts,
  // deepseek_moe, the dense and the MoE decoder layer, the model. Llama-2-7b (fp16): its own 7 (no
  // task shared across dtypes). OLMo-2: attention_o_proj, gate_up_silu, llama_mlp and its own
  // attention, layer and model (6; its MLP shapes are Llama-2's, but bf16). Seed-OSS 36B (served as
  // llama: q/k/v bias, o_proj without): its own 7. BERT-base and BGE-M3 (XLM-R large): attention,
  // MLP, layer, model (4 each). ViT-B/16: attention, MLP, layer, model (4). bert2bert's decoder: its causal
  // attention, cross-attention, layer and model (4; its MLP is BERT-base's). ViT-B/16 served at 384 px: its
  // model (1; the attention, MLP and layer tasks are the 224 px ones, with more cases). ColBERTv2 (BERT-base in
  // fp16 with a 128-d multi-vector head): its own attention, MLP, layer and model (4: no task shared across dtypes).
  // DINOv3 (the tiny random test model and ViT-7B/16): attention, MLP, layer, model (4 each). SigLIP-2 base/512's
  // tower: the ViT attention, MLP and layer under SigLIP's names, the head's MLP (another vit_mlp: the same task as the
  // layers' MLP), the pooling head and the model (5); SigLIP so400m/14 at 384 px: the same five at its width.
  // Qwen2-VL's tower: attention, MLP, block, merger, model (5). The mrope text models of Qwen2-VL-7B and
  // Qwen2.5-VL-7B: qkv_rope_cache, attention, layer, model (4 each: the rest is Qwen2.5-7B's); Qwen3-VL-32B's:
  // those four plus its MLP, gate_up_silu and attention_o_proj (7). Qwen2.5-VL's tower: its gated MLP (a llama_mlp
  // with biases), block, merger and model (4: the attention is Qwen2-VL's task). Qwen3-VL's tower: the attention at its
  // width, its MLP, block, the merger and the deepstack merger, the model (6). SigLIP-2 so400m/16 NaFlex's tower: the
  // model (1: its layers and head are so400m/14's tasks). Llama-3.1-8B at TP 2, 4 and 8 (Note [Parallel layouts]): the
  // seven modules of each layout (21: per-rank constants, and the communicating ones spell the layout). Mixtral-8x7B and
  // Qwen3-30B-A3B at TP 2: the seven MoE modules of each, less Mixtral's attention_o_proj (Llama-3.1-8B@tp2's: 13). The
  // same two at TP 2 + EP 2 (Note [Expert-parallel MoE]): the sparse block, layer and model spell the layout, and the
  // experts of half the experts are a new fused_experts each (attention is the TP 2 layout's: 8). Qwen3-30B-A3B at TP 4
  // and TP 4 + EP 4 (issue 24): qkv_rope_cache, attention_o_proj, attention, two sparse blocks, two fused_experts (a
  // quarter of each expert; a quarter of the experts), two layers, two models (11). Every sharded layout's fused
  // all-reduce + RMSNorm (Note [Fused all-reduce task]): hidden 4096 at TP 2 (Llama-3.1-8B and Mixtral share it), 4, 8;
  // hidden 2048 at TP 2 and 4 (Qwen3-30B-A3B): 5. DeepSeek-V3 at TP 2 + EP 2 (Note [DeepSeek sharding]): MLA attention
  // at 64 heads, the MoE block, its fused_experts (128 experts), the dense MLP and the shared experts' partial MLP, the
  // dense and the MoE layer, the model: 8. Qwen3-30B-A3B with data-parallel attention at EP 2 (Note [Data-parallel expert
  // MoE]): the sparse block, layer and model (3: attention is the unsharded model's, the experts TP 2 + EP 2's). The same
  // for DeepSeek-V3 at EP 2: its MoE block, MoE layer and model (3: MLA, the dense layers and the shared experts are the
  // unsharded model's, the routed experts TP 2 + EP 2's). The overlapped sequence-parallel linears (Note [Overlapped
  // linear tasks]): Llama-3.1-8B's qkv / gate_up all_gather_matmul and o_proj / down_proj matmul_reduce_scatter at TP 2, 4
  // and 8 (12; Mixtral's attention at TP 2 is Llama's), Qwen3-30B-A3B's qkv and o_proj at TP 2 and 4 (4): 16. The
  // data-parallel layouts at EP 4 (issue 24): Qwen3-30B-A3B's sparse block, layer and model (3: its experts are TP 4 +
  // EP 4's), DeepSeek-V3's MoE block, MoE layer, model and the routed experts of a quarter of the experts (4): 7.
  EXPECT_EQ(composites, 54 + 10 + 9 + 10 + 8 + 7 + 6 + 7 + 4 + 4 + 4 + 4 + 1 + 4 + 4 + 4 + 5 + 5 + 5 + 4 + 4 + 7 + 4 + 6 + 1 + 21 + 13 + 8 + 11 + 5 +
                            8 + 3 + 3 + 16 + 7);
}

TEST(Composites, PlaceholdersPerKind) {
  auto keys = [](const std::string& task) {
    std::vector<std::string> out;
    for (const auto& [k, _] : real().tasks.tasks.at(task).placeholders) out.push_back(k);
    return out;
  };
  EXPECT_EQ(keys("llama_mlp_h4096_i14336_nobias_bf16"),
            (std::vector<std::string>{"includes", "gate_up_proj_t", "gate_up_proj_task", "act_fn_t", "act_fn_task", "down_proj_t",
                                      "down_proj_task", "hidden_size", "intermediate_size", "mlp_bias", "tp_size", "class_name",
                                      "hidden_act"}));
  EXPECT_EQ(keys("attention_o_proj_hq32_hkv8_d128_h4096_nobias_bf16"),
            (std::vector<std::string>{"includes", "attn_prefill_t", "attn_prefill_task", "attn_decode_t", "attn_decode_task",
                                      "o_proj_t", "o_proj_task", "num_heads", "num_kv_heads", "head_dim", "hidden_size",
                                      "o_proj_bias", "sliding_window", "softmax_scale", "softcap", "sinks", "tp_size", "class_name"}));
  auto mlp = placeholders("llama_mlp_h4096_i14336_nobias_bf16");
  EXPECT_EQ(mlp["includes"],
            "#include \"L1/merged_column_parallel_linear_k4096_n14336_14336_nobias_bf16.h\"\n"
            "#include \"L1/silu_and_mul_i14336_bf16.h\"\n"
            "#include \"L1/row_parallel_linear_k14336_n4096_nobias_bf16.h\"");
  EXPECT_EQ(mlp["down_proj_t"], "fk::generated::row_parallel_linear_k14336_n4096_nobias_bf16::RowParallelLinear");
  EXPECT_EQ(mlp["mlp_bias"], "false");
  // One include per distinct child: both norms of the layer are the same task.
  auto layer = placeholders(modules(kMistral)["layer"]);
  EXPECT_EQ(layer["includes"],
            "#include \"L1/fused_add_rms_norm_h4096_eps1e-05_bf16.h\"\n"
            "#include \"L2/llama_attention_h4096_hq32_hkv8_d128_rot128_pos32768_base1000000_none_neox_qkvnobias_onobias_bf16.h\"\n"
            "#include \"L2/llama_mlp_h4096_i14336_nobias_bf16.h\"");
  EXPECT_EQ(layer["rms_norm_eps"], "1e-05");
  EXPECT_EQ(layer["rope_theta"], "1000000");
  EXPECT_EQ(layer["scaling_type"], "fk::tasks::RopeScaling::kNone");
  auto lm = placeholders(modules(kLlama)["model"]);
  const std::string layer_spelled =
      "llama_decoder_layer_h4096_i14336_hq32_hkv8_d128_eps1e-05_rot128_pos131072_base500000_llama3_f8_lf1_"
      "hf4_omp8192_neox_qkvnobias_onobias_mlpnobias_bf16";
  EXPECT_EQ(lm["layers_t"], "fk::generated::" + to_ident(name_of(layer_spelled)) + "::LlamaDecoderLayer");
  EXPECT_EQ(lm["num_hidden_layers"], "32");
  EXPECT_EQ(lm["tie_word_embeddings"], "false");
  EXPECT_EQ(lm["scaling_type"], "fk::tasks::RopeScaling::kLlama3");
  EXPECT_EQ(lm["original_max_position"], "8192");
}

TEST(Composites, Cases) {
  auto names = [](const std::string& task) {
    std::vector<std::string> out;
    for (const auto& c : task_of(task).cases) out.push_back(c.name);
    return out;
  };
  EXPECT_EQ(names(modules(kLlama)["model"]),
            (std::vector<std::string>{"b1_kv2048", "b8_kv2048", "b32_kv2048", "b64_kv2048", "b1_s2048", "b8_s2048"}));
  EXPECT_EQ(names("llama_mlp_h4096_i14336_nobias_bf16"),
            (std::vector<std::string>{"t1", "t8", "t32", "t64", "t256", "t1024", "t4096", "t16384"}));
  const auto& c = real().tasks.tasks.at("attention_o_proj_hq32_hkv8_d128_h4096_nobias_bf16").cases;
  EXPECT_EQ(case_initializer(c.at(3)), "{\"b64_kv2048\", \"decode\", {{\"batch\", 64}, {\"kv_len\", 2048}}}");
  EXPECT_EQ(case_initializer(c.at(5)), "{\"b8_s2048\", \"prefill\", {{\"batch\", 8}, {\"seq_len\", 2048}}}");
}

TEST(Composites, Dinov3VisionTransformer) {
  // ViT-7B/16: SwiGLU (the merged gate/up projection and silu_and_mul), 4 register tokens (the rope leaves 5
  // prefix tokens unturned), no key bias; every image 5 + 14 x 14 tokens.
  auto m = modules("facebook/dinov3-vit7b16-pretrain-lvd1689m");
  EXPECT_EQ(m["attention"], "dinov3_attention_h4096_hq32_d128_bqvo_g14_p5_theta100_bf16");
  EXPECT_EQ(m["mlp"], "dinov3_mlp_h4096_i8192_silu_gated_bias_bf16");
  auto mlp = children(m["mlp"]);
  EXPECT_EQ(mlp["up_proj"], "merged_column_parallel_linear_k4096_n8192_8192_bias_bf16");
  EXPECT_EQ(mlp["act_fn"], "silu_and_mul_i8192_bf16");
  auto attn = children(m["attention"]);
  EXPECT_EQ(attn["rotary_emb"], "vision_rope_2d_hq32_d128_g14x14_p5_m1_centered_theta100_bf16");
  EXPECT_EQ(attn["attn"], "flash_attn_prefill_hq32_hkv32_d128_bidir_bf16");
  auto layer = children(m["layer"]);
  EXPECT_EQ(layer["layer_scale1"], "layer_scale_h4096_bf16");
  EXPECT_EQ(layer["layer_scale2"], "layer_scale_h4096_bf16");
  EXPECT_EQ(placeholders(m["model"])["num_register_tokens"], "4");
  std::vector<std::string> names;
  for (const auto& c : task_of(m["model"]).cases) names.push_back(c.name);
  EXPECT_FALSE(names.empty());
  for (const auto& c : task_of(m["model"]).cases)
    for (const auto& [k, v] : c.dims)
      if (k == "seq_len") EXPECT_EQ(v, 5 + 14 * 14) << c.name;
  // The tiny random test model: a plain GELU MLP, no registers.
  auto t = modules("optimum-intel-internal-testing/tiny-random-dinov-3");
  EXPECT_EQ(t["mlp"], "dinov3_mlp_h192_i768_gelu_bias_bf16");
  EXPECT_EQ(children(t["mlp"])["act_fn"], "activation_gelu_h768_bf16");
  EXPECT_EQ(children(t["attention"])["rotary_emb"], "vision_rope_2d_hq3_d64_g14x14_p1_m1_centered_theta100_bf16");
}

TEST(Composites, BertEncoder) {
  const std::string bert = "google-bert/bert-base-uncased";
  auto m = modules(bert);
  EXPECT_EQ(m["attention"], "bert_attention_h768_hq12_d64_eps1e-12_bias_bf16");
  EXPECT_EQ(m["mlp"], "bert_mlp_h768_i3072_gelu_eps1e-12_bias_bf16");
  EXPECT_EQ(m["layer"], "bert_layer_h768_i3072_hq12_d64_gelu_eps1e-12_bias_bf16");
  EXPECT_EQ(m["model"], "bert_model_l12_v30522_tt2_pos512_h768_i3072_hq12_d64_gelu_eps1e-12_bias_bf16");
  std::vector<std::string> names;
  for (const auto& c : task_of(m["model"]).cases) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"b1_s128", "b1_s512", "b32_s128", "b32_s512", "b8_s512_ragged"}));
  EXPECT_EQ(case_initializer(task_of(m["layer"]).cases.at(4)),
            "{\"b8_s512_ragged\", \"prefill\", {{\"batch\", 8}, {\"seq_len\", 512}, {\"ragged\", 22}}}");
  // The attention child is the bidirectional prefill; the model's token types, pooler and activation are bound.
  EXPECT_EQ(children(m["attention"])["attn"], "flash_attn_prefill_hq12_hkv12_d64_bidir_bf16");
  auto kids = children(m["model"]);
  EXPECT_EQ(kids["token_type_embeddings"], "vocab_parallel_embedding_v2_h768_bf16");
  EXPECT_EQ(kids["pooler_act"], "activation_tanh_h768_bf16");
  EXPECT_EQ(placeholders(m["model"])["activation"], "fk::kernels::Act::kGelu");
  EXPECT_EQ(placeholders(m["model"])["position_offset"], "0");
  EXPECT_EQ(kids["pooler"], "");  // BERT-base keeps its BertPooler: no pooling choice
  // BGE-M3 (XLM-RoBERTa large): positions from padding_idx + 1 = 2, spelled _po2; one token type; served
  // with its dense vector, normalize(CLS) (fastkernels.json: pooling cls, normalize): the Pooler child
  // instead of BertPooler's dense + tanh, spelled _cls_norm; and with its per-token heads (Note [Embedding heads]):
  // the 1024-d colbert vectors and the sparse weights, both linears with biases, BOS/EOS dropped
  // (_mv1024_sparse_hbias_dropse).
  auto xlmr = modules("BAAI/bge-m3");
  EXPECT_EQ(xlmr["model"],
            "bert_model_l24_v250002_tt1_pos8194_po2_h1024_i4096_hq16_d64_gelu_eps1e-05_bias_cls_norm_mv1024_sparse_hbias_dropse_bf16");
  EXPECT_EQ(placeholders(xlmr["model"])["position_offset"], "2");
  auto xkids = children(xlmr["model"]);
  EXPECT_EQ(xkids["pooler"], "embedding_pooler_cls_norm_h1024_bf16");
  EXPECT_EQ(xkids["pooler_dense"], "");
  EXPECT_EQ(xkids["pooler_act"], "");
  EXPECT_EQ(xkids["colbert_linear"], "replicated_linear_k1024_n1024_bias_bf16");
  EXPECT_EQ(xkids["colbert_norm"], "l2_normalize_h1024_bf16");
  EXPECT_EQ(xkids["sparse_linear"], "token_classifier_n1_h1024_relu_bias_bf16");
  EXPECT_EQ(placeholders(xlmr["model"])["drop_special_tokens"], "true");
  // ColBERTv2 (architecture HF_ColBERT: BERT-base) served in fp16 with `add --multi-vector 128`: the bias-free
  // 128-d projection and its normalisation, every token kept, BertPooler kept; no sparse head.
  auto colbert = modules("colbert-ir/colbertv2.0");
  EXPECT_EQ(colbert["model"], "bert_model_l12_v30522_tt2_pos512_h768_i3072_hq12_d64_gelu_eps1e-12_bias_mv128_f16");
  auto ckids = children(colbert["model"]);
  EXPECT_EQ(ckids["colbert_linear"], "replicated_linear_k768_n128_nobias_f16");
  EXPECT_EQ(ckids["colbert_norm"], "l2_normalize_h128_f16");
  EXPECT_EQ(ckids["sparse_linear"], "");
  EXPECT_EQ(ckids["pooler_act"], "activation_tanh_h768_f16");
}

TEST(Composites, Manifest) {
  auto j = nlohmann::json::parse(manifest_json(real().tasks));
  const nlohmann::json* llama = nullptr;
  for (const auto& a : j["archs"])
    if (a["id"] == kLlama) llama = &a;
  ASSERT_TRUE(llama);
  ASSERT_EQ((*llama)["modules"].size(), 7u);
  EXPECT_EQ((*llama)["modules"][3], (nlohmann::json{{"name", "mlp"}, {"task", "llama_mlp_h4096_i14336_nobias_bf16"}}));
  std::set<std::string> tasks = (*llama)["tasks"].get<std::set<std::string>>();
  EXPECT_TRUE(tasks.count("llama_mlp_h4096_i14336_nobias_bf16"));
  std::string attn = modules(kLlama)["self_attn"];
  for (const auto& t : j["tasks"]) {
    EXPECT_EQ(t["header"], t["source"].get<std::string>().substr(0, t["source"].get<std::string>().size() - 3) + ".h");
    // L1 tasks have children only where they communicate: their collective task (Note [Collective tasks]); a
    // row-parallel linear that leaves its partial sum to its parent does not (Note [Partial row-parallel results]).
    const std::string name = t["name"].get<std::string>();
    const bool communicates = name.find("_tp") != std::string::npos && name.find("_partial_tp") == std::string::npos &&
                              (t["kind"] == "row_parallel_linear" || t["kind"] == "vocab_parallel_embedding");
    EXPECT_EQ(t.contains("children"), t["level"] > 1 || communicates) << t["name"];
    if (t["level"] == 1 && communicates) {
      ASSERT_EQ(t["children"].size(), 1u) << t["name"];
      const std::string c = t["children"]["collective"].get<std::string>();
      EXPECT_EQ(c.rfind("all_reduce_n", 0), 0u) << t["name"] << " -> " << c;
    }
    if (t["name"] != attn) continue;
    EXPECT_TRUE(t["children"]["qk_norm"].is_null());
    EXPECT_EQ(t["children"]["o_proj"], "row_parallel_linear_k4096_n4096_nobias_bf16");
    EXPECT_EQ(t["templates"], (nlohmann::json{"templates/llama_attention.h.mustache", "templates/llama_attention.cu.mustache"}));
  }
}

// --- dedupe: same composite name, other children -------------------------------------------------
LoweredModel mlp_model(const std::string& id, bool down_bias) {
  LoweredModel m;
  m.id = id;
  m.file = "hf_configs/" + id + "/config.json";
  m.model_type = "llama";
  m.descriptor_file = "generator/descriptors/llama.json";
  m.ops = {{"blk.0.gate_up_proj", find_kind("merged_column_parallel_linear"), "bfloat16",
            {{"input_size", int64_t{64}}, {"n0", int64_t{128}}, {"n1", int64_t{128}}, {"bias", false}}},
           {"blk.0.act_fn", find_kind("silu_and_mul"), "bfloat16", {{"intermediate_size", int64_t{128}}}},
           {"blk.0.down_proj", find_kind("row_parallel_linear"), "bfloat16",
            {{"input_size", int64_t{128}}, {"output_size", int64_t{64}}, {"bias", down_bias}}}};
  m.modules = {{"mlp", find_kind("llama_mlp"), "bfloat16",
                {{"hidden_size", int64_t{64}}, {"intermediate_size", int64_t{128}}, {"mlp_bias", false}},
                {{"gate_up_proj", "blk.0.gate_up_proj"}, {"act_fn", "blk.0.act_fn"}, {"down_proj", "blk.0.down_proj"}}}};
  return m;
}

TEST(Composites, SameNameOtherChildrenIsAnError) {
  Diagnostics ok;
  TaskSet set = dedupe({mlp_model("org/a", false), mlp_model("org/b", false)}, ok);
  ASSERT_TRUE(ok.ok()) << ok.text();
  EXPECT_EQ(set.tasks.at("llama_mlp_h64_i128_nobias_bf16").archs, (std::set<std::string>{"org/a", "org/b"}));
  // The name spells the constants, not the children: a down_proj with a bias is other content.
  Diagnostics diag;
  dedupe({mlp_model("org/a", false), mlp_model("org/b", true)}, diag);
  EXPECT_EQ(diag.text(),
            "task llama_mlp_h64_i128_nobias_bf16: same name, different content: child down_proj = "
            "row_parallel_linear_k128_n64_nobias_bf16 from hf_configs/org/a/config.json (mlp) vs child down_proj = "
            "row_parallel_linear_k128_n64_bias_bf16 from hf_configs/org/b/config.json (mlp); a task name must spell every "
            "constant it inlines (Note [Task naming] in generator/include/fk/gen/kinds.h)\n");
}

// --- descriptor errors of `modules` (tests/fixtures/bad_descriptors/README.md) -------------------
std::vector<std::string> bad_descriptor_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fixtures() / "bad_descriptors"))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class BadDescriptor : public ::testing::TestWithParam<std::string> {};

TEST_P(BadDescriptor, ReportsExactMessage) {
  const std::string name = GetParam();
  const fs::path expected = fixtures() / "bad_descriptors" / (name + ".expected");
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  auto descriptor = nlohmann::json::parse(slurp(source_dir() / "generator" / "descriptors" / "llama.json"));
  auto overrides = nlohmann::json::parse(slurp(fixtures() / "bad_descriptors" / (name + ".json")));
  for (const auto& [key, value] : overrides.items()) descriptor[key] = value;
  spit(tmp.path() / "generator" / "descriptors" / "llama.json", descriptor.dump(2));
  Diagnostics diag;
  run_pipeline(tmp.path(), discover_configs(tmp.path(), diag), /*emit_outputs=*/false, diag);
  ASSERT_FALSE(diag.ok()) << name << " was accepted";
  if (update_golden()) spit(expected, diag.text());
  ASSERT_TRUE(fs::exists(expected)) << "missing " << expected;
  EXPECT_EQ(diag.text(), slurp(expected));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BadDescriptor, ::testing::ValuesIn(bad_descriptor_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace fk::gen

namespace fk::gen {
namespace {

// Gemma 3: sliding-window layers with a local rope base between full-attention layers (every
// sixth). Each variant's modules resolve their roles in the last layer where their "at" holds
// (Note [Last-layer roles]): the full layer in blk.23, the sliding one in blk.25.
TEST(Composites, GemmaLayerVariantsResolveTheirOwnLayers) {
  const char* kGemma3 = "google/gemma-3-1b-it";
  auto m = modules(kGemma3);
  const std::string full = m["layer"], sliding = m["sliding.layer"];
  EXPECT_EQ(full, "gemma_decoder_layer_h1152_i6912_hq4_hkv1_d256_eps1e-06_rot256_pos32768_base1000000_none_neox_qkvnobias_"
                  "onobias_mlpnobias_qknorm_bf16");
  EXPECT_EQ(sliding, "gemma_decoder_layer_h1152_i6912_hq4_hkv1_d256_sw512_eps1e-06_rot256_pos32768_base10000_none_neox_"
                     "qkvnobias_onobias_mlpnobias_qknorm_bf16");
  EXPECT_EQ(children(m["self_attn"]).at("attn_prefill"), "flash_attn_prefill_hq4_hkv1_d256_causal_bf16");
  EXPECT_EQ(children(m["sliding.self_attn"]).at("attn_prefill"), "flash_attn_prefill_hq4_hkv1_d256_causal_sw512_bf16");
  EXPECT_EQ(children(m["sliding.self_attn"]).at("rotary_emb"), "rotary_embedding_d256_rot256_pos32768_base10000_none_neox_hq4_hkv1_bf16");
  EXPECT_EQ(children(m["sliding.self_attn"]).at("qk_norm"), "gemma_qk_norm_hq4_hkv1_d256_eps1e-06_bf16");
  auto model = children(m["model"]);
  EXPECT_EQ(model.at("full_layers"), full);
  EXPECT_EQ(model.at("sliding_layers"), sliding);
  EXPECT_EQ(model.at("embed_tokens"), "scaled_word_embedding_v262144_h1152_scaled_bf16");
  auto ph = placeholders(m["model"]);
  EXPECT_EQ(ph["full_every"], "6");
  EXPECT_EQ(ph["local_sliding_window"], "512");
  EXPECT_EQ(ph["local_rope_theta"], "10000");
  EXPECT_EQ(ph["final_softcap"], "0");
  // Gemma 2: every other layer, one rope base, soft-capping in attention and on the logits.
  auto g2 = modules("google/gemma-2-9b-it");
  EXPECT_EQ(children(g2["self_attn"]).at("attn_decode"), "flash_attn_decode_hq16_hkv8_d256_cap50_bf16");
  EXPECT_EQ(children(g2["sliding.self_attn"]).at("attn_decode"), "flash_attn_decode_hq16_hkv8_d256_sw4096_cap50_bf16");
  EXPECT_EQ(placeholders(g2["model"])["final_softcap"], "30");
  EXPECT_EQ(placeholders(g2["model"])["full_every"], "2");
}

// Granite (Note [Granite multipliers] in fk/tasks/llama.h): the llama descriptor with the four
// muP constants: attention_multiplier is the softmax scale, embedding_multiplier makes the
// embedding a ScaledWordEmbedding, residual_multiplier and logits_scaling are constants of the
// layer and model composites, spelled only where they are not 1 (every other name unchanged).
TEST(Composites, GraniteMultipliers) {
  const char* kGranite = "ibm-granite/granite-3.3-8b-instruct";
  auto m = modules(kGranite);
  EXPECT_EQ(m["layer"], "llama_decoder_layer_h4096_i12800_hq32_hkv8_d128_scale0.0078125_eps1e-05_rot128_pos131072_base10000000_"
                        "none_neox_qkvnobias_onobias_mlpnobias_rm0.22_bf16");
  EXPECT_EQ(m["model"], "llama_for_causal_lm_l40_v49159_tied_h4096_i12800_hq32_hkv8_d128_scale0.0078125_eps1e-05_rot128_"
                        "pos131072_base10000000_none_neox_qkvnobias_onobias_mlpnobias_em12_rm0.22_ls16_bf16");
  auto model = children(m["model"]);
  EXPECT_EQ(model.at("embed_tokens"), "scaled_word_embedding_v49159_h4096_s12_bf16");
  EXPECT_EQ(children(m["self_attn"]).at("attn_decode"), "flash_attn_decode_hq32_hkv8_d128_scale0.0078125_bf16");
  auto ph = placeholders(m["model"]);
  EXPECT_EQ(ph["embedding_multiplier"], "12");
  EXPECT_EQ(ph["residual_multiplier"], "0.22");
  EXPECT_EQ(ph["logits_scaling"], "16");
  EXPECT_EQ(placeholders(m["layer"])["residual_multiplier"], "0.22");
  // Llama itself: multipliers 1, names as before.
  auto l = modules(kLlama);
  EXPECT_EQ(placeholders(l["layer"])["residual_multiplier"], "1");
  EXPECT_EQ(placeholders(l["model"])["logits_scaling"], "1");
  EXPECT_EQ(children(l["model"]).at("embed_tokens"), "vocab_parallel_embedding_v128256_h4096_bf16");
  EXPECT_EQ(l["model"].find("_rm"), std::string::npos);
}

// Phi-4-mini (Note [LongRoPE] in fk/tasks/rotary_embedding.h): partial rotary (rotary_dim =
// int(128 * 0.75) = 96) and LongRoPE: the original context from the top-level key, the cos/sin
// scale derived as HF and vLLM do (sqrt(1 + ln 32 / ln 4096)), the factor lists in the rotary
// task only (its name carries their digest).
TEST(Composites, Phi4MiniPartialRotaryLongrope) {
  auto m = modules("microsoft/Phi-4-mini-instruct");
  const std::string rope = children(m["self_attn"]).at("rotary_emb");
  EXPECT_EQ(rope, "rotary_embedding_d128_rot96_pos131072_base10000_longrope_a1.1902380714238083_omp4096_x3ae41798_neox_hq24_hkv8_bf16");
  auto ph = placeholders(rope);
  EXPECT_EQ(ph["rotary_dim"], "96");
  EXPECT_EQ(ph["scaling_type"], "fk::tasks::RopeScaling::kLongrope");
  EXPECT_EQ(ph["original_max_position"], "4096");
  EXPECT_EQ(ph["short_factor"], "\"1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1\"");
  EXPECT_EQ(ph["long_factor"].substr(0, 24), "\"1,1.118320672,1.2506411");
  EXPECT_NEAR(std::stod(ph["scaling_factor"]), std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-15);
  EXPECT_EQ(m["self_attn.qkv_rope_cache"],
            "qkv_rope_cache_h3072_hq24_hkv8_d128_rot96_pos131072_base10000_longrope_a1.1902380714238083_omp4096_neox_nobias_bf16");
  // Other configs' rotary tasks keep their names and have no factors.
  auto l = modules(kLlama);
  EXPECT_EQ(placeholders(children(l["self_attn"]).at("rotary_emb"))["long_factor"], "\"\"");
}

// gpt-oss: HF layer_types picks each layer's variant (sliding window 128 or full attention);
// attention sinks, biases everywhere, SwigluOAIAndMul experts, YaRN without truncation.
TEST(Composites, GptOssLayerTypes) {
  auto m = modules("openai/gpt-oss-20b");
  const std::string full = m["layer"], sliding = m["sliding.layer"];
  EXPECT_EQ(full, "moe_decoder_layer_h2880_e32_top4_i2880_swigluoai7_ebias_renorm_rbias_hq64_hkv8_d64_sinks_eps1e-05_rot64_"
                  "pos131072_base150000_yarn_notrunc_f32_omp4096_bf32_bs1_neox_qkvbias_obias_bf16");
  EXPECT_EQ(sliding, "moe_decoder_layer_h2880_e32_top4_i2880_swigluoai7_ebias_renorm_rbias_hq64_hkv8_d64_sw128_sinks_eps1e-05_"
                     "rot64_pos131072_base150000_yarn_notrunc_f32_omp4096_bf32_bs1_neox_qkvbias_obias_bf16");
  EXPECT_EQ(children(m["sliding.self_attn"]).at("attn_prefill"), "flash_attn_prefill_hq64_hkv8_d64_causal_sw128_sinks_bf16");
  EXPECT_EQ(children(m["self_attn"]).at("attn_decode"), "flash_attn_decode_hq64_hkv8_d64_sinks_bf16");
  auto experts = children(m["mlp.experts"]);
  EXPECT_EQ(experts.at("act_fn"), "swigluoai_and_mul_i2880_a1.702_lim7_bf16");
  EXPECT_EQ(experts.at("w13"), "moe_grouped_gemm_e32_top4_n5760_k2880_bias_bf16");
  EXPECT_EQ(experts.at("w2"), "moe_grouped_gemm_e32_top4_n2880_k2880_perslot_weighted_bias_bf16");
  EXPECT_EQ(children(m["mlp"]).at("gate"), "replicated_linear_k2880_n32_bias_bf16");
  auto model = children(m["model"]);
  EXPECT_EQ(model.at("full_layers"), full);
  EXPECT_EQ(model.at("sliding_layers"), sliding);
  // The model's spelling is longer than kMaxTaskName: cut, with the hash of the whole.
  const std::string model_name = name_of(m["model"]);
  EXPECT_EQ(model_name.size(), kMaxTaskName - 32 + 2 + 16 + 5) << model_name;
  EXPECT_EQ(model_name.rfind("gpt_oss_for_causal_lm_l24_v201088_untied_h2880_e32_top4_i2880_swigluoai7_ebias", 0), 0u);
  EXPECT_EQ(m["model"].rfind("gpt_oss_for_causal_lm_l24_v201088_untied_h2880_e32_top4_i2880_swigluoai7_ebias", 0), 0u);
  EXPECT_GT(m["model"].size(), kMaxTaskName) << "the full spelling is kept (Task::spelled, banner, manifest)";
  auto ph = placeholders(m["model"]);
  EXPECT_EQ(ph["layer_types"], "\"SFSFSFSFSFSFSFSFSFSFSFSF\"");
  EXPECT_EQ(ph["local_sliding_window"], "128");
  EXPECT_EQ(ph["sliding_window"], "0");
  EXPECT_EQ(ph["sinks"], "true");
  EXPECT_EQ(ph["scaling_type"], "fk::tasks::RopeScaling::kYarnNoTrunc");
}

TEST(Composites, BoundedTaskNames) {
  EXPECT_EQ(bounded_task_name("short_bf16", "bf16"), "short_bf16");
  const std::string a(kMaxTaskName + 10, 'a'), b = a + "b";
  const std::string na = bounded_task_name(a, "bf16"), nb = bounded_task_name(b, "bf16");
  EXPECT_LE(na.size(), kMaxTaskName);
  EXPECT_NE(na, nb);  // the hash covers the whole spelling
  EXPECT_EQ(na.substr(na.size() - 5), "_bf16");
  EXPECT_EQ(na, bounded_task_name(a, "bf16"));  // deterministic
}

}  // namespace
}  // namespace fk::gen
