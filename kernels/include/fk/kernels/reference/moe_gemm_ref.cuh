// Reference MoE grouped GEMM (checking only): for every flat slot s < num_valid with expert
// e = topk_ids[s] (ids outside [0, E) are skipped, their rows left untouched),
//   C[s, n] = (sum_k A[row, k] * B[e, n, k] (+ bias[e, n]))  (× topk_weights[s] when mul_routed_weight),
// row = s / top_k (a_div_topk: A is hidden_states [T, K]) or s (A is [T * top_k, K]); fp32 output
// [num_valid, N] contiguous, fp32 accumulation on CUDA cores in a fixed k order, no rounding.
// Independent of moe_grouped_gemm (no alignment, no tensor cores, no shared code).
//
// Layout: grid (ceil(N / 128), E). A block owns one expert and 128 columns. It scans topk_ids in
// chunks of 256 slots and appends the slots routed to its expert to a list in shared memory
// (ballot + popc compaction, slot order preserved); every time the list holds 128 slots it
// computes that 128 x 128 output tile with the classic 128 x 128 x 8 shared-memory scheme of
// gemm_ref (256 threads, 8 x 8 outputs per thread, gathered A rows), then the final partial
// tile. Fast enough for the largest checks (16384 x 28672 x 4096 in well under a second on H100).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "fk/kernels/common.cuh"

