// Glue, references and harnesses for DeepSeek-V2/V3's composite kinds (vLLM deepseek_v2.py):
//   deepseek_mla_attention  (L2) DeepseekV2MLAAttention: q LoRA, latent KV, decoupled rope, the
//                           latent cache write, then prefill through kv_b_proj or absorbed decode
//   deepseek_moe            (L2) DeepseekV2MoE: gate -> grouped top-k (sigmoid, correction bias,
//                           routed_scaling_factor) -> fused experts, plus the shared experts
//   deepseek_decoder_layer  (L3) DeepseekV2DecoderLayer: dense MLP or DeepseekV2MoE
//   deepseek_for_causal_lm  (L4) DeepseekV3ForCausalLM: first_k_dense_replace dense layers, then MoE
//
// Note [MLA attention forward]
// As vLLM's MLA path (DeepseekV2MLAAttention + MLACommonImpl), per step of T tokens:
//   fused_qkv_a_proj(h)            [T, q_lora + kv_lora + rope]   (q_a_proj | kv_a_proj_with_mqa)
//   q = q_b_proj(q_a_layernorm(..)) [T, H, nope + rope];  kv_c_normed = kv_a_layernorm(..) [T, kv_lora]
//   rotary_emb(positions, q[..., nope:], k_pe)                    (in place, strided views)
//   concat_and_cache_mla(kv_c_normed, k_pe) -> the layer's latent cache (Note [MLA latent cache])
//   prefill: kv_b_proj(kv_c_normed) -> k_nope, v [T, H, nope], [T, H, v]; k = [k_nope | k_pe]
//            (k_pe broadcast over heads); mla_prefill(q, k, v) [T, H, v]
//   decode:  q_abs[..., :kv_lora] = q_nope @ W_UK (one bmm over heads), q_abs[..., kv_lora:] = q_pe;
//            mla_decode(q_abs, cache) [T, H, kv_lora]; @ W_UV (bmm) -> [T, H, v]
//   o_proj [T, hidden].
// W_UK [H, nope, kv_lora] and W_UV [H, v, kv_lora] are strided views of kv_b_proj.weight
// ([H * (nope + v), kv_lora]); the batched GEMMs read them in place (vLLM copies them once after
// loading, process_weights_after_loading; the arithmetic is the same). The absorption GEMMs are
// part of this composite, not tasks of their own yet.
//
// The reference (Note [Composite references]) computes decode the way HF transformers does,
// without absorption: every cached latent row of the sequence is expanded through kv_b_proj into
// keys and values, so absorbed decode is checked against the unabsorbed algebra.
//
// Note [DeepSeek sharding]
// At a tensor-parallel layout (Note [Parallel layouts]) the tasks hold what vLLM's DeepseekV2 modules hold
// per rank (Note [Sharded parameters] for how slices are drawn and loaded):
//   attention  q_a_proj | kv_a_proj_with_mqa (fused_qkv_a_proj) and both LoRA norms replicated (every rank
//              computes the whole latent and caches it: the latent cache is the same on every rank);
//              q_b_proj and kv_b_proj column-parallel by heads (Cfg::num_heads is the rank's heads, so
//              W_UK / W_UV are this rank's heads' blocks); o_proj row-parallel, reducing.
//   dense MLP  gate_up column-parallel, down_proj row-parallel, reducing (the llama MLP).
//   MoE        the gate and the grouped top-k router whole (every rank routes every token over all
//              experts); the routed experts each split by the intermediate (tp alone: vLLM's FusedMoE) or
//              num_experts / ep whole experts per rank (ep = tp: Note [Expert-parallel MoE]); the shared
//              experts split by the intermediate with a down_proj that does not reduce (reduce_results
//              false: Note [Partial row-parallel results]). The block adds the two partial sums and
//              reduces once over the group (its all-reduce child), as DeepseekV2MoE.forward does.
//   model      the vocabulary-parallel embedding and LM head, the logits gathered (the llama family's).
// References: o_proj and the dense down_proj sum the ranks' fp32 partials (Note [Sharded references]); the
// MoE reference is the unsharded block's: the shared experts' down projection reduced in fp32, the routed
// experts' down projection reduced (tp) or every rank's experts gathered (ep).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fk/kernels/gemm.h"
#include "fk/kernels/reference/mla_ref.cuh"
#include "fk/kernels/reference/moe_ref.cuh"
#include "fk/tasks/llama.h"
#include "fk/tasks/mla.h"
#include "fk/tasks/moe.h"

namespace fk::tasks {

// ---------------------------------------------------------------------------------------------
// Forward glue.

namespace detail {
/// W_UK / W_UV bmm over heads (Note [MLA attention forward]): c[:, h] = a[:, h] @ w_h, where
/// w_h is rows [row0, row0 + rows) of head h's block of kv_b_proj.weight (trans: w_h^T).
template <class Cfg>
void mla_head_bmm(void* c, int64_t ldc, int64_t stride_c, const Tensor& a, int64_t lda, int64_t stride_a, const Tensor& w_kv_b,
                  int64_t row0, bool trans, int64_t m, int64_t n, int64_t k, bool out_f32) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t KV = Cfg::kv_lora_rank, PV = Cfg::qk_nope_head_dim + Cfg::v_head_dim;
  fk::kernels::gemm_strided_batched(c, ldc, stride_c, a.data_ptr(), lda, stride_a,
                                    static_cast<const T*>(w_kv_b.data_ptr()) + row0 * KV, KV, PV * KV, trans, Cfg::num_heads,
                                    m, n, k, detail::gemm_dtype<T>(), out_f32, current_stream());
}
}  // namespace detail

