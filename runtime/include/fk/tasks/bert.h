// Forward glue, references and harnesses of the encoder composites (issue 22), mirroring vLLM's
// BERT (vllm/model_executor/models/bert.py), the post-norm encoder:
//   bert_attention (L2)  BertAttention: LayerNorm(dense(attn(qkv_proj(x))) + x), bidirectional
//                        attention over each sequence of the batch (flash_attn_varlen_func with
//                        causal=False under the forward context's cu_seqlens)
//   bert_mlp (L2)        BertIntermediate + BertOutput: LayerNorm(dense2(act(dense1(x))) + x)
//   bert_cross_attention (L2)  BertAttention(is_cross_attention=True) of a decoder (bert2bert):
//                        LayerNorm(dense(cross_attn(q_proj(x), kv_proj(encoder states))) + x), queries
//                        per sequence of the forward context, keys/values per sequence of the encoder
//                        output (encoder_cu_seqlens), cached once (Note [Cross-attention cache])
//   bert_layer (L3)      BertLayer: attention (causal in a decoder), cross-attention (a decoder with
//                        add_cross_attention), the MLP
//   bert_model (L4)      BertModel + BertPooler: embeddings (word + token type + position, then
//                        LayerNorm), the layers, and the pooler (first token of each sequence ->
//                        dense -> tanh)
// An encoder runs whole sequences: the forward context is a prefill (no KV cache). Parameters
// carry HF transformers' BertModel names (Note [Seeded weights] in fk/tasks/llama.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fk/kernels/activation.cuh"
#include "fk/kernels/reference/pooler_ref.cuh"
#include "fk/tasks/cross_encoder_input.h"
#include "fk/tasks/llama.h"
#include "fk/tasks/pooler.h"

