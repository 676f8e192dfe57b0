// The task-kind table: the entries of generator/kinds/*.json (Note [Kinds as data] in
// kind_data.cc) and the C++ they name, "Kind hooks" below: spellings shared between kinds,
// checks across parameters, shape registries (Note [Case registry]) and served ranges (Note
// [Served constants]). Mirrors docs/task-kinds.md; change both together.
#include "fk/gen/kinds.h"

#include "kinds/kind_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>

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
std::string nf(double x) { return name_double(x); }
// b{q}{k}{v}{o}: which of DINOv3's q/k/v/o projections carry a bias (nobias: none).
std::string dinov3_bias_word(const Params& p) {
  const std::string s = std::string(B(p, "query_bias") ? "q" : "") + (B(p, "key_bias") ? "k" : "") + (B(p, "value_bias") ? "v" : "") +
                        (B(p, "proj_bias") ? "o" : "");
  return s.empty() ? std::string("nobias") : "b" + s;
}
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

/// The sequence-parallel tasks' cases (Note [Collective tasks] in fk/tasks/collective.h): token counts T of 64 to 16384
/// over the layout's ranks, named by T, with dim rows_per_rank = T / tp_size (rounded up), the chunk each rank holds.
std::vector<ShapeCase> rows_per_rank_cases(int64_t tp_size) {
  if (tp_size < 1) throw GenError{"rows_per_rank cases need tp_size >= 1, got " + i2s(tp_size)};
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t t : {64, 256, 1024, 4096, 16384}) {
    const int64_t c = (t + tp_size - 1) / tp_size;
    out.push_back({"t" + i2s(c * tp_size), t <= 256 ? "decode" : "prefill", {{"rows_per_rank", c}}, {k++}});
  }
  return out;
}

std::vector<ShapeCase> prefill_attn_cases(int64_t max_position, bool causal) {
  const std::pair<int64_t, int64_t> registry[] = {{1, 1024}, {1, 4096}, {1, 8192}, {1, 16384}, {4, 2048}, {16, 1024}};
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (auto [b, s] : registry) {
    if (s <= max_position)
      out.push_back({"b" + i2s(b) + "_s" + i2s(s), "prefill", {{"batch", b}, {"seq_len", s}}, {k}});
    ++k;
  }
  // Encoders' contexts are shorter than every entry (BERT: 512, ViT-B/16: 197 tokens per image): for
  // bidirectional attention, batches of 1 and 32 whole contexts of exactly max_position tokens (issue
  // 22's attention shapes, which the torch SDPA peers run as dense [B, H, S, D]) and one ragged batch
  // of 8 (variable lengths, as a batch of sentences has); for causal attention, batches of 1, 8 and 32
  // with the prefill's spread of lengths.
  if (out.empty() && !causal) {
    for (int64_t b : {1, 32})
      out.push_back({"b" + i2s(b) + "_s" + i2s(max_position), "prefill",
                     {{"batch", b}, {"seq_len", max_position}, {"uniform", 1}}, {k++}});
    out.push_back({"b8_s" + i2s(max_position) + "_ragged", "prefill", {{"batch", 8}, {"seq_len", max_position}, {"ragged", 22}}, {k++}});
  } else if (out.empty()) {
    for (int64_t b : {1, 8, 32})
      out.push_back({"b" + i2s(b) + "_s" + i2s(max_position), "prefill", {{"batch", b}, {"seq_len", max_position}}, {k++}});
  }
  return out;
}

// Cross-attention (docs/task-kinds.md, cross_attention): the decode steps attend to a cache
// written once (batches 1, 8, 32, 64 of one query per sequence over whole encoder outputs of
// max_encoder_len keys, and a ragged batch of 32), and the first step writes it (batches 1 and 32
// of min(max_position, 128) queries, and a ragged batch of 8: queries and keys of drawn counts).
std::vector<ShapeCase> cross_attn_cases(int64_t max_position, int64_t max_encoder_len) {
  const int64_t q = std::min<int64_t>(max_position, 128), l = max_encoder_len;
  const std::string kv = "_kv" + i2s(l);
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 8, 32, 64})
    out.push_back({"b" + i2s(b) + "_q1" + kv, "decode", {{"batch", b}, {"q_len", 1}, {"kv_len", l}, {"write", 0}, {"uniform", 1}}, {k++}});
  out.push_back({"b32_q1" + kv + "_ragged", "decode", {{"batch", 32}, {"q_len", 1}, {"kv_len", l}, {"write", 0}, {"ragged", 23}}, {k++}});
  for (int64_t b : {1, 32})
    out.push_back({"b" + i2s(b) + "_q" + i2s(q) + kv + "_write", "prefill",
                   {{"batch", b}, {"q_len", q}, {"kv_len", l}, {"write", 1}, {"uniform", 1}}, {k++}});
  out.push_back({"b8_q" + i2s(q) + kv + "_write_ragged", "prefill",
                 {{"batch", 8}, {"q_len", q}, {"kv_len", l}, {"write", 1}, {"ragged", 24}}, {k++}});
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

// The rope constants as names spell them (docs/task-kinds.md, rotary_embedding):
// rot{rotary_dim}_pos{max_position}_base{base}_{scaling}_{neox|gptj}, where `base_key` names the
// base parameter (rotary_embedding: base, composite kinds: rope_theta).
// 8 hex digits of the FNV-1a hash of `s` (a name's stand-in for a list of constants).
std::string short_digest(const std::string& s) {
  const uint64_t h = fnv1a64(s);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(h >> 32));
  return hex;
}

