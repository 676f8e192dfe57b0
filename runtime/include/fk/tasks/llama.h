// Glue and harnesses for the Llama family's composite kinds (L2 qkv_rope_cache,
// attention_o_proj, gate_up_silu, llama_mlp, llama_attention; L3 llama_decoder_layer; L4
// llama_for_causal_lm). The generated classes hold their children (the L1/L2 task modules) as
// members named as in vLLM and call them in `forward`; what is common to several kinds lives
// here. Members every attention-carrying composite has: qkv_proj, qk_norm, rotary_emb,
// kv_cache_write, attn_prefill, attn_decode, o_proj and the layer's k_cache / v_cache
// (Note [KV cache layout]); the MLP ones: gate_up_proj, act_fn, down_proj.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fk/kernels/softcap.cuh"
#include "fk/runtime/model.h"
#include "fk/tasks/attention.h"
#include "fk/tasks/forward_context.h"
#include "fk/tasks/harness.h"
#include "fk/tasks/linear.h"
#include "fk/tasks/qk_norm.h"  // FullWidthQKNorm
#include "fk/tasks/reference_ops.h"
#include "fk/tasks/mrope.h"
#include "fk/tasks/rotary_embedding.h"

namespace fk::tasks {

template <class N> inline constexpr bool kHasQKNorm = !std::is_same_v<N, NoQKNorm>;

/// Reference traits of generated classes: GemmaRMSNorm q/k norms (N::gemma) and GELU-tanh MLPs
/// (M::gelu_tanh, GemmaMLP); false where the class has no such member.
template <class N, class = void> struct IsGemmaQKNorm : std::false_type {};
template <class N> struct IsGemmaQKNorm<N, std::void_t<decltype(N::gemma)>> : std::bool_constant<N::gemma> {};
template <class M, class = void> struct IsGeluMlp : std::false_type {};
template <class M> struct IsGeluMlp<M, std::void_t<decltype(M::gelu_tanh)>> : std::bool_constant<M::gelu_tanh> {};
/// A Gemma decoder layer (norms around attention and around the MLP).
template <class L, class = void> struct IsGemmaLayer : std::false_type {};
template <class L>
struct IsGemmaLayer<L, std::void_t<decltype(std::declval<L&>().pre_feedforward_layernorm)>> : std::true_type {};
/// A post-norm decoder layer (OLMo-2: L::post_norm; Note [Post-norm residual stream]).
template <class L, class = void> struct IsPostNormLayer : std::false_type {};
template <class L> struct IsPostNormLayer<L, std::void_t<decltype(L::post_norm)>> : std::bool_constant<L::post_norm> {};

// Note [Post-norm residual stream]
// OLMo-2's decoder layer (vLLM Olmo2DecoderLayer) norms each branch's output before the add:
// x = x + post_attention_layernorm(self_attn(x)); x = x + post_feedforward_layernorm(mlp(x)),
// with no norm on the way in, and the model ends with norm(x). The generated layer keeps the
// (hidden_states, residual) pair every other layer here passes, the stream being their sum: it
// returns (post_feedforward_layernorm(mlp(x)), x) and the next layer adds the two before its
// attention (the first layer gets residual undefined: the embedding is the stream). The last
// add then fuses into the model's final norm (a fused add + RMSNorm, as in Llama), so the
// model, its harness, the engine and the parity dump (which records hidden_states + residual
// after each layer) serve both layouts unchanged. The adds round once in the model dtype, as
// torch's `residual + hidden_states` does.

/// x += y elementwise in the model dtype (fp32 sum, one rounding), as torch's bf16 `+`.
void add_(Tensor& x, const Tensor& y);

// ---------------------------------------------------------------------------------------------
// Forward glue (the baseline composition; every call goes through the child modules).

/// qkv_proj -> split -> q/k norm (when present) -> rotary_emb (in place) -> KV-cache write.
/// Returns (q [T, Hq*D], k [T, Hkv*D], v [T, Hkv*D]); q and k may be views of the qkv output.
template <class Cfg, class M>
std::tuple<Tensor, Tensor, Tensor> qkv_rope_cache_forward(M& m, const Tensor& positions, const Tensor& hidden_states) {
  constexpr int64_t q_size = Cfg::num_heads * Cfg::head_dim, kv_size = Cfg::num_kv_heads * Cfg::head_dim;
  const AttnMetadata& meta = forward_context();
  Tensor qkv = std::get<0>(m.qkv_proj.forward(hidden_states));
  Tensor q = qkv.narrow_last(0, q_size), k = qkv.narrow_last(q_size, kv_size), v = qkv.narrow_last(q_size + kv_size, kv_size);
  if constexpr (kHasQKNorm<std::decay_t<decltype(m.qk_norm)>>) {
    std::tuple<Tensor, Tensor> qk = m.qk_norm.forward(q, k);
    q = std::get<0>(qk);
    k = std::get<1>(qk);
  }
  m.rotary_emb.forward(positions, q, k);
  m.kv_cache_write.forward(k, v, m.k_cache, m.v_cache, meta.slot_mapping);
  return {q, k, v};
}

/// Attention over the step (prefill: the fresh k/v of each sequence, causal; decode: the cache,
/// which already holds this step's k/v) followed by o_proj. Returns [T, hidden].
template <class Cfg, class M> Tensor attention_o_proj_forward(M& m, const Tensor& q, const Tensor& k, const Tensor& v) {
  constexpr int64_t Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  const AttnMetadata& meta = forward_context();
  const int64_t tokens = q.size(0);
  Tensor attn;
  if (meta.is_prefill) {
    Tensor qc = contiguous_rows(q).view({tokens, Hq, D});
    Tensor kc = contiguous_rows(k).view({tokens, Hkv, D});
    Tensor vc = contiguous_rows(v).view({tokens, Hkv, D});
    attn = m.attn_prefill.forward(qc, kc, vc, meta.cu_seqlens, meta.cu_seqlens, meta.max_seqlen, meta.max_seqlen);
  } else {
    FK_CHECK(tokens == meta.num_seqs, "decode step with " + std::to_string(tokens) + " tokens for " +
                                          std::to_string(meta.num_seqs) + " sequences");
    Tensor qc = contiguous_rows(q).view({tokens, Hq, D});
    attn = m.attn_decode.forward(qc, m.k_cache.narrow_first(0, tokens), m.v_cache.narrow_first(0, tokens), meta.cache_seqlens);
  }
  return std::get<0>(m.o_proj.forward(attn.view({tokens, Hq * D})));
}

/// gate_up_proj -> SiluAndMul. Returns [T, intermediate].
template <class M> Tensor gate_up_silu_forward(M& m, const Tensor& x) {
  return m.act_fn.forward(std::get<0>(m.gate_up_proj.forward(x)));
}

/// Logit soft-capping in place (Gemma 2's final_logit_softcapping): x = cap * tanh(x / cap).
template <class Cfg> void logit_softcap_(Tensor& logits, double cap) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(logits.is_contiguous() && logits.dtype() == dtype_of<T>, "logit soft-capping of " + logits.str());
  fk::kernels::logit_softcap<T>(logits.data<T>(), logits.numel(), static_cast<float>(cap), current_stream());
  FK_CHECK_LAUNCH();
}

/// In-place x = s * x in the model dtype (Granite's residual_multiplier and logits_scaling).
template <class Cfg> void scale_(Tensor& x, double s) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.is_contiguous() && x.dtype() == dtype_of<T>, "scaling of " + x.str());
  fk::kernels::scale_inplace<T>(x.data<T>(), x.numel(), static_cast<float>(s), current_stream());
}

