// Reference embedding poolers and row L2 normalisation for checking only: fp64 sums, one thread
// per (sequence, column) for the pooled value, one thread per row for the norm; fp32 output, no
// rounding. Simple and independent of the baseline kernels (fk/kernels/pooler.cuh).
#pragma once

#include "fk/kernels/common.cuh"
#include "fk/kernels/pooler.cuh"

namespace fk::kernels::reference {

template <class T>
__global__ void pool_ref_kernel(float* out, const T* x, int64_t x_stride, const int32_t* cu, int64_t num_seqs, int hidden,
                                Pool pool) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_seqs * hidden) return;
  const int64_t s = i / hidden, c = i % hidden, begin = cu[s], end = cu[s + 1];
  double v = 0;
  if (end > begin) {
    if (pool == Pool::kCls) v = to_float(x[begin * x_stride + c]);
    else if (pool == Pool::kLast) v = to_float(x[(end - 1) * x_stride + c]);
    else {
      for (int64_t r = begin; r < end; ++r) v += to_float(x[r * x_stride + c]);
      v /= static_cast<double>(end - begin);
    }
  }
  out[i] = static_cast<float>(v);
}

/// Row r of `in` (any element type, row stride in_stride) divided by max(||row||, 1e-12), the
/// norm summed in fp64, into out (fp32 [rows, hidden]); one thread per row.
template <class T>
__global__ void normalize_rows_ref_kernel(float* out, const T* in, int64_t in_stride, int64_t rows, int hidden) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  double sq = 0;
  for (int c = 0; c < hidden; ++c) {
    const double v = to_float(in[r * in_stride + c]);
    sq += v * v;
  }
  const double scale = 1.0 / fmax(sqrt(sq), 1e-12);
  for (int c = 0; c < hidden; ++c) out[r * hidden + c] = static_cast<float>(to_float(in[r * in_stride + c]) * scale);
}

/// out (fp32 [num_seqs, hidden]) = pool over each sequence of x, then L2-normalised when asked
/// (in place, from the fp32 pooled values).
template <class T>
void pool_ref(float* out, const T* x, int64_t x_stride, const int32_t* cu_seqlens, int64_t num_seqs, int hidden, Pool pool,
              bool normalize, cudaStream_t stream) {
  if (num_seqs == 0) return;
  pool_ref_kernel<T><<<ceil_div(num_seqs * hidden, 256), 256, 0, stream>>>(out, x, x_stride, cu_seqlens, num_seqs, hidden, pool);
  if (normalize) normalize_rows_ref_kernel<float><<<ceil_div(num_seqs, 128), 128, 0, stream>>>(out, out, hidden, num_seqs, hidden);
}

/// out (fp32 [rows, hidden]) = x / max(||x||, 1e-12) per row.
template <class T> void l2_normalize_ref(float* out, const T* x, int64_t x_stride, int64_t rows, int hidden, cudaStream_t stream) {
  if (rows == 0) return;
  normalize_rows_ref_kernel<T><<<ceil_div(rows, 128), 128, 0, stream>>>(out, x, x_stride, rows, hidden);
}

template <class T>
__global__ void token_classify_ref_kernel(float* out, const T* x, int64_t x_stride, const T* w, const T* bias, int64_t rows, int hidden,
                                         int labels, HeadAct act) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * labels) return;
  const int64_t r = i / labels, l = i % labels;
  double y = 0;
  for (int c = 0; c < hidden; ++c) y += static_cast<double>(to_float(x[r * x_stride + c])) * to_float(w[l * hidden + c]);
  if (bias) y += to_float(bias[l]);
  if (act == HeadAct::kRelu) y = y > 0 ? y : 0;
  if (act == HeadAct::kSigmoid) y = 1.0 / (1.0 + exp(-y));
  out[i] = static_cast<float>(y);
}

/// out (fp32 [rows, labels]) = act(x w^T (+ bias)) with fp64 sums; one thread per output. bias may be null.
template <class T>
void token_classify_ref(float* out, const T* x, int64_t x_stride, const T* w, const T* bias, int64_t rows, int hidden, int labels,
                        HeadAct act, cudaStream_t stream) {
  if (rows == 0) return;
  token_classify_ref_kernel<T><<<ceil_div(rows * labels, 128), 128, 0, stream>>>(out, x, x_stride, w, bias, rows, hidden, labels, act);
}

}  // namespace fk::kernels::reference
