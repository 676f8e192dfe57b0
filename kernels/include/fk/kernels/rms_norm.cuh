// RMSNorm and fused residual-add + RMSNorm, specialised on the hidden size (vLLM `rms_norm`
// and `fused_add_rms_norm` semantics: statistics in fp32, residual stored in the model dtype).
//
// One block per row; each thread keeps its 16-byte vectors of the row in registers between
// the reduction and the write, so every byte is read once and written once. All loads of a
// thread (x, residual and the weight) are issued before the first use: kVecPerThread
// independent 16-byte loads per operand in flight, and the weight load is off the critical
// path (at 1 token the kernel is one DRAM round trip, a block reduction and a store).
// Launch: hidden 4096 bf16 -> 256 threads x 2 vectors; 3584 -> 224 threads x 2; grid = rows.
#pragma once

#include <algorithm>

#include "fk/kernels/common.cuh"
#include "fk/kernels/launch_util.cuh"

namespace fk::kernels {

namespace detail {

/// kVPT = 0: the default (2 vectors per thread where the row allows it); otherwise forced.
template <int kHidden, class T, int kVPT = 0> struct RmsNormShape {
  static constexpr int kVecElems = Vec16<T>::kN;
  static_assert(kHidden % kVecElems == 0, "hidden size must be a multiple of 16 bytes");
  static constexpr int kVecs = kHidden / kVecElems;
  // 2 vectors per thread (measured on H100 at 1..4096 rows of 4096 bf16: faster than 1, 4 or 8
  // at every size; with the weight, 4 independent 16-byte loads per thread), at most 1024
  // threads, whole warps.
  static constexpr int kVecPerThread =
      kVPT > 0 ? kVPT : (kVecs > 2048 ? kVecs / 1024 + (kVecs % 1024 != 0) : (kVecs >= 64 ? 2 : 1));
  static constexpr int kThreadsRaw = (kVecs + kVecPerThread - 1) / kVecPerThread;
  static constexpr int kThreads = ((kThreadsRaw + 31) / 32) * 32;
};

// kGemma: vLLM's GemmaRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w) in fp32, rounded once at
// the end; with a residual, x + residual is rounded to T first and the norm is of that value.
template <int kHidden, class T, bool kFusedAdd, int kVPT = 0, bool kGemma = false>
__global__ void __launch_bounds__(RmsNormShape<kHidden, T, kVPT>::kThreads)
rms_norm_kernel(T* __restrict__ out, int64_t out_stride, const T* __restrict__ x, int64_t x_stride,
                T* __restrict__ residual, int64_t res_stride, const T* __restrict__ weight, int64_t rows, float eps) {
  using S = RmsNormShape<kHidden, T, kVPT>;
  constexpr int kN = S::kVecElems;
  constexpr int kV = S::kVecPerThread;
  __shared__ float scratch[32];

  // Rows blockIdx.x, blockIdx.x + gridDim.x, ...; the loads of the next row are issued before
  // the reduction and stores of the current one (with grid = rows the loop runs once).
  Vec16<T> v[kV], r[kV], w[kV];
  int64_t row = blockIdx.x;
  auto load_row = [&](int64_t rw, Vec16<T>(&dv)[kV], Vec16<T>(&dr)[kV]) {
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = threadIdx.x + i * S::kThreads;
      if (vi < S::kVecs) {
        dv[i] = load16_stream(x + rw * x_stride + vi * kN);
        if constexpr (kFusedAdd) dr[i] = load16_stream(residual + rw * res_stride + vi * kN);
      }
    }
  };
  load_row(row, v, r);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = threadIdx.x + i * S::kThreads;
    if (vi < S::kVecs) w[i] = load16(weight + vi * kN);
  }
  while (true) {
    const int64_t next = row + gridDim.x;
    Vec16<T> vn[kV], rn[kV];
    if (next < rows) load_row(next, vn, rn);
    float sumsq = 0.f;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = threadIdx.x + i * S::kThreads;
      if (vi < S::kVecs) {
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          float z = to_float(v[i].v[j]);
          if constexpr (kFusedAdd) {
            z += to_float(r[i].v[j]);
            v[i].v[j] = from_float<T>(z);  // residual is kept in the model dtype, as in vLLM
            if constexpr (kGemma) z = to_float(v[i].v[j]);
          }
          sumsq += z * z;
        }
        if constexpr (kFusedAdd) store16(residual + row * res_stride + vi * kN, v[i]);
      }
    }
    const float total = block_sum<S::kThreads>(sumsq, scratch);
    const float inv_rms = rsqrtf(total / static_cast<float>(kHidden) + eps);
    T* orow = out + row * out_stride;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = threadIdx.x + i * S::kThreads;
      if (vi < S::kVecs) {
        Vec16<T> o;
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          if constexpr (kGemma) {
            o.v[j] = from_float<T>(to_float(v[i].v[j]) * inv_rms * (1.f + to_float(w[i].v[j])));
          } else {
            // vLLM rounds x * inv_rms to the model dtype before the weight multiply.
            const float normed = to_float(from_float<T>(to_float(v[i].v[j]) * inv_rms));
            o.v[j] = from_float<T>(normed * to_float(w[i].v[j]));
          }
        }
        store16(orow + vi * kN, o);
      }
    }
    if (next >= rows) break;
    row = next;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      v[i] = vn[i];
      if constexpr (kFusedAdd) r[i] = rn[i];
    }
  }
}

