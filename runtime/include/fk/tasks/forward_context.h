// What vLLM's attention layers read from `get_forward_context()`: the batch's attention
// metadata, set by whoever runs the model (the L4 model runner, or a task harness). Modules
// keep their production `forward` signatures; the metadata travels beside them, as in vLLM.
//
// Note [KV cache layout]
// Each attention layer owns k_cache and v_cache of shape [max_seqs, max_len, Hkv, D] (dense per
// sequence: sequence b's token at position p lives in row b * max_len + p of the flattened
// cache). slot_mapping gives that row for every token of the step. Decode reads the first
// num_seqs sequences of the cache with cache_seqlens (the length including this step's token).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "fk/runtime/cuda_check.h"
#include "fk/runtime/tensor.h"

namespace fk::tasks {

/// Mirrors the fields of vLLM's FlashAttentionMetadata the Llama family uses.
struct AttnMetadata {
  bool is_prefill = true;
  int64_t num_seqs = 0;
  int64_t num_tokens = 0;
  Tensor cu_seqlens;       ///< i32 [num_seqs + 1], prefill: token offsets of the sequences
  int64_t max_seqlen = 0;  ///< prefill: the longest sequence
  Tensor cache_seqlens;    ///< i32 [num_seqs], decode: KV length including this step's token
  Tensor slot_mapping;     ///< i64 [num_tokens], see Note [KV cache layout]
  /// Encoder-decoder models (vLLM's encoder_seq_start_loc / max_encoder_seq_len): token offsets of
  /// each sequence's encoder output [num_seqs + 1] i32, which cross-attention attends to, and the
  /// longest; undefined / 0 without an encoder.
  Tensor encoder_cu_seqlens;
  int64_t max_encoder_seqlen = 0;
  /// Prefill: the host copy of cu_seqlens where the caller has one (vLLM's
  /// PoolingMetadata.prompt_lens): the per-token heads of embedding models size their outputs by
  /// it (empty: they copy cu_seqlens to the host).
  std::vector<int32_t> host_cu_seqlens;
};

/// The metadata of the forward pass in progress; throws when none is set.
const AttnMetadata& forward_context();
bool has_forward_context();

/// RAII: makes `m` the forward context for this scope (mirrors vllm set_forward_context).
class ForwardContextGuard {
 public:
  explicit ForwardContextGuard(const AttnMetadata* m);
  ~ForwardContextGuard();
  ForwardContextGuard(const ForwardContextGuard&) = delete;
  ForwardContextGuard& operator=(const ForwardContextGuard&) = delete;

 private:
  const AttnMetadata* prev_;
};

/// Stands in for the q/k norm of families that have none (the composite kinds' fallback type).
struct NoQKNorm {
  NoQKNorm(int64_t, int64_t, int64_t, double) {}
};

/// Called by LlamaModel.forward after every decoder layer with (layer, hidden_states, residual);
/// empty by default. The parity dump uses it to read the residual stream per layer.
using LayerHook = std::function<void(int, const Tensor&, const Tensor&)>;
void set_layer_hook(LayerHook hook);
void call_layer_hook(int layer, const Tensor& hidden_states, const Tensor& residual);

/// Note [Routing capture]
/// An MoE model routes discontinuously: where two experts' router logits nearly tie, the
/// rounding differences between a task and its reference (upstream of the router) can pick
/// different experts, and that token's output then differs by O(1). So composite harnesses
/// record the routing the task made (sparse_moe_forward appends each block's topk_ids while a
/// capture is set, in call order), and the reference adopts the task's choice for a token only
/// where its own router logits make that choice a near-tie (fk/tasks/moe.h, ref_sparse_moe);
/// a choice that is not nearly optimal is never adopted, so a wrong router still fails.
void capture_routing(const Tensor& topk_ids);
/// RAII: records routing into `sink` (cleared first) for this scope.
class RoutingCaptureGuard {
 public:
  explicit RoutingCaptureGuard(std::vector<Tensor>* sink);
  ~RoutingCaptureGuard();
  RoutingCaptureGuard(const RoutingCaptureGuard&) = delete;
  RoutingCaptureGuard& operator=(const RoutingCaptureGuard&) = delete;

 private:
  std::vector<Tensor>* prev_;
};
/// RAII: the routing a reference may adopt, consumed in order by next_task_routing().
class TaskRoutingGuard {
 public:
  explicit TaskRoutingGuard(const std::vector<Tensor>* recorded);
  ~TaskRoutingGuard();
  TaskRoutingGuard(const TaskRoutingGuard&) = delete;
  TaskRoutingGuard& operator=(const TaskRoutingGuard&) = delete;

 private:
  const std::vector<Tensor>* prev_;
  size_t prev_next_;
};
/// The next recorded topk_ids and its index (the MoE block's position in call order); an
/// undefined tensor when none is set or all are consumed.
std::pair<Tensor, int> next_task_routing();

/// A contiguous copy of a 2-D view whose last dimension is dense (e.g. columns of the qkv output).
Tensor contiguous_rows(const Tensor& t);

/// positions + offset (i64, a new tensor; offset 0 returns `positions`): RoBERTa-style encoders
/// number positions from padding_idx + 1 (vLLM's replace_roberta_positions).
Tensor offset_positions(const Tensor& positions, int64_t offset);

/// Rows `rows` (i32, device) of x [T, C] -> [len(rows), C], e.g. the last token of each
/// sequence before compute_logits (runtime/src/llama_glue.cu).
Tensor gather_rows(const Tensor& x, const Tensor& rows);
/// dst[rows[i]] = src[i] for the rows `rows` (i32, device, distinct) of dst [T, C] (in place): a VLM's
/// image features into the text embeddings at the image tokens (HF's masked_scatter, vLLM's
/// merge_multimodal_embeddings).
void scatter_rows_(Tensor& dst, const Tensor& rows, const Tensor& src);
/// dst[rows[i]] += src[i] (rounded once to the dtype), rows distinct: Qwen3-VL's deepstack features
/// into the text model's hidden states at the image tokens (Note [DeepStack]).
void scatter_add_rows_(Tensor& dst, const Tensor& rows, const Tensor& src);
/// h[r] += sum_k w[k] * table[idx[k]] over row r's taps k in [ptr[r], ptr[r + 1]) (ptr i32 [rows + 1],
/// idx i32 / w f32 [nnz], device), in order, the sum rounded to the model dtype before the add
/// (runtime/src/vision_glue.cu): a learned position table resampled to each image's grid, Qwen3-VL's
/// bilinearly (4 taps a row, Note [Interpolated vision positions]), SigLIP-2's with antialiasing (as
/// many as the shrink asks, Note [NaFlex positions]).
void add_weighted_rows_(Tensor& h, const Tensor& table, const Tensor& ptr, const Tensor& idx, const Tensor& w);

}  // namespace fk::tasks
