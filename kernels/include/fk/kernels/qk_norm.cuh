// Per-head RMSNorm of the query and key heads (Qwen3's q_norm / k_norm: vLLM applies
// RMSNorm(head_dim) to q.view(T, Hq, D) and k.view(T, Hkv, D)), specialised on the head
// counts and head size. Statistics in fp32; x * inv_rms is rounded to the model dtype before
// the weight multiply, as vLLM's rms_norm kernel does. kGemma (Gemma 3's q_norm / k_norm,
// GemmaRMSNorm(head_dim)): x * inv_rms * (1 + w) in fp32, rounded once.
//
// Layout: a head of D elements is kLanes = D / (16 / sizeof(T)) 16-byte vectors (D 128 bf16:
// 16 lanes); a group of kLanes adjacent lanes owns one head and reduces with shuffles (no
// shared memory, no __syncthreads). The q heads and k heads of all tokens form one flat list
// of T * (Hq + Hkv) "units" (one launch for both tensors). Each thread handles kUnroll units
// whose loads are all issued first (kUnroll independent 16-byte loads in flight, plus its two
// weight vectors, which stay in L1).
// Launch: small (< 2 blocks of 16 units per SM, i.e. < ~106 tokens of 40 heads): the flat kernel,
// 256 threads, kUnroll 1 (1 token, 40 heads: 640 lanes busy in 3 blocks). Larger: one block per
// token with every head of it, 1 head (16 lanes, 1 vector each) per thread, 640 threads for
// 32 + 8 heads. Measured on H100 (results_h100.txt run 4, cold L2): per-token t256 5.98 us,
// t4096 33.9 us, t16384 118.4 us vs the flat kernel (kUnroll 4 when >= 2 waves) 6.50 / 35.8 /
// 129.9; 2 or 4 heads per thread were slower (t4096 34.5 / 37.3); at 1-32 tokens the flat kernel
// is faster (t1 4.10 vs 4.45 us).
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

/// One normalised element: RMSNorm rounds x * inv_rms before the weight, GemmaRMSNorm does not.
template <class T, bool kGemma> __device__ __forceinline__ T qk_norm_elem(T x, float inv_rms, T w) {
  if constexpr (kGemma) return from_float<T>(to_float(x) * inv_rms * (1.f + to_float(w)));
  else return from_float<T>(to_float(from_float<T>(to_float(x) * inv_rms)) * to_float(w));
}

template <class T, int kHq, int kHkv, int kD, int kUnroll, bool kGemma>
__global__ void __launch_bounds__(256, kUnroll > 1 ? 4 : 1)
qk_norm_kernel(T* __restrict__ q_out, int64_t q_out_stride, T* __restrict__ k_out, int64_t k_out_stride,
               const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, int64_t k_stride,
               const T* __restrict__ q_weight, const T* __restrict__ k_weight, int64_t num_tokens, float eps) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kD % kN == 0, "head_dim must be a multiple of 16 bytes");
  constexpr int kLanes = kD / kN;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0,
                "a head must be a power-of-two number of 16-byte vectors, at most a warp");
  constexpr int kH = kHq + kHkv;
  constexpr int kGroups = 256 / kLanes;  // units handled per block per unroll step

  const int lane = threadIdx.x % kLanes;
  const int group = threadIdx.x / kLanes;
  const uint32_t total = static_cast<uint32_t>(num_tokens) * kH;  // 32-bit unit indices
  const uint32_t base = blockIdx.x * (kGroups * kUnroll) + group;

  const Vec16<T> wq = load16(q_weight + lane * kN);
  const Vec16<T> wk = load16(k_weight + lane * kN);

  Vec16<T> v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t unit = base + u * kGroups;
    if (unit < total) {
      const uint32_t tok = unit / kH;
      const int h = static_cast<int>(unit - tok * kH);
      const T* src = h < kHq ? q + tok * q_stride + h * kD : k + tok * k_stride + (h - kHq) * kD;
      v[u] = load16_stream(src + lane * kN);
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) v[u].v[j] = from_float<T>(0.f);
    }
  }
  float ss[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float f = to_float(v[u].v[j]);
      s += f * f;
    }
    ss[u] = s;
  }
  // Reduce within each group of kLanes lanes (groups are aligned inside the warp).
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], o);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t unit = base + u * kGroups;
    if (unit < total) {
      const uint32_t tok = unit / kH;
      const int h = static_cast<int>(unit - tok * kH);
      const bool is_q = h < kHq;
      T* dst = is_q ? q_out + tok * q_out_stride + h * kD : k_out + tok * k_out_stride + (h - kHq) * kD;
      const float inv_rms = rsqrtf(ss[u] / static_cast<float>(kD) + eps);
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) o.v[j] = qk_norm_elem<T, kGemma>(v[u].v[j], inv_rms, is_q ? wq.v[j] : wk.v[j]);
      store16(dst + lane * kN, o);
    }
  }
}