std::string rope_spelling(const Params& p, const char* base_key) {
  const std::string st = p.count("scaling_type") ? S(p, "scaling_type") : std::string("none");
  std::string scaling;
  if (st == "none") scaling = "none";
  else if (st == "llama3")
    scaling = "llama3_f" + nf(F(p, "scaling_factor")) + "_lf" + nf(F(p, "low_freq_factor")) + "_hf" +
              nf(F(p, "high_freq_factor")) + "_omp" + i2s(I(p, "original_max_position"));
  else if (st == "linear") scaling = "linear_f" + nf(F(p, "scaling_factor"));
  else if (st == "yarn" || st == "yarn_notrunc" || st == "deepseek_yarn")
    scaling = st + "_f" + nf(F(p, "scaling_factor")) + "_omp" + i2s(I(p, "original_max_position")) + "_bf" +
              nf(F(p, "beta_fast")) + "_bs" + nf(F(p, "beta_slow"));
  else if (st == "longrope")
    // Note [LongRoPE names]: the cos/sin scale and the original length; the L1 rotary task (the one
    // kind that holds the factor lists) adds a digest of them. Composites spell no digest: two
    // configs alike but for the lists would give one composite name with other children, which
    // dedupe refuses (a hard error, never a silent merge).
    scaling = "longrope_a" + nf(F(p, "scaling_factor")) + "_omp" + i2s(I(p, "original_max_position")) +
              (p.count("long_factor") ? "_x" + short_digest(S(p, "long_factor") + "|" + S(p, "short_factor")) : "");
  else throw GenError{"unknown rope scaling type " + json_quote(st) + " (known: deepseek_yarn, llama3, linear, longrope, none, yarn, yarn_notrunc)"};
  // Multimodal rope (Note [mrope sections] in generator/src/passes/parse.cc): _mrope{t}x{h}x{w}, _mropei... interleaved.
  std::string mrope;
  if (p.count("mrope_section") && !S(p, "mrope_section").empty()) {
    mrope = std::string("_mrope") + (B(p, "mrope_interleaved") ? "i" : "");
    const std::vector<std::string> parts = split_list(S(p, "mrope_section"));
    for (size_t i = 0; i < parts.size(); ++i) mrope += (i ? "x" : "") + parts[i];
  }
  return "rot" + i2s(I(p, "rotary_dim")) + "_pos" + i2s(I(p, "max_position")) + "_base" + nf(F(p, base_key)) + "_" +
         scaling + "_" + (B(p, "is_neox_style") ? "neox" : "gptj") + mrope;
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

// --- multi-head latent attention (DeepSeek-V2/V3; docs/task-kinds.md "Multi-head latent attention")

// `_scale{s}` unless s is the standard dim^-0.5.
std::string scale_spelling(double s, int64_t dim) {
  const double standard = 1.0 / std::sqrt(double(dim));
  return std::fabs(s - standard) > 1e-12 * standard ? "_scale" + nf(s) : "";
}

// --- mixture of experts (docs/task-kinds.md "Mixture of experts") ---------------------------

std::string renorm_word(bool b) { return b ? "renorm" : "norenorm"; }

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

// Encoder forward passes (bert_attention, bert_layer, bert_model): whole batches of 1 and 32
// sequences (issue 22's batch-1 latency and batch-32 throughput shapes) at 128 tokens and at the
// context (capped at 512, BERT's), and one ragged batch of 8 (lengths drawn from [1, context],
// the first at the context: case_seq_lens), so that padding-free variable-length batches are
// checked too.
std::vector<ShapeCase> encoder_cases(int64_t max_position) {
  if (max_position < 1) throw GenError{"max_position must be >= 1, got " + i2s(max_position)};
  const int64_t ctx = std::min<int64_t>(512, max_position);
  std::vector<int64_t> lens;
  if (ctx > 128) lens.push_back(128);
  lens.push_back(ctx);
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 32})
    for (int64_t l : lens) out.push_back({"b" + i2s(b) + "_s" + i2s(l), "prefill", {{"batch", b}, {"seq_len", l}}, {k++, l}});
  out.push_back({"b8_s" + i2s(ctx) + "_ragged", "prefill", {{"batch", 8}, {"seq_len", ctx}, {"ragged", 22}}, {k++, ctx}});
  return out;
}

// Vision encoders take whole images: batches of 1 (latency), 8 and 32 (issue 22's throughput
// shape) and 128 images. image_batch_cases: the patch embedding (dims: batch); image_cases: the
// vision composites, every image a sequence of exactly max_position tokens (dims: batch, seq_len,
// uniform: no spread of lengths as in the LLM prefill cases, and so no off-registry lengths).
std::vector<ShapeCase> image_batch_cases() {
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 8, 32, 128}) out.push_back({"b" + i2s(b), "prefill", {{"batch", b}}, {k++}});
  return out;
}
std::vector<ShapeCase> image_cases(int64_t tokens_per_image) {
  if (tokens_per_image < 1) throw GenError{"max_position (tokens per image) must be >= 1, got " + i2s(tokens_per_image)};
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 8, 32})
    out.push_back({"b" + i2s(b) + "_s" + i2s(tokens_per_image), "prefill",
                   {{"batch", b}, {"seq_len", tokens_per_image}, {"uniform", 1}}, {k++}});
  return out;
}

// Dynamic-resolution towers (Qwen2-VL): images of grid x grid patches (the served size) in
// batches of 1, 8 and 32 (dims batch, grid_h, grid_w; seq_len = the patches of one image), and 8
// images of mixed sizes (dims batch, grid_h, grid_w, mixed = a seed: image i's sides are
// multiples of the merge window up to grid, the first image the full grid).
std::vector<ShapeCase> vision_grid_cases(int64_t grid, int64_t merge) {
  if (grid < merge || merge < 1 || grid % merge != 0)
    throw GenError{"grid must be a positive multiple of spatial_merge_size " + i2s(merge) + ", got " + i2s(grid)};
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 8, 32})
    out.push_back({"b" + i2s(b) + "_g" + i2s(grid) + "x" + i2s(grid), "prefill",
                   {{"batch", b}, {"grid_h", grid}, {"grid_w", grid}, {"seq_len", grid * grid}, {"uniform", 1}}, {k++}});
  out.push_back({"b8_mixed", "prefill", {{"batch", 8}, {"grid_h", grid}, {"grid_w", grid}, {"seq_len", grid * grid}, {"mixed", 29}}, {k++}});
  return out;
}
// SigLIP-2 NaFlex towers (Note [NaFlex positions]): images of side x side patches (the position
// table's own grid) in batches of 1, 8 and 32; 8 elongated images of side/2 x 2*side patches (the
// table shrunk along rows, stretched along columns); 8 images of mixed grids up to 2*side a side
// (dims as vision_grid_cases' with a merge window of 1).
std::vector<ShapeCase> naflex_grid_cases(int64_t side) {
  if (side < 2) throw GenError{"pos_side (the position table's side) must be >= 2, got " + i2s(side)};
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t b : {1, 8, 32})
    out.push_back({"b" + i2s(b) + "_g" + i2s(side) + "x" + i2s(side), "prefill",
                   {{"batch", b}, {"grid_h", side}, {"grid_w", side}, {"seq_len", side * side}, {"uniform", 1}}, {k++}});
  const int64_t h = side / 2, w = 2 * side;
  out.push_back({"b8_g" + i2s(h) + "x" + i2s(w), "prefill", {{"batch", 8}, {"grid_h", h}, {"grid_w", w}, {"seq_len", h * w}, {"uniform", 1}}, {k++}});
  out.push_back({"b8_mixed", "prefill", {{"batch", 8}, {"grid_h", 2 * side}, {"grid_w", 2 * side}, {"seq_len", 4 * side * side}, {"mixed", 29}}, {k++}});
  return out;
}
// The patch merger's rows: windows of spatial_merge_size^2 patches (dims num_tokens = patches).
std::vector<ShapeCase> merge_window_cases(int64_t merge) {
  std::vector<ShapeCase> out;
  int64_t k = 0;
  for (int64_t windows : {64, 256, 1024, 8192})
    out.push_back({"w" + i2s(windows), "prefill", {{"num_windows", windows}}, {k++}});
  return out;
}

