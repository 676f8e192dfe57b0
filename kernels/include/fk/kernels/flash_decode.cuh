// Split-KV flash-decoding for one query token per sequence (FlashAttention's
// flash_attn_with_kvcache at decode), specialised on (Hq, Hkv, D):
//   q [B, Hq, D], k_cache/v_cache [B, max_len, Hkv, D], cache_seqlens [B] i32 -> out [B, Hq, D].
//
// Note [Flash decode]
// Grid (splits, Hkv, B): a block owns one KV head of one sequence and a contiguous range of
// its cached tokens. GQA: the G = Hq / Hkv query heads of that KV head are all held in
// registers by every lane, so each K/V row is loaded once for all G heads. A token's D-wide
// row is read by D/8 lanes with one 16-byte load each (two tokens per warp per load for
// D = 128); each warp keeps two iterations of kTokIter K and V loads per lane in flight (software pipelining). Scores are
// reduced across the D/8 lanes with xor-shuffles; softmax is online in fp32 (base 2, scale
// folded into q). The per-warp/per-half-warp states are merged in shared memory; with one
// split the block writes `out`, otherwise it writes a normalised partial and its log-sum-exp
// and flash_decode_combine_kernel merges the splits. Splits are chosen on the host from
// max_len (the lengths live on the device) so B * Hkv * splits fills the GPU; a block past its
// sequence's length writes an empty partial (lse = -inf).
//
// Head sizes whose D/8 is not a power of two (Phi-3's 96) give each token the next power of
// two of lanes; the lanes past D/8 load nothing and add zeros to the score reduction.
//
// Note [Decode window and soft-capping]
// window > 0 (a sliding window of `window` keys, the query's own included: HF's
// kv_idx > q_idx - window, vLLM's window_size (window - 1, 0)): sequence b reads only its last
// min(len_b, window) cached tokens. The splits cover that range, not the cache: the host picks
// them from min(max_len, window) and every block offsets its range by the sequence's own
// start (on the device), so a long cache with a short window costs what the window costs.
// softcap > 0: the scaled score s becomes softcap * tanh(s / softcap) (Gemma 2); then q is
// pre-scaled by the softmax scale only and log2(e) is applied after the tanh.
//
// Note [Decode attention sinks]
// sinks != nullptr (gpt-oss): one extra logit sinks[h] per query head joins the softmax of
// every row and its probability is dropped (Note [Prefill attention sinks] in
// flash_prefill.cuh): it only adds e^(sink - m) to the denominator. Scores are in log2 units
// (post-cap scaled score times log2(e)), so the sink enters as sink * log2(e). With one split
// the block folds it in when it normalises; with several, the partials stay sink-free and
// flash_decode_combine_kernel adds 2^(sink - M) to the sum of the split weights 2^(lse_s - M),
// M = max(max_s lse_s, sink).
#pragma once

#include <math_constants.h>

#include <algorithm>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <int kHq, int kHkv, int kD> struct DecodeShape {
  static_assert(kHq % kHkv == 0, "Hq must be a multiple of Hkv");
  static_assert(kD % 8 == 0 && kD <= 256, "D must be a multiple of 8, at most 256");
  static constexpr int kG = kHq / kHkv;
  static constexpr int kDL = kD / 8;  // lanes that hold a part of a row
  static constexpr int kLanesPerTok = kDL <= 1 ? 1 : kDL <= 2 ? 2 : kDL <= 4 ? 4 : kDL <= 8 ? 8 : kDL <= 16 ? 16 : 32;
  static constexpr int kTokPar = 32 / kLanesPerTok;  // tokens per warp per load
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kParts = kWarps * kTokPar;    // independent softmax states per block
};