// Note [Granite multipliers]
// Granite (muP) decoders are Llama decoders with four constants: the embedding rows times
// embedding_multiplier (the ScaledWordEmbedding child), the attention scale attention_multiplier
// (the attention children's softmax_scale), each residual branch times residual_multiplier
// before it joins the stream (residual + m * branch, as vLLM's GraniteDecoderLayer), and the
// logits divided by logits_scaling (vLLM's LogitsProcessor scale 1 / logits_scaling). The layer
// scales the attention output and the MLP output in place, rounded to the model dtype as
// torch's `branch * m` is; the fused add + norm that follows is unchanged. A Cfg without the
// members (every other family) has multipliers 1, and nothing is launched.
template <class Cfg, class = void> struct ResidualMultiplierOf {
  static constexpr double value = 1.0;
};
template <class Cfg> struct ResidualMultiplierOf<Cfg, std::void_t<decltype(Cfg::residual_multiplier)>> {
  static constexpr double value = Cfg::residual_multiplier;
};
template <class Cfg> constexpr double residual_multiplier_of() { return ResidualMultiplierOf<Cfg>::value; }
template <class Cfg, class = void> struct LogitsScalingOf {
  static constexpr double value = 1.0;
};
template <class Cfg> struct LogitsScalingOf<Cfg, std::void_t<decltype(Cfg::logits_scaling)>> {
  static constexpr double value = Cfg::logits_scaling;
};
template <class Cfg> constexpr double logits_scaling_of() { return LogitsScalingOf<Cfg>::value; }

/// Multi-head latent attention (DeepSeek; fk/tasks/deepseek.h): one latent cache per layer,
/// `kv_cache`, with the module's own constants in M::Cfg.
template <class M, class = void> struct is_mla_attention : std::false_type {};
template <class M> struct is_mla_attention<M, std::void_t<decltype(std::declval<M&>().kv_b_proj)>> : std::true_type {};

/// Allocates a layer's KV cache (Note [KV cache layout]; MLA: Note [MLA latent cache]).
template <class Cfg, class M> void allocate_kv_cache(M& m, int64_t max_seqs, int64_t max_len) {
  if constexpr (is_mla_attention<M>::value) {
    using A = typename M::Cfg;
    m.kv_cache = empty({max_seqs, max_len, A::kv_lora_rank + A::qk_rope_head_dim}, dtype_of<typename A::scalar_t>);
  } else {
    m.k_cache = empty({max_seqs, max_len, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<typename Cfg::scalar_t>);
    m.v_cache = empty({max_seqs, max_len, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<typename Cfg::scalar_t>);
  }
}

// ---------------------------------------------------------------------------------------------
// Parameters: HF transformers names, seeded initialisation.
//
// Note [Seeded weights]
// Every parameter has a stable name, the one HF transformers uses (model.layers.3.self_attn.
// q_proj.weight), so an independent implementation can load exactly our weights from a
// safetensors file. Fused production parameters (qkv_proj, gate_up_proj) are row ranges of one
// tensor and appear as their HF parts. Values are N(mean, std) from a counter-based generator
// seeded with (seed, hash of the name): the same name gets the same values whatever the layer
// count or the order of initialisation. Scales keep activations O(1) through the network so
// logits are far from ties: linear weights std 1/sqrt(fan_in), biases 0.1, norm weights
// 1 +- 0.1, embeddings std 1. Where the LM head is the embedding (tied), the final norm's weights
// are 1/sqrt(hidden) times that (final_norm_init_scale), or the logits would be O(sqrt(hidden)).
// (Scaling the embedding instead would shrink the residual stream's start against the layers'
// bf16 noise: Phi-4-mini's 32-layer logits then drift 0.06 from the reference, twice Llama's.)

/// The factor on the seeded final-norm weights of a causal LM (Note [Seeded weights]).
template <class Cfg> float final_norm_init_scale() {
  return Cfg::tie_word_embeddings ? static_cast<float>(1.0 / std::sqrt(double(Cfg::hidden_size))) : 1.f;
}

/// FNV-1a of a name (the per-parameter seed stream).
inline uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Note [Sharded parameters]
// A model sharded for tensor parallelism (Note [Parallel layouts]) holds on each rank its slice of
// every HF tensor, as vLLM's weight loaders cut them: the column-parallel linears (q/k/v, gate/up)
// the rank's rows of the output features, the row-parallel ones (o_proj, down_proj) its columns of
// the input features (their bias whole, added on rank 0), the vocabulary-parallel embedding and LM
// head their rows of the vocabulary padded to a multiple of 64 (padding rows zero); norms whole.
// NamedParam records the slice, so seeded initialisation (the whole tensor drawn as the unsharded
// model draws it, then cut) and safetensors loading (the whole tensor read, then cut) give each rank
// exactly its part of the unsharded model's weights: a TP run and the TP-1 run compute the same
// model. The rank is the tensor-parallel group's (fk::dist::tp_rank) when the module is listed.
// Replicated KV heads (fewer KV heads than ranks): each rank a copy of one head (Note [Replicated KV heads]).

/// This rank's slice of `p` along `dim`: `parts` equal slices of the whole (padded) extent;
/// `blocks` > 1: the dimension is that many blocks side by side (gate | up), each sliced alike.
inline NamedParam shard(NamedParam p, int dim, int parts, int64_t whole, int64_t blocks = 1) {
  if (parts <= 1) return p;
  const int64_t n = p.tensor.size(dim);
  p.shard_dim = dim;
  p.shard_full = whole;
  p.shard_parts = blocks;
  p.shard_start = int64_t(fk::dist::tp_rank()) * (n / blocks);
  FK_CHECK(n * parts >= whole && fk::dist::tp_world_size() == parts,
           p.name + ": a slice of " + std::to_string(n) + " cannot be one of " + std::to_string(parts) + " of " + std::to_string(whole) +
               " in a tensor-parallel group of " + std::to_string(fk::dist::tp_world_size()));
  return p;
}

inline void init_param(const NamedParam& p, uint64_t seed) {
  const uint64_t s = mix_seed(seed, name_hash(p.name));
  if (!p.sharded()) {
    Tensor t = p.tensor;
    fill_normal(t, s, p.init_mean, p.init_std);
    return;
  }
  Tensor whole = empty(p.full_shape(), p.tensor.dtype());  // drawn as the unsharded model draws it
  fill_normal(whole, s, p.init_mean, p.init_std);
  copy_shard(p, whole);
}

/// (HF parameter name, rows) of one part of a fused weight.
using Part = std::pair<std::string, int64_t>;

/// A linear layer as one HF parameter per row range: parts = {(name, rows), ...}. column_shards > 1:
/// each part is this rank's rows of a column-parallel weight split that many ways (Note [Sharded
/// parameters]); a row-parallel linear (RowShardsOf > 1) holds its rank's columns.
template <class L> void add_linear(ParamList& out, L& lin, const std::vector<Part>& parts, int column_shards = 1) {
  constexpr int kRowShards = RowShardsOf<L>::value;
  static_assert(kRowShards >= 1, "row_shards must be positive");
  FK_CHECK(column_shards == 1 || kRowShards == 1, parts.front().first + ": a linear is split by its rows or by its columns, not both");
  const int64_t k = lin.weight.size(1);
  const float std = 1.f / std::sqrt(static_cast<float>(k * kRowShards));  // the unsharded fan-in
  int64_t row = 0;
  for (const auto& [name, rows] : parts) {
    NamedParam w{name + ".weight", lin.weight.narrow_first(row, rows), 0.f, std};
    out.push_back(kRowShards > 1 ? shard(w, 1, kRowShards, k * kRowShards) : shard(w, 0, column_shards, rows * column_shards));
    if (lin.bias.defined()) out.push_back(shard({name + ".bias", lin.bias.narrow_first(row, rows), 0.f, 0.1f}, 0, column_shards, rows * column_shards));
    row += rows;
  }
  FK_CHECK(row == lin.weight.size(0), "parameter split of " + parts.front().first + " does not cover the weight");
}
/// A vocabulary-parallel table (the embedding, the untied LM head) of a model with Cfg::vocab_size
/// entries: this rank's rows of the padded vocabulary (Note [Sharded parameters]).
template <class Cfg> void add_vocab_param(ParamList& out, const std::string& name, const Tensor& table, float mean, float std) {
  out.push_back(shard({name, table, mean, std}, 0, TpSizeOf<Cfg>::value, Cfg::vocab_size));
}
/// mean 0 for GemmaRMSNorm weights (used as 1 + w).
template <class N> void add_norm(ParamList& out, N& norm, const std::string& name, float mean = 1.f, float scale = 1.f) {
  out.push_back({name + ".weight", norm.weight, mean * scale, 0.1f * scale});
}
template <class N> void add_qk_norm(ParamList& out, N& n, const std::string& prefix) {
  if constexpr (kHasQKNorm<N>) {
    const float mean = IsGemmaQKNorm<N>::value ? 0.f : 1.f;
    out.push_back({prefix + "q_norm.weight", n.q_weight, mean, 0.1f});
    out.push_back({prefix + "k_norm.weight", n.k_weight, mean, 0.1f});
  }
}
/// The attention sinks (gpt-oss; Note [Attention sinks] in fk/tasks/attention.h): one f32 [Hq]
/// tensor that the prefill and decode children share (share_sinks), HF name `{prefix}sinks`.
template <class M> void share_sinks(M& m) {
  if (m.attn_prefill.sinks.defined()) m.attn_decode.sinks = m.attn_prefill.sinks;
}
template <class M> void add_sinks(ParamList& out, M& m, const std::string& prefix) {
  if (m.attn_prefill.sinks.defined()) out.push_back({prefix + "sinks", m.attn_prefill.sinks, 0.f, 1.f});
}
// Note [Replicated KV heads]
// With fewer KV heads than tensor-parallel ranks (Qwen3-30B-A3B's 4 at TP 8, Llama-3.1-8B's 8 at TP 16),
// vLLM's QKVParallelLinear gives every rank one KV head and r = tp / num_key_value_heads ranks the same
// one: rank t holds KV head t / r (num_kv_head_replicas), its query heads [t Hq/tp, (t+1) Hq/tp) being
// the ones that head serves under GQA. A rank's attention is then the unsharded attention of its query
// heads. The per-rank constants cannot tell one KV head per rank split (8 heads at TP 8) from one
// replicated (4 heads at TP 8), so the attention's Config says it: kv_head_replicas (1: split), which
// the descriptors derive from the config and the task names spell (_kvrep{r}).

/// The ranks holding each KV head (Cfg::kv_head_replicas; 1 for configs that do not say).
template <class Cfg, class = void> struct KvReplicasOf : std::integral_constant<int, 1> {};
template <class Cfg> struct KvReplicasOf<Cfg, std::void_t<decltype(Cfg::kv_head_replicas)>>
    : std::integral_constant<int, Cfg::kv_head_replicas> {};

/// This rank's slice of a KV projection's rows (k_proj or v_proj) when its `replicas` ranks share each
/// KV head: rows [t / replicas x n, + n) of tp / replicas x n (Note [Replicated KV heads]).
inline NamedParam shard_replicated_kv(NamedParam p, int tp, int replicas) {
  const int64_t n = p.tensor.size(0);
  FK_CHECK(replicas >= 1 && tp % replicas == 0 && fk::dist::tp_world_size() == tp,
           p.name + ": " + std::to_string(replicas) + " replicas of each KV head do not divide a tensor-parallel group of " +
               std::to_string(fk::dist::tp_world_size()) + " (the layout's " + std::to_string(tp) + ")");
  p.shard_dim = 0;
  p.shard_full = n * (tp / replicas);
  p.shard_start = int64_t(fk::dist::tp_rank() / replicas) * n;
  p.shard_parts = 1;
  return p;
}

template <class Cfg, class M> void add_qkv_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr int tp = TpSizeOf<Cfg>::value, replicas = KvReplicasOf<Cfg>::value;
  static_assert(replicas == 1 || (Cfg::num_kv_heads == 1 && tp % replicas == 0),
                "replicated KV heads: one per rank, tp_size a multiple of the replicas (Note [Replicated KV heads])");
  if constexpr (tp > 1 && kHasQKNorm<std::decay_t<decltype(m.qk_norm)>>)
    static_assert(!FullWidthQKNorm<std::decay_t<decltype(m.qk_norm)>>::value,
                  "a full-width q/k norm spans every head: its weights are not sharded (Note [Sharded parameters])");
  // q, k and v column-parallel; with replicated KV heads, k and v each this rank's copy of its KV head.
  ParamList parts;
  add_linear(parts, m.qkv_proj, {Part(prefix + "q_proj", Cfg::num_heads * Cfg::head_dim),
                                 Part(prefix + "k_proj", Cfg::num_kv_heads * Cfg::head_dim),
                                 Part(prefix + "v_proj", Cfg::num_kv_heads * Cfg::head_dim)}, tp);
  for (NamedParam& p : parts) {
    const bool kv = p.name.rfind(prefix + "k_proj.", 0) == 0 || p.name.rfind(prefix + "v_proj.", 0) == 0;
    out.push_back(replicas > 1 && kv ? shard_replicated_kv(p, tp, replicas) : p);
  }
  add_qk_norm(out, m.qk_norm, prefix);
}
template <class M, class = void> struct has_down_proj : std::false_type {};
template <class M> struct has_down_proj<M, std::void_t<decltype(std::declval<M&>().down_proj)>> : std::true_type {};

template <class Cfg, class M> void add_mlp_params(ParamList& out, M& m, const std::string& prefix) {
  add_linear(out, m.gate_up_proj, {Part(prefix + "gate_proj", Cfg::intermediate_size), Part(prefix + "up_proj", Cfg::intermediate_size)},
             TpSizeOf<Cfg>::value);
  if constexpr (has_down_proj<M>::value) add_linear(out, m.down_proj, {Part(prefix + "down_proj", Cfg::hidden_size)});
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]).