// A layer pattern: one letter per layer: 'S' for
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

std::string heads_spelling(const Params& p) {
  return "hq" + i2s(I(p, "num_heads")) + "_hkv" + i2s(I(p, "num_kv_heads")) + "_d" + i2s(I(p, "head_dim"));
}
// Ranks holding a copy of each KV head (Note [Replicated KV heads] in fk/tasks/llama.h): _kvrep{r} above 1.
std::string kv_replicas_spelling(const Params& p) {
  auto it = p.find("kv_head_replicas");
  if (it == p.end()) return "";
  const int64_t r = std::get<int64_t>(it->second);
  if (r < 1) throw GenError{"kv_head_replicas must be >= 1, got " + i2s(r)};
  return r > 1 ? "_kvrep" + i2s(r) : "";
}
// The heads of a kind that runs attention: then _sw{W} under a sliding window, _scale{s} for a
// softmax scale other than head_dim^-0.5, _cap{c} under soft-capping, _kvrep{r} for KV heads replicated over r ranks.
std::string attn_heads_spelling(const Params& p) {
  return heads_spelling(p) + window_spelling(p) + attn_extra_spelling(p) + kv_replicas_spelling(p);
}
std::string qk_norm_spelling(const Params& p) { return B(p, "qk_norm") ? "_qknorm_eps" + nf(F(p, "rms_norm_eps")) : ""; }
// h{hidden}_i{intermediate}_hq_hkv_d_eps_{rope}_qkv{bias}_o{bias}_mlp{bias}[_qknorm]: a decoder layer's constants.
std::string layer_spelling(const Params& p) {
  return "h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_" + attn_heads_spelling(p) + "_eps" +
         nf(F(p, "rms_norm_eps")) + "_" + rope_spelling(p, "rope_theta") + "_qkv" + bias_word(B(p, "qkv_bias")) + "_o" +
         bias_word(B(p, "o_proj_bias")) + "_mlp" + bias_word(B(p, "mlp_bias")) + (B(p, "qk_norm") ? "_qknorm" : "");
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

std::string sparse_moe_spelling(const Params& p) {
  return moe_spelling(p) + "_" + renorm_word(B(p, "renormalize")) + (B(p, "router_bias") ? "_rbias" : "");
}

std::string moe_layer_spelling(const Params& p) {
  return "h" + i2s(I(p, "hidden_size")) + "_e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_i" +
         i2s(I(p, "moe_intermediate_size")) + expert_act_spelling(p) + "_" + renorm_word(B(p, "renormalize")) +
         (B(p, "router_bias") ? "_rbias" : "") + "_" + attn_heads_spelling(p) + "_eps" +
         nf(F(p, "rms_norm_eps")) + "_" + rope_spelling(p, "rope_theta") + "_qkv" + bias_word(B(p, "qkv_bias")) + "_o" +
         bias_word(B(p, "o_proj_bias")) + (B(p, "qk_norm") ? "_qknorm" : "");
}

// --- DeepSeek-V2/V3 composites (docs/task-kinds.md "Multi-head latent attention") ----------

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

std::string deepseek_moe_spelling(const Params& p) {
  if (I(p, "num_experts") == 0) return "dense";
  return "e" + i2s(I(p, "num_experts")) + "_top" + i2s(I(p, "top_k")) + "_g" + i2s(I(p, "num_expert_group")) + "_tg" +
         i2s(I(p, "topk_group")) + (B(p, "sigmoid") ? "_sigmoid_" : "_softmax_") + renorm_word(B(p, "renormalize")) + "_rs" +
         nf(F(p, "routed_scaling_factor")) + (B(p, "correction_bias") ? "_bias" : "") + "_i" +
         i2s(I(p, "moe_intermediate_size")) + "_shared" + i2s(I(p, "shared_intermediate_size"));
}

std::string deepseek_layer_spelling(const Params& p) {
  const bool moe = I(p, "num_experts") > 0;
  if (moe == (I(p, "intermediate_size") > 0))
    throw GenError{"a deepseek decoder layer has either a dense MLP (intermediate_size > 0, num_experts 0) or experts "
                   "(num_experts > 0, intermediate_size 0); got intermediate_size " + i2s(I(p, "intermediate_size")) +
                   ", num_experts " + i2s(I(p, "num_experts"))};
  return mla_spelling(p) + (moe ? "_moe_" + deepseek_moe_spelling(p) : "_dense_i" + i2s(I(p, "intermediate_size")));
}

// --- Kind hooks: what the entries of generator/kinds/*.json cannot say as data --------------
// (Note [Kinds as data] in kind_data.cc). Each is named by its key in an entry.

// Note [Served constants]: the attention kernels' static_asserts, said at generate time instead
// (fk/kernels/flash_decode.cuh, flash_prefill.cuh; cuDNN's SDPA for plain prefill).
std::string attention_served(const Params& p, const std::string& dtype, bool prefill) {
  const int64_t hq = I(p, "num_heads"), hkv = I(p, "num_kv_heads"), d = I(p, "head_dim");
  if (hkv <= 0 || hq % hkv != 0)
    return "num_heads " + i2s(hq) + " is not a multiple of num_kv_heads " + i2s(hkv) + " (grouped-query attention needs one)";
  if (d % 8 != 0 || d > 256) return "head_dim " + i2s(d) + ": attention kernels serve multiples of 8 up to 256";
  if (prefill && p.count("causal") && !B(p, "causal") && (I(p, "sliding_window") > 0 || F(p, "softcap") > 0 || B(p, "sinks")))
    return "bidirectional (causal false) prefill serves no sliding window, soft-capping or sinks";
  const bool own = prefill && (F(p, "softcap") > 0 || B(p, "sinks"));
  if (own && d != 64 && d != 128 && d != 192 && d != 256)
    return "head_dim " + i2s(d) + ": prefill with soft-capping or sinks (own kernel, fk/kernels/flash_prefill.cuh) serves "
           "head_dim 64, 128, 192 or 256";
  if (own && dtype != "bfloat16") return "dtype " + dtype + ": prefill with soft-capping or sinks serves bfloat16 only";
  return "";
}

const KindHooks& kind_hooks() {
  static const KindHooks hooks = [] {
    KindHooks h;
    h.spell["rope"] = [](const Params& p) { return rope_spelling(p, "base"); };
    h.spell["window"] = window_spelling;
    h.spell["attn_extra"] = attn_extra_spelling;
    // "_scaled" for Gemma's sqrt(embedding_dim), else "_s{factor}".
    h.spell["embed_scale"] = [](const Params& p) {
      const double s = F(p, "embed_scale"), gemma = std::sqrt(double(I(p, "embedding_dim")));
      return std::fabs(s - gemma) <= 1e-12 * gemma ? std::string("_scaled") : "_s" + nf(s);
    };
    h.spell["mla_prefill_scale"] = [](const Params& p) { return scale_spelling(F(p, "softmax_scale"), I(p, "qk_head_dim")); };
    h.spell["qkv_out_features"] = [](const Params& p) {
      return i2s((I(p, "num_heads") + 2 * I(p, "num_kv_heads")) * I(p, "head_size"));
    };
    // The vocabulary rows of one rank (VocabParallelEmbedding: padded to a multiple of 64, then split; the runtime's
    // fk::tasks::vocab_shard_rows): the width of the logits' all-gather (Note [Collective tasks]).
    h.spell["vocab_shard"] = [](const Params& p) {
      const int64_t v = I(p, "vocab_size"), tp = I(p, "tp_size");
      return i2s(tp <= 1 ? v : (v + 63) / 64 * 64 / tp);
    };
    // A row-parallel linear (or an MLP ending in one) that leaves its partial sums to its parent (vLLM's
    // RowParallelLinear(reduce_results=False): DeepSeek's shared experts, whose sum with the routed experts is reduced
    // once by the MoE block). Only a sharded task differs: unsharded there is nothing to reduce, and the name and the
    // constant are the reducing one's (Note [Partial row-parallel results] in fk/tasks/linear.h).
    static const auto partial = [](const Params& p) { return I(p, "tp_size") > 1 && !B(p, "reduce_results"); };
    h.spell["partial"] = [](const Params& p) { return partial(p) ? std::string("_partial") : std::string(); };
    h.spell["reduces"] = [](const Params& p) { return partial(p) ? std::string("false") : std::string("true"); };
    h.spell["merged_out_features"] = [](const Params& p) { return i2s(I(p, "n0") + I(p, "n1")); };
    h.checks["swigluoai"] = [](const Params& p) {
      if (!(F(p, "limit") > 0) || !(F(p, "alpha") > 0))
        throw GenError{"swigluoai_and_mul needs alpha > 0 and limit > 0, got " + cf(F(p, "alpha")) + ", " + cf(F(p, "limit"))};
    };
    // LongRoPE: one long and one short factor per rotated pair, a positive original length and cos/sin scale.
    h.checks["longrope"] = [](const Params& p) {
      auto list = [&](const char* k) { return p.count(k) ? S(p, k) : std::string(); };
      if (S(p, "scaling_type") != "longrope") {
        if (!list("long_factor").empty() || !list("short_factor").empty())
          throw GenError{"long_factor/short_factor are only read by rope scaling type \"longrope\", got type " +
                         json_quote(S(p, "scaling_type"))};
        return;
      }
      const int64_t half = I(p, "rotary_dim") / 2;
      for (const char* k : {"long_factor", "short_factor"}) {
        const int64_t n = static_cast<int64_t>(split_list(list(k)).size());
        if (n != half)
          throw GenError{std::string("rope_scaling.") + k + " has " + i2s(n) + " entries, expected rotary_dim / 2 = " + i2s(half)};
      }
      if (I(p, "original_max_position") <= 0)
        throw GenError{"longrope needs original_max_position_embeddings > 0 (the pretraining context), got " +
                       i2s(I(p, "original_max_position"))};
      if (!(F(p, "scaling_factor") > 0)) throw GenError{"longrope cos/sin scale must be > 0, got " + cf(F(p, "scaling_factor"))};
    };
    h.checks["softmax_scale_positive"] = [](const Params& p) {
      if (!(F(p, "softmax_scale") > 0)) throw GenError{"softmax_scale must be > 0, got " + cf(F(p, "softmax_scale"))};
    };
    h.checks["grouped_topk"] = [](const Params& p) {
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
    };
    // Composite spellings (shared by the kinds that hold the same constants).
    h.spell["heads"] = heads_spelling;
    h.spell["attn_heads"] = attn_heads_spelling;
    h.spell["rope_theta"] = [](const Params& p) { return rope_spelling(p, "rope_theta"); };
    h.spell["qk_norm"] = qk_norm_spelling;
    h.spell["layer"] = layer_spelling;
    // Encoders (bert_*): hq{H}_d{D} (all heads attend with their own k/v), _scale{s} unless D^-0.5.
    // _causal: a decoder's causal self-attention (BERT as bert2bert's decoder); nothing for an encoder.
    h.spell["encoder_heads"] = [](const Params& p) {
      return "hq" + i2s(I(p, "num_heads")) + "_d" + i2s(I(p, "head_dim")) + scale_spelling(F(p, "softmax_scale"), I(p, "head_dim")) +
             (p.count("causal") && B(p, "causal") ? "_causal" : "");
    };
    // _po{offset}: positions numbered from `offset` (RoBERTa: padding_idx + 1); nothing for BERT's 0.
    h.spell["position_offset"] = [](const Params& p) {
      const int64_t o = I(p, "position_offset");
      if (o < 0) throw GenError{"position_offset must be >= 0, got " + i2s(o)};
      return o ? "_po" + i2s(o) : std::string();
    };
    // _{cls|mean|last}[_norm]: an embedding model's pooling choice; nothing for the model's own pooler.
    h.spell["pooling"] = [](const Params& p) {
      const std::string& pool = S(p, "pooling");
      return pool == "pooler" ? std::string() : "_" + pool + (B(p, "normalize") ? "_norm" : "");
    };
    // _mv{dim}, _sparse, _hbias, _dropse: an embedding model's per-token heads (Note [Embedding heads]).
    h.spell["token_heads"] = [](const Params& p) {
      const int64_t mv = I(p, "multi_vector");
      return (mv > 0 ? "_mv" + i2s(mv) : std::string()) + (B(p, "sparse") ? "_sparse" : "") + (B(p, "head_bias") ? "_hbias" : "") +
             (B(p, "drop_special_tokens") ? "_dropse" : "");
    };
    h.checks["encoder_heads"] = [](const Params& p) {
      const int64_t mv = I(p, "multi_vector");
      if (mv < 0) throw GenError{"multi_vector must be >= 0 (0: no token vectors), got " + i2s(mv)};
      const bool heads = mv > 0 || B(p, "sparse");
      if (!heads && (B(p, "head_bias") || B(p, "drop_special_tokens")))
        throw GenError{"head_bias and drop_special_tokens apply to the token heads (multi_vector > 0 or sparse)"};
      if (heads && B(p, "causal")) throw GenError{"token heads are an embedding model's outputs, not a decoder's (causal)"};
    };
    h.checks["encoder_pooling"] = [](const Params& p) {
      const std::string& pool = S(p, "pooling");
      if (pool != "pooler" && pool != "cls" && pool != "mean" && pool != "last")
        throw GenError{"pooling must be \"pooler\", \"cls\", \"mean\" or \"last\", got " + json_quote(pool)};
      if (pool == "pooler" && B(p, "normalize")) throw GenError{"normalize applies to a pooling choice (cls, mean, last), not to the model's pooler"};
    };
    // h{hidden}_i{intermediate}_hq_d_{activation}_eps_{bias}: an encoder layer's constants.
    h.spell["encoder_layer"] = [](const Params& p) {
      return "h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_hq" + i2s(I(p, "num_heads")) + "_d" +
             i2s(I(p, "head_dim")) + scale_spelling(F(p, "softmax_scale"), I(p, "head_dim")) + "_" + S(p, "activation") +
             "_eps" + nf(F(p, "layer_norm_eps")) + "_" + bias_word(B(p, "bias")) + (B(p, "causal") ? "_causal" : "") +
             (B(p, "cross_attention") ? "_xattn" : "");
    };
    h.checks["encoder_cross_attention"] = [](const Params& p) {
      if (B(p, "cross_attention") && !B(p, "causal"))
        throw GenError{"cross_attention needs a decoder (causal true): HF BertLayer refuses cross-attention in an encoder"};
    };
    // h{hidden}_i{intermediate}_hq_d_{activation}_eps_{qkvbias|noqkvbias}: a vision layer's constants.
    h.spell["vision_layer"] = [](const Params& p) {
      return "h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_hq" + i2s(I(p, "num_heads")) + "_d" +
             i2s(I(p, "head_dim")) + scale_spelling(F(p, "softmax_scale"), I(p, "head_dim")) + "_" + S(p, "activation") +
             "_eps" + nf(F(p, "layer_norm_eps")) + "_" + (B(p, "qkv_bias") ? "qkvbias" : "noqkvbias");
    };
    h.spell["dinov3_bias"] = dinov3_bias_word;
    // h_i_hq_d_{activation}[_gated]_eps_{bias}_{q/k/v/o bias}_g{grid}_p{prefix}_theta: a DINOv3 layer's constants.
    h.spell["dinov3_layer"] = [](const Params& p) {
      return "h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_hq" + i2s(I(p, "num_heads")) + "_d" +
             i2s(I(p, "head_dim")) + scale_spelling(F(p, "softmax_scale"), I(p, "head_dim")) + "_" + S(p, "activation") +
             (B(p, "gated") ? "_gated" : "") + "_eps" + nf(F(p, "layer_norm_eps")) + "_" + (B(p, "mlp_bias") ? "mlpbias" : "nomlpbias") +
             "_" + dinov3_bias_word(p) + "_g" + i2s(I(p, "grid")) + "_p" + i2s(I(p, "prefix_tokens")) + "_theta" +
             nf(F(p, "rope_theta"));
    };
    h.checks["dinov3_attention"] = [](const Params& p) {
      if (I(p, "head_dim") % 4 != 0) throw GenError{"head_dim must be a multiple of 4 (2-D rope: a quarter per axis and half), got " + i2s(I(p, "head_dim"))};
      if (I(p, "grid") < 1) throw GenError{"grid (patches per side) must be >= 1, got " + i2s(I(p, "grid"))};
      if (I(p, "prefix_tokens") < 1) throw GenError{"prefix_tokens (class + register tokens) must be >= 1, got " + i2s(I(p, "prefix_tokens"))};
      if (p.count("num_register_tokens") && I(p, "num_register_tokens") + 1 != I(p, "prefix_tokens"))
        throw GenError{"prefix_tokens must be 1 + num_register_tokens"};
    };
    // _siglip: the ViT composites with SigLIP's HF parameter names (layer_norm1, self_attn.q_proj, mlp.fc1, ...); nothing for ViT's.
    h.spell["vit_naming"] = [](const Params& p) { return S(p, "naming") == "vit" ? std::string() : "_" + S(p, "naming"); };
    h.checks["vit_naming"] = [](const Params& p) {
      if (S(p, "naming") != "vit" && S(p, "naming") != "siglip")
        throw GenError{"naming must be \"vit\" (HF ViTModel's parameter names) or \"siglip\" (SiglipVisionModel's), got " +
                       json_quote(S(p, "naming"))};
    };
    // h_i_hq_d_{activation}_eps_m{merge}_g{grid}_theta: a Qwen2-VL vision block's constants.
    h.spell["qwen2_vl_vision_block"] = [](const Params& p) {
      return "h" + i2s(I(p, "hidden_size")) + "_i" + i2s(I(p, "intermediate_size")) + "_hq" + i2s(I(p, "num_heads")) + "_d" +
             i2s(I(p, "head_dim")) + scale_spelling(F(p, "softmax_scale"), I(p, "head_dim")) + "_" + S(p, "activation") + "_eps" +
             nf(F(p, "layer_norm_eps")) + "_m" + i2s(I(p, "spatial_merge_size")) + "_g" + i2s(I(p, "grid")) + "_theta" + nf(F(p, "rope_theta"));
    };
    h.checks["qwen2_vl_vision"] = [](const Params& p) {
      if (I(p, "head_dim") % 4 != 0) throw GenError{"head_dim must be a multiple of 4 (2-D rope: a quarter per axis and half), got " + i2s(I(p, "head_dim"))};
      const int64_t m = I(p, "spatial_merge_size"), g = I(p, "grid");
      if (m < 1 || m > 8) throw GenError{"spatial_merge_size must be in [1, 8], got " + i2s(m)};
      if (g < m || g % m != 0) throw GenError{"grid (the benchmark images' patches per side) must be a positive multiple of spatial_merge_size " + i2s(m) + ", got " + i2s(g)};
      if (I(p, "max_position") != g * g) throw GenError{"max_position must be grid^2 (" + i2s(g * g) + "), got " + i2s(I(p, "max_position"))};
    };
    // _full{i}x{j}...: the blocks of a windowed tower that attend over whole frames (_fullnone: every block windowed).
    h.spell["fullatt"] = [](const Params& p) {
      const std::vector<std::string> parts = split_list(S(p, "fullatt_block_indexes"));
      std::string out = "_full";
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? "x" : "") + parts[i];
      return parts.empty() ? out + "none" : out;
    };
    // _ds{i}x{j}...: the blocks after which Qwen3-VL's deepstack mergers feed the text model (nothing without).
    h.spell["deepstack"] = [](const Params& p) {
      const std::vector<std::string> parts = split_list(S(p, "deepstack_visual_indexes"));
      std::string out = parts.empty() ? "" : "_ds";
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? "x" : "") + parts[i];
      return out;
    };
    // Qwen3-VL's learned position table (Note [Interpolated vision positions] in fk/tasks/qwen2_vl.h).
    h.checks["vision_pos_table"] = [](const Params& p) {
      const int64_t n = I(p, "num_position_embeddings"), side = I(p, "pos_side");
      if (side < 1 || side * side != n)
        throw GenError{"num_position_embeddings " + i2s(n) + " must be a square (side x side table), pos_side " + i2s(side)};
      int64_t last = -1;
      for (const std::string& s : split_list(S(p, "deepstack_visual_indexes"))) {
        const int64_t i = std::stoll(s);
        if (i <= last || i >= I(p, "num_hidden_layers"))
          throw GenError{"deepstack_visual_indexes " + json_quote(S(p, "deepstack_visual_indexes")) + " must list distinct blocks in [0, " +
                         i2s(I(p, "num_hidden_layers")) + ") in increasing order"};
        last = i;
      }
    };
    // Qwen2.5-VL's window attention (Note [Vision windows] in fk/tasks/qwen2_vl.h).
    h.checks["vision_windows"] = [](const Params& p) {
      const int64_t unit = I(p, "patch_size") * I(p, "spatial_merge_size");
      if (I(p, "window_size") < unit)
        throw GenError{"window_size must be at least one merge unit (patch_size * spatial_merge_size = " + i2s(unit) + " pixels), got " +
                       i2s(I(p, "window_size"))};
      int64_t last = -1;
      for (const std::string& s : split_list(S(p, "fullatt_block_indexes"))) {
        const int64_t i = std::stoll(s);
        if (i <= last || i >= I(p, "num_hidden_layers"))
          throw GenError{"fullatt_block_indexes " + json_quote(S(p, "fullatt_block_indexes")) + " must list distinct blocks in [0, " +
                         i2s(I(p, "num_hidden_layers")) + ") in increasing order"};
        last = i;
      }
    };
    h.spell["moe"] = moe_spelling;
    h.spell["sparse_moe"] = sparse_moe_spelling;
    h.spell["moe_layer"] = moe_layer_spelling;
    h.spell["mla"] = mla_spelling;
    h.spell["deepseek_moe"] = deepseek_moe_spelling;
    h.spell["deepseek_layer"] = deepseek_layer_spelling;
    h.spell["local_window"] = [](const Params& p) {
      const int64_t w = I(p, "local_sliding_window");
      return w > 0 ? "_sw" + i2s(w) : std::string();
    };
    h.spell["final_cap"] = [](const Params& p) {
      const double cap = F(p, "final_softcap");
      return cap > 0 ? "_fcap" + nf(cap) : std::string();
    };
    // Granite's multipliers (Note [Granite multipliers] in fk/tasks/llama.h): _em{e}_rm{r}_ls{l},
    // each only when the kind has it and it is not 1, so that every other name is unchanged.
    h.spell["multipliers"] = [](const Params& p) {
      std::string out;
      for (const auto& [key, tag] : {std::pair<const char*, const char*>{"embedding_multiplier", "_em"},
                                     {"residual_multiplier", "_rm"}, {"logits_scaling", "_ls"}})
        if (p.count(key) && F(p, key) != 1.0) out += tag + nf(F(p, key));
      return out;
    };
    h.checks["multipliers"] = [](const Params& p) {
      for (const char* key : {"embedding_multiplier", "residual_multiplier", "logits_scaling"})
        if (p.count(key) && !(std::isfinite(F(p, key)) && F(p, key) > 0))
          throw GenError{std::string(key) + " must be a finite number > 0 (1: none), got " + cf(F(p, key))};
      // The embedding child multiplies by its scale rounded to the model dtype (Gemma's rule); HF
      // Granite multiplies by the fp32 value. They agree only where the value has at most 8
      // significant bits (exact in bf16 and fp16), as every published Granite config's 12 has.
      if (p.count("embedding_multiplier")) {
        int e = 0;
        const double mant = std::frexp(F(p, "embedding_multiplier"), &e) * 256.0;
        if (mant != std::floor(mant) || e > 15 || e < -13)
          throw GenError{"embedding_multiplier " + cf(F(p, "embedding_multiplier")) +
                         " is not exact in bf16 (at most 8 significant bits, magnitude 2^-14 to 2^15): the "
                         "embedding would be scaled by a rounded value, unlike HF"};
      }
    };
    h.spell["layer_pattern"] = [](const Params& p) { return layer_pattern_spelling(layer_pattern(S(p, "layer_types"))); };
    h.spell["layer_types_literal"] = [](const Params& p) { return cpp_string_literal(layer_pattern(S(p, "layer_types"))); };
    // rms_norm_eps is 0 unless qk_norm is set (nothing else reads it in the attention composites,
    // like unused rope scaling constants), so configs that differ only in it share the task, as the name promises.
    h.spell["eps_if_qk_norm"] = [](const Params& p) { return B(p, "qk_norm") ? cf(F(p, "rms_norm_eps")) : std::string("0"); };
    h.checks["pooling"] = [](const Params& p) {
      const std::string& pool = S(p, "pooling");
      if (pool != "cls" && pool != "mean" && pool != "last")
        throw GenError{"pooling must be \"cls\", \"mean\" or \"last\", got " + json_quote(pool)};
    };
    // The token classifier keeps one fp32 sum per label in registers (Note [Token heads]).
    h.checks["token_classifier"] = [](const Params& p) {
      const int64_t n = I(p, "num_labels");
      if (n < 1 || n > 32) throw GenError{"num_labels must be in [1, 32] (a per-token head of a few labels), got " + i2s(n)};
    };
    h.checks["patch_embedding"] = [](const Params& p) {
      const int64_t c = I(p, "num_channels"), patch = I(p, "patch_size"), img = I(p, "image_size");
      if (c < 1 || c > 64) throw GenError{"num_channels must be in [1, 64], got " + i2s(c)};
      if (patch < 1 || patch > 64) throw GenError{"patch_size must be in [1, 64], got " + i2s(patch)};
      if (img < patch || img > 8192)  // a remainder is dropped, as Conv2d(padding="valid") drops it
        throw GenError{"image_size must be in [patch_size " + i2s(patch) + ", 8192], got " + i2s(img)};
    };
    h.checks["patch_embedding_3d"] = [](const Params& p) {
      const int64_t c = I(p, "num_channels"), t = I(p, "temporal_patch_size"), patch = I(p, "patch_size");
      if (c < 1 || c > 64) throw GenError{"num_channels must be in [1, 64], got " + i2s(c)};
      if (t < 1 || t > 16) throw GenError{"temporal_patch_size must be in [1, 16], got " + i2s(t)};
      if (patch < 1 || patch > 64) throw GenError{"patch_size must be in [1, 64], got " + i2s(patch)};
    };
    // _pos{g}: position embeddings of a g x g grid interpolated to the served one; nothing when they match.
    h.spell["vit_pos_grid"] = [](const Params& p) {
      return I(p, "pos_grid") * I(p, "patch_size") == I(p, "image_size") ? std::string() : "_pos" + i2s(I(p, "pos_grid"));
    };
    h.checks["vit_pos_grid"] = [](const Params& p) {
      if (I(p, "pos_grid") < 1) throw GenError{"pos_grid (the checkpoint's position grid) must be >= 1, got " + i2s(I(p, "pos_grid"))};
    };
    h.checks["interpolate"] = [](const Params& p) {
      const std::string& m = S(p, "mode");
      if (m != "nearest" && m != "bilinear" && m != "bicubic" && m != "bilinear_aa" && m != "bicubic_aa")
        throw GenError{"mode must be \"nearest\", \"bilinear\", \"bicubic\", \"bilinear_aa\" or \"bicubic_aa\" (the _aa modes: "
                       "antialias=True), got " + json_quote(m)};
      if (m == "nearest" && B(p, "align_corners"))
        throw GenError{"align_corners applies to bilinear and bicubic only (torch.nn.functional.interpolate refuses it for nearest)"};
      if ((m == "bilinear_aa" || m == "bicubic_aa") && B(p, "align_corners"))
        throw GenError{"the antialiased modes are served with half-pixel centres only (align_corners false)"};
      for (const char* k : {"channels", "in_h", "in_w", "out_h", "out_w"})
        if (I(p, k) < 1 || I(p, k) > 65536) throw GenError{std::string(k) + " must be in [1, 65536], got " + i2s(I(p, k))};
    };
    // Multimodal rope: three sections (temporal, height, width) of rotary_dim / 2 frequencies, neither
    // scaled nor partial beyond what vLLM's MRotaryEmbedding serves (Note [mrope sections]).
    h.checks["mrope"] = [](const Params& p) {
      const std::vector<std::string> parts = split_list(S(p, "mrope_section"));
      if (parts.size() != 3) throw GenError{"mrope_section must list 3 sections, got " + json_quote(S(p, "mrope_section"))};
      int64_t sum = 0;
      for (const auto& s : parts) sum += std::stoll(s);
      const int64_t half = I(p, "rotary_dim") / 2;
      if (sum != half)
        throw GenError{"rope_scaling.mrope_section " + json_quote(S(p, "mrope_section")) + " sums to " + i2s(sum) +
                       ", expected rotary_dim / 2 = " + i2s(half)};
    };
    for (int a = 0; a < 3; ++a)
      h.spell["mrope_s" + std::to_string(a)] = [a](const Params& p) { return split_list(S(p, "mrope_section")).at(a); };
    h.checks["vision_rope_2d"] = [](const Params& p) {
      const int64_t d = I(p, "head_dim"), gh = I(p, "grid_h"), gw = I(p, "grid_w"), m = I(p, "merge_size"), pre = I(p, "prefix_tokens");
      if (d < 4 || d % 4 != 0) throw GenError{"head_dim must be a positive multiple of 4 (row and column quarters), got " + i2s(d)};
      if (m < 1 || gh < 1 || gw < 1 || gh % m != 0 || gw % m != 0)
        throw GenError{"grid " + i2s(gh) + "x" + i2s(gw) + " must be whole merge_size " + i2s(m) + " windows"};
      if (pre < 0) throw GenError{"prefix_tokens must be >= 0, got " + i2s(pre)};
      if (I(p, "max_position") != pre + gh * gw)
        throw GenError{"max_position (tokens per image) must be prefix_tokens + grid_h * grid_w = " + i2s(pre + gh * gw) + ", got " +
                       i2s(I(p, "max_position"))};
      if (!(F(p, "rope_theta") > 1)) throw GenError{"rope_theta must be > 1, got " + cf(F(p, "rope_theta"))};
    };
    h.checks["gemma_model"] = [](const Params& p) {
      const int64_t every = I(p, "full_every"), w = I(p, "local_sliding_window");
      if (every < 1) throw GenError{"full_every must be >= 1, got " + i2s(every)};
      if (w < 0) throw GenError{"local_sliding_window must be >= 0 (0: none), got " + i2s(w)};
    };
    h.checks["gpt_oss_model"] = [](const Params& p) {
      const int64_t w = I(p, "local_sliding_window"), layers = I(p, "num_hidden_layers");
      if (w < 0) throw GenError{"local_sliding_window must be >= 0 (0: none), got " + i2s(w)};
      const std::string pat = layer_pattern(S(p, "layer_types"));
      if (static_cast<int64_t>(pat.size()) != layers)
        throw GenError{"layer_types lists " + i2s(static_cast<int64_t>(pat.size())) + " layers, num_hidden_layers is " + i2s(layers)};
    };
    h.checks["deepseek_moe"] = [](const Params& p) {
      if (I(p, "num_experts") < 1) throw GenError{"deepseek_moe: num_experts must be >= 1"};
    };
    h.checks["deepseek_model"] = [](const Params& p) {
      const int64_t layers = I(p, "num_hidden_layers"), dense = I(p, "first_k_dense_replace");
      if (dense < 0 || dense >= layers)
        throw GenError{"first_k_dense_replace " + i2s(dense) + " must be in [0, num_hidden_layers " + i2s(layers) +
                       ") (the model kind needs MoE layers)"};
      if (I(p, "num_experts") < 1) throw GenError{"deepseek_for_causal_lm: the layer constants must be the MoE layers' (num_experts >= 1)"};
    };
    h.cases["steps"] = [](const Params& p) {
      return step_cases(I(p, "max_position"), p.count("sliding_window") ? I(p, "sliding_window") : 0);
    };
    h.cases["steps_local"] = [](const Params& p) { return step_cases(I(p, "max_position"), I(p, "local_sliding_window")); };
    h.cases["tokens"] = [](const Params&) { return token_cases(false); };
    h.cases["encoder"] = [](const Params& p) { return encoder_cases(I(p, "max_position")); };
    h.cases["image_batches"] = [](const Params&) { return image_batch_cases(); };
    h.cases["images"] = [](const Params& p) { return image_cases(I(p, "max_position")); };
    h.cases["vision_grids"] = [](const Params& p) { return vision_grid_cases(I(p, "grid"), I(p, "spatial_merge_size")); };
    h.cases["naflex_grids"] = [](const Params& p) { return naflex_grid_cases(I(p, "pos_side")); };
    h.cases["merge_windows"] = [](const Params& p) { return merge_window_cases(I(p, "spatial_merge_size")); };
    h.cases["tokens_decode"] = [](const Params&) { return token_cases(true); };
    h.cases["rows_per_rank"] = [](const Params& p) { return rows_per_rank_cases(I(p, "tp_size")); };
    // Note [Expert-parallel all-to-all task]: tokens per rank, DeepEP's decode batches (128: issue 23's target) and a
    // prefill chunk.
    h.cases["ep_tokens"] = [](const Params&) {
      std::vector<ShapeCase> out;
      int64_t k = 0;
      for (int64_t t : {1, 8, 32, 128, 256, 1024}) out.push_back({"t" + i2s(t), t <= 256 ? "decode" : "prefill", {{"num_tokens", t}}, {k++}});
      return out;
    };
    h.cases["prefill_attn"] = [](const Params& p) { return prefill_attn_cases(I(p, "max_position"), !p.count("causal") || B(p, "causal")); };
    h.cases["decode_attn"] = [](const Params& p) { return decode_attn_cases(I(p, "max_position")); };
    h.cases["cross_attn"] = [](const Params& p) { return cross_attn_cases(I(p, "max_position"), I(p, "max_encoder_len")); };
    h.served["cross_attention"] = [](const Params& p, const std::string& d) {
      if (I(p, "max_encoder_len") < 1) return "max_encoder_len must be >= 1, got " + i2s(I(p, "max_encoder_len"));
      return attention_served(p, d, false);
    };
    h.spell["xattn_scale"] = [](const Params& p) { return scale_spelling(F(p, "softmax_scale"), I(p, "head_dim")); };
    h.served["attention_prefill"] = [](const Params& p, const std::string& d) { return attention_served(p, d, true); };
    h.served["attention_decode"] = [](const Params& p, const std::string& d) { return attention_served(p, d, false); };
    // The absorbed MLA decode kernel (fk/kernels/mla_decode.cuh) is written for DeepSeek's latent (512 + 64) and
    // tiles heads by 16: its static_asserts, said at generate time (DeepSeek-V3's 128 heads at TP 16 leave 8 a rank).
    h.served["mla_decode"] = [](const Params& p, const std::string&) {
      const int64_t h = I(p, "num_heads"), kv = I(p, "kv_lora_rank"), r = I(p, "qk_rope_head_dim");
      if (kv != 512 || r != 64)
        return "kv_lora_rank " + i2s(kv) + ", qk_rope_head_dim " + i2s(r) + ": the MLA decode kernel serves DeepSeek's latent (512, 64)";
      if (h < 16 || h % 16 != 0)
        return "num_heads " + i2s(h) + " (per rank): the MLA decode kernel serves a positive multiple of 16 heads";
      return std::string();
    };
    // The elementwise kernels (fk/kernels/activation.cuh, silu_and_mul.cuh) move rows as 16-byte
    // vectors: the row width in the model dtype must be a multiple of 16 bytes.
    h.served["vector_rows"] = [](const Params& p, const std::string& d) {
      const char* key = p.count("hidden_size") ? "hidden_size" : "intermediate_size";
      const int64_t w = I(p, key), bytes = d == "float32" ? 4 : 2;
      return (w * bytes) % 16 == 0 ? std::string()
                                    : std::string(key) + " " + i2s(w) + ": the elementwise kernels serve rows of a multiple of " +
                                          i2s(16 / bytes) + " elements (16 bytes) in " + d;
    };
    return h;
  }();
  return hooks;
}

const std::map<std::string, KindSpec>& kind_table() {
  static const std::map<std::string, KindSpec> table = [] {
    std::map<std::string, KindSpec> t;
    for (const auto& [file, text] : {std::pair<const char*, const char*>{"generator/kinds/l1.json", kL1KindData},
                                     {"generator/kinds/composite.json", kCompositeKindData}})
      for (KindSpec k : kinds_from_data(text, file, kind_hooks()))
        if (!t.emplace(k.kind, k).second) throw std::invalid_argument(std::string(file) + ": kind " + k.kind + " defined twice");
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