template <int kHq, int kHkv, int kD, int kTokIter, class T>
__global__ void __launch_bounds__(DecodeShape<kHq, kHkv, kD>::kThreads)
flash_decode_kernel(T* __restrict__ out, float* __restrict__ o_part, float* __restrict__ lse_part,
                    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    const int32_t* __restrict__ seqlens, int max_len, int chunk, float q_scale, int window,
                    float softcap, const float* __restrict__ sinks) {
  using S = DecodeShape<kHq, kHkv, kD>;
  constexpr int kG = S::kG;
  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int splits = gridDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / S::kLanesPerTok, dl = lane % S::kLanesPerTok;
  const int len = min(seqlens[b], max_len);
  const int start = window > 0 ? max(0, len - window) : 0;
  const int begin = start + split * chunk;
  const int end = min(begin + chunk, len);
  const bool active = dl < S::kDL;  // lanes past D/8 (D/8 not a power of two) hold zeros
  constexpr float kLog2e = 1.4426950408889634f;

  float qf[kG][8];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    Vec16<T> qv;
    if (active) qv = load16(q + (static_cast<int64_t>(b) * kHq + kvh * kG + h) * kD + dl * 8);
    else *reinterpret_cast<uint4*>(&qv) = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) qf[h][j] = to_float(qv.v[j]) * q_scale;
  }
  float m[kG], l[kG], o[kG][8];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    m[h] = -CUDART_INF_F;
    l[h] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[h][j] = 0.f;
  }
  const int64_t tok_stride = static_cast<int64_t>(kHkv) * kD;
  const T* kb = k + (static_cast<int64_t>(b) * max_len * kHkv + kvh) * kD + dl * 8;
  const T* vb = v + (static_cast<int64_t>(b) * max_len * kHkv + kvh) * kD + dl * 8;
  constexpr int kPerWarpIter = S::kTokPar * kTokIter;
  constexpr int kPerBlockIter = S::kWarps * kPerWarpIter;

  // Software-pipelined: the loads of the next block-iteration are issued before the current
  // one is used (2 * kTokIter K and V rows in flight per lane). Tokens past `end` read as zero.
  auto load_tokens = [&](int t0, Vec16<T>(&kr)[kTokIter], Vec16<T>(&vr)[kTokIter]) {
#pragma unroll
    for (int i = 0; i < kTokIter; ++i) {
      const int t = t0 + i * S::kTokPar + sub;
      if (t < end && active) {
        kr[i] = load16_stream(kb + t * tok_stride);
        vr[i] = load16_stream(vb + t * tok_stride);
      } else {
        *reinterpret_cast<uint4*>(&kr[i]) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(&vr[i]) = make_uint4(0, 0, 0, 0);
      }
    }
  };
  Vec16<T> kv[kTokIter], vv[kTokIter];
  load_tokens(begin + warp * kPerWarpIter, kv, vv);
  for (int t0 = begin + warp * kPerWarpIter; t0 < end; t0 += kPerBlockIter) {
    Vec16<T> kn[kTokIter], vn[kTokIter];
    if (t0 + kPerBlockIter < end) load_tokens(t0 + kPerBlockIter, kn, vn);
    float s[kTokIter][kG];
#pragma unroll
    for (int i = 0; i < kTokIter; ++i) {
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc += qf[h][j] * to_float(kv[i].v[j]);
        s[i][h] = acc;
      }
    }
#pragma unroll
    for (int off = S::kLanesPerTok / 2; off > 0; off >>= 1) {
#pragma unroll
      for (int i = 0; i < kTokIter; ++i)
#pragma unroll
        for (int h = 0; h < kG; ++h) s[i][h] += __shfl_xor_sync(0xffffffffu, s[i][h], off);
    }
    if (softcap > 0.f) {
#pragma unroll
      for (int i = 0; i < kTokIter; ++i)
#pragma unroll
        for (int h = 0; h < kG; ++h) s[i][h] = softcap * tanhf(s[i][h] / softcap) * kLog2e;
    }
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      float mx = m[h];
#pragma unroll
      for (int i = 0; i < kTokIter; ++i) {
        const int t = t0 + i * S::kTokPar + sub;
        if (t >= end) s[i][h] = -CUDART_INF_F;
        mx = fmaxf(mx, s[i][h]);
      }
      if (mx == -CUDART_INF_F) continue;  // nothing valid yet for this lane group
      const float alpha = exp2f(m[h] - mx);
      m[h] = mx;
      l[h] *= alpha;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[h][j] *= alpha;
