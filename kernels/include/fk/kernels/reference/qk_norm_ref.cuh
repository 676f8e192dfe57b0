// Reference per-head RMSNorm of q and k (checking only): one thread per (token, head), fp64
// accumulation, fp32 output, no rounding to the model dtype.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void qk_norm_ref_kernel(float* out, const T* x, int64_t x_stride, const T* weight, int64_t num_tokens,
                                   int heads, int head_dim, float eps, float weight_offset) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * heads) return;
  const int64_t t = i / heads;
  const int h = static_cast<int>(i % heads);
  const T* src = x + t * x_stride + static_cast<int64_t>(h) * head_dim;
  double ss = 0;
  for (int e = 0; e < head_dim; ++e) {
    const double f = to_float(src[e]);
    ss += f * f;
  }
  const double inv = 1.0 / sqrt(ss / head_dim + static_cast<double>(eps));
  float* dst = out + (t * heads + h) * head_dim;
  for (int e = 0; e < head_dim; ++e) dst[e] = static_cast<float>(to_float(src[e]) * inv * (weight_offset + to_float(weight[e])));
}

/// out (fp32, contiguous [T, heads * head_dim]) = per-head rmsnorm(x) * (weight_offset + weight);
/// x row stride in elements. weight_offset 1: GemmaRMSNorm.
template <class T>
void qk_norm_ref(float* out, const T* x, int64_t x_stride, const T* weight, int64_t num_tokens, int heads, int head_dim,
                 float eps, cudaStream_t stream, float weight_offset = 0.f) {
  if (num_tokens == 0) return;
  qk_norm_ref_kernel<T><<<ceil_div(num_tokens * heads, 128), 128, 0, stream>>>(out, x, x_stride, weight, num_tokens,
                                                                               heads, head_dim, eps, weight_offset);
}

}  // namespace fk::kernels::reference
