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
//
// Note [Antialiased resize]
// antialias=True (modes bilinear_aa, bicubic_aa; half-pixel centres) follows PyTorch's
// _upsample_bilinear2d_aa / _upsample_bicubic2d_aa (PIL's filters): per output coordinate o,
//   scale = in / out, support = (interp_size / 2) * max(scale, 1) (interp_size 2 bilinear, 4 bicubic),
//   center = scale * (o + 0.5), taps xmin = max(int(center - support + 0.5), 0) .. min(int(center +
//   support + 0.5), in) - 1, weight of tap j = filter((j - center + 0.5) / max(scale, 1)), the weights
//   divided by their sum (taps outside the image are dropped, not clamped); filter: the triangle
//   1 - |x| (bilinear) or Keys' cubic with a = -0.5 (bicubic). Upsampling keeps bilinear's weights in
//   the interior; downsampling widens the filter over every input sample it covers.
#pragma once

#include <cstdint>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

enum class InterpMode { kNearest, kBilinear, kBicubic, kBilinearAA, kBicubicAA };

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

/// The antialiased filter's taps along one axis for output coordinate o (Note [Antialiased resize]):
/// first tap, count, and the weights' sum (for the normalisation); weight(j) evaluates tap j.
template <bool kCubic, int kIn, int kOut> struct AaAxis {
  static constexpr float kScale = float(kIn) / float(kOut);
  static constexpr float kSupport = (kCubic ? 2.f : 1.f) * (kScale >= 1.f ? kScale : 1.f);
  static constexpr float kInvScale = kScale >= 1.f ? 1.f / kScale : 1.f;
  int first = 0, count = 0;
  float center = 0.f, inv_total = 0.f;
  __device__ __forceinline__ static float filter(float x) {
    x = fabsf(x);
    if constexpr (kCubic) {
      constexpr float A = -0.5f;
      if (x < 1.f) return ((A + 2.f) * x - (A + 3.f)) * x * x + 1.f;
      if (x < 2.f) return ((A * x - 5.f * A) * x + 8.f * A) * x - 4.f * A;
      return 0.f;
    } else {
      return x < 1.f ? 1.f - x : 0.f;
    }
  }
  __device__ __forceinline__ explicit AaAxis(int o) {
    center = kScale * (float(o) + 0.5f);
    first = max(int(center - kSupport + 0.5f), 0);
    count = min(int(center + kSupport + 0.5f), kIn) - first;
    float total = 0.f;
    for (int j = 0; j < count; ++j) total += filter((float(j + first) - center + 0.5f) * kInvScale);
    inv_total = total != 0.f ? 1.f / total : 0.f;
  }
  __device__ __forceinline__ float weight(int j) const { return filter((float(j + first) - center + 0.5f) * kInvScale) * inv_total; }
};

/// Calls at(y, x, weight) for every tap of output pixel (oy, ox) (Note [Interpolation source index]);
/// a bicubic tap's weight is wy * wx (PyTorch sums each row first; the difference is fp32 rounding).
template <InterpMode kMode, bool kAlignCorners, int kInH, int kInW, int kOutH, int kOutW, class At>
__device__ __forceinline__ void interp_taps(int oy, int ox, At&& at) {
  if constexpr (kMode == InterpMode::kBilinearAA || kMode == InterpMode::kBicubicAA) {
    constexpr bool kCubic = kMode == InterpMode::kBicubicAA;
    const AaAxis<kCubic, kInH, kOutH> ay(oy);
    const AaAxis<kCubic, kInW, kOutW> ax(ox);
    for (int j = 0; j < ay.count; ++j) {
      const float wy = ay.weight(j);
      for (int i = 0; i < ax.count; ++i) at(ay.first + j, ax.first + i, wy * ax.weight(i));
    }
  } else if constexpr (kMode == InterpMode::kNearest) {
    const float sy = float(kInH) / float(kOutH), sx = float(kInW) / float(kOutW);
    const int y = min(int(floorf(float(oy) * sy)), kInH - 1), x = min(int(floorf(float(ox) * sx)), kInW - 1);
    at(y, x, 1.f);
  } else if constexpr (kMode == InterpMode::kBilinear) {
    const float ry = interp_source(interp_scale(kInH, kOutH, kAlignCorners), oy, kAlignCorners, false);
    const float rx = interp_source(interp_scale(kInW, kOutW, kAlignCorners), ox, kAlignCorners, false);
    const int y0 = int(ry), x0 = int(rx);
    const int y1 = y0 + (y0 < kInH - 1 ? 1 : 0), x1 = x0 + (x0 < kInW - 1 ? 1 : 0);
    const float ty = ry - float(y0), tx = rx - float(x0);
    at(y0, x0, (1.f - ty) * (1.f - tx));
    at(y0, x1, (1.f - ty) * tx);
    at(y1, x0, ty * (1.f - tx));
    at(y1, x1, ty * tx);
  } else {
    const float ry = interp_source(interp_scale(kInH, kOutH, kAlignCorners), oy, kAlignCorners, true);
    const float rx = interp_source(interp_scale(kInW, kOutW, kAlignCorners), ox, kAlignCorners, true);
    const int y = int(floorf(ry)), x = int(floorf(rx));
    float wy[4], wx[4];
    cubic_weights(ry - float(y), wy);
    cubic_weights(rx - float(x), wx);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int yy = min(max(y - 1 + a, 0), kInH - 1);
#pragma unroll
      for (int k = 0; k < 4; ++k) at(yy, min(max(x - 1 + k, 0), kInW - 1), wy[a] * wx[k]);
    }
  }
}

