// DeepSeek-V3 multi-head latent attention (MLA), absorbed decode: one query token per sequence
// against a dense latent KV cache (FlashMLA's dense decode, vLLM's MLA decode backends),
// specialised on (Hq, Dkv, Dr):
//   q [B, Hq, Dkv + Dr], kv_cache rows of Dkv + Dr, cache_seqlens [B] i32 -> out [B, Hq, Dkv].
//
// Note [MLA absorbed decode]
// DeepSeek-V3 caches one latent row per token: c_kv (the RMS-normed KV compression, Dkv = 512)
// followed by k_pe (the roped positional key, Dr = 64). At decode the up-projections are folded
// into the query and the output ("weight absorption"): q_nope·W_UK gives a 512-wide query in the
// latent space, so with q = [q_nope·W_UK | q_pe] (576 wide) every head scores the same row:
//   s_h,p = scale * q_h · row_p            (all 576 columns)
//   out_h = sum_p softmax_p(s_h,p) * row_p[0 : Dkv]   (the caller applies W_UV afterwards).
// It is multi-query attention with one 576-wide key head whose first 512 columns are also the
// value. Every KV row is used by all Hq heads, so the work is two GEMMs per key tile,
// S = Q K^T (Hq x 64 x 576) and O += P V (Hq x 512 x 64), about 2 * Hq flops per cached byte:
// at Hq = 128 (TP1) that is compute bound on an H100, at Hq = 16 (TP8) bandwidth bound.
// fp32 scores, softmax and accumulation; out is rounded once to T.
//
// Note [MLA decode tiling]
// Grid (head blocks, KV splits, B). A CTA owns kHb = 64 heads (Hq = 16 or 32: all of them) of
// one sequence and a contiguous range (split) of its keys. Two warpgroups (256 threads) run
// Hopper's wgmma, M = 64 query rows (rows past kHb are zero and their results dropped: at
// Hq <= 32 the kernel is bandwidth bound anyway). Shared memory (one CTA per SM): the Q tile
// (cp.async), two KV stages of 64 keys (TMA; Note [MLA decode loads]) and the P tile, all in
// wgmma's K-major 128-byte-swizzle layout [576 / 64][64 rows][64 columns] (16-byte chunk c of
// row r at chunk c ^ (r % 8)), 1024-byte aligned: 3 x 72 KiB + 8 KiB.
// Per 64-key tile (four barriers: tile visible, row maxima, P written, stage free):
//   1. S: warpgroup w multiplies Q (64 x 576) by keys 32w .. 32w + 31 (wgmma m64n32k16, both
//      operands from shared memory, 36 k-steps); a warp holds 16 rows x 32 keys, in the
//      mma.sync C layout.
//   2. Online softmax (base 2, the scale times log2 e applied to the fp32 scores): row maxima
//      are exchanged between the warpgroups through shared memory, so both use the same running
//      max; P = 2^(s - m) is rounded to T, written to the P tile, and the row sums add up the
//      rounded values (the weights P V really uses).
//   3. O += P V: warpgroup w owns output columns 256w .. 256w + 255 of all 64 rows (128 fp32
//      registers per thread; wgmma m64n256k16, A = P, B = the same KV stage read as an
//      MN-major operand, 4 k-steps). A warp's O rows are its S rows, so the rescale by
//      2^(m_old - m_new) needs no exchange.
// The K and V of a key are the same bytes: each tile is loaded once and read by both GEMMs.
//
// Note [MLA decode loads]
// KV tiles arrive by TMA: one thread issues nine 64 x 64 boxes per tile (the tensor map's
// 128-byte swizzle writes the layout above), completing on one mbarrier per stage; cp.async
// cost every thread 18 copies and their address arithmetic per tile. Rows past the split are
// zeroed after arrival (the boxes read whole rows: another sequence's or never-written ones,
// possibly NaN, which a masked key's probability 0 must not meet). The head blocks of one
// sequence (Hq = 128) are adjacent in the grid and read the same tiles at about the same time,
// so the second read should hit the L2. Measured on the H100 (Hq 128, B 64, 16K keys): clusters
// of the two head blocks sharing each tile by TMA multicast were ~5% slower (the stage can only
// be refilled after a cluster barrier), and a variant without any KV loads ran in 76% of the
// time, so the loads cost shared-memory bandwidth and latency there, not HBM traffic.
//
// Note [MLA decode pipeline]
// Two KV stages. The request for tile j + 1 is issued before the wait for tile j (into the
// stage of tile j - 1, which both warpgroups released at the previous iteration's last
// barrier), so two tiles (144 KiB) are in flight while a CTA waits and one while it computes;
// with one in flight per SM each tile paid the DRAM latency on top of its transfer.
//
// Note [MLA decode splits]
// The splits are chosen on the host from (batch, max_len) (the lengths live on the device),
// each a multiple of 64 keys: with one CTA per SM, the count that minimises waves x (tiles per
// CTA + fixed costs), i.e. no partial last wave (e.g. B 1, Hq 128, 16K keys: 64 splits of 256
// keys = 128 CTAs; B 64: one split). With one split the CTA writes `out`; otherwise it writes
// its rows normalised (fp32) and their log-sum-exp (log2 units) to the workspace and
// mla_decode_combine_kernel merges the splits of each (b, h), launched as a programmatic
// dependent (PDL) so that its launch overlaps the decode grid's tail. CTAs past their
// sequence's length exit at once; the combine reads only the splits that cover the sequence.
#pragma once

