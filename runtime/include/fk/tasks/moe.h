// Forward glue and harnesses for the mixture-of-experts kinds, mirroring vLLM's fused MoE path:
//   L1 topk_softmax (fused_topk), moe_align_block_size, moe_grouped_gemm (fused_moe_kernel),
//      moe_sum; the router is a replicated_linear (template `linear`) and the activation the
//      llama family's silu_and_mul;
//   L2 fused_experts (align -> w13 GEMM -> SiluAndMul -> w2 GEMM x routing weight -> moe_sum),
//      sparse_moe_block (vLLM MixtralMoE / Qwen3MoeSparseMoeBlock: gate -> router -> experts);
//   L3 moe_decoder_layer and L4 moe_for_causal_lm reuse the llama harnesses (fk/tasks/llama.h)
//      with the MoE block as the layer's `mlp`.
//
// Note [MoE routing layout]
// As in vLLM: topk_ids [T, K] i32 and topk_weights [T, K] f32 (slot s = t * K + k). Alignment
// groups the slots by expert into segments padded to a multiple of block_m with the sentinel
// T * K (sorted_token_ids), records each block's expert (expert_ids, -1 past the end) and the
// padded total (num_tokens_post_pad, one i32 on the device). The grouped GEMM walks those blocks
// with no host synchronisation, so a decode step stays capturable in a CUDA graph. block_m is
// chosen per token count by fk::kernels::moe_gemm_block_m and must be the same for the
// alignment and both GEMMs. The order of slots within an expert's segment is unspecified (vLLM
// scatters with atomics); the alignment check compares a canonical form (segments sorted).
//
// Expert weights (vLLM FusedMoE): w13 [E, 2I, H] (gate rows then up rows, HF transformers 5
// `experts.gate_up_proj`), w2 [E, H, I] (HF `experts.down_proj`).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "fk/kernels/moe_gemm.cuh"
#include "fk/kernels/moe_routing.cuh"
#include "fk/kernels/silu_and_mul.cuh"
#include "fk/kernels/reference/moe_ref.cuh"
#include "fk/tasks/llama.h"

namespace fk::tasks {

// ---------------------------------------------------------------------------------------------
// Forward glue.

/// TopKSoftmax.forward(router_logits [T, E]) -> (topk_weights [T, K] f32, topk_ids [T, K] i32).
template <class Cfg> std::tuple<Tensor, Tensor> topk_softmax_forward(const Tensor& logits) {
  using T = typename Cfg::scalar_t;
  constexpr int E = Cfg::num_experts, K = Cfg::top_k;
  FK_CHECK(logits.dim() == 2 && logits.size(1) == E && logits.stride(1) == 1 && logits.dtype() == dtype_of<T>,
           "TopKSoftmax router_logits " + logits.str() + " (expected [T, " + std::to_string(E) + "])");
  const int64_t t = logits.size(0);
  Tensor w = empty({t, K}, DType::kF32), ids = empty({t, K}, DType::kI32);
  fk::kernels::topk_softmax<T, E, K, Cfg::renormalize>(w.data<float>(), ids.data<int32_t>(), logits.data<T>(),
                                                       logits.stride(0), t, current_stream());
  FK_CHECK_LAUNCH();
  return {w, ids};
}

/// GroupedTopK.forward(router_logits [T, E], e_score_correction_bias f32 [E] or undefined) ->
/// (topk_weights [T, K] f32, topk_ids [T, K] i32): vLLM grouped_topk (fk::kernels::grouped_topk).
template <class Cfg> std::tuple<Tensor, Tensor> grouped_topk_forward(const Tensor& logits, const Tensor& correction_bias) {
  using T = typename Cfg::scalar_t;
  constexpr int E = Cfg::num_experts, K = Cfg::top_k;
  FK_CHECK(logits.dim() == 2 && logits.size(1) == E && logits.stride(1) == 1 && logits.dtype() == dtype_of<T>,
           "GroupedTopK router_logits " + logits.str() + " (expected [T, " + std::to_string(E) + "])");
  if constexpr (Cfg::correction_bias)
    FK_CHECK(correction_bias.defined() && correction_bias.dtype() == DType::kF32 && correction_bias.numel() == E &&
                 correction_bias.is_contiguous(),
             "GroupedTopK e_score_correction_bias: expected f32 [" + std::to_string(E) + "], got " +
                 (correction_bias.defined() ? correction_bias.str() : std::string("nothing")));
  else
    FK_CHECK(!correction_bias.defined(), "GroupedTopK: this task takes no e_score_correction_bias, got " + correction_bias.str());
  const int64_t t = logits.size(0);
  Tensor w = empty({t, K}, DType::kF32), ids = empty({t, K}, DType::kI32);
  fk::kernels::grouped_topk<T, E, K, Cfg::num_expert_group, Cfg::topk_group, Cfg::sigmoid, Cfg::renormalize>(
      w.data<float>(), ids.data<int32_t>(), logits.data<T>(), logits.stride(0),
      Cfg::correction_bias ? correction_bias.data<float>() : nullptr, static_cast<float>(Cfg::routed_scaling_factor), t,
      current_stream());
  FK_CHECK_LAUNCH();
  return {w, ids};
}

/// MoeAlignBlockSize.forward(topk_ids [T, K], block_size) -> (sorted_token_ids, expert_ids,
/// num_tokens_post_pad [1]) (Note [MoE routing layout]).
template <class Cfg> std::tuple<Tensor, Tensor, Tensor> moe_align_forward(const Tensor& topk_ids, int64_t block_size) {
  constexpr int E = Cfg::num_experts;
  FK_CHECK(topk_ids.dtype() == DType::kI32 && topk_ids.is_contiguous() && topk_ids.size(-1) == Cfg::top_k,
           "MoeAlignBlockSize topk_ids " + topk_ids.str() + " (expected contiguous i32 [T, " + std::to_string(Cfg::top_k) + "])");
  const int64_t numel = topk_ids.numel();
  const int bs = static_cast<int>(block_size);
  Tensor sorted = empty({fk::kernels::moe_align_max_padded(numel, E, bs)}, DType::kI32);
  Tensor expert_ids = empty({fk::kernels::moe_align_max_blocks(numel, E, bs)}, DType::kI32);
  Tensor npp = empty({1}, DType::kI32);
  Tensor ws = empty({std::max<int64_t>(1, fk::kernels::moe_align_workspace_ints(E))}, DType::kI32);
  fk::kernels::moe_align_block_size<E>(sorted.data<int32_t>(), expert_ids.data<int32_t>(), npp.data<int32_t>(),
                                       topk_ids.data<int32_t>(), numel, bs, ws.data<int32_t>(), current_stream());
  FK_CHECK_LAUNCH();
  return {sorted, expert_ids, npp};
}

/// MoeGroupedGemm.forward: C [T*K, N] = A[rows] @ w[expert]^T (x topk_weights when
/// mul_routed_weight); A is [T, K_dim] (per_slot_rows false) or [T*K, K_dim].
template <class Cfg>
Tensor moe_grouped_gemm_forward(const Tensor& a, const Tensor& w, const Tensor& topk_weights, const Tensor& sorted_token_ids,
                                const Tensor& expert_ids, const Tensor& num_tokens_post_pad, int64_t block_m,
                                const Tensor& bias = Tensor()) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t E = Cfg::num_experts, N = Cfg::n, Kd = Cfg::k, TopK = Cfg::top_k;
  FK_CHECK(w.dim() == 3 && w.size(0) == E && w.size(1) == N && w.size(2) == Kd && w.is_contiguous() && w.dtype() == dtype_of<T>,
           "MoeGroupedGemm weight " + w.str() + " (expected [" + std::to_string(E) + ", " + std::to_string(N) + ", " +
               std::to_string(Kd) + "])");
  FK_CHECK(topk_weights.dtype() == DType::kF32 && topk_weights.is_contiguous() && topk_weights.size(-1) == TopK,
           "MoeGroupedGemm topk_weights " + topk_weights.str());
  const int64_t num_valid = topk_weights.numel(), tokens = num_valid / TopK;
  FK_CHECK(a.dim() == 2 && a.size(1) == Kd && a.stride(1) == 1 && a.dtype() == dtype_of<T> &&
               a.size(0) == (Cfg::per_slot_rows ? num_valid : tokens),
           "MoeGroupedGemm input " + a.str() + " for " + std::to_string(tokens) + " tokens x top " + std::to_string(TopK));
  const T* bias_ptr = nullptr;
  if constexpr (Cfg::bias) {
    FK_CHECK(bias.defined() && bias.dim() == 2 && bias.size(0) == E && bias.size(1) == N && bias.is_contiguous() &&
                 bias.dtype() == dtype_of<T>,
             "MoeGroupedGemm bias " + (bias.defined() ? bias.str() : std::string("(none)")) + " (expected [" +
                 std::to_string(E) + ", " + std::to_string(N) + "])");
    bias_ptr = bias.data<T>();
  } else {
    FK_CHECK(!bias.defined(), "MoeGroupedGemm: this task has no bias, got " + bias.str());
  }
  Tensor c = empty({num_valid, N}, dtype_of<T>);
  const int64_t max_blocks = expert_ids.numel();
  fk::kernels::moe_grouped_gemm<T>(c.data<T>(), N, a.data<T>(), a.stride(0), w.data<T>(), topk_weights.data<float>(),
                                   sorted_token_ids.data<int32_t>(), expert_ids.data<int32_t>(),
                                   num_tokens_post_pad.data<int32_t>(), num_valid, static_cast<int>(TopK),
                                   /*a_div_topk=*/!Cfg::per_slot_rows, Cfg::mul_routed_weight, static_cast<int>(N),
                                   static_cast<int>(Kd), max_blocks, static_cast<int>(block_m), current_stream(), bias_ptr);
  FK_CHECK_LAUNCH();
  return c;
}

