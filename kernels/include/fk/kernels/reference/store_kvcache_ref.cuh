// Reference KV-cache write (checking only): the expected caches are fp32 copies of the caches
// before the write (cache_before) with the rows of every non-negative slot replaced by the
// token's key/value. One thread per element.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void cache_to_f32_kernel(float* out, const T* cache, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = to_float(cache[i]);
}

template <class T>
__global__ void scatter_rows_ref_kernel(float* out_cache, const T* x, int64_t x_stride, int64_t x_head_stride,
                                        const int64_t* slot_mapping, int64_t num_tokens, int heads, int head_dim) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row = static_cast<int64_t>(heads) * head_dim;
  if (i >= num_tokens * row) return;
  const int64_t t = i / row;
  const int h = static_cast<int>((i % row) / head_dim);
  const int e = static_cast<int>(i % head_dim);
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  out_cache[slot * row + static_cast<int64_t>(h) * head_dim + e] = to_float(x[t * x_stride + h * x_head_stride + e]);
}

/// expected (fp32 [num_slots, heads, head_dim]) = cache_before with x[t] written at slot_mapping[t].
template <class T>
void store_kvcache_ref(float* expected, const T* cache_before, int64_t num_slots, const T* x, int64_t x_stride,
                       int64_t x_head_stride, const int64_t* slot_mapping, int64_t num_tokens, int heads, int head_dim,
                       cudaStream_t stream) {
  const int64_t n = num_slots * heads * head_dim;
  if (n > 0) cache_to_f32_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(expected, cache_before, n);
  if (num_tokens > 0) {
    scatter_rows_ref_kernel<T><<<ceil_div(num_tokens * heads * head_dim, 256), 256, 0, stream>>>(
        expected, x, x_stride, x_head_stride, slot_mapping, num_tokens, heads, head_dim);
  }
}

}  // namespace fk::kernels::reference
