// Patchify for patch embedding (issue 22): a Conv2d whose stride equals its kernel (ViT, SigLIP,
// DINOv3, the Qwen-VL towers) is a GEMM over non-overlapping patches. This kernel lays the
// patches of NCHW images out as GEMM rows: row (b, py, px) of [B * G * G, C * P * P] holds the
// patch's values in the convolution weight's (c, ky, kx) order, so that
// out = patches · W[hidden, C*P*P]^T + bias equals the convolution's output per patch, patches
// in row-major (py, px) order (HF's flatten(2).transpose(1, 2)).
//
// The copy moves the widest vector that divides both the patch and the image width (16 bytes for
// ViT-B/16 in bf16; 4 bytes for patch 14).
#pragma once

#include <algorithm>
#include <cstdint>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

template <class T, int N> struct alignas(sizeof(T) * N) PatchChunk {
  T v[N];
};

/// Elements per copy: the largest power of two, at most 16 bytes, dividing kP and kImg.
template <class T, int kP, int kImg> constexpr int patch_vector() {
  int v = static_cast<int>(16 / sizeof(T));
  while (v > 1 && (kP % v != 0 || kImg % v != 0)) v /= 2;
  return v;
}

template <class T, int kC, int kP, int kImg>
__global__ void patchify_kernel(T* __restrict__ out, const T* __restrict__ img, int64_t chunks) {
  constexpr int V = patch_vector<T, kP, kImg>(), G = kImg / kP, kChunksPerRow = kC * kP * kP / V;
  using C = PatchChunk<T, V>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < chunks;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / kChunksPerRow;
    const int v = static_cast<int>(i % kChunksPerRow);
    const int kx = (v % (kP / V)) * V, rest = v / (kP / V), ky = rest % kP, c = rest / kP;
    const int64_t b = row / (G * G);
    const int p = static_cast<int>(row % (G * G)), py = p / G, px = p % G;
    const T* src = img + ((b * kC + c) * kImg + py * kP + ky) * static_cast<int64_t>(kImg) + px * kP + kx;
    reinterpret_cast<C*>(out)[i] = *reinterpret_cast<const C*>(src);
  }
}

/// out [batch * (kImg / kP)^2, kC * kP * kP] <- the patches of img [batch, kC, kImg, kImg] (NCHW,
/// contiguous, 16-byte aligned as the allocator aligns every tensor). An image size that is no
/// multiple of the patch keeps floor(kImg / kP) patches per side and drops the remainder, as
/// Conv2d(padding="valid") does (SigLIP so400m: 384 px in patches of 14 -> 27 x 27).
template <class T, int kC, int kP, int kImg>
void patchify(T* out, const T* img, int64_t batch, cudaStream_t stream) {
  static_assert(kImg >= kP, "the image must hold at least one patch");
  constexpr int V = patch_vector<T, kP, kImg>();
  const int64_t chunks = batch * (kImg / kP) * (kImg / kP) * (kC * kP * kP / V);
  if (chunks == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>(ceil_div(chunks, threads), 65536);
  patchify_kernel<T, kC, kP, kImg><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(out, img, chunks);
}

/// ViT's embeddings after the patch embedding: out [B * (N + 1), kH] with row b * (N + 1) =
/// cls + pos[0] and row b * (N + 1) + 1 + p = patches[b * N + p] + pos[1 + p]; each sum in fp32,
/// rounded once to T (torch's `cat(cls, patches) + position_embeddings` in the model dtype).
/// kH * sizeof(T) must be a multiple of 16 bytes (one 16-byte vector per thread).
template <class T, int kH>
__global__ void add_cls_and_positions_kernel(T* __restrict__ out, const T* __restrict__ patches, const T* __restrict__ cls,
                                             const T* __restrict__ pos, int64_t vectors, int64_t n_patches) {
  constexpr int V = 16 / sizeof(T), kVecPerRow = kH / V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / kVecPerRow;
    const int col = static_cast<int>(i % kVecPerRow) * V;
    const int64_t b = row / (n_patches + 1), t = row % (n_patches + 1);
    const T* src = t == 0 ? cls + col : patches + (b * n_patches + t - 1) * kH + col;
    const Vec16<T> a = load16(src), p = load16(pos + t * kH + col);
    Vec16<T> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_float<T>(to_float(a.v[j]) + to_float(p.v[j]));
    store16(out + row * kH + col, o);
  }
}

