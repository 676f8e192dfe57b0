// MoE routing kernels mirroring vLLM's ops: topk_softmax, grouped_topk (DeepSeek-V2/V3),
// moe_align_block_size and moe_sum. bf16 models, written for H100 (sm_90; needs sm_80+ for
// __reduce_max_sync).
//
// Selection keys. The top-k kernels pick experts by repeated argmax over a whole token held in
// registers. Each candidate is turned into one unsigned integer whose order is "larger value
// first, then lower expert index first": the value's IEEE bits made order-preserving (sign flip
// for positives, bit-not for negatives, -0 folded into +0) in the high bits, and (max - index) in
// the low bits. One unsigned max then yields value and index together, ties go to the lower index
// by construction, and the winner is removed by clearing the one register that equals the key
// (keys are unique). For 16-bit logits (bf16/f16) the key is 32 bits, so a whole-warp argmax is
// a single redux.sync (__reduce_max_sync); for fp32 logits it is 64 bits (shuffle butterfly).
//
// Not yet measured on H100: the launch shapes below are reasoned, not tuned
// (bench/micro/moe_routing_micro.cu times them).
#pragma once

#include <cstdint>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

// ---------------------------------------------------------------------------------------------
// Shared helpers: order-preserving keys and raw vector loads.
// ---------------------------------------------------------------------------------------------

/// Order-preserving map of a 16-bit IEEE pattern (bf16 / f16) onto [0, 0xFFFF]; -0 -> +0.
__device__ __forceinline__ uint32_t ord16(uint32_t u) {
  u = (u == 0x8000u) ? 0u : u;
  return (u & 0x8000u) ? (~u & 0xFFFFu) : (u | 0x8000u);
}
__device__ __forceinline__ uint32_t unord16(uint32_t o) { return (o & 0x8000u) ? (o & 0x7FFFu) : (~o & 0xFFFFu); }
/// Order-preserving map of fp32 bits onto uint32; -0 -> +0. Every non-NaN value maps above 0
/// (-inf -> 0x007FFFFF), so 0 serves as "removed / masked".
__device__ __forceinline__ uint32_t ord32(uint32_t u) {
  u = (u == 0x80000000u) ? 0u : u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ uint32_t unord32(uint32_t o) { return (o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o; }

/// Per logit type: raw storage, selection key, and conversions.
template <class TIn> struct RouterKey;
template <> struct RouterKey<__nv_bfloat16> {
  using Raw = uint16_t;
  using Key = uint32_t;
  static __device__ __forceinline__ float value(Raw r) { return __uint_as_float(uint32_t(r) << 16); }
  static __device__ __forceinline__ Key make(Raw r, int e) { return (ord16(r) << 16) | (0xFFFFu - uint32_t(e)); }
  static __device__ __forceinline__ float key_value(Key k) { return __uint_as_float(unord16(k >> 16) << 16); }
  static __device__ __forceinline__ int key_index(Key k) { return int(0xFFFFu - (k & 0xFFFFu)); }
};
template <> struct RouterKey<__half> {
  using Raw = uint16_t;
  using Key = uint32_t;
  static __device__ __forceinline__ float value(Raw r) { return __half2float(__ushort_as_half(r)); }
  static __device__ __forceinline__ Key make(Raw r, int e) { return (ord16(r) << 16) | (0xFFFFu - uint32_t(e)); }
  static __device__ __forceinline__ float key_value(Key k) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(unord16(k >> 16))));
  }
  static __device__ __forceinline__ int key_index(Key k) { return int(0xFFFFu - (k & 0xFFFFu)); }
};
template <> struct RouterKey<float> {
  using Raw = uint32_t;
  using Key = unsigned long long;
  static __device__ __forceinline__ float value(Raw r) { return __uint_as_float(r); }
  static __device__ __forceinline__ Key make(Raw r, int e) {
    return (Key(ord32(r)) << 32) | Key(0xFFFFFFFFu - uint32_t(e));
  }
  static __device__ __forceinline__ float key_value(Key k) { return __uint_as_float(unord32(uint32_t(k >> 32))); }
  static __device__ __forceinline__ int key_index(Key k) { return int(0xFFFFFFFFu - uint32_t(k)); }
};

/// Largest power of two <= 16 dividing `bytes`: the widest load that splits a lane's chunk.
constexpr int widest_load(int bytes) {
  int w = 16;
  while (w > 1 && bytes % w != 0) w >>= 1;
  return w;
}
template <int kW> struct LoadWord;
template <> struct LoadWord<16> { using type = uint4; };
template <> struct LoadWord<8> { using type = uint2; };
template <> struct LoadWord<4> { using type = unsigned int; };
template <> struct LoadWord<2> { using type = unsigned short; };

template <class Raw, int kN, int kAlign> struct alignas(kAlign) RawChunk {
  Raw v[kN];
};

/// kN contiguous raw elements from `src` (kW-byte aligned) with kW-byte read-only loads.
template <class Raw, int kN, int kW> __device__ __forceinline__ void load_raw(Raw (&dst)[kN], const Raw* src) {
  constexpr int kBytes = kN * static_cast<int>(sizeof(Raw));
  static_assert(kBytes % kW == 0, "chunk must split into whole loads");
  using W = typename LoadWord<kW>::type;
  RawChunk<Raw, kN, (kW > alignof(Raw) ? kW : alignof(Raw))> c;
#pragma unroll
  for (int i = 0; i < kBytes / kW; ++i) reinterpret_cast<W*>(&c)[i] = __ldg(reinterpret_cast<const W*>(src) + i);
#pragma unroll
  for (int i = 0; i < kN; ++i) dst[i] = c.v[i];
}

