// Reference MLA absorbed decode for checking only (fk/kernels/mla_decode.cuh, Note [MLA absorbed
// decode]): one block per (sequence, query head), fp32 scores, natural-base softmax and fp32
// output, no rounding. Shares no code with the fast kernel.
//   out[b, h, :] = sum_p softmax_p(scale * q[b, h] · row_p) * row_p[0 : dkv],
// rows row_p = kv_cache[b * max_len + p] (dkv + dr elements), p < min(cache_seqlens[b], max_len).
// Keys go in chunks of kMlaRefChunk with a running max (exact softmax at any length); a warp
// scores one key at a time (lanes split the row, shuffle sum), then every thread accumulates
// its own output columns over the chunk.
#pragma once

#include <math_constants.h>

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

namespace detail {

constexpr int kMlaRefThreads = 256, kMlaRefChunk = 256, kMlaRefMaxD = 1024, kMlaRefMaxDv = 512;

template <class T>
__global__ void __launch_bounds__(kMlaRefThreads)
mla_decode_ref_kernel(float* __restrict__ out, const T* __restrict__ q, const T* __restrict__ kv,
                      const int32_t* __restrict__ seqlens, int64_t max_len, int hq, int dkv, int dr, float scale) {
  __shared__ float qs[kMlaRefMaxD];
  __shared__ float prob[kMlaRefChunk];
  __shared__ float wred[kMlaRefThreads / 32];
  const int b = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  constexpr int kWarps = kMlaRefThreads / 32;
  const int d = dkv + dr;
  const T* qrow = q + (static_cast<int64_t>(b) * hq + h) * d;
  for (int i = tid; i < d; i += kMlaRefThreads) qs[i] = to_float(qrow[i]);
  __syncthreads();
  const int64_t len = min(max(static_cast<int64_t>(seqlens[b]), int64_t{0}), max_len);
  const T* rows = kv + static_cast<int64_t>(b) * max_len * d;

  float run_max = -CUDART_INF_F, run_sum = 0.f;
  float acc[kMlaRefMaxDv / kMlaRefThreads] = {};
  for (int64_t c0 = 0; c0 < len; c0 += kMlaRefChunk) {
    const int cn = static_cast<int>(min(static_cast<int64_t>(kMlaRefChunk), len - c0));
    for (int j = warp; j < cn; j += kWarps) {
      const T* row = rows + (c0 + j) * d;
      float dot = 0.f;
      for (int i = lane; i < d; i += 32) dot = fmaf(qs[i], to_float(row[i]), dot);
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_down_sync(0xffffffffu, dot, o);
      if (lane == 0) prob[j] = dot * scale;
    }
    __syncthreads();
    // Every thread scans the chunk's scores for the max (cheap at 256).
    float cmax = -CUDART_INF_F;
    for (int j = 0; j < cn; ++j) cmax = fmaxf(cmax, prob[j]);
    const float new_max = fmaxf(run_max, cmax);
    const float rescale = expf(run_max - new_max);  // 0 on the first chunk
    __syncthreads();
    float part = 0.f;
    for (int j = tid; j < cn; j += kMlaRefThreads) {
      const float e = expf(prob[j] - new_max);
      prob[j] = e;
      part += e;
    }
    for (int o = 16; o > 0; o >>= 1) part += __shfl_down_sync(0xffffffffu, part, o);
    if (lane == 0) wred[warp] = part;
    __syncthreads();
    float csum = 0.f;
    for (int w = 0; w < kWarps; ++w) csum += wred[w];
    run_sum = run_sum * rescale + csum;
    run_max = new_max;
#pragma unroll
    for (int a = 0; a < kMlaRefMaxDv / kMlaRefThreads; ++a) {
      const int col = tid + a * kMlaRefThreads;
      if (col >= dkv) continue;
      float s = acc[a] * rescale;
      for (int j = 0; j < cn; ++j) s = fmaf(prob[j], to_float(rows[(c0 + j) * d + col]), s);
      acc[a] = s;
    }
    __syncthreads();  // prob and wred are rewritten by the next chunk
  }
#pragma unroll
  for (int a = 0; a < kMlaRefMaxDv / kMlaRefThreads; ++a) {
    const int col = tid + a * kMlaRefThreads;
    if (col < dkv) out[(static_cast<int64_t>(b) * hq + h) * dkv + col] = run_sum > 0.f ? acc[a] / run_sum : 0.f;
  }
}

}  // namespace detail

/// out fp32 [batch, hq, dkv]; q [batch, hq, dkv + dr]; kv_cache rows of dkv + dr, sequence b's
/// token p at row b * max_len + p; cache_seqlens device i32 [batch] (clamped to [0, max_len];
/// an empty sequence gives 0). dkv <= 512, dkv + dr <= 1024.
template <class T>
void mla_decode_ref(float* out, const T* q, const T* kv_cache, const int32_t* cache_seqlens, int64_t batch,
                    int64_t max_len, int hq, int dkv, int dr, float scale, cudaStream_t stream) {
  if (batch <= 0) return;
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>(hq));
  detail::mla_decode_ref_kernel<T><<<grid, detail::kMlaRefThreads, 0, stream>>>(out, q, kv_cache, cache_seqlens, max_len,
                                                                               hq, dkv, dr, scale);
}

}  // namespace fk::kernels::reference
