// Reference single-tensor activations (checking only): one thread per element, fp64 math, fp32
// output, no intermediate rounding. The enums are the kernels' (fk/kernels/activation.cuh); the
// math is written out again here, in double.
#pragma once

#include "fk/kernels/activation.cuh"
#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

__device__ inline double act_ref(double x, Act act) {
  switch (act) {
    case Act::kGelu: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case Act::kGeluTanh: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.141592653589793) * (x + 0.044715 * x * x * x)));
    case Act::kQuickGelu: return x / (1.0 + exp(-1.702 * x));
    case Act::kRelu: return x > 0 ? x : 0.0;
    case Act::kSilu: return x / (1.0 + exp(-x));
    case Act::kSigmoid: return 1.0 / (1.0 + exp(-x));
    case Act::kTanh: return tanh(x);
    case Act::kRelu2: return x > 0 ? x * x : 0.0;
  }
  return 0.0;
}

template <class T>
__global__ void activation_ref_kernel(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int h, Act act) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * h) return;
  const int64_t t = i / h;
  const int c = static_cast<int>(i % h);
  out[i] = static_cast<float>(act_ref(to_float(x[t * x_stride + c]), act));
}

/// out (fp32, contiguous [T, h]) = act(x), x [T, h] with row stride x_stride.
template <class T>
void activation_ref(float* out, const T* x, int64_t x_stride, int64_t num_tokens, int h, Act act, cudaStream_t stream) {
  if (num_tokens == 0) return;
  activation_ref_kernel<T><<<ceil_div(num_tokens * h, 256), 256, 0, stream>>>(out, x, x_stride, num_tokens, h, act);
}

}  // namespace fk::kernels::reference
