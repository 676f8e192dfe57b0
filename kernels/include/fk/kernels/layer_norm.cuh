// LayerNorm with and without bias, and residual add + LayerNorm, specialised on the hidden size
// (torch.nn.LayerNorm semantics: mean and variance in fp32, (x - mean) * rstd * w + b computed in
// fp32 and rounded once; the fused form rounds x + residual to the model dtype first, as the
// eager `hidden_states = attn_output + hidden_states` of HF encoders does, and normalises that).
//
// Note [LayerNorm kernel]
// One block per row. Each thread holds its 16-byte vectors of the row in registers: the row is
// read from DRAM once and written once, however many passes the statistics take. The mean and
// the variance are two block reductions over the registers (sum of x, then sum of (x - mean)^2):
// the two-pass variance is as exact as Welford's and costs one more reduction, no more memory
// traffic. The weight and bias loads are issued with the row's before the first reduction, so
// they are off the critical path. Launch shape as RMSNorm's: 4096 bf16 -> 256 threads x 2 vectors.
// Narrow rows (at most 160 vectors: 1280 bf16, the encoders' and vision towers' widths) take one
// warp per row instead, 8 rows per 256-thread block: the reductions are warp shuffles (no shared
// memory, no barrier), and a block holds 8 rows in flight where a row-per-block launch of 64
// threads held one (H100, 2026-11-26: the block-per-row kernel reached 35% of copy bandwidth at
// 4096 rows of 768 bf16 and 64% at 16384).
#pragma once

#include "fk/kernels/common.cuh"
#include "fk/kernels/rms_norm.cuh"

namespace fk::kernels {

namespace detail {

// The launch shape of RMSNorm (fk/kernels/rms_norm.cuh): the same row-in-registers layout.
template <int kHidden, class T> using LayerNormShape = RmsNormShape<kHidden, T>;

// One row, held in registers: the thread with index `tid` of the kStride threads that share the
// row owns its vectors tid, tid + kStride, ... (at most kV); `sum` reduces a float over those
// threads (a block or a warp), every thread getting the result.
template <int kHidden, class T, bool kBias, bool kFusedAdd, int kStride, int kV, class Sum>
__device__ __forceinline__ void layer_norm_row(T* __restrict__ out, T* __restrict__ residual_out, const T* __restrict__ x,
                                               const T* __restrict__ residual, const T* __restrict__ weight,
                                               const T* __restrict__ bias, int tid, float eps, Sum sum_of) {
  constexpr int kN = Vec16<T>::kN;
  constexpr int kVecs = kHidden / kN;
  Vec16<T> v[kV], r[kV], w[kV], b[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = tid + i * kStride;
    if (vi < kVecs) {
      v[i] = load16_stream(x + vi * kN);
      if constexpr (kFusedAdd) r[i] = load16_stream(residual + vi * kN);
    }
  }
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = tid + i * kStride;
    if (vi < kVecs) {
      w[i] = load16(weight + vi * kN);
      if constexpr (kBias) b[i] = load16(bias + vi * kN);
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = tid + i * kStride;
    if (vi < kVecs) {
      if constexpr (kFusedAdd) {
#pragma unroll
        for (int j = 0; j < kN; ++j) v[i].v[j] = from_float<T>(to_float(v[i].v[j]) + to_float(r[i].v[j]));
        store16(residual_out + vi * kN, v[i]);
      }
#pragma unroll
      for (int j = 0; j < kN; ++j) sum += to_float(v[i].v[j]);
    }
  }
  const float mean = sum_of(sum) / static_cast<float>(kHidden);
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    if (tid + i * kStride < kVecs) {
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float d = to_float(v[i].v[j]) - mean;
        sq += d * d;
      }
    }
  }
  const float rstd = rsqrtf(sum_of(sq) / static_cast<float>(kHidden) + eps);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = tid + i * kStride;
    if (vi < kVecs) {
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        float y = (to_float(v[i].v[j]) - mean) * rstd * to_float(w[i].v[j]);
        if constexpr (kBias) y += to_float(b[i].v[j]);
        o.v[j] = from_float<T>(y);
      }
      store16(out + vi * kN, o);
    }
  }
}

