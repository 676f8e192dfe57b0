// Single-tensor activations (vLLM's get_act_fn modules and torch.nn's: GELU, GELU-tanh,
// QuickGELU, ReLU, SiLU, Sigmoid, Tanh), specialised on the width and the activation, and the
// device functions the gated kernels share (fk/kernels/silu_and_mul.cuh).
//
// Precision: each element is computed in fp32 from the model-dtype input and rounded once, as
// torch's elementwise kernels do (opmath fp32) and vLLM's activation kernels do. QuickGELU is
// x * sigmoid(1.702 x) in one fp32 expression (vLLM's gelu_quick kernel; eager torch would round
// 1.702 x and the sigmoid to the model dtype first).
//
// Layout and launch (as silu_and_mul, Note there): the output is a flat list of T * H / (16 /
// sizeof(T)) 16-byte vectors (32-bit indices), one per thread, 128 threads per block, exact grid;
// the input rows may be strided (a column slice of a wider tensor), the output is contiguous.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

/// A single-tensor activation (the `activation` kind's constant).
enum class Act { kGelu, kGeluTanh, kQuickGelu, kRelu, kSilu, kSigmoid, kTanh, kRelu2 };

/// The gate activation of a gated MLP: silu (vLLM SiluAndMul), the tanh approximation of GELU
/// (GeluAndMul(approximate="tanh"), Gemma's gelu_pytorch_tanh) or exact GELU (GeluAndMul(), BERT-
/// style gated MLPs). Computed in fp32 and rounded to the model dtype before the multiply, as
/// vLLM's act_and_mul kernel does. kSwigluOai: swigluoai_and_mul (silu_and_mul.cuh), not gate_act.
enum class GatedAct { kSilu, kGeluTanh, kSwigluOai, kGelu };

template <Act kAct> __device__ __forceinline__ float act_fn(float x) {
  if constexpr (kAct == Act::kGelu) {
    return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
  } else if constexpr (kAct == Act::kGeluTanh) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.f + tanhf(kBeta * (x + 0.044715f * x * x * x)));
  } else if constexpr (kAct == Act::kQuickGelu) {
    return __fdividef(x, 1.f + __expf(-1.702f * x));
  } else if constexpr (kAct == Act::kRelu) {
    return fmaxf(x, 0.f);
  } else if constexpr (kAct == Act::kSilu) {
    return __fdividef(x, 1.f + __expf(-x));
  } else if constexpr (kAct == Act::kSigmoid) {
    return __fdividef(1.f, 1.f + __expf(-x));
  } else if constexpr (kAct == Act::kRelu2) {  // squared ReLU (Primer; HF ReLUSquaredActivation, "relu2")
    const float r = fmaxf(x, 0.f);
    return r * r;
  } else {
    static_assert(kAct == Act::kTanh);
    return tanhf(x);
  }
}

template <GatedAct kAct> __device__ __forceinline__ float gate_act(float a) {
  static_assert(kAct != GatedAct::kSwigluOai, "swigluoai_and_mul has its own kernel");
  if constexpr (kAct == GatedAct::kSilu) return act_fn<Act::kSilu>(a);
  else if constexpr (kAct == GatedAct::kGeluTanh) return act_fn<Act::kGeluTanh>(a);
  else return act_fn<Act::kGelu>(a);
}

namespace detail {

template <class T, int kH, Act kAct, int kThreads>
__global__ void __launch_bounds__(kThreads)
activation_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t x_stride, uint32_t total) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kH % kN == 0, "the width must be a multiple of 16 bytes");
  constexpr uint32_t kRowVecs = kH / kN;
  const uint32_t idx = blockIdx.x * kThreads + threadIdx.x;
  if (idx >= total) return;
  const uint32_t row = idx / kRowVecs, c = idx - row * kRowVecs;
  const Vec16<T> v = load16_stream(x + row * x_stride + c * kN);
  Vec16<T> o;
#pragma unroll
  for (int j = 0; j < kN; ++j) o.v[j] = from_float<T>(act_fn<kAct>(to_float(v.v[j])));
  store16(out + static_cast<int64_t>(idx) * kN, o);
}

}  // namespace detail

/// out [T, H] (contiguous) = act(x) for x [T, H] with row stride x_stride (elements, 16-byte
/// aligned). T * H / 8 must be < 2^32.
template <class T, int kH, Act kAct>
void activation(T* out, const T* x, int64_t x_stride, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kN = Vec16<T>::kN;
  const int64_t total = num_tokens * (kH / kN);
  detail::activation_kernel<T, kH, kAct, 128><<<ceil_div(total, 128), 128, 0, stream>>>(out, x, x_stride,
                                                                                       static_cast<uint32_t>(total));
}

}  // namespace fk::kernels
