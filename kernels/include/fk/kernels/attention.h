// Causal variable-length prefill attention through cuDNN's fused SDPA (cudnn-frontend graph
// API), the counterpart of vLLM's flash_attn_varlen_func. Plain C++: raw device pointers and a
// stream; implemented in kernels/src/attention_cudnn.cu.
//
// Layout THD (packed tokens): q [total_q, Hq, D], k/v [total_k, Hkv, D], out [total_q, Hq, D],
// contiguous; cu_seqlens_q/k [batch + 1] i32 on the device (exclusive prefix sums of the
// lengths). GQA when Hq != Hkv. Causal mask aligned top-left within each sequence (equal q and
// k lengths in prefill, where this is also FlashAttention's bottom-right causal). A sliding
// window of W keys (window = W > 0) keeps key j for query i when j > i - W (HF's
// sliding_window, FlashAttention's window_size (W - 1, 0)): cuDNN's diagonal band left bound.
//
// Note [cuDNN varlen SDPA]
// cuDNN expresses THD through *ragged offsets*: each of Q, K, V, O is described as a
// (B, H, S_max, D) tensor with strides (-, D, H*D, 1) plus a device tensor [B+1] of element
// offsets (cu_seqlens * H * D) where each sequence starts; a padding mask with per-sequence
// lengths (seq_len_q/kv [B]) bounds the rows and columns. A tiny kernel derives these five
// device arrays from cu_seqlens on every call (cu_seqlens may change between calls; the
// graph does not). The graph, its execution plan and the workspace are built once and cached
// per (device, dtype, B, max_seqlen_q, max_seqlen_k, Hq, Hkv, D, scale, causal); total
// token counts only bound the buffers and are not part of the graph.
//
// Note [cuDNN SDPA, equal lengths]
// When total_q == batch * max_seqlen_q and total_k == batch * max_seqlen_k, every sequence has
// exactly max_seqlen tokens (no length exceeds the max), which is known on the host without
// reading cu_seqlens. Then the packed tensors are ordinary strided (B, H, S, D) tensors with
// strides (S*H*D, D, H*D, 1): a separate cached graph without padding mask and ragged offsets
// (a faster cuDNN kernel variant, and no auxiliary kernel) runs them; cu_seqlens is not read.
// Hence the contract: max_seqlen_q/k must be the true maxima (as for flash_attn_varlen_func)
// and cu_seqlens must start at 0.
//
// Note [Padded keys: seqused_k]
// FlashAttention's seqused_k: with it, k/v are a padded cache [batch, max_seqlen_k, Hkv, D]
// (sequence b's keys in its first seqused_k[b] rows; the cross-attention cache of
// fk/kernels/cross_attention.cuh) and cu_seqlens_k is not read. The ragged graph then takes
// element offsets b * max_seqlen_k * Hkv * D and lengths seqused_k[b] (the same graph: only the
// auxiliary kernel differs). The dense graph runs it only when the caller knows on the host
// that every seqused_k[b] == max_seqlen_k (seqused_k_full).
//
// Note [Attention logit bias]
// An additive bias on the scaled scores before the softmax (torch SDPA's float attn_mask, HF's
// relative position biases: T5 / mT5 / UMT5 buckets, BEiT and Swin tables, MPNet): one
// [Hq, bias_rows, bias_cols] tensor in the io dtype, broadcast over the batch, or one per sequence
// [batch, Hq, bias_rows, bias_cols] (bias_per_seq: LayoutLMv3's 2-D box positions, CPM-Ant's
// segments); query i and key j of sequence b (positions within it) get bias[(b,) h, i, j], i.e.
// every sequence reads the top-left block of its table (HF builds position_bias [1 or B, H, S, S]
// for the padded batch the same way).
// bias_rows >= max_seqlen_q and bias_cols >= max_seqlen_k; a larger table is read in place
// through its strides. cuDNN adds it after the attention scale and before the masks, as SDPA
// does. The bias takes part in the graph's cache key (its presence and its row/column strides).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fk::kernels {

enum class AttnDType { kBF16, kF16 };

struct VarlenAttentionArgs {
  void* out = nullptr;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t batch = 0;
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;
  int64_t total_q = 0;  ///< rows of q/out (bounds; == batch * max_seqlen_q selects the equal-length path)
  int64_t total_k = 0;  ///< rows of k/v (bounds only)
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;    ///< q/k head dim
  int head_dim_v = 0;  ///< v/out head dim (MLA prefill: 128 against qk 192); 0: head_dim
  float softmax_scale = 0.f;
  bool causal = true;
  int window = 0;  ///< sliding window in keys, the query's own included; 0: none
  bool allow_dense = true;  ///< false: always the ragged graph (tests, benchmarks)
  /// Note [Padded keys: seqused_k]: [batch] i32 key counts of a padded k/v [batch, max_seqlen_k, Hkv, D];
  /// null: packed k/v described by cu_seqlens_k.
  const int32_t* seqused_k = nullptr;
  bool seqused_k_full = false;  ///< with seqused_k: every count is max_seqlen_k (known on the host)
  AttnDType dtype = AttnDType::kBF16;
  /// Note [Attention logit bias]: [(batch,) num_heads, bias_rows, bias_cols] in the io dtype, contiguous; null: none.
  const void* bias = nullptr;
  int64_t bias_rows = 0, bias_cols = 0;
  bool bias_per_seq = false;  ///< [batch, Hq, rows, cols] instead of one [Hq, rows, cols] for the batch
};

/// Runs cuDNN's fused flash attention for a packed variable-length batch. Throws
/// std::runtime_error (naming the cuDNN message) when the graph is not supported.
void varlen_attention_cudnn(const VarlenAttentionArgs& args, cudaStream_t stream);

/// Whether this process can run cuDNN SDPA (library loads, device supported); for skipping tests.
bool cudnn_attention_available();

}  // namespace fk::kernels
