// Causal variable-length prefill attention (self-attention, THD packed) with optional Gemma 2
// attention-logit soft-capping and a sliding window, specialised on (Hq, Hkv, D):
//   q/out [total, Hq, D], k/v [total, Hkv, D] bf16, cu_seqlens [batch + 1] i32 (device).
// A FlashAttention-2 style kernel on mma.sync tensor cores (sm_80+), with Q K^T and P V on wgmma
// for the sm_90a target (Note [Prefill wgmma]); tuned on the H100.
//
// Note [Prefill soft-capping]
// Gemma 2 caps every attention logit: after the softmax scale, s becomes
// softcap * tanh(s / softcap) (softcap = 50). cuDNN's SDPA (fk/kernels/attention.h) cannot run
// this: its score-modifier hook does not combine with the causal/padding masks that the
// varlen (ragged) graph needs, so Gemma 2's prefill needs a kernel of its own. The order per
// score is fixed and matches HF's eager attention and the reference (attention_ref.cuh):
//   1. s = q·k in fp32 (tensor-core accumulators), times the scale;
//   2. soft-cap the fp32 score (when softcap > 0);
//   3. mask (causal, window, past the sequence) by setting the score to -inf, so a masked score
//      stays -inf whatever the cap (capping first would turn -inf into -softcap, a finite logit);
//   4. online softmax in fp32 (base 2: log2(e) is folded in after the cap).
// The tanh is computed as 1 - 2 / (2^(2 x log2 e) + 1) with the fast exp2 and reciprocal: its
// absolute error (~1e-7) times softcap stays far below a bf16 ulp of the logit, which is not
// true of the hardware tanh.approx (relative 2^-11, i.e. up to 0.025 on a logit of 50).
//
// Note [Prefill tiling]
// Grid (Hq, batch, query tiles of kBM rows); the tile count comes from max_seqlen on the host
// (the lengths live on the device) and a CTA past its sequence's length exits at once. The
// tile index runs backwards in launch order so that the heaviest (last, most keys) tiles of
// every head and sequence start first. Each of the kWarps warps owns kMT 16-row MMA tiles of
// the query tile; Q stays in shared memory (read by ldmatrix per k-step). K/V tiles of kBN
// keys are double-buffered in shared memory with cp.async (tile j + 1 loads while tile j is
// used); rows past the sequence are zero-filled, so a masked probability (0) never multiplies
// garbage. Key tiles are walked from the diagonal down to the window's first tile; tiles
// wholly outside the causal/window band are never loaded, and only tiles crossing the band's
// edges (the diagonal, the window's lower edge, the sequence end) pay for the mask. One
// __syncthreads per key tile: after it tile j is visible and every warp is done with tile j - 1,
// so the prefetch of tile j + 1 into that stage is issued right after the barrier.
// Shared rows are 16-byte-chunk XOR swizzled (chunk ^ row % 8), so ldmatrix and the cp.async
// writes are free of bank conflicts. The output is staged through the Q tile (unused after the
// last barrier; each warp writes and reads back only its own rows) and stored in 16-byte chunks.
//
// Note [Prefill wgmma]
// With Cfg::kWgmma (the D 128 and 256 defaults), S = Q K^T runs on Hopper's warpgroup MMA
// (wgmma m64nBNk16, A = Q and B = K straight from shared memory): a warpgroup reads each K tile
// once for its 64 rows instead of once per 16-row warp, which was the shared-memory bandwidth
// limit of the all-mma.sync kernel at D 256. Q and K tiles then use wgmma's canonical K-major
// 128B-swizzle layout ([D / 64][rows][64], 1024-byte aligned; swz_blk), and every thread fences
// its cp.async writes to the async proxy before the barrier that publishes a tile. The wgmma
// accumulator layout of a warp equals mma.sync's C layout, so softmax is shared with the plain
// path. O += P V is wgmma m64n{D}k16 too: A = P straight from registers (a wgmma A fragment per
// warp is the mma.sync m16n8k16 A fragment, i.e. the packed S accumulators), B = V from shared
// memory as an MN-major ("transposed", imm-trans-b 1) operand: V keeps rows = keys (the K
// dimension) and D contiguous, stored in the same [D / 64][kBN][64] 128B-swizzle blocks as K.
// For MN-major 128B swizzle the canonical layout is ((8 chunks, m), (8 rows, k)) with strides
// ((16 B, LBO), (128 B, SBO)): the stride offset (SBO) is 1024 (8-key groups) and the leading
// offset (LBO) is the distance between 64-column blocks (kBN * 128 bytes); k-step kk starts
// 16 keys = 2048 bytes in (wgmma_desc_mn). The O accumulator is 64 x D per warpgroup, the
// registers o[dt][c] as before.
// Pipelining (kPingpong: 8 warps, sm_90a, capped only): with one barrier per tile both
// warpgroups would do Q K^T, then softmax (the cap costs 3 MUFU ops per score), then P V in
// lockstep, leaving the tensor cores idle during the softmax. The second warpgroup therefore
// runs P V one tile late: it keeps P (bf16 registers) and the V stage of tile j and multiplies
// them after the next barrier, so its P V overlaps the first warpgroup's softmax and vice versa.
// Since it still reads tile j's stage in iteration j + 1, it alone issues the prefetch of tile
// j + 2 into that stage, after that P V completes (wgmma.wait_group 0); after the loop it runs
// the last tile's P V. Measured on the H100 (bench/micro/flash_prefill_micro.cu) this gains
// ~7% with the cap and loses ~7% without it, hence capped only.
// Short prompts: when the 128-row CTAs of the D 256 default would be less than one wave
// (Hq * batch * ceil(max_seqlen / 128) <= SM count), flash_prefill runs 64-row, one-warpgroup
// CTAs (PrefillCfg<256, 64, 64, 4>) instead (1x1024, 16 heads: 54 -> 44 us).
// Without the sm_90a target the kernel falls back to mma.sync for the same tile shape (V then
// row-major swizzled, read by ldmatrix.trans).
//
// Window: key j is kept for query i when i - window < j <= i (HF's sliding_window,
// FlashAttention's window_size (window - 1, 0)); 0 means no window.
//
// Note [Prefill attention sinks]
// gpt-oss (HF eager_attention_forward of modeling_gpt_oss) appends one learned logit sinks[h]
// per query head to every row of scaled (post-cap, post-mask) scores, takes the softmax over
// the row plus that logit and drops the sink's probability:
//   out = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink - m)).
// The sink adds no value row, so it only enlarges the denominator, and it is folded into the
// final normalisation: the loop ends with O and l relative to the row max m (log2 units, i.e.
// the post-cap scaled score times log2(e) in both the capped and the plain branch), the sink's
// logit is brought to the same units (sink * log2(e)) and both are rebased on max(m, sink).
// kSinks is a template flag (the host picks the instance from sinks != nullptr), so the
// sink-free kernels keep the code and registers they had before sinks existed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace prefill_detail {