template <class P> inline bool aligned_to(const P* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// ---------------------------------------------------------------------------------------------
// topk_softmax
// ---------------------------------------------------------------------------------------------

/// Layout of one token's kE logits over a group of kG lanes (kG a power of two <= 32): each lane
/// owns kChunks chunks of kVPT contiguous logits, chunk c of lane l starting at expert
/// (c * kG + l) * kVPT. kVPT is 16 bytes of logits where kE allows (8 bf16: E 8 -> 1 lane per
/// token, E 128 -> 16 lanes, 2 tokens per warp; E 256 -> a full warp), else the largest power of
/// two dividing kE (E 60 -> 4 logits x 15 lanes, padded to 16 lanes). Lanes (or chunks) past kE
/// hold key 0, below every real key. kVPTForce > 0 forces kVPT (tuning: e.g. E 128 with 4 per
/// lane is one token per warp and a single redux per argmax step instead of 4 shuffle steps).
template <class TIn, int kE, int kVPTForce = 0> struct TopkSoftmaxShape {
  static constexpr int kVPT = [] {
    int v = kVPTForce > 0 ? kVPTForce : 16 / static_cast<int>(sizeof(TIn));
    while (v > 1 && kE % v != 0) v >>= 1;
    return v;
  }();
  static constexpr int kLanesNeeded = kE / kVPT;
  static constexpr int kG = [] {
    int g = 1;
    while (g < kLanesNeeded && g < 32) g <<= 1;
    return g;
  }();
  static constexpr int kChunks = (kLanesNeeded + kG - 1) / kG;
  static constexpr bool kPadded = kChunks * kG * kVPT != kE;
  static constexpr int kLoadBytes = widest_load(kVPT * static_cast<int>(sizeof(TIn)));
};

/// Max of an unsigned key over each aligned group of kG lanes. Called by all 32 lanes.
template <int kG, class Key> __device__ __forceinline__ Key group_max(Key k) {
  if constexpr (kG == 32 && sizeof(Key) == 4) {
    return __reduce_max_sync(0xffffffffu, k);  // one redux.sync for a full-warp token
  } else {
#pragma unroll
    for (int o = kG / 2; o > 0; o >>= 1) {
      const Key other = __shfl_xor_sync(0xffffffffu, k, o);
      k = other > k ? other : k;
    }
    return k;
  }
}
template <int kG> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = kG / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// One group of kG lanes per token, exact grid (no striding). The K argmax steps run on the
/// selection keys of the logits: softmax is monotone, so this is the top-K by probability with
/// the same tie rule, and the first winner is the row max the softmax needs. Weights are
/// exp(l_k - max) / sum (fp32, accurate expf and IEEE division); with kRenorm the full-row sum is
/// never needed: w_k = e_k / sum_k e_k (e_0 = 1, so the denominator is >= 1).
template <class TIn, int kE, int kK, bool kRenorm, int kLoadBytes, int kThreads, int kVPTForce = 0>
__global__ void __launch_bounds__(kThreads)
topk_softmax_kernel(float* __restrict__ topk_weights, int32_t* __restrict__ topk_ids, const TIn* __restrict__ gating,
                    int64_t gating_stride, int64_t num_tokens) {
  using S = TopkSoftmaxShape<TIn, kE, kVPTForce>;
  using KT = RouterKey<TIn>;
  using Raw = typename KT::Raw;
  using Key = typename KT::Key;
  constexpr int kG = S::kG, kVPT = S::kVPT, kC = S::kChunks;
  static_assert(kK >= 1 && kK <= kE, "need 1 <= K <= E");
  static_assert(kThreads % 32 == 0, "whole warps");

  const int lane = threadIdx.x & 31;
  const int gl = lane & (kG - 1);
  const int64_t token = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / kG;
  // Groups past the last token stay (keys 0, no loads or stores) so that every shuffle runs
  // with the whole warp; a warp with no token at all leaves.
  const int64_t warp_first = (static_cast<int64_t>(blockIdx.x) * kThreads + (threadIdx.x & ~31u)) / kG;
  if (warp_first >= num_tokens) return;
  const bool active = token < num_tokens;
  const Raw* row = reinterpret_cast<const Raw*>(gating + (active ? token : 0) * gating_stride);

  Key key[kC][kVPT];
  float val[kC][kVPT];  // only for the full-row sum (!kRenorm); dead code otherwise
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const int e0 = (c * kG + gl) * kVPT;
    if (active && (!S::kPadded || e0 < kE)) {
      Raw r[kVPT];
      load_raw<Raw, kVPT, kLoadBytes>(r, row + e0);
#pragma unroll
      for (int j = 0; j < kVPT; ++j) key[c][j] = KT::make(r[j], e0 + j), val[c][j] = KT::value(r[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kVPT; ++j) key[c][j] = 0, val[c][j] = -INFINITY;
    }
  }

  Key best[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    Key m = key[0][0];
#pragma unroll
    for (int c = 0; c < kC; ++c)
#pragma unroll
      for (int j = 0; j < kVPT; ++j) m = key[c][j] > m ? key[c][j] : m;
    m = group_max<kG>(m);
    best[k] = m;
#pragma unroll
    for (int c = 0; c < kC; ++c)
#pragma unroll
      for (int j = 0; j < kVPT; ++j)
        if (key[c][j] == m) key[c][j] = 0;
  }

  const float row_max = KT::key_value(best[0]);
  float ex[kK];
  float sel_sum = 0.f;
#pragma unroll
  for (int k = 0; k < kK; ++k) ex[k] = expf(KT::key_value(best[k]) - row_max), sel_sum += ex[k];
  float denom;
  if constexpr (kRenorm) {
    denom = sel_sum;  // vLLM divides by the selected sum when it is > 0; here it is >= 1
  } else {
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < kC; ++c)
#pragma unroll
      for (int j = 0; j < kVPT; ++j) s += expf(val[c][j] - row_max);
    denom = group_sum<kG>(s);
  }
  // Slot k is written by lane k % kG of the group (consecutive lanes -> consecutive slots).
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if (active && k % kG == gl) {
      topk_weights[token * kK + k] = ex[k] / denom;
      topk_ids[token * kK + k] = KT::key_index(best[k]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// grouped_topk
// ---------------------------------------------------------------------------------------------

/// One warp per token: lane l owns the kPer = E / 32 contiguous experts [l * kPer, (l+1) * kPer)
/// (E 256: 8 bf16 = one 16-byte load), so a group of kGS = E / kGroups experts is kLG = kGS / kPer
/// adjacent lanes (E 256 / 8 groups: 4 lanes; E 160 / 8 groups: 4 lanes x 5 experts).
template <int kE, int kGroups> struct GroupedTopkShape {
  static_assert(kE % 32 == 0, "grouped_topk: E must be a multiple of 32");
  static_assert(kE % kGroups == 0, "grouped_topk: E must split into equal groups");
  static constexpr int kPer = kE / 32;
  static constexpr int kGS = kE / kGroups;
  static_assert(kGS % kPer == 0, "grouped_topk: a group must be whole lanes (E / groups multiple of E / 32)");
  static constexpr int kLG = kGS / kPer;
  static_assert(kLG >= 1 && kLG <= 32 && (kLG & (kLG - 1)) == 0, "grouped_topk: lanes per group must be a power of two");
};

/// Steps per token (warp-wide, no shared memory):
///  1. scores: sigmoid (1 / (1 + expf(-x))) or softmax (row max by one redux on the keys,
///     warp-sum of expf(x - max), IEEE division); choice = score + bias.
///  2. group score, by a shuffle butterfly over the group's lanes: with a bias the sum of the
///     group's top-2 choices (top-2 pairs merge exactly), without one the group max (vLLM).
///  3. kept groups: every lane fetches the kGroups group scores (independent shuffles) and ranks
///     its own group (greater score, or equal score and lower index, counts ahead).
///  4. K argmax steps over the kept choices, as order-preserving 32-bit keys (masked -> 0):
///     max key by redux.sync, lowest lane holding it by ballot (lanes are in expert order), lowest
///     slot in that lane; the winning lane records score and index for output slot k.
///  5. optional renormalisation (warp sum of the chosen scores), times the scaling factor.
template <class TIn, int kE, int kK, int kGroups, int kTopKGroup, bool kSigmoid, bool kRenorm, int kLoadBytes,
          int kThreads>
__global__ void __launch_bounds__(kThreads)
grouped_topk_kernel(float* __restrict__ topk_weights, int32_t* __restrict__ topk_ids, const TIn* __restrict__ gating,
                    int64_t gating_stride, const float* __restrict__ bias, float routed_scaling_factor,
                    int64_t num_tokens) {
  using Sh = GroupedTopkShape<kE, kGroups>;
  using KT = RouterKey<TIn>;
  using Raw = typename KT::Raw;
  constexpr int kPer = Sh::kPer, kLG = Sh::kLG;
  static_assert(Sh::kGS >= 2, "grouped_topk: groups need at least 2 experts");
  static_assert(kTopKGroup >= 1 && kTopKGroup <= kGroups, "grouped_topk: 1 <= topk_group <= groups");
  static_assert(kK >= 1 && kK <= kTopKGroup * Sh::kGS, "grouped_topk: K must fit in the kept groups");
  static_assert(kK <= 32, "grouped_topk: K <= 32");
  constexpr unsigned kFull = 0xffffffffu;

  const int lane = threadIdx.x & 31;
  const int64_t token = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> 5;
  if (token >= num_tokens) return;  // whole warps
  const Raw* row = reinterpret_cast<const Raw*>(gating + token * gating_stride);

  Raw r[kPer];
  load_raw<Raw, kPer, kLoadBytes>(r, row + lane * kPer);
  float b[kPer];
  const bool has_bias = bias != nullptr;
#pragma unroll
  for (int j = 0; j < kPer; ++j) b[j] = has_bias ? __ldg(bias + lane * kPer + j) : 0.f;

  float s[kPer];
  if constexpr (kSigmoid) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[j] = 1.f / (1.f + expf(-KT::value(r[j])));
  } else {
    uint32_t mk = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const uint32_t o = ord32(__float_as_uint(KT::value(r[j])));
      mk = o > mk ? o : mk;
    }
    const float mx = __uint_as_float(unord32(__reduce_max_sync(kFull, mk)));
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[j] = expf(KT::value(r[j]) - mx), sum += s[j];
    sum = warp_sum(sum);
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[j] = s[j] / sum;
  }
  float ch[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) ch[j] = s[j] + b[j];

  float gs;
  if (has_bias) {
    float t1 = -INFINITY, t2 = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (ch[j] > t1) {
        t2 = t1, t1 = ch[j];
      } else if (ch[j] > t2) {
        t2 = ch[j];
      }
    }
#pragma unroll
    for (int o = kLG / 2; o > 0; o >>= 1) {
      const float u1 = __shfl_xor_sync(kFull, t1, o), u2 = __shfl_xor_sync(kFull, t2, o);
      const float n1 = fmaxf(t1, u1);
      t2 = fmaxf(fminf(t1, u1), fmaxf(t2, u2));
      t1 = n1;
    }
    gs = t1 + t2;
  } else {
    float m = ch[0];
#pragma unroll
    for (int j = 1; j < kPer; ++j) m = fmaxf(m, ch[j]);
#pragma unroll
    for (int o = kLG / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    gs = m;
  }

  const int g = lane / kLG;
  int rank = 0;
#pragma unroll
  for (int h = 0; h < kGroups; ++h) {
    const float o = __shfl_sync(kFull, gs, h * kLG);
    rank += (o > gs || (o == gs && h < g)) ? 1 : 0;
  }
  const bool kept = rank < kTopKGroup;

  uint32_t key[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) key[j] = kept ? ord32(__float_as_uint(ch[j])) : 0u;

  float wk[kK];
  int idk[kK];
  uint32_t won = 0;
  float wsum = 0.f;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    uint32_t lm = key[0];
#pragma unroll
    for (int j = 1; j < kPer; ++j) lm = key[j] > lm ? key[j] : lm;
    const uint32_t gm = __reduce_max_sync(kFull, lm);
    const unsigned holders = __ballot_sync(kFull, lm == gm);
    if (lane == __ffs(holders) - 1) {
      int jj = 0;
#pragma unroll
      for (int j = kPer - 1; j >= 0; --j)
        if (key[j] == gm) jj = j;
      float sw = 0.f;
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        if (j == jj) sw = s[j], key[j] = 0u;
      wk[k] = sw;
      idk[k] = lane * kPer + jj;
      won |= 1u << k;
      wsum += sw;
    }
  }
  const float denom = kRenorm ? warp_sum(wsum) : 1.f;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if ((won >> k) & 1u) {
      topk_weights[token * kK + k] = (kRenorm ? wk[k] / denom : wk[k]) * routed_scaling_factor;
      topk_ids[token * kK + k] = idk[k];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// moe_align_block_size
// ---------------------------------------------------------------------------------------------

/// Adds 1 to cnt[e] for every lane with a valid expert e (-1: none) and returns the previous
/// value, a unique rank within e. Must be called by all 32 lanes of the warp.
/// Few experts (kE <= 16): lanes of the same expert are found with one ballot per id bit plus a
/// validity ballot (warp multi-split: peers = AND over bits of the matching ballot), the lowest
/// peer does one shared atomic for the group and the others rank by popcount; plain atomics
/// would serialise on a few hot addresses (32 lanes over 8 experts). More experts: a plain shared
/// atomic per lane (few same-address conflicts).
template <int kE> __device__ __forceinline__ int rank_add(int* cnt, int e) {
  if constexpr (kE <= 16) {
    constexpr int kBits = kE <= 2 ? 1 : kE <= 4 ? 2 : kE <= 8 ? 3 : 4;
    const int lane = threadIdx.x & 31;
    unsigned peers = __ballot_sync(0xffffffffu, e >= 0);
#pragma unroll
    for (int b = 0; b < kBits; ++b) {
      const bool bit = (e >> b) & 1;
      const unsigned m = __ballot_sync(0xffffffffu, bit);
      peers &= bit ? m : ~m;
    }
    const int leader = e >= 0 ? __ffs(peers) - 1 : lane;  // a valid lane is its own peer
    int base = 0;
    if (e >= 0 && lane == leader) base = atomicAdd(&cnt[e], __popc(peers));
    base = __shfl_sync(0xffffffffu, base, leader);
    return base + __popc(peers & ((1u << lane) - 1u));
  } else {
    return e >= 0 ? atomicAdd(&cnt[e], 1) : 0;
  }
}

/// Block-wide exclusive prefix sum (kThreads whole warps); `total` gets the sum. s_warp: 32 ints.
template <int kThreads> __device__ __forceinline__ int block_exclusive_scan(int v, int* s_warp, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) s_warp[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kThreads / 32 ? s_warp[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    s_warp[lane] = w;  // inclusive warp totals
  }
  __syncthreads();
  total = s_warp[31];
  const int r = x - v + (warp > 0 ? s_warp[warp - 1] : 0);
  __syncthreads();  // s_warp may be reused
  return r;
}

/// s_off[0..kE] = exclusive prefix of the block-padded counts s_cnt[0..kE), s_off[kE] = total.
/// Thread t handles the kPerT consecutive experts [t * kPerT, ...). Ends with a barrier.
template <int kE, int kThreads>
__device__ __forceinline__ void padded_offsets(const int* s_cnt, int* s_off, int* s_warp, int block_size) {
  constexpr int kPerT = (kE + kThreads - 1) / kThreads;
  const int e0 = threadIdx.x * kPerT;
  int p[kPerT];
  int mine = 0;
#pragma unroll
  for (int i = 0; i < kPerT; ++i) {
    const int e = e0 + i;
    p[i] = e < kE ? (s_cnt[e] + block_size - 1) / block_size * block_size : 0;
    mine += p[i];
  }
  int total;
  int run = block_exclusive_scan<kThreads>(mine, s_warp, total);
#pragma unroll
  for (int i = 0; i < kPerT; ++i) {
    const int e = e0 + i;
    if (e < kE) s_off[e] = run;
    run += p[i];
  }
  if (threadIdx.x == 0) s_off[kE] = total;
  __syncthreads();
}

/// p[begin, end) = v by the `nthr` threads numbered `t`: scalar head to 16-byte alignment, int4
/// body, scalar tail. 32-bit indices (positions < 2^31): a 64-bit grid-stride loop makes the
/// compiler divide by nthr in 64 bits (a called subroutine, and spills around it).
__device__ __forceinline__ void fill_i32(int32_t* p, int begin, int end, int32_t v, int t, int nthr) {
  if (begin >= end) return;
  int32_t* a = p + begin;
  const int n = end - begin;
  int head = static_cast<int>(((16u - (reinterpret_cast<uintptr_t>(a) & 15u)) & 15u) / 4u);
  head = head < n ? head : n;
  if (t < head) a[t] = v;
  int4* body = reinterpret_cast<int4*>(a + head);
  const int nvec = (n - head) / 4;
  const int4 vv = make_int4(v, v, v, v);
  for (int i = t; i < nvec; i += nthr) body[i] = vv;
  const int tail0 = head + nvec * 4;
  if (t < n - tail0) a[tail0 + t] = v;  // at most 3
}

/// Expert of padded position pos (< s_off[kE]): the last e with s_off[e] <= pos (empty experts
/// share their successor's offset, so the last one is the owner).
template <int kE> __device__ __forceinline__ int owner_expert(const int* s_off, int pos) {
  int lo = 0, hi = kE - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (s_off[mid] <= pos) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// The padding of each expert's segment, [off_e + cnt_e, off_e+1), one warp per expert (warp
/// `w` of `nw`, global numbering), lanes over the slots.
template <int kE>
__device__ __forceinline__ void fill_segment_padding(int32_t* sorted, const int* s_off, const int* cnt, int32_t sentinel,
                                                     int w, int nw) {
  const int lane = threadIdx.x & 31;
  for (int e = w; e < kE; e += nw) {
    const int end = s_off[e + 1];
    for (int p = s_off[e] + cnt[e] + lane; p < end; p += 32) sorted[p] = sentinel;
  }
}

/// Single-block path (small numel, or no workspace). 1024 threads; the first kThreads * kItems
/// ids are held in registers with their rank from the counting pass (coalesced: item j of thread
/// t is id j * kThreads + t), so the scatter is pos = offset[e] + rank with no second atomic.
/// Ids beyond that (only without a workspace) are counted in a second pass and scattered
/// through a shared cursor that starts after the register items' ranks.
template <int kE, int kThreads, int kItems>
__global__ void __launch_bounds__(kThreads)
moe_align_single_block_kernel(int32_t* __restrict__ sorted, int32_t* __restrict__ expert_ids,
                              int32_t* __restrict__ num_post_pad, const int32_t* __restrict__ topk_ids, int32_t numel,
                              int block_size, int32_t max_padded, int32_t max_blocks) {
  constexpr int kCap = kThreads * kItems;
  __shared__ int s_cnt[kE];
  __shared__ int s_reg[kE];  // counts of the register items (overflow path only)
  __shared__ int s_off[kE + 1];
  __shared__ int s_warp[32];
  const int tid = threadIdx.x;
  for (int e = tid; e < kE; e += kThreads) s_cnt[e] = 0;
  __syncthreads();

  int id[kItems], rank[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + tid;
    int e = i < numel ? __ldg(topk_ids + i) : -1;
    id[j] = (e >= 0 && e < kE) ? e : -1;
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) rank[j] = rank_add<kE>(s_cnt, id[j]);

  const bool overflow = numel > kCap;
  if (overflow) {
    __syncthreads();
    for (int e = tid; e < kE; e += kThreads) s_reg[e] = s_cnt[e];
    __syncthreads();
    for (int b = kCap; b < numel; b += kThreads) {  // warp-uniform trip count
      const int i = b + tid;
      int e = i < numel ? __ldg(topk_ids + i) : -1;
      e = (e >= 0 && e < kE) ? e : -1;
      rank_add<kE>(s_cnt, e);
    }
  }
  __syncthreads();
  padded_offsets<kE, kThreads>(s_cnt, s_off, s_warp, block_size);
  const int total = s_off[kE];
  if (tid == 0) *num_post_pad = total;

#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if (id[j] >= 0) sorted[s_off[id[j]] + rank[j]] = j * kThreads + tid;
  if (overflow) {
    for (int e = tid; e < kE; e += kThreads) s_reg[e] += s_off[e];  // cursor
    __syncthreads();
    for (int b = kCap; b < numel; b += kThreads) {
      const int i = b + tid;
      int e = i < numel ? __ldg(topk_ids + i) : -1;
      e = (e >= 0 && e < kE) ? e : -1;
      const int pos = rank_add<kE>(s_reg, e);
      if (e >= 0) sorted[pos] = i;
    }
  }
  fill_segment_padding<kE>(sorted, s_off, s_cnt, numel, tid >> 5, kThreads / 32);
  fill_i32(sorted, total, max_padded, numel, tid, kThreads);
  const int used_blocks = total / block_size;
  for (int b = tid; b < max_blocks; b += kThreads)
    expert_ids[b] = b < used_blocks ? owner_expert<kE>(s_off, b * block_size) : -1;
}

/// Workspace of the multi-block path (ints): counts [kE] | offsets [kE + 1] | cursors [kE] | ticket.
template <int kE> struct AlignWs {
  static constexpr int kCnt = 0, kOff = kE, kCur = 2 * kE + 1, kTicket = 3 * kE + 1, kInts = 3 * kE + 2;
};

/// Multi-block pass 1: per-block shared histogram of a kThreads * kItems chunk, added to the
/// global counts (one atomic per non-empty expert per block). The last block to finish (ticket
/// after a fence) computes the padded offsets, the cursors (= offsets) and num_tokens_post_pad.
template <int kE, int kThreads, int kItems>
__global__ void __launch_bounds__(kThreads)
moe_align_count_kernel(int32_t* __restrict__ ws, int32_t* __restrict__ num_post_pad, const int32_t* __restrict__ topk_ids,
                       int32_t numel, int block_size) {
  using W = AlignWs<kE>;
  __shared__ int s_cnt[kE];
  __shared__ int s_off[kE + 1];
  __shared__ int s_warp[32];
  __shared__ int s_last;
  const int tid = threadIdx.x;
  for (int e = tid; e < kE; e += kThreads) s_cnt[e] = 0;
  __syncthreads();
  const int base = blockIdx.x * (kThreads * kItems);
  int id[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = base + j * kThreads + tid;
    const int e = i < numel ? __ldg(topk_ids + i) : -1;
    id[j] = (e >= 0 && e < kE) ? e : -1;
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) rank_add<kE>(s_cnt, id[j]);
  __syncthreads();
  for (int e = tid; e < kE; e += kThreads)
    if (s_cnt[e] != 0) atomicAdd(ws + W::kCnt + e, s_cnt[e]);
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicAdd(ws + W::kTicket, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int e = tid; e < kE; e += kThreads) s_cnt[e] = __ldcg(ws + W::kCnt + e);
  __syncthreads();
  padded_offsets<kE, kThreads>(s_cnt, s_off, s_warp, block_size);
  for (int e = tid; e <= kE; e += kThreads) ws[W::kOff + e] = s_off[e];
  for (int e = tid; e < kE; e += kThreads) ws[W::kCur + e] = s_off[e];
  if (tid == 0) *num_post_pad = s_off[kE];
}

/// Multi-block pass 2, same chunks: ranks within the block by shared atomics, one global atomic
/// per non-empty expert per block reserves the block's range in the expert's segment, then the
/// scatter. The grid also shares the sentinel padding of every segment, the sentinel tail
/// [total, max_padded) and expert_ids.
template <int kE, int kThreads, int kItems>
__global__ void __launch_bounds__(kThreads)
moe_align_scatter_kernel(int32_t* __restrict__ sorted, int32_t* __restrict__ expert_ids, int32_t* __restrict__ ws,
                         const int32_t* __restrict__ topk_ids, int32_t numel, int block_size, int32_t max_padded,
                         int32_t max_blocks) {
  using W = AlignWs<kE>;
  __shared__ int s_cnt[kE];   // block-local counts
  __shared__ int s_base[kE];  // block's range start per expert
  __shared__ int s_gcnt[kE];  // global counts
  __shared__ int s_off[kE + 1];
  const int tid = threadIdx.x;
  for (int e = tid; e < kE; e += kThreads) s_cnt[e] = 0, s_gcnt[e] = ws[W::kCnt + e];
  for (int e = tid; e <= kE; e += kThreads) s_off[e] = ws[W::kOff + e];
  __syncthreads();
  const int base = blockIdx.x * (kThreads * kItems);
  int id[kItems], rank[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = base + j * kThreads + tid;
    const int e = i < numel ? __ldg(topk_ids + i) : -1;
    id[j] = (e >= 0 && e < kE) ? e : -1;
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) rank[j] = rank_add<kE>(s_cnt, id[j]);
  __syncthreads();
  for (int e = tid; e < kE; e += kThreads)
    if (s_cnt[e] != 0) s_base[e] = atomicAdd(ws + W::kCur + e, s_cnt[e]);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if (id[j] >= 0) sorted[s_base[id[j]] + rank[j]] = base + j * kThreads + tid;

  const int gt = blockIdx.x * kThreads + tid;  // grid of < 2^31 / kItems threads
  const int nthr = gridDim.x * kThreads;
  fill_segment_padding<kE>(sorted, s_off, s_gcnt, numel, gt >> 5, nthr >> 5);
  const int total = s_off[kE];
  fill_i32(sorted, total, max_padded, numel, gt, nthr);
  const int used_blocks = total / block_size;
  for (int b = gt; b < max_blocks; b += nthr)
    expert_ids[b] = b < used_blocks ? owner_expert<kE>(s_off, b * block_size) : -1;
}

// ---------------------------------------------------------------------------------------------
// moe_sum
// ---------------------------------------------------------------------------------------------

/// One thread per 16-byte output vector; its kK input vectors (kH apart) are loaded before the
/// first add (kK independent 16-byte streaming loads in flight). fp32 sum in k order, one
/// rounding. Exact grid, 32-bit vector index (T * H / 8 < 2^32).
template <class T, int kK, int kH, int kThreads>
__global__ void __launch_bounds__(kThreads) moe_sum_kernel(T* __restrict__ out, const T* __restrict__ in, uint32_t total) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kH % kN == 0, "moe_sum: H must be a multiple of 16 bytes");
  constexpr uint32_t kRowVecs = kH / kN;
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= total) return;
  const uint32_t t = i / kRowVecs, c = i - t * kRowVecs;
  const T* p = in + static_cast<size_t>(t) * (kK * kH) + c * kN;
  Vec16<T> v[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) v[k] = load16_stream(p + static_cast<size_t>(k) * kH);
  float acc[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) acc[j] = to_float(v[0].v[j]);
#pragma unroll
  for (int k = 1; k < kK; ++k)
#pragma unroll
    for (int j = 0; j < kN; ++j) acc[j] += to_float(v[k].v[j]);
  Vec16<T> o;
#pragma unroll
  for (int j = 0; j < kN; ++j) o.v[j] = from_float<T>(acc[j]);
  store16(out + static_cast<size_t>(t) * kH + c * kN, o);
}

