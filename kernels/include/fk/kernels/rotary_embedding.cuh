// Rotary position embedding applied in place to query and key (vLLM `rotary_embedding`
// semantics) in one launch, specialised on the head size, rotary dim, style and head counts.
// cos_sin_cache is fp32 [max_position, rotary_dim]: cos in the first rotary_dim/2 columns, sin
// in the last. Rotation in fp32 with the fp32 cache, rounded once to the model dtype.
// Neox style rotates (x[i], x[i + rot/2]); GPT-J style rotates (x[2i], x[2i+1]). Elements of a
// head beyond rotary_dim are left untouched.
//
// Layout: one block per token. A lane owns one 16-byte slice of a head's rotary part (neox:
// the slice at i and its partner at i + rot/2, i.e. two vectors; gptj: one vector of pairs) and
// the matching cos/sin values, which it loads once (fp32, 16-byte loads) and reuses for
// kHeadsPerThread heads (q and k heads form one list of Hq + Hkv heads). All q/k loads of a
// thread are issued before the position-dependent cos/sin loads complete.
// Launch: head 128 bf16 neox -> 8 lanes per head; Llama (32 + 8 heads): 2 heads per thread,
// 160 threads per block, 4 independent 16-byte loads per thread; grid = num_tokens.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <int kC> __device__ __forceinline__ void load_f32s(const float* __restrict__ p, float (&dst)[kC]) {
  if constexpr (kC % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kC / 4; ++i) {
      const float4 t = __ldg(reinterpret_cast<const float4*>(p) + i);
      dst[4 * i] = t.x, dst[4 * i + 1] = t.y, dst[4 * i + 2] = t.z, dst[4 * i + 3] = t.w;
    }
  } else if constexpr (kC % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kC / 2; ++i) {
      const float2 t = __ldg(reinterpret_cast<const float2*>(p) + i);
      dst[2 * i] = t.x, dst[2 * i + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kC; ++i) dst[i] = __ldg(p + i);
  }
}

template <class T, int kHeadSize, int kRotDim, bool kNeox, int kHq, int kHkv, int kHPT = 0> struct RopeShape {
  static constexpr int kN = Vec16<T>::kN;
  static_assert(kRotDim <= kHeadSize && kRotDim % 2 == 0, "rotary_dim must be even and <= head_size");
  static_assert(kHeadSize % kN == 0, "head_size must be a multiple of 16 bytes");
  static_assert(kNeox ? (kRotDim / 2) % kN == 0 : kRotDim % kN == 0,
                "the rotated halves must be whole 16-byte vectors");
  static constexpr int kLanes = kNeox ? kRotDim / 2 / kN : kRotDim / kN;  // lanes per head
  static constexpr int kC = kNeox ? kN : kN / 2;                          // cos (and sin) values per lane
  static constexpr int kH = kHq + kHkv;
  // Two heads per thread for even head counts; odd counts too once one head per thread would
  // need more than 512 threads (MLA: 128 query heads + 1 latent key head; the last thread's
  // second head is out of range and skipped).
  static constexpr int kHeadsPerThread =
      kHPT > 0 ? kHPT : (((kH % 2 == 0 && kH >= 4) || kH * kLanes > 512) ? 2 : 1);
  static constexpr int kGroups = (kH + kHeadsPerThread - 1) / kHeadsPerThread;
  static constexpr int kThreads = kLanes * kGroups;
  static_assert(kThreads <= 1024, "too many heads for one block per token");
};

/// Multimodal rope: which position (0 temporal, 1 height, 2 width) rotary frequency f takes its angle
/// from, for sections (kS0, kS1, kS2): consecutive, or interleaved (f % 3 picks the axis while the
/// height / width sections last).
template <int kS0, int kS1, int kS2, bool kInterleaved> __device__ __forceinline__ int mrope_axis(int f) {
  if constexpr (kInterleaved) {
    const int m = f % 3;
    return (m == 1 && f < 3 * kS1) ? 1 : (m == 2 && f < 3 * kS2) ? 2 : 0;
  } else {
    return f < kS0 ? 0 : (f < kS0 + kS1 ? 1 : 2);
  }
}

/// kMrope (kS0 + kS1 + kS2 > 0): positions are [3, num_tokens] rows pos_axis_stride apart (0: one
/// row read three times, a text-only step), frequency f rotating by the row mrope_axis(f).
template <class T, int kHeadSize, int kRotDim, bool kNeox, int kHq, int kHkv, int kHPTForce, int kS0 = 0, int kS1 = 0,
          int kS2 = 0, bool kInterleaved = false>