/// MoeSum.forward(input [T, K, H]) -> [T, H].
template <class Cfg> Tensor moe_sum_forward(const Tensor& x) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.dim() == 3 && x.size(1) == Cfg::top_k && x.size(2) == Cfg::hidden_size && x.is_contiguous() &&
               x.dtype() == dtype_of<T>,
           "MoeSum input " + x.str());
  Tensor out = empty({x.size(0), Cfg::hidden_size}, dtype_of<T>);
  fk::kernels::moe_sum<T, Cfg::top_k, Cfg::hidden_size>(out.data<T>(), x.data<T>(), x.size(0), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// FusedExperts.forward: the vLLM fused_experts chain through the child modules. other_ranks: topk_ids
/// may hold -1 (slots of experts on other ranks: Note [Expert-parallel MoE]), which the alignment
/// skips and the sum leaves out (moe_sum_masked in place of the moe_sum child).
template <class Cfg, class M>
Tensor fused_experts_forward(M& m, const Tensor& hidden, const Tensor& w13, const Tensor& w2, const Tensor& topk_weights,
                             const Tensor& topk_ids, const Tensor& w13_bias = Tensor(), const Tensor& w2_bias = Tensor(),
                             bool other_ranks = false) {
  constexpr int64_t K = Cfg::top_k, H = Cfg::hidden_size;
  const int64_t tokens = hidden.size(0);
  FK_CHECK(topk_ids.numel() == tokens * K, "FusedExperts: topk_ids " + topk_ids.str() + " for hidden_states " + hidden.str());
  const int64_t bm = fk::kernels::moe_gemm_block_m(tokens, static_cast<int>(K), static_cast<int>(Cfg::num_experts));
  std::tuple<Tensor, Tensor, Tensor> al = m.moe_align.forward(topk_ids, bm);
  Tensor c1 = m.w13.forward(hidden, w13, topk_weights, std::get<0>(al), std::get<1>(al), std::get<2>(al), bm, w13_bias);
  Tensor c2 = m.act_fn.forward(c1);
  Tensor c3 = m.w2.forward(c2, w2, topk_weights, std::get<0>(al), std::get<1>(al), std::get<2>(al), bm, w2_bias);
  if (!other_ranks) return m.moe_sum.forward(c3.view({tokens, K, H}));
  using T = typename Cfg::scalar_t;
  Tensor out = empty({tokens, H}, dtype_of<T>);
  fk::kernels::moe_sum_masked<T, static_cast<int>(K), static_cast<int>(H)>(out.data<T>(), c3.data<T>(), topk_ids.data<int32_t>(), tokens,
                                                                           current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

// Note [Expert-parallel MoE]
// At a layout with ep_size > 1 (vLLM's enable_expert_parallel without data parallelism: ep_size equals
// tp_size, the group is the tensor-parallel one) each rank holds num_experts / ep_size whole experts,
// rank r the ids [r L, (r + 1) L) (vLLM's linear expert placement), the router whole. Every rank routes
// the same tokens (attention's output is reduced over the group), renumbers the slots of its own
// experts from 0 and marks the others -1 (ep_localize_ids: vLLM's expert_map), runs its experts on its
// slots, sums them per token (moe_sum_masked) and the block all-reduces over the group: each token's
// sum over all its experts. The reference gathers every rank's experts and computes the unsharded
// block (ref_sparse_moe). With data-parallel attention: Note [Data-parallel expert MoE].
//
// Note [Data-parallel expert MoE]
// A layout with ep_size > 1 and tp_size 1 ({"ep": N} alone, `@epN`) is vLLM's data-parallel attention with expert
// parallelism (--data-parallel-size N --enable-expert-parallel, tensor parallelism 1): every rank holds the whole
// attention, the dense parts and the router, and runs its own tokens through them; the MoE blocks' experts are split
// as above (rank r the ids [r L, (r + 1) L)) over the group of all N ranks, which is the process's group here
// (fk::dist::tp_group(), whose size the tasks check). Each block routes its rank's tokens, and its all-to-all child (an
// L1 task of kind ep_all_to_all: Note [Expert-parallel all-to-all task] in fk/tasks/ep_all_to_all.h) moves every token
// once to each rank holding one of its experts with its k ids and weights (the group's fk::dist::EpAllToAll dispatch:
// DeepEP's intranode dispatch, vLLM's FusedMoEPrepareAndFinalize.prepare), ep_moe_forward renumbers
// the received slots of the rank's own experts from 0 and marks the others and every stale row's -1
// (ep_localize_received_ids), runs the rank's experts on them (fused_experts_forward, sums of the local slots) and
// brings the rows back (combine: the token's rank sums the rows of every rank it went to, in fp32 in rank order). No
// all-reduce: the block's output is the token's whole sum. Every rank calls every block with token counts in one
// power-of-two bucket (the all-to-all's capacity); the harness gives every rank the same case, and draws its
// activations from the rank's own seed (dp_seed in fk/tasks/harness.h), so that a row delivered to the wrong rank or
// token fails the check. The reference: the unsharded block on the rank's tokens, every rank's experts gathered.
// The token-to-rank traffic is bf16 (the all-to-all's dtype). DeepSeek's MoE block (fk/tasks/deepseek.h) goes the same
// way and adds its shared experts, whole on every rank, to the combined rows.

/// This rank's expert-parallel slot ids: [first, first + L) renumbered from 0, the rest -1.
template <class Cfg> Tensor ep_local_ids(const Tensor& ids) {
  constexpr int ep = EpSizeOf<Cfg>::value, L = static_cast<int>(Cfg::num_experts / ep);
  static_assert(Cfg::num_experts % ep == 0, "experts split evenly over the expert-parallel ranks");
  FK_CHECK(fk::dist::tp_world_size() == ep, "expert parallelism over " + std::to_string(ep) + " ranks in a group of " +
                                                std::to_string(fk::dist::tp_world_size()) + " (Note [Expert-parallel MoE])");
  Tensor local = empty(ids.sizes(), DType::kI32);
  fk::kernels::ep_localize_ids(local.data<int32_t>(), ids.data<int32_t>(), ids.numel(), fk::dist::tp_rank() * L, L, current_stream());
  FK_CHECK_LAUNCH();
  return local;
}

/// The slots of this rank's experts among the rows a dispatch delivered, renumbered from 0; the other slots and every
/// slot of a stale row -1 (ep_localize_received_ids).
inline Tensor ep_received_local_ids(const fk::dist::EpDispatch& d) {
  Tensor local = empty(d.topk_ids.sizes(), DType::kI32);
  fk::kernels::ep_localize_received_ids(local.data<int32_t>(), d.topk_ids.data<int32_t>(), d.counts, d.world, d.capacity,
                                        static_cast<int>(d.topk_ids.size(1)), d.first_expert, d.experts_per_rank, current_stream());
  FK_CHECK_LAUNCH();
  return local;
}

/// The routed experts at a data-parallel layout (Note [Data-parallel expert MoE]): this rank's tokens dispatched to
/// the ranks of their experts through the block's all-to-all child A2A (kind ep_all_to_all: its dispatch, then its
/// combine with the dispatch's handle), `experts(x, topk_weights, local_ids)` run on the rows this rank received.
template <class A2A, class Experts>
Tensor ep_moe_forward(const Tensor& hidden, const Tensor& weights, const Tensor& ids, const Experts& experts) {
  static_assert(!std::is_same_v<A2A, NoCollective>,
                "a data-parallel MoE block calls its ep_all_to_all child task (Note [Data-parallel expert MoE]); regenerate");
  A2A a2a(from_config);
  const fk::dist::EpDispatch d = a2a.dispatch(hidden, ids, weights);
  const Tensor y = experts(d.x, d.topk_weights, ep_received_local_ids(d));
  return a2a.combine(d, y);
}

/// The routed experts of an MoE block (M: w13_weight, w2_weight, experts; Cfg: the block's constants) on routing
/// (weights, ids): every expert's share of this rank, or under expert parallelism this rank's experts on their
/// slots (Note [Expert-parallel MoE]); at tensor parallelism a partial sum the block reduces. Coll: the block's
/// collective child, the all-to-all at a data-parallel layout (the all-reduce at tensor parallelism is the block's).
template <class Cfg, class Coll = NoCollective, class M>
Tensor routed_experts_forward(M& m, const Tensor& hidden, const Tensor& weights, const Tensor& ids, const Tensor& w13_bias = Tensor(),
                              const Tensor& w2_bias = Tensor()) {
  using ExpertsCfg = typename decltype(m.experts)::Cfg;
  if constexpr (DataParallelOf<Cfg>::value) {  // Note [Data-parallel expert MoE]
    static_assert(std::is_same_v<typename Cfg::scalar_t, __nv_bfloat16>, "the expert-parallel all-to-all moves bf16 rows");
    return ep_moe_forward<Coll>(hidden, weights, ids, [&](const Tensor& x, const Tensor& w, const Tensor& local_ids) {
      return fused_experts_forward<ExpertsCfg>(m.experts, x, m.w13_weight, m.w2_weight, w, local_ids, w13_bias, w2_bias, true);
    });
  } else if constexpr (EpSizeOf<Cfg>::value > 1)
    return fused_experts_forward<ExpertsCfg>(m.experts, hidden, m.w13_weight, m.w2_weight, weights, ep_local_ids<Cfg>(ids), w13_bias,
                                             w2_bias, true);
  else
    return m.experts.forward(hidden, m.w13_weight, m.w2_weight, weights, ids, w13_bias, w2_bias);
}

/// SparseMoeBlock.forward(hidden_states [T, H]) -> [T, H]: gate -> router -> experts.
/// Reduce: the block's collective child: the all-reduce at tensor parallelism (Note [Collective tasks] in
/// fk/tasks/collective.h), the expert-parallel all-to-all at a data-parallel layout.
template <class Cfg, class Reduce = NoCollective, class M> Tensor sparse_moe_forward(M& m, const Tensor& hidden) {
  Tensor logits = std::get<0>(m.gate.forward(hidden));
  std::tuple<Tensor, Tensor> r = m.router.forward(logits);
  capture_routing(std::get<1>(r));  // Note [Routing capture]
  Tensor out = routed_experts_forward<Cfg, Reduce>(m, hidden, std::get<0>(r), std::get<1>(r), m.w13_bias, m.w2_bias);
  // Tensor parallelism (Note [Sharded parameters]): each rank's experts hold its slice of every expert's
  // intermediate, so the block's output is a partial sum (vLLM's FusedMoE reduce_results).
  if constexpr (TpSizeOf<Cfg>::value > 1) out = collective_call<Reduce>(out);
  return out;
}

/// HF transformers 5 names of a sparse MoE block under `prefix` (e.g. model.layers.0.mlp.):
/// gate.weight [E, H], experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]. gpt-oss
/// (Cfg::swiglu_limit > 0) names the gate `router` and its experts hold gate_up_proj_bias [E, 2I]
/// and down_proj_bias [E, H]; HF stores its two expert weights transposed ([E, H, 2I], [E, I, H]),
/// which the parity loader undoes (bench/parity/hfmodel.py, TRANSPOSED_PARAMS): ours keep vLLM's
/// [E, n, k], with gate and up rows interleaved (SwigluOAIAndMul) as the checkpoint's columns are.
/// At tensor parallelism (Note [Sharded parameters]) each rank holds every expert's slice of the
/// intermediate: its rows of gate and of up in gate_up_proj, its columns of down_proj (the router whole).
/// The expert weights of an MoE block under `prefix`: experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I],
/// sharded as the layout says: this rank's whole experts (ep > 1: Note [Expert-parallel MoE]) or every expert's
/// slice of the intermediate (tp > 1: its rows of gate and of up, its columns of down).
template <class Cfg> void add_expert_weights(ParamList& out, const Tensor& w13, const Tensor& w2, const std::string& prefix) {
  constexpr int tp = TpSizeOf<Cfg>::value, ep = EpSizeOf<Cfg>::value;
  constexpr int64_t I = Cfg::moe_intermediate_size * (ep > 1 ? 1 : tp);  // the unsharded expert width
  const NamedParam gate_up{prefix + "experts.gate_up_proj", w13, 0.f, 1.f / std::sqrt(float(Cfg::hidden_size))};
  const NamedParam down{prefix + "experts.down_proj", w2, 0.f, 1.f / std::sqrt(float(I))};
  if constexpr (ep > 1) {
    out.push_back(shard(gate_up, 0, ep, Cfg::num_experts));
    out.push_back(shard(down, 0, ep, Cfg::num_experts));
  } else {
    out.push_back(shard(gate_up, 1, tp, 2 * I, 2));
    out.push_back(shard(down, 2, tp, I));
  }
}

template <class Cfg, class M> void add_moe_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr bool kGptOss = Cfg::swiglu_limit > 0;
  static_assert((TpSizeOf<Cfg>::value == 1 && EpSizeOf<Cfg>::value == 1) || !Cfg::expert_bias,
                "expert biases are not sharded (Note [Sharded parameters], Note [Expert-parallel MoE])");
  add_linear(out, m.gate, {Part(prefix + (kGptOss ? "router" : "gate"), Cfg::num_experts)});
  add_expert_weights<Cfg>(out, m.w13_weight, m.w2_weight, prefix);
  if (m.w13_bias.defined()) out.push_back({prefix + "experts.gate_up_proj_bias", m.w13_bias, 0.f, 0.1f});
  if (m.w2_bias.defined()) out.push_back({prefix + "experts.down_proj_bias", m.w2_bias, 0.f, 0.1f});
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]): fp32 math, rounded to the model dtype where vLLM's
// bf16 path rounds (the GEMM outputs, the activation, the expert sum).

/// Reference routing: (topk_weights f32 [T, K], topk_ids i32 [T, K]) from router logits.
inline std::tuple<Tensor, Tensor> ref_topk_softmax(const Tensor& logits, int top_k, bool renormalize) {
  FK_CHECK(logits.dim() == 2 && logits.stride(1) == 1, "reference topk_softmax logits " + logits.str());
  const int64_t t = logits.size(0);
  Tensor w = empty({t, top_k}, DType::kF32), ids = empty({t, top_k}, DType::kI32);
  const int e = static_cast<int>(logits.size(1));
  if (logits.dtype() == DType::kBF16)
    fk::kernels::reference::topk_softmax_ref<bf16>(w.data<float>(), ids.data<int32_t>(), logits.data<bf16>(), logits.stride(0),
                                                   t, e, top_k, renormalize, current_stream());
  else if (logits.dtype() == DType::kF16)
    fk::kernels::reference::topk_softmax_ref<f16>(w.data<float>(), ids.data<int32_t>(), logits.data<f16>(), logits.stride(0),
                                                  t, e, top_k, renormalize, current_stream());
  else
    FK_CHECK(false, "reference topk_softmax: bf16/f16 logits expected, got " + logits.str());
  FK_CHECK_LAUNCH();
  return {w, ids};
}

/// The experts' activation: SiluAndMul, or SwigluOAIAndMul (gpt-oss) when swiglu_limit > 0.
/// gpt-oss's alpha is fixed: GptOssConfig.swiglu_alpha defaults to 1.702 and the released
/// configs do not set it (vLLM hard-codes it too); the gpt_oss descriptor binds the same value
/// to the swigluoai_and_mul task.
inline constexpr double kSwigluOaiAlpha = 1.702;
struct ExpertAct {
  double swiglu_alpha = 0, swiglu_limit = 0;
};
/// swiglu_limit > 0: SwigluOAIAndMul with it (and gpt-oss's alpha); 0: SiluAndMul.
constexpr ExpertAct expert_act(double swiglu_limit) {
  return swiglu_limit > 0 ? ExpertAct{kSwigluOaiAlpha, swiglu_limit} : ExpertAct{};
}

/// fused_experts reference: [T, H] in the model dtype. Biases [E, 2I] / [E, H] or undefined.
/// tp_reduce: the experts hold this rank's slice of the intermediate (Note [Sharded references]): the
/// down projection's fp32 partial sums are summed over the tensor-parallel group before their rounding.
inline Tensor ref_fused_experts(const Tensor& hidden, const Tensor& w13, const Tensor& w2, const Tensor& topk_weights,
                                const Tensor& topk_ids, ExpertAct act_kind = {}, const Tensor& w13_bias = Tensor(),
                                const Tensor& w2_bias = Tensor(), bool tp_reduce = false) {
  const int top_k = static_cast<int>(topk_ids.size(-1));
  const std::vector<int32_t> ids = to_host<int32_t>(topk_ids);
  Tensor h1 = ref::round_to(ref::moe_linear_f32(hidden, w13, ids, top_k, false, Tensor(), w13_bias), hidden.dtype());
  Tensor act = act_kind.swiglu_limit > 0 ? ref::swigluoai_and_mul(h1, act_kind.swiglu_alpha, act_kind.swiglu_limit)
                                         : ref::silu_and_mul(h1);
  Tensor c2 = ref::moe_linear_f32(act, w2, ids, top_k, true, topk_weights, w2_bias);
  if (tp_reduce) fk::dist::tp_all_reduce_(c2);
  Tensor h2 = ref::round_to(c2, hidden.dtype());
  return ref::round_to(ref::moe_sum_f32(h2.view({hidden.size(0), top_k, hidden.size(1)})), hidden.dtype());
}

/// Reference routing that may adopt the task's near-tied choices (Note [Routing capture]).
/// logits: the reference's router logits [T, E] (model dtype); task_ids: the task's topk_ids
/// [T, K] or undefined; delta: how far (in logits) below the reference's k-th best logit a task
/// choice may be and still count as a tie. Returns (weights f32 [T, K], ids i32 [T, K]) with
/// weights from the reference's own logits (softmax in fp64, renormalised over the chosen
/// experts when `renormalize`).
inline std::tuple<Tensor, Tensor> ref_routing_adopting_ties(const Tensor& logits, int top_k, bool renormalize,
                                                            const Tensor& task_ids, double delta) {
  std::tuple<Tensor, Tensor> own = ref_topk_softmax(logits, top_k, renormalize);
  if (!task_ids.defined()) return own;
  const int64_t t = logits.size(0), e = logits.size(1);
  FK_CHECK(task_ids.numel() == t * top_k && task_ids.dtype() == DType::kI32,
           "reference routing: task topk_ids " + task_ids.str() + " for logits " + logits.str());
  const std::vector<float> lg = to_host<float>(to_f32(logits));
  const std::vector<int32_t> mine = to_host<int32_t>(std::get<1>(own)), theirs = to_host<int32_t>(contiguous_rows(task_ids.view({t, top_k})));
  std::vector<int32_t> ids = mine;
  bool adopted = false;
  for (int64_t i = 0; i < t; ++i) {
    const float* row = lg.data() + i * e;
    const int32_t* a = theirs.data() + i * top_k;
    std::vector<int32_t> sa(a, a + top_k), sm(mine.begin() + i * top_k, mine.begin() + (i + 1) * top_k);
    std::sort(sa.begin(), sa.end());
    std::sort(sm.begin(), sm.end());
    if (sa == sm) continue;
    if (std::adjacent_find(sa.begin(), sa.end()) != sa.end() || sa.front() < 0 || sa.back() >= e) continue;  // invalid: keep ours
    float kth = row[mine[i * top_k + top_k - 1]];
    bool near = true;
    for (int32_t x : sa) near &= row[x] >= kth - delta;
    if (!near) continue;
    std::copy(a, a + top_k, ids.begin() + i * top_k);
    adopted = true;
  }
  if (!adopted) return own;
  std::vector<float> w(t * top_k);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = lg.data() + i * e;
    double mx = row[0], z = 0, sel = 0;
    for (int64_t j = 1; j < e; ++j) mx = std::max<double>(mx, row[j]);
    for (int64_t j = 0; j < e; ++j) z += std::exp(double(row[j]) - mx);
    for (int k = 0; k < top_k; ++k) sel += std::exp(double(row[ids[i * top_k + k]]) - mx);
    for (int k = 0; k < top_k; ++k)
      w[i * top_k + k] = static_cast<float>(std::exp(double(row[ids[i * top_k + k]]) - mx) / (renormalize ? sel : z));
  }
  return {to_device(w, {t, top_k}), to_device(ids, {t, top_k})};
}