#include <cuda.h>  // CUtensorMap (the encoder is fetched through the runtime: no -lcuda)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math_constants.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "fk/kernels/common.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FK_MLA_HAS_WGMMA 1
#else
#define FK_MLA_HAS_WGMMA 0
#endif

namespace fk::kernels {

namespace mla_detail {

constexpr int kBN = 64;          // keys per KV tile
constexpr int kThreads = 256;    // two warpgroups
constexpr int kMaxSplits = 256;  // the combine kernel keeps one weight per split in shared memory
constexpr float kLog2e = 1.4426950408889634f;

template <int kHq, int kDkv, int kDr> struct MlaShape {
  static_assert(kDkv == 512 && kDr == 64, "mla_decode: only DeepSeek's latent shape (Dkv 512, Dr 64) is implemented");
  static_assert(kHq >= 16 && kHq % 16 == 0, "mla_decode: Hq must be a positive multiple of 16");
  static constexpr int kD = kDkv + kDr;                                     // 576: a cached row
  static constexpr int kHb = kHq % 64 == 0 ? 64 : kHq % 32 == 0 ? 32 : 16;  // heads per CTA
  static constexpr int kHeadBlocks = kHq / kHb;
  static constexpr int kChunks = kD / 8;                   // 16-byte chunks per row (72)
  static constexpr uint32_t kBlockBytes = 64 * 128;        // one 64-column block of a 64-row tile
  static constexpr uint32_t kTileBytes = kD / 64 * kBlockBytes;  // Q tile or one KV stage (72 KiB)
  static constexpr uint32_t kPBytes = kBN * 128;           // P: 64 rows x 64 keys
  static constexpr uint32_t kRedBytes = 2 * 64 * sizeof(float);
  static constexpr uint32_t kBarBytes = 2 * 8;  // one mbarrier per KV stage
  // + 1024: the tiles are aligned to 1024 bytes by hand (the 128-byte swizzle's period).
  static constexpr size_t kSmemBytes = 3 * size_t{kTileBytes} + kPBytes + kRedBytes + kBarBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the H100 limit");
  static_assert(64 * kChunks % kThreads == 0, "a tile must split evenly over the threads");
};

inline int num_sms() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 132;
  return v > 0 ? v : 132;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

/// Byte offset of 16-byte chunk `chunk` of row `row` in a [cols / 64][64][64] tile whose
/// 128-byte rows are chunk-XOR swizzled (wgmma's K-major 128B-swizzle layout).
__device__ __forceinline__ uint32_t tile_off(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * (64 * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

/// 16-byte global -> shared copy (L2 only, 256-byte L2 prefetch: rows are 1152 contiguous
/// bytes); `valid` false zero-fills without reading.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most kN of this thread's cp.async groups are pending.
template <int kN> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory"); }

/// Copies 64 rows of kD elements (row stride kD) into a swizzled tile; rows >= valid_rows are
/// zero-filled (their dummy source is row 0, which the caller guarantees is in bounds).
template <int kD, class T>
__device__ __forceinline__ void load_rows(uint32_t dst, const T* __restrict__ src, int valid_rows) {
  constexpr int kChunks = kD / 8, kPer = 64 * kChunks / kThreads;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = idx / kChunks, c = idx - r * kChunks;
    const bool ok = r < valid_rows;
    cp_async16(dst + tile_off(r, c), src + static_cast<int64_t>(ok ? r : 0) * kD + c * 8, ok);
  }
}

template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}
template <class T> __device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

/// 2^x on the SFU (ex2.approx.ftz: relative error 2^-22; 2^-inf = +0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// Keeps the compiler from moving accesses of wgmma accumulators across the asynchronous MMA.
template <int kN> __device__ __forceinline__ void pin(float (&a)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(a[i][c])::"memory");
}

#if FK_MLA_HAS_WGMMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/// Generic-proxy shared writes (cp.async, st.shared) -> visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/// This thread's arrival, announcing `bytes` of TMA data for the barrier's current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/// Waits for the completion of the barrier's phase with the given parity.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
/// TMA: the box at (column c0, row c1) of `map` into shared memory at `dst`, completing on `bar`.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
               ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1)
               : "memory");
}

