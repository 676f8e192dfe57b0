// SiluAndMul (vLLM `silu_and_mul`): out[t, i] = silu(x[t, i]) * x[t, I + i], specialised on the
// intermediate size I. As in vLLM, silu is computed in fp32 and rounded to the model dtype
// before the multiply.
//
// Layout: the output is a flat list of T * I / (16 / sizeof(T)) 16-byte vectors; a thread owns
// kVecPerThread of them, kThreads apart (coalesced), and issues all 2 * kVecPerThread loads
// (gate and up halves) before computing.
// Launch: large (>= 2 blocks of 256 x 4 per SM on 132 SMs): 256 threads x 4 vectors (8 loads,
// 128 B in flight per thread); small (decode): 128 threads x 1 vector, so that 1 token of
// I = 14336 spreads over 14 SMs and 32 tokens over 448 blocks.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kI, int kVecPerThread, int kThreads>
__global__ void __launch_bounds__(kThreads)
silu_and_mul_kernel(T* __restrict__ out, int64_t out_stride, const T* __restrict__ x, int64_t x_stride,
                    int64_t num_tokens) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kI % kN == 0, "intermediate size must be a multiple of 16 bytes");
  constexpr int kRowVecs = kI / kN;
  const int64_t total = num_tokens * kRowVecs;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kVecPerThread + threadIdx.x;

  Vec16<T> g[kVecPerThread], u[kVecPerThread];
#pragma unroll
  for (int i = 0; i < kVecPerThread; ++i) {
    const int64_t idx = base + static_cast<int64_t>(i) * kThreads;
    if (idx < total) {
      const int64_t row = idx / kRowVecs;
      const int c = static_cast<int>(idx - row * kRowVecs);
      const T* p = x + row * x_stride + c * kN;
      g[i] = load16_stream(p);
      u[i] = load16_stream(p + kI);
    }
  }
#pragma unroll
  for (int i = 0; i < kVecPerThread; ++i) {
    const int64_t idx = base + static_cast<int64_t>(i) * kThreads;
    if (idx < total) {
      const int64_t row = idx / kRowVecs;
      const int c = static_cast<int>(idx - row * kRowVecs);
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float a = to_float(g[i].v[j]);
        const float act = to_float(from_float<T>(a / (1.f + expf(-a))));
        o.v[j] = from_float<T>(act * to_float(u[i].v[j]));
      }
      store16(out + row * out_stride + c * kN, o);
    }
  }
}

}  // namespace detail

/// out [T, I] (row stride out_stride) = silu(x[:, :I]) * x[:, I:] for x [T, 2I] (row stride
/// x_stride). Strides in elements, 16-byte aligned.
template <class T, int kI>
void silu_and_mul(T* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kN = Vec16<T>::kN;
  const int64_t total = num_tokens * (kI / kN);
  constexpr int64_t kLargeBlockVecs = 256 * 4;
  if (total >= kLargeBlockVecs * 132 * 2) {
    detail::silu_and_mul_kernel<T, kI, 4, 256>
        <<<ceil_div(total, kLargeBlockVecs), 256, 0, stream>>>(out, out_stride, x, x_stride, num_tokens);
  } else {
    detail::silu_and_mul_kernel<T, kI, 1, 128>
        <<<ceil_div(total, 128), 128, 0, stream>>>(out, out_stride, x, x_stride, num_tokens);
  }
}

}  // namespace fk::kernels
