// References for composite tasks (L2-L4): the forward pass of a model-dtype network, op by op.
//
// Note [Composite references]
// Each op computes in fp32 from model-dtype (bf16/f16) inputs and rounds its result to the
// model dtype, which is where a bf16 network (vLLM's, HF transformers') rounds too. Only the
// rounding points are shared with the task; the arithmetic is independent of the task's
// kernels: the simple reference kernels of kernels/reference, and for GEMMs cublasGemmEx with
// an fp32 result (an fp32-accumulating library GEMM, not the task's GEMV/cuBLASLt choice), so a
// reference for a whole model stays affordable. The whole-model reference that shares nothing
// with us is HF transformers (bench/parity/).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fk/runtime/tensor.h"

namespace fk::kernels {
enum class Act;  // fk/kernels/activation.cuh
}

namespace fk::tasks::ref {

/// x [M, K] (row stride free, last dim dense) @ w[N, K]^T + bias[N]? -> [M, N].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
/// Note [Sharded references]: a row-parallel linear at tensor parallelism, this rank holding the
/// columns of x and w it owns: its fp32 partial product, summed over the tensor-parallel group in
/// fp32 (fk::dist::tp_all_reduce_), plus the bias, rounded once: the unsharded linear's reference
/// up to the order of the fp32 sums. Every rank of the group must call it.
Tensor linear_tp_reduce(const Tensor& x, const Tensor& w, const Tensor& bias);
/// rmsnorm(x) * (weight_offset + w); weight_offset 1: GemmaRMSNorm.
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps, float weight_offset = 0.f);
/// (rmsnorm(x + residual) * (weight_offset + w), x + residual).
std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& w, double eps,
                                       float weight_offset = 0.f);
/// Per-head rmsnorm of x [T, heads * head_dim] with weight [head_dim] (as weight_offset + w).
Tensor head_rms_norm(const Tensor& x, int heads, int head_dim, const Tensor& w, double eps, float weight_offset = 0.f);
/// RoPE of x [T, heads * head_size] with the fp32 cos/sin cache [rows, rotary_dim].
Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin_cache, int heads, int head_size,
            int rotary_dim, bool neox);
/// Multimodal rope's per-token cos/sin rows [T, rotary_dim] (fp32, the cache's cos | sin layout) for
/// positions [3, T], built HF's way (kernels/reference/rotary_embedding_ref.cuh); index them with
/// arange(T) (mrope_ref_positions) in rope().
Tensor mrope_table(const Tensor& positions, const Tensor& cos_sin_cache, int rotary_dim, int s0, int s1, int s2, bool interleaved);
/// i64 [n] = 0, 1, ..., n - 1.
Tensor arange_i64(int64_t n);
/// LayerNorm: (x - mean) * rstd * w (+ b when defined), over the last dim.
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
/// (layer_norm(x + residual), x + residual), the sum rounded to the model dtype first.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b, double eps);
/// act(x) elementwise (GELU, GELU-tanh, QuickGELU, ReLU, SiLU, sigmoid, tanh).
Tensor activation(const Tensor& x, fk::kernels::Act act);
/// silu(x[:, :d]) * x[:, d:] (gelu_tanh: GELU with the tanh approximation instead of silu).
Tensor silu_and_mul(const Tensor& x, bool gelu_tanh = false);
/// SwigluOAIAndMul: gate x[:, 0::2], up x[:, 1::2]; (clamp(up, -limit, limit) + 1) * g *
/// sigmoid(alpha * g) with g = min(gate, limit).
Tensor swigluoai_and_mul(const Tensor& x, double alpha, double limit);
/// weight[ids] (times scale when it is not 0).
Tensor embedding(const Tensor& ids, const Tensor& weight, float scale = 0.f);
/// cap * tanh(x / cap) elementwise (logit soft-capping), from the model dtype, rounded to it.
Tensor softcap(const Tensor& x, double cap);
/// s * x elementwise (Granite's multipliers), from the model dtype, rounded to it.
Tensor scale(const Tensor& x, double s);
/// cache_rows[slot_mapping[t]] = x[t] for a cache viewed as [slots, row] rows.
void store_rows(Tensor& cache, const Tensor& x, const Tensor& slot_mapping);
/// Attention over each sequence's own tokens (causal; `causal` false: every token of its sequence): q [T, Hq*D], k/v [T, Hkv*D], sequences
/// given by host token offsets cu (size B+1). Returns [T, Hq*D]. window > 0: each query sees
/// its last `window` keys only (Note [Sliding window] in fk/tasks/attention.h). softcap > 0:
/// scaled scores s become softcap * tanh(s / softcap) (Gemma 2). sinks: f32 [hq] attention-sink
/// logits or undefined (Note [Attention sinks] in fk/tasks/attention.h).
Tensor attention_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& cu, int hq,
                         int hkv, int d, double scale, int64_t window = 0, double softcap = 0, const Tensor& sinks = Tensor(),
                         bool causal = true);
/// Cross-attention: each query of sequence s (cu_q) attends to every key of sequence s of k/v
/// (cu_k), non-causal.
Tensor attention_cross(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& cu_q,
                       const std::vector<int32_t>& cu_k, int hq, int hkv, int d, double scale);
/// One query per sequence over its cached keys: q [B, Hq*D]; caches [B, max_len, Hkv, D];
/// lens: host KV lengths (the query is the last of them). Returns [B, Hq*D].
Tensor attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const std::vector<int32_t>& lens,
                        int hq, int hkv, int d, double scale, int64_t window = 0, double softcap = 0,
                        const Tensor& sinks = Tensor());
/// Grouped expert GEMM, fp32 result [num_valid, N]: row s = A[per_slot_rows ? s : s / top_k] @
/// w[topk_ids[s]]^T, times topk_weights[s] when given (f32 [num_valid], else undefined).
/// topk_ids is the flat host copy [num_valid]; rows are grouped by expert on the host and each
/// expert's rows go through one fp32-output library GEMM (no rounding). bias: [E, N] in the
/// model dtype, added before the routing weight, or undefined.
Tensor moe_linear_f32(const Tensor& a, const Tensor& w, const std::vector<int32_t>& topk_ids, int top_k,
                      bool per_slot_rows, const Tensor& topk_weights, const Tensor& bias = Tensor());
/// out[t] = sum_k x[t, k] for x [T, K, H] in the model dtype; fp32 result [T, H].
Tensor moe_sum_f32(const Tensor& x);
/// a + b elementwise, fp32 result (for comparing residual streams).
Tensor add_f32(const Tensor& a, const Tensor& b);
/// acc (fp32) += x (model dtype), elementwise, in place (a sum over tensors in a fixed order).
void accumulate_f32_(Tensor& acc, const Tensor& x);
/// fp32 -> dtype, rounding to nearest even.
Tensor round_to(const Tensor& f32, DType dtype);

}  // namespace fk::tasks::ref