/// A composite's attention window (Cfg::sliding_window; 0 for kinds without attention).
template <class Cfg, class = void> struct WindowOf : std::integral_constant<int64_t, 0> {};
template <class Cfg>
struct WindowOf<Cfg, std::void_t<decltype(Cfg::sliding_window)>> : std::integral_constant<int64_t, Cfg::sliding_window> {};
template <class Cfg> constexpr int64_t window_of() { return WindowOf<Cfg>::value; }

// Note [Sharded references]
// A model sharded for tensor parallelism (Note [Sharded parameters]) is checked against the unsharded
// model's composite reference, computed on every rank from its own slices: a row-parallel linear's
// reference sums the ranks' fp32 partial products over the group before its one rounding
// (ref::linear_tp_reduce); the column-parallel ones need nothing (their heads and columns are this
// rank's); the embedding's reference looks the ids up in the whole table, gathered from the ranks'
// rows; the logits' reference is each rank's rows of the vocabulary, gathered. So it equals the
// unsharded reference up to the order of the fp32 sums, while sharing no kernel with the task.

/// The reference of a linear child: row-parallel ones (RowShardsOf > 1) reduce over the group; one that leaves
/// its partial sum to its parent (Note [Partial row-parallel results]) is this rank's partial, the bias on rank 0.
/// reduce: reduce even then (the parent's reference of the summed partials).
template <class L> Tensor ref_linear_of(const Tensor& x, const L& lin, bool reduce = ReducesOf<L>::value) {
  if constexpr (RowShardsOf<L>::value > 1) {
    if (reduce) return ref::linear_tp_reduce(x, lin.weight, lin.bias);
    return ref::linear(x, lin.weight, fk::dist::tp_rank() == 0 ? lin.bias : Tensor());
  } else {
    return ref::linear(x, lin.weight, lin.bias);
  }
}

/// The host view of the step's metadata that references need.
struct RefMeta {
  bool is_prefill = true;
  std::vector<int32_t> cu;    ///< prefill token offsets
  std::vector<int32_t> lens;  ///< decode KV lengths (including this step)
};