using bf16 = __nv_bfloat16;

/// Tile shape: kBM query rows per CTA, kBN keys per K/V tile, kWarps warps (each owning
/// kBM / kWarps rows, a multiple of 16). kFastTanh: hardware tanh.approx for the cap (faster,
/// less accurate; Note [Prefill soft-capping]).
template <int kD_, int kBM_, int kBN_, int kWarps_, int kMinBlocks_ = 1, bool kFastTanh_ = false, bool kWgmma_ = false>
struct PrefillCfg {
  static constexpr int kD = kD_, kBM = kBM_, kBN = kBN_, kWarps = kWarps_, kMinBlocks = kMinBlocks_;
  static constexpr bool kFastTanh = kFastTanh_;
  static constexpr bool kWgmma = kWgmma_;  // S = Q K^T on wgmma (Note [Prefill wgmma]); sm_90a only
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMT = kBM / (16 * kWarps);  // 16-row MMA tiles per warp
  static constexpr int kNT = kBN / 8;              // 8-key column tiles of S
  static constexpr int kDT = kD / 8;               // 8-wide column tiles of O
  static constexpr int kChunks = kD / 8;           // 16-byte chunks per shared row
  static constexpr int kStages = 2;
  // + 1024: the wgmma operand tiles need 1024-byte alignment, done by hand in the kernel.
  static constexpr size_t kSmemBytes = size_t(kBM + 2 * kStages * kBN) * kD * sizeof(bf16) + (kWgmma ? 1024 : 0);
  static_assert(kD % 64 == 0 && kD <= 256, "D must be 64, 128, 192 or 256 (swizzle needs 8 chunks per row)");
  static_assert(kMT >= 1 && kBM == kMT * 16 * kWarps, "kBM must be a multiple of 16 * kWarps");
  static_assert(kBN % 16 == 0, "kBN must be a multiple of 16");
  static_assert(!kWgmma || (kMT == 1 && kWarps % 4 == 0 && (kBN == 32 || kBN == 64) && kD != 192),
                "wgmma: one 16-row tile per warp (64 rows per warpgroup), kBN 32 or 64, D 64, 128 or 256");
  static_assert((kBN * kChunks) % kThreads == 0 && (kBM * kChunks) % kThreads == 0, "tiles must split evenly over threads");
};

/// Defaults per head size, measured on the H100 by bench/micro/flash_prefill_micro.cu
/// (Note [Prefill wgmma]); D 64 keeps the all-mma.sync shape (not yet measured with wgmma).
template <int kD> struct PrefillDefault;
template <> struct PrefillDefault<64> { using type = PrefillCfg<64, 128, 64, 4>; };
template <> struct PrefillDefault<128> { using type = PrefillCfg<128, 64, 64, 4, 1, false, true>; };
template <> struct PrefillDefault<256> { using type = PrefillCfg<256, 128, 64, 8, 1, false, true>; };

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

