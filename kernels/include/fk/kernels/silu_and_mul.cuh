// SiluAndMul (vLLM `silu_and_mul`): out[t, i] = silu(x[t, i]) * x[t, I + i], specialised on the
// intermediate size I. As in vLLM, silu is computed in fp32 and rounded to the model dtype
// before the multiply (fast exp and divide: the result is rounded to bf16/f16 anyway).
//
// Layout: the output is a flat list of T * I / (16 / sizeof(T)) 16-byte vectors (32-bit
// indices); a thread owns kVecPerThread of them per step, kThreads apart (coalesced), and issues
// all 2 * kVecPerThread loads (gate and up halves) before computing.
// Launch: large (>= 2 blocks of 256 x 4 per SM on 132 SMs): 256 threads x 4 vectors (8 loads,
// 128 B in flight per thread), grid = the blocks resident on the GPU at once, striding over the
// rest (no partial last wave); small (decode): 128 threads x 1 vector, one step, so that 1 token
// of I = 14336 spreads over 14 SMs and 32 tokens over 448 blocks.
#pragma once

#include <algorithm>

#include "fk/kernels/common.cuh"
#include "fk/kernels/launch_util.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kI, int kVecPerThread, int kThreads>
__global__ void __launch_bounds__(kThreads)
silu_and_mul_kernel(T* __restrict__ out, int64_t out_stride, const T* __restrict__ x, int64_t x_stride,
                    uint32_t total) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kI % kN == 0, "intermediate size must be a multiple of 16 bytes");
  constexpr uint32_t kRowVecs = kI / kN;
  constexpr uint32_t kStep = kThreads * kVecPerThread;
  for (uint32_t base = blockIdx.x * kStep + threadIdx.x; base < total; base += gridDim.x * kStep) {
    Vec16<T> g[kVecPerThread], u[kVecPerThread];
#pragma unroll
    for (int i = 0; i < kVecPerThread; ++i) {
      const uint32_t idx = base + i * kThreads;
      if (idx < total) {
        const uint32_t row = idx / kRowVecs, c = idx - row * kRowVecs;
        const T* p = x + row * x_stride + c * kN;
        g[i] = load16_stream(p);
        u[i] = load16_stream(p + kI);
      }
    }
#pragma unroll
    for (int i = 0; i < kVecPerThread; ++i) {
      const uint32_t idx = base + i * kThreads;
      if (idx < total) {
        const uint32_t row = idx / kRowVecs, c = idx - row * kRowVecs;
        Vec16<T> o;
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          const float a = to_float(g[i].v[j]);
          const float act = to_float(from_float<T>(__fdividef(a, 1.f + __expf(-a))));
          o.v[j] = from_float<T>(act * to_float(u[i].v[j]));
        }
        store16(out + row * out_stride + c * kN, o);
      }
    }
  }
}

}  // namespace detail

/// out [T, I] (row stride out_stride) = silu(x[:, :I]) * x[:, I:] for x [T, 2I] (row stride
/// x_stride). Strides in elements, 16-byte aligned. T * I / 8 must be < 2^32.
template <class T, int kI>
void silu_and_mul(T* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kN = Vec16<T>::kN;
  const int64_t total = num_tokens * (kI / kN);
  constexpr int64_t kLargeBlockVecs = 256 * 4;
  if (total >= kLargeBlockVecs * 132 * 2) {
    constexpr auto kernel = detail::silu_and_mul_kernel<T, kI, 4, 256>;
    const int grid = static_cast<int>(std::min<int64_t>(ceil_div(total, kLargeBlockVecs), resident_blocks<kernel>(256)));
    kernel<<<grid, 256, 0, stream>>>(out, out_stride, x, x_stride, static_cast<uint32_t>(total));
  } else {
    detail::silu_and_mul_kernel<T, kI, 1, 128>
        <<<ceil_div(total, 128), 128, 0, stream>>>(out, out_stride, x, x_stride, static_cast<uint32_t>(total));
  }
}

}  // namespace fk::kernels
