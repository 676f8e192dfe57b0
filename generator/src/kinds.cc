// The task-kind table (Note [Task naming], Note [Case registry] in fk/gen/kinds.h).
// Mirrors docs/task-kinds.md; change both together.
#include "fk/gen/kinds.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "fk/gen/diag.h"
#include "fk/gen/format.h"

namespace fk::gen {

const char* param_type_name(ParamType t) {
  switch (t) {
    case ParamType::kInt: return "integer";
    case ParamType::kFloat: return "number";
    case ParamType::kBool: return "boolean";
    case ParamType::kString: return "string";
  }
  return "?";
}

std::string dtype_suffix(const std::string& d) {
  if (d == "bfloat16") return "bf16";
  if (d == "float16") return "f16";
  if (d == "float32") return "f32";
  throw GenError{"unknown dtype " + json_quote(d)};
}

std::string dtype_scalar_t(const std::string& d) {
  if (d == "bfloat16") return "fk::bf16";
  if (d == "float16") return "fk::f16";
  if (d == "float32") return "float";
  throw GenError{"unknown dtype " + json_quote(d)};
}

std::string case_initializer(const ShapeCase& c) {
  std::string s = "{" + cpp_string_literal(c.name) + ", " + cpp_string_literal(c.regime) + ", {";
  for (size_t i = 0; i < c.dims.size(); ++i) {
    if (i) s += ", ";
    s += "{" + cpp_string_literal(c.dims[i].first) + ", " + std::to_string(c.dims[i].second) + "}";
  }
  return s + "}}";
}

namespace {

// Accessors: lower has already checked every parameter's presence and type.
int64_t I(const Params& p, const char* k) { return std::get<int64_t>(p.at(k)); }
double F(const Params& p, const char* k) { return std::get<double>(p.at(k)); }
bool B(const Params& p, const char* k) { return std::get<bool>(p.at(k)); }
const std::string& S(const Params& p, const char* k) { return std::get<std::string>(p.at(k)); }

std::string i2s(int64_t x) { return std::to_string(x); }
std::string b2s(bool b) { return b ? "true" : "false"; }
std::string nf(double x) { return name_double(x); }
std::string cf(double x) { return canonical_double(x); }

// --- case registries (docs/task-kinds.md) ---------------------------------------------------
std::vector<ShapeCase> token_cases(bool decode_only) {
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t t : {1, 8, 32, 64, 256}) out.push_back({"t" + i2s(t), "decode", {{"num_tokens", t}}, {k++}});
  if (!decode_only)
    for (int64_t t : {1024, 4096, 16384}) out.push_back({"t" + i2s(t), "prefill", {{"num_tokens", t}}, {k++}});
  return out;
}

std::vector<ShapeCase> prefill_attn_cases(int64_t max_position) {
  const std::pair<int64_t, int64_t> registry[] = {{1, 1024}, {1, 4096}, {1, 8192}, {1, 16384}, {4, 2048}, {16, 1024}};
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (auto [b, s] : registry) {
    if (s <= max_position)
      out.push_back({"b" + i2s(b) + "_s" + i2s(s), "prefill", {{"batch", b}, {"seq_len", s}}, {k}});
    ++k;
  }
  return out;
}

std::vector<ShapeCase> decode_attn_cases(int64_t max_position) {
  std::set<std::pair<int64_t, int64_t>> keep;  // ordered by batch, then kv_len; deduplicated
  for (int64_t b : {1, 8, 32, 64})
    for (int64_t l : {int64_t{1024}, int64_t{8192}, int64_t{32768}, max_position})
      if (l <= max_position && b * l <= 1048576) keep.insert({b, l});
  std::vector<ShapeCase> out;
  for (auto [b, l] : keep)
    out.push_back({"b" + i2s(b) + "_kv" + i2s(l), "decode", {{"batch", b}, {"kv_len", l}}, {b, l}});
  return out;
}

using PH = std::vector<std::pair<std::string, std::string>>;

std::string bias_word(bool b) { return b ? "bias" : "nobias"; }

// rms_norm, fused_add_rms_norm and their Gemma forms (GemmaRMSNorm: weight used as 1 + w, one
// rounding at the end) share templates/rms_norm.
KindSpec rms_norm_kind(bool fused, bool gemma = false) {
  KindSpec k;
  k.kind = std::string(gemma ? "gemma_" : "") + (fused ? "fused_add_rms_norm" : "rms_norm");
  k.template_name = "rms_norm";
  k.class_name = gemma ? "GemmaRMSNorm" : "RMSNorm";
  k.params = {{"hidden_size", ParamType::kInt}, {"eps", ParamType::kFloat}};
  std::string prefix = k.kind;
  k.name = [prefix](const Params& p, const std::string& dt) {
    return prefix + "_h" + i2s(I(p, "hidden_size")) + "_eps" + nf(F(p, "eps")) + "_" + dt;
  };
  k.production = [gemma](const Params&) {
    return std::string("vllm.model_executor.layers.layernorm.") + (gemma ? "GemmaRMSNorm" : "RMSNorm");
  };
  k.placeholders = [fused, gemma, cls = k.class_name](const Params& p) {
    return PH{{"hidden_size", i2s(I(p, "hidden_size"))}, {"eps", cf(F(p, "eps"))}, {"fused_add", b2s(fused)},
              {"gemma", b2s(gemma)}, {"class_name", cls}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// qk_norm and gemma_qk_norm (GemmaRMSNorm(head_dim) per head: 1 + w) share templates/qk_norm.
KindSpec qk_norm_kind(bool gemma = false) {
  KindSpec k;
  k.kind = gemma ? "gemma_qk_norm" : "qk_norm";
  k.template_name = "qk_norm";
  k.class_name = gemma ? "GemmaQKNorm" : "QKNorm";
  k.params = {{"num_heads", ParamType::kInt}, {"num_kv_heads", ParamType::kInt}, {"head_dim", ParamType::kInt}, {"eps", ParamType::kFloat}};
  std::string prefix = k.kind;
  k.name = [prefix](const Params& p, const std::string& dt) {
    return prefix + "_hq" + i2s(I(p, "num_heads")) + "_hkv" + i2s(I(p, "num_kv_heads")) + "_d" + i2s(I(p, "head_dim")) +
           "_eps" + nf(F(p, "eps")) + "_" + dt;
  };
  k.production = [gemma](const Params&) {
    return std::string(gemma ? "vllm.model_executor.models.gemma3.Gemma3Attention.q_norm/k_norm (GemmaRMSNorm)"
                             : "vllm.model_executor.models.qwen3.Qwen3Attention.q_norm/k_norm");
  };
  k.placeholders = [gemma, cls = k.class_name](const Params& p) {
    return PH{{"num_heads", i2s(I(p, "num_heads"))}, {"num_kv_heads", i2s(I(p, "num_kv_heads"))},
              {"head_dim", i2s(I(p, "head_dim"))}, {"eps", cf(F(p, "eps"))}, {"gemma", b2s(gemma)}, {"class_name", cls}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// The rope constants as names spell them (docs/task-kinds.md, rotary_embedding):
// rot{rotary_dim}_pos{max_position}_base{base}_{scaling}_{neox|gptj}, where `base_key` names the
// base parameter (rotary_embedding: base, composite kinds: rope_theta).
std::string rope_spelling(const Params& p, const char* base_key) {
  const std::string& st = S(p, "scaling_type");
  std::string scaling;
  if (st == "none") scaling = "none";
  else if (st == "llama3")
    scaling = "llama3_f" + nf(F(p, "scaling_factor")) + "_lf" + nf(F(p, "low_freq_factor")) + "_hf" +
              nf(F(p, "high_freq_factor")) + "_omp" + i2s(I(p, "original_max_position"));
  else if (st == "linear") scaling = "linear_f" + nf(F(p, "scaling_factor"));
  else if (st == "yarn" || st == "yarn_notrunc" || st == "deepseek_yarn")
    scaling = st + "_f" + nf(F(p, "scaling_factor")) + "_omp" + i2s(I(p, "original_max_position")) + "_bf" +
              nf(F(p, "beta_fast")) + "_bs" + nf(F(p, "beta_slow"));
  else throw GenError{"unknown rope scaling type " + json_quote(st) + " (known: deepseek_yarn, llama3, linear, none, yarn, yarn_notrunc)"};
  return "rot" + i2s(I(p, "rotary_dim")) + "_pos" + i2s(I(p, "max_position")) + "_base" + nf(F(p, base_key)) + "_" +
         scaling + "_" + (B(p, "is_neox_style") ? "neox" : "gptj");
}

// The C++ enumerator of a rope scaling type.
std::string rope_scaling_enum(const std::string& type) {
  static const std::map<std::string, std::string> enum_name = {
      {"none", "kNone"}, {"llama3", "kLlama3"}, {"linear", "kLinear"}, {"yarn", "kYarn"},
      {"yarn_notrunc", "kYarnNoTrunc"}, {"deepseek_yarn", "kDeepseekYarn"}};
  return "fk::tasks::RopeScaling::" + enum_name.at(type);
}

KindSpec rotary_kind() {
  KindSpec k;
  k.kind = k.template_name = "rotary_embedding";
  k.class_name = "RotaryEmbedding";
  k.params = {{"head_size", ParamType::kInt},         {"rotary_dim", ParamType::kInt},
              {"max_position", ParamType::kInt},      {"base", ParamType::kFloat},
              {"is_neox_style", ParamType::kBool},    {"num_heads", ParamType::kInt},
              {"num_kv_heads", ParamType::kInt},      {"scaling_type", ParamType::kString},
              {"scaling_factor", ParamType::kFloat},  {"low_freq_factor", ParamType::kFloat},
              {"high_freq_factor", ParamType::kFloat}, {"original_max_position", ParamType::kInt},
              {"beta_fast", ParamType::kFloat},       {"beta_slow", ParamType::kFloat}};
  k.name = [](const Params& p, const std::string& dt) {
    return "rotary_embedding_d" + i2s(I(p, "head_size")) + "_" + rope_spelling(p, "base") + "_hq" +
           i2s(I(p, "num_heads")) + "_hkv" + i2s(I(p, "num_kv_heads")) + "_" + dt;
  };
  k.production = [](const Params& p) {
    static const std::map<std::string, std::string> cls = {{"none", "RotaryEmbedding"},
                                                           {"llama3", "Llama3RotaryEmbedding"},
                                                           {"linear", "LinearScalingRotaryEmbedding"},
                                                           {"yarn", "YaRNScalingRotaryEmbedding"},
                                                           {"yarn_notrunc", "YaRNScalingRotaryEmbedding(truncate=False)"},
                                                           {"deepseek_yarn", "DeepseekScalingRotaryEmbedding"}};
    return "vllm.model_executor.layers.rotary_embedding." + cls.at(S(p, "scaling_type"));
  };
  k.placeholders = [](const Params& p) {
    return PH{{"head_size", i2s(I(p, "head_size"))},
              {"rotary_dim", i2s(I(p, "rotary_dim"))},
              {"max_position", i2s(I(p, "max_position"))},
              {"base", cf(F(p, "base"))},
              {"is_neox_style", b2s(B(p, "is_neox_style"))},
              {"num_heads", i2s(I(p, "num_heads"))},
              {"num_kv_heads", i2s(I(p, "num_kv_heads"))},
              {"scaling_type", rope_scaling_enum(S(p, "scaling_type"))},
              {"scaling_factor", cf(F(p, "scaling_factor"))},
              {"low_freq_factor", cf(F(p, "low_freq_factor"))},
              {"high_freq_factor", cf(F(p, "high_freq_factor"))},
              {"original_max_position", i2s(I(p, "original_max_position"))},
              {"beta_fast", cf(F(p, "beta_fast"))},
              {"beta_slow", cf(F(p, "beta_slow"))}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// silu_and_mul, gelu_tanh_and_mul (GeluAndMul(approximate="tanh"), Gemma) and
// swigluoai_and_mul (vLLM SwigluOAIAndMul, gpt-oss experts: interleaved gate/up halves, clamped,
// (up + 1) * gate * sigmoid(alpha * gate)) share templates/silu_and_mul.
enum class ActKind { kSilu, kGeluTanh, kSwigluOai };
KindSpec silu_kind(ActKind act = ActKind::kSilu) {
  KindSpec k;
  const bool oai = act == ActKind::kSwigluOai;
  k.kind = act == ActKind::kSilu ? "silu_and_mul" : act == ActKind::kGeluTanh ? "gelu_tanh_and_mul" : "swigluoai_and_mul";
  k.template_name = "silu_and_mul";
  k.class_name = act == ActKind::kSilu ? "SiluAndMul" : act == ActKind::kGeluTanh ? "GeluAndMul" : "SwigluOAIAndMul";
  k.params = {{"intermediate_size", ParamType::kInt}};
  if (oai) k.params.insert(k.params.end(), {{"alpha", ParamType::kFloat}, {"limit", ParamType::kFloat}});
  std::string prefix = k.kind;
  k.name = [prefix, oai](const Params& p, const std::string& dt) {
    std::string extra;
    if (oai) {
      if (!(F(p, "limit") > 0) || !(F(p, "alpha") > 0))
        throw GenError{"swigluoai_and_mul needs alpha > 0 and limit > 0, got " + cf(F(p, "alpha")) + ", " + cf(F(p, "limit"))};
      extra = "_a" + nf(F(p, "alpha")) + "_lim" + nf(F(p, "limit"));
    }
    return prefix + "_i" + i2s(I(p, "intermediate_size")) + extra + "_" + dt;
  };
  k.production = [act](const Params&) {
    return std::string("vllm.model_executor.layers.activation.") +
           (act == ActKind::kSilu ? "SiluAndMul" : act == ActKind::kGeluTanh ? "GeluAndMul(approximate='tanh')" : "SwigluOAIAndMul");
  };
  k.placeholders = [act, oai, cls = k.class_name](const Params& p) {
    return PH{{"intermediate_size", i2s(I(p, "intermediate_size"))},
              {"activation", act == ActKind::kSilu       ? "fk::kernels::GatedAct::kSilu"
                             : act == ActKind::kGeluTanh ? "fk::kernels::GatedAct::kGeluTanh"
                                                         : "fk::kernels::GatedAct::kSwigluOai"},
              {"alpha", oai ? cf(F(p, "alpha")) : "0"},
              {"limit", oai ? cf(F(p, "limit")) : "0"},
              {"class_name", cls}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// vocab_parallel_embedding and scaled_word_embedding (Gemma: rows times embed_scale rounded to
// the model dtype) share templates/vocab_parallel_embedding.
KindSpec embedding_kind(bool scaled = false) {
  KindSpec k;
  k.kind = scaled ? "scaled_word_embedding" : "vocab_parallel_embedding";
  k.template_name = "vocab_parallel_embedding";
  k.class_name = scaled ? "ScaledWordEmbedding" : "VocabParallelEmbedding";
  k.params = {{"num_embeddings", ParamType::kInt}, {"embedding_dim", ParamType::kInt}};
  if (scaled) k.params.push_back({"embed_scale", ParamType::kFloat});
  std::string prefix = k.kind;
  k.name = [prefix, scaled](const Params& p, const std::string& dt) {
    std::string scale;
    if (scaled) {  // "_scaled" for Gemma's sqrt(embedding_dim), else the factor
      const double s = F(p, "embed_scale"), gemma = std::sqrt(double(I(p, "embedding_dim")));
      scale = std::fabs(s - gemma) <= 1e-12 * gemma ? "_scaled" : "_s" + nf(s);
    }
    return prefix + "_v" + i2s(I(p, "num_embeddings")) + "_h" + i2s(I(p, "embedding_dim")) + scale + "_" + dt;
  };
  k.production = [scaled](const Params&) {
    return std::string(scaled ? "transformers Gemma3TextScaledWordEmbedding (vLLM: VocabParallelEmbedding, then *= normalizer)"
                              : "vllm.model_executor.layers.vocab_parallel_embedding.VocabParallelEmbedding");
  };
  k.placeholders = [scaled, cls = k.class_name](const Params& p) {
    return PH{{"num_embeddings", i2s(I(p, "num_embeddings"))}, {"embedding_dim", i2s(I(p, "embedding_dim"))},
              {"embed_scale", scaled ? cf(F(p, "embed_scale")) : "0"}, {"class_name", cls}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// The four linear kinds share templates/linear.{h,cu}.mustache; see docs/task-kinds.md "Linear layers".
PH linear_placeholders(const std::string& cls, const std::string& ctor_params, const std::string& ctor_check,
                       int64_t in, int64_t out, bool has_bias, bool returns_bias) {
  return PH{{"class_name", cls}, {"ctor_params", ctor_params}, {"ctor_check", ctor_check},
            {"in_features", i2s(in)}, {"out_features", i2s(out)}, {"has_bias", b2s(has_bias)},
            {"returns_bias", b2s(returns_bias)}};
}

// RowParallelLinear, ReplicatedLinear and ColumnParallelLinear(input_size, output_size, bias):
// `{kind}_k{input_size}_n{output_size}_{bias|nobias}_{dtype}`.
KindSpec in_out_linear_kind(const std::string& kind, const std::string& cls) {
  KindSpec k;
  k.kind = kind;
  k.template_name = "linear";
  k.class_name = cls;
  k.params = {{"input_size", ParamType::kInt}, {"output_size", ParamType::kInt}, {"bias", ParamType::kBool}};
  k.name = [kind](const Params& p, const std::string& dt) {
    return kind + "_k" + i2s(I(p, "input_size")) + "_n" + i2s(I(p, "output_size")) + "_" + bias_word(B(p, "bias")) + "_" + dt;
  };
  k.production = [cls](const Params&) { return "vllm.model_executor.layers.linear." + cls; };
  k.placeholders = [cls](const Params& p) {
    int64_t in = I(p, "input_size"), out = I(p, "output_size");
    bool bias = B(p, "bias");
    return linear_placeholders(cls, "int64_t input_size, int64_t output_size, bool bias",
                               "input_size == " + i2s(in) + " && output_size == " + i2s(out) + " && bias == " + b2s(bias),
                               in, out, bias, true);
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

KindSpec qkv_kind() {
  KindSpec k;
  k.kind = "qkv_parallel_linear";
  k.template_name = "linear";
  k.class_name = "QKVParallelLinear";
  k.params = {{"hidden_size", ParamType::kInt}, {"head_size", ParamType::kInt}, {"num_heads", ParamType::kInt},
              {"num_kv_heads", ParamType::kInt}, {"bias", ParamType::kBool}};
  k.name = [](const Params& p, const std::string& dt) {
    return "qkv_parallel_linear_h" + i2s(I(p, "hidden_size")) + "_d" + i2s(I(p, "head_size")) + "_hq" +
           i2s(I(p, "num_heads")) + "_hkv" + i2s(I(p, "num_kv_heads")) + "_" + bias_word(B(p, "bias")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm.model_executor.layers.linear.QKVParallelLinear"; };
  k.placeholders = [cls = k.class_name](const Params& p) {
    int64_t h = I(p, "hidden_size"), d = I(p, "head_size"), hq = I(p, "num_heads"), hkv = I(p, "num_kv_heads");
    bool bias = B(p, "bias");
    return linear_placeholders(
        cls,
        "int64_t hidden_size, int64_t head_size, int64_t total_num_heads, int64_t total_num_kv_heads, bool bias",
        "hidden_size == " + i2s(h) + " && head_size == " + i2s(d) + " && total_num_heads == " + i2s(hq) +
            " && total_num_kv_heads == " + i2s(hkv) + " && bias == " + b2s(bias),
        h, (hq + 2 * hkv) * d, bias, true);
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

KindSpec merged_kind() {
  KindSpec k;
  k.kind = "merged_column_parallel_linear";
  k.template_name = "linear";
  k.class_name = "MergedColumnParallelLinear";
  k.params = {{"input_size", ParamType::kInt}, {"n0", ParamType::kInt}, {"n1", ParamType::kInt}, {"bias", ParamType::kBool}};
  k.name = [](const Params& p, const std::string& dt) {
    return "merged_column_parallel_linear_k" + i2s(I(p, "input_size")) + "_n" + i2s(I(p, "n0")) + "_" + i2s(I(p, "n1")) +
           "_" + bias_word(B(p, "bias")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm.model_executor.layers.linear.MergedColumnParallelLinear"; };
  k.placeholders = [cls = k.class_name](const Params& p) {
    int64_t in = I(p, "input_size"), n0 = I(p, "n0"), n1 = I(p, "n1");
    bool bias = B(p, "bias");
    return linear_placeholders(cls,
                               "int64_t input_size, std::vector<int64_t> output_sizes, bool bias",
                               "input_size == " + i2s(in) + " && output_sizes == std::vector<int64_t>{" + i2s(n0) + ", " +
                                   i2s(n1) + "} && bias == " + b2s(bias),
                               in, n0 + n1, bias, true);
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

KindSpec row_kind() { return in_out_linear_kind("row_parallel_linear", "RowParallelLinear"); }

KindSpec lm_head_kind() {
  KindSpec k;
  k.kind = "parallel_lm_head";
  k.template_name = "linear";
  k.class_name = "ParallelLMHead";
  k.params = {{"num_embeddings", ParamType::kInt}, {"embedding_dim", ParamType::kInt}};
  k.name = [](const Params& p, const std::string& dt) {
    return "parallel_lm_head_v" + i2s(I(p, "num_embeddings")) + "_h" + i2s(I(p, "embedding_dim")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm.model_executor.layers.vocab_parallel_embedding.ParallelLMHead"; };
  k.placeholders = [cls = k.class_name](const Params& p) {
    int64_t v = I(p, "num_embeddings"), h = I(p, "embedding_dim");
    return linear_placeholders(cls, "int64_t num_embeddings, int64_t embedding_dim",
                               "num_embeddings == " + i2s(v) + " && embedding_dim == " + i2s(h), h, v, false, false);
  };
  k.cases = [](const Params&) { return token_cases(true); };
  return k;
}

// `_sw{W}` when a sliding window of W keys applies (0: none; Note [Sliding window] in
// fk/tasks/attention.h). Kinds without the parameter spell nothing.
std::string window_spelling(const Params& p) {
  auto it = p.find("sliding_window");
  if (it == p.end()) return "";
  const int64_t w = std::get<int64_t>(it->second);
  if (w < 0) throw GenError{"sliding_window must be >= 0 (0: none), got " + i2s(w)};
  return w > 0 ? "_sw" + i2s(w) : "";
}

// `_scale{s}` when the softmax scale is not head_dim^-0.5 (Gemma's query_pre_attn_scalar), then
// `_cap{c}` under attention-logit soft-capping (Note [Decode window and soft-capping]).
std::string attn_extra_spelling(const Params& p) {
  std::string out;
  const double s = F(p, "softmax_scale"), standard = 1.0 / std::sqrt(double(I(p, "head_dim")));
  if (std::fabs(s - standard) > 1e-12 * standard) out += "_scale" + nf(s);
  const double c = F(p, "softcap");
  if (c < 0) throw GenError{"softcap must be >= 0 (0: none), got " + cf(c)};
  if (c > 0) out += "_cap" + nf(c);
  auto sinks = p.find("sinks");
  if (sinks != p.end() && std::get<bool>(sinks->second)) out += "_sinks";
  return out;
}

KindSpec attn_kind(bool prefill) {
  KindSpec k;
  k.kind = k.template_name = prefill ? "flash_attn_prefill" : "flash_attn_decode";
  k.class_name = prefill ? "FlashAttnPrefill" : "FlashAttnDecode";
  k.params = {{"num_heads", ParamType::kInt},       {"num_kv_heads", ParamType::kInt},
              {"head_dim", ParamType::kInt},        {"softmax_scale", ParamType::kFloat},
              {"sliding_window", ParamType::kInt},  {"softcap", ParamType::kFloat},
              {"sinks", ParamType::kBool},          {"max_position", ParamType::kInt, /*is_constant=*/false}};
  k.name = [prefill](const Params& p, const std::string& dt) {
    return std::string(prefill ? "flash_attn_prefill" : "flash_attn_decode") + "_hq" + i2s(I(p, "num_heads")) + "_hkv" +
           i2s(I(p, "num_kv_heads")) + "_d" + i2s(I(p, "head_dim")) + (prefill ? "_causal" : "") + window_spelling(p) +
           attn_extra_spelling(p) + "_" + dt;
  };
  k.production = [prefill](const Params&) {
    return std::string(prefill ? "vllm.vllm_flash_attn.flash_attn_varlen_func" : "vllm.vllm_flash_attn.flash_attn_with_kvcache");
  };
  k.placeholders = [](const Params& p) {
    return PH{{"num_heads", i2s(I(p, "num_heads"))}, {"num_kv_heads", i2s(I(p, "num_kv_heads"))},
              {"head_dim", i2s(I(p, "head_dim"))}, {"softmax_scale", cf(F(p, "softmax_scale"))},
              {"sliding_window", i2s(I(p, "sliding_window"))}, {"softcap", cf(F(p, "softcap"))},
              {"sinks", b2s(B(p, "sinks"))}};
  };
  k.cases = [prefill](const Params& p) {
    return prefill ? prefill_attn_cases(I(p, "max_position")) : decode_attn_cases(I(p, "max_position"));
  };
  // Note [Served constants]: the kernels' static_asserts, said at generate time instead
  // (fk/kernels/flash_decode.cuh, flash_prefill.cuh; cuDNN's SDPA for plain prefill).
  k.served = [prefill](const Params& p, const std::string& dtype) -> std::string {
    const int64_t hq = I(p, "num_heads"), hkv = I(p, "num_kv_heads"), d = I(p, "head_dim");
    if (hkv <= 0 || hq % hkv != 0)
      return "num_heads " + i2s(hq) + " is not a multiple of num_kv_heads " + i2s(hkv) + " (grouped-query attention needs one)";
    if (d % 8 != 0 || d > 256) return "head_dim " + i2s(d) + ": attention kernels serve multiples of 8 up to 256";
    const bool own = prefill && (F(p, "softcap") > 0 || B(p, "sinks"));
    if (own && d != 64 && d != 128 && d != 192 && d != 256)
      return "head_dim " + i2s(d) + ": prefill with soft-capping or sinks (own kernel, fk/kernels/flash_prefill.cuh) serves "
             "head_dim 64, 128, 192 or 256";
    if (own && dtype != "bfloat16") return "dtype " + dtype + ": prefill with soft-capping or sinks serves bfloat16 only";
    return "";
  };
  return k;
}

KindSpec store_kvcache_kind() {
  KindSpec k;
  k.kind = k.template_name = "store_kvcache";
  k.class_name = "StoreKVCache";
  k.params = {{"num_kv_heads", ParamType::kInt}, {"head_dim", ParamType::kInt}};
  k.name = [](const Params& p, const std::string& dt) {
    return "store_kvcache_hkv" + i2s(I(p, "num_kv_heads")) + "_d" + i2s(I(p, "head_dim")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm._custom_ops.reshape_and_cache_flash"; };
  k.placeholders = [](const Params& p) {
    return PH{{"num_kv_heads", i2s(I(p, "num_kv_heads"))}, {"head_dim", i2s(I(p, "head_dim"))}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

KindSpec replicated_kind() { return in_out_linear_kind("replicated_linear", "ReplicatedLinear"); }

KindSpec column_kind() { return in_out_linear_kind("column_parallel_linear", "ColumnParallelLinear"); }

// --- multi-head latent attention (DeepSeek-V2/V3; docs/task-kinds.md "Multi-head latent attention")

// concat_and_cache_mla: vLLM's op writing [kv_c_normed | k_pe] rows into the latent cache.
KindSpec concat_and_cache_mla_kind() {
  KindSpec k;
  k.kind = k.template_name = "concat_and_cache_mla";
  k.class_name = "ConcatAndCacheMLA";
  k.params = {{"kv_lora_rank", ParamType::kInt}, {"qk_rope_head_dim", ParamType::kInt}};
  k.name = [](const Params& p, const std::string& dt) {
    return "concat_and_cache_mla_kv" + i2s(I(p, "kv_lora_rank")) + "_r" + i2s(I(p, "qk_rope_head_dim")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm._custom_ops.concat_and_cache_mla"; };
  k.placeholders = [](const Params& p) {
    return PH{{"kv_lora_rank", i2s(I(p, "kv_lora_rank"))}, {"qk_rope_head_dim", i2s(I(p, "qk_rope_head_dim"))}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// `_scale{s}` unless s is the standard dim^-0.5.
std::string scale_spelling(double s, int64_t dim) {
  const double standard = 1.0 / std::sqrt(double(dim));
  return std::fabs(s - standard) > 1e-12 * standard ? "_scale" + nf(s) : "";
}

// mla_prefill: the non-absorbed MLA prefill (q and the kv_b_proj-expanded k of qk_head_dim, v of
// v_head_dim, causal, packed varlen); mla_decode: the absorbed decode over the latent cache
// (FlashMLA), whose scale always differs from (kv_lora_rank + rope)^-0.5 and is always spelled.
KindSpec mla_attn_kind(bool prefill) {
  KindSpec k;
  k.kind = k.template_name = prefill ? "mla_prefill" : "mla_decode";
  k.class_name = prefill ? "MLAPrefill" : "MLADecode";
  if (prefill)
    k.params = {{"num_heads", ParamType::kInt},      {"qk_head_dim", ParamType::kInt},
                {"v_head_dim", ParamType::kInt},     {"softmax_scale", ParamType::kFloat},
                {"max_position", ParamType::kInt, /*is_constant=*/false}};
  else
    k.params = {{"num_heads", ParamType::kInt},        {"kv_lora_rank", ParamType::kInt},
                {"qk_rope_head_dim", ParamType::kInt}, {"softmax_scale", ParamType::kFloat},
                {"max_position", ParamType::kInt, /*is_constant=*/false}};
  k.name = [prefill](const Params& p, const std::string& dt) {
    if (!(F(p, "softmax_scale") > 0)) throw GenError{"softmax_scale must be > 0, got " + cf(F(p, "softmax_scale"))};
    if (prefill)
      return "mla_prefill_hq" + i2s(I(p, "num_heads")) + "_dqk" + i2s(I(p, "qk_head_dim")) + "_dv" + i2s(I(p, "v_head_dim")) +
             "_causal" + scale_spelling(F(p, "softmax_scale"), I(p, "qk_head_dim")) + "_" + dt;
    return "mla_decode_hq" + i2s(I(p, "num_heads")) + "_kv" + i2s(I(p, "kv_lora_rank")) + "_r" +
           i2s(I(p, "qk_rope_head_dim")) + "_scale" + nf(F(p, "softmax_scale")) + "_" + dt;
  };
  k.production = [prefill](const Params&) {
    return std::string(prefill ? "vllm MLACommonImpl._forward_prefill (flash_attn_varlen_func, v head dim != qk head dim)"
                               : "vllm FlashMLAImpl._forward_decode (flash_mla_with_kvcache, absorbed latent cache)");
  };
  k.placeholders = [prefill](const Params& p) {
    if (prefill)
      return PH{{"num_heads", i2s(I(p, "num_heads"))}, {"qk_head_dim", i2s(I(p, "qk_head_dim"))},
                {"v_head_dim", i2s(I(p, "v_head_dim"))}, {"softmax_scale", cf(F(p, "softmax_scale"))}};
    return PH{{"num_heads", i2s(I(p, "num_heads"))}, {"kv_lora_rank", i2s(I(p, "kv_lora_rank"))},
              {"qk_rope_head_dim", i2s(I(p, "qk_rope_head_dim"))}, {"softmax_scale", cf(F(p, "softmax_scale"))}};
  };
  k.cases = [prefill](const Params& p) {
    return prefill ? prefill_attn_cases(I(p, "max_position")) : decode_attn_cases(I(p, "max_position"));
  };
  return k;
}

// --- mixture of experts (docs/task-kinds.md "Mixture of experts") ---------------------------

std::string renorm_word(bool b) { return b ? "renorm" : "norenorm"; }

KindSpec topk_softmax_kind() {
  KindSpec k;
  k.kind = k.template_name = "topk_softmax";
  k.class_name = "TopKSoftmax";
  k.params = {{"num_experts", ParamType::kInt}, {"top_k", ParamType::kInt}, {"renormalize", ParamType::kBool}};
  k.name = [](const Params& p, const std::string& dt) {
    return "topk_softmax_e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_" +
           renorm_word(B(p, "renormalize")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm.model_executor.layers.fused_moe.fused_moe.fused_topk (topk_softmax)"; };
  k.placeholders = [](const Params& p) {
    return PH{{"num_experts", i2s(I(p, "num_experts"))}, {"top_k", i2s(I(p, "top_k"))}, {"renormalize", b2s(B(p, "renormalize"))}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// Routing indices are int32 whatever the model dtype: the name ends in _i32.
KindSpec moe_align_kind() {
  KindSpec k;
  k.kind = k.template_name = "moe_align_block_size";
  k.class_name = "MoeAlignBlockSize";
  k.params = {{"num_experts", ParamType::kInt}, {"top_k", ParamType::kInt}};
  k.name = [](const Params& p, const std::string&) {
    return "moe_align_block_size_e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_i32";
  };
  k.production = [](const Params&) { return "vllm.model_executor.layers.fused_moe.moe_align_block_size"; };
  k.placeholders = [](const Params& p) { return PH{{"num_experts", i2s(I(p, "num_experts"))}, {"top_k", i2s(I(p, "top_k"))}}; };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

KindSpec moe_grouped_gemm_kind() {
  KindSpec k;
  k.kind = k.template_name = "moe_grouped_gemm";
  k.class_name = "MoeGroupedGemm";
  k.params = {{"num_experts", ParamType::kInt}, {"top_k", ParamType::kInt},      {"n", ParamType::kInt},
              {"k", ParamType::kInt},           {"per_slot_rows", ParamType::kBool}, {"mul_routed_weight", ParamType::kBool},
              {"bias", ParamType::kBool}};
  k.name = [](const Params& p, const std::string& dt) {
    return "moe_grouped_gemm_e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_n" + i2s(I(p, "n")) + "_k" +
           i2s(I(p, "k")) + (B(p, "per_slot_rows") ? "_perslot" : "") + (B(p, "mul_routed_weight") ? "_weighted" : "") +
           (B(p, "bias") ? "_bias" : "") + "_" + dt;
  };
  k.production = [](const Params&) {
    return "vllm.model_executor.layers.fused_moe.fused_moe.invoke_fused_moe_kernel (fused_moe_kernel)";
  };
  k.placeholders = [](const Params& p) {
    return PH{{"num_experts", i2s(I(p, "num_experts"))}, {"top_k", i2s(I(p, "top_k"))},
              {"n", i2s(I(p, "n"))},                     {"k", i2s(I(p, "k"))},
              {"per_slot_rows", b2s(B(p, "per_slot_rows"))}, {"mul_routed_weight", b2s(B(p, "mul_routed_weight"))},
              {"bias", b2s(B(p, "bias"))}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

KindSpec moe_sum_kind() {
  KindSpec k;
  k.kind = k.template_name = "moe_sum";
  k.class_name = "MoeSum";
  k.params = {{"hidden_size", ParamType::kInt}, {"top_k", ParamType::kInt}};
  k.name = [](const Params& p, const std::string& dt) {
    return "moe_sum_h" + i2s(I(p, "hidden_size")) + "_top" + i2s(I(p, "top_k")) + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm._custom_ops.moe_sum"; };
  k.placeholders = [](const Params& p) { return PH{{"hidden_size", i2s(I(p, "hidden_size"))}, {"top_k", i2s(I(p, "top_k"))}}; };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// grouped_topk: vLLM's grouped_topk (DeepSeek-V2/V3): scores by sigmoid or softmax, plus an
// optional correction bias for the choice, the topk_group best expert groups, then top_k.
KindSpec grouped_topk_kind() {
  KindSpec k;
  k.kind = k.template_name = "grouped_topk";
  k.class_name = "GroupedTopK";
  k.params = {{"num_experts", ParamType::kInt},   {"top_k", ParamType::kInt},
              {"num_expert_group", ParamType::kInt}, {"topk_group", ParamType::kInt},
              {"scoring_func", ParamType::kString}, {"renormalize", ParamType::kBool},
              {"routed_scaling_factor", ParamType::kFloat}, {"correction_bias", ParamType::kBool}};
  k.name = [](const Params& p, const std::string& dt) {
    const std::string& sf = S(p, "scoring_func");
    if (sf != "sigmoid" && sf != "softmax")
      throw GenError{"grouped_topk scoring_func is " + json_quote(sf) + ", expected \"sigmoid\" or \"softmax\""};
    const int64_t e = I(p, "num_experts"), g = I(p, "num_expert_group"), tg = I(p, "topk_group"), top = I(p, "top_k");
    if (g <= 0 || e % g != 0) throw GenError{"grouped_topk: num_expert_group " + i2s(g) + " must divide num_experts " + i2s(e)};
    if (tg < 1 || tg > g) throw GenError{"grouped_topk: topk_group " + i2s(tg) + " must be in [1, " + i2s(g) + "]"};
    if (top < 1 || top > tg * (e / g))
      throw GenError{"grouped_topk: top_k " + i2s(top) + " must be in [1, topk_group * experts per group = " + i2s(tg * (e / g)) + "]"};
    if (!(F(p, "routed_scaling_factor") > 0))
      throw GenError{"grouped_topk: routed_scaling_factor must be > 0, got " + cf(F(p, "routed_scaling_factor"))};
    return "grouped_topk_e" + i2s(e) + "_top" + i2s(top) + "_g" + i2s(g) + "_tg" + i2s(tg) + "_" + sf + "_" +
           renorm_word(B(p, "renormalize")) + "_rs" + nf(F(p, "routed_scaling_factor")) +
           (B(p, "correction_bias") ? "_bias" : "") + "_" + dt;
  };
  k.production = [](const Params&) { return "vllm.model_executor.layers.fused_moe.fused_moe.grouped_topk"; };
  k.placeholders = [](const Params& p) {
    return PH{{"num_experts", i2s(I(p, "num_experts"))},
              {"top_k", i2s(I(p, "top_k"))},
              {"num_expert_group", i2s(I(p, "num_expert_group"))},
              {"topk_group", i2s(I(p, "topk_group"))},
              {"sigmoid", b2s(S(p, "scoring_func") == "sigmoid")},
              {"renormalize", b2s(B(p, "renormalize"))},
              {"routed_scaling_factor", cf(F(p, "routed_scaling_factor"))},
              {"correction_bias", b2s(B(p, "correction_bias"))}};
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// --- composite kinds (Note [Composite kinds], docs/task-kinds.md "Composite kinds") ----------

// Whole decode steps and prefills of attention-bearing composites: sequences of 2048 tokens
// (fewer when max_position is smaller: the length is clipped to it). Under a sliding window the
// decode steps and the single-sequence prefill use twice the window when that is longer, so the
// window masks most of the sequence (the 8-sequence prefill stays at 2048: 8 long prompts of a
// multi-head model outgrow the whole-model reference's memory).
std::vector<ShapeCase> step_cases(int64_t max_position, int64_t window) {
  const int64_t len = std::min<int64_t>(2048, max_position);
  const int64_t wlen = std::min<int64_t>(std::max<int64_t>(2048, 2 * window), max_position);
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 8, 32, 64})
    out.push_back({"b" + i2s(b) + "_kv" + i2s(wlen), "decode", {{"batch", b}, {"kv_len", wlen}}, {k++, wlen}});
  for (int64_t b : {1, 8}) {
    const int64_t l = b == 1 ? wlen : len;
    out.push_back({"b" + i2s(b) + "_s" + i2s(l), "prefill", {{"batch", b}, {"seq_len", l}}, {k++, l}});
  }
  return out;
}

using PS = std::vector<ParamSpec>;

PS concat(PS a, const PS& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Parameters shared by the attention-bearing composites, in placeholder order.
PS qkv_rope_params() {
  return {{"hidden_size", ParamType::kInt},          {"num_heads", ParamType::kInt},
          {"num_kv_heads", ParamType::kInt},         {"head_dim", ParamType::kInt},
          {"qkv_bias", ParamType::kBool},            {"qk_norm", ParamType::kBool},
          {"rms_norm_eps", ParamType::kFloat},       {"rotary_dim", ParamType::kInt},
          {"max_position", ParamType::kInt},         {"rope_theta", ParamType::kFloat},
          {"is_neox_style", ParamType::kBool},       {"scaling_type", ParamType::kString},
          {"scaling_factor", ParamType::kFloat},     {"low_freq_factor", ParamType::kFloat},
          {"high_freq_factor", ParamType::kFloat},   {"original_max_position", ParamType::kInt},
          {"beta_fast", ParamType::kFloat},          {"beta_slow", ParamType::kFloat}};
}
PS attention_params() {
  return concat(qkv_rope_params(), {{"o_proj_bias", ParamType::kBool}, {"sliding_window", ParamType::kInt},
                                    {"softmax_scale", ParamType::kFloat}, {"softcap", ParamType::kFloat},
                                    {"sinks", ParamType::kBool}});
}
PS layer_params() {
  return concat(attention_params(), {{"intermediate_size", ParamType::kInt}, {"mlp_bias", ParamType::kBool}});
}

// A layer pattern as the C++ string literal of one letter per layer: 'S' for
// "sliding_attention", 'F' for "full_attention" (HF layer_types, held comma-joined).
std::string layer_pattern(const std::string& layer_types) {
  std::string out;
  for (const std::string& t : split_list(layer_types)) {
    if (t == "sliding_attention") out += 'S';
    else if (t == "full_attention") out += 'F';
    else throw GenError{"layer_types item " + i2s(static_cast<int64_t>(out.size())) + " is " + json_quote(t) +
                        ", expected \"sliding_attention\" or \"full_attention\""};
  }
  return out;
}
// The pattern as names spell it: the shortest repeating unit and its count (`SFx12`), or the whole
// pattern when it does not repeat.
std::string layer_pattern_spelling(const std::string& pat) {
  for (size_t unit = 1; unit <= pat.size(); ++unit) {
    if (pat.size() % unit) continue;
    bool ok = true;
    for (size_t i = unit; i < pat.size() && ok; ++i) ok = pat[i] == pat[i - unit];
    if (ok) return pat.substr(0, unit) + "x" + i2s(static_cast<int64_t>(pat.size() / unit));
  }
  return pat;
}
std::string string_param_placeholder(const std::string& name, const std::string& value) {
  if (name == "layer_types") return cpp_string_literal(layer_pattern(value));
  return cpp_string_literal(value);
}

// A composite kind's own placeholders: every constant parameter, in order, as a C++ constant
// (the only string parameter, scaling_type, as its enumerator). With `eps_needs_qk_norm`
// rms_norm_eps is 0 unless qk_norm is set (nothing else reads it there, like unused rope scaling
// constants), so configs that differ only in it share the task, as the name promises.
std::function<PH(const Params&)> constant_placeholders(PS params, bool eps_needs_qk_norm) {
  return [params, eps_needs_qk_norm](const Params& p) {
    PH out;
    for (const auto& ps : params) {
      if (!ps.is_constant) continue;
      const char* n = ps.name.c_str();
      switch (ps.type) {
        case ParamType::kInt: out.emplace_back(ps.name, i2s(I(p, n))); break;
        case ParamType::kBool: out.emplace_back(ps.name, b2s(B(p, n))); break;
        case ParamType::kString:
          out.emplace_back(ps.name, ps.name == "scaling_type" ? rope_scaling_enum(S(p, n)) : string_param_placeholder(ps.name, S(p, n)));
          break;
        case ParamType::kFloat:
          out.emplace_back(ps.name, eps_needs_qk_norm && ps.name == "rms_norm_eps" && !B(p, "qk_norm") ? "0" : cf(F(p, n)));
          break;
      }
    }
    return out;
  };
}

std::string heads_spelling(const Params& p) {
  return "hq" + i2s(I(p, "num_heads")) + "_hkv" + i2s(I(p, "num_kv_heads")) + "_d" + i2s(I(p, "head_dim"));
}
// The heads of a kind that runs attention: then _sw{W} under a sliding window, _scale{s} for a
// softmax scale other than head_dim^-0.5 and _cap{c} under soft-capping.
std::string attn_heads_spelling(const Params& p) { return heads_spelling(p) + window_spelling(p) + attn_extra_spelling(p); }
std::string qk_norm_spelling(const Params& p) { return B(p, "qk_norm") ? "_qknorm_eps" + nf(F(p, "rms_norm_eps")) : ""; }
// h{hidden}_i{intermediate}_hq_hkv_d_eps_{rope}_qkv{bias}_o{bias}_mlp{bias}[_qknorm]: a decoder layer's constants.
std::string layer_spelling(const Params& p) {
  return "h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_" + attn_heads_spelling(p) + "_eps" +
         nf(F(p, "rms_norm_eps")) + "_" + rope_spelling(p, "rope_theta") + "_qkv" + bias_word(B(p, "qkv_bias")) + "_o" +
         bias_word(B(p, "o_proj_bias")) + "_mlp" + bias_word(B(p, "mlp_bias")) + (B(p, "qk_norm") ? "_qknorm" : "");
}

// Slots, by the production attribute names (Note [Composite kinds]).
const SlotSpec kQKVProj{"qkv_proj", "QKVParallelLinear", ""};
const SlotSpec kQKNorm{"qk_norm", "QKNorm|GemmaQKNorm", "fk::tasks::NoQKNorm"};
const SlotSpec kRotaryEmb{"rotary_emb", "RotaryEmbedding", ""};
const SlotSpec kKVCacheWrite{"kv_cache_write", "StoreKVCache", ""};
const SlotSpec kAttnPrefill{"attn_prefill", "FlashAttnPrefill", ""};
const SlotSpec kAttnDecode{"attn_decode", "FlashAttnDecode", ""};
const SlotSpec kOProj{"o_proj", "RowParallelLinear", ""};
const SlotSpec kGateUpProj{"gate_up_proj", "MergedColumnParallelLinear", ""};
const SlotSpec kActFn{"act_fn", "SiluAndMul", ""};
const SlotSpec kGeluActFn{"act_fn", "GeluAndMul", ""};
const SlotSpec kDownProj{"down_proj", "RowParallelLinear", ""};

KindSpec composite_kind(const std::string& kind, int level, const std::string& cls, const std::string& production,
                        std::vector<SlotSpec> slots, PS params, bool eps_needs_qk_norm) {
  KindSpec k;
  k.kind = k.template_name = kind;
  k.level = level;
  k.class_name = cls;
  k.slots = std::move(slots);
  k.params = params;
  k.production = [production](const Params&) { return production; };
  k.placeholders = [ph = constant_placeholders(params, eps_needs_qk_norm), cls](const Params& p) {
    PH out = ph(p);
    out.emplace_back("class_name", cls);
    return out;
  };
  k.cases = [](const Params& p) {
    return step_cases(I(p, "max_position"), p.count("sliding_window") ? I(p, "sliding_window") : 0);
  };
  return k;
}

KindSpec qkv_rope_cache_kind() {
  KindSpec k = composite_kind("qkv_rope_cache", 2, "QKVRopeCache",
                              "vllm LlamaAttention.forward (qkv_proj, q/k norm, rotary_emb) + Attention KV-cache write",
                              {kQKVProj, kQKNorm, kRotaryEmb, kKVCacheWrite}, qkv_rope_params(), true);
  k.name = [](const Params& p, const std::string& dt) {
    return "qkv_rope_cache_h" + i2s(I(p, "hidden_size")) + "_" + heads_spelling(p) + "_" + rope_spelling(p, "rope_theta") +
           "_" + bias_word(B(p, "qkv_bias")) + qk_norm_spelling(p) + "_" + dt;
  };
  return k;
}

KindSpec attention_o_proj_kind() {
  KindSpec k = composite_kind("attention_o_proj", 2, "AttentionOProj",
                              "vllm Attention.forward (flash-attn varlen prefill / paged decode) + LlamaAttention.o_proj",
                              {kAttnPrefill, kAttnDecode, kOProj},
                              {{"num_heads", ParamType::kInt}, {"num_kv_heads", ParamType::kInt}, {"head_dim", ParamType::kInt},
                               {"hidden_size", ParamType::kInt}, {"o_proj_bias", ParamType::kBool},
                               {"sliding_window", ParamType::kInt}, {"softmax_scale", ParamType::kFloat},
                               {"softcap", ParamType::kFloat}, {"sinks", ParamType::kBool},
                               {"max_position", ParamType::kInt, /*is_constant=*/false}},
                              false);
  k.name = [](const Params& p, const std::string& dt) {
    return "attention_o_proj_" + attn_heads_spelling(p) + "_h" + i2s(I(p, "hidden_size")) + "_" + bias_word(B(p, "o_proj_bias")) +
           "_" + dt;
  };
  return k;
}

// gate_up_silu, llama_mlp and gemma_mlp (GELU-tanh gating; templates/llama_mlp): token cases
// like the L1 linear kinds.
KindSpec mlp_kind(bool down, bool gemma = false) {
  std::string kind = gemma ? "gemma_mlp" : down ? "llama_mlp" : "gate_up_silu";
  KindSpec k = composite_kind(
      kind, 2, gemma ? "GemmaMLP" : down ? "LlamaMLP" : "GateUpSilu",
      gemma ? "vllm.model_executor.models.gemma2.Gemma2MLP / gemma3.Gemma3MLP"
            : down ? "vllm.model_executor.models.llama.LlamaMLP" : "vllm LlamaMLP.gate_up_proj + SiluAndMul",
      down ? std::vector<SlotSpec>{kGateUpProj, gemma ? kGeluActFn : kActFn, kDownProj} : std::vector<SlotSpec>{kGateUpProj, kActFn},
      {{"hidden_size", ParamType::kInt}, {"intermediate_size", ParamType::kInt}, {"mlp_bias", ParamType::kBool}}, false);
  k.template_name = gemma ? "llama_mlp" : kind;
  if (down)
    k.placeholders = [ph = k.placeholders, gemma](const Params& p) {
      PH out = ph(p);
      out.emplace_back("hidden_act", gemma ? "gelu_pytorch_tanh" : "silu");
      return out;
    };
  k.name = [kind](const Params& p, const std::string& dt) {
    return kind + "_h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_" +
           bias_word(B(p, "mlp_bias")) + "_" + dt;
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// llama_attention and gemma_attention (Gemma 2/3: GemmaRMSNorm q/k norm, query_pre_attn_scalar,
// soft-capping; the same children) share templates/llama_attention.
KindSpec llama_attention_kind(bool gemma = false) {
  std::string kind = gemma ? "gemma_attention" : "llama_attention";
  KindSpec k = composite_kind(kind, 2, gemma ? "GemmaAttention" : "LlamaAttention",
                              gemma ? "vllm.model_executor.models.gemma3.Gemma3Attention / gemma2.Gemma2Attention"
                                    : "vllm.model_executor.models.llama.LlamaAttention",
                              {kQKVProj, kQKNorm, kRotaryEmb, kKVCacheWrite, kAttnPrefill, kAttnDecode, kOProj},
                              attention_params(), true);
  k.template_name = "llama_attention";
  k.name = [kind](const Params& p, const std::string& dt) {
    return kind + "_h" + i2s(I(p, "hidden_size")) + "_" + attn_heads_spelling(p) + "_" + rope_spelling(p, "rope_theta") +
           "_qkv" + bias_word(B(p, "qkv_bias")) + "_o" + bias_word(B(p, "o_proj_bias")) + qk_norm_spelling(p) + "_" + dt;
  };
  return k;
}

KindSpec llama_decoder_layer_kind() {
  KindSpec k = composite_kind("llama_decoder_layer", 3, "LlamaDecoderLayer",
                              "vllm.model_executor.models.llama.LlamaDecoderLayer",
                              {{"input_layernorm", "RMSNorm", ""},
                               {"self_attn", "LlamaAttention", ""},
                               {"post_attention_layernorm", "RMSNorm", ""},
                               {"mlp", "LlamaMLP", ""}},
                              layer_params(), false);
  k.name = [](const Params& p, const std::string& dt) { return "llama_decoder_layer_" + layer_spelling(p) + "_" + dt; };
  return k;
}

// The L4 kinds: embed_tokens, the decoder layer (of class `layer_class`), norm, lm_head; named
// l{layers}_v{vocab}_{tied|untied}_{the layer's spelling}.
KindSpec causal_lm_kind(const std::string& kind, const std::string& cls, const std::string& production,
                        const std::string& layer_class, const PS& layer_ps, std::string (*spelling)(const Params&)) {
  KindSpec k = composite_kind(kind, 4, cls, production,
                              {{"embed_tokens", "VocabParallelEmbedding", ""},
                               {"layers", layer_class, ""},
                               {"norm", "RMSNorm", ""},
                               {"lm_head", "ParallelLMHead", ""}},
                              concat({{"num_hidden_layers", ParamType::kInt},
                                      {"vocab_size", ParamType::kInt},
                                      {"tie_word_embeddings", ParamType::kBool}},
                                     layer_ps),
                              false);
  k.name = [kind, spelling](const Params& p, const std::string& dt) {
    return kind + "_l" + i2s(I(p, "num_hidden_layers")) + "_v" + i2s(I(p, "vocab_size")) + "_" +
           (B(p, "tie_word_embeddings") ? "tied" : "untied") + "_" + spelling(p) + "_" + dt;
  };
  return k;
}

KindSpec llama_for_causal_lm_kind() {
  return causal_lm_kind("llama_for_causal_lm", "LlamaForCausalLM", "vllm.model_executor.models.llama.LlamaForCausalLM",
                        "LlamaDecoderLayer", layer_params(), layer_spelling);
}

// Gemma 2/3 decoder layer: GemmaRMSNorm around attention and around the MLP (four norms).
KindSpec gemma_decoder_layer_kind() {
  KindSpec k = composite_kind("gemma_decoder_layer", 3, "GemmaDecoderLayer",
                              "vllm.model_executor.models.gemma3.Gemma3DecoderLayer / gemma2.Gemma2DecoderLayer",
                              {{"input_layernorm", "GemmaRMSNorm", ""},
                               {"self_attn", "GemmaAttention", ""},
                               {"post_attention_layernorm", "GemmaRMSNorm", ""},
                               {"pre_feedforward_layernorm", "GemmaRMSNorm", ""},
                               {"mlp", "GemmaMLP", ""},
                               {"post_feedforward_layernorm", "GemmaRMSNorm", ""}},
                              layer_params(), false);
  k.source_template_name = "llama_decoder_layer";
  k.name = [](const Params& p, const std::string& dt) { return "gemma_decoder_layer_" + layer_spelling(p) + "_" + dt; };
  return k;
}

// Gemma 2/3 model: scaled embedding, sliding-window layers (window local_sliding_window, rope
// base local_rope_theta, no rope scaling) between full-attention layers (the layer constants:
// sliding_window 0, rope_theta and its scaling); layer i is a full one when
// (i + 1) % full_every == 0. final_softcap > 0: logits soft-capped (Gemma 2).
KindSpec gemma_for_causal_lm_kind() {
  PS ps = concat({{"num_hidden_layers", ParamType::kInt}, {"vocab_size", ParamType::kInt}, {"tie_word_embeddings", ParamType::kBool}},
                 layer_params());
  ps = concat(ps, {{"local_sliding_window", ParamType::kInt}, {"local_rope_theta", ParamType::kFloat},
                   {"full_every", ParamType::kInt}, {"final_softcap", ParamType::kFloat}});
  KindSpec k = composite_kind("gemma_for_causal_lm", 4, "GemmaForCausalLM",
                              "vllm.model_executor.models.gemma3.Gemma3ForCausalLM / gemma2.Gemma2ForCausalLM",
                              {{"embed_tokens", "ScaledWordEmbedding", ""},
                               {"sliding_layers", "GemmaDecoderLayer", ""},
                               {"full_layers", "GemmaDecoderLayer", ""},
                               {"norm", "GemmaRMSNorm", ""},
                               {"lm_head", "ParallelLMHead", ""}},
                              ps, false);
  k.source_template_name = "llama_for_causal_lm";
  k.name = [](const Params& p, const std::string& dt) {
    const int64_t every = I(p, "full_every"), w = I(p, "local_sliding_window");
    if (every < 1) throw GenError{"full_every must be >= 1, got " + i2s(every)};
    if (w < 0) throw GenError{"local_sliding_window must be >= 0 (0: none), got " + i2s(w)};
    const double cap = F(p, "final_softcap");
    return "gemma_for_causal_lm_l" + i2s(I(p, "num_hidden_layers")) + "_v" + i2s(I(p, "vocab_size")) + "_" +
           (B(p, "tie_word_embeddings") ? "tied" : "untied") + "_" + layer_spelling(p) + "_local" +
           (w > 0 ? "_sw" + i2s(w) : "") + "_base" + nf(F(p, "local_rope_theta")) + "_every" + i2s(every) +
           (cap > 0 ? "_fcap" + nf(cap) : "") + "_" + dt;
  };
  k.cases = [](const Params& p) { return step_cases(I(p, "max_position"), I(p, "local_sliding_window")); };
  return k;
}

// The MoE composites: the expert constants every one of them spells.
// swiglu_limit > 0: the experts' activation is SwigluOAIAndMul with that clamp (gpt-oss), else
// SiluAndMul; expert_bias: the expert GEMMs add per-expert biases.
PS moe_params() {
  return {{"hidden_size", ParamType::kInt}, {"moe_intermediate_size", ParamType::kInt},
          {"num_experts", ParamType::kInt}, {"top_k", ParamType::kInt},
          {"swiglu_limit", ParamType::kFloat}, {"expert_bias", ParamType::kBool}};
}
// `_swigluoai{limit}` and `_ebias` only when set, so the Mixtral/Qwen3 names are unchanged.
std::string expert_act_spelling(const Params& p) {
  const double lim = F(p, "swiglu_limit");
  if (lim < 0) throw GenError{"swiglu_limit must be >= 0 (0: SiluAndMul), got " + cf(lim)};
  return (lim > 0 ? "_swigluoai" + nf(lim) : "") + (B(p, "expert_bias") ? "_ebias" : "");
}
std::string moe_spelling(const Params& p) {
  return "e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_h" + i2s(I(p, "hidden_size")) + "_i" +
         i2s(I(p, "moe_intermediate_size")) + expert_act_spelling(p);
}
const SlotSpec kMoeAlign{"moe_align", "MoeAlignBlockSize", ""};
const SlotSpec kMoeActFn{"act_fn", "SiluAndMul|SwigluOAIAndMul", ""};
const SlotSpec kMoeW13{"w13", "MoeGroupedGemm", ""};
const SlotSpec kMoeW2{"w2", "MoeGroupedGemm", ""};
const SlotSpec kMoeSum{"moe_sum", "MoeSum", ""};

KindSpec fused_experts_kind() {
  KindSpec k = composite_kind("fused_experts", 2, "FusedExperts", "vllm.model_executor.layers.fused_moe.fused_moe.fused_experts",
                              {kMoeAlign, kMoeW13, kMoeActFn, kMoeW2, kMoeSum}, moe_params(), false);
  k.name = [](const Params& p, const std::string& dt) { return "fused_experts_" + moe_spelling(p) + "_" + dt; };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

PS sparse_moe_params() { return concat(moe_params(), {{"renormalize", ParamType::kBool}, {"router_bias", ParamType::kBool}}); }
std::string sparse_moe_spelling(const Params& p) {
  return moe_spelling(p) + "_" + renorm_word(B(p, "renormalize")) + (B(p, "router_bias") ? "_rbias" : "");
}

KindSpec sparse_moe_block_kind() {
  KindSpec k = composite_kind("sparse_moe_block", 2, "SparseMoeBlock",
                              "vllm MixtralMoE / Qwen3MoeSparseMoeBlock (ReplicatedLinear gate + FusedMoE)",
                              {{"gate", "ReplicatedLinear", ""}, {"router", "TopKSoftmax", ""}, {"experts", "FusedExperts", ""}},
                              sparse_moe_params(), false);
  k.name = [](const Params& p, const std::string& dt) { return "sparse_moe_block_" + sparse_moe_spelling(p) + "_" + dt; };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// The MoE decoder layer: attention constants as llama_decoder_layer, the MLP ones of sparse_moe_block.
PS moe_layer_params() {
  return concat(attention_params(), {{"moe_intermediate_size", ParamType::kInt}, {"num_experts", ParamType::kInt},
                                     {"top_k", ParamType::kInt}, {"renormalize", ParamType::kBool},
                                     {"swiglu_limit", ParamType::kFloat}, {"expert_bias", ParamType::kBool},
                                     {"router_bias", ParamType::kBool}});
}
std::string moe_layer_spelling(const Params& p) {
  return "h" + i2s(I(p, "hidden_size")) + "_e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_i" +
         i2s(I(p, "moe_intermediate_size")) + expert_act_spelling(p) + "_" + renorm_word(B(p, "renormalize")) +
         (B(p, "router_bias") ? "_rbias" : "") + "_" + attn_heads_spelling(p) + "_eps" +
         nf(F(p, "rms_norm_eps")) + "_" + rope_spelling(p, "rope_theta") + "_qkv" + bias_word(B(p, "qkv_bias")) + "_o" +
         bias_word(B(p, "o_proj_bias")) + (B(p, "qk_norm") ? "_qknorm" : "");
}

KindSpec moe_decoder_layer_kind() {
  KindSpec k = composite_kind("moe_decoder_layer", 3, "MoeDecoderLayer",
                              "vllm MixtralDecoderLayer / Qwen3MoeDecoderLayer",
                              {{"input_layernorm", "RMSNorm", ""},
                               {"self_attn", "LlamaAttention", ""},
                               {"post_attention_layernorm", "RMSNorm", ""},
                               {"mlp", "SparseMoeBlock", ""}},
                              moe_layer_params(), false);
  k.name = [](const Params& p, const std::string& dt) { return "moe_decoder_layer_" + moe_layer_spelling(p) + "_" + dt; };
  return k;
}

KindSpec moe_for_causal_lm_kind() {
  return causal_lm_kind("moe_for_causal_lm", "MoeForCausalLM", "vllm MixtralForCausalLM / Qwen3MoeForCausalLM",
                        "MoeDecoderLayer", moe_layer_params(), moe_layer_spelling);
}

// gpt-oss model: MoE decoder layers of two variants, sliding-window (window local_sliding_window)
// and full attention (the layer constants: sliding_window 0), in the order HF's layer_types lists
// them (a string parameter, spelled `_layers{pattern}`: S sliding, F full, `SFx12` for twelve SF).
KindSpec gpt_oss_for_causal_lm_kind() {
  PS ps = concat({{"num_hidden_layers", ParamType::kInt}, {"vocab_size", ParamType::kInt}, {"tie_word_embeddings", ParamType::kBool}},
                 moe_layer_params());
  ps = concat(ps, {{"local_sliding_window", ParamType::kInt}, {"layer_types", ParamType::kString}});
  KindSpec k = composite_kind("gpt_oss_for_causal_lm", 4, "GptOssForCausalLM", "vllm.model_executor.models.gpt_oss.GptOssForCausalLM",
                              {{"embed_tokens", "VocabParallelEmbedding", ""},
                               {"sliding_layers", "MoeDecoderLayer", ""},
                               {"full_layers", "MoeDecoderLayer", ""},
                               {"norm", "RMSNorm", ""},
                               {"lm_head", "ParallelLMHead", ""}},
                              ps, false);
  k.source_template_name = "llama_for_causal_lm";
  k.name = [](const Params& p, const std::string& dt) {
    const int64_t w = I(p, "local_sliding_window"), layers = I(p, "num_hidden_layers");
    if (w < 0) throw GenError{"local_sliding_window must be >= 0 (0: none), got " + i2s(w)};
    const std::string pat = layer_pattern(S(p, "layer_types"));
    if (static_cast<int64_t>(pat.size()) != layers)
      throw GenError{"layer_types lists " + i2s(static_cast<int64_t>(pat.size())) + " layers, num_hidden_layers is " + i2s(layers)};
    return "gpt_oss_for_causal_lm_l" + i2s(layers) + "_v" + i2s(I(p, "vocab_size")) + "_" +
           (B(p, "tie_word_embeddings") ? "tied" : "untied") + "_" + moe_layer_spelling(p) +
           (w > 0 ? "_sw" + i2s(w) : "") + "_layers" + layer_pattern_spelling(pat) + "_" + dt;
  };
  k.cases = [](const Params& p) { return step_cases(I(p, "max_position"), I(p, "local_sliding_window")); };
  return k;
}

// --- DeepSeek-V2/V3 composites (docs/task-kinds.md "Multi-head latent attention") ----------

// The MLA attention constants (rope as the other attention composites: rotary_dim is the rope
// head dim). Spelled h{hidden}_hq{H}_q{q_lora}_kv{kv_lora}_nope{P}_rope{R}_v{V}_eps_{rope}[_scale]_{bias}.
PS mla_params() {
  return {{"hidden_size", ParamType::kInt},        {"num_heads", ParamType::kInt},
          {"q_lora_rank", ParamType::kInt},        {"kv_lora_rank", ParamType::kInt},
          {"qk_nope_head_dim", ParamType::kInt},   {"qk_rope_head_dim", ParamType::kInt},
          {"v_head_dim", ParamType::kInt},         {"attention_bias", ParamType::kBool},
          {"rms_norm_eps", ParamType::kFloat},     {"rotary_dim", ParamType::kInt},
          {"max_position", ParamType::kInt},       {"rope_theta", ParamType::kFloat},
          {"is_neox_style", ParamType::kBool},     {"scaling_type", ParamType::kString},
          {"scaling_factor", ParamType::kFloat},   {"low_freq_factor", ParamType::kFloat},
          {"high_freq_factor", ParamType::kFloat}, {"original_max_position", ParamType::kInt},
          {"beta_fast", ParamType::kFloat},        {"beta_slow", ParamType::kFloat},
          {"softmax_scale", ParamType::kFloat}};
}
std::string mla_spelling(const Params& p) {
  if (I(p, "rotary_dim") != I(p, "qk_rope_head_dim"))
    throw GenError{"MLA rotary_dim " + i2s(I(p, "rotary_dim")) + " must equal qk_rope_head_dim " + i2s(I(p, "qk_rope_head_dim"))};
  if (!(F(p, "softmax_scale") > 0)) throw GenError{"softmax_scale must be > 0, got " + cf(F(p, "softmax_scale"))};
  return "h" + i2s(I(p, "hidden_size")) + "_hq" + i2s(I(p, "num_heads")) + "_q" + i2s(I(p, "q_lora_rank")) + "_kv" +
         i2s(I(p, "kv_lora_rank")) + "_nope" + i2s(I(p, "qk_nope_head_dim")) + "_rope" + i2s(I(p, "qk_rope_head_dim")) + "_v" +
         i2s(I(p, "v_head_dim")) + "_eps" + nf(F(p, "rms_norm_eps")) + "_" + rope_spelling(p, "rope_theta") +
         scale_spelling(F(p, "softmax_scale"), I(p, "qk_nope_head_dim") + I(p, "qk_rope_head_dim")) + "_" +
         bias_word(B(p, "attention_bias"));
}

KindSpec deepseek_mla_attention_kind() {
  KindSpec k = composite_kind("deepseek_mla_attention", 2, "DeepseekV2MLAAttention",
                              "vllm.model_executor.models.deepseek_v2.DeepseekV2MLAAttention (MLACommonImpl: prefill through "
                              "kv_b_proj, absorbed FlashMLA decode)",
                              {{"fused_qkv_a_proj", "MergedColumnParallelLinear", ""},
                               {"q_a_layernorm", "RMSNorm", ""},
                               {"q_b_proj", "ColumnParallelLinear", ""},
                               {"kv_a_layernorm", "RMSNorm", ""},
                               {"kv_b_proj", "ColumnParallelLinear", ""},
                               {"rotary_emb", "RotaryEmbedding", ""},
                               {"kv_cache_write", "ConcatAndCacheMLA", ""},
                               {"attn_prefill", "MLAPrefill", ""},
                               {"attn_decode", "MLADecode", ""},
                               {"o_proj", "RowParallelLinear", ""}},
                              mla_params(), false);
  k.name = [](const Params& p, const std::string& dt) { return "deepseek_mla_attention_" + mla_spelling(p) + "_" + dt; };
  return k;
}

// DeepseekV2MoE: e{E}_top{K}_g{groups}_tg{topk_group}_{sigmoid|softmax}_{renorm}_rs{factor}[_bias]_h_i_shared{I_shared}.
PS deepseek_moe_params() {
  return {{"hidden_size", ParamType::kInt},       {"moe_intermediate_size", ParamType::kInt},
          {"num_experts", ParamType::kInt},       {"top_k", ParamType::kInt},
          {"num_expert_group", ParamType::kInt},  {"topk_group", ParamType::kInt},
          {"sigmoid", ParamType::kBool},          {"renormalize", ParamType::kBool},
          {"routed_scaling_factor", ParamType::kFloat}, {"correction_bias", ParamType::kBool},
          {"shared_intermediate_size", ParamType::kInt}};
}
std::string deepseek_moe_spelling(const Params& p) {
  if (I(p, "num_experts") == 0) return "dense";
  return "e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_g" + i2s(I(p, "num_expert_group")) + "_tg" +
         i2s(I(p, "topk_group")) + (B(p, "sigmoid") ? "_sigmoid_" : "_softmax_") + renorm_word(B(p, "renormalize")) + "_rs" +
         nf(F(p, "routed_scaling_factor")) + (B(p, "correction_bias") ? "_bias" : "") + "_i" +
         i2s(I(p, "moe_intermediate_size")) + "_shared" + i2s(I(p, "shared_intermediate_size"));
}

KindSpec deepseek_moe_kind() {
  KindSpec k = composite_kind("deepseek_moe", 2, "DeepseekV2MoE",
                              "vllm.model_executor.models.deepseek_v2.DeepseekV2MoE (ReplicatedLinear gate, grouped_topk "
                              "FusedMoE, shared experts)",
                              {{"gate", "ReplicatedLinear", ""},
                               {"router", "GroupedTopK", ""},
                               {"experts", "FusedExperts", ""},
                               {"shared_experts", "LlamaMLP", ""}},
                              deepseek_moe_params(), false);
  k.name = [](const Params& p, const std::string& dt) {
    if (I(p, "num_experts") < 1) throw GenError{"deepseek_moe: num_experts must be >= 1"};
    return "deepseek_moe_h" + i2s(I(p, "hidden_size")) + "_" + deepseek_moe_spelling(p) + "_" + dt;
  };
  k.cases = [](const Params&) { return token_cases(false); };
  return k;
}

// The decoder layer: MLA constants, the dense MLP's intermediate_size (0 in MoE layers) and the
// MoE constants (num_experts 0 in dense layers); spelled _dense_i{I} or _moe_{moe spelling}.
PS deepseek_layer_params() {
  PS moe = deepseek_moe_params();
  moe.erase(moe.begin());  // hidden_size: already an MLA constant
  return concat(concat(mla_params(), {{"intermediate_size", ParamType::kInt}}), moe);
}
std::string deepseek_layer_spelling(const Params& p) {
  const bool moe = I(p, "num_experts") > 0;
  if (moe == (I(p, "intermediate_size") > 0))
    throw GenError{"a deepseek decoder layer has either a dense MLP (intermediate_size > 0, num_experts 0) or experts "
                   "(num_experts > 0, intermediate_size 0); got intermediate_size " + i2s(I(p, "intermediate_size")) +
                   ", num_experts " + i2s(I(p, "num_experts"))};
  return mla_spelling(p) + (moe ? "_moe_" + deepseek_moe_spelling(p) : "_dense_i" + i2s(I(p, "intermediate_size")));
}

KindSpec deepseek_decoder_layer_kind() {
  KindSpec k = composite_kind("deepseek_decoder_layer", 3, "DeepseekV2DecoderLayer",
                              "vllm.model_executor.models.deepseek_v2.DeepseekV2DecoderLayer",
                              {{"input_layernorm", "RMSNorm", ""},
                               {"self_attn", "DeepseekV2MLAAttention", ""},
                               {"post_attention_layernorm", "RMSNorm", ""},
                               {"mlp", "LlamaMLP|DeepseekV2MoE", ""}},
                              deepseek_layer_params(), false);
  k.name = [](const Params& p, const std::string& dt) { return "deepseek_decoder_layer_" + deepseek_layer_spelling(p) + "_" + dt; };
  return k;
}

// The model: first_k_dense_replace dense layers (intermediate_size dense_intermediate_size), then
// MoE layers; the layer constants are the MoE layers' (a config without MoE layers is not lowered).
KindSpec deepseek_for_causal_lm_kind() {
  PS ps = concat({{"num_hidden_layers", ParamType::kInt}, {"vocab_size", ParamType::kInt}, {"tie_word_embeddings", ParamType::kBool},
                  {"first_k_dense_replace", ParamType::kInt}, {"dense_intermediate_size", ParamType::kInt}},
                 deepseek_layer_params());
  KindSpec k = composite_kind("deepseek_for_causal_lm", 4, "DeepseekV3ForCausalLM",
                              "vllm.model_executor.models.deepseek_v2.DeepseekV3ForCausalLM",
                              {{"embed_tokens", "VocabParallelEmbedding", ""},
                               {"dense_layers", "DeepseekV2DecoderLayer", ""},
                               {"moe_layers", "DeepseekV2DecoderLayer", ""},
                               {"norm", "RMSNorm", ""},
                               {"lm_head", "ParallelLMHead", ""}},
                              ps, false);
  k.name = [](const Params& p, const std::string& dt) {
    const int64_t layers = I(p, "num_hidden_layers"), dense = I(p, "first_k_dense_replace");
    if (dense < 0 || dense >= layers)
      throw GenError{"first_k_dense_replace " + i2s(dense) + " must be in [0, num_hidden_layers " + i2s(layers) +
                     ") (the model kind needs MoE layers)"};
    if (I(p, "num_experts") < 1) throw GenError{"deepseek_for_causal_lm: the layer constants must be the MoE layers' (num_experts >= 1)"};
    return "deepseek_for_causal_lm_l" + i2s(layers) + "_v" + i2s(I(p, "vocab_size")) + "_" +
           (B(p, "tie_word_embeddings") ? "tied" : "untied") + "_dense" + i2s(dense) + "_i" +
           i2s(I(p, "dense_intermediate_size")) + "_" + deepseek_layer_spelling(p) + "_" + dt;
  };
  return k;
}

const std::map<std::string, KindSpec>& kind_table() {
  static const std::map<std::string, KindSpec> table = [] {
    std::map<std::string, KindSpec> t;
    for (KindSpec k : {rms_norm_kind(false), rms_norm_kind(true), rms_norm_kind(false, true), rms_norm_kind(true, true),
                       qk_norm_kind(), qk_norm_kind(true), rotary_kind(), silu_kind(), silu_kind(ActKind::kGeluTanh), silu_kind(ActKind::kSwigluOai),
                       embedding_kind(), embedding_kind(true), qkv_kind(), merged_kind(), row_kind(), lm_head_kind(), attn_kind(true),
                       attn_kind(false), store_kvcache_kind(), qkv_rope_cache_kind(), attention_o_proj_kind(),
                       mlp_kind(false), mlp_kind(true), llama_attention_kind(), llama_decoder_layer_kind(),
                       llama_for_causal_lm_kind(), replicated_kind(), topk_softmax_kind(), moe_align_kind(),
                       moe_grouped_gemm_kind(), moe_sum_kind(), fused_experts_kind(), sparse_moe_block_kind(),
                       moe_decoder_layer_kind(), moe_for_causal_lm_kind(), mlp_kind(true, true), llama_attention_kind(true),
                       gemma_decoder_layer_kind(), gemma_for_causal_lm_kind(), gpt_oss_for_causal_lm_kind(),
                       column_kind(), grouped_topk_kind(), concat_and_cache_mla_kind(), mla_attn_kind(true),
                       mla_attn_kind(false), deepseek_mla_attention_kind(), deepseek_moe_kind(),
                       deepseek_decoder_layer_kind(), deepseek_for_causal_lm_kind()})
      t.emplace(k.kind, k);
    return t;
  }();
  return table;
}

}  // namespace

const KindSpec* find_kind(const std::string& kind) {
  auto it = kind_table().find(kind);
  return it == kind_table().end() ? nullptr : &it->second;
}

bool slot_accepts(const SlotSpec& slot, const std::string& cls) {
  size_t start = 0;
  while (true) {
    size_t bar = slot.class_name.find('|', start);
    if (slot.class_name.compare(start, bar == std::string::npos ? std::string::npos : bar - start, cls) == 0) return true;
    if (bar == std::string::npos) return false;
    start = bar + 1;
  }
}

std::string slot_classes_text(const SlotSpec& slot) {
  std::string out = slot.class_name;
  for (size_t bar; (bar = out.find('|')) != std::string::npos;) out.replace(bar, 1, " or ");
  return out;
}

std::vector<std::string> kind_names(bool composite) {
  std::vector<std::string> out;
  for (const auto& [k, spec] : kind_table())
    if ((spec.level > 1) == composite) out.push_back(k);
  return out;
}

}  // namespace fk::gen