/// 16-byte global -> shared copy; `valid` false zero-fills the destination (reads nothing).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kN> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// 2^x on the SFU (ex2.approx.ftz: relative error 2^-22; 2^-inf = +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <bool kFast> __device__ __forceinline__ float softcap_tanh(float x) {
  if constexpr (kFast) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
  } else {
    // 1 - 2 / (e^(2x) + 1): exact limits (+-1) at +-inf, absolute error ~1e-7 near 0.
    constexpr float k2Log2e = 2.8853900817779268f;
    return 1.f - __fdividef(2.f, fast_exp2(x * k2Log2e) + 1.f);
  }
}

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FK_PREFILL_HAS_WGMMA 1
#else
#define FK_PREFILL_HAS_WGMMA 0
#endif

/// Element offset of chunk `chunk` of row `row` in a [kD / 64][kRows][64] tile whose 128-byte
/// rows are 16-byte-chunk XOR swizzled: wgmma's canonical K-major 128B-swizzle layout.
template <int kRows> __device__ __forceinline__ int swz_blk(int row, int chunk) {
  return (chunk >> 3) * (kRows * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

#if FK_PREFILL_HAS_WGMMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// K-major operand, 128-byte swizzle, 8-row groups 1024 bytes apart; leading offset unused (1).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
/// s (64 x kN, fp32, the mma.sync C layout per warp) += A (64 x 16) * B (kN x 16)^T, both from
/// shared memory.
template <int kN> struct WgmmaQK;
template <> struct WgmmaQK<32> {
  template <class S> __device__ __forceinline__ static void run(S& s, uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]), "+f"(s[1][2]), "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]), "+f"(s[3][0]), "+f"(s[3][1]), "+f"(s[3][2]), "+f"(s[3][3])
        : "l"(da), "l"(db), "r"(1));
  }
};
template <> struct WgmmaQK<64> {
  template <class S> __device__ __forceinline__ static void run(S& s, uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]), "+f"(s[1][2]), "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]), "+f"(s[3][0]), "+f"(s[3][1]), "+f"(s[3][2]), "+f"(s[3][3]), "+f"(s[4][0]), "+f"(s[4][1]), "+f"(s[4][2]), "+f"(s[4][3]), "+f"(s[5][0]), "+f"(s[5][1]), "+f"(s[5][2]), "+f"(s[5][3]), "+f"(s[6][0]), "+f"(s[6][1]), "+f"(s[6][2]), "+f"(s[6][3]), "+f"(s[7][0]), "+f"(s[7][1]), "+f"(s[7][2]), "+f"(s[7][3])
        : "l"(da), "l"(db), "r"(1));
  }
};
/// MN-major (transposed) B operand in the same [kD / 64][rows][64] 128B-swizzle layout: rows
/// are the K (key) dimension, 8-key groups 1024 bytes apart (stride offset) and 64-column blocks
/// `block_bytes` apart (leading offset); Note [Prefill wgmma].
__device__ __forceinline__ uint64_t wgmma_desc_mn(uint32_t saddr, uint32_t block_bytes) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(block_bytes >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
/// o (64 x kN, fp32, the mma.sync C layout per warp) += A (64 x 16, registers: the mma.sync
/// m16n8k16 A fragment of each warp's 16 rows) * B (16 x kN, MN-major in shared memory).
template <int kN> struct WgmmaPV;
template <> struct WgmmaPV<64> {
  template <class O> __device__ __forceinline__ static void run(O& o, const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(o[0][0]), "+f"(o[0][1]), "+f"(o[0][2]), "+f"(o[0][3]), "+f"(o[1][0]), "+f"(o[1][1]), "+f"(o[1][2]), "+f"(o[1][3]), "+f"(o[2][0]), "+f"(o[2][1]), "+f"(o[2][2]), "+f"(o[2][3]), "+f"(o[3][0]), "+f"(o[3][1]), "+f"(o[3][2]), "+f"(o[3][3]), "+f"(o[4][0]), "+f"(o[4][1]), "+f"(o[4][2]), "+f"(o[4][3]), "+f"(o[5][0]), "+f"(o[5][1]), "+f"(o[5][2]), "+f"(o[5][3]), "+f"(o[6][0]), "+f"(o[6][1]), "+f"(o[6][2]), "+f"(o[6][3]), "+f"(o[7][0]), "+f"(o[7][1]), "+f"(o[7][2]), "+f"(o[7][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
  }
};
template <> struct WgmmaPV<128> {
  template <class O> __device__ __forceinline__ static void run(O& o, const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(o[0][0]), "+f"(o[0][1]), "+f"(o[0][2]), "+f"(o[0][3]), "+f"(o[1][0]), "+f"(o[1][1]), "+f"(o[1][2]), "+f"(o[1][3]), "+f"(o[2][0]), "+f"(o[2][1]), "+f"(o[2][2]), "+f"(o[2][3]), "+f"(o[3][0]), "+f"(o[3][1]), "+f"(o[3][2]), "+f"(o[3][3]), "+f"(o[4][0]), "+f"(o[4][1]), "+f"(o[4][2]), "+f"(o[4][3]), "+f"(o[5][0]), "+f"(o[5][1]), "+f"(o[5][2]), "+f"(o[5][3]), "+f"(o[6][0]), "+f"(o[6][1]), "+f"(o[6][2]), "+f"(o[6][3]), "+f"(o[7][0]), "+f"(o[7][1]), "+f"(o[7][2]), "+f"(o[7][3]), "+f"(o[8][0]), "+f"(o[8][1]), "+f"(o[8][2]), "+f"(o[8][3]), "+f"(o[9][0]), "+f"(o[9][1]), "+f"(o[9][2]), "+f"(o[9][3]), "+f"(o[10][0]), "+f"(o[10][1]), "+f"(o[10][2]), "+f"(o[10][3]), "+f"(o[11][0]), "+f"(o[11][1]), "+f"(o[11][2]), "+f"(o[11][3]), "+f"(o[12][0]), "+f"(o[12][1]), "+f"(o[12][2]), "+f"(o[12][3]), "+f"(o[13][0]), "+f"(o[13][1]), "+f"(o[13][2]), "+f"(o[13][3]), "+f"(o[14][0]), "+f"(o[14][1]), "+f"(o[14][2]), "+f"(o[14][3]), "+f"(o[15][0]), "+f"(o[15][1]), "+f"(o[15][2]), "+f"(o[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
  }
};
template <> struct WgmmaPV<256> {
  template <class O> __device__ __forceinline__ static void run(O& o, const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(o[0][0]), "+f"(o[0][1]), "+f"(o[0][2]), "+f"(o[0][3]), "+f"(o[1][0]), "+f"(o[1][1]), "+f"(o[1][2]), "+f"(o[1][3]), "+f"(o[2][0]), "+f"(o[2][1]), "+f"(o[2][2]), "+f"(o[2][3]), "+f"(o[3][0]), "+f"(o[3][1]), "+f"(o[3][2]), "+f"(o[3][3]), "+f"(o[4][0]), "+f"(o[4][1]), "+f"(o[4][2]), "+f"(o[4][3]), "+f"(o[5][0]), "+f"(o[5][1]), "+f"(o[5][2]), "+f"(o[5][3]), "+f"(o[6][0]), "+f"(o[6][1]), "+f"(o[6][2]), "+f"(o[6][3]), "+f"(o[7][0]), "+f"(o[7][1]), "+f"(o[7][2]), "+f"(o[7][3]), "+f"(o[8][0]), "+f"(o[8][1]), "+f"(o[8][2]), "+f"(o[8][3]), "+f"(o[9][0]), "+f"(o[9][1]), "+f"(o[9][2]), "+f"(o[9][3]), "+f"(o[10][0]), "+f"(o[10][1]), "+f"(o[10][2]), "+f"(o[10][3]), "+f"(o[11][0]), "+f"(o[11][1]), "+f"(o[11][2]), "+f"(o[11][3]), "+f"(o[12][0]), "+f"(o[12][1]), "+f"(o[12][2]), "+f"(o[12][3]), "+f"(o[13][0]), "+f"(o[13][1]), "+f"(o[13][2]), "+f"(o[13][3]), "+f"(o[14][0]), "+f"(o[14][1]), "+f"(o[14][2]), "+f"(o[14][3]), "+f"(o[15][0]), "+f"(o[15][1]), "+f"(o[15][2]), "+f"(o[15][3]), "+f"(o[16][0]), "+f"(o[16][1]), "+f"(o[16][2]), "+f"(o[16][3]), "+f"(o[17][0]), "+f"(o[17][1]), "+f"(o[17][2]), "+f"(o[17][3]), "+f"(o[18][0]), "+f"(o[18][1]), "+f"(o[18][2]), "+f"(o[18][3]), "+f"(o[19][0]), "+f"(o[19][1]), "+f"(o[19][2]), "+f"(o[19][3]), "+f"(o[20][0]), "+f"(o[20][1]), "+f"(o[20][2]), "+f"(o[20][3]), "+f"(o[21][0]), "+f"(o[21][1]), "+f"(o[21][2]), "+f"(o[21][3]), "+f"(o[22][0]), "+f"(o[22][1]), "+f"(o[22][2]), "+f"(o[22][3]), "+f"(o[23][0]), "+f"(o[23][1]), "+f"(o[23][2]), "+f"(o[23][3]), "+f"(o[24][0]), "+f"(o[24][1]), "+f"(o[24][2]), "+f"(o[24][3]), "+f"(o[25][0]), "+f"(o[25][1]), "+f"(o[25][2]), "+f"(o[25][3]), "+f"(o[26][0]), "+f"(o[26][1]), "+f"(o[26][2]), "+f"(o[26][3]), "+f"(o[27][0]), "+f"(o[27][1]), "+f"(o[27][2]), "+f"(o[27][3]), "+f"(o[28][0]), "+f"(o[28][1]), "+f"(o[28][2]), "+f"(o[28][3]), "+f"(o[29][0]), "+f"(o[29][1]), "+f"(o[29][2]), "+f"(o[29][3]), "+f"(o[30][0]), "+f"(o[30][1]), "+f"(o[30][2]), "+f"(o[30][3]), "+f"(o[31][0]), "+f"(o[31][1]), "+f"(o[31][2]), "+f"(o[31][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
  }
};

#endif  // FK_PREFILL_HAS_WGMMA

/// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][kD] tile.
template <int kD> __device__ __forceinline__ int swz(int row, int chunk) { return row * kD + ((chunk ^ (row & 7)) << 3); }

/// cp.async of kRows rows of kD elements (global row stride `stride`) into a swizzled tile;
/// rows >= `valid_rows` are zero-filled. Row 0 is always valid (the caller's tile start lies
/// inside the sequence), so a zero-filled row's dummy source address stays in bounds.
/// kLoaders threads (tid 0 .. kLoaders - 1) share the copy.
template <class Cfg, int kRows, bool kBlocked = false, int kLoaders = Cfg::kThreads>
__device__ __forceinline__ void load_tile(uint32_t dst, const bf16* src, int64_t stride, int valid_rows,
                                          int tid = static_cast<int>(threadIdx.x)) {
  static_assert((kRows * Cfg::kChunks) % kLoaders == 0, "tile must split evenly over the loaders");
  constexpr int kPer = kRows * Cfg::kChunks / kLoaders;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * kLoaders + tid;
    const int r = idx / Cfg::kChunks, c = idx % Cfg::kChunks;
    const bool ok = r < valid_rows;
    const int off = kBlocked ? swz_blk<kRows>(r, c) : swz<Cfg::kD>(r, c);
    cp_async16(dst + off * 2, src + (ok ? r : 0) * stride + c * 8, ok);
  }
}

/// exp_scale: log2(e) * scale without the cap; with it, the pre-tanh factor scale / softcap
/// and cap_scale = softcap * log2(e) (Note [Prefill soft-capping]). kSinks: sinks holds the
/// per query head sink logits (Note [Prefill attention sinks]); unused otherwise.
template <class Cfg, int kHq, int kHkv, bool kSoftcap, bool kSinks = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
flash_prefill_kernel(bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k,
                     const bf16* __restrict__ v, const int32_t* __restrict__ cu_seqlens, float score_scale,
                     float cap_scale, int window, const float* __restrict__ sinks) {
  constexpr int kD = Cfg::kD, kBM = Cfg::kBM, kBN = Cfg::kBN, kMT = Cfg::kMT, kNT = Cfg::kNT, kDT = Cfg::kDT;
  constexpr int kG = kHq / kHkv;
  static_assert(kHq % kHkv == 0, "Hq must be a multiple of Hkv");
  // Without the sm_90a target (no wgmma), the same tile shape runs on mma.sync alone.
  constexpr bool kUseWgmma = Cfg::kWgmma && FK_PREFILL_HAS_WGMMA;
  // Two warpgroups, capped: the second one runs P V one tile late (Note [Prefill wgmma]).
  constexpr bool kPingpong = kUseWgmma && Cfg::kWarps == 8 && kSoftcap;

  const int h = blockIdx.x, b = blockIdx.y;
  const int m_tile = static_cast<int>(gridDim.z - 1 - blockIdx.z);  // heaviest tiles first
  const int seq0 = cu_seqlens[b];
  const int len = cu_seqlens[b + 1] - seq0;
  const int m0 = m_tile * kBM;
  if (m0 >= len) return;
  const int kvh = h / kG;

  extern __shared__ __align__(128) unsigned char prefill_smem[];
  unsigned char* smem_base = prefill_smem;
  if constexpr (kUseWgmma) smem_base += (1024u - (smem_addr(prefill_smem) & 1023u)) & 1023u;
  bf16* s_q = reinterpret_cast<bf16*>(smem_base);
  const uint32_t q_addr = smem_addr(s_q);
  const uint32_t k_addr = q_addr + kBM * kD * 2;
  const uint32_t v_addr = k_addr + 2 * kBN * kD * 2;
  constexpr uint32_t kStageBytes = kBN * kD * 2;

  const int n_hi = (min(m0 + kBM, len) - 1) / kBN;
  const int n_lo = window > 0 ? max(0, m0 - window + 1) / kBN : 0;
  const int n_tiles = n_hi - n_lo + 1;

  constexpr int64_t kQStride = static_cast<int64_t>(kHq) * kD, kKVStride = static_cast<int64_t>(kHkv) * kD;
  load_tile<Cfg, kBM, kUseWgmma>(q_addr, q + (static_cast<int64_t>(seq0 + m0) * kHq + h) * kD, kQStride, len - m0);
  auto load_kv = [&](int n, int stage) {
    const int64_t off = (static_cast<int64_t>(seq0 + n * kBN) * kHkv + kvh) * kD;
    load_tile<Cfg, kBN, kUseWgmma>(k_addr + stage * kStageBytes, k + off, kKVStride, len - n * kBN);
    load_tile<Cfg, kBN, kUseWgmma>(v_addr + stage * kStageBytes, v + off, kKVStride, len - n * kBN);
  };
  // With kPingpong the prefetch is the lagging (second) warpgroup's alone.
  auto load_kv_wg1 = [&](int n, int stage) {
    const int64_t off = (static_cast<int64_t>(seq0 + n * kBN) * kHkv + kvh) * kD;
    const int tid = static_cast<int>(threadIdx.x) - 128;
    load_tile<Cfg, kBN, kUseWgmma, 128>(k_addr + stage * kStageBytes, k + off, kKVStride, len - n * kBN, tid);
    load_tile<Cfg, kBN, kUseWgmma, 128>(v_addr + stage * kStageBytes, v + off, kKVStride, len - n * kBN, tid);
  };
  load_kv(n_hi, 0);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int wrow0 = warp * kMT * 16;  // first row of the warp within the tile

  float o[kMT][kDT][4];
  float row_m[kMT][2], row_l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mt][dt][c] = 0.f;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_m[mt][hr] = -CUDART_INF_F;
      row_l[mt][hr] = 0.f;
    }
  }

  [[maybe_unused]] const bool lagging = kPingpong && warp >= 4;
  [[maybe_unused]] uint32_t p_keep[kBN / 16][4];  // lagging warpgroup: P of the previous tile
  [[maybe_unused]] uint32_t v_keep = 0;           // ... and its V stage
#if FK_PREFILL_HAS_WGMMA
  // O += P V on wgmma: A = P from registers, B = V (MN-major: keys are rows, D contiguous);
  // k-step kk starts 16 keys (2048 bytes) into every 64-column block.
  auto pv_wgmma = [&](const uint32_t (&a)[kBN / 16][4], uint32_t vsa) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(o[0][dt][c])::"memory");
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) WgmmaPV<kD>::run(o[0], a[kk], wgmma_desc_mn(vsa + kk * 2048, kBN * 128));
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(o[0][dt][c])::"memory");
  };
