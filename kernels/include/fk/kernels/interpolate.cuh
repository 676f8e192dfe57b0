// Resizing of images and feature maps: torch.nn.functional.interpolate(x, size=(out_h, out_w),
// mode=nearest|bilinear|bicubic, align_corners) without antialiasing, on NCHW or NHWC (channels
// last) tensors, specialised on the mode and corner convention. Vision transformers resize their
// learned position-embedding grid with it (HF ViT/DINOv2 interpolate_pos_encoding: bicubic,
// align_corners False, the grid as NHWC with C = hidden size); FPNs and decoders upsample maps.
//
// Note [Interpolation source index]
// As PyTorch computes it (aten/src/ATen/native/UpSample.h), in fp32:
//   scale = align_corners ? (in - 1) / (out - 1) (0 when out == 1) : in / out
//   src   = align_corners ? scale * dst : scale * (dst + 0.5) - 0.5, clamped at 0 for bilinear (not bicubic)
//   nearest: src = min(floor(dst * (in / out)), in - 1) (legacy "nearest": align_corners does not apply)
//   bilinear: taps floor(src) and floor(src) + 1 (the last row/column repeats), weights 1 - t, t
//   bicubic: taps floor(src) - 1 .. floor(src) + 2 clamped to [0, in - 1], Keys' cubic convolution
//            with A = -0.75 on t = src - floor(src)
// Values are accumulated in fp32 and rounded to the model dtype once.
#pragma once

#include <cstdint>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

enum class InterpMode { kNearest, kBilinear, kBicubic };

namespace detail {

__device__ __forceinline__ float interp_scale(int in, int out, bool align_corners) {
  if (align_corners) return out > 1 ? float(in - 1) / float(out - 1) : 0.f;
  return float(in) / float(out);
}
__device__ __forceinline__ float interp_source(float scale, int dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * float(dst);
  const float src = scale * (float(dst) + 0.5f) - 0.5f;
  return (!cubic && src < 0.f) ? 0.f : src;
}
/// Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for a fraction t (A = -0.75).
__device__ __forceinline__ void cubic_weights(float t, float w[4]) {
  constexpr float A = -0.75f;
  auto near = [](float x) { return ((A + 2.f) * x - (A + 3.f)) * x * x + 1.f; };        // |x| <= 1
  auto far = [](float x) { return ((A * x - 5.f * A) * x + 8.f * A) * x - 4.f * A; };  // 1 < |x| < 2
  w[0] = far(t + 1.f);
  w[1] = near(t);
  w[2] = near(1.f - t);
  w[3] = far(2.f - t);
}

template <class T, InterpMode kMode, bool kAlignCorners, bool kChannelsLast>
__global__ void interpolate_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t n, int c, int in_h, int in_w,
                                   int out_h, int out_w) {
  const int64_t total = n * c * int64_t(out_h) * out_w;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  int ch, oy, ox;
  int64_t b;
  if constexpr (kChannelsLast) {  // [N, H, W, C]: consecutive threads, consecutive channels
    ch = int(i % c);
    ox = int((i / c) % out_w);
    oy = int((i / (int64_t(c) * out_w)) % out_h);
    b = i / (int64_t(c) * out_w * out_h);
  } else {  // [N, C, H, W]
    ox = int(i % out_w);
    oy = int((i / out_w) % out_h);
    ch = int((i / (int64_t(out_w) * out_h)) % c);
    b = i / (int64_t(out_w) * out_h * c);
  }
  auto at = [&](int y, int x) -> float {
    const int64_t idx = kChannelsLast ? ((b * in_h + y) * in_w + x) * c + ch : ((b * c + ch) * in_h + y) * int64_t(in_w) + x;
    return to_float<T>(in[idx]);
  };
  float v = 0.f;
  if constexpr (kMode == InterpMode::kNearest) {
    const float sy = float(in_h) / float(out_h), sx = float(in_w) / float(out_w);
    const int y = min(int(floorf(float(oy) * sy)), in_h - 1), x = min(int(floorf(float(ox) * sx)), in_w - 1);
    v = at(y, x);
  } else if constexpr (kMode == InterpMode::kBilinear) {
    const float ry = interp_source(interp_scale(in_h, out_h, kAlignCorners), oy, kAlignCorners, false);
    const float rx = interp_source(interp_scale(in_w, out_w, kAlignCorners), ox, kAlignCorners, false);
    const int y0 = int(ry), x0 = int(rx);
    const int y1 = y0 + (y0 < in_h - 1 ? 1 : 0), x1 = x0 + (x0 < in_w - 1 ? 1 : 0);
    const float ty = ry - float(y0), tx = rx - float(x0);
    v = (1.f - ty) * ((1.f - tx) * at(y0, x0) + tx * at(y0, x1)) + ty * ((1.f - tx) * at(y1, x0) + tx * at(y1, x1));
  } else {
    const float ry = interp_source(interp_scale(in_h, out_h, kAlignCorners), oy, kAlignCorners, true);
    const float rx = interp_source(interp_scale(in_w, out_w, kAlignCorners), ox, kAlignCorners, true);
    const int y = int(floorf(ry)), x = int(floorf(rx));
    float wy[4], wx[4];
    cubic_weights(ry - float(y), wy);
    cubic_weights(rx - float(x), wx);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int yy = min(max(y - 1 + a, 0), in_h - 1);
      float row = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) row += wx[k] * at(yy, min(max(x - 1 + k, 0), in_w - 1));
      v += wy[a] * row;
    }
  }
  out[i] = from_float<T>(v);
}

}  // namespace detail

/// out = interpolate(in, size=(out_h, out_w), mode, align_corners) for n images of c channels
/// (Note [Interpolation source index]); NHWC when kChannelsLast, else NCHW; both contiguous.
template <class T, InterpMode kMode, bool kAlignCorners, bool kChannelsLast>
void interpolate(T* out, const T* in, int64_t n, int c, int in_h, int in_w, int out_h, int out_w, cudaStream_t stream) {
  const int64_t total = n * c * int64_t(out_h) * out_w;
  if (total == 0) return;
  constexpr int kThreads = 256;
  detail::interpolate_kernel<T, kMode, kAlignCorners, kChannelsLast>
      <<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(out, in, n, c, in_h, in_w, out_h, out_w);
}

}  // namespace fk::kernels
