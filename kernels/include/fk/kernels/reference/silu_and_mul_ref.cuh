// Reference SiluAndMul (checking only): one thread per output element, fp64 math, fp32 output,
// no intermediate rounding.
#pragma once

#include "fk/kernels/common.cuh"
#include "fk/kernels/reference/activation_ref.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void silu_and_mul_ref_kernel(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int d, Act act) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * d) return;
  const int64_t t = i / d;
  const int c = static_cast<int>(i % d);
  const double a = to_float(x[t * x_stride + c]);
  const double b = to_float(x[t * x_stride + d + c]);
  out[i] = static_cast<float>(act_ref(a, act) * b);
}

/// out (fp32, contiguous [T, d]) = act(x[:, :d]) * x[:, d:2d], act = silu (default), the tanh
/// approximation of GELU or exact GELU (kSwigluOai: swigluoai_and_mul_ref).
template <class T>
void silu_and_mul_ref(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int d, cudaStream_t stream,
                      GatedAct gated = GatedAct::kSilu) {
  if (num_tokens == 0) return;
  const Act act = gated == GatedAct::kGelu ? Act::kGelu : gated == GatedAct::kGeluTanh ? Act::kGeluTanh : Act::kSilu;
  silu_and_mul_ref_kernel<T><<<ceil_div(num_tokens * d, 256), 256, 0, stream>>>(out, x, x_stride, num_tokens, d, act);
}

template <class T>
__global__ void swigluoai_and_mul_ref_kernel(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int d,
                                             float alpha, float limit) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * d) return;
  const int64_t t = i / d;
  const int c = static_cast<int>(i % d);
  double gate = to_float(x[t * x_stride + 2 * c]);
  double up = to_float(x[t * x_stride + 2 * c + 1]);
  gate = gate > limit ? static_cast<double>(limit) : gate;
  up = up > limit ? static_cast<double>(limit) : (up < -limit ? -static_cast<double>(limit) : up);
  const double glu = gate / (1.0 + exp(-static_cast<double>(alpha) * gate));
  out[i] = static_cast<float>((up + 1.0) * glu);
}

/// SwiGLU-OAI (vLLM swigluoai_and_mul, HF GptOssExperts): out (fp32, contiguous [T, I]) =
/// (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit), with gate and up
/// interleaved in x [T, 2I] (gate = x[:, 2i], up = x[:, 2i + 1]). fp64 math.
template <class T>
void swigluoai_and_mul_ref(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int I, float alpha, float limit,
                           cudaStream_t stream) {
  if (num_tokens == 0) return;
  swigluoai_and_mul_ref_kernel<T><<<ceil_div(num_tokens * I, 256), 256, 0, stream>>>(out, x, x_stride, num_tokens, I, alpha,
                                                                                    limit);
}

}  // namespace fk::kernels::reference