#endif

  for (int it = 0; it < n_tiles; ++it) {
    const int n = n_hi - it, stage = it & 1;
    // One barrier per tile: it publishes tile `it` and also tells every thread that all of them
    // are done with tile it - 1, whose stage the prefetch below then refills.
    cp_async_wait<0>();
#if FK_PREFILL_HAS_WGMMA
    if constexpr (kUseWgmma) fence_proxy_async_smem();  // cp.async writes -> wgmma's async proxy
#endif
    __syncthreads();
    if constexpr (kPingpong) {
#if FK_PREFILL_HAS_WGMMA
      // The lagging warpgroup first finishes the previous tile's P V (its tensor-core work then
      // overlaps the other warpgroup's softmax), and only then refills that tile's stage.
      if (lagging) {
        if (it > 0) pv_wgmma(p_keep, v_keep);
        if (it + 1 < n_tiles) {
          load_kv_wg1(n - 1, stage ^ 1);
          cp_async_commit();
        }
      }
#endif
    } else if (it + 1 < n_tiles) {
      load_kv(n - 1, stage ^ 1);
      cp_async_commit();
    }
    const uint32_t ks = k_addr + stage * kStageBytes, vs = v_addr + stage * kStageBytes;

    // S = Q K^T (fp32).
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mt][nt][c] = 0.f;
    if constexpr (kUseWgmma) {
#if FK_PREFILL_HAS_WGMMA
      // Warpgroup wg multiplies its 64 query rows (block layout: rows wg*64.. of every 64-column
      // block) by the whole key tile; k-step kk is 32 bytes into 64-column block kk / 4.
      const uint32_t qa = q_addr + (warp / 4) * 64 * 128;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(s[0][nt][c])::"memory");
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        WgmmaQK<kBN>::run(s[0], wgmma_desc(qa + (kk >> 2) * (kBM * 128) + (kk & 3) * 32),
                          wgmma_desc(ks + (kk >> 2) * (kBN * 128) + (kk & 3) * 32));
      }
      wgmma_commit();
      wgmma_wait0();
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(s[0][nt][c])::"memory");
#endif
    } else {
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) ldsm_x4(a[mt], q_addr + swz<kD>(wrow0 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)) * 2);
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          uint32_t bk[4];
          ldsm_x4(bk, ks + swz<kD>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)) * 2);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma_bf16_16816(s[mt][2 * np], a[mt], bk[0], bk[1]);
            mma_bf16_16816(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
          }
        }
      }
    }

    // Scale, cap, then mask (Note [Prefill soft-capping]); scores are in log2 units after this.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if constexpr (kSoftcap) s[mt][nt][c] = cap_scale * softcap_tanh<Cfg::kFastTanh>(s[mt][nt][c] * score_scale);
          else s[mt][nt][c] *= score_scale;
        }
    const bool need_mask = n * kBN + kBN - 1 > m0 || (window > 0 && n * kBN <= m0 + kBM - 1 - window);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int row = m0 + wrow0 + mt * 16 + g + (c >> 1) * 8;
            const int key = n * kBN + nt * 8 + tig * 2 + (c & 1);
            if (key > row || (window > 0 && key <= row - window)) s[mt][nt][c] = -CUDART_INF_F;
          }
    }

    // Online softmax: a row lives in the 4 lanes of a quad (two rows per lane and MMA tile).
    // The O rescale (kDT * 4 multiplies per tile) is skipped when no row max of the warp moved,
    // which is most tiles once a row has seen its largest scores.
    float alpha[kMT][2];
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = row_m[mt][hr];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -CUDART_INF_F ? 0.f : mx;  // a row with nothing unmasked yet
        alpha[mt][hr] = fast_exp2(row_m[mt][hr] - base);
        moved |= mx != row_m[mt][hr];
        row_m[mt][hr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float p0 = fast_exp2(s[mt][nt][2 * hr] - base), p1 = fast_exp2(s[mt][nt][2 * hr + 1] - base);
          s[mt][nt][2 * hr] = p0;
          s[mt][nt][2 * hr + 1] = p1;
          sum += p0 + p1;
        }
        row_l[mt][hr] = row_l[mt][hr] * alpha[mt][hr] + sum;  // lane-partial; reduced over the quad at the end
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
          for (int c = 0; c < 4; ++c) o[mt][dt][c] *= alpha[mt][c >> 1];
    }

    // O += P V: the S accumulators of key tiles 2kk, 2kk+1 are the A fragment of k-step kk.
    if constexpr (kUseWgmma) {
#if FK_PREFILL_HAS_WGMMA
      uint32_t a[kBN / 16][4];
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        a[kk][0] = pack_bf16(s[0][2 * kk][0], s[0][2 * kk][1]);
        a[kk][1] = pack_bf16(s[0][2 * kk][2], s[0][2 * kk][3]);
        a[kk][2] = pack_bf16(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        a[kk][3] = pack_bf16(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
      }
      if (lagging) {
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) p_keep[kk][r] = a[kk][r];
        v_keep = vs;
      } else {
        pv_wgmma(a, vs);
      }
#endif
    } else {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t bv[4];
        ldsm_x4_trans(bv, vs + swz<kD>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4)) * 2);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_bf16_16816(o[mt][2 * dp], a[mt], bv[0], bv[1]);
          mma_bf16_16816(o[mt][2 * dp + 1], a[mt], bv[2], bv[3]);
        }
      }
    }
    }
  }
  // The sink's logit in the loop's log2 domain (Note [Prefill attention sinks]).
  [[maybe_unused]] float sink_l2 = 0.f;
  if constexpr (kSinks) {
    constexpr float kLog2e = 1.4426950408889634f;
    sink_l2 = __ldg(sinks + h) * kLog2e;
  }