__global__ void __launch_bounds__(RopeShape<T, kHeadSize, kRotDim, kNeox, kHq, kHkv, kHPTForce>::kThreads)
rotary_embedding_kernel(const int64_t* __restrict__ positions, T* __restrict__ query, int64_t q_stride,
                        T* __restrict__ key, int64_t k_stride, const float* __restrict__ cos_sin_cache,
                        int64_t q_head_stride, int64_t k_head_stride, const int* __restrict__ pos_offset,
                        int64_t pos_axis_stride = 0) {
  constexpr bool kMrope = kS0 + kS1 + kS2 > 0;
  static_assert(!kMrope || kS0 + kS1 + kS2 == kRotDim / 2, "mrope sections must cover rotary_dim / 2 frequencies");
  using S = RopeShape<T, kHeadSize, kRotDim, kNeox, kHq, kHkv, kHPTForce>;
  constexpr int kN = S::kN, kC = S::kC, kHPT = S::kHeadsPerThread;
  constexpr int kVecs = kNeox ? 2 : 1;  // vectors per (lane, head)
  const int64_t tok = blockIdx.x;
  const int lane = threadIdx.x % S::kLanes;
  const int group = threadIdx.x / S::kLanes;

  const int64_t pos = __ldg(positions + tok) + (pos_offset ? __ldg(pos_offset) : 0);
  int64_t pos_h = pos, pos_w = pos;  // mrope: the height and width positions (selects, no local array)
  if constexpr (kMrope) {
    pos_h = __ldg(positions + pos_axis_stride + tok);
    pos_w = __ldg(positions + 2 * pos_axis_stride + tok);
  }
  auto axis_pos = [&](int a) { return a == 0 ? pos : (a == 1 ? pos_h : pos_w); };

  T* ptr[kHPT];
  Vec16<T> v[kHPT][kVecs];
#pragma unroll
  for (int j = 0; j < kHPT; ++j) {
    const int h = group + j * S::kGroups;
    ptr[j] = nullptr;
    if (h < S::kH) {
      ptr[j] = (h < kHq ? query + tok * q_stride + h * q_head_stride : key + tok * k_stride + (h - kHq) * k_head_stride) +
               lane * kN;
      v[j][0] = load16_stream(ptr[j]);
      if constexpr (kNeox) v[j][1] = load16_stream(ptr[j] + kRotDim / 2);
    }
  }
  float cs[kC], sn[kC];
  if constexpr (!kMrope) {
    const float* crow = cos_sin_cache + pos * kRotDim;
    load_f32s<kC>(crow + lane * kC, cs);
    load_f32s<kC>(crow + kRotDim / 2 + lane * kC, sn);
  } else if constexpr (!kInterleaved && kS0 % kC == 0 && kS1 % kC == 0) {
    // Every lane's frequencies lie in one section (Qwen2-VL's 16/24/24 with 8 per lane): one row, vector loads.
    const float* crow = cos_sin_cache + axis_pos(mrope_axis<kS0, kS1, kS2, false>(lane * kC)) * kRotDim;
    load_f32s<kC>(crow + lane * kC, cs);
    load_f32s<kC>(crow + kRotDim / 2 + lane * kC, sn);
  } else {
#pragma unroll
    for (int e = 0; e < kC; ++e) {
      const int f = lane * kC + e;
      const float* crow = cos_sin_cache + axis_pos(mrope_axis<kS0, kS1, kS2, kInterleaved>(f)) * kRotDim;
      cs[e] = __ldg(crow + f);
      sn[e] = __ldg(crow + kRotDim / 2 + f);
    }
  }

#pragma unroll
  for (int j = 0; j < kHPT; ++j) {
    if (ptr[j] == nullptr) continue;
    if constexpr (kNeox) {
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        const float x1 = to_float(v[j][0].v[e]), x2 = to_float(v[j][1].v[e]);
        v[j][0].v[e] = from_float<T>(x1 * cs[e] - x2 * sn[e]);
        v[j][1].v[e] = from_float<T>(x2 * cs[e] + x1 * sn[e]);
      }
      store16(ptr[j], v[j][0]);
      store16(ptr[j] + kRotDim / 2, v[j][1]);
    } else {
#pragma unroll
      for (int p = 0; p < kN / 2; ++p) {
        const float x1 = to_float(v[j][0].v[2 * p]), x2 = to_float(v[j][0].v[2 * p + 1]);
        v[j][0].v[2 * p] = from_float<T>(x1 * cs[p] - x2 * sn[p]);
        v[j][0].v[2 * p + 1] = from_float<T>(x2 * cs[p] + x1 * sn[p]);
      }
      store16(ptr[j], v[j][0]);
    }
  }
}