/// DeepseekV2MLAAttention.forward(positions [T] i64, hidden_states [T, hidden]) -> [T, hidden]
/// (Note [MLA attention forward]); the layer's latent cache is m.kv_cache.
template <class Cfg, class M> Tensor mla_attention_forward(M& m, const Tensor& positions, const Tensor& hidden) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::num_heads, QL = Cfg::q_lora_rank, KV = Cfg::kv_lora_rank, P = Cfg::qk_nope_head_dim,
                    R = Cfg::qk_rope_head_dim, V = Cfg::v_head_dim, D = P + R;
  const AttnMetadata& meta = forward_context();
  const int64_t t = hidden.size(0);
  FK_CHECK(m.kv_cache.defined(), "DeepseekV2MLAAttention: no latent cache allocated (allocate_kv_cache)");
  Tensor qkv_lora = std::get<0>(m.fused_qkv_a_proj.forward(hidden));  // [T, QL + KV + R]
  Tensor q_c = m.q_a_layernorm.forward(qkv_lora.narrow_last(0, QL));
  Tensor q = std::get<0>(m.q_b_proj.forward(q_c)).view({t, H, D});
  Tensor kv_c_normed = m.kv_a_layernorm.forward(qkv_lora.narrow_last(QL, KV));
  Tensor k_pe = qkv_lora.narrow_last(QL + KV, R);  // [T, R], row stride QL + KV + R
  Tensor q_pe = q.narrow_last(P, R);                // [T, H, R], heads D apart
  m.rotary_emb.forward(positions, q_pe, k_pe);
  m.kv_cache_write.forward(kv_c_normed, k_pe, m.kv_cache, meta.slot_mapping);
  Tensor attn;  // [T, H, V]
  if (meta.is_prefill) {
    Tensor kv = std::get<0>(m.kv_b_proj.forward(kv_c_normed)).view({t, H, P + V});
    Tensor k = empty({t, H, D}, dtype_of<T>), v = empty({t, H, V}, dtype_of<T>);
    copy_strided_(k.narrow_last(0, P), kv.narrow_last(0, P));
    copy_strided_(k.narrow_last(P, R), k_pe.as_strided({t, H, R}, {k_pe.stride(0), 0, 1}));
    copy_strided_(v, kv.narrow_last(P, V));
    attn = m.attn_prefill.forward(q, k, v, meta.cu_seqlens, meta.cu_seqlens, meta.max_seqlen, meta.max_seqlen);
  } else {
    FK_CHECK(t == meta.num_seqs, "decode step with " + std::to_string(t) + " tokens for " + std::to_string(meta.num_seqs) +
                                     " sequences");
    Tensor q_abs = empty({t, H, KV + R}, dtype_of<T>);
    detail::mla_head_bmm<Cfg>(q_abs.data_ptr(), H * (KV + R), KV + R, q, H * D, D, m.kv_b_proj.weight, 0, false, t, KV, P, false);
    copy_strided_(q_abs.narrow_last(KV, R), q_pe);
    Tensor o_lat = m.attn_decode.forward(q_abs, m.kv_cache, meta.cache_seqlens);  // [T, H, KV]
    attn = empty({t, H, V}, dtype_of<T>);
    detail::mla_head_bmm<Cfg>(attn.data_ptr(), H * V, V, o_lat, H * KV, KV, m.kv_b_proj.weight, P, true, t, V, KV, false);
  }
  FK_CHECK_LAUNCH();
  return std::get<0>(m.o_proj.forward(attn.view({t, H * V})));
}

