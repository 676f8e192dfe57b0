// Layer scale with its residual add, specialised on the hidden size: the LayerScale of DINOv3 and
// CaiT-style vision transformers (HF DINOv3ViTLayerScale: x * lambda1, one learned scale per
// channel), then the block's residual add, out = residual + x * gamma.
//
// Note [Layer scale rounding]
// The eager module rounds x * gamma to the model dtype, and the residual add rounds again; the
// kernel keeps both rounding points (fp32 products, rounded, then an fp32 add of the rounded
// product and the residual, rounded), so a bf16 network's values come out, only without the
// intermediate tensor. One 16-byte vector per thread, the row's gamma vector read once per thread.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kH>
__global__ void __launch_bounds__(256)
layer_scale_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t x_stride, const T* __restrict__ residual, int64_t r_stride,
                   const T* __restrict__ gamma, int64_t rows) {
  constexpr int kN = Vec16<T>::kN, kVecs = kH / kN;
  static_assert(kH % kN == 0, "hidden size must be a multiple of 16 bytes");
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * kVecs) return;
  const int64_t row = i / kVecs, c = (i % kVecs) * kN;
  const Vec16<T> xv = load16_stream(x + row * x_stride + c), rv = load16_stream(residual + row * r_stride + c), g = load16(gamma + c);
  Vec16<T> o;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const float scaled = to_float(from_float<T>(to_float(xv.v[j]) * to_float(g.v[j])));  // x * gamma, rounded
    o.v[j] = from_float<T>(to_float(rv.v[j]) + scaled);
  }
  store16(out + row * kH + c, o);
}

}  // namespace detail

/// out [rows, kH] (contiguous) = residual + round(x * gamma) (Note [Layer scale rounding]); x and
/// residual rows x_stride / r_stride apart (16-byte aligned), gamma [kH].
template <class T, int kH>
void layer_scale(T* out, const T* x, int64_t x_stride, const T* residual, int64_t r_stride, const T* gamma, int64_t rows,
                 cudaStream_t stream) {
  const int64_t n = rows * (kH / Vec16<T>::kN);
  if (n == 0) return;
  detail::layer_scale_kernel<T, kH><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, x, x_stride, residual, r_stride,
                                                                                                 gamma, rows);
}

}  // namespace fk::kernels
