// Reference rotary embedding (checking only): one thread per (token, head, rotation pair),
// fp64 arithmetic on the fp32 cos/sin cache, fp32 output written out of place. Elements of a
// head beyond rotary_dim are copied.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void rotary_embedding_ref_kernel(float* out, int64_t out_stride, const T* x, int64_t x_stride,
                                            const int64_t* positions, const float* cos_sin_cache, int64_t num_tokens,
                                            int heads, int head_size, int rotary_dim, bool neox) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t per_token = static_cast<int64_t>(heads) * head_size;
  if (i >= num_tokens * per_token) return;
  const int64_t t = i / per_token;
  const int h = static_cast<int>((i % per_token) / head_size);
  const int e = static_cast<int>(i % head_size);
  const T* src = x + t * x_stride + static_cast<int64_t>(h) * head_size;
  float* dst = out + t * out_stride + static_cast<int64_t>(h) * head_size;
  if (e >= rotary_dim) {
    dst[e] = to_float(src[e]);
    return;
  }
  const int half = rotary_dim / 2;
  int i1, i2, p;  // the pair (i1, i2) rotated by angle index p
  if (neox) {
    p = e % half, i1 = p, i2 = p + half;
  } else {
    p = e / 2, i1 = 2 * p, i2 = 2 * p + 1;
  }
  const float* row = cos_sin_cache + positions[t] * rotary_dim;
  const double c = row[p], s = row[half + p];
  const double x1 = to_float(src[i1]), x2 = to_float(src[i2]);
  dst[e] = static_cast<float>(e == i1 ? x1 * c - x2 * s : x2 * c + x1 * s);
}

/// out (fp32, row stride out_stride) = rope(x) for x [T, heads * head_size] (row stride x_stride).
template <class T>
void rotary_embedding_ref(float* out, int64_t out_stride, const T* x, int64_t x_stride, const int64_t* positions,
                          const float* cos_sin_cache, int64_t num_tokens, int heads, int head_size, int rotary_dim,
                          bool neox, cudaStream_t stream) {
  if (num_tokens == 0) return;
  rotary_embedding_ref_kernel<T><<<ceil_div(num_tokens * heads * head_size, 256), 256, 0, stream>>>(
      out, out_stride, x, x_stride, positions, cos_sin_cache, num_tokens, heads, head_size, rotary_dim, neox);
}

/// Copies x (any float dtype, row stride x_stride) to fp32 out (row stride out_stride), `cols` columns.
template <class T>
__global__ void copy_to_f32_kernel(float* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t rows, int cols) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int c = static_cast<int>(i % cols);
  out[r * out_stride + c] = to_float(x[r * x_stride + c]);
}
template <class T>
void copy_to_f32(float* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t rows, int cols,
                 cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  copy_to_f32_kernel<T><<<ceil_div(rows * cols, 256), 256, 0, stream>>>(out, out_stride, x, x_stride, rows, cols);
}

}  // namespace fk::kernels::reference