#pragma unroll
      for (int i = 0; i < kTokIter; ++i) {
        const float p = exp2f(s[i][h] - mx);  // 0 for masked tokens
        l[h] += p;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[h][j] += p * to_float(vv[i].v[j]);
      }
    }
#pragma unroll
    for (int i = 0; i < kTokIter; ++i) {
      kv[i] = kn[i];
      vv[i] = vn[i];
    }
  }

  // Merge the kParts states (warp, sub) of the block.
  __shared__ float sm_m[S::kParts][kG], sm_l[S::kParts][kG];
  __shared__ float sm_o[S::kParts][kG][kD];
  const int part = warp * S::kTokPar + sub;
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (dl == 0) {
      sm_m[part][h] = m[h];
      sm_l[part][h] = l[h];
    }
    if (active) {
#pragma unroll
      for (int j = 0; j < 8; ++j) sm_o[part][h][dl * 8 + j] = o[h][j];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kG * kD; idx += S::kThreads) {
    const int h = idx / kD, d = idx % kD;
    float mx = -CUDART_INF_F;
#pragma unroll
    for (int p = 0; p < S::kParts; ++p) mx = fmaxf(mx, sm_m[p][h]);
    float lsum = 0.f, osum = 0.f;
    if (mx != -CUDART_INF_F) {
#pragma unroll
      for (int p = 0; p < S::kParts; ++p) {
        const float w = exp2f(sm_m[p][h] - mx);
        lsum += sm_l[p][h] * w;
        osum += sm_o[p][h][d] * w;
      }
    }
    const int64_t head = static_cast<int64_t>(b) * kHq + kvh * kG + h;
    if (splits == 1) {
      if (sinks != nullptr) {  // Note [Decode attention sinks]
        const float sink = sinks[kvh * kG + h] * kLog2e;
        const float mm = fmaxf(mx, sink);
        const float a = mx == -CUDART_INF_F ? 0.f : exp2f(mx - mm);
        const float den = lsum * a + exp2f(sink - mm);
        out[head * kD + d] = from_float<T>(den > 0.f ? osum * a / den : 0.f);
      } else {
        out[head * kD + d] = from_float<T>(lsum > 0.f ? osum / lsum : 0.f);
      }
    } else {
      o_part[(head * splits + split) * kD + d] = lsum > 0.f ? osum / lsum : 0.f;
      if (d == 0) lse_part[head * splits + split] = lsum > 0.f ? mx + log2f(lsum) : -CUDART_INF_F;
    }
  }
}

/// One block per (b, head): out = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max), plus
/// 2^(sink - max) in the denominator when sinks != nullptr (Note [Decode attention sinks]).
template <int kD, class T>
__global__ void __launch_bounds__(kD)
flash_decode_combine_kernel(T* __restrict__ out, const float* __restrict__ o_part, const float* __restrict__ lse_part,
                            int splits, const float* __restrict__ sinks, int hq) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int64_t head = blockIdx.x;
  const float* lse = lse_part + head * splits;
  float mx = -CUDART_INF_F;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, lse[s]);
  float sink = -CUDART_INF_F;
  if (sinks != nullptr) {
    sink = sinks[head % hq] * kLog2e;
    mx = fmaxf(mx, sink);
  }
  float wsum = sinks != nullptr ? exp2f(sink - mx) : 0.f, acc = 0.f;
  if (mx != -CUDART_INF_F) {
    for (int s = 0; s < splits; ++s) {
      const float w = exp2f(lse[s] - mx);
      wsum += w;
      acc += w * o_part[(head * splits + s) * kD + threadIdx.x];
    }
  }
  out[head * kD + threadIdx.x] = from_float<T>(wsum > 0.f ? acc / wsum : 0.f);
}

inline int num_sms() {
  static const int n = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v > 0 ? v : 132;
  }();
  return n;
}

}  // namespace detail