namespace fk::tasks {

/// The token-type embedding slot of an encoder without token types (type_vocab_size 0).
struct NoTokenTypes {
  NoTokenTypes(int64_t, int64_t) {}
  Tensor weight;
};
template <class E> inline constexpr bool kHasTokenTypes = !std::is_same_v<E, NoTokenTypes>;
/// The pooler slots of an encoder served with a pooling choice (the Pooler slot filled) or with
/// its own BertPooler (pooler_dense + pooler_act filled, the Pooler slot empty).
struct NoPoolerDense {
  NoPoolerDense(int64_t, int64_t, bool) {}
};
struct NoPoolerAct {};
struct NoPooler {};
template <class P> inline constexpr bool kHasPooler = !std::is_same_v<P, NoPooler>;
/// An empty per-token head slot (colbert_linear, colbert_norm, sparse_linear): the model was not
/// served with `add --multi-vector` / `--sparse` (Note [Embedding heads]).
struct NoTokenHead {
  NoTokenHead() = default;
  NoTokenHead(int64_t, int64_t, bool) {}
};
template <class H> inline constexpr bool kHasHead = !std::is_same_v<H, NoTokenHead>;
/// The crossattention slot of an encoder layer (and of a decoder without add_cross_attention).
struct NoCrossAttention {
  explicit NoCrossAttention(FromConfig) {}
};
template <class X> inline constexpr bool kHasCross = !std::is_same_v<X, NoCrossAttention>;
/// Whether module M has a filled crossattention slot (false for modules without the slot: ViT's).
template <class M, class = void> struct HasCrossSlot : std::false_type {};
template <class M>
struct HasCrossSlot<M, std::void_t<decltype(std::declval<M&>().crossattention)>>
    : std::bool_constant<kHasCross<std::decay_t<decltype(std::declval<M&>().crossattention)>>> {};
/// Cfg::causal of an encoder family's config (a decoder's causal self-attention); false where the
/// config has none (ViT).
template <class Cfg, class = void> struct EncoderCausalOf : std::false_type {};
template <class Cfg> struct EncoderCausalOf<Cfg, std::void_t<decltype(Cfg::causal)>> : std::bool_constant<Cfg::causal> {};

// ---------------------------------------------------------------------------------------------
// Forward glue (the baseline composition; every call goes through the child modules).

/// dense(attn(qkv_proj(x))) for x [T, H], bidirectional over each sequence of the forward context:
/// the encoders' self-attention (BERT's before its output LayerNorm; ViT's whole attention module).
template <class Cfg, class M> Tensor encoder_self_attention(M& m, const Tensor& x) {
  constexpr int64_t Hq = Cfg::num_heads, D = Cfg::head_dim, q_size = Hq * D;
  const AttnMetadata& meta = forward_context();
  FK_CHECK(meta.is_prefill, "an encoder runs whole sequences: the forward context must be a prefill");
  const int64_t tokens = x.size(0);
  Tensor qkv = std::get<0>(m.qkv_proj.forward(x));
  Tensor q = contiguous_rows(qkv.narrow_last(0, q_size)).view({tokens, Hq, D});
  Tensor k = contiguous_rows(qkv.narrow_last(q_size, q_size)).view({tokens, Hq, D});
  Tensor v = contiguous_rows(qkv.narrow_last(2 * q_size, q_size)).view({tokens, Hq, D});
  Tensor attn = m.attn.forward(q, k, v, meta.cu_seqlens, meta.cu_seqlens, meta.max_seqlen, meta.max_seqlen);
  return std::get<0>(m.dense.forward(attn.view({tokens, q_size})));
}

/// BertAttention.forward(hidden_states [T, H]) -> [T, H] over the forward context's sequences.
template <class Cfg, class M> Tensor bert_attention_forward(M& m, const Tensor& x) {
  // LayerNorm(o + x); the sum is not kept (post-norm)
  return std::get<0>(m.layernorm.forward(encoder_self_attention<Cfg>(m, x), x));
}

/// BertAttention(is_cross_attention=True).forward(hidden_states [T, H], encoder_hidden_states [Tk, H]
/// or undefined) -> LayerNorm(dense(cross_attn(q, k, v)) + hidden_states). With encoder states, k and
/// v are the column blocks of kv_proj's output, written into the attention's cache as strided rows;
/// without, the cache of an earlier call serves (Note [Cross-attention cache]).
template <class Cfg, class M> Tensor bert_cross_attention_forward(M& m, const Tensor& x, const Tensor& enc) {
  constexpr int64_t Hq = Cfg::num_heads, D = Cfg::head_dim, q_size = Hq * D;
  const AttnMetadata& meta = forward_context();
  FK_CHECK(meta.is_prefill, "BertCrossAttention runs whole decoder sequences here: the forward context must be a prefill");
  FK_CHECK(meta.encoder_cu_seqlens.defined() && meta.encoder_cu_seqlens.numel() == meta.num_seqs + 1,
           "BertCrossAttention: the forward context names no encoder sequences (encoder_cu_seqlens [num_seqs + 1])");
  const int64_t tokens = x.size(0);
  Tensor q = std::get<0>(m.q_proj.forward(x)).view({tokens, Hq, D});
  Tensor k, v;
  if (enc.defined()) {
    FK_CHECK(enc.dim() == 2 && enc.size(1) == Cfg::hidden_size, "BertCrossAttention encoder_hidden_states: expected [Tk, " +
                                                                      std::to_string(Cfg::hidden_size) + "], got " + enc.str());
    Tensor kv = std::get<0>(m.kv_proj.forward(enc));  // [Tk, 2 * q_size]: key | value
    const int64_t tk = enc.size(0);
    k = kv.as_strided({tk, Hq, D}, {2 * q_size, D, 1});
    v = kv.as_strided({tk, Hq, D}, {2 * q_size, D, 1}, q_size);
  }
  Tensor attn = m.attn.forward(q, k, v, meta.cu_seqlens, meta.encoder_cu_seqlens, meta.max_seqlen, meta.max_encoder_seqlen);
  return std::get<0>(m.layernorm.forward(std::get<0>(m.dense.forward(attn.view({tokens, q_size}))), x));
}

/// BertLayer.forward: mlp(crossattention(attention(x), encoder states)), the cross step only in a
/// layer whose crossattention slot is filled.
template <class L> Tensor bert_layer_forward(L& l, const Tensor& x, const Tensor& enc) {
  Tensor h = l.attention.forward(x);
  if constexpr (HasCrossSlot<L>::value) {
    h = l.crossattention.forward(h, enc);
  } else {
    FK_CHECK(!enc.defined(), "this encoder layer has no cross-attention: encoder_hidden_states must be undefined");
  }
  return l.mlp.forward(h);
}

/// BertIntermediate + BertOutput: LayerNorm(output_dense(act(intermediate_dense(x))) + x).
template <class M> Tensor bert_mlp_forward(M& m, const Tensor& x) {
  Tensor h = m.act_fn.forward(std::get<0>(m.intermediate_dense.forward(x)));
  return std::get<0>(m.layernorm.forward(std::get<0>(m.output_dense.forward(h)), x));
}

/// BertEmbedding: LayerNorm(word[ids] + token_type[types] + position[positions]), summed in the
/// model dtype in HF's and vLLM's order (words + types, then + positions).
template <class M> Tensor bert_embeddings_forward(M& m, const Tensor& ids, const Tensor& positions, const Tensor& types) {
  Tensor e = m.word_embeddings.forward(ids);
  if constexpr (kHasTokenTypes<std::decay_t<decltype(m.token_type_embeddings)>>) add_(e, m.token_type_embeddings.forward(types));
  add_(e, m.position_embeddings.forward(positions));
  return m.embeddings_layernorm.forward(e);
}

/// BertModel.pool: BertPooler (tanh(dense(first token))) of each sequence of the forward context,
/// or the pooling choice's Pooler child (cls / mean / last, normalised or not).
template <class M> Tensor bert_pool_forward(M& m, const Tensor& hidden_states) {
  const AttnMetadata& meta = forward_context();
  if constexpr (kHasPooler<std::decay_t<decltype(m.pooler)>>) {
    return m.pooler.forward(hidden_states, meta.cu_seqlens);
  } else {
    Tensor first = gather_rows(hidden_states, meta.cu_seqlens.narrow_first(0, meta.num_seqs));
    return m.pooler_act.forward(std::get<0>(m.pooler_dense.forward(first)));
  }
}

/// The rows of the packed per-token output `x` [T, W] of the forward context's sequences that a
/// head keeps: all, or without each sequence's first `first` and last `last` tokens (BGE-M3's
/// BOS/EOS filter; every sequence must hold them).
inline Tensor keep_head_rows(const Tensor& x, int first, int last) {
  if (first == 0 && last == 0) return x;
  const AttnMetadata& meta = forward_context();
  if (!meta.host_cu_seqlens.empty()) return drop_sequence_ends(x, meta.cu_seqlens, meta.host_cu_seqlens, first, last);
  return drop_sequence_ends(x, meta.cu_seqlens, to_host<int32_t>(meta.cu_seqlens.narrow_first(0, meta.num_seqs + 1)), first, last);
}

/// BertModel.token_embed: the multi-vector head (ColBERT, BGE-M3's colbert vectors):
/// normalize(colbert_linear(h)) per token of the forward context's sequences, without each
/// sequence's first token with Cfg::drop_special_tokens -> [T', multi_vector].
template <class Cfg, class M> Tensor bert_token_embed_forward(M& m, const Tensor& hidden_states) {
  if constexpr (Cfg::multi_vector > 0) {
    Tensor v = m.colbert_norm.forward(std::get<0>(m.colbert_linear.forward(hidden_states)));
    return keep_head_rows(v, Cfg::drop_special_tokens ? 1 : 0, 0);
  } else {
    FK_CHECK(false, "the model has no multi-vector head (add --multi-vector)");
    return Tensor();
  }
}
/// BertModel.token_weights: the sparse head (BGE-M3's lexical weights): relu(sparse_linear(h)) per
/// token, without each sequence's first and last tokens with Cfg::drop_special_tokens -> [T''].
template <class Cfg, class M> Tensor bert_token_weights_forward(M& m, const Tensor& hidden_states) {
  if constexpr (Cfg::sparse) {
    const int drop = Cfg::drop_special_tokens ? 1 : 0;
    Tensor w = keep_head_rows(m.sparse_linear.forward(hidden_states), drop, drop);
    return w.view({w.size(0)});
  } else {
    FK_CHECK(false, "the model has no sparse head (add --sparse)");
    return Tensor();
  }
}

// ---------------------------------------------------------------------------------------------
// Parameters (HF BertModel names).

template <class N> void add_layer_norm_params(ParamList& out, N& norm, const std::string& name) {
  out.push_back({name + ".weight", norm.weight, 1.f, 0.1f});
  if (norm.bias.defined()) out.push_back({name + ".bias", norm.bias, 0.f, 0.1f});
}
/// BertPooler's dense ("pooler.dense"); a model served with a pooling choice has no pooler weights
/// (HF: add_pooling_layer=False; vLLM's embedding models skip them).
template <class M> void add_bert_pooler_params(ParamList& out, M& m) {
  if constexpr (!kHasPooler<std::decay_t<decltype(m.pooler)>>)
    add_linear(out, m.pooler_dense, {Part("pooler.dense", m.pooler_dense.weight.size(0))});
}
/// The per-token heads, by vLLM's names (BGE-M3's colbert_linear.pt / sparse_linear.pt; ColBERT's
/// checkpoint calls its projection `linear`): colbert_linear.{weight,bias}, sparse_linear.{weight,bias}.
template <class M> void add_token_head_params(ParamList& out, M& m) {
  if constexpr (kHasHead<std::decay_t<decltype(m.colbert_linear)>>)
    add_linear(out, m.colbert_linear, {Part("colbert_linear", m.colbert_linear.weight.size(0))});
  if constexpr (kHasHead<std::decay_t<decltype(m.sparse_linear)>>) {
    const float std = 1.f / std::sqrt(static_cast<float>(m.sparse_linear.weight.size(1)));
    out.push_back({"sparse_linear.weight", m.sparse_linear.weight, 0.f, std});
    if (m.sparse_linear.bias.defined()) out.push_back({"sparse_linear.bias", m.sparse_linear.bias, 0.f, 0.5f});
  }
}
/// `prefix`: e.g. "encoder.layer.0.attention."
template <class Cfg, class M> void add_bert_attention_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr int64_t q_size = Cfg::num_heads * Cfg::head_dim;
  add_linear(out, m.qkv_proj,
             {Part(prefix + "self.query", q_size), Part(prefix + "self.key", q_size), Part(prefix + "self.value", q_size)});
  add_linear(out, m.dense, {Part(prefix + "output.dense", Cfg::hidden_size)});
  add_layer_norm_params(out, m.layernorm, prefix + "output.LayerNorm");
}
/// `prefix`: e.g. "encoder.layer.0.crossattention."
template <class Cfg, class M> void add_bert_cross_attention_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr int64_t q_size = Cfg::num_heads * Cfg::head_dim;
  add_linear(out, m.q_proj, {Part(prefix + "self.query", q_size)});
  add_linear(out, m.kv_proj, {Part(prefix + "self.key", q_size), Part(prefix + "self.value", q_size)});
  add_linear(out, m.dense, {Part(prefix + "output.dense", Cfg::hidden_size)});
  add_layer_norm_params(out, m.layernorm, prefix + "output.LayerNorm");
}
/// `prefix`: e.g. "encoder.layer.0."
template <class L> void add_bert_layer_params(ParamList& out, L& l, const std::string& prefix) {
  l.attention.named_parameters(prefix + "attention.", out);
  if constexpr (HasCrossSlot<L>::value) l.crossattention.named_parameters(prefix + "crossattention.", out);
  l.mlp.named_parameters(prefix, out);
}
/// `prefix`: e.g. "encoder.layer.0."
template <class Cfg, class M> void add_bert_mlp_params(ParamList& out, M& m, const std::string& prefix) {
  add_linear(out, m.intermediate_dense, {Part(prefix + "intermediate.dense", Cfg::intermediate_size)});
  add_linear(out, m.output_dense, {Part(prefix + "output.dense", Cfg::hidden_size)});
  add_layer_norm_params(out, m.layernorm, prefix + "output.LayerNorm");
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]): op by op from the model dtype, rounded where a
// bf16 network rounds; attention over each token's whole sequence.

