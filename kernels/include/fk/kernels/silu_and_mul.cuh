// SiluAndMul (vLLM `silu_and_mul`): out[t, i] = silu(x[t, i]) * x[t, I + i], specialised on the
// intermediate size I. As in vLLM, silu is computed in fp32 and rounded to the model dtype
// before the multiply (fast exp and divide: the result is rounded to bf16/f16 anyway).
//
// Layout: the output is a flat list of T * I / (16 / sizeof(T)) 16-byte vectors (32-bit
// indices); a thread owns kVecPerThread of them per step, kThreads apart (coalesced), and issues
// all 2 * kVecPerThread loads (gate and up halves) before computing.
// Launch: 128 threads x 1 vector, exact grid (one step per block) at every size: 1 token of
// I = 14336 spreads over 14 SMs. Measured on H100 (bench/micro/results_h100.txt, run 4, cold L2,
// I 14336): t256 12.1 us, t4096 122.1 us (2.89 TB/s), t16384 473 us (2.98 TB/s); the former
// resident grid of 256 x 4 striding was 13.5 / 129.9 / 504 us, with next-step prefetch 13.0 /
// 128.5 / 502, and 256 x 4 exact 13.8 / 124.0 / 476. Streaming stores (st.global.cs) were slower.
//
// SwiGLU-OAI (vLLM `swigluoai_and_mul`, gpt-oss experts): the gate and up halves are
// *interleaved* (gate = x[t, 2i], up = x[t, 2i + 1]), gate is clamped from above at `limit`, up
// to [-limit, limit], and out[t, i] = (up + 1) * gate * sigmoid(alpha * gate), all in fp32 and
// rounded once (vLLM's kernel; HF GptOssExperts._apply_gate). Same launch as silu_and_mul: one
// 16-byte output vector per thread, read as the two adjacent 16-byte input vectors it comes from.
#pragma once

#include <algorithm>

#include "fk/kernels/activation.cuh"  // GatedAct, gate_act
#include "fk/kernels/common.cuh"
#include "fk/kernels/launch_util.cuh"

namespace fk::kernels {

namespace detail {

template <class T, int kI, int kVecPerThread, int kThreads, bool kPrefetch = false, bool kStreamStore = false,
          GatedAct kAct = GatedAct::kSilu>
__global__ void __launch_bounds__(kThreads)
silu_and_mul_kernel(T* __restrict__ out, int64_t out_stride, const T* __restrict__ x, int64_t x_stride,
                    uint32_t total) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kI % kN == 0, "intermediate size must be a multiple of 16 bytes");
  constexpr uint32_t kRowVecs = kI / kN;
  constexpr uint32_t kStep = kThreads * kVecPerThread;
  const uint32_t stride = gridDim.x * kStep;
  Vec16<T> g[kVecPerThread], u[kVecPerThread];
  auto load = [&](uint32_t b, Vec16<T>(&dg)[kVecPerThread], Vec16<T>(&du)[kVecPerThread]) {
#pragma unroll
    for (int i = 0; i < kVecPerThread; ++i) {
      const uint32_t idx = b + i * kThreads;
      if (idx < total) {
        const uint32_t row = idx / kRowVecs, c = idx - row * kRowVecs;
        const T* p = x + row * x_stride + c * kN;
        dg[i] = load16_stream(p);
        du[i] = load16_stream(p + kI);
      }
    }
  };
  uint32_t base = blockIdx.x * kStep + threadIdx.x;
  if (kPrefetch && base < total) load(base, g, u);
  for (; base < total; base += stride) {
    Vec16<T> gn[kVecPerThread], un[kVecPerThread];
    if constexpr (kPrefetch) {
      if (base + stride < total) load(base + stride, gn, un);
    } else {
      load(base, g, u);
    }
#pragma unroll
    for (int i = 0; i < kVecPerThread; ++i) {
      const uint32_t idx = base + i * kThreads;
      if (idx < total) {
        const uint32_t row = idx / kRowVecs, c = idx - row * kRowVecs;
        Vec16<T> o;
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          const float a = to_float(g[i].v[j]);
          const float act = to_float(from_float<T>(gate_act<kAct>(a)));
          o.v[j] = from_float<T>(act * to_float(u[i].v[j]));
        }
        T* dst = out + row * out_stride + c * kN;
        if constexpr (kStreamStore) {
          __stcs(reinterpret_cast<uint4*>(dst), *reinterpret_cast<const uint4*>(&o));
        } else {
          store16(dst, o);
        }
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int i = 0; i < kVecPerThread; ++i) g[i] = gn[i], u[i] = un[i];
    }
  }
}

