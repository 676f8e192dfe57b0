// The cross-attention cache write: the encoder's projected keys and values, packed [Tk, Hkv, D]
// with cu_seqlens_k [B+1], into the padded cache [B, max_len, Hkv, D] that every later decoder
// call attends to, plus the per-sequence key counts [B] (vLLM writes the encoder tokens' K/V into
// its cross-attention KV cache once per request; FlashAttention then reads it with seqused_k /
// cache_seqlens). Specialised on the KV head count and head size.
//
// Note [Cross-attention cache write]
// Grid: one block per group of kTokPerBlock packed tokens; the block's threads cover the tokens'
// rows (Hkv * D elements, 16-byte vectors) of k and v. A token finds its sequence by a binary
// search of cu_seqlens_k (B + 1 entries, L1-cached), so ragged batches need no host lengths.
// Block 0 also writes the key counts. A token whose position is past max_len (a caller that
// broke the max_seqlen_k contract) is dropped, never written out of bounds.
#pragma once

#include <algorithm>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kHkv, int kD, int kThreads>
__global__ void __launch_bounds__(kThreads)
cross_cache_write_kernel(T* __restrict__ k_cache, T* __restrict__ v_cache, int32_t* __restrict__ seqlens,
                         const T* __restrict__ key, int64_t key_stride, const T* __restrict__ value, int64_t value_stride,
                         const int32_t* __restrict__ cu_seqlens, int batch, int64_t max_len, int64_t num_tokens,
                         int tok_per_block) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kD % kN == 0, "head_dim must be a multiple of 16 bytes");
  constexpr int kRowVecs = kHkv * kD / kN;
  if (blockIdx.x == 0)
    for (int b = threadIdx.x; b < batch; b += kThreads) seqlens[b] = cu_seqlens[b + 1] - cu_seqlens[b];
  const int64_t first = int64_t(blockIdx.x) * tok_per_block;
  for (int64_t t = first; t < first + tok_per_block && t < num_tokens; ++t) {
    int lo = 0, hi = batch - 1;  // the last b with cu_seqlens[b] <= t
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (__ldg(cu_seqlens + mid) <= t) lo = mid; else hi = mid - 1;
    }
    const int64_t pos = t - __ldg(cu_seqlens + lo);
    if (pos >= max_len) continue;
    const int64_t dst = (int64_t(lo) * max_len + pos) * kRowVecs;
    const auto* kin = reinterpret_cast<const Vec16<T>*>(key + t * key_stride);
    const auto* vin = reinterpret_cast<const Vec16<T>*>(value + t * value_stride);
    auto* kout = reinterpret_cast<Vec16<T>*>(k_cache) + dst;
    auto* vout = reinterpret_cast<Vec16<T>*>(v_cache) + dst;
    for (int c = threadIdx.x; c < kRowVecs; c += kThreads) {
      const Vec16<T> kv = kin[c], vv = vin[c];
      kout[c] = kv;
      vout[c] = vv;
    }
  }
}

}  // namespace detail

/// k_cache/v_cache [batch, max_len, Hkv, D] rows (b, p < len_b) = key/value [cu_seqlens[b] + p];
/// seqlens[b] = len_b (Note [Cross-attention cache write]). Rows past len_b are not touched.
/// key/value rows are Hkv * D dense elements, `key_stride`/`value_stride` elements apart (a
/// multiple of 16 bytes: the k and v column blocks of a fused kv projection's output qualify).
template <int kHkv, int kD, class T>
void cross_cache_write(T* k_cache, T* v_cache, int32_t* seqlens, const T* key, int64_t key_stride, const T* value,
                       int64_t value_stride, const int32_t* cu_seqlens, int batch, int64_t max_len, int64_t num_tokens,
                       cudaStream_t stream) {
  if (batch <= 0) return;
  constexpr int kThreads = 128;
  constexpr int kRowVecs = kHkv * kD / Vec16<T>::kN;
  // A few rows per block when a row is narrow (fewer 16-byte vectors than threads).
  const int tok_per_block = kRowVecs >= kThreads ? 1 : (kRowVecs >= 32 ? 2 : 8);
  const int64_t blocks = std::max<int64_t>(1, (num_tokens + tok_per_block - 1) / tok_per_block);
  detail::cross_cache_write_kernel<T, kHkv, kD, kThreads><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      k_cache, v_cache, seqlens, key, key_stride, value, value_stride, cu_seqlens, batch, max_len, num_tokens, tok_per_block);
}

}  // namespace fk::kernels