#if FK_PREFILL_HAS_WGMMA
  if constexpr (kPingpong) {
    if (lagging) pv_wgmma(p_keep, v_keep);  // the last tile's P V (its stage is not refilled)
  }
#endif
  __syncthreads();  // every warp is done with Q (and K/V) before the output is staged over Q

  // Normalise and stage the warp's rows in the Q tile (read by no one after the loop's last
  // barrier; row-major staging, whatever Q's layout was), then store 16 bytes per lane.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = row_l[mt][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      float inv = l > 0.f ? 1.f / l : 0.f;
      if constexpr (kSinks) {
        // O and l are relative to the row max m; rebase both on max(m, sink) and add the sink's
        // term to the denominator (m = -inf: no key, the sink takes all the mass, O = 0).
        const float m = row_m[mt][hr];
        const float mm = fmaxf(m, sink_l2);
        const float a = m == -CUDART_INF_F ? 0.f : fast_exp2(m - mm);
        const float den = l * a + fast_exp2(sink_l2 - mm);
        inv = den > 0.f ? __fdividef(a, den) : 0.f;
      }
      const int row = wrow0 + mt * 16 + g + hr * 8;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(s_q + swz<kD>(row, dt) + tig * 2) =
            __floats2bfloat162_rn(o[mt][dt][2 * hr] * inv, o[mt][dt][2 * hr + 1] * inv);
      }
    }
  __syncwarp();
  constexpr int kWarpChunks = kMT * 16 * Cfg::kChunks;