// One block per row.
template <int kHidden, class T, bool kBias, bool kFusedAdd>
__global__ void __launch_bounds__(LayerNormShape<kHidden, T>::kThreads)
layer_norm_kernel(T* __restrict__ out, T* __restrict__ residual_out, const T* __restrict__ x, int64_t x_stride,
                  const T* __restrict__ residual, int64_t res_stride, const T* __restrict__ weight,
                  const T* __restrict__ bias, float eps) {
  using S = LayerNormShape<kHidden, T>;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  layer_norm_row<kHidden, T, kBias, kFusedAdd, S::kThreads, S::kVecPerThread>(
      out + row * kHidden, kFusedAdd ? residual_out + row * kHidden : nullptr, x + row * x_stride,
      kFusedAdd ? residual + row * res_stride : nullptr, weight, bias, threadIdx.x, eps,
      [&](float v) { return block_sum<S::kThreads>(v, scratch); });
}

/// Rows narrow enough for one warp each (Note [LayerNorm kernel]).
template <int kHidden, class T> struct LayerNormWarpShape {
  static constexpr int kN = Vec16<T>::kN;
  static constexpr int kVecs = kHidden / kN;
  static constexpr int kVecPerLane = (kVecs + 31) / 32;
  static constexpr bool kUse = kHidden % kN == 0 && kVecs <= 160;
  static constexpr int kRowsPerBlock = 8;
};

// One warp per row, kRowsPerBlock rows per block.
template <int kHidden, class T, bool kBias, bool kFusedAdd>
__global__ void __launch_bounds__(256)
layer_norm_warp_kernel(T* __restrict__ out, T* __restrict__ residual_out, const T* __restrict__ x, int64_t x_stride,
                       const T* __restrict__ residual, int64_t res_stride, const T* __restrict__ weight,
                       const T* __restrict__ bias, int64_t rows, float eps) {
  using S = LayerNormWarpShape<kHidden, T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * S::kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // a whole warp: the reductions are shuffles, no barrier
  layer_norm_row<kHidden, T, kBias, kFusedAdd, 32, S::kVecPerLane>(
      out + row * kHidden, kFusedAdd ? residual_out + row * kHidden : nullptr, x + row * x_stride,
      kFusedAdd ? residual + row * res_stride : nullptr, weight, bias, threadIdx.x % 32, eps,
      [](float v) { return warp_sum(v); });
}

}  // namespace detail

/// out[r, :] = (x[r, :] - mean) * rstd * weight (+ bias) for r < rows; out is contiguous
/// [rows, kHidden], x has row stride x_stride (elements, 16-byte aligned). bias may be null only
/// when kBias is false.
template <int kHidden, class T, bool kBias>
void layer_norm(T* out, const T* x, int64_t x_stride, const T* weight, const T* bias, int64_t rows, float eps,
                cudaStream_t stream) {
  if (rows == 0) return;
  using W = detail::LayerNormWarpShape<kHidden, T>;
  if constexpr (W::kUse) {
    detail::layer_norm_warp_kernel<kHidden, T, kBias, false><<<ceil_div(rows, W::kRowsPerBlock), 256, 0, stream>>>(
        out, nullptr, x, x_stride, nullptr, 0, weight, bias, rows, eps);
  } else {
    using S = detail::LayerNormShape<kHidden, T>;
    detail::layer_norm_kernel<kHidden, T, kBias, false>
        <<<static_cast<unsigned>(rows), S::kThreads, 0, stream>>>(out, nullptr, x, x_stride, nullptr, 0, weight, bias, eps);
  }
}

/// residual_out = x + residual (rounded to T); out = layer_norm(residual_out). out and
/// residual_out are contiguous [rows, kHidden]; they may not alias the inputs.
template <int kHidden, class T, bool kBias>
void fused_add_layer_norm(T* out, T* residual_out, const T* x, int64_t x_stride, const T* residual, int64_t res_stride,
                          const T* weight, const T* bias, int64_t rows, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  using W = detail::LayerNormWarpShape<kHidden, T>;
  if constexpr (W::kUse) {
    detail::layer_norm_warp_kernel<kHidden, T, kBias, true><<<ceil_div(rows, W::kRowsPerBlock), 256, 0, stream>>>(
        out, residual_out, x, x_stride, residual, res_stride, weight, bias, rows, eps);
  } else {
    using S = detail::LayerNormShape<kHidden, T>;
    detail::layer_norm_kernel<kHidden, T, kBias, true><<<static_cast<unsigned>(rows), S::kThreads, 0, stream>>>(
        out, residual_out, x, x_stride, residual, res_stride, weight, bias, eps);
  }
}

}  // namespace fk::kernels