/// moe_sum over the slots whose topk_ids are >= 0 (Note [Expert-parallel MoE] in fk/tasks/moe.h: the
/// slots of experts on other ranks are -1 and their rows were never written): fp32 sum in k order over
/// the routed slots, one rounding; equal to moe_sum_kernel bitwise where every slot is routed.
template <class T, int kK, int kH, int kThreads>
__global__ void __launch_bounds__(kThreads) moe_sum_masked_kernel(T* __restrict__ out, const T* __restrict__ in,
                                                                  const int32_t* __restrict__ topk_ids, uint32_t total) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kH % kN == 0, "moe_sum: H must be a multiple of 16 bytes");
  constexpr uint32_t kRowVecs = kH / kN;
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= total) return;
  const uint32_t t = i / kRowVecs, c = i - t * kRowVecs;
  const T* p = in + static_cast<size_t>(t) * (kK * kH) + c * kN;
  float acc[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) acc[j] = 0.f;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if (__ldg(topk_ids + static_cast<size_t>(t) * kK + k) < 0) continue;
    const Vec16<T> v = load16_stream(p + static_cast<size_t>(k) * kH);
#pragma unroll
    for (int j = 0; j < kN; ++j) acc[j] += to_float(v.v[j]);
  }
  Vec16<T> o;