/// SparseMoeBlock reference (declared in fk/tasks/llama.h for the decoder-layer reference). In
/// a composite reference the task's recorded routing is adopted at near-ties (Note [Routing
/// capture]); the tie margin grows with the block's depth like the composite tolerance
/// (depth_tolerance): 0.05 * sqrt(block index + 1) logits, about 5x the logit error a 1%
/// relative error upstream of an O(1)-logit router gives.
/// A sparse MoE block's tensor-parallel ranks (its kTpSize; 1 for blocks that do not say).
template <class M, class = void> struct BlockTpOf : std::integral_constant<int, 1> {};
template <class M> struct BlockTpOf<M, std::void_t<decltype(M::kTpSize)>> : std::integral_constant<int, M::kTpSize> {};

/// A sparse MoE block's expert-parallel ranks (its kEpSize; 1 for blocks that do not say).
template <class M, class = void> struct BlockEpOf : std::integral_constant<int, 1> {};
template <class M> struct BlockEpOf<M, std::void_t<decltype(M::kEpSize)>> : std::integral_constant<int, M::kEpSize> {};

/// Every expert-parallel rank's experts [L, ...] gathered in rank order: [ranks x L, ...] (the reference's).
inline Tensor gather_experts(const Tensor& local) {
  if (!local.defined()) return local;
  Shape whole = local.sizes();
  whole[0] *= fk::dist::tp_world_size();
  return gather_rank_rows(local.view({local.size(0), -1})).view(whole);
}