/// wgmma shared-memory descriptor, 128-byte swizzle, 8-row groups 1024 bytes apart (stride
/// offset). K-major operands ignore the leading offset (1); an MN-major operand's leading offset
/// is the distance between its 64-column blocks.
__device__ __forceinline__ uint64_t desc(uint32_t saddr, uint32_t leading_bytes = 16) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(leading_bytes >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

#define FK_MLA_WGMMA_QK_ASM(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n" \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]) \
      : "l"(desc_a), "l"(desc_b), "r"(1));

#define FK_MLA_WGMMA_PV_ASM(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n" \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), \
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), \
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), \
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), \
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), \
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), \
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), \
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3]) \
      : "l"(desc_a), "l"(desc_b), "r"(1));

/// d (64 x 32 fp32 per warpgroup; per warp 16 rows in the mma.sync C layout) += A (64 x 16,
/// K-major) * B (32 x 16, K-major)^T, both from shared memory.
template <class T> __device__ __forceinline__ void wgmma_qk(float (&d)[4][4], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) {
    FK_MLA_WGMMA_QK_ASM("f16");
  } else {
    FK_MLA_WGMMA_QK_ASM("bf16");
  }
}
/// d (64 x 256) += A (64 x 16, K-major) * B (16 x 256, MN-major: rows are the K dimension).
template <class T> __device__ __forceinline__ void wgmma_pv(float (&d)[32][4], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) {
    FK_MLA_WGMMA_PV_ASM("f16");
  } else {
    FK_MLA_WGMMA_PV_ASM("bf16");
  }
}
#undef FK_MLA_WGMMA_QK_ASM
#undef FK_MLA_WGMMA_PV_ASM
#endif  // FK_MLA_HAS_WGMMA

