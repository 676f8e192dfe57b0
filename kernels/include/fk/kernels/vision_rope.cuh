// 2-D rotary position embedding of vision transformers (issue 22), in place on q and k:
// every image is a sequence of `prefix` tokens (class and register tokens: not rotated) and then
// grid_h x grid_w patches. Patch p has a row and column (py, px); with merge_size m > 1 the
// patches come in m x m windows (Qwen2-VL's order: window by window, row-major inside a window).
// Head dims pair as rotate_half does (i with i + D/2); pair i < D/4 turns by the row coordinate
// and pair D/4 <= i < D/2 by the column coordinate, each at frequency theta^(-4 j / D),
// j = i mod D/4. The coordinate is
//   centered (DINOv3): 2 pi (2 (py + 0.5) / grid_h - 1), the patch centre in [-1, 1] times 2 pi;
//   grid (Qwen2-VL / Qwen2.5-VL vision rope): py itself.
// With a position table (Qwen2-VL's towers over images of different sizes: vLLM's rot_pos_emb,
// HF get_vision_position_ids), token t's (py, px) are positions[2 t], positions[2 t + 1] (grid
// coordinates; no prefix tokens) and the geometry's grid and merge are not read.
// Angles and the rotation are computed in fp32, the result rounded once to T.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

struct VisionRopeGeometry {
  int tokens_per_image;  ///< prefix + grid_h * grid_w
  int prefix;            ///< leading tokens of each image left unrotated
  int grid_h, grid_w;    ///< patches per column and per row
  int merge;             ///< window side of the patch order (1: row-major)
  float theta;           ///< rope base
  bool centered;         ///< DINOv3's normalised patch centres (else integer grid positions)
  const int32_t* positions = nullptr;  ///< optional i32 [tokens, 2] (row, column) per token, device
};

/// (row, column) of patch p under the geometry's patch order.
__host__ __device__ inline void vision_patch_position(const VisionRopeGeometry& g, int p, int& py, int& px) {
  const int mm = g.merge * g.merge, b = p / mm, w = p % mm, windows_per_row = g.grid_w / g.merge;
  py = (b / windows_per_row) * g.merge + w / g.merge;
  px = (b % windows_per_row) * g.merge + w % g.merge;
}

template <class T, int kD>
__global__ void vision_rope_2d_kernel(T* __restrict__ q, int64_t q_stride, int q_heads, T* __restrict__ k, int64_t k_stride,
                                      int k_heads, VisionRopeGeometry g) {
  constexpr int kHalf = kD / 2, kQuarter = kD / 4;
  const int64_t t = blockIdx.x;
  int py, px;
  if (g.positions) {
    py = g.positions[2 * t];
    px = g.positions[2 * t + 1];
  } else {
    const int p = static_cast<int>(t % g.tokens_per_image) - g.prefix;
    if (p < 0) return;  // class / register tokens keep their values
    vision_patch_position(g, p, py, px);
  }
  constexpr float kTwoPi = 6.283185307179586f;
  const float cy = g.centered ? kTwoPi * (2.f * (static_cast<float>(py) + 0.5f) / static_cast<float>(g.grid_h) - 1.f)
                              : static_cast<float>(py);
  const float cx = g.centered ? kTwoPi * (2.f * (static_cast<float>(px) + 0.5f) / static_cast<float>(g.grid_w) - 1.f)
                              : static_cast<float>(px);
  const float log2_theta = log2f(g.theta);
  for (int idx = threadIdx.x; idx < (q_heads + k_heads) * kHalf; idx += blockDim.x) {
    const int h = idx / kHalf, i = idx % kHalf;
    T* row = h < q_heads ? q + t * q_stride + static_cast<int64_t>(h) * kD : k + t * k_stride + static_cast<int64_t>(h - q_heads) * kD;
    const int j = i % kQuarter;
    const float inv_freq = exp2f(-4.f * static_cast<float>(j) / static_cast<float>(kD) * log2_theta);
    float s, c;
    sincosf((i < kQuarter ? cy : cx) * inv_freq, &s, &c);
    const float x1 = to_float(row[i]), x2 = to_float(row[i + kHalf]);
    row[i] = from_float<T>(x1 * c - x2 * s);
    row[i + kHalf] = from_float<T>(x2 * c + x1 * s);
  }
}

/// q [tokens, q_heads * kD] and k [tokens, k_heads * kD] (row strides q_stride, k_stride; unit
/// stride inside a row), rotated in place; tokens a whole number of images.
template <class T, int kD>
void vision_rope_2d(T* q, int64_t q_stride, int q_heads, T* k, int64_t k_stride, int k_heads, int64_t tokens,
                    const VisionRopeGeometry& g, cudaStream_t stream) {
  static_assert(kD % 4 == 0, "2-D rope splits the head dim into four quarters");
  if (tokens == 0) return;
  const int threads = std::min(256, ((q_heads + k_heads) * kD / 2 + 31) / 32 * 32);
  vision_rope_2d_kernel<T, kD><<<static_cast<unsigned>(tokens), threads, 0, stream>>>(q, q_stride, q_heads, k, k_stride, k_heads, g);
}

}  // namespace fk::kernels
