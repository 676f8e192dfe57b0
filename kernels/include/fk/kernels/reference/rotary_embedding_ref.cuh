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

/// Multimodal rope's per-token cos/sin rows (checking only), built HF's way rather than by section
/// bounds: the rows of the three positions are gathered, then column c of token t is taken from
/// position row a(c). Consecutive sections (apply_multimodal_rotary_pos_emb): the full cos/sin width
/// is split into chunks [s0, s1, s2, s0, s1, s2] and chunk i reads row i % 3. Interleaved
/// (apply_interleaved_mrope): start from the temporal row, overwrite frequencies 1, 4, ... < 3 s1 from
/// the height row and 2, 5, ... < 3 s2 from the width row. out [T, rotary_dim] fp32 in the cache's
/// layout (cos | sin), to be indexed by arange(T). positions: [3, T] rows axis_stride apart.
template <class P>  // a template, so that every translation unit may hold it
__global__ void mrope_table_ref_kernel(float* out, const P* positions, int64_t axis_stride, const float* cos_sin_cache,
                                       int64_t num_tokens, int rotary_dim, int s0, int s1, int s2, bool interleaved) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens * rotary_dim) return;
  const int64_t t = i / rotary_dim;
  const int c = static_cast<int>(i % rotary_dim);
  const int half = rotary_dim / 2;
  const int f = c % half;  // the frequency of column c (cos and sin halves alike)
  int axis = 0;
  if (interleaved) {
    for (int a = 1; a < 3; ++a) {
      const int len = 3 * (a == 1 ? s1 : s2);
      for (int j = a; j < len && j < half; j += 3)
        if (j == f) axis = a;
    }
  } else {
    const int sec[6] = {s0, s1, s2, s0, s1, s2};
    int start = 0;
    for (int chunk = 0; chunk < 6; ++chunk) {
      if (c >= start && c < start + sec[chunk]) axis = chunk % 3;
      start += sec[chunk];
    }
  }
  const int64_t pos = static_cast<int64_t>(positions[axis * axis_stride + t]);
  out[t * rotary_dim + c] = cos_sin_cache[pos * rotary_dim + c];
}

inline void mrope_table_ref(float* out, const int64_t* positions, int64_t axis_stride, const float* cos_sin_cache,
                            int64_t num_tokens, int rotary_dim, int s0, int s1, int s2, bool interleaved, cudaStream_t stream) {
  if (num_tokens == 0) return;
  mrope_table_ref_kernel<int64_t><<<ceil_div(num_tokens * rotary_dim, 256), 256, 0, stream>>>(out, positions, axis_stride, cos_sin_cache,
                                                                                     num_tokens, rotary_dim, s0, s1, s2, interleaved);
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