/// dense(attention(qkv(x))) by reference, attention over each token's whole sequence.
template <class Cfg, class M> Tensor ref_encoder_self_attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) {
  constexpr int Hq = Cfg::num_heads, D = Cfg::head_dim;
  Tensor qkv = ref::linear(x, m.qkv_proj.weight, m.qkv_proj.bias);
  Tensor q = qkv.narrow_last(0, Hq * D), k = qkv.narrow_last(Hq * D, Hq * D), v = qkv.narrow_last(2 * Hq * D, Hq * D);
  Tensor attn = ref::attention_prefill(q, k, v, cu, Hq, Hq, D, Cfg::softmax_scale, 0, 0, Tensor(), EncoderCausalOf<Cfg>::value);
  return ref::linear(attn, m.dense.weight, m.dense.bias);
}
template <class Cfg, class M> Tensor ref_bert_cross_attention(M& m, const std::vector<int32_t>& cu, const Tensor& x, const RefEncoder& e) {
  constexpr int Hq = Cfg::num_heads, D = Cfg::head_dim;
  Tensor q = ref::linear(x, m.q_proj.weight, m.q_proj.bias);
  Tensor kv = ref::linear(e.states, m.kv_proj.weight, m.kv_proj.bias);
  Tensor attn = ref::attention_cross(q, kv.narrow_last(0, Hq * D), kv.narrow_last(Hq * D, Hq * D), cu, e.cu, Hq, Hq, D, Cfg::softmax_scale);
  Tensor o = ref::linear(attn, m.dense.weight, m.dense.bias);
  return ref::add_layer_norm(o, x, m.layernorm.weight, m.layernorm.bias, m.layernorm.eps).first;
}
template <class Cfg, class M> Tensor ref_bert_attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) {
  return ref::add_layer_norm(ref_encoder_self_attention<Cfg>(m, cu, x), x, m.layernorm.weight, m.layernorm.bias, m.layernorm.eps).first;
}
template <class Cfg, class M> Tensor ref_bert_mlp(M& m, const Tensor& x) {
  Tensor h = ref::activation(ref::linear(x, m.intermediate_dense.weight, m.intermediate_dense.bias), Cfg::activation);
  Tensor o = ref::linear(h, m.output_dense.weight, m.output_dense.bias);
  return ref::add_layer_norm(o, x, m.layernorm.weight, m.layernorm.bias, m.layernorm.eps).first;
}
template <class Cfg, class L> Tensor ref_bert_layer(L& l, const std::vector<int32_t>& cu, const Tensor& x, const RefEncoder* e = nullptr) {
  Tensor h = ref_bert_attention<Cfg>(l.attention, cu, x);
  if constexpr (HasCrossSlot<L>::value) {
    FK_CHECK(e != nullptr, "reference BertLayer with cross-attention: no encoder states");
    h = ref_bert_cross_attention<Cfg>(l.crossattention, cu, h, *e);
  }
  return ref_bert_mlp<Cfg>(l.mlp, h);
}

