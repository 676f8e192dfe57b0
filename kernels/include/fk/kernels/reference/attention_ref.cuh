// Reference attention for checking only (prefill and decode): one block per (query row, query
// head), fp32 scores and softmax over the row's key range, fp32 output, no rounding.
// Row r attends to keys kv_begin[r] .. kv_begin[r] + kv_len[r] - 1 (token indices into k/v);
// the causal range of a prefill token and the cached length of a decode sequence are both
// expressed this way by the caller (a sliding window too: it only moves the range's start).
// GQA: query head h reads KV head h / (Hq / Hkv). softcap > 0: a score s (after the scale)
// becomes softcap * tanh(s / softcap) before the softmax (Gemma 2's attention soft-capping).
// Keys are processed in chunks of 256 with a running max (exact softmax, any length).
// sinks (gpt-oss attention sinks, HF eager_attention_forward of modeling_gpt_oss): the row of
// scores gets one more logit sinks[h], the softmax runs over both and the sink's probability is
// dropped, i.e. e^(sinks[h] - max) joins the denominator only (and, with no key, out = 0).
// bias (Note [Attention logit bias] in fk/kernels/attention.h): fp32, added to the scaled score of
// row r's key c (the c-th of its range) at bias[h * bias_head_stride + bias_off[r] + c]; the caller
// puts the row's query position and its range's first key position into bias_off.
#pragma once

#include <math_constants.h>

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

namespace detail {

constexpr int kAttnRefThreads = 128, kAttnRefChunk = 256, kAttnRefMaxD = 256;

template <class T>
__global__ void __launch_bounds__(kAttnRefThreads)
attention_ref_kernel(float* __restrict__ out, const T* __restrict__ q, int64_t q_row_stride, const T* __restrict__ k,
                     const T* __restrict__ v, int64_t kv_tok_stride, const int32_t* __restrict__ kv_begin,
                     const int32_t* __restrict__ kv_len, int hq, int hkv, int d, float scale, float softcap,
                     const float* __restrict__ sinks, const float* __restrict__ bias, const int32_t* __restrict__ bias_off,
                     int64_t bias_head_stride) {
  __shared__ float qs[kAttnRefMaxD];
  __shared__ float ps[kAttnRefChunk];
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int h = blockIdx.y, kvh = h / (hq / hkv);
  const int tid = threadIdx.x;
  for (int i = tid; i < d; i += kAttnRefThreads) qs[i] = to_float(q[row * q_row_stride + h * d + i]);
  __syncthreads();
  const int64_t begin = kv_begin[row];
  const int len = kv_len[row];
  float run_max = -CUDART_INF_F, run_sum = 0.f;
  float acc[kAttnRefMaxD / kAttnRefThreads] = {};
  for (int c0 = 0; c0 < len; c0 += kAttnRefChunk) {
    const int cn = min(kAttnRefChunk, len - c0);
    float local_max = -CUDART_INF_F;
    for (int j = tid; j < cn; j += kAttnRefThreads) {
      const T* kr = k + (begin + c0 + j) * kv_tok_stride + static_cast<int64_t>(kvh) * d;
      float s = 0.f;
      for (int i = 0; i < d; i += Vec16<T>::kN) {  // d and the strides are multiples of 16 bytes
        const Vec16<T> kv = load16(kr + i);
#pragma unroll
        for (int e = 0; e < Vec16<T>::kN; ++e) s = fmaf(qs[i + e], to_float(kv.v[e]), s);
      }
      s *= scale;
      if (softcap > 0.f) s = softcap * tanhf(s / softcap);
      if (bias != nullptr) s += bias[h * bias_head_stride + bias_off[row] + c0 + j];
      ps[j] = s;
      local_max = fmaxf(local_max, s);
    }
    // block max
    for (int o = 16; o > 0; o >>= 1) local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
    if (tid % 32 == 0) red[tid / 32] = local_max;
    __syncthreads();
    float chunk_max = red[0];
    for (int w = 1; w < kAttnRefThreads / 32; ++w) chunk_max = fmaxf(chunk_max, red[w]);
    __syncthreads();
    const float new_max = fmaxf(run_max, chunk_max);
    const float alpha = expf(run_max - new_max);  // 0 on the first chunk
    float local_sum = 0.f;
    for (int j = tid; j < cn; j += kAttnRefThreads) {
      const float p = expf(ps[j] - new_max);
      ps[j] = p;
      local_sum += p;
    }
    local_sum = warp_sum(local_sum);
    if (tid % 32 == 0) red[tid / 32] = local_sum;
    __syncthreads();
    float chunk_sum = 0.f;
    for (int w = 0; w < kAttnRefThreads / 32; ++w) chunk_sum += red[w];
    run_sum = run_sum * alpha + chunk_sum;
    run_max = new_max;
#pragma unroll
    for (int a = 0; a < kAttnRefMaxD / kAttnRefThreads; ++a) {
      const int i = tid + a * kAttnRefThreads;
      if (i >= d) continue;
      float s = acc[a] * alpha;
      for (int j = 0; j < cn; ++j) s = fmaf(ps[j], to_float(v[(begin + c0 + j) * kv_tok_stride + static_cast<int64_t>(kvh) * d + i]), s);
      acc[a] = s;
    }
    __syncthreads();
  }
  // Without a sink: acc / run_sum. With one: rebase on max(run_max, sink) (run_max = -inf when
  // there is no key) and add the sink's term to the denominator.
  float num_scale = 1.f, den = run_sum;
  if (sinks != nullptr) {
    const float sink = sinks[h];
    const float mm = fmaxf(run_max, sink);
    num_scale = len > 0 ? expf(run_max - mm) : 0.f;
    den = run_sum * num_scale + expf(sink - mm);
  }
#pragma unroll
  for (int a = 0; a < kAttnRefMaxD / kAttnRefThreads; ++a) {
    const int i = tid + a * kAttnRefThreads;
    if (i < d) out[(row * hq + h) * static_cast<int64_t>(d) + i] = den > 0.f ? acc[a] * num_scale / den : 0.f;
  }
}

}  // namespace detail

/// out [rows, hq, d] fp32. q row r, head h at q + r * q_row_stride + h * d; key token t, KV head
/// g at k + t * kv_tok_stride + g * d (same for v). kv_begin/kv_len: device arrays [rows]. d <= 256, d and strides multiples of 8 (16-byte rows).
/// softcap 0: no soft-capping. sinks: nullptr, or device fp32 [hq] attention-sink logits (in the
/// units of the scaled, capped scores; see the top of this file).
template <class T>
void attention_ref(float* out, const T* q, int64_t q_row_stride, const T* k, const T* v, int64_t kv_tok_stride,
                   const int32_t* kv_begin, const int32_t* kv_len, int64_t rows, int hq, int hkv, int d, float scale,
                   cudaStream_t stream, float softcap = 0.f, const float* sinks = nullptr, const float* bias = nullptr,
                   const int32_t* bias_off = nullptr, int64_t bias_head_stride = 0) {
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows), hq);
  detail::attention_ref_kernel<T><<<grid, detail::kAttnRefThreads, 0, stream>>>(out, q, q_row_stride, k, v, kv_tok_stride,
                                                                              kv_begin, kv_len, hq, hkv, d, scale, softcap,
                                                                              sinks, bias, bias_off, bias_head_stride);
}

}  // namespace fk::kernels::reference
