// Reference layer scale + residual add for checking only: one thread per element, the eager
// module's rounding of x * gamma kept (Note [Layer scale rounding]), the add in double, fp32 out.
// Independent of the baseline kernel (fk/kernels/layer_scale.cuh).
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void layer_scale_ref_kernel(float* out, const T* x, int64_t x_stride, const T* residual, int64_t r_stride, const T* gamma,
                                       int64_t rows, int hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * hidden) return;
  const int64_t r = i / hidden, c = i % hidden;
  // The eager module's rounding of x * gamma, then the add in double (checked against the kernel's one rounding).
  const double scaled = to_float(from_float<T>(static_cast<float>(static_cast<double>(to_float(x[r * x_stride + c])) * to_float(gamma[c]))));
  out[i] = static_cast<float>(static_cast<double>(to_float(residual[r * r_stride + c])) + scaled);
}

/// out (fp32 [rows, hidden]) = residual + round_T(x * gamma), the add in double.
template <class T>
void layer_scale_ref(float* out, const T* x, int64_t x_stride, const T* residual, int64_t r_stride, const T* gamma, int64_t rows, int hidden,
                     cudaStream_t stream) {
  if (rows == 0) return;
  layer_scale_ref_kernel<T><<<ceil_div(rows * hidden, 256), 256, 0, stream>>>(out, x, x_stride, residual, r_stride, gamma, rows, hidden);
}

}  // namespace fk::kernels::reference
