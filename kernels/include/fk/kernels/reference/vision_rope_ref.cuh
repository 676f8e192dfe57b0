// Reference 2-D vision rope for checking only: one thread per (token, head, pair), fp64 angles
// and rotation from the model-dtype input, fp32 output. The patch order is walked the long way
// (window, then row and column inside it) rather than sharing the baseline's index arithmetic.
#pragma once

#include "fk/kernels/common.cuh"
#include "fk/kernels/vision_rope.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void vision_rope_2d_ref_kernel(float* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t tokens, int heads,
                                          int d, VisionRopeGeometry g) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int half = d / 2;
  if (idx >= tokens * heads * half) return;
  const int64_t t = idx / (heads * half);
  const int h = static_cast<int>((idx / half) % heads), i = static_cast<int>(idx % half);
  const T* row = x + t * x_stride + static_cast<int64_t>(h) * d;
  float* o = out + t * out_stride + static_cast<int64_t>(h) * d;
  int py, px;
  const int p = g.positions ? 0 : static_cast<int>(t % g.tokens_per_image) - g.prefix;
  if (p < 0) {
    o[i] = to_float(row[i]);
    o[i + half] = to_float(row[i + half]);
    return;
  }
  if (g.positions) {  // the caller's table
    py = g.positions[2 * t];
    px = g.positions[2 * t + 1];
  } else {
    // Window w of the grid (windows in row-major order), patch q inside it (row-major).
    const int per_window = g.merge * g.merge;
    const int window = p / per_window, inside = p - window * per_window;
    const int windows_per_row = g.grid_w / g.merge;
    const int window_row = window / windows_per_row, window_col = window - window_row * windows_per_row;
    py = window_row * g.merge + inside / g.merge;
    px = window_col * g.merge + inside % g.merge;
  }
  const double pi = 3.141592653589793238;
  const double coord_y = g.centered ? 2 * pi * ((py + 0.5) * 2.0 / g.grid_h - 1.0) : double(py);
  const double coord_x = g.centered ? 2 * pi * ((px + 0.5) * 2.0 / g.grid_w - 1.0) : double(px);
  const int quarter = d / 4, j = i % quarter;
  const double angle = (i < quarter ? coord_y : coord_x) * pow(double(g.theta), -4.0 * j / d);
  const double x1 = to_float(row[i]), x2 = to_float(row[i + half]);
  o[i] = static_cast<float>(x1 * cos(angle) - x2 * sin(angle));
  o[i + half] = static_cast<float>(x2 * cos(angle) + x1 * sin(angle));
}

/// out (fp32, row stride out_stride) <- x [tokens, heads * d] rotated by the 2-D vision rope.
template <class T>
void vision_rope_2d_ref(float* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t tokens, int heads, int d,
                        const VisionRopeGeometry& g, cudaStream_t stream) {
  const int64_t n = tokens * heads * (d / 2);
  if (n > 0) vision_rope_2d_ref_kernel<T><<<ceil_div(n, 128), 128, 0, stream>>>(out, out_stride, x, x_stride, tokens, heads, d, g);
}

}  // namespace fk::kernels::reference