#pragma unroll
  for (int j = 0; j < kN; ++j) o.v[j] = from_float<T>(acc[j]);
  store16(out + static_cast<size_t>(t) * kH + c * kN, o);
}

/// Expert parallelism: ids_out[i] = ids_in[i] - first where first <= ids_in[i] < first + per_rank (this
/// rank's experts, renumbered from 0), -1 elsewhere (vLLM's expert_map).
template <class I>
__global__ void ep_localize_ids_kernel(I* __restrict__ ids_out, const I* __restrict__ ids_in, int64_t n, int first,
                                       int per_rank) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int e = ids_in[i];
  ids_out[i] = (e >= first && e < first + per_rank) ? e - first : -1;
}

/// Rows [q capacity, q capacity + counts[q]) of source q are live; the others (stale) get no slot.
template <class I>
__global__ void ep_localize_received_ids_kernel(I* __restrict__ ids_out, const I* __restrict__ ids_in, const int32_t* __restrict__ counts,
                                                int64_t capacity, int64_t n, int topk, int first, int per_rank) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / topk;
  const bool live = row % capacity < counts[row / capacity];
  const int e = live ? ids_in[i] : -1;
  ids_out[i] = (e >= first && e < first + per_rank) ? e - first : -1;
}

/// One block per row: y[r] = x[r] * (sum of w[r, k] over the slots with local[r, k] >= 0), in fp32, rounded once.
template <class T>
__global__ void ep_weighted_rows_kernel(T* __restrict__ y, const T* __restrict__ x, const float* __restrict__ w,
                                        const int32_t* __restrict__ local, int64_t hidden, int topk) {
  const int64_t row = blockIdx.x;
  float scale = 0.f;
  bool any = false;
  for (int k = 0; k < topk; ++k)
    if (local[row * topk + k] >= 0) {
      scale += w[row * topk + k];
      any = true;
    }
  // A row with no slot here (a stale row among them) is 0 without reading x: stale rows may hold anything.
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) y[row * hidden + c] = any ? T(float(x[row * hidden + c]) * scale) : T(0.f);
}

}  // namespace detail