/// The decode kernel (Note [MLA decode tiling]). scale_log2 = softmax scale * log2(e). With one
/// split (gridDim.y == 1) it writes `out`; otherwise o_part [B, Hq, splits, Dkv] (normalised)
/// and lse_part [B, Hq, splits] (log2 units).
template <int kHq, int kDkv, int kDr, class T>
__global__ void __launch_bounds__(kThreads, 1)
mla_decode_kernel(T* __restrict__ out, float* __restrict__ o_part, float* __restrict__ lse_part,
                  const T* __restrict__ q, const __grid_constant__ CUtensorMap kv_map,
                  const int32_t* __restrict__ seqlens, int max_len, int chunk, float scale_log2) {
#if FK_MLA_HAS_WGMMA
  using S = MlaShape<kHq, kDkv, kDr>;
  constexpr int kD = S::kD, kHb = S::kHb;
  constexpr uint32_t kBlk = S::kBlockBytes, kTile = S::kTileBytes;
  // The combine kernel may be scheduled early (it waits for this grid's completion and memory
  // flush in griddepcontrol.wait): its launch latency hides behind this grid's tail.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int hb = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int splits = gridDim.y;
  const int len = max(0, min(seqlens[b], max_len));
  const int begin = split * chunk, end = min(begin + chunk, len);
  const int64_t head0 = static_cast<int64_t>(b) * kHq + hb * kHb;  // first (b, h) row of the CTA
  if (begin >= end) {
    // Past the sequence. With splits the combine skips this CTA's (unwritten) partials; alone,
    // the sequence is empty (len 0) and its output is zero.
    if (splits == 1) {
      for (int i = threadIdx.x; i < kHb * kDkv / 8; i += kThreads)
        *reinterpret_cast<uint4*>(out + head0 * kDkv + i * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  extern __shared__ __align__(128) unsigned char mla_smem[];
  const uint32_t raw = smem_u32(mla_smem);
  const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
  const uint32_t q_s = raw + pad, kv_s = q_s + kTile, p_s = kv_s + 2 * kTile;
  float* red = reinterpret_cast<float*>(mla_smem + pad + 3 * kTile + S::kPBytes);  // [2 warpgroups][64 rows]
  const uint32_t full_bar = p_s + S::kPBytes + S::kRedBytes;  // mbarrier of stage s at full_bar + 8 s

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, g = lane / 4, t = lane % 4;
  const int row0 = (warp % 4) * 16 + g;  // this thread's rows: row0 and row0 + 8 (of S and of O)
  const int n_tiles = (end - begin + kBN - 1) / kBN;
  const int row_base = b * max_len + begin;  // cache row of the split's first key (< 2^31: host check)

  // Thread 0 requests tile t: its nine 64-column boxes, all completing on the stage's barrier
  // (Note [MLA decode loads]).
  auto request = [&](int tile) {
    const uint32_t bar = full_bar + (tile & 1) * 8, dst = kv_s + (tile & 1) * kTile;
    mbar_arrive_expect_tx(bar, kTile);
#pragma unroll
    for (int j = 0; j < kD / 64; ++j) tma_load(dst + j * kBlk, &kv_map, bar, j * 64, row_base + tile * kBN);
  };
  if (tid == 0) {
    mbar_init(full_bar, 1);
    mbar_init(full_bar + 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the TMA unit
  }
  __syncthreads();
  load_rows<kD>(q_s, q + head0 * kD, kHb);  // rows kHb .. 63 are zero
  cp_async_commit();
  if (tid == 0) request(0);

  float o[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[i][c] = 0.f;
  float m_run[2] = {-CUDART_INF_F, -CUDART_INF_F}, l_run[2] = {0.f, 0.f};

  // Note [MLA decode pipeline]
  for (int it = 0; it < n_tiles; ++it) {
    const uint32_t stage = kv_s + (it & 1) * kTile;
    // Tile it + 1 is requested before the wait for tile it: its stage held tile it - 1,
    // released by the previous iteration's barrier D.
    if (tid == 0 && it + 1 < n_tiles) request(it + 1);
    cp_async_wait<0>();                                  // Q (first iteration)
    mbar_wait(full_bar + (it & 1) * 8, (it >> 1) & 1);  // tile it (use it / 2 of its stage)
    const int valid = min(kBN, end - begin - it * kBN);
    if (valid < kBN) {
      // The TMA read whole 64-row boxes: rows past the split (another sequence's, or never
      // written) are zeroed, as a masked key's probability 0 must not meet a NaN.
      for (int i = tid; i < (kBN - valid) * S::kChunks; i += kThreads) {
        const int r = valid + i / S::kChunks, c = i % S::kChunks;
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(stage + tile_off(r, c)), "r"(0) : "memory");
      }
    }
    fence_proxy_async();
    __syncthreads();  // barrier A: tile it (and Q, and the zeroed rows) visible to wgmma

    // 1. S = Q K^T for this warpgroup's 32 keys (k-step kk: 32 bytes into 64-column block kk / 4).
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = 0.f;
    pin(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t off = (kk >> 2) * kBlk + (kk & 3) * 32;
      wgmma_qk<T>(s, desc(q_s + off), desc(stage + wg * 32 * 128 + off));
    }
    wgmma_commit();
    wgmma_wait_all();
    pin(s);

    // 2. Online softmax. s[nt][c]: row row0 + 8 * (c / 2), key 32 wg + 8 nt + 2 t + c % 2.
    const int key0 = begin + it * kBN + wg * 32 + 2 * t;
    const bool partial = begin + (it + 1) * kBN > end;
    float mx[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[nt][c] * scale_log2;
        if (partial && key0 + nt * 8 + (c & 1) >= end) v = -CUDART_INF_F;
        s[nt][c] = v;
        mx[c >> 1] = fmaxf(mx[c >> 1], v);
      }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      if (t == 0) red[wg * 64 + row0 + hr * 8] = mx[hr];
    }
    __syncthreads();  // barrier B: both warpgroups' row maxima
    float alpha[2];
    bool moved = false;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = row0 + hr * 8;
      const float m_new = fmaxf(m_run[hr], fmaxf(red[r], red[64 + r]));  // finite: the tile has a key
      alpha[hr] = exp2_approx(m_run[hr] - m_new);                          // 0 on the first tile
      moved |= m_new != m_run[hr];
      m_run[hr] = m_new;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int chunk_col = wg * 4 + nt;  // the 16-byte chunk (8 keys) of P's row
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float p0 = round_to<T>(exp2_approx(s[nt][2 * hr] - m_run[hr]));
        const float p1 = round_to<T>(exp2_approx(s[nt][2 * hr + 1] - m_run[hr]));
        sum[hr] += p0 + p1;
        const int r = row0 + hr * 8;
        const uint32_t addr = p_s + r * 128 + ((chunk_col ^ (r & 7)) << 4) + t * 4;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pack2<T>(p0, p1)) : "memory");
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * alpha[hr] + sum[hr];  // lane partial
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int i = 0; i < 32; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[i][c] *= alpha[c >> 1];
    }
    fence_proxy_async();
    __syncthreads();  // barrier C: P complete

    // 3. O += P V over this warpgroup's 256 columns (blocks 4 wg ..; k-step kk: 16 keys in).
    pin(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma_pv<T>(o, desc(p_s + kk * 32), desc(stage + wg * 4 * kBlk + kk * 16 * 128, kBlk));
    wgmma_commit();
    wgmma_wait_all();
    pin(o);
    __syncthreads();  // barrier D: both warpgroups are done with this stage (and with P)
  }

  // The row sums: lane partials -> quad -> both warpgroups (red is free: its last reads were
  // before the last tile's barrier C).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
    if (t == 0) red[wg * 64 + row0 + hr * 8] = l_run[hr];
  }
  __syncthreads();
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = row0 + hr * 8;
    if (r >= kHb) continue;  // padding rows of a 16/32-head block
    const float l = red[r] + red[64 + r];  // >= 1: the row max contributes 2^0
    const float inv = 1.f / l;
    const int64_t head = head0 + r;
    if (splits == 1) {
      T* dst = out + head * kDkv + wg * 256 + 2 * t;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt)
        *reinterpret_cast<uint32_t*>(dst + nt * 8) = pack2<T>(o[nt][2 * hr] * inv, o[nt][2 * hr + 1] * inv);
    } else {
      float* dst = o_part + (head * splits + split) * kDkv + wg * 256 + 2 * t;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt)
        *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(o[nt][2 * hr] * inv, o[nt][2 * hr + 1] * inv);
      if (wg == 0 && t == 0) lse_part[head * splits + split] = m_run[hr] + __log2f(l);
    }
  }