/// One block per token (all Hq + Hkv heads of it, like rotary_embedding): kLanes lanes per head,
/// kHPT heads per thread (heads group, group + kGroups, ...), all loads issued first.
template <class T, int kHq, int kHkv, int kD, int kHPT> struct QKNormTokenShape {
  static constexpr int kLanes = kD / Vec16<T>::kN;
  static constexpr int kH = kHq + kHkv;
  static constexpr int kGroups = (kH + kHPT - 1) / kHPT;
  static constexpr int kThreads = (kLanes * kGroups + 31) / 32 * 32;
};

template <class T, int kHq, int kHkv, int kD, int kHPT, bool kGemma>
__global__ void __launch_bounds__(QKNormTokenShape<T, kHq, kHkv, kD, kHPT>::kThreads)
qk_norm_token_kernel(T* __restrict__ q_out, int64_t q_out_stride, T* __restrict__ k_out, int64_t k_out_stride,
                     const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, int64_t k_stride,
                     const T* __restrict__ q_weight, const T* __restrict__ k_weight, float eps) {
  using S = QKNormTokenShape<T, kHq, kHkv, kD, kHPT>;
  constexpr int kN = Vec16<T>::kN;
  constexpr int kLanes = S::kLanes;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0,
                "a head must be a power-of-two number of 16-byte vectors, at most a warp");
  const int64_t tok = blockIdx.x;
  const int lane = threadIdx.x % kLanes;
  const int group = threadIdx.x / kLanes;
  const int g0 = group < S::kGroups ? group : S::kH;  // padding threads own no head
  Vec16<T> v[kHPT];
#pragma unroll
  for (int j = 0; j < kHPT; ++j) {
    const int h = g0 + j * S::kGroups;
    if (h < S::kH) {
      const T* src = h < kHq ? q + tok * q_stride + h * kD : k + tok * k_stride + (h - kHq) * kD;
      v[j] = load16_stream(src + lane * kN);
    } else {
#pragma unroll
      for (int e = 0; e < kN; ++e) v[j].v[e] = from_float<T>(0.f);
    }
  }
  const Vec16<T> wq = load16(q_weight + lane * kN);
  const Vec16<T> wk = load16(k_weight + lane * kN);
  float ss[kHPT];
#pragma unroll
  for (int j = 0; j < kHPT; ++j) {
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < kN; ++e) {
      const float f = to_float(v[j].v[e]);
      s += f * f;
    }
    ss[j] = s;
  }
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) {
#pragma unroll
    for (int j = 0; j < kHPT; ++j) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
  }
#pragma unroll
  for (int j = 0; j < kHPT; ++j) {
    const int h = g0 + j * S::kGroups;
    if (h < S::kH) {
      const bool is_q = h < kHq;
      T* dst = is_q ? q_out + tok * q_out_stride + h * kD : k_out + tok * k_out_stride + (h - kHq) * kD;
      const float inv_rms = rsqrtf(ss[j] / static_cast<float>(kD) + eps);
      Vec16<T> o;
#pragma unroll
      for (int e = 0; e < kN; ++e) o.v[e] = qk_norm_elem<T, kGemma>(v[j].v[e], inv_rms, is_q ? wq.v[e] : wk.v[e]);
      store16(dst + lane * kN, o);
    }
  }
}

/// Full-width q/k norm (Note [Full-width q/k norm]): one block per (token, tensor); blockIdx.y 0
/// normalises the token's q row of kQ elements, 1 its k row of kK elements, each thread kPer
/// 16-byte vectors (loads issued first), fp32 sums reduced by shuffles then across the warps.
template <class T, int kW, int kThreads>
__device__ __forceinline__ void qk_norm_full_row(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                                                 float eps, float* warp_sums) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kW % kN == 0, "q/k widths must be multiples of 16 bytes");
  constexpr int kVecs = kW / kN;
  constexpr int kPer = (kVecs + kThreads - 1) / kThreads;
  Vec16<T> v[kPer];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (c < kVecs) {
      v[i] = load16_stream(x + c * kN);
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float f = to_float(v[i].v[j]);
        s += f * f;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  const float inv_rms = rsqrtf(total / static_cast<float>(kW) + eps);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (c < kVecs) {
      const Vec16<T> wv = load16(w + c * kN);
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) o.v[j] = qk_norm_elem<T, false>(v[i].v[j], inv_rms, wv.v[j]);
      store16(out + c * kN, o);
    }
  }
}