template <class Cfg, class M>
std::tuple<Tensor, Tensor, Tensor> ref_qkv_rope_cache(M& m, const Tensor& positions, const Tensor& h) {
  constexpr int Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  Tensor qkv = ref::linear(h, m.qkv_proj.weight, m.qkv_proj.bias);
  Tensor q = qkv.narrow_last(0, Hq * D), k = qkv.narrow_last(Hq * D, Hkv * D), v = qkv.narrow_last((Hq + Hkv) * D, Hkv * D);
  if constexpr (kHasQKNorm<std::decay_t<decltype(m.qk_norm)>>) {
    using N = std::decay_t<decltype(m.qk_norm)>;
    constexpr float off = IsGemmaQKNorm<N>::value ? 1.f : 0.f;
    if constexpr (FullWidthQKNorm<N>::value) {  // one norm over all heads (OLMo-2)
      q = ref::rms_norm(contiguous_rows(q), m.qk_norm.q_weight, m.qk_norm.variance_epsilon);
      k = ref::rms_norm(contiguous_rows(k), m.qk_norm.k_weight, m.qk_norm.variance_epsilon);
    } else {
      q = ref::head_rms_norm(q, Hq, D, m.qk_norm.q_weight, m.qk_norm.variance_epsilon, off);
      k = ref::head_rms_norm(k, Hkv, D, m.qk_norm.k_weight, m.qk_norm.variance_epsilon, off);
    }
  }
  const int rot = static_cast<int>(m.rotary_emb.rotary_dim);
  // longrope: this step's table (Note [LongRoPE]); mrope: per-token rows (Note [mrope positions])
  const std::pair<Tensor, Tensor> rows = rope_reference_rows(m.rotary_emb, positions);
  q = ref::rope(q, rows.first, rows.second, Hq, D, rot, m.rotary_emb.is_neox_style);
  k = ref::rope(k, rows.first, rows.second, Hkv, D, rot, m.rotary_emb.is_neox_style);
  v = contiguous_rows(v);
  return {q, k, v};
}

/// Writes this step's reference k/v into the layer's cache (over what the task wrote there).
template <class Cfg, class M> void ref_store(M& m, const Tensor& k, const Tensor& v) {
  Tensor kc = m.k_cache, vc = m.v_cache;
  ref::store_rows(kc, k, forward_context().slot_mapping);
  ref::store_rows(vc, v, forward_context().slot_mapping);
}

template <class Cfg, class M>
Tensor ref_attention_o_proj(M& m, const RefMeta& rm, const Tensor& q, const Tensor& k, const Tensor& v) {
  constexpr int Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  Tensor attn = rm.is_prefill
                    ? ref::attention_prefill(q, k, v, rm.cu, Hq, Hkv, D, m.attn_prefill.softmax_scale,
                                             m.attn_prefill.sliding_window, m.attn_prefill.logits_soft_cap, m.attn_prefill.sinks)
                    : ref::attention_decode(q, m.k_cache.narrow_first(0, q.size(0)), m.v_cache.narrow_first(0, q.size(0)),
                                            rm.lens, Hq, Hkv, D, m.attn_decode.softmax_scale, m.attn_decode.sliding_window,
                                            m.attn_decode.logits_soft_cap, m.attn_decode.sinks);
  return ref_linear_of(attn, m.o_proj);
}

/// A sparse MoE block in the MLP slot (it owns expert weights; fk/tasks/moe.h).
template <class M, class = void> struct is_moe_block : std::false_type {};
template <class M> struct is_moe_block<M, std::void_t<decltype(std::declval<M&>().w13_weight)>> : std::true_type {};
template <class M> Tensor ref_sparse_moe(M& m, const Tensor& x);  // fk/tasks/moe.h
/// DeepSeek's MoE (routed plus shared experts; fk/tasks/deepseek.h).
template <class M, class = void> struct is_deepseek_moe : std::false_type {};
template <class M> struct is_deepseek_moe<M, std::void_t<decltype(std::declval<M&>().shared_experts)>> : std::true_type {};
template <class M> Tensor ref_deepseek_moe(M& m, const Tensor& x);  // fk/tasks/deepseek.h
template <class A> Tensor ref_mla_attention(A& m, const RefMeta& rm, const Tensor& positions, const Tensor& h);  // ditto

/// A gated MLP's reference (gate_up, act, down); reduce: whether its down projection's reference sums the ranks'
/// partials (by default as the module does: Note [Partial row-parallel results]).
template <class M> Tensor ref_dense_mlp(M& m, const Tensor& x, bool reduce = ReducesOf<decltype(std::declval<M&>().down_proj)>::value) {
  Tensor act = ref::silu_and_mul(ref::linear(x, m.gate_up_proj.weight, m.gate_up_proj.bias), IsGeluMlp<M>::value);
  return ref_linear_of(act, m.down_proj, reduce);
}

template <class M> Tensor ref_mlp(M& m, const Tensor& x) {
  if constexpr (is_deepseek_moe<M>::value) {
    return ref_deepseek_moe(m, x);
  } else if constexpr (is_moe_block<M>::value) {
    return ref_sparse_moe(m, x);
  } else {
    return ref_dense_mlp(m, x);
  }
}

template <class Cfg, class A>
Tensor ref_llama_attention(A& a, const RefMeta& rm, const Tensor& positions, const Tensor& h) {
  std::tuple<Tensor, Tensor, Tensor> qkv = ref_qkv_rope_cache<Cfg>(a, positions, h);
  ref_store<Cfg>(a, std::get<1>(qkv), std::get<2>(qkv));
  return ref_attention_o_proj<Cfg>(a, rm, std::get<0>(qkv), std::get<1>(qkv), std::get<2>(qkv));
}

/// Decoder layer reference: (hidden_states, residual) -> (hidden_states, residual).
/// Olmo2DecoderLayer (IsPostNormLayer): x = h + residual; x += norm(attn(x)); returns
/// (norm(mlp(x)), x) (Note [Post-norm residual stream]). The pre-norm layers (ref_pre_norm_layer):
/// LlamaDecoderLayer: fused add + RMSNorm before attention and before the MLP (Granite: both
/// branches times Cfg::residual_multiplier, Note [Granite multipliers]).
/// GemmaDecoderLayer (IsGemmaLayer; every norm a GemmaRMSNorm, 1 + w): input_layernorm (fused
/// add), attention, post_attention_layernorm (plain), pre_feedforward_layernorm (fused add), MLP,
/// post_feedforward_layernorm (plain), as vLLM's Gemma2/Gemma3DecoderLayer.
template <class Cfg, class L>
std::pair<Tensor, Tensor> ref_pre_norm_layer(L& l, const RefMeta& rm, const Tensor& positions, const Tensor& h,
                                             const Tensor& residual);
template <class Cfg, class L>
std::pair<Tensor, Tensor> ref_decoder_layer(L& l, const RefMeta& rm, const Tensor& positions, const Tensor& h,
                                            const Tensor& residual) {
  if constexpr (IsPostNormLayer<L>::value) {  // Note [Post-norm residual stream]
    const DType dt = h.dtype();
    const Tensor x = residual.defined() ? ref::round_to(ref::add_f32(h, residual), dt) : h;
    Tensor attn = ref_llama_attention<Cfg>(l.self_attn, rm, positions, x);
    attn = ref::rms_norm(attn, l.post_attention_layernorm.weight, l.post_attention_layernorm.variance_epsilon);
    const Tensor x2 = ref::round_to(ref::add_f32(x, attn), dt);
    const Tensor mlp = ref_mlp(l.mlp, x2);
    return {ref::rms_norm(mlp, l.post_feedforward_layernorm.weight, l.post_feedforward_layernorm.variance_epsilon), x2};
  } else {
    return ref_pre_norm_layer<Cfg>(l, rm, positions, h, residual);
  }
}

/// ref_decoder_layer's pre-norm layers (Llama, Gemma, MoE, DeepSeek).
template <class Cfg, class L>
std::pair<Tensor, Tensor> ref_pre_norm_layer(L& l, const RefMeta& rm, const Tensor& positions, const Tensor& h,
                                             const Tensor& residual) {
  constexpr bool kGemma = IsGemmaLayer<L>::value;
  constexpr float off = kGemma ? 1.f : 0.f;
  Tensor x, res;
  if (residual.defined()) {
    std::pair<Tensor, Tensor> n =
        ref::add_rms_norm(h, residual, l.input_layernorm.weight, l.input_layernorm.variance_epsilon, off);
    x = n.first;
    res = n.second;
  } else {
    res = h;
    x = ref::rms_norm(h, l.input_layernorm.weight, l.input_layernorm.variance_epsilon, off);
  }
  Tensor attn;
  if constexpr (is_mla_attention<std::decay_t<decltype(l.self_attn)>>::value) attn = ref_mla_attention(l.self_attn, rm, positions, x);
  else attn = ref_llama_attention<Cfg>(l.self_attn, rm, positions, x);
  if constexpr (kGemma) {
    attn = ref::rms_norm(attn, l.post_attention_layernorm.weight, l.post_attention_layernorm.variance_epsilon, off);
    std::pair<Tensor, Tensor> n = ref::add_rms_norm(attn, res, l.pre_feedforward_layernorm.weight,
                                                    l.pre_feedforward_layernorm.variance_epsilon, off);
    Tensor mlp = ref_mlp(l.mlp, n.first);
    return {ref::rms_norm(mlp, l.post_feedforward_layernorm.weight, l.post_feedforward_layernorm.variance_epsilon, off),
            n.second};
  } else {
    constexpr double m = residual_multiplier_of<Cfg>();  // Note [Granite multipliers]
    if constexpr (m != 1.0) attn = ref::scale(attn, m);
    std::pair<Tensor, Tensor> n =
        ref::add_rms_norm(attn, res, l.post_attention_layernorm.weight, l.post_attention_layernorm.variance_epsilon);
    Tensor mlp = ref_mlp(l.mlp, n.first);
    if constexpr (m != 1.0) mlp = ref::scale(mlp, m);
    return {mlp, n.second};
  }
}