#else
  __trap();  // built without the sm_90a target: mla_decode refuses to launch (see mla_decode)
#endif
}

/// out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M) over the splits that cover the sequence
/// (M = max_s lse_s). Grid (kDkv / 128 column groups, kHq, B), 256 threads: thread i weighs
/// split i; warp w adds up splits w, w + 8, ... for its lane's 4 columns (independent loads, many
/// in flight), and the 8 warp sums are added in shared memory. Launched as a programmatic
/// dependent of the decode kernel (PDL): everything before griddepcontrol.wait overlaps it.
template <int kHq, int kDkv, class T>
__global__ void __launch_bounds__(kThreads)
mla_decode_combine_kernel(T* __restrict__ out, const float* __restrict__ o_part, const float* __restrict__ lse_part,
                          const int32_t* __restrict__ seqlens, int max_len, int chunk, int splits) {
  constexpr int kWarps = kThreads / 32, kCols = 128;
  static_assert(kMaxSplits <= kThreads && kDkv % kCols == 0, "one split per thread; 128-column groups");
  __shared__ float w[kMaxSplits];
  __shared__ float red[kWarps];
  __shared__ float4 part[kWarps][32];
  const int cg = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int64_t head = static_cast<int64_t>(b) * kHq + h;
  const int len = max(0, min(seqlens[b], max_len));
  const int n = min(splits, (len + chunk - 1) / chunk);
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the decode grid is complete and visible
#endif
  const float v = tid < n ? lse_part[head * splits + tid] : -CUDART_INF_F;
  float mx = v;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
#pragma unroll
  for (int i = 1; i < kWarps; ++i) mx = fmaxf(mx, red[i]);
  __syncthreads();  // red is reused for the sum
  const float e = tid < n ? exp2f(v - mx) : 0.f;
  w[tid] = e;
  float sum = e;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = 0.f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) sum += red[i];

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* src = o_part + head * splits * kDkv + cg * kCols + lane * 4;
#pragma unroll 4
  for (int s = warp; s < n; s += kWarps) {
    const float4 o = __ldcs(reinterpret_cast<const float4*>(src + static_cast<int64_t>(s) * kDkv));
    const float ws = w[s];
    acc.x += ws * o.x;
    acc.y += ws * o.y;
    acc.z += ws * o.z;
    acc.w += ws * o.w;
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) {
    float4 t = part[0][lane];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) {
      t.x += part[i][lane].x;
      t.y += part[i][lane].y;
      t.z += part[i][lane].z;
      t.w += part[i][lane].w;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;  // n == 0: an empty sequence, out = 0
    uint2 packed;
    packed.x = pack2<T>(t.x * inv, t.y * inv);
    packed.y = pack2<T>(t.z * inv, t.w * inv);
    *reinterpret_cast<uint2*>(out + head * kDkv + cg * kCols + lane * 4) = packed;
  }
}

