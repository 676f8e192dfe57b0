// Reference embedding lookup (checking only): one thread per output element, fp32 output.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void embedding_ref_kernel(float* out, const int64_t* ids, const T* weight, int64_t num_embeddings,
                                     int64_t num_tokens, int hidden, float scale) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * hidden) return;
  const int64_t t = i / hidden;
  const int c = static_cast<int>(i % hidden);
  const int64_t id = ids[t];
  const float x = (id >= 0 && id < num_embeddings) ? to_float(weight[id * hidden + c]) : 0.f;
  out[i] = scale != 0.f ? x * scale : x;
}

/// out (fp32, contiguous [T, hidden]) = weight[ids[t]] (times scale when it is not 0);
/// out-of-range ids give zero rows.
template <class T>
void vocab_parallel_embedding_ref(float* out, const int64_t* ids, const T* weight, int64_t num_embeddings,
                                  int64_t num_tokens, int hidden, cudaStream_t stream, float scale = 0.f) {
  if (num_tokens == 0) return;
  embedding_ref_kernel<T><<<ceil_div(num_tokens * hidden, 256), 256, 0, stream>>>(out, ids, weight, num_embeddings,
                                                                                 num_tokens, hidden, scale);
}

}  // namespace fk::kernels::reference
