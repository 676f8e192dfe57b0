// Reference GEMM for checking only: C[M, N] (fp32) = A[M, K] · B[N, K]^T (+ bias[N]) with A, B
// in the model dtype (torch Linear layout), fp32 accumulation on CUDA cores, no rounding of the
// output. Deliberately independent of the baselines (no cuBLAS, no tensor cores), but fast
// enough for prefill shapes (M = 16384, N = 28672, K = 4096 in well under a few seconds): a
// classic 128 x 128 x 8 shared-memory tile, 256 threads, 8 x 8 outputs per thread in registers.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

namespace detail {

constexpr int kRefTile = 128, kRefK = 8, kRefThreads = 256;

template <class T>
__global__ void __launch_bounds__(kRefThreads)
gemm_ref_kernel(float* __restrict__ c, int64_t ldc, const T* __restrict__ a, int64_t lda, const T* __restrict__ b,
                int64_t ldb, const T* __restrict__ bias, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kRefK][kRefTile];
  __shared__ float bs[kRefK][kRefTile];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRefTile, n0 = static_cast<int64_t>(blockIdx.x) * kRefTile;
  const int lr = tid / 2, lk = (tid % 2) * 4;  // loader: row lr, k lk..lk+3
  float acc[8][8] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kRefK) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t kk = k0 + lk + j;
      const int64_t ar = m0 + lr, br = n0 + lr;
      as[lk + j][lr] = (ar < m && kk < k) ? to_float(a[ar * lda + kk]) : 0.f;
      bs[lk + j][lr] = (br < n && kk < k) ? to_float(b[br * ldb + kk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kRefK; ++kk) {
      float ra[8], rb[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ra[i] = as[kk][ty * 4 + i];
        ra[4 + i] = as[kk][64 + ty * 4 + i];
        rb[i] = bs[kk][tx * 4 + i];
        rb[4 + i] = bs[kk][64 + tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (col < n) c[r * ldc + col] = acc[i][j] + (bias ? to_float(bias[col]) : 0.f);
    }
  }
}

}  // namespace detail

/// c[m, n] = sum_k a[m, k] * b[n, k] (+ bias[n]), fp32 out. Leading dimensions in elements.
template <class T>
void gemm_ref(float* c, int64_t ldc, const T* a, int64_t lda, const T* b, int64_t ldb, const T* bias, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const dim3 grid(ceil_div(n, detail::kRefTile), ceil_div(m, detail::kRefTile));
  detail::gemm_ref_kernel<T><<<grid, detail::kRefThreads, 0, stream>>>(c, ldc, a, lda, b, ldb, bias, m, n, k);
}

}  // namespace fk::kernels::reference