/// The unsharded routed experts' reference on routing (weights, ids): every rank's experts gathered (ep > 1), or
/// this rank's slices with the down projection's fp32 partials summed over the group (tp > 1).
template <int kTp, int kEp>
Tensor ref_routed_experts(const Tensor& x, const Tensor& w13, const Tensor& w2, const Tensor& weights, const Tensor& ids,
                          ExpertAct act = {}, const Tensor& w13_bias = Tensor(), const Tensor& w2_bias = Tensor()) {
  if constexpr (kEp > 1)  // Note [Expert-parallel MoE]: the unsharded block over every rank's experts
    return ref_fused_experts(x, gather_experts(w13), gather_experts(w2), weights, ids, act, gather_experts(w13_bias),
                             gather_experts(w2_bias), false);
  else
    return ref_fused_experts(x, w13, w2, weights, ids, act, w13_bias, w2_bias, kTp > 1);
}

template <class M> Tensor ref_sparse_moe(M& m, const Tensor& x) {
  Tensor logits = ref::linear(x, m.gate.weight, m.gate.bias);
  std::pair<Tensor, int> task = next_task_routing();
  const double delta = task.first.defined() ? 0.05 * std::sqrt(double(task.second + 1)) : 0.0;
  std::tuple<Tensor, Tensor> r = ref_routing_adopting_ties(logits, M::kTopK, M::kRenormalize, task.first, delta);
  return ref_routed_experts<BlockTpOf<M>::value, BlockEpOf<M>::value>(x, m.w13_weight, m.w2_weight, std::get<0>(r), std::get<1>(r),
                                                                      expert_act(M::kSwigluLimit), m.w13_bias, m.w2_bias);
}