namespace fk::kernels::reference {

namespace detail {

constexpr int kMoeRefTile = 128, kMoeRefK = 8, kMoeRefThreads = 256, kMoeRefScan = 256;

/// One 128-row x 128-column tile of expert e: rows[0 .. nrows) are slot indices.
template <class T>
__device__ __forceinline__ void moe_ref_tile(float* __restrict__ c, const T* __restrict__ a, int64_t lda,
                                             const T* __restrict__ b, const T* __restrict__ bias,
                                             const float* __restrict__ w, const int* rows,
                                             int nrows, int e, int n0, int top_k, bool a_div_topk, bool mul, int n,
                                             int k, float (&as)[kMoeRefK][kMoeRefTile],
                                             float (&bs)[kMoeRefK][kMoeRefTile]) {
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int lr = tid / 2, lk = (tid % 2) * 4;  // loader: tile row lr, k lk .. lk + 3
  const T* ap = nullptr;
  if (lr < nrows) {
    const int s = rows[lr];
    ap = a + static_cast<int64_t>(a_div_topk ? s / top_k : s) * lda;
  }
  const T* bp = n0 + lr < n ? b + (static_cast<int64_t>(e) * n + n0 + lr) * k : nullptr;
  float acc[8][8] = {};
  for (int k0 = 0; k0 < k; k0 += kMoeRefK) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int kk = k0 + lk + j;
      as[lk + j][lr] = (ap && kk < k) ? to_float(ap[kk]) : 0.f;
      bs[lk + j][lr] = (bp && kk < k) ? to_float(bp[kk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kMoeRefK; ++kk) {
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
    const int r = i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4;
    if (r >= nrows) continue;
    const int s = rows[r];
    const float scale = mul ? w[s] : 1.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (col < n) {
        const float bv = bias ? to_float(bias[static_cast<int64_t>(e) * n + col]) : 0.f;
        c[static_cast<int64_t>(s) * n + col] = (acc[i][j] + bv) * scale;
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kMoeRefThreads)
moe_gemm_ref_kernel(float* __restrict__ c, const T* __restrict__ a, int64_t lda, const T* __restrict__ b,
                    const T* __restrict__ bias, const float* __restrict__ w, const int32_t* __restrict__ topk_ids, int64_t num_valid, int top_k,
                    bool a_div_topk, bool mul, int n, int k) {
  __shared__ float as[kMoeRefK][kMoeRefTile];
  __shared__ float bs[kMoeRefK][kMoeRefTile];
  __shared__ int rows[kMoeRefTile + kMoeRefScan];
  __shared__ int warp_hits[kMoeRefThreads / 32];
  const int e = blockIdx.y, n0 = blockIdx.x * kMoeRefTile;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int count = 0;  // uniform across the block
  for (int64_t base = 0; base < num_valid; base += kMoeRefScan) {
    const int64_t s = base + tid;
    const bool hit = s < num_valid && topk_ids[s] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int i = 0; i < kMoeRefThreads / 32; ++i) {
      before += i < warp ? warp_hits[i] : 0;
      total += warp_hits[i];
    }
    if (hit) rows[count + before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int>(s);
    __syncthreads();
    count += total;
    while (count >= kMoeRefTile) {
      moe_ref_tile<T>(c, a, lda, b, bias, w, rows, kMoeRefTile, e, n0, top_k, a_div_topk, mul, n, k, as, bs);
      const int rest = count - kMoeRefTile;  // <= kMoeRefScan - 1
      const int v = tid < rest ? rows[kMoeRefTile + tid] : 0;
      __syncthreads();
      if (tid < rest) rows[tid] = v;
      __syncthreads();
      count = rest;
    }
  }
  if (count > 0) moe_ref_tile<T>(c, a, lda, b, bias, w, rows, count, e, n0, top_k, a_div_topk, mul, n, k, as, bs);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) moe_ref_max_id_kernel(int* out, const int32_t* ids, int64_t n) {
  int m = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = max(m, static_cast<int>(ids[i]));
  __shared__ int sm[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < kThreads / 32; ++i) m = max(m, sm[i]);
    *out = m;
  }
}

}  // namespace detail

/// C [num_valid, N] (fp32, contiguous) = the MoE grouped GEMM of the routing topk_ids [num_valid]
/// (flat, slot s = token s / top_k) over num_experts experts; see the top of this file. bias:
/// nullptr or [num_experts, N] contiguous, added before the routing weight.
template <class T>
void moe_gemm_ref(float* C, const T* A, int64_t lda, const T* B, const float* topk_weights, const int32_t* topk_ids,
                  int64_t num_valid, int top_k, bool a_div_topk, bool mul_routed_weight, int N, int K,
                  int num_experts, cudaStream_t stream, const T* bias = nullptr) {
  if (num_valid <= 0 || N <= 0 || num_experts <= 0) return;
  const dim3 grid(ceil_div(N, detail::kMoeRefTile), static_cast<unsigned>(num_experts));
  detail::moe_gemm_ref_kernel<T><<<grid, detail::kMoeRefThreads, 0, stream>>>(
      C, A, lda, B, bias, topk_weights, topk_ids, num_valid, top_k, a_div_topk, mul_routed_weight, N, K);
}

/// The same without the expert count: finds max(topk_ids) + 1 on the device first, which
/// allocates 4 bytes and synchronises `stream` (a checking tool, not for capture).
template <class T>
void moe_gemm_ref(float* C, const T* A, int64_t lda, const T* B, const float* topk_weights, const int32_t* topk_ids,
                  int64_t num_valid, int top_k, bool a_div_topk, bool mul_routed_weight, int N, int K,
                  cudaStream_t stream, const T* bias = nullptr) {
  if (num_valid <= 0 || N <= 0) return;
  int* d_max = nullptr;
  if (cudaMallocAsync(&d_max, sizeof(int), stream) != cudaSuccess)
    throw std::runtime_error("moe_gemm_ref: cannot allocate 4 bytes");
  detail::moe_ref_max_id_kernel<1024><<<1, 1024, 0, stream>>>(d_max, topk_ids, num_valid);
  int h_max = -1;
  cudaMemcpyAsync(&h_max, d_max, sizeof(int), cudaMemcpyDeviceToHost, stream);
  cudaFreeAsync(d_max, stream);
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) throw std::runtime_error(std::string("moe_gemm_ref: ") + cudaGetErrorString(err));
  moe_gemm_ref<T>(C, A, lda, B, topk_weights, topk_ids, num_valid, top_k, a_div_topk, mul_routed_weight, N, K,
                  h_max + 1, stream, bias);
}

}  // namespace fk::kernels::reference