/// One thread per output element (NCHW, or NHWC rows that are no multiple of 16 bytes).
template <class T, InterpMode kMode, bool kAlignCorners, bool kChannelsLast, int kC, int kInH, int kInW, int kOutH, int kOutW>
__global__ void __launch_bounds__(256) interpolate_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t n) {
  const int64_t total = n * kC * int64_t(kOutH) * kOutW;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  int ch, oy, ox;
  int64_t b;
  if constexpr (kChannelsLast) {  // [N, H, W, C]: consecutive threads, consecutive channels
    ch = int(i % kC);
    const int64_t pix = i / kC;
    ox = int(pix % kOutW);
    oy = int((pix / kOutW) % kOutH);
    b = pix / (int64_t(kOutW) * kOutH);
  } else {  // [N, C, H, W]
    ox = int(i % kOutW);
    oy = int((i / kOutW) % kOutH);
    const int64_t plane = i / (int64_t(kOutW) * kOutH);
    ch = int(plane % kC);
    b = plane / kC;
  }
  float v = 0.f;
  interp_taps<kMode, kAlignCorners, kInH, kInW, kOutH, kOutW>(oy, ox, [&](int y, int x, float w) {
    const int64_t idx = kChannelsLast ? ((b * kInH + y) * kInW + x) * kC + ch : ((b * kC + ch) * kInH + y) * int64_t(kInW) + x;
    v += w * to_float<T>(in[idx]);
  });
  out[i] = from_float<T>(v);
}

/// NHWC with rows of a multiple of 16 bytes: one thread per (pixel, 16-byte channel vector); every tap
/// one 16-byte load (a position-embedding grid: 768 channels = 96 vectors per pixel).
template <class T, InterpMode kMode, bool kAlignCorners, int kC, int kInH, int kInW, int kOutH, int kOutW>
__global__ void __launch_bounds__(256) interpolate_nhwc_vec_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t n) {
  constexpr int V = Vec16<T>::kN, kVecs = kC / V;
  const int64_t total = n * kVecs * int64_t(kOutH) * kOutW;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int cv = int(i % kVecs);
  const int64_t pix = i / kVecs;
  const int ox = int(pix % kOutW), oy = int((pix / kOutW) % kOutH);
  const int64_t b = pix / (int64_t(kOutW) * kOutH);
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.f;
  interp_taps<kMode, kAlignCorners, kInH, kInW, kOutH, kOutW>(oy, ox, [&](int y, int x, float w) {
    const Vec16<T> t = load16(in + ((b * kInH + y) * kInW + x) * kC + cv * V);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += w * to_float(t.v[j]);
  });
  Vec16<T> o;
#pragma unroll
  for (int j = 0; j < V; ++j) o.v[j] = from_float<T>(acc[j]);
  store16(out + pix * kC + cv * V, o);
}

}  // namespace detail

/// out = interpolate(in) for n images (Note [Interpolation source index]); the channel count and both
/// grids are the task's constants (fast index arithmetic). NHWC rows of a multiple of 16 bytes take
/// the vector kernel.
template <class T, InterpMode kMode, bool kAlignCorners, bool kChannelsLast, int kC, int kInH, int kInW, int kOutH, int kOutW>
void interpolate(T* out, const T* in, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  if constexpr (kChannelsLast && (kC * sizeof(T)) % 16 == 0) {
    const int64_t total = n * (kC / Vec16<T>::kN) * int64_t(kOutH) * kOutW;
    if (total == 0) return;
    detail::interpolate_nhwc_vec_kernel<T, kMode, kAlignCorners, kC, kInH, kInW, kOutH, kOutW>
        <<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(out, in, n);
  } else {
    const int64_t total = n * kC * int64_t(kOutH) * kOutW;
    if (total == 0) return;
    detail::interpolate_kernel<T, kMode, kAlignCorners, kChannelsLast, kC, kInH, kInW, kOutH, kOutW>
        <<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(out, in, n);
  }
}

}  // namespace fk::kernels