template <class T, int kI, int kThreads>
__global__ void __launch_bounds__(kThreads)
swigluoai_and_mul_kernel(T* __restrict__ out, int64_t out_stride, const T* __restrict__ x, int64_t x_stride,
                         uint32_t total, float alpha, float limit) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kI % kN == 0, "intermediate size must be a multiple of 16 bytes");
  constexpr uint32_t kRowVecs = kI / kN;
  const uint32_t idx = blockIdx.x * kThreads + threadIdx.x;
  if (idx >= total) return;
  const uint32_t row = idx / kRowVecs, c = idx - row * kRowVecs;
  const T* p = x + row * x_stride + c * (2 * kN);  // 2 kN interleaved inputs -> kN outputs
  Vec16<T> in[2];
  in[0] = load16_stream(p);
  in[1] = load16_stream(p + kN);
  Vec16<T> o;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int e = 2 * j;  // gate at e, up at e + 1 of the 2 kN inputs
    const float gate = fminf(to_float(in[e / kN].v[e % kN]), limit);
    const float up = fminf(fmaxf(to_float(in[e / kN].v[e % kN + 1]), -limit), limit);
    const float glu = __fdividef(gate, 1.f + __expf(-alpha * gate));
    o.v[j] = from_float<T>((up + 1.f) * glu);
  }
  store16(out + row * out_stride + c * kN, o);
}

/// Widths that are not whole 16-byte vectors (Qwen2.5-VL's vision MLP: I = 3420): kW elements per
/// thread, kW the largest power of two up to 4 dividing I, scalar loads (the rows' starts are then
/// only kW-element aligned). Same rounding as silu_and_mul_kernel.
template <class T, int kI, int kW, GatedAct kAct>
__global__ void __launch_bounds__(128)
gated_act_narrow_kernel(T* __restrict__ out, int64_t out_stride, const T* __restrict__ x, int64_t x_stride, uint32_t total) {
  static_assert(kI % kW == 0, "the chunk width must divide the intermediate size");
  constexpr uint32_t kRowChunks = kI / kW;
  const uint32_t idx = blockIdx.x * 128 + threadIdx.x;
  if (idx >= total) return;
  const uint32_t row = idx / kRowChunks, c = (idx - row * kRowChunks) * kW;
  const T* p = x + row * x_stride + c;
  T g[kW], u[kW];
#pragma unroll
  for (int j = 0; j < kW; ++j) {
    g[j] = p[j];
    u[j] = p[kI + j];
  }
  T* dst = out + row * out_stride + c;
#pragma unroll
  for (int j = 0; j < kW; ++j) {
    const float act = to_float(from_float<T>(gate_act<kAct>(to_float(g[j]))));
    dst[j] = from_float<T>(act * to_float(u[j]));
  }
}

}  // namespace detail

/// out [T, I] (row stride out_stride) = act(x[:, :I]) * x[:, I:] for x [T, 2I] (row stride
/// x_stride), act = silu (default), GELU-tanh or GELU. Strides in elements, 16-byte aligned where I
/// is a multiple of 16 bytes (else aligned to the narrow kernel's chunk). T * I / 8 must be < 2^32.
template <class T, int kI, GatedAct kAct = GatedAct::kSilu>
void silu_and_mul(T* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kN = Vec16<T>::kN;
  if constexpr (kI % kN == 0) {
    const int64_t total = num_tokens * (kI / kN);
    detail::silu_and_mul_kernel<T, kI, 1, 128, false, false, kAct>
        <<<ceil_div(total, 128), 128, 0, stream>>>(out, out_stride, x, x_stride, static_cast<uint32_t>(total));
  } else {
    constexpr int kW = kI % 4 == 0 ? 4 : (kI % 2 == 0 ? 2 : 1);
    const int64_t total = num_tokens * (kI / kW);
    detail::gated_act_narrow_kernel<T, kI, kW, kAct>
        <<<ceil_div(total, 128), 128, 0, stream>>>(out, out_stride, x, x_stride, static_cast<uint32_t>(total));
  }
}

/// SwiGLU-OAI (vLLM swigluoai_and_mul; see the top of this file): out [T, I] (row stride
/// out_stride) from x [T, 2I] (row stride x_stride) with gate = x[:, 0::2], up = x[:, 1::2];
/// gpt-oss: alpha 1.702, limit 7.0. Strides in elements, 16-byte aligned. T * I / 8 < 2^32.
template <class T, int kI>
void swigluoai_and_mul(T* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t num_tokens, float alpha,
                       float limit, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kN = Vec16<T>::kN;
  const int64_t total = num_tokens * (kI / kN);
  detail::swigluoai_and_mul_kernel<T, kI, 128>
      <<<ceil_div(total, 128), 128, 0, stream>>>(out, out_stride, x, x_stride, static_cast<uint32_t>(total), alpha, limit);
}

/// Tuning entry: kVPT vectors x kThreads threads; blocks_per_sm = 0: exact grid (one step per
/// block), k > 0: min(exact, k blocks per SM) striding; kPrefetch: next step's loads issued first.
template <class T, int kI, int kVPT, int kThreads, bool kPrefetch, bool kStreamStore>
void silu_and_mul_tune(T* out, int64_t out_stride, const T* x, int64_t x_stride, int64_t num_tokens, int blocks_per_sm,
                       cudaStream_t stream) {
  if (num_tokens == 0) return;
  const int64_t total = num_tokens * (kI / Vec16<T>::kN);
  int64_t grid = ceil_div(total, int64_t(kVPT) * kThreads);
  if (blocks_per_sm > 0) grid = std::min<int64_t>(grid, int64_t(blocks_per_sm) * sm_count());
  detail::silu_and_mul_kernel<T, kI, kVPT, kThreads, kPrefetch, kStreamStore>
      <<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(out, out_stride, x, x_stride, static_cast<uint32_t>(total));
}

}  // namespace fk::kernels