// ---------------------------------------------------------------------------------------------
// Inputs shared by the L1 harnesses: random routing of `tokens` tokens (the reference top-k of
// random logits, so roughly uniform over the experts, as a trained router's load balancing aims
// for) and the expert count it touches.

/// Distinct experts among routed ids (values in [0, num_experts)).
inline int64_t count_experts_hit(const std::vector<int32_t>& ids, int64_t num_experts) {
  std::vector<char> hit(num_experts, 0);
  for (int32_t e : ids) hit[e] = 1;
  return std::count(hit.begin(), hit.end(), 1);
}

/// The routed slots of this rank's experts, renumbered from 0: all of them, or under expert parallelism those of
/// its num_experts / ep_size experts (Note [Expert-parallel MoE]). For the tasks' costs.
template <class Cfg> std::vector<int32_t> rank_local_experts(const std::vector<int32_t>& ids) {
  constexpr int64_t L = Cfg::num_experts / EpSizeOf<Cfg>::value;
  const int64_t first = EpSizeOf<Cfg>::value > 1 ? fk::dist::tp_rank() * L : 0;
  std::vector<int32_t> local;
  for (int32_t e : ids)
    if (e >= first && e < first + L) local.push_back(static_cast<int32_t>(e - first));
  return local;
}

struct Routing {
  Tensor weights;  ///< f32 [T, K]
  Tensor ids;      ///< i32 [T, K]
  std::vector<int32_t> host_ids;
  int64_t experts_hit = 0;
};

inline Routing random_routing(int64_t tokens, int num_experts, int top_k, bool renormalize, uint64_t seed) {
  Tensor logits = empty({tokens, num_experts}, DType::kBF16);
  fill_normal(logits, seed);
  Routing r;
  std::tie(r.weights, r.ids) = ref_topk_softmax(logits, top_k, renormalize);
  r.host_ids = to_host<int32_t>(r.ids);
  r.experts_hit = count_experts_hit(r.host_ids, num_experts);
  return r;
}

/// Canonical alignment (Note [MoE routing layout]): every segment of blocks with one expert id
/// gets its slots sorted ascending, sentinels last. A valid alignment canonicalises to the one
/// `reference_alignment` builds.
inline void canonicalise_alignment(std::vector<int32_t>& sorted, const std::vector<int32_t>& expert_ids, int32_t npp,
                                   int block) {
  const int64_t nb = std::min<int64_t>(npp / block, static_cast<int64_t>(expert_ids.size()));
  int64_t b = 0;
  while (b < nb) {
    int64_t e = b;
    while (e < nb && expert_ids[e] == expert_ids[b]) ++e;
    const int64_t lo = b * block, hi = std::min<int64_t>(e * block, static_cast<int64_t>(sorted.size()));
    std::sort(sorted.begin() + lo, sorted.begin() + hi);  // the sentinel is the largest value
    b = e;
  }
}

struct Alignment {
  std::vector<int32_t> sorted, expert_ids;
  int32_t npp = 0;
};

/// Stable alignment of host ids: the reference the canonical form must equal.
inline Alignment reference_alignment(const std::vector<int32_t>& ids, int num_experts, int block, int64_t max_padded,
                                     int64_t max_blocks) {
  const int32_t sentinel = static_cast<int32_t>(ids.size());
  Alignment a;
  a.sorted.assign(max_padded, sentinel);
  a.expert_ids.assign(max_blocks, -1);
  int64_t pos = 0;
  for (int e = 0; e < num_experts; ++e) {
    int64_t n = 0;
    for (size_t s = 0; s < ids.size(); ++s)
      if (ids[s] == e) a.sorted[pos + n++] = static_cast<int32_t>(s);
    const int64_t padded = (n + block - 1) / block * block;
    for (int64_t b = 0; b < padded / block; ++b) a.expert_ids[pos / block + b] = e;
    pos += padded;
  }
  a.npp = static_cast<int32_t>(pos);
  return a;
}

// ---------------------------------------------------------------------------------------------
// L1 harnesses (Note [Task protocol]). Case dims: num_tokens.