// =============================================================================================
// Host entry points. All launch on `stream` only, never synchronise or allocate, and are
// CUDA-graph capturable.
// =============================================================================================

/// vLLM topk_softmax: per token, softmax (fp32) over the kE logits of gating [T, kE] (row stride
/// gating_stride elements), then the kK most probable experts in descending order (ties: lower
/// expert index first); with kRenorm the K weights are divided by their sum.
/// topk_weights / topk_ids: [T, kK] contiguous. TIn: bf16, f16 or float. Rows may have any
/// alignment (16-byte-aligned rows take the vector-load kernel, others element loads).
/// Launch: 128 threads, one group of TopkSoftmaxShape::kG lanes per token, exact grid.
template <class TIn, int kE, int kK, bool kRenorm>
void topk_softmax(float* topk_weights, int32_t* topk_ids, const TIn* gating, int64_t gating_stride, int64_t num_tokens,
                  cudaStream_t stream);

/// Tuning entry: kVPT logits per lane (0: the default 16 bytes), kThreads per block.
template <class TIn, int kE, int kK, bool kRenorm, int kVPT, int kThreads = 128>
void topk_softmax_tune(float* topk_weights, int32_t* topk_ids, const TIn* gating, int64_t gating_stride,
                       int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  using S = detail::TopkSoftmaxShape<TIn, kE, kVPT>;
  constexpr int kTokensPerBlock = kThreads / S::kG;
  const int grid = ceil_div(num_tokens, kTokensPerBlock);
  const bool vec = detail::aligned_to(gating, S::kLoadBytes) &&
                   (gating_stride * static_cast<int64_t>(sizeof(TIn))) % S::kLoadBytes == 0;
  if (vec) {
    detail::topk_softmax_kernel<TIn, kE, kK, kRenorm, S::kLoadBytes, kThreads, kVPT>
        <<<grid, kThreads, 0, stream>>>(topk_weights, topk_ids, gating, gating_stride, num_tokens);
  } else {
    detail::topk_softmax_kernel<TIn, kE, kK, kRenorm, static_cast<int>(sizeof(TIn)), kThreads, kVPT>
        <<<grid, kThreads, 0, stream>>>(topk_weights, topk_ids, gating, gating_stride, num_tokens);
  }
}

