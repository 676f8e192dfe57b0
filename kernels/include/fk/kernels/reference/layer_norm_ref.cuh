// Reference LayerNorm for checking only: one thread per row, fp64 mean and variance, fp32
// output, no rounding except of x + residual to the model dtype where the task's contract
// rounds it (the sum the model carries on). Simple and independent of the baseline kernel.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void layer_norm_ref_kernel(float* out, float* residual_out, const T* x, int64_t x_stride, const T* residual,
                                      int64_t res_stride, const T* weight, const T* bias, int64_t rows, int hidden,
                                      double eps) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  auto value = [&](int i) -> double {
    if (!residual) return to_float(x[row * x_stride + i]);
    // The sum is what the model keeps (in its dtype), so the norm is of the rounded value.
    return to_float(from_float<T>(to_float(x[row * x_stride + i]) + to_float(residual[row * res_stride + i])));
  };
  double mean = 0;
  for (int i = 0; i < hidden; ++i) mean += value(i);
  mean /= hidden;
  double var = 0;
  for (int i = 0; i < hidden; ++i) var += (value(i) - mean) * (value(i) - mean);
  var /= hidden;
  const double rstd = 1.0 / sqrt(var + eps);
  for (int i = 0; i < hidden; ++i) {
    double y = (value(i) - mean) * rstd * static_cast<double>(to_float(weight[i]));
    if (bias) y += to_float(bias[i]);
    out[row * hidden + i] = static_cast<float>(y);
    if (residual_out) residual_out[row * hidden + i] = static_cast<float>(value(i));
  }
}

/// out (fp32, [rows, hidden]) = layer_norm(x (+ residual)) * weight (+ bias); residual_out
/// (optional) gets x + residual as the model dtype holds it.
template <class T>
void layer_norm_ref(float* out, float* residual_out, const T* x, int64_t x_stride, const T* residual, int64_t res_stride,
                    const T* weight, const T* bias, int64_t rows, int hidden, double eps, cudaStream_t stream) {
  if (rows == 0) return;
  layer_norm_ref_kernel<T><<<ceil_div(rows, 128), 128, 0, stream>>>(out, residual_out, x, x_stride, residual, res_stride,
                                                                    weight, bias, rows, hidden, eps);
}

}  // namespace fk::kernels::reference