/// LongRoPE's table choice (vLLM Phi3LongRoPEScaledRotaryEmbedding): *offset = original_max when
/// any position exceeds it (the whole batch then reads the long table), else 0. One block.
template <class P>  // a template (not an inline function) so that each translation unit may hold it
__global__ void __launch_bounds__(1024) longrope_offset_kernel(const P* __restrict__ positions, int64_t n,
                                                               int64_t original_max, int* __restrict__ offset) {
  int any = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) any |= __ldg(positions + i) > original_max;
  any = __syncthreads_or(any);
  if (threadIdx.x == 0) *offset = any ? static_cast<int>(original_max) : 0;
}

}  // namespace detail

/// *offset = original_max if any of positions[0, n) > original_max, else 0 (LongRoPE).
inline void longrope_offset(const int64_t* positions, int64_t n, int64_t original_max, int* offset, cudaStream_t stream) {
  detail::longrope_offset_kernel<int64_t><<<1, 1024, 0, stream>>>(positions, n, original_max, offset);
}

/// In place: query [T, Hq*head_size] (row stride q_stride) and key [T, Hkv*head_size] (row
/// stride k_stride) rotated by cos_sin_cache[positions[t]]. Strides in elements, 16-byte aligned.
/// Heads are q_head_stride / k_head_stride elements apart (default head_size; MLA's q_pe heads
/// sit nope + rope apart inside q). The rotated part of a head is its first rotary_dim elements.
/// kHPT forces the heads per thread (0: default); for tuning only. pos_offset (device, may be
/// null) is added to every position (LongRoPE's table offset, from longrope_offset).
template <class T, int kHeadSize, int kRotDim, bool kNeox, int kHq, int kHkv, int kHPT = 0>
void rotary_embedding(const int64_t* positions, T* query, int64_t q_stride, T* key, int64_t k_stride,
                      const float* cos_sin_cache, int64_t num_tokens, cudaStream_t stream,
                      int64_t q_head_stride = kHeadSize, int64_t k_head_stride = kHeadSize,
                      const int* pos_offset = nullptr) {
  if (num_tokens == 0) return;
  using S = detail::RopeShape<T, kHeadSize, kRotDim, kNeox, kHq, kHkv, kHPT>;
  detail::rotary_embedding_kernel<T, kHeadSize, kRotDim, kNeox, kHq, kHkv, kHPT>
      <<<static_cast<unsigned>(num_tokens), S::kThreads, 0, stream>>>(positions, query, q_stride, key, k_stride,
                                                                      cos_sin_cache, q_head_stride, k_head_stride,
                                                                      pos_offset);
}

/// Multimodal rope (vLLM MRotaryEmbedding) in place: as rotary_embedding, with positions [3, T]
/// (temporal, height, width rows pos_axis_stride elements apart; 0: [T], text only) and frequency f
/// rotated by the position its section names (mrope_axis).
template <class T, int kHeadSize, int kRotDim, bool kNeox, int kHq, int kHkv, int kS0, int kS1, int kS2, bool kInterleaved>
void mrope(const int64_t* positions, int64_t pos_axis_stride, T* query, int64_t q_stride, T* key, int64_t k_stride,
           const float* cos_sin_cache, int64_t num_tokens, cudaStream_t stream, int64_t q_head_stride = kHeadSize,
           int64_t k_head_stride = kHeadSize) {
  if (num_tokens == 0) return;
  using S = detail::RopeShape<T, kHeadSize, kRotDim, kNeox, kHq, kHkv, 0>;
  detail::rotary_embedding_kernel<T, kHeadSize, kRotDim, kNeox, kHq, kHkv, 0, kS0, kS1, kS2, kInterleaved>
      <<<static_cast<unsigned>(num_tokens), S::kThreads, 0, stream>>>(positions, query, q_stride, key, k_stride,
                                                                      cos_sin_cache, q_head_stride, k_head_stride, nullptr,
                                                                      pos_axis_stride);
}

}  // namespace fk::kernels