template <class TIn, int kE, int kK, bool kRenorm>
void topk_softmax(float* topk_weights, int32_t* topk_ids, const TIn* gating, int64_t gating_stride, int64_t num_tokens,
                  cudaStream_t stream) {
  topk_softmax_tune<TIn, kE, kK, kRenorm, 0, 128>(topk_weights, topk_ids, gating, gating_stride, num_tokens, stream);
}

/// vLLM grouped_topk (DeepSeek-V2/V3 routing, python semantics of vllm fused_moe grouped_topk):
///   scores = sigmoid(logits) (kSigmoid) or softmax(logits), fp32;
///   choice = scores + correction_bias (correction_bias [kE] fp32, or nullptr);
///   group score = sum of the top-2 choices of the group when a bias is given, else the group's
///     max score (vLLM: `max` whenever e_score_correction_bias is None, for either scoring);
///   keep the kTopKGroup best groups (ties: lower group index), then the kK best choices among
///     their experts (ties: lower expert index), descending;
///   weights = scores (no bias) of those experts, / their sum if kRenorm, * routed_scaling_factor.
/// Requires kE % 32 == 0 and (kE / kGroups) % (kE / 32) == 0 with a power-of-two lane count per
/// group (E 256 / 8 groups, E 160 / 8, E 128 / 8 ...). One warp per token, 128 threads.
template <class TIn, int kE, int kK, int kGroups, int kTopKGroup, bool kSigmoid, bool kRenorm>
void grouped_topk(float* topk_weights, int32_t* topk_ids, const TIn* gating, int64_t gating_stride,
                  const float* correction_bias, float routed_scaling_factor, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  using Sh = detail::GroupedTopkShape<kE, kGroups>;
  using Raw = typename detail::RouterKey<TIn>::Raw;
  constexpr int kLoadBytes = detail::widest_load(Sh::kPer * static_cast<int>(sizeof(Raw)));
  constexpr int kThreads = 128;
  const int grid = ceil_div(num_tokens, kThreads / 32);
  const bool vec = detail::aligned_to(gating, kLoadBytes) &&
                   (gating_stride * static_cast<int64_t>(sizeof(TIn))) % kLoadBytes == 0;
  if (vec) {
    detail::grouped_topk_kernel<TIn, kE, kK, kGroups, kTopKGroup, kSigmoid, kRenorm, kLoadBytes, kThreads>
        <<<grid, kThreads, 0, stream>>>(topk_weights, topk_ids, gating, gating_stride, correction_bias,
                                        routed_scaling_factor, num_tokens);
  } else {
    detail::grouped_topk_kernel<TIn, kE, kK, kGroups, kTopKGroup, kSigmoid, kRenorm, static_cast<int>(sizeof(TIn)),
                                kThreads><<<grid, kThreads, 0, stream>>>(
        topk_weights, topk_ids, gating, gating_stride, correction_bias, routed_scaling_factor, num_tokens);
  }
}