/// Grid of the row kernels: kBlocksPerSM = 0: one block per row; > 0: at most that many blocks
/// per SM, each striding over rows; -1: the default (below). Default one block per row: measured
/// on H100 (results_h100.txt run 4, h4096) the persistent grid with next-row prefetch was no
/// faster at 256/4096 rows (2, 4, 6, 8 blocks/SM: t4096 29.9 / 27.8 / 28.1 / 27.3 us vs 27.9) and
/// slower at 16384 (97.8-104.5 vs 96.4 us; fused add 190-195 vs 184).
template <int kBlocksPerSM> inline unsigned rms_norm_grid(int64_t rows) {
  constexpr int kDefault = 0;
  constexpr int k = kBlocksPerSM < 0 ? kDefault : kBlocksPerSM;
  if constexpr (k == 0) {
    return static_cast<unsigned>(rows);
  } else {
    return static_cast<unsigned>(std::min<int64_t>(rows, int64_t(k) * sm_count()));
  }
}

}  // namespace detail

/// out[r, :] = rmsnorm(x[r, :]) * weight for r < rows (kGemma: * (1 + weight), GemmaRMSNorm).
/// Row strides in elements (16-byte aligned). kVPT forces the 16-byte vectors per thread (0:
/// default) and kBlocksPerSM the grid (-1: default, 0: one block per row, k: k blocks per SM
/// striding over rows); for tuning only.
template <int kHidden, class T, int kVPT = 0, int kBlocksPerSM = -1, bool kGemma = false>
void rms_norm(T* out, int64_t out_stride, const T* x, int64_t x_stride, const T* weight, int64_t rows, float eps,
              cudaStream_t stream) {
  if (rows == 0) return;
  using S = detail::RmsNormShape<kHidden, T, kVPT>;
  detail::rms_norm_kernel<kHidden, T, false, kVPT, kGemma>
      <<<detail::rms_norm_grid<kBlocksPerSM>(rows), S::kThreads, 0, stream>>>(out, out_stride, x, x_stride, nullptr, 0,
                                                                              weight, rows, eps);
}

/// residual += x (rounded to T); x = rmsnorm(residual) * weight. In place, as vLLM's kernel.
template <int kHidden, class T, int kVPT = 0, int kBlocksPerSM = -1, bool kGemma = false>
void fused_add_rms_norm(T* x, int64_t x_stride, T* residual, int64_t res_stride, const T* weight, int64_t rows,
                        float eps, cudaStream_t stream) {
  if (rows == 0) return;
  using S = detail::RmsNormShape<kHidden, T, kVPT>;
  detail::rms_norm_kernel<kHidden, T, true, kVPT, kGemma>
      <<<detail::rms_norm_grid<kBlocksPerSM>(rows), S::kThreads, 0, stream>>>(x, x_stride, x, x_stride, residual,
                                                                              res_stride, weight, rows, eps);
}

}  // namespace fk::kernels