#pragma unroll
  for (int i = lane; i < kWarpChunks; i += 32) {
    const int r = wrow0 + i / Cfg::kChunks, c = i % Cfg::kChunks;
    if (m0 + r < len) {
      *reinterpret_cast<uint4*>(out + (static_cast<int64_t>(seq0 + m0 + r) * kHq + h) * kD + c * 8) =
          *reinterpret_cast<const uint4*>(s_q + swz<kD>(r, c));
    }
  }
}

inline void throw_if_launch_failed(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace prefill_detail

/// flash_prefill with an explicit tile shape (prefill_detail::PrefillCfg); for tuning and the
/// micro-benchmark. Arguments as flash_prefill.
template <class Cfg, int kHq, int kHkv>
void flash_prefill_cfg(void* out, const void* q, const void* k, const void* v, const int32_t* cu_seqlens,
                       int64_t batch, int64_t max_seqlen, int64_t total_tokens, float softmax_scale, int window,
                       float softcap, cudaStream_t stream, const float* sinks = nullptr) {
  using prefill_detail::bf16;
  if (batch <= 0 || max_seqlen <= 0 || total_tokens <= 0) return;
  const int64_t m_tiles = (max_seqlen + Cfg::kBM - 1) / Cfg::kBM;
  if (batch > 65535 || m_tiles > 65535 || max_seqlen > (int64_t{1} << 30))
    throw std::runtime_error("flash_prefill: batch " + std::to_string(batch) + " or max_seqlen " +
                             std::to_string(max_seqlen) + " out of range (batch <= 65535, max_seqlen / " +
                             std::to_string(Cfg::kBM) + " <= 65535)");
  if (window < 0) throw std::runtime_error("flash_prefill: window must be >= 0, got " + std::to_string(window));
  constexpr float kLog2e = 1.4426950408889634f;
  const bool capped = softcap > 0.f;
  namespace pd = prefill_detail;
  auto kernel = sinks != nullptr ? (capped ? pd::flash_prefill_kernel<Cfg, kHq, kHkv, true, true>
                                           : pd::flash_prefill_kernel<Cfg, kHq, kHkv, false, true>)
                                 : (capped ? pd::flash_prefill_kernel<Cfg, kHq, kHkv, true, false>
                                           : pd::flash_prefill_kernel<Cfg, kHq, kHkv, false, false>);
  // Per launch (cheap) rather than once: the attribute belongs to the current device's context.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Cfg::kSmemBytes));
  if (e != cudaSuccess) throw std::runtime_error(std::string("flash_prefill: cudaFuncSetAttribute: ") + cudaGetErrorString(e));
  const dim3 grid(kHq, static_cast<unsigned>(batch), static_cast<unsigned>(m_tiles));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
      cu_seqlens, capped ? softmax_scale / softcap : softmax_scale * kLog2e, capped ? softcap * kLog2e : 0.f, window,
      sinks);
  prefill_detail::throw_if_launch_failed("flash_prefill");
}