template <class T, int kH>
void add_cls_and_positions(T* out, const T* patches, const T* cls, const T* pos, int64_t batch, int64_t n_patches,
                           cudaStream_t stream) {
  static_assert((kH * sizeof(T)) % 16 == 0, "rows of a multiple of 16 bytes");
  const int64_t vectors = batch * (n_patches + 1) * (kH * static_cast<int64_t>(sizeof(T)) / 16);
  if (vectors == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(vectors, 256), 65536);
  add_cls_and_positions_kernel<T, kH><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(out, patches, cls, pos, vectors, n_patches);
}

/// SigLIP's embeddings after the patch embedding (no class token): out [B * N, kH] = patches + pos[p]
/// for each image's patch p, the sum in fp32 rounded once (torch's bf16 `embeddings + position_embedding`).
template <class T, int kH>
__global__ void add_positions_kernel(T* __restrict__ out, const T* __restrict__ patches, const T* __restrict__ pos, int64_t vectors,
                                     int64_t n_patches) {
  constexpr int V = 16 / sizeof(T), kVecPerRow = kH / V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / kVecPerRow;
    const int col = static_cast<int>(i % kVecPerRow) * V;
    const Vec16<T> a = load16(patches + row * kH + col), p = load16(pos + (row % n_patches) * kH + col);
    Vec16<T> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_float<T>(to_float(a.v[j]) + to_float(p.v[j]));
    store16(out + row * kH + col, o);
  }
}

template <class T, int kH>
void add_positions(T* out, const T* patches, const T* pos, int64_t batch, int64_t n_patches, cudaStream_t stream) {
  static_assert((kH * sizeof(T)) % 16 == 0, "rows of a multiple of 16 bytes");
  const int64_t vectors = batch * n_patches * (kH * static_cast<int64_t>(sizeof(T)) / 16);
  if (vectors == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(vectors, 256), 65536);
  add_positions_kernel<T, kH><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(out, patches, pos, vectors, n_patches);
}

/// DINOv3's embeddings after the patch embedding (no position embeddings: the rope turns q and k):
/// out [B * (P + N), kH] with rows b * (P + N) + t = prefix[t] for t < P (the class token, then
/// the register tokens) and patches[b * N + t - P] after them; a copy, no arithmetic.
template <class T, int kH>
__global__ void prepend_tokens_kernel(T* __restrict__ out, const T* __restrict__ patches, const T* __restrict__ prefix, int64_t vectors,
                                      int64_t n_prefix, int64_t n_patches) {
  constexpr int V = 16 / sizeof(T), kVecPerRow = kH / V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / kVecPerRow;
    const int col = static_cast<int>(i % kVecPerRow) * V;
    const int64_t b = row / (n_prefix + n_patches), t = row % (n_prefix + n_patches);
    const T* src = t < n_prefix ? prefix + t * kH + col : patches + (b * n_patches + t - n_prefix) * kH + col;
    store16(out + row * kH + col, load16(src));
  }
}

/// prefix: [n_prefix, kH] contiguous (the class token's row followed by the register tokens' rows).
template <class T, int kH>
void prepend_tokens(T* out, const T* patches, const T* prefix, int64_t batch, int64_t n_prefix, int64_t n_patches, cudaStream_t stream) {
  static_assert((kH * sizeof(T)) % 16 == 0, "rows of a multiple of 16 bytes");
  const int64_t vectors = batch * (n_prefix + n_patches) * (kH * static_cast<int64_t>(sizeof(T)) / 16);
  if (vectors == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(vectors, 256), 65536);
  prepend_tokens_kernel<T, kH><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(out, patches, prefix, vectors, n_prefix, n_patches);
}

}  // namespace fk::kernels
