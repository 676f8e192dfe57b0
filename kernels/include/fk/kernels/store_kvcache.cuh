// Writing the new tokens' keys and values into the paged KV cache (vLLM
// `reshape_and_cache_flash` with the cache viewed as [num_slots, Hkv, D]): k_cache[slot_mapping[t]]
// = key[t], v_cache[slot_mapping[t]] = value[t]; a negative slot (padding) writes nothing.
// Specialised on the KV head count and head size.
//
// Layout: the work is a flat list of T * Hkv * D / (16 / sizeof(T)) 16-byte vectors; a thread
// owns kVecPerThread of them, kThreads apart, and for each issues the key load, the value load
// and the (L1-cached) slot load before any store.
// Launch: large: 256 threads x 4 vectors (8 independent 16-byte loads per thread); small
// (decode): 128 threads x 1 vector (1 token of 8 x 128 bf16: one block).
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kHkv, int kD, int kVecPerThread, int kThreads>
__global__ void __launch_bounds__(kThreads)
store_kvcache_kernel(const T* __restrict__ key, int64_t key_stride, int64_t key_head_stride,
                     const T* __restrict__ value, int64_t value_stride, int64_t value_head_stride,
                     T* __restrict__ k_cache, T* __restrict__ v_cache, const int64_t* __restrict__ slot_mapping,
                     int64_t num_tokens) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kD % kN == 0, "head_dim must be a multiple of 16 bytes");
  constexpr int kHeadVecs = kD / kN;
  constexpr int kRowVecs = kHkv * kHeadVecs;
  const uint32_t total = static_cast<uint32_t>(num_tokens) * kRowVecs;  // 32-bit indices
  const uint32_t base = blockIdx.x * (kThreads * kVecPerThread) + threadIdx.x;

  Vec16<T> kv[kVecPerThread], vv[kVecPerThread];
  int64_t slot[kVecPerThread];
#pragma unroll
  for (int i = 0; i < kVecPerThread; ++i) {
    const uint32_t idx = base + i * kThreads;
    slot[i] = -1;
    if (idx < total) {
      const uint32_t tok = idx / kRowVecs;
      const int c = static_cast<int>(idx - tok * kRowVecs);
      const int h = c / kHeadVecs, e = (c % kHeadVecs) * kN;
      slot[i] = __ldg(slot_mapping + tok);
      kv[i] = load16_stream(key + tok * key_stride + h * key_head_stride + e);
      vv[i] = load16_stream(value + tok * value_stride + h * value_head_stride + e);
    }
  }
#pragma unroll
  for (int i = 0; i < kVecPerThread; ++i) {
    const uint32_t idx = base + i * kThreads;
    if (idx < total && slot[i] >= 0) {
      const uint32_t tok = idx / kRowVecs;
      const int c = static_cast<int>(idx - tok * kRowVecs);
      const int64_t off = slot[i] * kRowVecs * kN + static_cast<int64_t>(c) * kN;
      store16(k_cache + off, kv[i]);
      store16(v_cache + off, vv[i]);
    }
  }
}

}  // namespace detail

/// key/value [T, Hkv, D] (token and head strides in elements, 16-byte aligned, unit stride in
/// D) scattered into contiguous k_cache/v_cache [num_slots, Hkv, D] at slot_mapping[t].
template <class T, int kHkv, int kD>
void store_kvcache(const T* key, int64_t key_stride, int64_t key_head_stride, const T* value, int64_t value_stride,
                   int64_t value_head_stride, T* k_cache, T* v_cache, const int64_t* slot_mapping, int64_t num_tokens,
                   cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int64_t kRowVecs = int64_t(kHkv) * kD / Vec16<T>::kN;
  const int64_t total = num_tokens * kRowVecs;
  constexpr int64_t kLargeBlockVecs = 256 * 4;
  if (total >= kLargeBlockVecs * 132 * 2) {
    detail::store_kvcache_kernel<T, kHkv, kD, 4, 256><<<ceil_div(total, kLargeBlockVecs), 256, 0, stream>>>(
        key, key_stride, key_head_stride, value, value_stride, value_head_stride, k_cache, v_cache, slot_mapping,
        num_tokens);
  } else {
    detail::store_kvcache_kernel<T, kHkv, kD, 1, 128><<<ceil_div(total, 128), 128, 0, stream>>>(
        key, key_stride, key_head_stride, value, value_stride, value_head_stride, k_cache, v_cache, slot_mapping,
        num_tokens);
  }
}

}  // namespace fk::kernels