/// DeepseekV2MoE.forward(hidden_states [T, H]) -> [T, H]: shared_experts(h) + experts(h, routing),
/// routing = grouped_topk(gate(h), e_score_correction_bias) with routed_scaling_factor already in
/// the weights (vLLM passes it to grouped_topk).
/// Reduce: the block's all-reduce child at tensor parallelism (Note [DeepSeek sharding]): the routed and the
/// shared experts' partial sums, added, are reduced once; its all-to-all child at a data-parallel layout.
template <class Cfg, class Reduce = NoCollective, class M> Tensor deepseek_moe_forward(M& m, const Tensor& hidden) {
  Tensor shared = m.shared_experts.forward(hidden);
  Tensor logits = std::get<0>(m.gate.forward(hidden));
  std::tuple<Tensor, Tensor> r = m.router.forward(logits, m.e_score_correction_bias);
  capture_routing(std::get<1>(r));  // Note [Routing capture]
  Tensor out = routed_experts_forward<Cfg, Reduce>(m, hidden, std::get<0>(r), std::get<1>(r));
  add_(out, shared);
  if constexpr (TpSizeOf<Cfg>::value > 1) out = collective_call<Reduce>(out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parameters (HF transformers DeepseekV3 names).

template <class Cfg, class M> void add_mla_params(ParamList& out, M& m, const std::string& prefix) {
  add_linear(out, m.fused_qkv_a_proj,
             {Part(prefix + "q_a_proj", Cfg::q_lora_rank),
              Part(prefix + "kv_a_proj_with_mqa", Cfg::kv_lora_rank + Cfg::qk_rope_head_dim)});
  add_norm(out, m.q_a_layernorm, prefix + "q_a_layernorm");
  // Column-parallel by heads (Note [DeepSeek sharding]): this rank's heads' rows.
  constexpr int tp = TpSizeOf<Cfg>::value;
  add_linear(out, m.q_b_proj, {Part(prefix + "q_b_proj", Cfg::num_heads * (Cfg::qk_nope_head_dim + Cfg::qk_rope_head_dim))}, tp);
  add_norm(out, m.kv_a_layernorm, prefix + "kv_a_layernorm");
  add_linear(out, m.kv_b_proj, {Part(prefix + "kv_b_proj", Cfg::num_heads * (Cfg::qk_nope_head_dim + Cfg::v_head_dim))}, tp);
  add_linear(out, m.o_proj, {Part(prefix + "o_proj", Cfg::hidden_size)});
}

/// mlp.gate.weight [E, H], mlp.gate.e_score_correction_bias f32 [E] (HF keeps it in fp32),
/// mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I] (HF 5 fused experts, the
/// layout of vLLM's w13/w2), mlp.shared_experts.{gate,up,down}_proj. Sharded (Note [DeepSeek sharding]): the
/// gate and the correction bias whole; the experts as the sparse MoE block's (add_moe_params): every expert's
/// slice of the intermediate (tp), or this rank's whole experts (ep); the shared experts split by the intermediate.
template <class Cfg, class M> void add_deepseek_moe_params(ParamList& out, M& m, const std::string& prefix) {
  add_linear(out, m.gate, {Part(prefix + "gate", Cfg::num_experts)});
  // Small, so that it reorders near choices only, as trained biases do (DeepSeek-V3's are O(1e-2)
  // on sigmoid scores).
  if (m.e_score_correction_bias.defined()) out.push_back({prefix + "gate.e_score_correction_bias", m.e_score_correction_bias, 0.f, 0.02f});
  add_expert_weights<Cfg>(out, m.w13_weight, m.w2_weight, prefix);
  m.shared_experts.named_parameters(prefix + "shared_experts.", out);
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]).

/// DeepseekV2MLAAttention reference (the unabsorbed algebra, Note [MLA attention forward]). Writes
/// its own latent rows into m.kv_cache (over the task's) and reads the cache for decode.
template <class A> Tensor ref_mla_attention(A& m, const RefMeta& rm, const Tensor& positions, const Tensor& h) {
  using Cfg = typename A::Cfg;
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::num_heads, QL = Cfg::q_lora_rank, KV = Cfg::kv_lora_rank, P = Cfg::qk_nope_head_dim,
                    R = Cfg::qk_rope_head_dim, V = Cfg::v_head_dim, D = P + R;
  const int64_t t = h.size(0);
  const float scale = static_cast<float>(Cfg::softmax_scale);
  Tensor qkv = ref::linear(h, m.fused_qkv_a_proj.weight, m.fused_qkv_a_proj.bias);
  Tensor q_c = ref::rms_norm(contiguous_rows(qkv.narrow_last(0, QL)), m.q_a_layernorm.weight, m.q_a_layernorm.variance_epsilon);
  Tensor kv_c = ref::rms_norm(contiguous_rows(qkv.narrow_last(QL, KV)), m.kv_a_layernorm.weight, m.kv_a_layernorm.variance_epsilon);
  Tensor q = ref::linear(q_c, m.q_b_proj.weight, m.q_b_proj.bias);  // [T, H * D]
  Tensor q3 = q.view({t, H, D});
  Tensor q_pe = empty({t, H, R}, dtype_of<T>);
  copy_strided_(q_pe, q3.narrow_last(P, R));
  const bool neox = m.rotary_emb.is_neox_style;
  q_pe = ref::rope(q_pe.view({t, H * R}), positions, m.rotary_emb.cos_sin_cache, H, R, R, neox);
  Tensor k_pe = ref::rope(contiguous_rows(qkv.narrow_last(QL + KV, R)), positions, m.rotary_emb.cos_sin_cache, 1, R, R, neox);
  copy_strided_(q3.narrow_last(P, R), q_pe.view({t, H, R}));
  // The step's latent rows into the cache.
  Tensor latent = empty({t, KV + R}, dtype_of<T>);
  copy_strided_(latent.narrow_last(0, KV), kv_c);
  copy_strided_(latent.narrow_last(KV, R), k_pe);
  Tensor cache_rows = m.kv_cache.view({-1, KV + R});
  ref::store_rows(cache_rows, latent, forward_context().slot_mapping);
  // Keys [n, H, D] and values [n, H, V] of latent rows [n, KV + R] through kv_b_proj.
  auto expand = [&](const Tensor& rows, Tensor& k, Tensor& v) {
    const int64_t n = rows.size(0);
    Tensor kv = ref::linear(contiguous_rows(rows.narrow_last(0, KV)), m.kv_b_proj.weight, Tensor()).view({n, H, P + V});
    k = empty({n, H, D}, dtype_of<T>);
    v = empty({n, H, V}, dtype_of<T>);
    Tensor kpe = rows.narrow_last(KV, R);
    copy_strided_(k.narrow_last(0, P), kv.narrow_last(0, P));
    copy_strided_(k.narrow_last(P, R), kpe.as_strided({n, H, R}, {kpe.stride(0), 0, 1}));
    copy_strided_(v, kv.narrow_last(P, V));
  };
  Tensor out_f32 = empty({t, H, V}, DType::kF32);
  if (rm.is_prefill) {
    Tensor k, v;
    expand(latent, k, v);
    std::vector<int32_t> begin, len;
    for (size_t b = 0; b + 1 < rm.cu.size(); ++b)
      for (int32_t p = 0; p < rm.cu[b + 1] - rm.cu[b]; ++p) {
        begin.push_back(rm.cu[b]);
        len.push_back(p + 1);
      }
    Tensor db = to_device(begin, {t}), dl = to_device(len, {t});
    fk::kernels::reference::mla_prefill_ref<T>(out_f32.data<float>(), q3.data<T>(), k.data<T>(), v.data<T>(), db.data<int32_t>(),
                                               dl.data<int32_t>(), t, static_cast<int>(H), static_cast<int>(D),
                                               static_cast<int>(V), scale, current_stream());
  } else {
    const int64_t max_len = m.kv_cache.size(1);
    for (int64_t b = 0; b < t; ++b) {
      const int32_t l = rm.lens[b];
      Tensor k, v;
      expand(m.kv_cache.view({-1, KV + R}).narrow_first(b * max_len, l), k, v);
      Tensor db = to_device(std::vector<int32_t>{0}, {1}), dl = to_device(std::vector<int32_t>{l}, {1});
      fk::kernels::reference::mla_prefill_ref<T>(out_f32.data<float>() + b * H * V, q3.data<T>() + b * H * D, k.data<T>(),
                                                 v.data<T>(), db.data<int32_t>(), dl.data<int32_t>(), 1, static_cast<int>(H),
                                                 static_cast<int>(D), static_cast<int>(V), scale, current_stream());
    }
  }
  FK_CHECK_LAUNCH();
  Tensor attn = ref::round_to(out_f32, dtype_of<T>).view({t, H * V});
  return ref_linear_of(attn, m.o_proj);  // sharded: the ranks' fp32 partials summed (Note [DeepSeek sharding])
}

/// DeepseekV2MoE reference: grouped top-k of the reference router logits (fp64 scores,
/// fk::kernels::reference::grouped_topk_ref), adopting the task's recorded choice for a token
/// where it is a near-tie (Note [Routing capture]) of grouped top-k itself, with margin delta
/// on choice scores c_e (sigmoid + correction bias) and 2 delta on group scores (top-2 sums):
/// every group holding a task expert scores within 2 delta of the topk_group-th best group, and
/// every task expert's c_e is within delta of the top_k-th best c_e over a set of kept groups
/// that near-tied routing could have kept (Note [Grouped top-k near-ties]). delta = 0.0125 sqrt(block index + 1): a sigmoid
/// moves at most 1/4 of a logit error, and ref_sparse_moe's margin is 0.05 sqrt(i + 1) logits.
/// Adopted tokens get weights from the reference's own scores (renormalised, times
/// routed_scaling_factor); a far-from-optimal choice is never adopted, so a wrong router fails.
template <class M> Tensor ref_deepseek_moe(M& m, const Tensor& x) {
  using Cfg = typename M::Cfg;
  using T = typename Cfg::scalar_t;
  constexpr int E = Cfg::num_experts, K = Cfg::top_k, G = Cfg::num_expert_group, TG = Cfg::topk_group, EPG = E / G;
  const int64_t t = x.size(0);
  // The shared experts' whole output: sharded, their down projection's fp32 partials summed (Note [DeepSeek sharding]).
  Tensor shared = ref_dense_mlp(m.shared_experts, x, true);
  Tensor logits = ref::linear(x, m.gate.weight, m.gate.bias);
  Tensor w = empty({t, K}, DType::kF32), ids = empty({t, K}, DType::kI32);
  const float* bias = Cfg::correction_bias ? m.e_score_correction_bias.template data<float>() : nullptr;
  fk::kernels::reference::grouped_topk_ref<T>(w.data<float>(), ids.data<int32_t>(), logits.data<T>(), E, bias,
                                              static_cast<float>(Cfg::routed_scaling_factor), t, E, K, G, TG, Cfg::sigmoid,
                                              Cfg::renormalize, current_stream());
  FK_CHECK_LAUNCH();
  std::pair<Tensor, int> task = next_task_routing();
  if (task.first.defined()) {
    const double delta = 0.0125 * std::sqrt(double(task.second + 1));
    const std::vector<float> lg = to_host<float>(to_f32(logits));
    const std::vector<float> bs = bias ? to_host<float>(m.e_score_correction_bias) : std::vector<float>(E, 0.f);
    const std::vector<int32_t> theirs = to_host<int32_t>(contiguous_rows(task.first.view({t, K})));
    std::vector<int32_t> mine = to_host<int32_t>(ids);
    std::vector<float> wh = to_host<float>(w);
    bool adopted = false;
    std::vector<double> score(E), choice(E), gscore(G);
    int reported = 0;
    // A differing choice that is not adopted fails the check on that token; say why (stderr).
    auto report_unadopted = [&](int64_t i, const std::string& why, double d) {
      if (reported++ < 4)
        std::fprintf(stderr, "ref_deepseek_moe: block %d token %lld routes differently from the reference and is not a near-tie: %s (delta %.4f)\n",
                     task.second, static_cast<long long>(i), why.c_str(), d);
    };
    for (int64_t i = 0; i < t; ++i) {
      std::vector<int32_t> sa(theirs.begin() + i * K, theirs.begin() + (i + 1) * K), sm(mine.begin() + i * K, mine.begin() + (i + 1) * K);
      std::sort(sa.begin(), sa.end());
      std::sort(sm.begin(), sm.end());
      if (sa == sm || std::adjacent_find(sa.begin(), sa.end()) != sa.end() || sa.front() < 0 || sa.back() >= E) continue;
      double mx = -1e300, z = 0;
      for (int e = 0; e < E; ++e) mx = std::max(mx, double(lg[i * E + e]));
      for (int e = 0; e < E; ++e) z += std::exp(double(lg[i * E + e]) - mx);
      for (int e = 0; e < E; ++e) {
        const double l = lg[i * E + e];
        score[e] = Cfg::sigmoid ? 1.0 / (1.0 + std::exp(-l)) : std::exp(l - mx) / z;
        choice[e] = score[e] + bs[e];
      }
      for (int g = 0; g < G; ++g) {  // group score: the best two choice scores (vLLM with a bias; else the best)
        std::vector<double> v(choice.begin() + g * EPG, choice.begin() + (g + 1) * EPG);
        std::partial_sort(v.begin(), v.begin() + std::min(2, EPG), v.end(), std::greater<double>());
        gscore[g] = bias ? v[0] + (EPG > 1 ? v[1] : 0.0) : v[0];
      }
      std::vector<double> gs_sorted = gscore;
      std::sort(gs_sorted.begin(), gs_sorted.end(), std::greater<double>());
      // Note [Grouped top-k near-ties]
      // The kept groups are part of the choice: a task expert's group must be within 2 delta of
      // the topk_group-th group score, every group that beats the best dropped group by more than
      // 2 delta must be kept, and the remaining places go to near-cutoff groups (within 2 delta of
      // the topk_group-th), the ones whose best choice is lowest first. That last rule is the
      // routing most favourable to the task among those a 2 delta group-score error allows: the
      // task may have kept a different near-tie group than the reference, with no chosen expert
      // in it, which changes which experts compete for the last slots (DeepSeek-V3 L3 b8_s2048,
      // token 8030: the reference kept group 2 and took its expert 91; the task kept another
      // group and took expert 120, 0.026 lower, which is what the reference itself picks from the
      // task's residual stream, 1 bf16 ulp away).
      const double cutoff = gs_sorted[TG - 1], dropped = TG < G ? gs_sorted[TG] : -1e300;
      std::vector<bool> in_group(G, false);
      bool near = true;
      int groups = 0;
      for (int32_t e : sa) {
        if (!in_group[e / EPG]) ++groups;
        in_group[e / EPG] = true;
        near &= gscore[e / EPG] >= cutoff - 2 * delta;
      }
      if (!near) {
        report_unadopted(i, "a task expert's group scores below the topk_group-th group by more than 2 delta", delta);
        continue;
      }
      for (int g = 0; g < G; ++g)
        if (!in_group[g] && gscore[g] > dropped + 2 * delta) in_group[g] = true, ++groups;
      if (groups > TG) {
        report_unadopted(i, "the task's experts leave out a group that clearly ranks in the top topk_group", delta);
        continue;
      }
      std::vector<std::pair<double, int>> spare;  // (best choice in the group, group) of near-cutoff groups
      for (int g = 0; g < G; ++g)
        if (!in_group[g] && gscore[g] >= cutoff - 2 * delta)
          spare.push_back({*std::max_element(choice.begin() + g * EPG, choice.begin() + (g + 1) * EPG), g});
      std::sort(spare.begin(), spare.end());
      for (size_t j = 0; groups < TG && j < spare.size(); ++j) in_group[spare[j].second] = true, ++groups;
      std::vector<double> pool;
      for (int e = 0; e < E; ++e)
        if (in_group[e / EPG]) pool.push_back(choice[e]);
      std::nth_element(pool.begin(), pool.begin() + (K - 1), pool.end(), std::greater<double>());
      const double kth = pool[K - 1];
      double worst = 0;
      for (int32_t e : sa) worst = std::max(worst, kth - choice[e]);
      if (worst > delta) {
        report_unadopted(i, "a task expert's choice score is " + std::to_string(worst) + " below the top_k-th", delta);
        continue;
      }
      double sum = 0;
      for (int k = 0; k < K; ++k) sum += score[theirs[i * K + k]];
      for (int k = 0; k < K; ++k) {
        mine[i * K + k] = theirs[i * K + k];
        const double sc = score[theirs[i * K + k]];
        wh[i * K + k] = static_cast<float>((Cfg::renormalize ? sc / (sum + 1e-20) : sc) * Cfg::routed_scaling_factor);
      }
      adopted = true;
    }
    if (adopted) {
      w = to_device(wh, {t, K});
      ids = to_device(mine, {t, K});
    }
  }
  Tensor routed = ref_routed_experts<TpSizeOf<Cfg>::value, EpSizeOf<Cfg>::value>(x, m.w13_weight, m.w2_weight, w, ids);
  return ref::round_to(ref::add_f32(routed, shared), dtype_of<T>);
}

// ---------------------------------------------------------------------------------------------
// Costs.

/// FLOPs and bytes of one MLA attention step (weights not included).
template <class Cfg> std::pair<double, double> mla_step_cost(const StepInputs& step) {
  constexpr double H = Cfg::num_heads, QL = Cfg::q_lora_rank, KV = Cfg::kv_lora_rank, P = Cfg::qk_nope_head_dim,
                   R = Cfg::qk_rope_head_dim, V = Cfg::v_head_dim, Hd = Cfg::hidden_size;
  constexpr double es = sizeof(typename Cfg::scalar_t);
  const double t = double(step.tokens()), pairs = step.attended_pairs();
  double flops = 2 * t * Hd * (QL + KV + R) + 2 * t * QL * H * (P + R) + 2 * t * H * V * Hd;
  double bytes = t * 2 * Hd * es;
  if (step.host.is_prefill) {
    flops += 2 * t * KV * H * (P + V) + 2 * pairs * H * (P + R + V);
  } else {
    flops += 2 * t * H * P * KV + 2 * pairs * H * (2 * KV + R) + 2 * t * H * KV * V;
    bytes += pairs * (KV + R) * es;
  }
  return {flops, bytes};
}

/// The MLP half of a DeepSeek layer on one rank: FLOPs per token (dense: 3 H I; MoE: top_k experts
/// + shared experts + router) and the expert weight bytes a step of t tokens does not read. The
/// constants are per rank; at expert parallelism a rank runs 1 / ep of the routed slots (on average)
/// over its num_experts / ep experts.
template <class Cfg> double deepseek_mlp_flops_per_token() {
  if constexpr (Cfg::num_experts > 0)
    return 6.0 * Cfg::hidden_size * (Cfg::top_k * Cfg::moe_intermediate_size * rank_slot_share<Cfg>() + Cfg::shared_intermediate_size) +
           2.0 * Cfg::hidden_size * Cfg::num_experts;
  else
    return 6.0 * Cfg::hidden_size * Cfg::intermediate_size;
}
template <class Cfg> double deepseek_unread_expert_bytes(double tokens) {
  if constexpr (Cfg::num_experts > 0) {
    const double e = Cfg::num_experts, ep = EpSizeOf<Cfg>::value;
    return (e - expected_experts_hit(tokens_routed_to_rank<Cfg>(tokens), e, Cfg::top_k)) / ep * 3.0 * Cfg::hidden_size * Cfg::moe_intermediate_size *
           sizeof(typename Cfg::scalar_t);
  } else {
    return 0.0;
  }
}

// ---------------------------------------------------------------------------------------------
// Harnesses (Note [Task protocol]).

enum class MlaKind { kAttention, kDecoderLayer };

/// deepseek_mla_attention (L2) and deepseek_decoder_layer (L3) over one step of `batch`
/// sequences (StepInputs). The latent cache is random for decode; the step writes its own rows
/// (the reference overwrites them with its own before reading).
template <class Module, class Cfg, MlaKind kKind> class MlaStepInstance final : public TaskInstance {
 public:
  explicit MlaStepInstance(const ShapeCase& c) : step_(c), module_(from_config) {
    constexpr int64_t Hd = Cfg::hidden_size, H = Cfg::num_heads, D = Cfg::qk_nope_head_dim + Cfg::qk_rope_head_dim;
    const int64_t t = step_.tokens(), b = step_.meta.num_seqs;
    const double cache_bytes = double(b) * step_.max_len * (Cfg::kv_lora_rank + Cfg::qk_rope_head_dim) * sizeof(T);
    // Activations: prefill's expanded k/v/q dominate; the reference holds a copy of each.
    const double act_bytes = double(t) * (4 * Hd + 3 * H * D + 2 * H * Cfg::v_head_dim) * sizeof(T) * 3;
    if constexpr (kKind == MlaKind::kDecoderLayer) module_.named_parameters("model.layers.0.", params_);
    else module_.named_parameters("model.layers.0.self_attn.", params_);
    require_device_memory(cache_bytes + act_bytes + double(t) * 12 * Cfg::hidden_size * 4, "MLA step (latent cache and activations)");
    allocate_kv_cache<Cfg>(attn(), b, step_.max_len);  // the latent cache (is_mla_attention)
    x_ = empty({t, Hd}, dtype_of<T>);
    if constexpr (kKind == MlaKind::kDecoderLayer) {
      res_ = empty({t, Hd}, dtype_of<T>);
      x0_ = empty({t, Hd}, dtype_of<T>);
      res0_ = empty({t, Hd}, dtype_of<T>);
    }
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    if (!step_.meta.is_prefill) fill_normal(attn().kv_cache, dp_seed<Cfg>(mix_seed(seed, 2001)));
    refresh(0, mix_seed(seed, 2006));
  }
  /// New hidden states; weights and the latent cache stay. Every rank's own at a data-parallel layout (dp_seed).
  void refresh(int, uint64_t set_seed) override {
    const uint64_t seed = dp_seed<Cfg>(set_seed);
    fill_normal(x_, mix_seed(seed, 0));
    if constexpr (kKind == MlaKind::kDecoderLayer) {
      fill_normal(res_, mix_seed(seed, 1));
      copy_(x0_, x_);
      copy_(res0_, res_);
    }
  }
  void prepare(int) override {
    out_.clear();
    if constexpr (kKind == MlaKind::kDecoderLayer) {  // in place: restore both inputs
      copy_(x_, x0_);
      copy_(res_, res0_);
    }
  }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    RoutingCaptureGuard cap(&routing_);  // Note [Routing capture]
    if constexpr (kKind == MlaKind::kAttention) {
      out_ = {module_.forward(step_.positions, x_)};
    } else {
      std::tuple<Tensor, Tensor> hr = module_.forward(step_.positions, x_, res_);
      out_ = {std::get<0>(hr), std::get<1>(hr)};
    }
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(kKind == MlaKind::kAttention ? x_ : x0_);
    if (res0_.defined()) v.push_back(res0_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    ForwardContextGuard ctx(&step_.meta);
    TaskRoutingGuard routing(&routing_);
    const Tolerance tol = composite_tolerance(dtype_of<T>, 1.0, has_experts() ? kMoeLayerRelL2 : 0.01);
    if constexpr (kKind == MlaKind::kAttention) {
      return {{"out", out_[0], to_f32(ref_mla_attention(module_, step_.host, step_.positions, x_)), tol}};
    } else {
      std::pair<Tensor, Tensor> hr = ref_decoder_layer<Cfg>(module_, step_.host, step_.positions, x0_, res0_);
      return {{"hidden_states", out_[0], to_f32(hr.first), tol}, {"residual", out_[1], to_f32(hr.second), tol}};
    }
  }
  Cost cost() const override {
    const double t = double(step_.tokens()), es = sizeof(T);
    std::pair<double, double> a = mla_step_cost<Cfg>(step_);
    double flops = a.first, bytes = a.second + param_bytes(params_);
    if constexpr (kKind == MlaKind::kDecoderLayer) {
      flops += t * deepseek_mlp_flops_per_token<Cfg>();
      bytes += t * 2 * Cfg::hidden_size * es - deepseek_unread_expert_bytes<Cfg>(t);
    }
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr bool has_experts() {
    if constexpr (MoeOf<Cfg>::value) return Cfg::num_experts > 0;
    else return false;
  }
  auto& attn() {
    if constexpr (kKind == MlaKind::kDecoderLayer) return (module_.self_attn);
    else return (module_);
  }
  StepInputs step_;
  Module module_;
  ParamList params_;
  Tensor x_, res_, x0_, res0_;
  std::vector<Tensor> out_;
  std::vector<Tensor> routing_;
};

/// deepseek_moe (L2). Case dims: num_tokens.
template <class Module, class Cfg> class DeepseekMoeInstance final : public TaskInstance {
 public:
  explicit DeepseekMoeInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), module_(from_config) {
    constexpr int64_t E = Cfg::num_experts / EpSizeOf<Cfg>::value, H = Cfg::hidden_size, I = Cfg::moe_intermediate_size, K = Cfg::top_k;
    const double w_bytes = (double(E) * 3 * H * I + 3.0 * H * Cfg::shared_intermediate_size) * sizeof(T);
    const double act = double(tokens_) * (H * 4 + K * (3 * I + 2 * H) + 3 * Cfg::shared_intermediate_size) * sizeof(T);
    require_device_memory(w_bytes + 3 * act, "MoE expert weights and activations");
    module_.named_parameters("model.layers.0.mlp.", params_);
    x_ = empty({tokens_, H}, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    fill_normal(x_, dp_seed<Cfg>(mix_seed(seed, 4001)));
    run(0);  // the routing this input gets, for the cost's expert count (every rank runs it: it communicates)
    if (DataParallelOf<Cfg>::value) {  // other ranks' tokens reach this rank's experts: the expected counts (cost())
      experts_hit_ = 0;
      slots_ = 0;
    } else if (!routing_.empty()) {  // this rank's experts and slots (all of them unless ep > 1)
      const std::vector<int32_t> local = rank_local_experts<Cfg>(to_host<int32_t>(routing_[0]));
      experts_hit_ = count_experts_hit(local, Cfg::num_experts / EpSizeOf<Cfg>::value);
      slots_ = static_cast<int64_t>(local.size());
    }
    out_ = Tensor();
  }
  void refresh(int, uint64_t seed) override { fill_normal(x_, dp_seed<Cfg>(seed)); }
  void prepare(int) override { out_ = Tensor(); }
  void run(int) override {
    RoutingCaptureGuard cap(&routing_);
    out_ = module_.forward(x_);
  }
  std::vector<Tensor> inputs(int) override {
    std::vector<Tensor> v = param_tensors(params_);
    v.push_back(x_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    TaskRoutingGuard routing(&routing_);
    return {{"out", out_, to_f32(ref_deepseek_moe(module_, x_)), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    constexpr double E = Cfg::num_experts, H = Cfg::hidden_size, I = Cfg::moe_intermediate_size, K = Cfg::top_k,
                     S = Cfg::shared_intermediate_size;
    const double t = double(tokens_);
    const double ep = EpSizeOf<Cfg>::value;
    // this rank's experts hit and routed slots: counted, or expected (at a data-parallel layout every rank's t tokens
    // route to the ep ranks' experts: Note [Data-parallel expert MoE])
    const double hit = experts_hit_ > 0 ? double(experts_hit_) : expected_experts_hit(tokens_routed_to_rank<Cfg>(t), E, K) / ep;
    const double slots = slots_ > 0 ? double(slots_) : t * K * rank_slot_share<Cfg>();
    const double flops = 2 * slots * 3 * H * I + 2 * t * 3 * H * S + 2 * t * H * E;
    const double bytes = (hit * 3 * H * I + 3 * H * S + E * H + 2 * t * H) * sizeof(T) + E * 4;
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  ParamList params_;
  Tensor x_, out_;
  std::vector<Tensor> routing_;
  int64_t experts_hit_ = 0, slots_ = 0;
};

/// deepseek_for_causal_lm (L4), as CausalLMInstance: forward over the step, compute_logits on each
/// sequence's last token, checked against the composite reference over every layer.
template <class Model, class Cfg> class DeepseekCausalLMInstance final : public TaskInstance {
 public:
  explicit DeepseekCausalLMInstance(const ShapeCase& c) : step_(c) {
    constexpr double Hd = Cfg::hidden_size, H = Cfg::num_heads, QL = Cfg::q_lora_rank, KV = Cfg::kv_lora_rank,
                     P = Cfg::qk_nope_head_dim, R = Cfg::qk_rope_head_dim, V = Cfg::v_head_dim;
    const int64_t b = step_.meta.num_seqs, t = step_.tokens();
    const double L = Cfg::num_hidden_layers, dense = std::min<double>(Cfg::first_k_dense_replace, L);
    const double attn_w = Hd * (QL + KV + R) + QL * H * (P + R) + KV * H * (P + V) + H * V * Hd;
    const double moe_w = double(Cfg::num_experts) * Hd + double(Cfg::num_experts / EpSizeOf<Cfg>::value) * 3.0 * Hd * Cfg::moe_intermediate_size +
                         3.0 * Hd * Cfg::shared_intermediate_size;
    const double vocab = double(vocab_shard_rows(Cfg::vocab_size, TpSizeOf<Cfg>::value));
    const double weights = L * attn_w + dense * 3.0 * Hd * Cfg::dense_intermediate_size + (L - dense) * moe_w + 2.0 * vocab * Hd;
    const double cache = L * b * step_.max_len * (KV + R);
    const double act = double(t) * (8 * Hd + 6 * H * (P + R)) + 2.0 * b * Cfg::vocab_size;
    require_device_memory((weights + cache + 2 * act) * sizeof(T), "the whole model (weights, latent cache, activations)");
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
    if (!step_.meta.is_prefill)
      model_->model.for_each_layer([&](auto& layer) { fill_normal(layer.self_attn.kv_cache, dp_seed<Cfg>(mix_seed(seed, 3002))); });
  }
  /// New token ids (so every activation of every layer changes); weights and the latent cache stay. Every rank's own
  /// at a data-parallel layout (dp_seed).
  void refresh(int, uint64_t seed) override { fill_randint(ids_, dp_seed<Cfg>(seed), 0, Cfg::vocab_size); }
  void prepare(int) override { logits_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    RoutingCaptureGuard cap(&routing_);  // Note [Routing capture]
    Tensor hidden = model_->forward(ids_, step_.positions);
    logits_ = model_->compute_logits(gather_rows(hidden, last_rows_));
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(ids_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    ForwardContextGuard ctx(&step_.meta);
    TaskRoutingGuard routing(&routing_);
    Tensor logits = ref_causal_lm_logits<Cfg>(*model_, step_.host, ids_, step_.positions, last_rows_);
    return {{"logits", logits_, logits, depth_tolerance(static_cast<size_t>(model_->model.num_layers()))}};
  }
  Cost cost() const override {
    const double t = double(step_.tokens()), b = double(step_.meta.num_seqs);
    const double vocab = double(vocab_shard_rows(Cfg::vocab_size, TpSizeOf<Cfg>::value));  // this rank's rows
    double flops = 2 * b * Cfg::hidden_size * vocab;
    double bytes = param_bytes(params_) - vocab * Cfg::hidden_size * sizeof(T);
    model_->model.for_each_layer([&](auto& layer) {
      using L = std::decay_t<decltype(layer)>;
      std::pair<double, double> a = mla_step_cost<typename L::Cfg>(step_);
      flops += a.first + t * deepseek_mlp_flops_per_token<typename L::Cfg>();
      bytes += a.second - deepseek_unread_expert_bytes<typename L::Cfg>(t);
    });
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  StepInputs step_;
  std::unique_ptr<Model> model_;
  ParamList params_;
  Tensor ids_, last_rows_, logits_;
  std::vector<Tensor> routing_;
};

}  // namespace fk::tasks