/// topk_softmax: router logits [T, E] in the model dtype -> weights and ids. The ids must equal
/// the reference's exactly (ties break to the lower expert, as in vLLM); weights to fp32 rounding.
// Note [Routing near-ties]
// The routing kernels score experts in fp32, the references in fp64. Where two experts' biased
// scores (or two groups' scores) are closer than fp32 rounding, the two rank them differently; at
// thousands of tokens x 256 experts that happens in a row or two per run (seen with per-run seeds
// on H200, 2026-11-26). A row of the task's topk_ids that differs from the reference's is
// accepted when it is a valid selection up to a tie of at most `eps`: its experts are distinct and
// in range, each of its groups scores within eps of the topk_group-th best group, and its choice
// values (score + bias, fp64), sorted, are within eps of the best K over the groups it used
// (filled up to topk_group with the next best groups). The reference row then takes the task's
// ids, and its weights are recomputed in fp64 for them, so the weights are still checked. A
// wrong expert, or one off by more than fp32 rounding (eps 2e-6; the bias grid is 2^-12), is
// still a mismatch.
struct RoutingRowSpec {
  int experts, top_k, groups, topk_group;
  bool bias_in_group_score;  ///< group score = sum of the top-2 choices (with a correction bias)
};
/// True when `got` (K ids) is a valid near-tie selection for the row with fp64 `choice` values.
inline bool routing_near_tie(const std::vector<double>& choice, const RoutingRowSpec& r, const int32_t* got, double eps) {
  const int E = r.experts, K = r.top_k, G = r.groups, gsz = E / G;
  std::vector<double> gs(G);
  for (int g = 0; g < G; ++g) {
    std::vector<double> c(choice.begin() + g * gsz, choice.begin() + (g + 1) * gsz);
    std::sort(c.rbegin(), c.rend());
    gs[g] = r.bias_in_group_score && gsz > 1 ? c[0] + c[1] : c[0];
  }
  std::vector<int> order(G);
  for (int g = 0; g < G; ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return gs[a] > gs[b]; });
  const double boundary = gs[order[r.topk_group - 1]];
  std::vector<bool> used(G, false), seen(E, false);
  int nused = 0;
  for (int k = 0; k < K; ++k) {
    const int e = got[k];
    if (e < 0 || e >= E || seen[e]) return false;
    seen[e] = true;
    const int g = e / gsz;
    if (gs[g] < boundary - eps) return false;
    if (!used[g]) used[g] = true, ++nused;
  }
  if (nused > r.topk_group) return false;
  for (int g : order) {
    if (nused >= r.topk_group) break;
    if (!used[g]) used[g] = true, ++nused;
  }
  std::vector<double> best;
  for (int e = 0; e < E; ++e)
    if (used[e / gsz]) best.push_back(choice[e]);
  std::sort(best.rbegin(), best.rend());
  std::vector<double> mine;
  for (int k = 0; k < K; ++k) mine.push_back(choice[got[k]]);
  std::sort(mine.rbegin(), mine.rend());
  for (int k = 0; k < K; ++k)
    if (std::fabs(mine[k] - best[k]) > eps) return false;
  return true;
}

