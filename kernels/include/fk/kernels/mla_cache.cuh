// Writing the new tokens' latent rows into the MLA cache (vLLM `concat_and_cache_mla`,
// kv_cache_dtype "auto"): kv_cache[slot_mapping[t]] = [kv_c[t] (kKv) | k_pe[t] (kR)]; a negative
// slot (padding) writes nothing. The cache is contiguous rows of kKv + kR elements, one latent
// "head" per token (DeepSeek-V3: 512 + 64 bf16, 1152 bytes).
//
// Layout: a flat list of T * (kKv + kR) / (16 / sizeof(T)) 16-byte vectors; a vector lies wholly
// in kv_c or in k_pe (both are whole vectors), so each thread copies kVecPerThread vectors,
// kThreads apart, issuing every load (and the slot load) before any store.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kKv, int kR, int kVecPerThread, int kThreads>
__global__ void __launch_bounds__(kThreads)
concat_and_cache_mla_kernel(const T* __restrict__ kv_c, int64_t kv_c_stride, const T* __restrict__ k_pe,
                            int64_t k_pe_stride, T* __restrict__ kv_cache, const int64_t* __restrict__ slot_mapping,
                            int64_t num_tokens) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kKv % kN == 0 && kR % kN == 0, "kv_lora_rank and the rope dim must be multiples of 16 bytes");
  constexpr int kKvVecs = kKv / kN, kRowVecs = (kKv + kR) / kN;
  const uint32_t total = static_cast<uint32_t>(num_tokens) * kRowVecs;
  const uint32_t base = blockIdx.x * (kThreads * kVecPerThread) + threadIdx.x;
  Vec16<T> v[kVecPerThread];
  int64_t slot[kVecPerThread];
#pragma unroll
  for (int i = 0; i < kVecPerThread; ++i) {
    const uint32_t idx = base + i * kThreads;
    slot[i] = -1;
    if (idx < total) {
      const uint32_t tok = idx / kRowVecs;
      const int c = static_cast<int>(idx - tok * kRowVecs);
      slot[i] = __ldg(slot_mapping + tok);
      v[i] = c < kKvVecs ? load16_stream(kv_c + tok * kv_c_stride + c * kN)
                         : load16_stream(k_pe + tok * k_pe_stride + (c - kKvVecs) * kN);
    }
  }
#pragma unroll
  for (int i = 0; i < kVecPerThread; ++i) {
    const uint32_t idx = base + i * kThreads;
    if (idx < total && slot[i] >= 0) {
      const uint32_t tok = idx / kRowVecs;
      const int c = static_cast<int>(idx - tok * kRowVecs);
      store16(kv_cache + slot[i] * (kKv + kR) + static_cast<int64_t>(c) * kN, v[i]);
    }
  }
}

}  // namespace detail

/// kv_c [T, kKv] and k_pe [T, kR] (row strides in elements, 16-byte aligned, unit stride within a
/// row) scattered into the contiguous cache [num_slots, kKv + kR] at slot_mapping[t].
template <class T, int kKv, int kR>
void concat_and_cache_mla(const T* kv_c, int64_t kv_c_stride, const T* k_pe, int64_t k_pe_stride, T* kv_cache,
                          const int64_t* slot_mapping, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int64_t kRowVecs = int64_t(kKv + kR) / Vec16<T>::kN;
  const int64_t total = num_tokens * kRowVecs;
  constexpr int64_t kLargeBlockVecs = 256 * 4;
  if (total >= kLargeBlockVecs * 132 * 2) {
    detail::concat_and_cache_mla_kernel<T, kKv, kR, 4, 256><<<ceil_div(total, kLargeBlockVecs), 256, 0, stream>>>(
        kv_c, kv_c_stride, k_pe, k_pe_stride, kv_cache, slot_mapping, num_tokens);
  } else {
    detail::concat_and_cache_mla_kernel<T, kKv, kR, 1, 128><<<ceil_div(total, 128), 128, 0, stream>>>(
        kv_c, kv_c_stride, k_pe, k_pe_stride, kv_cache, slot_mapping, num_tokens);
  }
}

}  // namespace fk::kernels