/// Capacity of sorted_token_ids: numel + E * (block_size - 1).
inline int64_t moe_align_max_padded(int64_t numel, int num_experts, int block_size) {
  return numel + static_cast<int64_t>(num_experts) * (block_size - 1);
}
/// Capacity of expert_ids: ceil(max_padded / block_size).
inline int64_t moe_align_max_blocks(int64_t numel, int num_experts, int block_size) {
  return (moe_align_max_padded(numel, num_experts, block_size) + block_size - 1) / block_size;
}
/// Ints of scratch the multi-block path of moe_align_block_size uses (3E + 2). Contents need no
/// initialisation (they are cleared on `stream` by each call); one workspace per concurrently
/// running call.
inline int moe_align_workspace_ints(int num_experts) { return 3 * num_experts + 2; }
/// Largest numel the single-block path takes when a workspace is given (1024 threads x 16 ids
/// held in registers). Above it: memset(workspace) + count kernel + scatter kernel.
inline constexpr int64_t kMoeAlignSingleBlockMaxNumel = 1024 * 16;

/// vLLM moe_align_block_size. topk_ids: [numel] flat (entry i = token i / K, slot i % K); ids
/// outside [0, kE) are ignored. Outputs:
///   sorted_token_ids [moe_align_max_padded]: expert e's flat indices (any order inside the
///     segment) followed by the sentinel numel up to a multiple of block_size, experts in order
///     0..kE-1, and the sentinel everywhere after *num_tokens_post_pad;
///   expert_ids [moe_align_max_blocks]: expert of each block of block_size entries, -1 past
///     num_tokens_post_pad / block_size;
///   num_tokens_post_pad [1].
/// workspace: moe_align_workspace_ints(kE) ints, or nullptr (then every size runs the single-block
/// kernel, slower above kMoeAlignSingleBlockMaxNumel). kE <= 1024; numel + kE * block_size < 2^31.
template <int kE>
void moe_align_block_size(int32_t* sorted_token_ids, int32_t* expert_ids, int32_t* num_tokens_post_pad,
                          const int32_t* topk_ids, int64_t numel, int block_size, int32_t* workspace,
                          cudaStream_t stream) {
  static_assert(kE >= 1 && kE <= 1024, "moe_align_block_size: 1 <= E <= 1024");
  const int32_t max_padded = static_cast<int32_t>(moe_align_max_padded(numel, kE, block_size));
  const int32_t max_blocks = static_cast<int32_t>(moe_align_max_blocks(numel, kE, block_size));
  const int32_t n = static_cast<int32_t>(numel);
  if (workspace == nullptr || numel <= kMoeAlignSingleBlockMaxNumel) {
    detail::moe_align_single_block_kernel<kE, 1024, 16><<<1, 1024, 0, stream>>>(
        sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, n, block_size, max_padded, max_blocks);
    return;
  }
  constexpr int kThreads = 256, kItems = 8;
  const int grid = ceil_div(numel, kThreads * kItems);
  cudaMemsetAsync(workspace, 0, sizeof(int32_t) * detail::AlignWs<kE>::kInts, stream);
  detail::moe_align_count_kernel<kE, kThreads, kItems>
      <<<grid, kThreads, 0, stream>>>(workspace, num_tokens_post_pad, topk_ids, n, block_size);
  detail::moe_align_scatter_kernel<kE, kThreads, kItems><<<grid, kThreads, 0, stream>>>(
      sorted_token_ids, expert_ids, workspace, topk_ids, n, block_size, max_padded, max_blocks);
}

