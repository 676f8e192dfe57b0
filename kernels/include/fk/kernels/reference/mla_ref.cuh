// References for the MLA cache write and prefill (checking only; plain one-thread-per-element and
// one-block-per-row kernels that share nothing with the fast paths). Decode: mla_decode_ref.cuh.
#pragma once

#include <math_constants.h>

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

namespace detail {

template <class T>
__global__ void concat_rows_ref_kernel(float* cache, const T* kv_c, int64_t kv_c_stride, const T* k_pe, int64_t k_pe_stride,
                                       const int64_t* slot_mapping, int64_t num_tokens, int kv, int r) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row = kv + r;
  if (i >= num_tokens * row) return;
  const int64_t t = i / row;
  const int e = static_cast<int>(i % row);
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  cache[slot * row + e] = e < kv ? to_float(kv_c[t * kv_c_stride + e]) : to_float(k_pe[t * k_pe_stride + (e - kv)]);
}

constexpr int kMlaPrefillRefThreads = 128, kMlaPrefillRefChunk = 128, kMlaPrefillRefMaxD = 256;

/// One block per (query row, head): scores over keys [begin, begin + len) of that head (one key
/// per thread), softmax in fp32 (the row max and sum first, then the probabilities chunk by chunk
/// through shared memory), out = sum p_j v_j with each thread owning output columns tid, tid + 128.
/// q, k [rows, heads, dqk], v [rows, heads, dv], contiguous.
template <class T>
__global__ void __launch_bounds__(kMlaPrefillRefThreads)
mla_prefill_ref_kernel(float* out, const T* q, const T* k, const T* v, const int32_t* kv_begin, const int32_t* kv_len,
                       const int32_t* rows, int heads, int dqk, int dv, float scale) {
  __shared__ float qs[kMlaPrefillRefMaxD];
  __shared__ float red[kMlaPrefillRefThreads];
  __shared__ float ps[kMlaPrefillRefChunk];
  const int64_t slot = blockIdx.x, row = rows ? rows[slot] : slot;  // out row `slot` checks query row `row`
  const int h = blockIdx.y, tid = threadIdx.x;
  for (int i = tid; i < dqk; i += kMlaPrefillRefThreads) qs[i] = to_float(q[(row * heads + h) * dqk + i]);
  __syncthreads();
  const int64_t begin = kv_begin[slot];  // per out row (per sampled row)
  const int len = kv_len[slot];
  auto score = [&](int j) {
    const T* kr = k + ((begin + j) * heads + h) * dqk;
    float s = 0.f;
    for (int i = 0; i < dqk; ++i) s = fmaf(qs[i], to_float(kr[i]), s);
    return s * scale;
  };
  float m = -CUDART_INF_F;
  for (int j = tid; j < len; j += kMlaPrefillRefThreads) m = fmaxf(m, score(j));
  red[tid] = m;
  __syncthreads();
  for (int o = kMlaPrefillRefThreads / 2; o > 0; o >>= 1) {
    if (tid < o) red[tid] = fmaxf(red[tid], red[tid + o]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int j = tid; j < len; j += kMlaPrefillRefThreads) sum += expf(score(j) - m);
  red[tid] = sum;
  __syncthreads();
  for (int o = kMlaPrefillRefThreads / 2; o > 0; o >>= 1) {
    if (tid < o) red[tid] += red[tid + o];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  constexpr int kCols = (kMlaPrefillRefMaxD + kMlaPrefillRefThreads - 1) / kMlaPrefillRefThreads;
  float acc[kCols] = {};
  for (int c0 = 0; c0 < len; c0 += kMlaPrefillRefChunk) {
    const int cn = min(kMlaPrefillRefChunk, len - c0);
    __syncthreads();
    if (tid < cn) ps[tid] = expf(score(c0 + tid) - m);
    __syncthreads();
    for (int j = 0; j < cn; ++j) {
      const T* vr = v + ((begin + c0 + j) * heads + h) * dv;
#pragma unroll
      for (int u = 0; u < kCols; ++u) {
        const int c = tid + u * kMlaPrefillRefThreads;
        if (c < dv) acc[u] = fmaf(ps[j], to_float(vr[c]), acc[u]);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kCols; ++u) {
    const int c = tid + u * kMlaPrefillRefThreads;
    if (c < dv) out[(slot * heads + h) * dv + c] = acc[u] * inv;
  }
}

}  // namespace detail

/// expected (fp32 [num_slots, kv + r]) = cache_before (as fp32, already in `cache`) with
/// [kv_c[t] | k_pe[t]] written at slot_mapping[t] >= 0.
template <class T>
void concat_and_cache_mla_ref(float* cache, const T* kv_c, int64_t kv_c_stride, const T* k_pe, int64_t k_pe_stride,
                              const int64_t* slot_mapping, int64_t num_tokens, int kv, int r, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  detail::concat_rows_ref_kernel<T><<<ceil_div(num_tokens * (kv + r), 256), 256, 0, stream>>>(
      cache, kv_c, kv_c_stride, k_pe, k_pe_stride, slot_mapping, num_tokens, kv, r);
}

/// Causal MLA prefill reference: q, k [rows, heads, dqk], v [rows, heads, dv] contiguous; out row i
/// attends to keys [kv_begin[i], kv_begin[i] + kv_len[i]); out fp32 [n, heads, dv]. With `row_ids`
/// (i32 [n], device) out row i is query row row_ids[i] (a sample of the rows); kv_begin and kv_len
/// are per out row. dqk, dv <= 256. (MLA decode has its own reference, mla_decode_ref.cuh.)
template <class T>
void mla_prefill_ref(float* out, const T* q, const T* k, const T* v, const int32_t* kv_begin, const int32_t* kv_len,
                     int64_t n, int heads, int dqk, int dv, float scale, cudaStream_t stream,
                     const int32_t* row_ids = nullptr) {
  if (n == 0) return;
  detail::mla_prefill_ref_kernel<T><<<dim3(static_cast<unsigned>(n), heads), detail::kMlaPrefillRefThreads, 0, stream>>>(
      out, q, k, v, kv_begin, kv_len, row_ids, heads, dqk, dv, scale);
}

}  // namespace fk::kernels::reference