/// One case of a grouped_topk task. Case dims: num_tokens. Logits ~ N(0, 1) in the model dtype;
/// the correction bias ~ N(0, 0.1) rounded to multiples of 2^-12 (exact in fp32, so the biased
/// choices of the task (fp32) and the reference (fp64) differ only by the score's rounding).
/// Reference: fk::kernels::reference::grouped_topk_ref (fp64 scores, the same tie order); ids
/// exact, weights to fp32 rounding.
template <class Module, class Cfg> class GroupedTopKInstance final : public TaskInstance {
 public:
  explicit GroupedTopKInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const int n = rotating_sets(double(tokens_) * Cfg::num_experts * sizeof(T));
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::num_experts}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
    if constexpr (Cfg::correction_bias) {
      std::mt19937_64 rng(mix_seed(seed, 977));
      std::normal_distribution<double> nd(0.0, 0.1);
      std::vector<float> b(Cfg::num_experts);
      for (float& x : b) x = static_cast<float>(std::round(nd(rng) * 4096.0) / 4096.0);
      bias_ = to_device(b, {Cfg::num_experts});
    }
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = {}; }
  void run(int s) override {
    std::tuple<Tensor, Tensor> r = module_.forward(x_[s], bias_);
    out_[s] = {std::get<0>(r), std::get<1>(r)};
  }
  std::vector<Tensor> inputs(int s) override {
    if (bias_.defined()) return {x_[s], bias_};
    return {x_[s]};
  }
  std::vector<CheckedOutput> reference(int s) override {
    constexpr int E = Cfg::num_experts, K = Cfg::top_k;
    Tensor w = empty({tokens_, K}, DType::kF32), ids = empty({tokens_, K}, DType::kI32);
    fk::kernels::reference::grouped_topk_ref<T>(w.data<float>(), ids.data<int32_t>(), x_[s].data<T>(), E,
                                                bias_.defined() ? bias_.data<float>() : nullptr,
                                                static_cast<float>(Cfg::routed_scaling_factor), tokens_, E, K,
                                                Cfg::num_expert_group, Cfg::topk_group, Cfg::sigmoid, Cfg::renormalize,
                                                current_stream());
    FK_CHECK_LAUNCH();
    accept_near_ties(s, w, ids);
    Tolerance w_tol;
    w_tol.atol = 1e-6 * Cfg::routed_scaling_factor;
    w_tol.rtol = 1e-5;
    w_tol.max_rel_l2 = 1e-5;
    return {{"topk_ids", out_[s][1], ids, Tolerance{}}, {"topk_weights", out_[s][0], w, w_tol}};
  }
  /// Note [Routing near-ties]: rows where the task's ids differ from the reference's by a tie.
  void accept_near_ties(int s, Tensor& w, Tensor& ids) {
    constexpr int E = Cfg::num_experts, K = Cfg::top_k;
    const Tensor& got_t = out_[s][1];
    if (got_t.dtype() != DType::kI32 || got_t.numel() != tokens_ * K || !got_t.is_contiguous()) return;
    std::vector<int32_t> got = to_host<int32_t>(got_t), want = to_host<int32_t>(ids);
    if (got == want) return;
    const std::vector<float> x = to_host<float>(to_f32(x_[s]));
    const std::vector<float> bias = bias_.defined() ? to_host<float>(bias_) : std::vector<float>();
    std::vector<float> wh = to_host<float>(w);
    const RoutingRowSpec spec{E, K, Cfg::num_expert_group, Cfg::topk_group, bias_.defined()};
    bool changed = false;
    std::vector<double> score(E), choice(E);
    for (int64_t t = 0; t < tokens_; ++t) {
      if (std::equal(got.begin() + t * K, got.begin() + (t + 1) * K, want.begin() + t * K)) continue;
      double mx = -INFINITY, sum = 0;
      for (int e = 0; e < E; ++e) mx = std::max(mx, double(x[t * E + e]));
      for (int e = 0; e < E; ++e) sum += std::exp(double(x[t * E + e]) - mx);
      for (int e = 0; e < E; ++e) {
        const double v = x[t * E + e];
        score[e] = Cfg::sigmoid ? 1.0 / (1.0 + std::exp(-v)) : std::exp(v - mx) / sum;
        choice[e] = score[e] + (bias.empty() ? 0.0 : double(bias[e]));
      }
      if (!routing_near_tie(choice, spec, got.data() + t * K, 2e-6)) continue;
      double sel = 0;
      for (int k = 0; k < K; ++k) sel += score[got[t * K + k]];
      for (int k = 0; k < K; ++k) {
        const double sc = score[got[t * K + k]];
        want[t * K + k] = got[t * K + k];
        wh[t * K + k] = static_cast<float>((Cfg::renormalize ? sc / sel : sc) * Cfg::routed_scaling_factor);
      }
      changed = true;
    }
    if (!changed) return;
    ids = to_device(want, {tokens_, K});
    w = to_device(wh, {tokens_, K});
  }
  Cost cost() const override {
    const double t = double(tokens_);
    return {t * Cfg::num_experts * 6.0, t * (Cfg::num_experts * sizeof(T) + Cfg::top_k * 8.0)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  Tensor bias_;
  std::vector<Tensor> x_;
  std::vector<std::vector<Tensor>> out_;
};

template <class Module, class Cfg> class TopKSoftmaxInstance final : public TaskInstance {
 public:
  explicit TopKSoftmaxInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const int n = rotating_sets(double(tokens_) * Cfg::num_experts * sizeof(T));
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::num_experts}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = {}; }
  void run(int s) override {
    std::tuple<Tensor, Tensor> r = module_.forward(x_[s]);
    out_[s] = {std::get<0>(r), std::get<1>(r)};
  }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    std::tuple<Tensor, Tensor> r = ref_topk_softmax(x_[s], Cfg::top_k, Cfg::renormalize);
    Tolerance w_tol;
    w_tol.atol = 1e-6;
    w_tol.rtol = 1e-5;
    w_tol.max_rel_l2 = 1e-5;
    return {{"topk_ids", out_[s][1], std::get<1>(r), Tolerance{}}, {"topk_weights", out_[s][0], std::get<0>(r), w_tol}};
  }
  Cost cost() const override {
    const double t = double(tokens_);
    return {t * Cfg::num_experts * 4.0, t * (Cfg::num_experts * sizeof(T) + Cfg::top_k * 8.0)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_;
  std::vector<std::vector<Tensor>> out_;
};

/// moe_align_block_size with the block size fused_experts picks for the token count.
template <class Module, class Cfg> class MoeAlignInstance final : public TaskInstance {
 public:
  explicit MoeAlignInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")),
        block_(fk::kernels::moe_gemm_block_m(tokens_, Cfg::top_k, Cfg::num_experts)) {
    const int n = rotating_sets(double(tokens_) * Cfg::top_k * 4.0);
    routing_.resize(n);
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(routing_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    routing_[s] = random_routing(tokens_, Cfg::num_experts, Cfg::top_k, true, seed);
  }
  void prepare(int s) override { out_[s] = {}; }
  void run(int s) override {
    std::tuple<Tensor, Tensor, Tensor> r = module_.forward(routing_[s].ids, block_);
    out_[s] = {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
  }
  std::vector<Tensor> inputs(int s) override { return {routing_[s].ids}; }
  std::vector<CheckedOutput> reference(int s) override {
    std::vector<int32_t> sorted = to_host<int32_t>(out_[s][0]), eids = to_host<int32_t>(out_[s][1]);
    const int32_t npp = to_host<int32_t>(out_[s][2])[0];
    canonicalise_alignment(sorted, eids, npp, static_cast<int>(block_));
    Alignment ref = reference_alignment(routing_[s].host_ids, Cfg::num_experts, static_cast<int>(block_),
                                        out_[s][0].numel(), out_[s][1].numel());
    const int64_t ns = static_cast<int64_t>(sorted.size()), ne = static_cast<int64_t>(eids.size());
    return {{"num_tokens_post_pad", out_[s][2], to_device(std::vector<int32_t>{ref.npp}, {1}), Tolerance{}},
            {"expert_ids", out_[s][1], to_device(ref.expert_ids, {ne}), Tolerance{}},
            {"sorted_token_ids (canonical)", to_device(sorted, {ns}), to_device(ref.sorted, {ns}), Tolerance{}}};
  }
  Cost cost() const override {
    const double numel = double(tokens_) * Cfg::top_k;
    const double padded = double(fk::kernels::moe_align_max_padded(static_cast<int64_t>(numel), Cfg::num_experts, static_cast<int>(block_)));
    return {numel, numel * 4 + padded * 4};
  }

 private:
  int64_t tokens_, block_;
  Module module_;
  std::vector<Routing> routing_;
  std::vector<std::vector<Tensor>> out_;
};

/// moe_grouped_gemm on a random routing: A [T or T*K, k], all E experts' weights [E, n, k].
template <class Module, class Cfg> class MoeGroupedGemmInstance final : public TaskInstance {
 public:
  explicit MoeGroupedGemmInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")),
        block_(fk::kernels::moe_gemm_block_m(tokens_, Cfg::top_k, Cfg::num_experts)) {
    const int64_t a_rows = Cfg::per_slot_rows ? tokens_ * Cfg::top_k : tokens_;
    const double w_bytes = double(Cfg::num_experts) * Cfg::n * Cfg::k * sizeof(T);
    const double set_bytes = (double(a_rows) * Cfg::k + double(tokens_) * Cfg::top_k * Cfg::n) * sizeof(T);
    const int n = rotating_sets(set_bytes + w_bytes, 24.0 * (1ull << 30));
    require_device_memory(n * (set_bytes + w_bytes), "moe_grouped_gemm weights and activations");
    for (int s = 0; s < n; ++s) {
      a_.push_back(empty({a_rows, Cfg::k}, dtype_of<T>));
      w_.push_back(empty({Cfg::num_experts, Cfg::n, Cfg::k}, dtype_of<T>));
      if constexpr (Cfg::bias) b_.push_back(empty({Cfg::num_experts, Cfg::n}, dtype_of<T>));
    }
    routing_.resize(n);
    align_.resize(n);
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(a_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) {
      fill_normal(w_[s], mix_seed(seed, 100 + s), 0.f, 1.f / std::sqrt(float(Cfg::k)));
      if constexpr (Cfg::bias) fill_normal(b_[s], mix_seed(seed, 200 + s), 0.f, 0.5f);
      refresh(s, mix_seed(seed, 1000 + s));
    }
  }
  /// New activations and a new routing (and so a new alignment); the set's expert weights stay.
  void refresh(int s, uint64_t seed) override {
    fill_normal(a_[s], mix_seed(seed, 0));
    routing_[s] = random_routing(tokens_, Cfg::num_experts, Cfg::top_k, true, mix_seed(seed, 1));
    // The alignment is this task's input: the reference alignment, on the device.
    Alignment al = reference_alignment(routing_[s].host_ids, Cfg::num_experts, static_cast<int>(block_),
                                       fk::kernels::moe_align_max_padded(tokens_ * Cfg::top_k, Cfg::num_experts, static_cast<int>(block_)),
                                       fk::kernels::moe_align_max_blocks(tokens_ * Cfg::top_k, Cfg::num_experts, static_cast<int>(block_)));
    align_[s] = {to_device(al.sorted, {static_cast<int64_t>(al.sorted.size())}),
                 to_device(al.expert_ids, {static_cast<int64_t>(al.expert_ids.size())}),
                 to_device(std::vector<int32_t>{al.npp}, {1})};
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override {
    out_[s] = module_.forward(a_[s], w_[s], routing_[s].weights, align_[s][0], align_[s][1], align_[s][2], block_, bias(s));
  }
  std::vector<Tensor> inputs(int s) override {
    std::vector<Tensor> in{a_[s], w_[s], routing_[s].weights, align_[s][0], align_[s][1], align_[s][2]};
    if constexpr (Cfg::bias) in.push_back(b_[s]);
    return in;
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = ref::moe_linear_f32(a_[s], w_[s], routing_[s].host_ids, Cfg::top_k, Cfg::per_slot_rows,
                                     Cfg::mul_routed_weight ? routing_[s].weights : Tensor(), bias(s));
    return {{"out", out_[s], ref, matmul_tolerance(dtype_of<T>, 1.0)}};
  }
  Cost cost() const override {
    const double rows = double(tokens_) * Cfg::top_k, a_rows = Cfg::per_slot_rows ? rows : double(tokens_);
    const double hit = routing_.empty() || routing_[0].experts_hit == 0
                           ? expected_experts_hit(double(tokens_), Cfg::num_experts, Cfg::top_k)
                           : double(routing_[0].experts_hit);
    return {2.0 * rows * Cfg::n * Cfg::k,
            (hit * Cfg::n * Cfg::k + a_rows * Cfg::k + rows * Cfg::n) * sizeof(T)};
  }
  std::string peer_name() const override { return ""; }

 private:
  using T = typename Cfg::scalar_t;
  Tensor bias(int s) const { return Cfg::bias ? b_[s] : Tensor(); }
  int64_t tokens_, block_;
  Module module_;
  std::vector<Tensor> a_, w_, b_, out_;
  std::vector<Routing> routing_;
  std::vector<std::vector<Tensor>> align_;
};

/// moe_sum: [T, K, H] -> [T, H].
template <class Module, class Cfg> class MoeSumInstance final : public TaskInstance {
 public:
  explicit MoeSumInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * Cfg::top_k * Cfg::hidden_size * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(n * set_bytes * 1.5, "moe_sum inputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::top_k, Cfg::hidden_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    return {{"out", out_[s], ref::moe_sum_f32(x_[s]), default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double t = double(tokens_);
    return {t * Cfg::top_k * Cfg::hidden_size, t * (Cfg::top_k + 1) * Cfg::hidden_size * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, out_;
};

// ---------------------------------------------------------------------------------------------
// L2 harness: fused_experts (kBlock false: routing given) and sparse_moe_block (kBlock true:
// the block routes itself). Case dims: num_tokens.

template <class Module, class Cfg, bool kBlock> class MoeInstance final : public TaskInstance {
 public:
  explicit MoeInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), module_(from_config) {
    constexpr int64_t E = Cfg::num_experts, H = Cfg::hidden_size, I = Cfg::moe_intermediate_size, K = Cfg::top_k;
    const double w_bytes = double(E) * 3 * H * I * sizeof(T);
    const double act = double(tokens_) * (H * 2 + K * (3 * I + 2 * H)) * sizeof(T);
    require_device_memory(w_bytes + 3 * act, "MoE expert weights and activations");
    if constexpr (kBlock) {
      add_moe_params<Cfg>(params_, module_, "model.layers.0.mlp.");
    } else {
      w13_ = empty({E, 2 * I, H}, dtype_of<T>);
      w2_ = empty({E, H, I}, dtype_of<T>);
      params_.push_back({"w13", w13_, 0.f, 1.f / std::sqrt(float(H))});
      params_.push_back({"w2", w2_, 0.f, 1.f / std::sqrt(float(I))});
      if constexpr (Cfg::expert_bias) {
        w13_bias_ = empty({E, 2 * I}, dtype_of<T>);
        w2_bias_ = empty({E, H}, dtype_of<T>);
        params_.push_back({"w13_bias", w13_bias_, 0.f, 0.1f});
        params_.push_back({"w2_bias", w2_bias_, 0.f, 0.1f});
      }
    }
    x_ = empty({tokens_, H}, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    fill_normal(x_, dp_seed<Cfg>(mix_seed(seed, 4001)));
    if constexpr (kBlock && DataParallelOf<Cfg>::value) {
      // Note [Data-parallel expert MoE]: the slots this rank computes come from every rank's tokens; the cost counts
      // their expected number (T K on every rank) and the expected share of its experts that all ranks' tokens hit.
      constexpr int ep = EpSizeOf<Cfg>::value;
      experts_hit_ = static_cast<int64_t>(std::ceil(expected_experts_hit(tokens_routed_to_rank<Cfg>(tokens_), Cfg::num_experts, Cfg::top_k) / ep));
      routed_slots_ = tokens_ * Cfg::top_k;
    } else if constexpr (kBlock) {
      // The routing the block will make (reference gate + top-k), for the cost's expert count.
      Tensor logits = ref::linear(x_, module_.gate.weight, module_.gate.bias);
      std::tuple<Tensor, Tensor> r = ref_topk_softmax(logits, Cfg::top_k, Cfg::renormalize);
      // This rank's experts [first, first + L): all of them, or under expert parallelism its share (Note
      // [Expert-parallel MoE]); the cost counts the slots routed to them and the experts they hit.
      const std::vector<int32_t> local = rank_local_experts<Cfg>(to_host<int32_t>(std::get<1>(r)));
      experts_hit_ = count_experts_hit(local, Cfg::num_experts / EpSizeOf<Cfg>::value);
      routed_slots_ = static_cast<int64_t>(local.size());
    } else {
      routing_ = random_routing(tokens_, Cfg::num_experts, Cfg::top_k, true, mix_seed(seed, 4002));
      experts_hit_ = routing_.experts_hit;
    }
  }
  /// New hidden states (and, given routing, a new routing); the expert weights stay.
  void refresh(int, uint64_t seed) override {
    fill_normal(x_, dp_seed<Cfg>(mix_seed(seed, 0)));
    if constexpr (!kBlock) routing_ = random_routing(tokens_, Cfg::num_experts, Cfg::top_k, true, mix_seed(seed, 1));
  }
  void prepare(int) override { out_ = Tensor(); }
  void run(int) override {
    if constexpr (kBlock) out_ = module_.forward(x_);
    else out_ = module_.forward(x_, w13_, w2_, routing_.weights, routing_.ids, w13_bias_, w2_bias_);
  }
  std::vector<Tensor> inputs(int) override {
    std::vector<Tensor> v = param_tensors(params_);
    v.push_back(x_);
    if constexpr (!kBlock) {
      v.push_back(routing_.weights);
      v.push_back(routing_.ids);
    }
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    Tensor ref = kBlock ? ref_sparse_moe_block()
                        : ref_fused_experts(x_, w13_, w2_, routing_.weights, routing_.ids, expert_act(Cfg::swiglu_limit),
                                            w13_bias_, w2_bias_);
    return {{"out", out_, to_f32(ref), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    constexpr double E = Cfg::num_experts, H = Cfg::hidden_size, I = Cfg::moe_intermediate_size, K = Cfg::top_k;
    const double t = double(tokens_);
    const double hit = experts_hit_ >= 0 ? double(experts_hit_) : expected_experts_hit(t, E, K);
    // The (token, expert) pairs this rank computes: all of them, or under expert parallelism its own.
    const double slots = kBlock && experts_hit_ >= 0 ? double(routed_slots_) : t * K;
    const double flops = 2 * slots * 3 * H * I + (kBlock ? 2 * t * H * E : 0.0);
    const double bytes = (hit * 3 * H * I + (kBlock ? E * H : 0.0) + 2 * t * H) * sizeof(T);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  Tensor ref_sparse_moe_block() {
    if constexpr (kBlock) return ref_sparse_moe(module_, x_);
    else return Tensor();
  }
  int64_t tokens_;
  Module module_;
  ParamList params_;
  Tensor x_, w13_, w2_, w13_bias_, w2_bias_, out_;
  Routing routing_;
  int64_t experts_hit_ = -1, routed_slots_ = 0;  ///< this rank's (Note [Expert-parallel MoE]); -1: not counted
};

}  // namespace fk::tasks
