// Reference RMSNorm for checking only: one thread per row, fp64 accumulation, fp32 output,
// no rounding to the model dtype. Deliberately simple and independent of the baseline.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void rms_norm_ref_kernel(float* out, float* residual_out, const T* x, int64_t x_stride, const T* residual,
                                    int64_t res_stride, const T* weight, int64_t rows, int hidden, float eps,
                                    float weight_offset) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  double ss = 0;
  for (int i = 0; i < hidden; ++i) {
    double z = to_float(x[row * x_stride + i]);
    if (residual) z += to_float(residual[row * res_stride + i]);
    ss += z * z;
  }
  const double inv = 1.0 / sqrt(ss / hidden + static_cast<double>(eps));
  for (int i = 0; i < hidden; ++i) {
    double z = to_float(x[row * x_stride + i]);
    if (residual) z += to_float(residual[row * res_stride + i]);
    out[row * hidden + i] = static_cast<float>(z * inv * (weight_offset + to_float(weight[i])));
    if (residual_out) residual_out[row * hidden + i] = static_cast<float>(z);
  }
}

/// out (fp32, [rows, hidden]) = rmsnorm(x + residual?) * (weight_offset + weight) (offset 1:
/// GemmaRMSNorm); residual_out gets x + residual.
template <class T>
void rms_norm_ref(float* out, float* residual_out, const T* x, int64_t x_stride, const T* residual, int64_t res_stride,
                  const T* weight, int64_t rows, int hidden, float eps, cudaStream_t stream, float weight_offset = 0.f) {
  if (rows == 0) return;
  rms_norm_ref_kernel<T><<<ceil_div(rows, 128), 128, 0, stream>>>(out, residual_out, x, x_stride, residual, res_stride,
                                                                  weight, rows, hidden, eps, weight_offset);
}

}  // namespace fk::kernels::reference