// ---------------------------------------------------------------------------------------------
// Step inputs shared by the harnesses: sequences, positions, slots (Note [KV cache layout]).

/// One step over `batch` sequences: prefill of prefill_seq_lens(batch, seq_len) tokens, or one
/// decode token per sequence with KV lengths decode_seq_lens(batch, kv_len).
// Note [mrope step positions]
// A prefill step of an mrope model (Note [mrope positions] in fk/tasks/mrope.h) gets [3, T]
// positions laid out as HF's get_rope_index lays out a prompt with one image: each sequence of L
// tokens (L >= 8) holds a g x g grid of image tokens (g = floor(sqrt(L / 2))) from token L / 4 on,
// at (temporal, height, width) = (s, s + row, s + column) with s = L / 4; the text before it at (p, p,
// p); the text after it continuing from s + g. Every section of the rotary frequencies then reads a
// different position than the others, through every level above the L1 task. Decode steps keep [T]
// (vLLM's decode positions: the three rows are equal).

/// The [3, T] positions of a prefill step (Note [mrope step positions]), host side.
inline std::vector<int64_t> mrope_prefill_positions(const std::vector<int32_t>& cu) {
  const int64_t t = cu.empty() ? 0 : cu.back();
  std::vector<int64_t> out(static_cast<size_t>(3 * t));
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int64_t first = cu[b], len = cu[b + 1] - cu[b];
    const int64_t g = len >= 8 ? static_cast<int64_t>(std::floor(std::sqrt(double(len / 2)))) : 0;
    const int64_t s = len / 4, image_end = s + g * g;
    for (int64_t p = 0; p < len; ++p) {
      int64_t th[3];
      if (g < 2 || p < s) {
        th[0] = th[1] = th[2] = p;
      } else if (p < image_end) {
        th[0] = s, th[1] = s + (p - s) / g, th[2] = s + (p - s) % g;
      } else {
        th[0] = th[1] = th[2] = s + g + (p - image_end);
      }
      for (int a = 0; a < 3; ++a) out[static_cast<size_t>(a * t + first + p)] = th[a];
    }
  }
  return out;
}

template <class Cfg, class = void> struct HasMropeSection : std::false_type {};
template <class Cfg> struct HasMropeSection<Cfg, std::void_t<decltype(Cfg::mrope_section)>> : std::true_type {};

/// Whether the composite config's rotary child is mrope (its sections are listed, non-empty).
template <class Cfg> bool uses_mrope() {
  if constexpr (HasMropeSection<Cfg>::value) return Cfg::mrope_section[0] != '\0';
  return false;
}

struct StepInputs {
  RefMeta host;
  AttnMetadata meta;
  Tensor positions;        ///< i64 [T]
  Tensor mrope_positions;  ///< prefill: i64 [3, T] (Note [mrope step positions]); decode: the [T] positions
  /// The positions a model of config Cfg takes this step.
  template <class Cfg> const Tensor& positions_for() const { return uses_mrope<Cfg>() ? mrope_positions : positions; }
  int64_t max_len = 0;
  std::vector<int32_t> last_rows;  ///< the row of each sequence's last token

  StepInputs(const ShapeCase& c) {
    const int64_t batch = c.get("batch");
    meta.num_seqs = batch;
    std::vector<int64_t> pos, slots;
    if (c.has("seq_len")) {
      const auto lens = case_seq_lens(c, "seq_len");
      max_len = c.get("seq_len");
      host.cu = {0};
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t p = 0; p < lens[b]; ++p) {
          pos.push_back(p);
          slots.push_back(b * max_len + p);
        }
        host.cu.push_back(static_cast<int32_t>(host.cu.back() + lens[b]));
        last_rows.push_back(host.cu.back() - 1);
        meta.max_seqlen = std::max<int64_t>(meta.max_seqlen, lens[b]);
      }
      meta.is_prefill = host.is_prefill = true;
      meta.cu_seqlens = to_device(host.cu, {batch + 1});
    } else {
      const auto lens = case_seq_lens(c, "kv_len");
      max_len = c.get("kv_len");
      for (int64_t b = 0; b < batch; ++b) {
        pos.push_back(lens[b] - 1);
        slots.push_back(b * max_len + lens[b] - 1);
        host.lens.push_back(static_cast<int32_t>(lens[b]));
        last_rows.push_back(static_cast<int32_t>(b));
      }
      meta.is_prefill = host.is_prefill = false;
      meta.cache_seqlens = to_device(host.lens, {batch});
    }
    meta.num_tokens = static_cast<int64_t>(pos.size());
    positions = to_device(pos, {meta.num_tokens});
    mrope_positions = meta.is_prefill ? to_device(mrope_prefill_positions(host.cu), {3, meta.num_tokens}) : positions;
    meta.slot_mapping = to_device(slots, {meta.num_tokens});
  }
  int64_t tokens() const { return meta.num_tokens; }
  /// KV tokens attended per query token, summed (for FLOP counts), under a sliding window of
  /// `window` keys (0: none).
  double attended_pairs(int64_t window = 0) const {
    double s = 0;
    if (host.is_prefill) {
      for (size_t b = 0; b + 1 < host.cu.size(); ++b)
        for (int64_t p = 0; p < host.cu[b + 1] - host.cu[b]; ++p) s += double(window_range(p, window).second);
    } else {
      for (int32_t l : host.lens) s += double(window_range(l - 1, window).second);
    }
    return s;
  }
  /// (query, key) pairs of bidirectional attention over each prefill sequence (encoders): sum of len^2.
  double bidirectional_pairs() const {
    double s = 0;
    for (size_t b = 0; b + 1 < host.cu.size(); ++b) s += std::pow(double(host.cu[b + 1] - host.cu[b]), 2);
    return s;
  }
  /// KV tokens that must be read from the cache (decode) — prefill reads its own fresh k/v.
  double cached_kv_tokens(int64_t window = 0) const { return host.is_prefill ? 0.0 : attended_pairs(window); }
};

/// Tolerance for composite outputs: elementwise bounds loose enough for bf16 rounding that a
/// chain of ops amplifies, the relative L2 error tight (Note [Composite references]).
inline Tolerance composite_tolerance(DType d, double typical_abs, double rel_l2) {
  Tolerance t = matmul_tolerance(d, typical_abs);
  t.atol *= 4;
  t.rtol = std::max(t.rtol, 0.05);
  t.max_rel_l2 = rel_l2;
  return t;
}

/// Tolerance for the logits of a whole model of `layers` decoder layers against the composite
/// reference. Both sides round to bf16 at the same points but accumulate in different orders;
/// those differences compound like a random walk over the layers, so the bounds grow with
/// sqrt(layers): relative L2 <= 0.01 sqrt(L) and |err| <= 0.05 sqrt(L) + 5% (logits are O(1) by
/// Note [Seeded weights]). For scale: HF transformers' own bf16 run is 0.4-0.9% from its fp32 run
/// at 4 layers (docs/parity.md), i.e. ~0.0045 sqrt(L); two such independent bf16 runs differ by
/// ~sqrt(2) of that, 0.036 at 32 layers, measured 0.022-0.032 (H100, 2026-11-22). One decoder
/// layer (L3) is held to 0.01.
inline Tolerance depth_tolerance(size_t layers) {
  const double r = std::sqrt(static_cast<double>(std::max<size_t>(layers, 1)));
  Tolerance t;
  t.atol = 0.05 * r;
  t.rtol = 0.05;
  t.max_rel_l2 = 0.01 * r;
  return t;
}

