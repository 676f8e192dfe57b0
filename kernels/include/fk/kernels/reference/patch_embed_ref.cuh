// Reference patch embedding for checking only: the convolution itself (stride = kernel = patch),
// one thread per (patch, output channel), fp64 sums over (c, ky, kx) read straight from the NCHW
// image, fp32 output, no rounding. Independent of the patchify + GEMM baseline.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void patch_embed_ref_kernel(float* out, const T* img, const T* w, const T* bias, int64_t batch, int channels,
                                       int patch, int image, int hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int grid = image / patch;
  const int64_t rows = batch * grid * grid;
  if (i >= rows * hidden) return;
  const int64_t row = i / hidden;
  const int o = static_cast<int>(i % hidden);
  const int64_t b = row / (grid * grid);
  const int py = static_cast<int>(row % (grid * grid)) / grid, px = static_cast<int>(row % (grid * grid)) % grid;
  double acc = bias ? static_cast<double>(to_float(bias[o])) : 0.0;
  for (int c = 0; c < channels; ++c)
    for (int ky = 0; ky < patch; ++ky)
      for (int kx = 0; kx < patch; ++kx) {
        const double x = to_float(img[((b * channels + c) * image + py * patch + ky) * static_cast<int64_t>(image) + px * patch + kx]);
        const double wv = to_float(w[((static_cast<int64_t>(o) * channels + c) * patch + ky) * patch + kx]);
        acc += x * wv;
      }
  out[i] = static_cast<float>(acc);
}

/// out (fp32 [batch * (image / patch)^2, hidden]) = Conv2d(img [batch, channels, image, image],
/// w [hidden, channels, patch, patch], bias [hidden] or null, stride = patch), patches row-major.
template <class T>
void patch_embed_ref(float* out, const T* img, const T* w, const T* bias, int64_t batch, int channels, int patch, int image,
                     int hidden, cudaStream_t stream) {
  const int64_t n = batch * (image / patch) * (image / patch) * hidden;
  if (n > 0)
    patch_embed_ref_kernel<T><<<ceil_div(n, 128), 128, 0, stream>>>(out, img, w, bias, batch, channels, patch, image, hidden);
}

template <class T>
__global__ void cls_positions_ref_kernel(float* out, const T* patches, const T* cls, const T* pos, int64_t batch,
                                         int64_t n_patches, int hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= batch * (n_patches + 1) * hidden) return;
  const int64_t row = i / hidden, t = row % (n_patches + 1), b = row / (n_patches + 1);
  const int c = static_cast<int>(i % hidden);
  const double x = t == 0 ? to_float(cls[c]) : to_float(patches[(b * n_patches + t - 1) * hidden + c]);
  out[i] = static_cast<float>(x + static_cast<double>(to_float(pos[t * hidden + c])));
}

/// out (fp32 [batch * (n_patches + 1), hidden]): per image the class token then its patches
/// (patches [batch * n_patches, hidden]), each plus its position row (pos [n_patches + 1, hidden]).
template <class T>
void cls_positions_ref(float* out, const T* patches, const T* cls, const T* pos, int64_t batch, int64_t n_patches, int hidden,
                       cudaStream_t stream) {
  const int64_t n = batch * (n_patches + 1) * hidden;
  if (n > 0) cls_positions_ref_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, patches, cls, pos, batch, n_patches, hidden);
}

}  // namespace fk::kernels::reference
