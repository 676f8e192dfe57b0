// Reference SiluAndMul (checking only): one thread per output element, fp64 math, fp32 output,
// no intermediate rounding.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void silu_and_mul_ref_kernel(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int d) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * d) return;
  const int64_t t = i / d;
  const int c = static_cast<int>(i % d);
  const double a = to_float(x[t * x_stride + c]);
  const double b = to_float(x[t * x_stride + d + c]);
  out[i] = static_cast<float>(a / (1.0 + exp(-a)) * b);
}

/// out (fp32, contiguous [T, d]) = silu(x[:, :d]) * x[:, d:2d].
template <class T>
void silu_and_mul_ref(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int d, cudaStream_t stream) {
  if (num_tokens == 0) return;
  silu_and_mul_ref_kernel<T><<<ceil_div(num_tokens * d, 256), 256, 0, stream>>>(out, x, x_stride, num_tokens, d);
}

}  // namespace fk::kernels::reference