/// (last hidden state [T, H], pooled [B, H]) of a BertModel by reference (positions 0-based per
/// sequence; the model's position_offset applied as the model applies it).
template <class Cfg, class M>
std::pair<Tensor, Tensor> ref_bert_model(M& m, const std::vector<int32_t>& cu, const Tensor& ids, const Tensor& positions,
                                         const Tensor& types, const Tensor& first_rows, const RefEncoder* enc = nullptr) {
  Tensor e = ref::embedding(ids, m.word_embeddings.weight);
  if constexpr (kHasTokenTypes<std::decay_t<decltype(m.token_type_embeddings)>>)
    e = ref::round_to(ref::add_f32(e, ref::embedding(types, m.token_type_embeddings.weight)), e.dtype());
  const Tensor pos = offset_positions(positions, Cfg::position_offset);  // index arithmetic only
  Tensor h = ref::add_layer_norm(e, ref::embedding(pos, m.position_embeddings.weight), m.embeddings_layernorm.weight,
                                 m.embeddings_layernorm.bias, m.embeddings_layernorm.eps)
                 .first;
  for (auto& layer : m.layers) h = ref_bert_layer<Cfg>(layer, cu, h, enc);
  using P = std::decay_t<decltype(m.pooler)>;
  if constexpr (kHasPooler<P>) {  // the pooling choice, from the reference's final hidden states
    Tensor cu_d = to_device(cu, {static_cast<int64_t>(cu.size())});
    Tensor pooled = empty({static_cast<int64_t>(cu.size()) - 1, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::pool_ref(pooled.data<float>(), h.data<typename Cfg::scalar_t>(), Cfg::hidden_size, cu_d.data<int32_t>(),
                                     static_cast<int64_t>(cu.size()) - 1, static_cast<int>(Cfg::hidden_size), P::kPooling, P::kNormalize,
                                     current_stream());
    FK_CHECK_LAUNCH();
    return {h, pooled};
  } else {
    Tensor cls = gather_rows(h, first_rows);
    Tensor pooled = ref::activation(ref::linear(cls, m.pooler_dense.weight, m.pooler_dense.bias), fk::kernels::Act::kTanh);
    return {h, pooled};
  }
}

/// The per-token heads by reference (RefTokenHeads), from the reference's final hidden states h
/// (model dtype) of the sequences at `cu` (host) / `cu_d` (device): token vectors fp32 [T',
/// multi_vector] or undefined; lexical weights fp32 [T''] or undefined, and the RMS of their
/// pre-activations (Note [ReLU output tolerance]). The projection rounds to the model dtype as the
/// head's GEMM does; the norm and the lexical weights are fp64 sums. `vectors` / `lexical` false: that
/// head is left undefined (each check computes only the head it compares).
struct RefTokenHeads {
  Tensor vectors, weights;
  double pre_rms = 0;
};
template <class Cfg, class M>
RefTokenHeads ref_token_heads(M& m, const std::vector<int32_t>& cu, const Tensor& cu_d, const Tensor& h, bool vectors = true,
                              bool lexical = true) {
  using T = typename Cfg::scalar_t;
  const int drop = Cfg::drop_special_tokens ? 1 : 0;
  RefTokenHeads out;
  Tensor vecs, weights;
  if constexpr (Cfg::multi_vector > 0) if (vectors) {
    Tensor p = ref::linear(h, m.colbert_linear.weight, m.colbert_linear.bias);
    Tensor n = empty({p.size(0), Cfg::multi_vector}, DType::kF32);
    fk::kernels::reference::l2_normalize_ref<T>(n.data<float>(), p.data<T>(), p.stride(0), p.size(0), static_cast<int>(Cfg::multi_vector),
                                                current_stream());
    FK_CHECK_LAUNCH();
    vecs = drop_sequence_ends(n, cu_d, cu, drop, 0);
  }
  if constexpr (Cfg::sparse) if (lexical) {
    Tensor w = empty({h.size(0), 1}, DType::kF32);
    const Tensor &sw = m.sparse_linear.weight, &sb = m.sparse_linear.bias;
    fk::kernels::reference::token_classify_ref<T>(w.data<float>(), h.data<T>(), h.stride(0), sw.data<T>(), sb.defined() ? sb.data<T>() : nullptr, h.size(0),
                                                  static_cast<int>(Cfg::hidden_size), 1, fk::kernels::HeadAct::kRelu, current_stream());
    FK_CHECK_LAUNCH();
    Tensor kept = drop_sequence_ends(w, cu_d, cu, drop, drop);
    weights = kept.view({kept.size(0)});
    Tensor pre = empty({h.size(0), 1}, DType::kF32);  // the scores before the ReLU
    fk::kernels::reference::token_classify_ref<T>(pre.data<float>(), h.data<T>(), h.stride(0), sw.data<T>(), sb.defined() ? sb.data<T>() : nullptr,
                                                  h.size(0), static_cast<int>(Cfg::hidden_size), 1, fk::kernels::HeadAct::kNone,
                                                  current_stream());
    FK_CHECK_LAUNCH();
    double sq = 0;
    for (float x : to_host<float>(pre)) sq += double(x) * x;
    out.pre_rms = h.size(0) > 0 ? std::sqrt(sq / double(h.size(0))) : 0.0;
  }
  out.vectors = vecs;
  out.weights = weights;
  return out;
}

// Note [ReLU output tolerance]
// A ReLU output is ill-conditioned where its input sits near zero: a deep encoder's final hidden
// states carry the chain's relative error (depth_tolerance's max_rel_l2), which becomes an absolute
// error in every score, and where the scores are mostly clipped (a random deep encoder's tokens
// collapse to nearly one vector, so one sign can hold for all of them) the relative L2 of the few
// small survivors says nothing. Bounding the scores' error by the chain's did not hold either: on
// BGE-M3's 24-layer random model fk_bench refused fresh inputs (H100, sessions 20 and 24: up to 306
// of 2612 weights over 2 x max_rel_l2 x RMS(scores), 289 of 12352 over (2 + sqrt(2 ln n)) x that),
// while HF parity with the real weights passes (0.024 of 0.050). So the lexical weights are checked
// as what they are, a function of the final hidden states: against the reference head applied to
// the task's own last_hidden_state, which is itself checked against the reference chain (a task
// cannot pass with wrong hidden states, nor with weights that do not follow from them). The head
// adds one GEMM's rounding: held elementwise, without a relative-L2 bound, to atol = (2 + sqrt(2 ln
// n)) x max_rel_l2 x RMS(pre-activation scores) with one layer's tolerance (max_rel_l2 x RMS bounds
// the RMS of the scores' errors; the largest of n such errors runs to about sqrt(2 ln n) times it).
// The token_classifier kind itself is checked at its own level on well-conditioned scores
// (TokenClassifierInstance).
inline Tolerance relu_output_tolerance(const Tolerance& depth, double pre_rms, int64_t n) {
  Tolerance t = depth;
  t.atol = (2.0 + std::sqrt(2.0 * std::log(double(std::max<int64_t>(n, 2))))) * depth.max_rel_l2 * pre_rms;
  t.max_rel_l2 = std::numeric_limits<double>::infinity();
  return t;
}

// ---------------------------------------------------------------------------------------------
// Harnesses.

enum class EncoderKind { kAttention, kLayer };

/// The composite references of an encoder family's attention, layer and MLP (Refs::attention(m,
/// cu, x), Refs::layer(l, cu, x), Refs::mlp(m, x)): what the harnesses below check against.
template <class Cfg> struct BertRefs {
  template <class M> static Tensor attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) { return ref_bert_attention<Cfg>(m, cu, x); }
  template <class L> static Tensor layer(L& l, const std::vector<int32_t>& cu, const Tensor& x, const RefEncoder* e = nullptr) {
    return ref_bert_layer<Cfg>(l, cu, x, e);
  }
  template <class M> static Tensor mlp(M& m, const Tensor& x) { return ref_bert_mlp<Cfg>(m, x); }
};

/// An encoder family's attention (L2) or layer (L3) over one batch of whole sequences
/// (StepInputs' prefill: batch, seq_len, ragged or uniform lengths), checked against Refs (BERT's,
/// ViT's). Input x ~ N(0, 1) (a LayerNorm output's scale). Parameters under the families' shared
/// HF prefix "encoder.layer.0." (the attention's: "encoder.layer.0.attention.").
template <class Module, class Cfg, class Refs, EncoderKind kKind> class EncoderStepInstance final : public TaskInstance {
 public:
  explicit EncoderStepInstance(const ShapeCase& c) : step_(c), module_(from_config) {
    FK_CHECK(step_.meta.is_prefill, "encoder cases are whole sequences (batch, seq_len)");
    constexpr int64_t H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim;
    const int64_t t = step_.tokens();
    const double act = double(t) * (4 * H + 6 * Hq * D + (kKind == EncoderKind::kLayer ? 2 * IntermediateOf<Cfg>::value : 0)) *
                       sizeof(T);
    require_device_memory(3 * act, "encoder activations");
    if constexpr (kKind == EncoderKind::kLayer) module_.named_parameters("encoder.layer.0.", params_);
    else module_.named_parameters("encoder.layer.0.attention.", params_);
    x_ = empty({t, H}, dtype_of<T>);
    if constexpr (kCross) enc_.attach(step_.host.cu, step_.meta, H, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 4001));
  }
  void refresh(int, uint64_t seed) override {
    fill_normal(x_, seed);
    if constexpr (kCross) fill_normal(enc_.ref.states, mix_seed(seed, 1));
  }
  void prepare(int) override { out_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    if constexpr (kCross) out_ = module_.forward(x_, enc_.ref.states);
    else out_ = module_.forward(x_);
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(x_);
    if constexpr (kCross) v.push_back(enc_.ref.states);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    Tensor ref;
    if constexpr (kCross) ref = Refs::layer(module_, step_.host.cu, x_, &enc_.ref);
    else if constexpr (kKind == EncoderKind::kLayer) ref = Refs::layer(module_, step_.host.cu, x_);
    else ref = Refs::attention(module_, step_.host.cu, x_);
    return {{"out", out_, to_f32(ref), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    constexpr double H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim;
    const double t = double(step_.tokens()), es = sizeof(T);
    const double pairs = EncoderCausalOf<Cfg>::value ? step_.attended_pairs() : step_.bidirectional_pairs();
    double flops = 2 * t * H * 3 * Hq * D + 4 * pairs * Hq * D + 2 * t * Hq * D * H;
    if (kKind == EncoderKind::kLayer) flops += 4 * t * H * IntermediateOf<Cfg>::value;
    double bytes = param_bytes(params_) + 2 * t * H * es;
    if constexpr (kCross) {  // q, kv (over the encoder's tokens), attention, output dense
      const double tk = double(enc_.ref.cu.back());
      flops += 2 * t * H * Hq * D + 4 * tk * H * Hq * D + 4 * enc_.pairs(step_.host.cu) * Hq * D + 2 * t * Hq * D * H;
      bytes += tk * H * es;
    }
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr bool kCross = kKind == EncoderKind::kLayer && HasCrossSlot<Module>::value;
  StepInputs step_;
  Module module_;
  ParamList params_;
  CrossEncoderInput enc_;
  Tensor x_, out_;
};

/// bert_cross_attention (L2) over one batch of whole decoder sequences (StepInputs' prefill) and
/// an encoder output (CrossEncoderInput): every call passes the encoder states, so it projects keys
/// and values and writes the cache (a decoder's first step). Checked against
/// ref_bert_cross_attention. x ~ N(0, 1). Parameters under "encoder.layer.0.crossattention.".
template <class Module, class Cfg> class BertCrossAttentionInstance final : public TaskInstance {
 public:
  explicit BertCrossAttentionInstance(const ShapeCase& c) : step_(c), module_(from_config) {
    FK_CHECK(step_.meta.is_prefill, "cross-attention cases are whole sequences (batch, seq_len)");
    constexpr int64_t H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim;
    const int64_t t = step_.tokens();
    require_device_memory(3.0 * t * (4 * H + 8 * Hq * D) * sizeof(T), "cross-attention activations and cache");
    module_.named_parameters("encoder.layer.0.crossattention.", params_);
    x_ = empty({t, H}, dtype_of<T>);
    enc_.attach(step_.host.cu, step_.meta, H, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 4002));
  }
  void refresh(int, uint64_t seed) override {
    fill_normal(x_, seed);
    fill_normal(enc_.ref.states, mix_seed(seed, 1));
  }
  void prepare(int) override { out_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    out_ = module_.forward(x_, enc_.ref.states);
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(x_);
    v.push_back(enc_.ref.states);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    Tensor ref = ref_bert_cross_attention<Cfg>(module_, step_.host.cu, x_, enc_.ref);
    return {{"out", out_, to_f32(ref), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    constexpr double H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim;
    const double t = double(step_.tokens()), tk = double(enc_.ref.cu.back()), es = sizeof(T);
    const double flops = 2 * t * H * Hq * D + 4 * tk * H * Hq * D + 4 * enc_.pairs(step_.host.cu) * Hq * D + 2 * t * Hq * D * H;
    return {flops, param_bytes(params_) + (2 * t + tk) * H * es};
  }

 private:
  using T = typename Cfg::scalar_t;
  StepInputs step_;
  Module module_;
  ParamList params_;
  CrossEncoderInput enc_;
  Tensor x_, out_;
};
/// bert_attention (L2) and bert_layer (L3).
template <class Module, class Cfg, EncoderKind kKind> using EncoderInstance = EncoderStepInstance<Module, Cfg, BertRefs<Cfg>, kKind>;

/// An encoder family's MLP (L2), checked against Refs::mlp. Case dims: num_tokens.
template <class Module, class Cfg, class Refs> class EncoderMlpStepInstance final : public TaskInstance {
 public:
  explicit EncoderMlpStepInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), module_(from_config) {
    module_.named_parameters("encoder.layer.0.", params_);
    const double set_bytes = double(tokens_) * Cfg::hidden_size * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(n * set_bytes + 3.0 * tokens_ * (Cfg::intermediate_size + 2 * Cfg::hidden_size) * sizeof(T),
                          "encoder MLP activations");
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
    return {{"out", out_[s], to_f32(Refs::mlp(module_, x_[s])), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    const double H = Cfg::hidden_size, I = Cfg::intermediate_size, t = double(tokens_);
    return {4 * t * H * I, param_bytes(params_) + 2 * t * H * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  ParamList params_;
  std::vector<Tensor> x_, out_;
};
/// bert_mlp (L2).
template <class Module, class Cfg> using EncoderMlpInstance = EncoderMlpStepInstance<Module, Cfg, BertRefs<Cfg>>;

/// The whole encoder (L4) as vLLM's pooling runner calls it: forward over a batch of whole
/// sequences (input ids, positions 0.., token types), then the pooler on each sequence's first
/// token. Checked: the last hidden state and the pooled vectors against the composite reference
/// (Note [Composite references]); HF transformers is the external check (bench/parity/).
template <class Model, class Cfg> class EncoderModelInstance final : public TaskInstance {
 public:
  explicit EncoderModelInstance(const ShapeCase& c) : step_(c) {
    constexpr double H = Cfg::hidden_size, I = Cfg::intermediate_size;
    const double t = double(step_.tokens());
    const double weights = Cfg::num_hidden_layers * (4 * H * H + 2 * H * I) + (double(Cfg::vocab_size) + Cfg::positions) * H;
    const double act = t * (8 * H + 2 * I);
    require_device_memory((weights + 3 * act) * sizeof(T), "the whole encoder (weights, activations)");
    model_ = std::make_unique<Model>();
    model_->named_parameters(params_);
    const int64_t tokens = step_.tokens();
    ids_ = empty({tokens}, DType::kI64);
    types_ = empty({tokens}, DType::kI64);
    first_rows_ = step_.meta.cu_seqlens.narrow_first(0, step_.meta.num_seqs);  // the [CLS] rows the pooler reads
    step_.meta.host_cu_seqlens = step_.host.cu;  // the token heads size their outputs by it
    if constexpr (Cfg::cross_attention) enc_.attach(step_.host.cu, step_.meta, Cfg::hidden_size, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 5001));
  }
  /// New token ids and token types (every activation changes); weights stay.
  void refresh(int, uint64_t seed) override {
    fill_randint(ids_, mix_seed(seed, 0), 0, Cfg::vocab_size);
    fill_randint(types_, mix_seed(seed, 1), 0, std::max<int64_t>(1, Cfg::type_vocab_size));
    if constexpr (Cfg::cross_attention) fill_normal(enc_.ref.states, mix_seed(seed, 2));
  }
  void prepare(int) override { hidden_ = pooled_ = vectors_ = weights_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    hidden_ = model_->forward(ids_, step_.positions, types_, nullptr, enc_.ref.states);
    pooled_ = model_->pool(hidden_);
    if constexpr (Cfg::multi_vector > 0) vectors_ = model_->token_embed(hidden_);
    if constexpr (Cfg::sparse) weights_ = model_->token_weights(hidden_);
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(ids_);
    v.push_back(types_);
    if constexpr (Cfg::cross_attention) v.push_back(enc_.ref.states);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    std::pair<Tensor, Tensor> r = ref_bert_model<Cfg>(*model_, step_.host.cu, ids_, step_.positions, types_, first_rows_,
                                                      Cfg::cross_attention ? &enc_.ref : nullptr);
    const Tolerance tol = depth_tolerance(static_cast<size_t>(model_->num_layers()));
    std::vector<CheckedOutput> out{{"last_hidden_state", hidden_, to_f32(r.first), tol}, {"pooled", pooled_, to_f32(r.second), tol}};
    if constexpr (Cfg::multi_vector > 0 || Cfg::sparse) {
      if constexpr (Cfg::multi_vector > 0) {
        const RefTokenHeads heads = ref_token_heads<Cfg>(*model_, step_.host.cu, step_.meta.cu_seqlens, r.first, true, false);
        out.push_back({"token_vectors", vectors_, heads.vectors, tol});
      }
      if constexpr (Cfg::sparse) {
        // Of the task's own final hidden states (checked above): Note [ReLU output tolerance].
        const RefTokenHeads own = ref_token_heads<Cfg>(*model_, step_.host.cu, step_.meta.cu_seqlens, hidden_, false, true);
        out.push_back({"lexical_weights", weights_, own.weights, relu_output_tolerance(depth_tolerance(1), own.pre_rms, own.weights.numel())});
      }
    }
    return out;
  }
  Cost cost() const override {
    constexpr double H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim, I = Cfg::intermediate_size;
    const double t = double(step_.tokens()), L = double(model_->num_layers());
    const double b = double(step_.meta.num_seqs);
    const double pairs = Cfg::causal ? step_.attended_pairs() : step_.bidirectional_pairs();
    // The pooler: BertPooler's dense on B rows, or the chosen pooling (no GEMM; a mean reads every row).
    const double pool_flops = kHasPooler<std::decay_t<decltype(model_->pooler)>> ? t * H : 2 * b * H * H;
    double flops = L * (2 * t * H * 3 * Hq * D + 4 * pairs * Hq * D + 2 * t * Hq * D * H + 4 * t * H * I) + pool_flops +
                   2 * t * H * (double(Cfg::multi_vector) + (Cfg::sparse ? 1 : 0));
    // Every weight except the embedding tables (only T rows of each are read).
    double bytes = param_bytes(params_) - (double(Cfg::vocab_size) + Cfg::positions) * H * sizeof(T) + 2 * t * H * sizeof(T);
    if constexpr (Cfg::cross_attention) {
      const double tk = double(enc_.ref.cu.back());
      flops += L * (2 * t * H * Hq * D + 4 * tk * H * Hq * D + 4 * enc_.pairs(step_.host.cu) * Hq * D + 2 * t * Hq * D * H);
      bytes += tk * H * sizeof(T);
    }
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  StepInputs step_;
  std::unique_ptr<Model> model_;
  ParamList params_;
  CrossEncoderInput enc_;  // a decoder's encoder output (Cfg::cross_attention)
  Tensor ids_, types_, first_rows_, hidden_, pooled_, vectors_, weights_;
};

/// The generated BertModel behind the EncoderModel interface (fk_model --embed, parity).
template <class Model, class Cfg> class EncoderModelAdapter final : public EncoderModel {
 public:
  /// num_layers 0: the config's layer count.
  EncoderModelAdapter(std::string task_name, int64_t num_layers)
      : name_(std::move(task_name)), m_(num_layers > 0 ? num_layers : Cfg::num_hidden_layers) {}
  std::string task_name() const override { return name_; }
  int64_t num_layers() const override { return m_.num_layers(); }
  int64_t vocab_size() const override { return Cfg::vocab_size; }
  int64_t hidden_size() const override { return Cfg::hidden_size; }
  int64_t max_position() const override { return Cfg::positions - Cfg::position_offset; }
  int64_t position_offset() const override { return Cfg::position_offset; }
  int64_t type_vocab_size() const override { return Cfg::type_vocab_size; }
  std::string pooling() const override {
    return std::string(Cfg::pooling) + (Cfg::normalize ? "+normalize" : "");
  }
  DType dtype() const override { return dtype_of<typename Cfg::scalar_t>; }
  ParamList named_parameters() override {
    ParamList p;
    m_.named_parameters(p);
    return p;
  }
  bool cross_attention() const override { return Cfg::cross_attention; }
  Tensor forward(const Tensor& input_ids, const Tensor& positions, const Tensor& token_type_ids, std::vector<Tensor>* layer_outputs,
                 const Tensor& encoder_hidden_states) override {
    FK_CHECK(encoder_hidden_states.defined() == Cfg::cross_attention,
             name_ + (Cfg::cross_attention ? " cross-attends: pass encoder_hidden_states" : " takes no encoder_hidden_states"));
    return m_.forward(input_ids, positions, token_type_ids, layer_outputs, encoder_hidden_states);
  }
  Tensor pool(const Tensor& hidden_states) override { return m_.pool(hidden_states); }
  int64_t multi_vector_dim() const override { return Cfg::multi_vector; }
  bool sparse() const override { return Cfg::sparse; }
  bool drop_special_tokens() const override { return Cfg::drop_special_tokens; }
  Tensor token_embed(const Tensor& hidden_states) override { return m_.token_embed(hidden_states); }
  Tensor token_weights(const Tensor& hidden_states) override { return m_.token_weights(hidden_states); }

 private:
  std::string name_;
  Model m_;
};

}  // namespace fk::tasks