[[noreturn]] inline void fail(const std::string& what) { throw std::invalid_argument("mla_decode: " + what); }
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/// The TMA map of the cache's first rows rows: [rows][kD] elements, 64 x 64 boxes, 128-byte
/// swizzle (the tiles' shared layout), rows past `rows` read as zero.
template <class T, int kD> CUtensorMap kv_tensor_map(const T* kv, int64_t rows) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) throw std::runtime_error("mla_decode: the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kD), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kD) * sizeof(T)};
  const cuuint32_t box[2] = {64, 64}, elem_strides[2] = {1, 1};
  const CUresult r = encode(&map, std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            2, const_cast<T*>(kv), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("mla_decode: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return map;
}

inline void check_shape(int64_t batch, int64_t max_len) {
  if (batch <= 0) fail("batch must be >= 1, got " + std::to_string(batch));
  if (batch > 65535) fail("batch must be <= 65535 (grid z), got " + std::to_string(batch));
  if (max_len <= 0) fail("max_len must be >= 1, got " + std::to_string(max_len));
  if (max_len > (int64_t{1} << 30)) fail("max_len must be <= 2^30, got " + std::to_string(max_len));
  if (batch * max_len > (int64_t{1} << 31) - 128)
    fail("batch * max_len must be < 2^31 - 128 (cache rows), got " + std::to_string(batch * max_len));
}

}  // namespace mla_detail

/// The KV split for (batch, max_len) (Note [MLA decode splits]): keys per split (a multiple of
/// 64) and the number of splits.
struct MlaDecodeSplit {
  int chunk;
  int splits;
};
template <int kHq, int kDkv, int kDr>
MlaDecodeSplit mla_decode_split(int64_t batch, int64_t max_len) {
  using S = mla_detail::MlaShape<kHq, kDkv, kDr>;
  mla_detail::check_shape(batch, max_len);
  const int64_t tiles = (max_len + mla_detail::kBN - 1) / mla_detail::kBN;
  const int64_t base = batch * S::kHeadBlocks;  // CTAs per split
  const int64_t sms = mla_detail::num_sms();
  // Cost of s splits in tile times, one CTA per SM: waves x (tiles per CTA + ~1 for loading Q
  // and the first tile + ~1 for the partials and the combine when split). The fewest splits
  // within 5% of the best: fewer splits mean fewer partials.
  auto cost = [&](int64_t s, int64_t* per_out) {
    const int64_t per = (tiles + s - 1) / s;
    const int64_t used = (tiles + per - 1) / per;
    *per_out = per;
    return double((base * used + sms - 1) / sms) * double(per + 1 + (used > 1 ? 1 : 0));
  };
  const int64_t max_s = std::min<int64_t>(tiles, mla_detail::kMaxSplits);
  double best = 0;
  for (int64_t s = 1; s <= max_s; ++s) {
    int64_t per;
    const double c = cost(s, &per);
    if (s == 1 || c < best) best = c;
  }
  int64_t per = tiles;
  for (int64_t s = 1; s <= max_s; ++s)
    if (cost(s, &per) <= 1.05 * best) break;
  return {static_cast<int>(per * mla_detail::kBN), static_cast<int>((tiles + per - 1) / per)};
}

/// Bytes of workspace mla_decode needs for (batch, max_len): fp32 partial outputs and
/// log-sum-exps of the splits; 0 when one split suffices. Throws std::invalid_argument for
/// batch or max_len out of range (as mla_decode).
template <int kHq, int kDkv, int kDr>
size_t mla_decode_workspace_bytes(int64_t batch, int64_t max_len) {
  const MlaDecodeSplit sp = mla_decode_split<kHq, kDkv, kDr>(batch, max_len);
  if (sp.splits == 1) return 0;
  return static_cast<size_t>(batch) * kHq * sp.splits * (kDkv + 1) * sizeof(float);
}

/// out[b, h] = sum_p softmax_p(softmax_scale * q[b, h] · row_p) * row_p[0 : kDkv] over the
/// cache_seqlens[b] rows of sequence b (Note [MLA absorbed decode]). All contiguous, 16-byte
/// aligned: q [batch, kHq, kDkv + kDr], out [batch, kHq, kDkv], kv_cache [>= batch * max_len,
/// kDkv + kDr] (token p of sequence b is row b * max_len + p; the cache may hold more
/// sequences), cache_seqlens device i32 [batch] (clamped to [0, max_len]; 0 gives out = 0).
/// workspace: mla_decode_workspace_bytes() bytes (16-byte aligned; may be null when that is 0).
/// T: __nv_bfloat16 or __half. Needs an sm_90 GPU and the sm_90a compile target (wgmma).
/// Throws std::invalid_argument for bad arguments, std::runtime_error for an unsupported GPU or
/// a failed launch.
template <int kHq, int kDkv, int kDr, class T>
void mla_decode(T* out, const T* q, const T* kv_cache, const int32_t* cache_seqlens, int64_t batch, int64_t max_len,
                float softmax_scale, void* workspace, cudaStream_t stream) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "mla_decode: T must be bf16 or fp16");
  using S = mla_detail::MlaShape<kHq, kDkv, kDr>;
  namespace d = mla_detail;
  const MlaDecodeSplit sp = mla_decode_split<kHq, kDkv, kDr>(batch, max_len);  // checks batch, max_len
  if (out == nullptr || q == nullptr || kv_cache == nullptr || cache_seqlens == nullptr)
    d::fail("out, q, kv_cache and cache_seqlens must be device pointers, got a null one");
  if (!d::aligned16(out) || !d::aligned16(q) || !d::aligned16(kv_cache)) d::fail("out, q and kv_cache must be 16-byte aligned");
  if (!(softmax_scale > 0.f) || !std::isfinite(softmax_scale))
    d::fail("softmax_scale must be positive and finite, got " + std::to_string(softmax_scale));
  if (sp.splits > 1 && (workspace == nullptr || !d::aligned16(workspace)))
    d::fail("this shape needs a 16-byte aligned workspace of mla_decode_workspace_bytes() = " +
            std::to_string(mla_decode_workspace_bytes<kHq, kDkv, kDr>(batch, max_len)) + " bytes");
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0)
    throw std::runtime_error("mla_decode: needs an sm_90 GPU (wgmma), this one is sm_" + std::to_string(major) +
                             std::to_string(minor));

  auto kernel = d::mla_decode_kernel<kHq, kDkv, kDr, T>;
  // Per launch (cheap) rather than once: the attribute belongs to the current device's context.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmemBytes));
  if (e != cudaSuccess) throw std::runtime_error(std::string("mla_decode: cudaFuncSetAttribute: ") + cudaGetErrorString(e));
  float* o_part = static_cast<float*>(workspace);
  float* lse_part = sp.splits > 1 ? o_part + static_cast<size_t>(batch) * kHq * sp.splits * kDkv : nullptr;
  const CUtensorMap kv_map = d::kv_tensor_map<T, S::kD>(kv_cache, batch * max_len);
  // Grid (head blocks, splits, B): the head blocks of a (split, sequence) are launched side by
  // side, so the second read of each tile hits the L2.
  const dim3 grid(S::kHeadBlocks, sp.splits, static_cast<unsigned>(batch));
  kernel<<<grid, d::kThreads, S::kSmemBytes, stream>>>(out, o_part, lse_part, q, kv_map, cache_seqlens,
                                                        static_cast<int>(max_len), sp.chunk, softmax_scale * d::kLog2e);
  e = cudaGetLastError();
  if (e == cudaSuccess && sp.splits > 1) {
    // Programmatic dependent launch (Note [MLA decode splits]): the combine grid may start
    // while the decode grid drains; it waits for it in griddepcontrol.wait.
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kDkv / 128, kHq, static_cast<unsigned>(batch));
    cfg.blockDim = dim3(d::kThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, d::mla_decode_combine_kernel<kHq, kDkv, T>, out, static_cast<const float*>(o_part),
                           static_cast<const float*>(lse_part), cache_seqlens, static_cast<int>(max_len), sp.chunk,
                           sp.splits);
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("mla_decode: launch failed: ") + cudaGetErrorString(e));
}

}  // namespace fk::kernels