/// Parameter bytes of a parameter list.
inline double param_bytes(const ParamList& ps) {
  double b = 0;
  for (const auto& p : ps) b += static_cast<double>(p.tensor.nbytes());
  return b;
}

// ---------------------------------------------------------------------------------------------
// Harnesses (Note [Task protocol]).

/// Weights of a module, initialised by name (Note [Seeded weights]).
inline void init_params(const ParamList& ps, uint64_t seed) {
  for (const auto& p : ps) init_param(p, seed);
}
inline std::vector<Tensor> param_tensors(const ParamList& ps) {
  std::vector<Tensor> out;
  for (const auto& p : ps) out.push_back(p.tensor);
  return out;
}

/// gate_up_silu (kDown = false) and llama_mlp (kDown = true). Case dims: num_tokens.
template <class Module, class Cfg, bool kDown> class MlpInstance final : public TaskInstance {
 public:
  explicit MlpInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), module_(from_config) {
    module_.named_parameters("model.layers.0.mlp.", params_);
    const double set_bytes = double(tokens_) * Cfg::hidden_size * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(n * set_bytes + 3.0 * tokens_ * Cfg::intermediate_size * sizeof(T) * 2, "mlp activations");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 1000 + s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override {
    auto v = param_tensors(params_);
    v.push_back(x_[s]);
    return v;
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = ref::silu_and_mul(ref::linear(x_[s], module_.gate_up_proj.weight, module_.gate_up_proj.bias),
                                   IsGeluMlp<Module>::value);
    if constexpr (kDown) ref = ref_linear_of(ref, module_.down_proj);
    return {{"out", out_[s], to_f32(ref), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    const double H = Cfg::hidden_size, I = Cfg::intermediate_size, t = double(tokens_);
    const double flops = 2 * t * H * 2 * I + (kDown ? 2 * t * I * H : 0.0);
    return {flops, param_bytes(params_) + t * H * sizeof(T) + t * (kDown ? H : I) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  ParamList params_;
  std::vector<Tensor> x_, out_;
};

/// Cfg::intermediate_size where the kind has one (the decoder layer), else 0.
template <class Cfg, class = void> struct IntermediateOf {
  static constexpr int64_t value = 0;
};
template <class Cfg> struct IntermediateOf<Cfg, std::void_t<decltype(Cfg::intermediate_size)>> {
  static constexpr int64_t value = Cfg::intermediate_size;
};

/// Expected number of distinct experts that T tokens with top-k of E uniform routing touch
/// (cost estimates where the routing is made inside the forward pass).
inline double expected_experts_hit(double tokens, double experts, double top_k) {
  return experts * (1.0 - std::pow(1.0 - top_k / experts, tokens));
}

/// The MoE constants of a layer/model Config (moe_decoder_layer, moe_for_causal_lm); for dense
/// configs `value` is false. A MoE Config's `intermediate_size` is the active MLP width
/// top_k * moe_intermediate_size (FLOPs and activations per token).
template <class Cfg, class = void> struct MoeOf {
  static constexpr bool value = false;
  static constexpr int64_t experts = 0, top_k = 0, expert_intermediate = 0;
};
template <class Cfg> struct MoeOf<Cfg, std::void_t<decltype(Cfg::num_experts)>> {
  static constexpr bool value = true;
  static constexpr int64_t experts = Cfg::num_experts, top_k = Cfg::top_k, expert_intermediate = Cfg::moe_intermediate_size;
};
/// The relative L2 bound of an MoE decoder layer (L3). The MoE block's output inherits the
/// upstream error through its routing weights as well as through its input: a renormalised
/// top-k weight w_i = exp(l_i) / sum_sel exp(l_j) has relative error dl_i - sum_j w_j dl_j, the
/// *absolute* error of the router logits, which is the upstream relative error (<= 1%, the
/// attention half of the layer) times the logit magnitude (O(1), up to ~2-3 for the top experts
/// under Note [Seeded weights]). Measured on H100 (2026-11-22, bench/results/2026-11-22-h100-moe/
/// l3_tolerance.txt): the Qwen3-30B-A3B layer at decode b1 was 1.08% from its reference, over the
/// 1% dense bound. Hence 2% for layers with experts, 1% for dense ones.
inline constexpr double kMoeLayerRelL2 = 0.02;

/// MLP weight elements of one layer on one rank (dense: 3 H I; MoE: the rank's experts, all of them
/// or under expert parallelism num_experts / ep_size, plus the whole router).
template <class Cfg> constexpr double mlp_weight_elems() {
  if constexpr (MoeOf<Cfg>::value)
    return double(Cfg::num_experts) / EpSizeOf<Cfg>::value * 3.0 * Cfg::hidden_size * Cfg::moe_intermediate_size +
           double(Cfg::num_experts) * Cfg::hidden_size;
  else
    return 3.0 * Cfg::hidden_size * IntermediateOf<Cfg>::value;
}
/// The MLP width one token passes through on one rank, for FLOPs: intermediate_size (a MoE
/// Config's top_k * moe_intermediate_size); under expert parallelism a rank computes the share of
/// the slots routed to its experts, 1 / ep_size of them in expectation (Note [Expert-parallel MoE]); at a data-parallel
/// layout that share of every rank's tokens, as many slots as its own tokens make (Note [Data-parallel expert MoE]).
template <class Cfg> constexpr double active_mlp_width() {
  return double(IntermediateOf<Cfg>::value) * rank_slot_share<Cfg>();
}
/// Expert weight bytes per layer a step of `tokens` tokens need not read on one rank (MoE only;
/// expected over uniform routing, so the cost counts the experts a step touches, not all of them;
/// under expert parallelism the rank's experts and its share of the hit ones).
template <class Cfg> double unread_expert_bytes(double tokens) {
  if constexpr (MoeOf<Cfg>::value) {
    const double e = Cfg::num_experts;
    return (e - expected_experts_hit(tokens_routed_to_rank<Cfg>(tokens), e, Cfg::top_k)) / EpSizeOf<Cfg>::value * 3.0 * Cfg::hidden_size *
           Cfg::moe_intermediate_size * sizeof(typename Cfg::scalar_t);
  } else {
    return 0.0;
  }
}

enum class AttnKind { kQKVRopeCache, kAttentionOProj, kLlamaAttention, kDecoderLayer };

/// qkv_rope_cache, attention_o_proj, llama_attention (L2) and llama_decoder_layer (L3) over one
/// step of `batch` sequences (StepInputs). The layer's KV cache is random for decode; the step
/// writes its own k/v into it (the reference overwrites those rows with its own before reading).
template <class Module, class Cfg, AttnKind kKind> class AttnStepInstance final : public TaskInstance {
 public:
  explicit AttnStepInstance(const ShapeCase& c) : step_(c), module_(from_config) {
    constexpr int64_t Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim, H = Cfg::hidden_size;
    const int64_t t = step_.tokens(), b = step_.meta.num_seqs;
    const double cache_bytes = 2.0 * b * step_.max_len * Hkv * D * sizeof(T);
    const double act_bytes = double(t) * (H * 4 + (Hq + 2 * Hkv) * D * 4) * sizeof(T) +
                             3.0 * t * IntermediateOf<Cfg>::value * 2 * sizeof(T);
    require_device_memory(cache_bytes + 2 * act_bytes, "attention step (KV cache and activations)");
    collect_params();
    allocate_kv_cache<Cfg>(attn(), b, step_.max_len);
    if constexpr (kKind == AttnKind::kAttentionOProj) {
      q_ = empty({t, Hq * D}, dtype_of<T>);
      k_ = empty({t, Hkv * D}, dtype_of<T>);
      v_ = empty({t, Hkv * D}, dtype_of<T>);
    } else {
      x_ = empty({t, H}, dtype_of<T>);
      if constexpr (kKind == AttnKind::kDecoderLayer) {
        res_ = empty({t, H}, dtype_of<T>);
        x0_ = empty({t, H}, dtype_of<T>);
        res0_ = empty({t, H}, dtype_of<T>);
      }
    }
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    if (!step_.meta.is_prefill) {  // the rank's own at a data-parallel layout (dp_seed)
      fill_normal(attn().k_cache, dp_seed<Cfg>(mix_seed(seed, 2001)));
      fill_normal(attn().v_cache, dp_seed<Cfg>(mix_seed(seed, 2002)));
    }
    refresh(0, mix_seed(seed, 2003));
  }
  /// New activations (the step's own k/v then overwrite their cache rows); weights and the rest
  /// of the KV cache stay. At a data-parallel layout every rank draws its own (Note [Data-parallel expert MoE]).
  void refresh(int, uint64_t set_seed) override {
    const uint64_t seed = dp_seed<Cfg>(set_seed);
    if constexpr (kKind == AttnKind::kAttentionOProj) {
      fill_normal(q_, mix_seed(seed, 0));
      fill_normal(k_, mix_seed(seed, 1));
      fill_normal(v_, mix_seed(seed, 2));
    } else {
      fill_normal(x_, mix_seed(seed, 3));
      if constexpr (kKind == AttnKind::kDecoderLayer) {
        fill_normal(res_, mix_seed(seed, 4));
        copy_(x0_, x_);
        copy_(res0_, res_);
      }
    }
  }
  void prepare(int) override {
    out_.clear();
    if constexpr (kKind == AttnKind::kDecoderLayer) {  // in place: restore both inputs
      copy_(x_, x0_);
      copy_(res_, res0_);
    }
  }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    RoutingCaptureGuard cap(&routing_);  // Note [Routing capture]
    if constexpr (kKind == AttnKind::kQKVRopeCache) {
      std::tuple<Tensor, Tensor, Tensor> qkv = module_.forward(step_.positions_for<Cfg>(), x_);
      out_ = {std::get<0>(qkv), std::get<1>(qkv), std::get<2>(qkv)};
    } else if constexpr (kKind == AttnKind::kAttentionOProj) {
      out_ = {module_.forward(q_, k_, v_)};
    } else if constexpr (kKind == AttnKind::kLlamaAttention) {
      out_ = {module_.forward(step_.positions_for<Cfg>(), x_)};
    } else {
      std::tuple<Tensor, Tensor> hr = module_.forward(step_.positions_for<Cfg>(), x_, res_);
      out_ = {std::get<0>(hr), std::get<1>(hr)};
    }
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    for (const Tensor& t : {q_, k_, v_, x0_, res0_}) if (t.defined()) v.push_back(t);
    if (kKind != AttnKind::kAttentionOProj && kKind != AttnKind::kDecoderLayer) v.push_back(x_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    ForwardContextGuard ctx(&step_.meta);
    TaskRoutingGuard routing(&routing_);
    const Tolerance tol = composite_tolerance(dtype_of<T>, 1.0, MoeOf<Cfg>::value ? kMoeLayerRelL2 : 0.01);
    const RefMeta& rm = step_.host;
    if constexpr (kKind == AttnKind::kQKVRopeCache) {
      std::tuple<Tensor, Tensor, Tensor> qkv = ref_qkv_rope_cache<Cfg>(module_, step_.positions_for<Cfg>(), x_);
      return {{"q", contiguous_rows(out_[0]), to_f32(std::get<0>(qkv)), tol},
              {"k", contiguous_rows(out_[1]), to_f32(std::get<1>(qkv)), tol},
              {"v", contiguous_rows(out_[2]), to_f32(std::get<2>(qkv)), tol}};
    } else if constexpr (kKind == AttnKind::kAttentionOProj) {
      return {{"out", out_[0], to_f32(ref_attention_o_proj<Cfg>(module_, rm, q_, k_, v_)), tol}};
    } else if constexpr (kKind == AttnKind::kLlamaAttention) {
      return {{"out", out_[0], to_f32(ref_llama_attention<Cfg>(module_, rm, step_.positions_for<Cfg>(), x_)), tol}};
    } else {
      std::pair<Tensor, Tensor> hr = ref_decoder_layer<Cfg>(module_, rm, step_.positions_for<Cfg>(), x0_, res0_);
      return {{"hidden_states", out_[0], to_f32(hr.first), tol}, {"residual", out_[1], to_f32(hr.second), tol}};
    }
  }
  Cost cost() const override {
    constexpr double Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim, H = Cfg::hidden_size;
    const double t = double(step_.tokens()), es = sizeof(T);
    double flops = 0, bytes = param_bytes(params_);
    const double attn_flops = 4.0 * step_.attended_pairs(window_of<Cfg>()) * D * Hq;
    const double kv_read = step_.cached_kv_tokens(window_of<Cfg>()) * 2 * Hkv * D * es;
    const double qkv_flops = 2 * t * H * (Hq + 2 * Hkv) * D, o_flops = 2 * t * Hq * D * H;
    switch (kKind) {
      case AttnKind::kQKVRopeCache: flops = qkv_flops; bytes += t * (H + (Hq + 4 * Hkv) * D) * es; break;
      case AttnKind::kAttentionOProj: flops = attn_flops + o_flops; bytes += kv_read + t * ((Hq + 2 * Hkv) * D + H) * es; break;
      case AttnKind::kLlamaAttention: flops = qkv_flops + attn_flops + o_flops; bytes += kv_read + t * 2 * (H + Hkv * D) * es; break;
      case AttnKind::kDecoderLayer:
        flops = qkv_flops + attn_flops + o_flops + 6 * t * H * active_mlp_width<Cfg>();
        bytes += kv_read + t * (4 * H + 2 * Hkv * D) * es - unread_expert_bytes<Cfg>(t);
        break;
    }
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  auto& attn() {
    if constexpr (kKind == AttnKind::kDecoderLayer) return (module_.self_attn);
    else return (module_);
  }
  void collect_params() {
    if constexpr (kKind == AttnKind::kDecoderLayer) module_.named_parameters("model.layers.0.", params_);
    else module_.named_parameters("model.layers.0.self_attn.", params_);
  }
  StepInputs step_;
  Module module_;
  ParamList params_;
  Tensor q_, k_, v_, x_, res_, x0_, res0_;
  std::vector<Tensor> out_;
  std::vector<Tensor> routing_;  // the MoE routing of the last run (Note [Routing capture])
};

/// A Gemma model's Cfg (full_every: which layers are full-attention ones).
template <class Cfg, class = void> struct IsGemmaModel : std::false_type {};
template <class Cfg> struct IsGemmaModel<Cfg, std::void_t<decltype(Cfg::full_every)>> : std::true_type {};
/// Cfg::final_softcap (Gemma 2's final_logit_softcapping); 0 when absent.
template <class Cfg> constexpr double final_softcap_of() {
  if constexpr (IsGemmaModel<Cfg>::value) return Cfg::final_softcap;
  else return 0.0;
}

/// The composite fp32 reference of a whole causal LM (Note [Composite references]) over the
/// step of the current forward context (`rm` its host copy): fp32 logits of the token rows
/// `rows`. Gemma: scaled embeddings (the embedding's own factor), GemmaRMSNorm final norm,
/// soft-capped logits (Note [Gemma model] in templates/gemma_for_causal_lm.h.mustache).
template <class Cfg, class Model>
Tensor ref_causal_lm_logits(Model& model, const RefMeta& rm, const Tensor& ids, const Tensor& positions, const Tensor& rows) {
  auto& m = model.model;
  constexpr bool kGemma = IsGemmaModel<Cfg>::value;
  Tensor h, res;
  if constexpr (TpSizeOf<Cfg>::value > 1) {  // the whole table, gathered from the ranks' rows (Note [Sharded references])
    const Tensor whole = gather_rank_rows(m.embed_tokens.weight);
    h = ref::embedding(ids, whole.narrow_first(0, Cfg::vocab_size), m.embed_tokens.embed_scale());
  } else {
    h = ref::embedding(ids, m.embed_tokens.weight, m.embed_tokens.embed_scale());
  }
  m.for_each_layer([&](auto& layer) {
    std::pair<Tensor, Tensor> hr = ref_decoder_layer<Cfg>(layer, rm, positions, h, res);
    h = hr.first;
    res = hr.second;
  });
  Tensor normed = ref::add_rms_norm(h, res, m.norm.weight, m.norm.variance_epsilon, kGemma ? 1.f : 0.f).first;
  Tensor logits = ref::linear(gather_rows(normed, rows), model.lm_head.weight, model.lm_head.bias);
  if constexpr (TpSizeOf<Cfg>::value > 1) logits = gather_vocab_logits(logits, Cfg::vocab_size);  // this rank's vocabulary rows
  if (final_softcap_of<Cfg>() > 0) logits = ref::softcap(logits, final_softcap_of<Cfg>());
  if constexpr (logits_scaling_of<Cfg>() != 1.0) logits = ref::scale(logits, 1.0 / logits_scaling_of<Cfg>());
  return to_f32(logits);
}

/// The whole model (L4) as vLLM's model runner calls it for one step: forward over the step's
/// tokens, then compute_logits on each sequence's last token. Checked against the composite
/// reference over every layer (Note [Composite references]); HF transformers is the external
/// check (bench/parity/).
template <class Model, class Cfg> class CausalLMInstance final : public TaskInstance {
 public:
  explicit CausalLMInstance(const ShapeCase& c) : step_(c) {
    constexpr int64_t Hkv = Cfg::num_kv_heads, D = Cfg::head_dim, H = Cfg::hidden_size;
    const int64_t b = step_.meta.num_seqs, t = step_.tokens();
    const double weights = double(Cfg::num_hidden_layers) *
                               (H * (Cfg::num_heads + 2 * Hkv) * D + Cfg::num_heads * D * H + mlp_weight_elems<Cfg>()) +
                           2.0 * Cfg::vocab_size * H;
    const double cache = 2.0 * Cfg::num_hidden_layers * b * step_.max_len * Hkv * D;
    const double act = double(t) * (6 * H + 4 * Cfg::intermediate_size) + 2.0 * b * Cfg::vocab_size;
    require_device_memory((weights + cache + 2 * act) * sizeof(T), "the whole model (weights, KV cache, activations)");
    model_ = std::make_unique<Model>();
    model_->named_parameters(params_);
    model_->model.for_each_layer([&](auto& layer) { allocate_kv_cache<Cfg>(layer.self_attn, b, step_.max_len); });
    ids_ = empty({t}, DType::kI64);
    last_rows_ = to_device(step_.last_rows, {b});
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 3001));
    if (!step_.meta.is_prefill)  // the rank's own at a data-parallel layout (dp_seed)
      model_->model.for_each_layer([&](auto& layer) {
        fill_normal(layer.self_attn.k_cache, dp_seed<Cfg>(mix_seed(seed, 3002)));
        fill_normal(layer.self_attn.v_cache, dp_seed<Cfg>(mix_seed(seed, 3003)));
      });
  }
  /// New token ids (so every activation of every layer changes); weights and the KV cache stay. At a data-parallel
  /// layout every rank draws its own (Note [Data-parallel expert MoE]).
  void refresh(int, uint64_t seed) override { fill_randint(ids_, dp_seed<Cfg>(seed), 0, Cfg::vocab_size); }
  void prepare(int) override { logits_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    RoutingCaptureGuard cap(&routing_);  // Note [Routing capture]
    Tensor hidden = model_->forward(ids_, step_.positions_for<Cfg>());
    logits_ = model_->compute_logits(gather_last(hidden));
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(ids_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    ForwardContextGuard ctx(&step_.meta);
    TaskRoutingGuard routing(&routing_);
    Tensor logits = ref_causal_lm_logits<Cfg>(*model_, step_.host, ids_, step_.positions_for<Cfg>(), last_rows_);
    return {{"logits", logits_, logits, depth_tolerance(static_cast<size_t>(model_->model.num_layers()))}};
  }
  Cost cost() const override {
    constexpr double Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim, H = Cfg::hidden_size;
    const double t = double(step_.tokens()), b = double(step_.meta.num_seqs), L = double(model_->model.num_layers());
    const double per_layer = 2 * t * H * (Hq + 2 * Hkv) * D + 2 * t * Hq * D * H + 6 * t * H * active_mlp_width<Cfg>();
    // Attention pairs and KV reads per layer: each layer's own window (Gemma mixes them).
    double pairs = 0, kv_tokens = 0;
    model_->model.for_each_layer([&](auto& layer) {
      const int64_t w = layer.self_attn.attn_prefill.sliding_window;
      pairs += step_.attended_pairs(w);
      kv_tokens += step_.cached_kv_tokens(w);
    });
    const double flops = L * per_layer + 4.0 * pairs * D * Hq + 2 * b * H * Cfg::vocab_size;
    // Every weight except the embedding table (only T rows of it are read) + the KV cache read.
    const double bytes = param_bytes(params_) - double(Cfg::vocab_size) * H * sizeof(T) +
                         kv_tokens * 2 * Hkv * D * sizeof(T) - L * unread_expert_bytes<Cfg>(t);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  Tensor gather_last(const Tensor& hidden) const;
  StepInputs step_;
  std::unique_ptr<Model> model_;
  ParamList params_;
  Tensor ids_, last_rows_, logits_;
  std::vector<Tensor> routing_;  // the MoE routing of the last run (Note [Routing capture])
};

template <class Model, class Cfg> Tensor CausalLMInstance<Model, Cfg>::gather_last(const Tensor& hidden) const {
  return gather_rows(hidden, last_rows_);
}

template <class M, class = void> struct HasForwardEmbeds : std::false_type {};
template <class M>
struct HasForwardEmbeds<M, std::void_t<decltype(std::declval<M&>().model.forward_embeds(std::declval<const Tensor&>(),
                                                                                       std::declval<const Tensor&>()))>>
    : std::true_type {};

/// The generated LlamaForCausalLM behind the CausalLM interface (fk_model, the engine).
template <class Model, class Cfg> class CausalLMAdapter final : public CausalLM {
 public:
  /// num_layers 0: the config's layer count.
  CausalLMAdapter(std::string task_name, int64_t num_layers)
      : name_(std::move(task_name)), m_(num_layers > 0 ? num_layers : Cfg::num_hidden_layers) {}
  std::string task_name() const override { return name_; }
  int64_t num_layers() const override { return m_.model.num_layers(); }
  int64_t vocab_size() const override { return Cfg::vocab_size; }
  int64_t hidden_size() const override { return Cfg::hidden_size; }
  int64_t max_position() const override { return Cfg::max_position; }
  DType dtype() const override { return dtype_of<typename Cfg::scalar_t>; }
  ParamList named_parameters() override {
    ParamList p;
    m_.named_parameters(p);
    return p;
  }
  void allocate_kv_cache(int64_t max_seqs, int64_t max_len) override {
    m_.model.for_each_layer([&](auto& layer) { fk::tasks::allocate_kv_cache<Cfg>(layer.self_attn, max_seqs, max_len); });
  }
  Tensor forward(const Tensor& input_ids, const Tensor& positions) override { return m_.forward(input_ids, positions); }
  bool takes_input_embeddings() const override { return HasForwardEmbeds<Model>::value; }
  Tensor embed(const Tensor& input_ids) override {
    if constexpr (HasForwardEmbeds<Model>::value) return m_.model.embed_tokens.forward(input_ids);
    return CausalLM::embed(input_ids);
  }
  Tensor forward_embeds(const Tensor& inputs_embeds, const Tensor& positions, const Tensor& deepstack_rows,
                        const std::vector<Tensor>& deepstack) override {
    if constexpr (HasForwardEmbeds<Model>::value) return m_.model.forward_embeds(inputs_embeds, positions, deepstack_rows, deepstack);
    return CausalLM::forward_embeds(inputs_embeds, positions, deepstack_rows, deepstack);
  }
  Tensor compute_logits(const Tensor& hidden_states) override { return m_.compute_logits(hidden_states); }
  Tensor reference_logits(const Tensor& input_ids, const Tensor& positions, const std::vector<int32_t>& cu_seqlens,
                          const Tensor& rows) override {
    RefMeta rm;
    rm.is_prefill = true;
    rm.cu = cu_seqlens;
    return ref_causal_lm_logits<Cfg>(m_, rm, input_ids, positions, rows);
  }

 private:
  std::string name_;
  Model m_;
};

}  // namespace fk::tasks