/// The signature without a workspace: always the single-block kernel.
template <int kE>
void moe_align_block_size(int32_t* sorted_token_ids, int32_t* expert_ids, int32_t* num_tokens_post_pad,
                          const int32_t* topk_ids, int64_t numel, int block_size, cudaStream_t stream) {
  moe_align_block_size<kE>(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, numel, block_size, nullptr,
                           stream);
}

/// vLLM moe_sum: out[t, h] = sum_k in[t, k, h], fp32 accumulation rounded once. in [T, kK, kH] and
/// out [T, kH] contiguous, 16-byte aligned; kH a multiple of 16 bytes; T * kH / 8 < 2^32.
/// Launch: 128 threads, one 16-byte output vector per thread, exact grid.
template <class T, int kK, int kH>
void moe_sum(T* out, const T* in, int64_t num_tokens, cudaStream_t stream) {
  static_assert(kK >= 1, "moe_sum: K >= 1");
  if (num_tokens <= 0) return;
  constexpr int kThreads = 128;
  const int64_t total = num_tokens * (kH / Vec16<T>::kN);
  detail::moe_sum_kernel<T, kK, kH, kThreads>
      <<<ceil_div(total, kThreads), kThreads, 0, stream>>>(out, in, static_cast<uint32_t>(total));
}

/// moe_sum where slots with topk_ids < 0 count as absent (expert parallelism: other ranks' experts).
template <class T, int kK, int kH>
void moe_sum_masked(T* out, const T* in, const int32_t* topk_ids, int64_t num_tokens, cudaStream_t stream) {
  static_assert(kK >= 1, "moe_sum: K >= 1");
  if (num_tokens <= 0) return;
  constexpr int kThreads = 128;
  const int64_t total = num_tokens * (kH / Vec16<T>::kN);
  detail::moe_sum_masked_kernel<T, kK, kH, kThreads>
      <<<ceil_div(total, kThreads), kThreads, 0, stream>>>(out, in, topk_ids, static_cast<uint32_t>(total));
}

/// Global expert ids to this rank's local ids (-1: another rank's expert); n ids.
inline void ep_localize_ids(int32_t* out, const int32_t* in, int64_t n, int first, int per_rank, cudaStream_t stream) {
  if (n <= 0) return;
  detail::ep_localize_ids_kernel<int32_t><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, in, n, first, per_rank);
}

/// ep_localize_ids over the rows an expert-parallel dispatch delivered (fk::dist::EpAllToAll::Dispatched: source q's
/// rows at [q capacity, q capacity + counts[q]), counts on the device): ids [world x capacity, topk] of the stale rows
/// past each source's count become -1 too, so that no expert reads them.
inline void ep_localize_received_ids(int32_t* out, const int32_t* in, const int32_t* counts, int world, int64_t capacity, int topk,
                                     int first, int per_rank, cudaStream_t stream) {
  const int64_t n = int64_t(world) * capacity * topk;
  if (n <= 0) return;
  detail::ep_localize_received_ids_kernel<int32_t><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, in, counts, capacity, n, topk,
                                                                                                              first, per_rank);
}

/// The stand-in experts of the expert-parallel all-to-all task (fk/tasks/ep_all_to_all.h): per received row r,
/// y[r] = x[r] * the sum of its weights on this rank's live slots (local ids from ep_localize_received_ids: -1 for
/// other ranks' experts and for every slot of a stale row, whose y is then 0). x, y [rows, hidden] bf16, w / local
/// [rows, topk]. So the combined output of a token is x * the sum of all its routed weights, whichever ranks held them.
template <class T>
void ep_weighted_rows(T* y, const T* x, const float* w, const int32_t* local, int64_t rows, int64_t hidden, int topk,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  detail::ep_weighted_rows_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(y, x, w, local, hidden, topk);
}

}  // namespace fk::kernels