/// Causal self-attention prefill over a packed batch (Note [Prefill soft-capping], Note
/// [Prefill tiling]). bf16, contiguous: q/out [total_tokens, kHq, kD], k/v [total_tokens, kHkv,
/// kD]; cu_seqlens: device [batch + 1] exclusive prefix sums starting at 0 (queries and keys
/// share them); max_seqlen: the true maximum length (sizes the grid). Query head h reads KV
/// head h / (kHq / kHkv). window > 0: key j kept for query i when j > i - window; softcap > 0:
/// scaled scores become softcap * tanh(s / softcap). sinks: nullptr, or device fp32 [kHq]
/// attention-sink logits (gpt-oss; Note [Prefill attention sinks]). kD in {64, 128, 256}.
/// Throws std::runtime_error when the launch fails.
template <int kHq, int kHkv, int kD>
void flash_prefill(void* out, const void* q, const void* k, const void* v, const int32_t* cu_seqlens, int64_t batch,
                   int64_t max_seqlen, int64_t total_tokens, float softmax_scale, int window, float softcap,
                   cudaStream_t stream, const float* sinks = nullptr) {
  using Def = typename prefill_detail::PrefillDefault<kD>::type;
  if constexpr (Def::kBM == 128 && Def::kWgmma) {
    // Less than one wave of 128-row CTAs (short prompts): 64-row CTAs fill the GPU better.
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
        kHq * batch * ((max_seqlen + 127) / 128) <= sms) {
      flash_prefill_cfg<prefill_detail::PrefillCfg<kD, 64, 64, 4, 1, false, true>, kHq, kHkv>(
          out, q, k, v, cu_seqlens, batch, max_seqlen, total_tokens, softmax_scale, window, softcap, stream, sinks);
      return;
    }
  }
  flash_prefill_cfg<Def, kHq, kHkv>(
      out, q, k, v, cu_seqlens, batch, max_seqlen, total_tokens, softmax_scale, window, softcap, stream, sinks);
}

}  // namespace fk::kernels
