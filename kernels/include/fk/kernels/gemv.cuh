// GEMV-style GEMM for small M (decode): y[M, N] = x[M, K] · W[N, K]^T (+ bias), M <= 16,
// 16-bit in/out, fp32 accumulation; specialised on K. Memory bound: the whole job is to
// stream W once at HBM speed.
//
// Note [GEMV on tensor cores]
// Each warp owns 16 rows of W and walks K in steps of 32. A lane loads two 16-byte vectors
// (8 consecutive k of row g = lane/4 and of row g+8, at k offset (lane%4)*8): together the
// warp's loads are a 16 x 32 tile of W, and the registers are *exactly* the A fragments of two
// mma.m16n8k16 steps if k is permuted within the 32-wide step (the dot product does not care
// about the order of k, as long as x uses the same order). The matching B fragment (x^T, k16 x
// n8) for lane (g, c) is x[g][8c .. 8c+8]: one 16-byte load, from L1/L2, only by lanes with
// g < M. So every W byte is loaded once with 16-byte loads, the multiply-adds run on the
// tensor cores (no CUDA-core FMA bottleneck even at M = 16), and no shared memory is needed
// until the end. kUnroll steps are loaded before the first mma (kUnroll * 2 W loads in
// flight per lane). The kWarps warps of a block split K round-robin by 32-wide steps and
// reduce their accumulators through shared memory; blocks split N by 16 rows (N / 16 blocks:
// 384 for N = 6144, enough to fill 132 SMs two to three times over).
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

/// 16-byte streaming load, no L1 allocation; kL2 = 0: no L2 prefetch hint, 1: L2::128B, 2: L2::256B.
template <int kL2> __device__ __forceinline__ uint4 ld_stream_u4(const void* p) {
  uint4 r;
  if constexpr (kL2 == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else if constexpr (kL2 == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  }
  return r;
}

template <class T> __device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                             uint32_t a3, uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1,
                                                                     uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                              uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// kNT: number of n8 tiles of x (M <= 8 * kNT). kMode 0: the warps of a block take 32-wide k
/// steps round-robin; 1: each warp takes a contiguous range of K. kL2: see ld_stream_u4.
template <int kK, int kNT, int kWarps, int kUnroll, class T, int kMode, int kL2>
__global__ void __launch_bounds__(kWarps * 32)
gemv_kernel(T* __restrict__ y, int64_t ldy, const T* __restrict__ x, int64_t ldx, const T* __restrict__ w,
            const T* __restrict__ bias, int m) {
  static_assert(kK % 32 == 0, "K must be a multiple of 32");
  constexpr int kSteps = kK / 32;                               // 32-wide k steps
  constexpr int kPerWarp = (kSteps + kWarps - 1) / kWarps;     // steps per warp (upper bound)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const T* w0 = w + (row0 + g) * kK + c * 8;
  const T* w1 = w0 + 8 * static_cast<int64_t>(kK);
  const T* xp[kNT];
  bool xv[kNT];
#pragma unroll
  for (int t = 0; t < kNT; ++t) {
    xv[t] = g + 8 * t < m;
    xp[t] = x + static_cast<int64_t>(xv[t] ? g + 8 * t : 0) * ldx + c * 8;
  }
  float acc[kNT][4];
#pragma unroll
  for (int t = 0; t < kNT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

  // The j-th step of this warp, and the first step it must not take.
  auto step_of = [&](int j) { return kMode == 0 ? j * kWarps + warp : warp * kPerWarp + j; };
  const int step_end = kMode == 0 ? kSteps : min(kSteps, (warp + 1) * kPerWarp);
#pragma unroll 1
  for (int base = 0; base < kPerWarp; base += kUnroll) {
    uint4 wa[kUnroll], wb[kUnroll], xb[kUnroll][kNT];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = step_of(base + u);
      if (s < step_end) {
        wa[u] = ld_stream_u4<kL2>(w0 + s * 32);
        wb[u] = ld_stream_u4<kL2>(w1 + s * 32);
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
          xb[u][t] = xv[t] ? __ldg(reinterpret_cast<const uint4*>(xp[t] + s * 32)) : make_uint4(0, 0, 0, 0);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = step_of(base + u);
      if (s < step_end) {
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
          mma_16816<T>(acc[t], wa[u].x, wb[u].x, wa[u].y, wb[u].y, xb[u][t].x, xb[u][t].y);
          mma_16816<T>(acc[t], wa[u].z, wb[u].z, wa[u].w, wb[u].w, xb[u][t].z, xb[u][t].w);
        }
      }
    }
  }

  // Reduce the kWarps partial tiles. acc[t][0..1]: W row g, x rows 8t+2c, +1; acc[t][2..3]: row g+8.
  if constexpr (kWarps > 1) {
    __shared__ float red[kWarps - 1][kNT * 4][32];
    if (warp > 0) {
#pragma unroll
      for (int t = 0; t < kNT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[warp - 1][t * 4 + i][lane] = acc[t][i];
    }
    __syncthreads();
    if (warp > 0) return;
#pragma unroll
    for (int v = 0; v < kWarps - 1; ++v)
#pragma unroll
      for (int t = 0; t < kNT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][i] += red[v][t * 4 + i][lane];
  }
  const float b0 = bias ? to_float(bias[row0 + g]) : 0.f;
  const float b1 = bias ? to_float(bias[row0 + g + 8]) : 0.f;
#pragma unroll
  for (int t = 0; t < kNT; ++t) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int mi = 8 * t + 2 * c + j;
      if (mi < m) {
        y[mi * ldy + row0 + g] = from_float<T>(acc[t][j] + b0);
        y[mi * ldy + row0 + g + 8] = from_float<T>(acc[t][2 + j] + b1);
      }
    }
  }
}

}  // namespace detail

/// Whether gemv() handles this problem (otherwise use the cuBLASLt path).
template <int kK> constexpr bool gemv_supported_k() { return kK % 32 == 0; }
inline bool gemv_supported(int64_t m, int64_t n, const void* x, int64_t ldx, const void* w) {
  return m >= 1 && m <= 16 && n % 16 == 0 && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

/// y[m, n] = x[m, :kK] · W[n, :kK] (+ bias[n]); requires gemv_supported(). kWarps warps per
/// block split K; kUnroll 32-wide k steps are in flight per warp.
/// Defaults (8 warps, 2 steps unrolled, round-robin k, L2::256B prefetch) were the fastest
/// overall in bench/micro/mm_attn_bench.cu on the H100 (1.78-2.85 TB/s, 1.02-1.22x cuBLAS at M=1).
template <int kK, class T, int kWarps = 8, int kUnroll = 2, int kMode = 0, int kL2 = 2>
void gemv(T* y, int64_t ldy, const T* x, int64_t ldx, const T* w, const T* bias, int64_t m, int64_t n,
          cudaStream_t stream) {
  static_assert(gemv_supported_k<kK>(), "K must be a multiple of 32");
  if (m == 0) return;
  const unsigned blocks = static_cast<unsigned>(n / 16);
  if (m <= 8) {
    detail::gemv_kernel<kK, 1, kWarps, kUnroll, T, kMode, kL2><<<blocks, kWarps * 32, 0, stream>>>(y, ldy, x, ldx, w, bias, static_cast<int>(m));
  } else {
    detail::gemv_kernel<kK, 2, kWarps, kUnroll, T, kMode, kL2><<<blocks, kWarps * 32, 0, stream>>>(y, ldy, x, ldx, w, bias, static_cast<int>(m));
  }
}

}  // namespace fk::kernels
