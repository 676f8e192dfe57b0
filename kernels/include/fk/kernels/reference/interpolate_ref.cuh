// Reference of the interpolate kind: the separable interpolation matrices of
// interpolate_weights.h applied in double, one thread per output element, fp32 out.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

namespace detail {
template <class T, bool kChannelsLast>
__global__ void interpolate_ref_kernel(float* out, const T* in, const double* wy, const double* wx, int64_t n, int c,
                                       int in_h, int in_w, int out_h, int out_w) {
  const int64_t total = n * c * int64_t(out_h) * out_w;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  int64_t b;
  int ch, oy, ox;
  if (kChannelsLast) {
    ch = int(i % c);
    ox = int((i / c) % out_w);
    oy = int((i / (int64_t(c) * out_w)) % out_h);
    b = i / (int64_t(c) * out_w * out_h);
  } else {
    ox = int(i % out_w);
    oy = int((i / out_w) % out_h);
    ch = int((i / (int64_t(out_w) * out_h)) % c);
    b = i / (int64_t(out_w) * out_h * c);
  }
  double acc = 0;
  for (int y = 0; y < in_h; ++y) {
    const double a = wy[int64_t(oy) * in_h + y];
    if (a == 0) continue;
    for (int x = 0; x < in_w; ++x) {
      const double bw = wx[int64_t(ox) * in_w + x];
      if (bw == 0) continue;
      const int64_t idx = kChannelsLast ? ((b * in_h + y) * in_w + x) * c + ch : ((b * c + ch) * in_h + y) * int64_t(in_w) + x;
      acc += a * bw * double(to_float<T>(in[idx]));
    }
  }
  out[i] = float(acc);
}
}  // namespace detail

/// out (fp32, the output's layout) = Wy . in . Wx^T per image and channel; wy [out_h, in_h] and
/// wx [out_w, in_w] are device copies of interp_matrix's.
template <class T>
void interpolate_ref(float* out, const T* in, const double* wy, const double* wx, int64_t n, int c, int in_h, int in_w, int out_h,
                     int out_w, bool channels_last, cudaStream_t stream) {
  const int64_t total = n * c * int64_t(out_h) * out_w;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>((total + 255) / 256);
  if (channels_last)
    detail::interpolate_ref_kernel<T, true><<<blocks, 256, 0, stream>>>(out, in, wy, wx, n, c, in_h, in_w, out_h, out_w);
  else
    detail::interpolate_ref_kernel<T, false><<<blocks, 256, 0, stream>>>(out, in, wy, wx, n, c, in_h, in_w, out_h, out_w);
}

}  // namespace fk::kernels::reference