template <class T, int kQ, int kK, int kThreads>
__global__ void __launch_bounds__(kThreads)
qk_norm_full_kernel(T* __restrict__ q_out, int64_t q_out_stride, T* __restrict__ k_out, int64_t k_out_stride,
                    const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, int64_t k_stride,
                    const T* __restrict__ q_weight, const T* __restrict__ k_weight, float eps) {
  __shared__ float warp_sums[kThreads / 32];
  const int64_t tok = blockIdx.x;
  if (blockIdx.y == 0) qk_norm_full_row<T, kQ, kThreads>(q_out + tok * q_out_stride, q + tok * q_stride, q_weight, eps, warp_sums);
  else qk_norm_full_row<T, kK, kThreads>(k_out + tok * k_out_stride, k + tok * k_stride, k_weight, eps, warp_sums);
}

}  // namespace detail

// Note [Full-width q/k norm]
// OLMo-2 normalises q and k over all heads at once (vLLM's Olmo2Attention: q_norm =
// RMSNorm(num_heads * head_dim), k_norm = RMSNorm(num_kv_heads * head_dim), applied to the q and
// k columns of the qkv projection before rotary), so the weights are [Hq*D] and [Hkv*D] and
// each token's row is one reduction. Rounding as vLLM's RMSNorm (x * inv_rms rounded to the
// model dtype before the weight), like the per-head kind. 256 threads: 4096 bf16 elements are
// two vectors per thread.

/// q_out[t] = rmsnorm(q[t, 0:kQ]) * q_weight and k_out[t] = rmsnorm(k[t, 0:kK]) * k_weight, each row
/// normalised as a whole. Row strides in elements (16-byte aligned). Outputs must not overlap the inputs.
template <class T, int kQ, int kK>
void qk_norm_full(T* q_out, int64_t q_out_stride, T* k_out, int64_t k_out_stride, const T* q, int64_t q_stride, const T* k,
                  int64_t k_stride, const T* q_weight, const T* k_weight, int64_t num_tokens, float eps, cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kThreads = 256;
  detail::qk_norm_full_kernel<T, kQ, kK, kThreads><<<dim3(static_cast<unsigned>(num_tokens), 2), kThreads, 0, stream>>>(
      q_out, q_out_stride, k_out, k_out_stride, q, q_stride, k, k_stride, q_weight, k_weight, eps);
}

/// q_out[t, h*D:(h+1)*D] = rmsnorm(q[t, h*D:(h+1)*D]) * q_weight for every head h < Hq, and the
/// same for k with k_weight (Hkv heads). Row strides in elements (16-byte aligned; the head
/// vectors of a row are contiguous). Outputs must not overlap the inputs. kGemma: * (1 + weight).
template <class T, int kHq, int kHkv, int kD, bool kGemma = false>
void qk_norm(T* q_out, int64_t q_out_stride, T* k_out, int64_t k_out_stride, const T* q, int64_t q_stride, const T* k,
             int64_t k_stride, const T* q_weight, const T* k_weight, int64_t num_tokens, float eps,
             cudaStream_t stream) {
  if (num_tokens == 0) return;
  constexpr int kLanes = kD / Vec16<T>::kN;
  constexpr int kGroups = 256 / kLanes;
  constexpr int kH = kHq + kHkv;
  const int64_t units = num_tokens * kH;
  constexpr int kSMs = 132;
  if (units >= int64_t(kGroups) * kSMs * 2) {
    // One block per token, 1 head per thread (2 when that would exceed 1024 threads).
    constexpr int kHPT = (kLanes * kH + 1023) / 1024;
    using S = detail::QKNormTokenShape<T, kHq, kHkv, kD, kHPT>;
    detail::qk_norm_token_kernel<T, kHq, kHkv, kD, kHPT, kGemma><<<static_cast<unsigned>(num_tokens), S::kThreads, 0, stream>>>(
        q_out, q_out_stride, k_out, k_out_stride, q, q_stride, k, k_stride, q_weight, k_weight, eps);
  } else {
    detail::qk_norm_kernel<T, kHq, kHkv, kD, 1, kGemma><<<ceil_div(units, kGroups), 256, 0, stream>>>(
        q_out, q_out_stride, k_out, k_out_stride, q, q_stride, k, k_stride, q_weight, k_weight, num_tokens, eps);
  }
}

/// Tuning entry: the per-token kernel with kHPT heads per thread.
template <class T, int kHq, int kHkv, int kD, int kHPT>
void qk_norm_per_token(T* q_out, int64_t q_out_stride, T* k_out, int64_t k_out_stride, const T* q, int64_t q_stride,
                       const T* k, int64_t k_stride, const T* q_weight, const T* k_weight, int64_t num_tokens, float eps,
                       cudaStream_t stream) {
  if (num_tokens == 0) return;
  using S = detail::QKNormTokenShape<T, kHq, kHkv, kD, kHPT>;
  detail::qk_norm_token_kernel<T, kHq, kHkv, kD, kHPT, false><<<static_cast<unsigned>(num_tokens), S::kThreads, 0, stream>>>(
      q_out, q_out_stride, k_out, k_out_stride, q, q_stride, k, k_stride, q_weight, k_weight, eps);
}

}  // namespace fk::kernels