/// The KV split used for (batch, max_len): tokens per split (a multiple of the block's
/// per-iteration token count) and the number of splits.
struct DecodeSplit {
  int chunk;
  int splits;
};
/// `window` > 0: only the last `window` tokens of a sequence are read (Note [Decode window and
/// soft-capping]), so the splits cover min(max_len, window) tokens.
template <int kHq, int kHkv, int kD, int kTokIter = 4>
DecodeSplit flash_decode_split(int64_t batch, int64_t max_len, int blocks_per_sm = 0, int window = 0) {
  using S = detail::DecodeShape<kHq, kHkv, kD>;
  if (window > 0) max_len = std::min<int64_t>(max_len, window);
  // Auto (0): aim at 2 blocks per SM while batch * Hkv is below the SM count, else 4 (the best
  // of {2, 4, 8} at every shape measured by bench/micro/mm_attn_bench.cu on the H100).
  if (blocks_per_sm <= 0) blocks_per_sm = batch * kHkv < detail::num_sms() ? 2 : 4;
  constexpr int kGran = S::kWarps * S::kTokPar * kTokIter;
  constexpr int kMinChunk = 2 * kGran;
  const int64_t base = batch * kHkv;
  const int64_t want = (static_cast<int64_t>(detail::num_sms()) * blocks_per_sm + base - 1) / base;
  int64_t splits = std::max<int64_t>(1, std::min<int64_t>(want, (max_len + kMinChunk - 1) / kMinChunk));
  int64_t chunk = (max_len + splits - 1) / splits;
  chunk = (chunk + kGran - 1) / kGran * kGran;
  splits = (max_len + chunk - 1) / chunk;
  return {static_cast<int>(std::max<int64_t>(chunk, 1)), static_cast<int>(std::max<int64_t>(splits, 1))};
}

/// Bytes of fp32 workspace flash_decode needs (partials + lse); 0 when one split suffices.
template <int kHq, int kHkv, int kD, int kTokIter = 4>
size_t flash_decode_workspace_bytes(int64_t batch, int64_t max_len, int blocks_per_sm = 0, int window = 0) {
  const DecodeSplit sp = flash_decode_split<kHq, kHkv, kD, kTokIter>(batch, max_len, blocks_per_sm, window);
  if (sp.splits == 1) return 0;
  return static_cast<size_t>(batch) * kHq * sp.splits * (kD + 1) * sizeof(float);
}

/// out[b, h, :] = softmax(q[b, h] · K[b, :len_b, h / G]^T * scale) · V[b, :len_b, h / G].
/// All tensors contiguous. `workspace` holds flash_decode_workspace_bytes() (16-byte aligned)
/// for the same window. window > 0: keys len_b - window .. len_b - 1 only; softcap > 0: scores
/// soft-capped (Note [Decode window and soft-capping]); sinks: nullptr or device fp32 [kHq]
/// attention-sink logits (gpt-oss; Note [Decode attention sinks]).
template <int kHq, int kHkv, int kD, class T, int kTokIter = 4>
void flash_decode(T* out, const T* q, const T* k_cache, const T* v_cache, const int32_t* cache_seqlens, int64_t batch,
                  int64_t max_len, float scale, void* workspace, cudaStream_t stream, int blocks_per_sm = 0,
                  int window = 0, float softcap = 0.f, const float* sinks = nullptr) {
  if (batch == 0) return;
  const DecodeSplit sp = flash_decode_split<kHq, kHkv, kD, kTokIter>(batch, max_len, blocks_per_sm, window);
  float* o_part = static_cast<float*>(workspace);
  float* lse_part = sp.splits > 1 ? o_part + static_cast<size_t>(batch) * kHq * sp.splits * kD : nullptr;
  const dim3 grid(sp.splits, kHkv, static_cast<unsigned>(batch));
  constexpr float kLog2e = 1.4426950408889634f;
  detail::flash_decode_kernel<kHq, kHkv, kD, kTokIter, T><<<grid, detail::DecodeShape<kHq, kHkv, kD>::kThreads, 0, stream>>>(
      out, o_part, lse_part, q, k_cache, v_cache, cache_seqlens, static_cast<int>(max_len), sp.chunk,
      softcap > 0.f ? scale : scale * kLog2e, window, softcap, sinks);
  if (sp.splits > 1) {
    detail::flash_decode_combine_kernel<kD, T><<<static_cast<unsigned>(batch * kHq), kD, 0, stream>>>(
        out, o_part, lse_part, sp.splits, sinks, kHq);
  }
}

}  // namespace fk::kernels
