// Grouped GEMM over MoE experts with vLLM's fused_moe_kernel semantics (16-bit in/out, fp32
// accumulation, no quantisation):
//   C[s, :] = (A[a_row(s), :] · B[e]^T (+ bias[e, :])) (× topk_weights[s], in fp32, before the
//             one rounding)
// for every position p < *num_tokens_post_padded of sorted_token_ids with s = sorted_token_ids[p]
// < num_valid and e = expert_ids[p / block_m] != -1; a_row(s) = s / top_k for the first GEMM
// (A = hidden_states [T, K]), s for the second (A = activation [T * top_k, K]). B is [E, N, K]
// contiguous (nn.Linear weights, K-major), C is [num_valid, N] with row stride ldc.
//
// Note [MoE grouped GEMM]
// Work decomposition. moe_align_block_size cuts the expert-sorted slot list into m-blocks of
// block_m rows, each owned by one expert (padding rows carry the sentinel num_valid). A tile is
// (m-block, n-block of BN columns), BM == block_m. The number of live m-blocks,
// ceil(*num_tokens_post_padded / BM), is only known on the device, so the grid is persistent:
// min(max_blocks * N / BN, resident blocks) blocks read the count and stride over the live tiles
// (no host sync, no empty blocks to schedule, CUDA-graph capturable). Tile order ("raster"):
// groups of kGroupM m-blocks, m-block fastest inside a group, then n-block, then the next group
// (Triton's GROUP_SIZE_M). The blocks resident at one time then cover ~kGroupM m-blocks x a few
// n-blocks: the group's A rows stay in L2 while the n-blocks stream past, and every B tile is
// fetched from HBM once for all m-blocks of the group that share its expert. For decode
// (block_m 16) kGroupM is unbounded, i.e. m-block fastest over all live m-blocks: all m-blocks of
// one expert read the same B tile at about the same time and B, the only big operand, is read
// from HBM about once.
//
// Loads. Each k-step moves a BM x 64 slice of A and a BN x 64 slice of B (128-byte rows) into a
// pipeline stage with cp.async.cg (16 bytes per copy, L1 bypassed). Thread t copies chunk t % 8 of
// rows t / 8, t / 8 + kThreads / 8, ... The A rows are *gathered*: at the start of a tile the row
// of A of each tile row (s / top_k or s, -1 for padding) is put in shared memory (s_arow) and each
// k-step reads it back (keeps the loader's register state to a pointer and two masks); padding
// rows and B rows past N are copied with src-size 0, which zero-fills the 16 bytes without
// reading memory. The tile's expert id and sorted_token_ids entries are loaded one tile ahead
// (TilePrefetch), and the routing weight load is consumed only after the main loop, so those
// dependent global loads do not stall the next prologue. Shared memory layout of a stage:
// [BM rows of A | BN rows of B], 128 bytes per row, 16-byte chunk c of row r stored at chunk
// c ^ (r % 8) (XOR swizzle). The eight rows an ldmatrix phase reads hit eight different chunk
// columns (all 32 banks), and so do the cp.async writes. This is exactly the hardware "128B
// swizzle" of the Hopper shared-memory matrix descriptors, so the wgmma path reads the same
// stages with no extra work (stages are 1024-byte aligned).
//
// mma.sync path (default, any sm_80+): kWM x kWN warps, warp tile (BM / kWM) x (BN / kWN). Per
// 16-wide k step a warp loads its A fragments with one ldmatrix.x4 per 16 rows and its B
// fragments with one ldmatrix.x4 per 16 columns (B is K-major, so the non-transposed ldmatrix of
// B rows is exactly the "col" operand of mma.m16n8k16) and issues (rows/16) x (cols/8) mma.sync.
// Multi-stage pipeline: kStages - 1 k-steps are in flight; one __syncthreads per k-step both
// publishes the landed stage and frees the one read in the previous step.
//
// wgmma path (sm_90a; taken for block_m 64/128 only where the TMA descriptor encoder is missing:
// both GEMMs take the warp-specialised kernel otherwise): 64-row warpgroups; warpgroup w owns rows
// 64 (w / kWGN) .. +63 and columns (w % kWGN) * BN / kWGN .. of the tile and issues
// wgmma.m64nNk16 with both operands from shared memory (K-major, 128B swizzle descriptors; the
// k16 slices are addressed by advancing the descriptor start address by 32 bytes). The loads are
// still cp.async by all threads (rows are gathered, so no TMA): each k-step waits for its stage,
// fences the generic-proxy writes for the async proxy, barriers, issues the next load, issues 4
// wgmmas, commits, and waits until at most kInflight wgmma groups are pending. With one group in
// flight the stage being refilled is the one read two steps ago (kStages - 2 loads in flight).
//
// Epilogue. The fp32 accumulators (mma.sync C fragments and wgmma D fragments have the same
// per-thread layout: rows g and g + 8, columns 2c, 2c + 1 of each 8-column slice) get the
// expert's bias (optional, [E, N] in T; gpt-oss) added first, as vLLM's fused_moe_kernel with
// HAS_BIAS and HF GptOssExperts ((x W + b) * routing weight) do, then are scaled by the row's
// routing weight (the bias epilogue is a separate kernel instance, kBias, so the bias-free
// kernels are unchanged), rounded to T once and staged in shared memory (row pitch BN + 8
// elements: conflict-free fragment writes); then each thread stores whole 16-byte row chunks to
// C[s, n0 + ...] (coalesced: a row of the tile is BN * 2 contiguous bytes). Padding rows are
// skipped; nothing is written for expert -1 blocks.
//
// Configurations (moe_gemm_cfg below; BK = 64 everywhere; smem = dynamic shared memory per block):
//   block_m 16  Decode16     16 x 64,   4 warps (1 x 4, 16 x 16 each), 6 stages, 61 KB, 3 blocks/SM.
//               Weight-bandwidth bound: 3 blocks x 5 stages x 8 KB = 120 KB of B in flight per SM.
//   block_m 64  Mma64        64 x 128,  4 warps (2 x 2, 32 x 64 each), 4 stages, 98 KB, 2 blocks/SM.
//   block_m 128 Mma128       128 x 128, 8 warps (2 x 4, 64 x 32 each), 3 stages, 99 KB, 2 blocks/SM
//                            (exactly 128 registers, no spills).
//   alternatives (bench --variants): Decode16x128 (16 x 128, 5 stages, 91 KB, 2/SM), Mma64x8w
//   (8 warps of 32 x 32), Mma128x256 (8 warps of 64 x 64, 3 stages, 147 KB, 1/SM).
//   wgmma (MoeGemmImpl::kWgmma; bench --wgmma): Wgmma64 (64 x 128, 1 warpgroup m64n128, 4 stages,
//   98 KB, 2/SM), Wgmma64x256 (2 warpgroups m64n128 side by side,
//   162 KB), Wgmma64n256 (1 warpgroup m64n256, 162 KB), Wgmma128 (128 x 256, 2 warpgroups m64n256,
//   4 stages, 195 KB, 1/SM), Wgmma128x128 (131 KB); Wgmma64x256 / Wgmma128 are the kWgmma choice
//   when the TMA descriptor encoder is unavailable.
//   warp-specialised wgmma (Note [MoE grouped GEMM, warp-specialised]; bench --ws): Ws64 (64 x 256,
//   2 consumer warpgroups m64n128 + 1 producer, 4 stages, 161 KB), Ws128 (128 x 256, 2 consumers
//   m64n256, 4 stages, 193 KB) and Ws192 (192 x 128, 3 consumers m64n128 stacked along M, 5
//   stages, 201 KB), 1/SM: the kWgmma choice for both GEMMs.
//   block_m 192 without them: Mma192 (192 x 128, 8 warps of 96 x 32, 3 stages, 1/SM).
// Which block_m to align with: moe_gemm_block_m (expected rows per expert; see there).
//
// The configurations were chosen with bench/micro/moe_gemm_micro.cu, which checks and times all
// of them (--variants, --wgmma, --ws-all); the block_m thresholds with fk_bench (moe_gemm_block_m).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda.h>  // CUtensorMap (types only; the encoder is fetched through cudart)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "fk/kernels/common.cuh"
#include "fk/kernels/gemv.cuh"  // detail::mma_16816
#include "fk/kernels/launch_util.cuh"

// wgmma (warpgroup MMA) exists only in the arch-specific sm_90a target.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FK_MOE_GEMM_HAS_WGMMA 1
#else
#define FK_MOE_GEMM_HAS_WGMMA 0
#endif

namespace fk::kernels {

/// Tensor-core instruction family of the prefill configurations (block_m 64 / 128). Decode
/// (block_m 16) always uses mma.sync.
enum class MoeGemmImpl {
  kMmaSync,  ///< mma.sync.m16n8k16 + ldmatrix (sm_80+): the default.
  kWgmma,    ///< wgmma.mma_async (sm_90a only); the default for block_m 64/128 where available.
};

/// mma.sync configuration. BM x BN tile (BK = 64), kWM x kWN warps, kStages cp.async stages,
/// kMinBlocks for __launch_bounds__, kGroupM m-blocks per raster group, kL2B: L2 prefetch hint of
/// the weight loads (0 none, 1 128 B, 2 256 B).
template <int BM, int BN, int WM, int WN, int Stages, int MinBlocks, int GroupM, int L2B = 1> struct MoeMmaCfg {
  static constexpr bool kWgmma = false, kWs = false;
  static constexpr int kBM = BM, kBN = BN, kWM = WM, kWN = WN, kStages = Stages, kMinBlocks = MinBlocks;
  static constexpr int kGroupM = GroupM, kL2B = L2B;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kWTM = BM / WM, kWTN = BN / WN;  // warp tile
  static constexpr int kStageBytes = (BM + BN) * 128;
  static constexpr int kPipeBytes = Stages * kStageBytes;
  static constexpr int kEpiBytes = BM * (BN + 8) * 2;
  static constexpr int kMainBytes = kPipeBytes > kEpiBytes ? kPipeBytes : kEpiBytes;
  /// + per-row slot ids, weights and A rows, + 1 KB to align the stages to 1024 bytes.
  static constexpr int kSmemBytes = kMainBytes + BM * 12 + 1024;
  static_assert(kWTM % 16 == 0 && kWTN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(Stages >= 2, "need at least 2 stages");
  static_assert(BM <= kThreads, "one thread per tile row loads the row ids");
};

/// wgmma configuration. BM in {64, 128} (one warpgroup per 64 rows), WGN warpgroups along N (each
/// issues m64 n(BN / WGN) k16, n in {128, 256}), kInflight wgmma groups left pending per k-step
/// (1: overlap the next k-step's issue, kStages - 2 loads in flight; 0: kStages - 1 loads in flight).
template <int BM, int BN, int WGN, int Stages, int Inflight, int MinBlocks, int GroupM, int L2B = 1>
struct MoeWgmmaCfg {
  static constexpr bool kWgmma = true, kWs = false;
  static constexpr int kBM = BM, kBN = BN, kWGN = WGN, kWGM = BM / 64, kStages = Stages, kInflight = Inflight;
  static constexpr int kMinBlocks = MinBlocks, kGroupM = GroupM, kL2B = L2B;
  static constexpr int kThreads = 128 * kWGM * WGN;
  static constexpr int kInstN = BN / WGN;
  static constexpr int kPrefetch = Stages - 1 - Inflight;  // k-steps loaded ahead
  static constexpr int kStageBytes = (BM + BN) * 128;
  static constexpr int kPipeBytes = Stages * kStageBytes;
  static constexpr int kEpiBytes = BM * (BN + 8) * 2;
  static constexpr int kMainBytes = kPipeBytes > kEpiBytes ? kPipeBytes : kEpiBytes;
  static constexpr int kSmemBytes = kMainBytes + BM * 12 + 1024;
  static_assert(BM == 64 || BM == 128, "wgmma tiles are 64 or 128 rows");
  static_assert(kInstN == 128 || kInstN == 256, "wgmma n per warpgroup must be 128 or 256");
  static_assert(Inflight == 0 || Inflight == 1, "0 or 1 wgmma groups in flight");
  static_assert(kPrefetch >= 1, "need at least one k-step loaded ahead");
};

/// Warp-specialised wgmma configuration (sm_90a; Note [MoE grouped GEMM, warp-specialised]):
/// BM x BN tile, kWGN consumer warpgroups along N per 64 rows (2 or 3 consumer warpgroups in all),
/// one producer warpgroup (B by TMA, gathered A rows by cp.async), kStages stages, 1 block per SM;
/// the producer drops to ProdRegs registers per thread and the consumers rise to ConsRegs.
template <int BM, int BN, int WGN, int Stages, int GroupM, int ProdRegs = 40, int ConsRegs = 232>
struct MoeWsCfg {
  static constexpr bool kWgmma = true, kWs = true;
  static constexpr int kBM = BM, kBN = BN, kWGN = WGN, kWGM = BM / 64, kStages = Stages, kGroupM = GroupM;
  static constexpr int kMinBlocks = 1, kProdRegs = ProdRegs, kConsRegs = ConsRegs;
  static constexpr int kConsumers = kWGM * WGN;  // consumer warpgroups
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kInstN = BN / WGN;
  static constexpr int kStageBytes = (BM + BN) * 128;
  static constexpr int kPipeBytes = Stages * kStageBytes;
  static constexpr int kMainBytes = kPipeBytes;
  /// + full/empty mbarriers, + 1 KB to align the stages to 1024 bytes.
  static constexpr int kSmemBytes = kPipeBytes + 2 * Stages * 8 + 1024;
  /// Registers per thread the block is launched with under __launch_bounds__(kThreads, 1): 65536 /
  /// kThreads in steps of 8 (168 at 384 threads, 128 at 512).
  static constexpr int kLaunchRegs = (65536 / kThreads) / 8 * 8;
  static_assert(BM == 64 || BM == 128 || BM == 192, "tiles are 64, 128 or 192 rows");
  static_assert(kInstN == 128 || kInstN == 256, "wgmma n per warpgroup must be 128 or 256");
  static_assert(BN <= 256, "one TMA box of B per stage (box dims <= 256)");
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  // setmaxnreg only moves registers within what the block was launched with: the split must fit in
  // (kConsumers + 1) x kLaunchRegs; with more, the consumers' setmaxnreg.inc waits forever (a hang,
  // seen on the H100 with 48 + 2 x 232 at 384 threads).
  static_assert(kProdRegs + kConsumers * kConsRegs <= (kConsumers + 1) * kLaunchRegs && kProdRegs % 8 == 0 &&
                    kConsRegs % 8 == 0 && kProdRegs <= kLaunchRegs && kConsRegs >= kLaunchRegs,
                "register split");
};

/// The configurations moe_grouped_gemm uses (and the alternatives the micro-benchmark times).
namespace moe_gemm_cfg {
using Decode16 = MoeMmaCfg<16, 64, 1, 4, 6, 3, 1 << 30, 2>;
using Decode16x128 = MoeMmaCfg<16, 128, 1, 4, 5, 2, 1 << 30, 2>;
using Mma64 = MoeMmaCfg<64, 128, 2, 2, 4, 2, 16>;
using Mma64x8w = MoeMmaCfg<64, 128, 2, 4, 4, 2, 16>;
using Mma128 = MoeMmaCfg<128, 128, 2, 4, 3, 2, 16>;
using Mma128x256 = MoeMmaCfg<128, 256, 2, 4, 3, 1, 16>;
using Wgmma64 = MoeWgmmaCfg<64, 128, 1, 4, 1, 2, 16>;
using Wgmma64x256 = MoeWgmmaCfg<64, 256, 2, 4, 1, 1, 16>;
using Wgmma64n256 = MoeWgmmaCfg<64, 256, 1, 4, 1, 1, 16>;
using Wgmma128 = MoeWgmmaCfg<128, 256, 1, 4, 1, 1, 16>;
using Wgmma128x128 = MoeWgmmaCfg<128, 128, 1, 4, 1, 1, 16>;
using Ws128 = MoeWsCfg<128, 256, 1, 4, 16>;      // 2 consumers m64n256, 192 KB of stages
using Ws64 = MoeWsCfg<64, 256, 2, 4, 16>;        // 2 consumers m64n128 side by side, 160 KB
using Ws128g8 = MoeWsCfg<128, 256, 1, 4, 8>;     // (bench) raster groups of 8 m-blocks
using Ws128g32 = MoeWsCfg<128, 256, 1, 4, 32>;   // (bench) raster groups of 32 m-blocks
using Ws64g32 = MoeWsCfg<64, 256, 2, 4, 32>;     // (bench) raster groups of 32 m-blocks
using Ws64s5 = MoeWsCfg<64, 256, 2, 5, 16>;      // (bench) 5 stages, 200 KB
// 192 x 128: three consumers m64n128 stacked along M, so one B slice serves up to three 64-row
// blocks of an expert (Note [MoE grouped GEMM, warp-specialised], "192-row tiles"); 5 stages,
// 200 KB; raster groups of 4 m-blocks (about one wave of 132 blocks at N / 128 = 32 n-blocks).
using Ws192 = MoeWsCfg<192, 128, 1, 5, 4, 56, 152>;
using Ws192s4 = MoeWsCfg<192, 128, 1, 4, 4, 56, 152>;   // (bench) 4 stages, 160 KB
using Ws192g1 = MoeWsCfg<192, 128, 1, 5, 1, 56, 152>;   // (bench) the n-blocks of one m-block in a row
using Mma192 = MoeMmaCfg<192, 128, 2, 4, 3, 1, 4>;       // block_m 192 without the warp-specialised kernel
}  // namespace moe_gemm_cfg

namespace moe_gemm_detail {

/// Everything a launch needs (passed by value as the kernel parameter).
struct Params {
  void* c;
  int64_t ldc;
  const void* a;
  int64_t lda;
  const void* b;
  const float* topk_weights;
  const int32_t* sorted_token_ids;
  const int32_t* expert_ids;
  const int32_t* num_tokens_post_padded;
  const void* bias;  // [E, N] in T, or nullptr
  int64_t num_valid;
  int top_k;
  int a_div_topk;
  int mul_routed_weight;
  int n, k;
  int max_blocks;
};

// ---------------------------------------------------------------------------------------------
// PTX wrappers.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16-byte cp.async.cg (L2 only); src_bytes 0 zero-fills the destination without reading.
template <int kL2> __device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  if constexpr (kL2 == 2) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
  } else if constexpr (kL2 == 1) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kN> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// First 1024-byte aligned address at or after p (shared window).
__device__ __forceinline__ uint8_t* align_1024(uint8_t* p) {
  return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}

#if FK_MOE_GEMM_HAS_WGMMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kN> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kN) : "memory");
}
/// Make this thread's completed generic-proxy shared-memory writes (cp.async) visible to the async
/// proxy (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Keep the compiler from moving accumulator accesses across the asynchronous wgmma window.
template <int kN> __device__ __forceinline__ void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/// Shared-memory matrix descriptor: K-major operand, 128-byte swizzle, 8-row groups 1024 bytes
/// apart (stride byte offset), leading byte offset unused for swizzled K-major (set to 1), base
/// offset 0 (the stages are 1024-byte aligned; the k16 slices add 32-byte multiples to the start).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// wgmma.mma_async m64nNk16, fp32 accumulate, A and B from shared memory (descriptors), both
// K-major (imm-trans 0), scale-d 1 (accumulate), scale-a/b 1.
#define FK_MOE_WGMMA_M64N128K16(TY, d, desc_a, desc_b)                                                    \
  asm volatile(                                                                                         \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                      \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {"                                    \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                          \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                  \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),         \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),       \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),       \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),       \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),       \
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),       \
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),       \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])        \
      : "l"(desc_a), "l"(desc_b), "r"(1))

#define FK_MOE_WGMMA_M64N256K16(TY, d, desc_a, desc_b)                                                      \
  asm volatile(                                                                                           \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                       \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {"                                      \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                            \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                  \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                  \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                  \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                  \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                  \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "      \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"    \
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),   \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),           \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),         \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),         \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),         \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),         \
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),         \
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),         \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),         \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),         \
        "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),         \
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),         \
        "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),         \
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),         \
        "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),   \
        "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),  \
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),  \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),  \
        "+f"(d[127])                                                                                      \
      : "l"(desc_a), "l"(desc_b), "r"(1))

template <class T, int kN> __device__ __forceinline__ void wgmma_m64k16(float (&d)[kN / 2], uint64_t da, uint64_t db) {
  if constexpr (kN == 128) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      FK_MOE_WGMMA_M64N128K16("bf16", d, da, db);
    } else {
      FK_MOE_WGMMA_M64N128K16("f16", d, da, db);
    }
  } else {
    static_assert(kN == 256, "wgmma n must be 128 or 256");
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      FK_MOE_WGMMA_M64N256K16("bf16", d, da, db);
    } else {
      FK_MOE_WGMMA_M64N256K16("f16", d, da, db);
    }
  }
}
#undef FK_MOE_WGMMA_M64N128K16
#undef FK_MOE_WGMMA_M64N256K16
#endif  // FK_MOE_GEMM_HAS_WGMMA

// ---------------------------------------------------------------------------------------------
// Pieces shared by both paths.
// ---------------------------------------------------------------------------------------------

/// The live tile space (read from the device) and the raster order (Note [MoE grouped GEMM]).
struct TileSpace {
  int num_m, num_n, tiles, ntpp;

  template <int BM, int BN> __device__ __forceinline__ static TileSpace make(const Params& p) {
    TileSpace ts;
    ts.ntpp = max(0, *p.num_tokens_post_padded);
    ts.num_m = min((ts.ntpp + BM - 1) / BM, p.max_blocks);
    ts.num_n = (p.n + BN - 1) / BN;
    ts.tiles = ts.num_m * ts.num_n;
    return ts;
  }
  /// Tile t -> (m-block, n-block): groups of group_m m-blocks, m fastest within a group.
  __device__ __forceinline__ void coords(int t, int group_m, int& mb, int& nb) const {
    const int gm = min(group_m, num_m);
    const int per_group = gm * num_n;
    const int g = t / per_group;
    const int first = g * gm;
    const int size = min(num_m - first, gm);
    const int r = t - g * per_group;
    mb = first + r % size;
    nb = r / size;
  }
};

/// The expert and (thread tid < BM) the sorted_token_ids entry of a tile, loaded one tile ahead:
/// issued at the start of tile t for tile t + gridDim.x, so the dependent global loads of the tile
/// bookkeeping overlap the current tile's main loop instead of stalling the next prologue.
template <int BM> struct TilePrefetch {
  int e = -1;  // expert of the prefetched tile (-1: none / not on this rank)
  int s = -1;  // row id of thread tid's row (-1 when past num_tokens_post_padded)

  __device__ __forceinline__ void issue(const Params& p, const TileSpace& ts, int t, int group_m, int tid) {
    e = -1;
    s = -1;
    if (t < ts.tiles) {
      int mb, nb;
      ts.coords(t, group_m, mb, nb);
      e = __ldg(p.expert_ids + mb);
      const int pos = mb * BM + tid;
      if (tid < BM && pos < ts.ntpp) s = __ldg(p.sorted_token_ids + pos);
    }
  }
};

/// Per-row data of the tile's BM rows (thread tid < BM owns row tid) from its sorted_token_ids
/// entry s_raw: s_tok = slot index or -1 for padding (the epilogue's destination row), s_arow = row
/// of A to gather or -1 (zero-fill). Returns the routing weight (1 when not multiplying / padding);
/// the caller stores it to s_w only after the main loop, so the load's latency is hidden. The
/// caller barriers before use.
template <int BM>
__device__ __forceinline__ float set_row_info(const Params& p, int s_raw, int32_t* s_tok, int32_t* s_arow, int tid) {
  float w = 1.f;
  if (tid < BM) {
    const bool valid = s_raw >= 0 && s_raw < p.num_valid;
    s_tok[tid] = valid ? s_raw : -1;
    s_arow[tid] = valid ? (p.a_div_topk ? s_raw / p.top_k : s_raw) : -1;
    if (valid && p.mul_routed_weight) w = __ldg(p.topk_weights + s_raw);
  }
  return w;
}

/// cp.async producer for one stage: kRowsA gathered A rows and kRowsB rows of the expert's B,
/// 64 elements (128 bytes = 8 chunks) each, into the swizzled layout. Thread t copies chunk t % 8
/// of rows t / 8 + i * kThreads / 8. Little register state (the A rows are read from s_arow at
/// each k-step, the strides come from the parameter bank): the 128 x 128 mma.sync tile runs at
/// 2 blocks per SM, i.e. 128 registers per thread.
template <class T, int kRowsA, int kRowsB, int kThreads, int kL2B> struct StageLoader {
  static constexpr int kRowStep = kThreads / 8;
  static_assert(kThreads % 64 == 0, "the swizzle phase of a thread's rows must not depend on the pass");
  static_assert(kRowsA % kRowStep == 0 || kRowStep % kRowsA == 0, "A rows vs threads");
  static_assert(kRowsB % kRowStep == 0, "B rows must be a multiple of kThreads / 8");
  static constexpr int kAIter = (kRowsA + kRowStep - 1) / kRowStep;
  static constexpr int kBIter = kRowsB / kRowStep;
  static_assert(kBIter <= 32, "mask is 32 bits");

  const T* b_src;  // this thread's first B row, chunk tid % 8
  uint32_t b_ok;   // bit i: B row i < N (else zero-fill)
  uint32_t dst;    // byte offset of this thread's chunk in row tid / 8 (swizzled)

  __device__ __forceinline__ void init(const Params& p, int n0, int e, int tid) {
    const int r0 = tid >> 3, c = tid & 7;
    dst = static_cast<uint32_t>(r0 * 128 + ((c ^ (r0 & 7)) << 4));
    b_src = static_cast<const T*>(p.b) + (static_cast<int64_t>(e) * p.n + n0 + r0) * p.k + c * 8;
    b_ok = 0;
#pragma unroll
    for (int i = 0; i < kBIter; ++i) b_ok |= (n0 + r0 + i * kRowStep < p.n ? 1u : 0u) << i;
  }

  /// Copies k-step [k0, k0 + 64) into the stage whose A rows start at s_a and B rows at s_b.
  __device__ __forceinline__ void load(const Params& p, const int32_t* s_arow, uint32_t s_a, uint32_t s_b,
                                       int k0) const {
    const int tid = threadIdx.x, r0 = tid >> 3, c = tid & 7;
    const T* a = static_cast<const T*>(p.a);
#pragma unroll
    for (int i = 0; i < kAIter; ++i) {
      if (kRowsA % kRowStep == 0 || r0 + i * kRowStep < kRowsA) {
        const int ar = s_arow[r0 + i * kRowStep];
        const bool ok = ar >= 0;
        const T* src = a + static_cast<int64_t>(ok ? ar : 0) * p.lda + c * 8 + k0;
        cp_async16<1>(s_a + dst + i * kRowStep * 128, ok ? static_cast<const void*>(src) : p.a, ok ? 16u : 0u);
      }
    }
    const int64_t b_step = static_cast<int64_t>(kRowStep) * p.k;
    const T* bp = b_src + k0;
#pragma unroll
    for (int i = 0; i < kBIter; ++i) {
      const bool ok = (b_ok >> i) & 1u;
      cp_async16<kL2B>(s_b + dst + i * kRowStep * 128, ok ? static_cast<const void*>(bp) : p.b, ok ? 16u : 0u);
      bp += b_step;
    }
  }
};

/// Epilogue staging: pitch BN + 8 elements (16 bytes of skew per row: the 8 rows x 4 column pairs
/// a warp writes per fragment land in 32 different banks).
template <class T, int BN> __device__ __forceinline__ void stage_pair(T* stage, int r, int col, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(stage + r * (BN + 8) + col) = pack2<T>(lo, hi);
}

/// bias[col], bias[col + 1] as fp32 (col even; 0 past N). `bias` points at the tile's first
/// column of the expert's row, `n_rem` = N - n0.
template <class T> __device__ __forceinline__ float2 bias_pair(const T* bias, int col, int n_rem) {
  if (col >= n_rem) return make_float2(0.f, 0.f);
  const unsigned int raw = __ldg(reinterpret_cast<const unsigned int*>(bias + col));
  const T* v = reinterpret_cast<const T*>(&raw);
  return make_float2(to_float(v[0]), to_float(v[1]));
}

/// Staged BM x BN tile -> C rows s_tok[r] (16-byte stores; padding rows and columns >= N skipped).
template <class T, int BM, int BN, int kThreads>
__device__ __forceinline__ void store_tile(const T* stage, const Params& p, const int32_t* s_tok, int n0, int tid) {
  constexpr int kChunks = BN / 8;
  static_assert((BM * kChunks) % kThreads == 0, "tile chunks must divide evenly over the threads");
  T* c = static_cast<T*>(p.c);
#pragma unroll
  for (int it = 0; it < BM * kChunks / kThreads; ++it) {
    const int idx = tid + it * kThreads;
    const int r = idx / kChunks, ch = idx % kChunks;
    const int s = s_tok[r];
    const int col = n0 + ch * 8;
    if (s >= 0 && col < p.n) {
      const uint4 v = *reinterpret_cast<const uint4*>(stage + r * (BN + 8) + ch * 8);
      *reinterpret_cast<uint4*>(c + static_cast<int64_t>(s) * p.ldc + col) = v;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// mma.sync kernel.
// ---------------------------------------------------------------------------------------------

template <class Cfg, class T, bool kBias = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) moe_gemm_mma_kernel(const Params p) {
  constexpr int BM = Cfg::kBM, BN = Cfg::kBN, S = Cfg::kStages;
  constexpr int WTM = Cfg::kWTM, WTN = Cfg::kWTN, MT = WTM / 16, NT = WTN / 8;
  constexpr int kThreads = Cfg::kThreads;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  int32_t* s_tok = reinterpret_cast<int32_t*>(smem + Cfg::kMainBytes);
  float* s_w = reinterpret_cast<float*>(s_tok + BM);
  int32_t* s_arow = reinterpret_cast<int32_t*>(s_w + BM);
  const uint32_t smem_base = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / Cfg::kWN, wn = warp % Cfg::kWN;

  // ldmatrix addressing. A (x4 = 16 rows x 16 k): lane l gives row l % 16, k chunk 2 kk + l / 16.
  // B (x4 = 16 n x 16 k, two n8 tiles): lane l gives n row (l % 8) + 8 (l / 16), k chunk
  // 2 kk + (l / 8) % 2. Tile rows are multiples of 8 apart, so the swizzle term (row % 8) is l % 8,
  // and since row starts are 128-byte aligned the swizzled chunk offset is a pure XOR of the
  // address: lane base | ((l-dependent chunk ^ l % 8) << 4), then ^ (kk << 5) per k16 step.
  const uint32_t a_lane = static_cast<uint32_t>((wm * WTM + (lane & 15)) * 128) |
                          (static_cast<uint32_t>((lane >> 4) ^ (lane & 7)) << 4);
  const uint32_t b_lane = static_cast<uint32_t>(BM * 128 + (wn * WTN + (lane & 7) + ((lane >> 4) << 3)) * 128) |
                          (static_cast<uint32_t>(((lane >> 3) & 1) ^ (lane & 7)) << 4);

  const TileSpace ts = TileSpace::make<BM, BN>(p);
  const int kt_count = p.k / 64;
  TilePrefetch<BM> pf;
  pf.issue(p, ts, blockIdx.x, Cfg::kGroupM, tid);

  for (int tile = blockIdx.x; tile < ts.tiles; tile += gridDim.x) {
    int mb, nb;
    ts.coords(tile, Cfg::kGroupM, mb, nb);
    const int e = pf.e, s_raw = pf.s;
    pf.issue(p, ts, tile + gridDim.x, Cfg::kGroupM, tid);
    if (e < 0) continue;  // expert not on this rank: write nothing (uniform branch)
    const int n0 = nb * BN;
    const float w_row = set_row_info<BM>(p, s_raw, s_tok, s_arow, tid);
    StageLoader<T, BM, BN, kThreads, Cfg::kL2B> ld;
    ld.init(p, n0, e, tid);
    __syncthreads();  // s_arow is visible

#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < kt_count) {
        const uint32_t st = smem_base + s * Cfg::kStageBytes;
        ld.load(p, s_arow, st, st + BM * 128, s * 64);
      }
      cp_async_commit();
    }

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

    int read_slot = 0, write_slot = S - 1;
#pragma unroll 1
    for (int kt = 0; kt < kt_count; ++kt) {
      cp_async_wait<S - 2>();  // k-step kt has landed (this thread's copies) ...
      __syncthreads();         // ... and everyone's; the slot read at kt - 1 is free
      if (kt + S - 1 < kt_count) {
        const uint32_t st = smem_base + write_slot * Cfg::kStageBytes;
        ld.load(p, s_arow, st, st + BM * 128, (kt + S - 1) * 64);
      }
      cp_async_commit();
      write_slot = write_slot == S - 1 ? 0 : write_slot + 1;

      const uint32_t sa = smem_base + read_slot * Cfg::kStageBytes + a_lane;
      const uint32_t sb = smem_base + read_slot * Cfg::kStageBytes + b_lane;
      read_slot = read_slot == S - 1 ? 0 : read_slot + 1;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
        for (int i = 0; i < MT; ++i) ldmatrix_x4(af[i], (sa + i * 16 * 128) ^ (kk << 5));
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) ldmatrix_x4(bf[j], (sb + j * 16 * 128) ^ (kk << 5));
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j)
            detail::mma_16816<T>(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j / 2][(j % 2) * 2],
                                 bf[j / 2][(j % 2) * 2 + 1]);
      }
    }
    if (tid < BM) s_w[tid] = w_row;
    cp_async_wait<0>();
    __syncthreads();  // all warps are done with the stages: reuse them for the epilogue; s_w is visible

    T* stage = reinterpret_cast<T*>(smem);
    const int g = lane >> 2, cq = (lane & 3) * 2;
    if constexpr (kBias) {  // (acc + bias) * w (Note [MoE grouped GEMM], epilogue)
      // Column pair outer: one bias pair live at a time. (The 128 x 128 tile has no registers
      // to spare: its bias instance spills 20 bytes under ptxas of CUDA 13.0; the bias-free
      // instance is unchanged.)
      const T* bias = static_cast<const T*>(p.bias) + static_cast<int64_t>(e) * p.n + n0;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int col = wn * WTN + j * 8 + cq;
        const float2 bj = bias_pair<T>(bias, col, p.n - n0);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          const int r = wm * WTM + i * 16 + g;
          const float w0 = s_w[r], w1 = s_w[r + 8];
          stage_pair<T, BN>(stage, r, col, (acc[i][j][0] + bj.x) * w0, (acc[i][j][1] + bj.y) * w0);
          stage_pair<T, BN>(stage, r + 8, col, (acc[i][j][2] + bj.x) * w1, (acc[i][j][3] + bj.y) * w1);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = wm * WTM + i * 16 + g;
        const float w0 = s_w[r], w1 = s_w[r + 8];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int col = wn * WTN + j * 8 + cq;
          stage_pair<T, BN>(stage, r, col, acc[i][j][0] * w0, acc[i][j][1] * w0);
          stage_pair<T, BN>(stage, r + 8, col, acc[i][j][2] * w1, acc[i][j][3] * w1);
        }
      }
    }
    __syncthreads();
    store_tile<T, BM, BN, kThreads>(stage, p, s_tok, n0, tid);
    __syncthreads();  // the next tile's prologue overwrites the staging area and s_tok
  }
}

// ---------------------------------------------------------------------------------------------
// wgmma kernel (sm_90a).
// ---------------------------------------------------------------------------------------------

template <class Cfg, class T, bool kBias = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) moe_gemm_wgmma_kernel(const Params p) {
#if FK_MOE_GEMM_HAS_WGMMA
  constexpr int BM = Cfg::kBM, BN = Cfg::kBN, S = Cfg::kStages, NI = Cfg::kInstN, D = Cfg::kPrefetch;
  constexpr int kThreads = Cfg::kThreads;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  int32_t* s_tok = reinterpret_cast<int32_t*>(smem + Cfg::kMainBytes);
  float* s_w = reinterpret_cast<float*>(s_tok + BM);
  int32_t* s_arow = reinterpret_cast<int32_t*>(s_w + BM);
  const uint32_t smem_base = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = tid >> 7, wq = (tid >> 5) & 3;  // warpgroup, warp within it
  const int wg_m = wg / Cfg::kWGN, wg_n = wg % Cfg::kWGN;
  const uint32_t a_off = static_cast<uint32_t>(wg_m * 64 * 128);
  const uint32_t b_off = static_cast<uint32_t>(BM * 128 + wg_n * NI * 128);

  const TileSpace ts = TileSpace::make<BM, BN>(p);
  const int kt_count = p.k / 64;
  TilePrefetch<BM> pf;
  pf.issue(p, ts, blockIdx.x, Cfg::kGroupM, tid);

  for (int tile = blockIdx.x; tile < ts.tiles; tile += gridDim.x) {
    int mb, nb;
    ts.coords(tile, Cfg::kGroupM, mb, nb);
    const int e = pf.e, s_raw = pf.s;
    pf.issue(p, ts, tile + gridDim.x, Cfg::kGroupM, tid);
    if (e < 0) continue;
    const int n0 = nb * BN;
    const float w_row = set_row_info<BM>(p, s_raw, s_tok, s_arow, tid);
    StageLoader<T, BM, BN, kThreads, Cfg::kL2B> ld;
    ld.init(p, n0, e, tid);
    __syncthreads();  // s_arow is visible

#pragma unroll
    for (int s = 0; s < D; ++s) {
      if (s < kt_count) {
        const uint32_t st = smem_base + s * Cfg::kStageBytes;
        ld.load(p, s_arow, st, st + BM * 128, s * 64);
      }
      cp_async_commit();
    }

    float acc[NI / 2];
#pragma unroll
    for (int i = 0; i < NI / 2; ++i) acc[i] = 0.f;

    int read_slot = 0, write_slot = D;
#pragma unroll 1
    for (int kt = 0; kt < kt_count; ++kt) {
      cp_async_wait<D - 1>();    // k-step kt has landed (this thread's copies)
      fence_proxy_async_smem();  // ... made visible to the async proxy
      __syncthreads();           // ... for all threads; every warpgroup has retired the wgmmas of kt - 1 - kInflight
      if (kt + D < kt_count) {
        const uint32_t st = smem_base + write_slot * Cfg::kStageBytes;
        ld.load(p, s_arow, st, st + BM * 128, (kt + D) * 64);
      }
      cp_async_commit();
      write_slot = write_slot == S - 1 ? 0 : write_slot + 1;

      const uint32_t st = smem_base + read_slot * Cfg::kStageBytes;
      read_slot = read_slot == S - 1 ? 0 : read_slot + 1;
      fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wgmma_m64k16<T, NI>(acc, wgmma_desc_sw128(st + a_off + kk * 32), wgmma_desc_sw128(st + b_off + kk * 32));
      }
      wgmma_commit();
      wgmma_wait<Cfg::kInflight>();
      fence_operands(acc);
    }
    wgmma_wait<0>();
    fence_operands(acc);
    if (tid < BM) s_w[tid] = w_row;
    cp_async_wait<0>();
    __syncthreads();  // all warpgroups are done with the stages; s_w is visible

    T* stage = reinterpret_cast<T*>(smem);
    const int r = wg_m * 64 + wq * 16 + (lane >> 2);
    const float w0 = s_w[r], w1 = s_w[r + 8];
    if constexpr (kBias) {  // (acc + bias) * w
      const T* bias = static_cast<const T*>(p.bias) + static_cast<int64_t>(e) * p.n + n0;
#pragma unroll
      for (int j = 0; j < NI / 8; ++j) {
        const int col = wg_n * NI + j * 8 + (lane & 3) * 2;
        const float2 bv = bias_pair<T>(bias, col, p.n - n0);
        stage_pair<T, BN>(stage, r, col, (acc[4 * j] + bv.x) * w0, (acc[4 * j + 1] + bv.y) * w0);
        stage_pair<T, BN>(stage, r + 8, col, (acc[4 * j + 2] + bv.x) * w1, (acc[4 * j + 3] + bv.y) * w1);
      }
    } else {
#pragma unroll
      for (int j = 0; j < NI / 8; ++j) {
        const int col = wg_n * NI + j * 8 + (lane & 3) * 2;
        stage_pair<T, BN>(stage, r, col, acc[4 * j] * w0, acc[4 * j + 1] * w0);
        stage_pair<T, BN>(stage, r + 8, col, acc[4 * j + 2] * w1, acc[4 * j + 3] * w1);
      }
    }
    __syncthreads();
    store_tile<T, BM, BN, kThreads>(stage, p, s_tok, n0, tid);
    __syncthreads();
  }
#else
  __trap();  // wgmma needs the sm_90a target
#endif
}

// ---------------------------------------------------------------------------------------------
// Warp-specialised wgmma kernel (sm_90a).
//
// Note [MoE grouped GEMM, warp-specialised]
// One producer warpgroup and two consumer warpgroups per block, one block per SM, persistent over
// the same tile sequence as the other kernels (both roles walk it independently and skip the
// expert -1 tiles alike). Stage = [BM rows of A | BN rows of B], 128 bytes per row, 128B swizzle.
// Producer: its first thread posts the stage's B byte count on the stage's "full" mbarrier
// (arrive.expect_tx) and loads the BN x 64 slice of B with one TMA (3-d tensor map {K, N, experts}:
// rows past N are out of bounds in the N dimension and zero-filled, never read from the next
// expert or past the end of B); all 128 threads gather their A rows with cp.async (row pointers
// computed once per tile from sorted_token_ids; padding rows zero-filled with src-size 0) and
// then cp.async.mbarrier.arrive.noinc the same barrier, which fires when the thread's copies have
// landed. full[s] expects 129 arrivals (128 noinc + the expect_tx one) and the B bytes. Before
// filling a stage the producer waits on its "empty" mbarrier (one arrival per consumer warp).
// Consumers: wait full[s], fence.proxy.async (the cp.async writes are generic-proxy writes that
// wgmma reads through the async proxy), issue 4 wgmma k16 steps, commit, wait until one group is
// pending, and release the previous stage (its wgmmas have retired). The epilogue goes straight
// from the accumulators to C (bias, routing weight, one rounding) while the producer already
// fills the next tile's stages: a 4 x 4 shuffle transpose inside each quad turns the fragments
// into 16-byte row chunks, so a warp store writes 8 rows x 64 contiguous bytes (whole sectors;
// the plain 4-byte fragment stores, half sectors, were up to 20% slower at Mixtral T=16384, where
// C is 1.9 GB). No shared memory is used for it (all of it holds the 4 stages). Register split
// by setmaxnreg: producer ProdRegs (40), consumers ConsRegs (232); no spills under CUDA 13.0.
//
// DRAM traffic of B (H100, ncu; bench/results/2026-11-23-h100-moe-gemm-ws-w2/README.md). When an
// expert has several m-blocks, each reads the same B slices; only L2 makes that one DRAM read,
// and only while the partner tiles (adjacent tile ids, so neighbouring blocks) run close
// together. At DeepSeek-V3 w13, 4096 tokens (2-3 m-blocks of 64 per expert, 15 GB of weights),
// launches read 18.8-30 GB from DRAM and took 6.7-10.3 ms in proportion. A dynamic schedule
// (atomic tile counter) was tried and read more.
//
// 192-row tiles (Ws192, block_m 192). What makes B one read by construction is one block holding
// all of an expert's rows: with 96-192 expected rows per expert (moe_gemm_block_m) the routing is
// aligned to 192, and three consumer warpgroups, each m64n128 on its own 64 rows, share every B
// slice. The padding rows are computed like the others: in that band the kernel is bound by the
// weight stream, and skipping the wgmmas of an all-padding warpgroup measured the same there
// (H100, DeepSeek-V3 T=4096, gpt-oss-20b T=1024, within 2%), while the same skip in Ws128 cost up
// to 23% (Mixtral; 0-7% on DeepSeek-V3, gpt-oss-20b and Qwen3-30B-A3B at 1024-4096 tokens) and
// more at DeepSeek-V3 w13 T=16384 (28.6 ms median against 23.1, min 12.1). The branch around the
// consumer's k-loop alone did it (bench/results/2026-11-23-h100-moe-gemm-ws192/README.md), so
// neither kernel has it. 512 threads launch with 128 registers each; the split is producer 56,
// consumers 152 (no spills under CUDA 13.0). The alternative, a 2-CTA cluster multicasting B to
// two 64-row blocks, needs cross-CTA empty barriers and still re-reads B for an expert's third
// block.
// ---------------------------------------------------------------------------------------------

#if FK_MOE_GEMM_HAS_WGMMA
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\nFK_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra FK_MBAR_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
/// Arrive on `bar` once all of this thread's prior cp.async copies have landed (no pending-count
/// increment: the barrier's expected count includes this arrival).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
template <int kRegs> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
#endif  // FK_MOE_GEMM_HAS_WGMMA

template <class Cfg, class T, bool kBias = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    moe_gemm_ws_kernel(const Params p, const __grid_constant__ CUtensorMap tmap_b) {
#if FK_MOE_GEMM_HAS_WGMMA
  constexpr int BM = Cfg::kBM, BN = Cfg::kBN, S = Cfg::kStages, NI = Cfg::kInstN, NC = Cfg::kConsumers;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_base + Cfg::kPipeBytes, empty0 = full0 + S * 8;
  const int tid = threadIdx.x, wg = tid >> 7;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      mbar_init(full0 + s * 8, 129);
      mbar_init(empty0 + s * 8, NC * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  const TileSpace ts = TileSpace::make<BM, BN>(p);
  const int kt_count = p.k / 64;

  if (wg == NC) {
    // ---------------- producer ----------------
    setmaxnreg_dec<Cfg::kProdRegs>();
    const int pt = tid - NC * 128, c = pt & 7, r0 = pt >> 3;
    const uint32_t dst = static_cast<uint32_t>(r0 * 128 + ((c ^ (r0 & 7)) << 4));
    const T* a = static_cast<const T*>(p.a);
    int slot = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < ts.tiles; tile += gridDim.x) {
      int mb, nb;
      ts.coords(tile, Cfg::kGroupM, mb, nb);
      const int e = __ldg(p.expert_ids + mb);
      if (e < 0) continue;
      int arow[BM / 16];  // row of A of tile rows r0 + 16 i, -1: padding (32-bit: few registers here)
#pragma unroll
      for (int i = 0; i < BM / 16; ++i) {
        const int pos = mb * BM + r0 + 16 * i;
        const int s = pos < ts.ntpp ? __ldg(p.sorted_token_ids + pos) : -1;
        const bool ok = s >= 0 && s < p.num_valid;
        arow[i] = ok ? (p.a_div_topk ? s / p.top_k : s) : -1;
      }
      const T* a_k = a + c * 8;
#pragma unroll 1
      for (int kt = 0; kt < kt_count; ++kt) {
        mbar_wait(empty0 + slot * 8, phase ^ 1u);
        const uint32_t st = smem_base + slot * Cfg::kStageBytes;
        const uint32_t full = full0 + slot * 8;
        if (pt == 0) {
          mbar_arrive_expect_tx(full, BN * 128);
          tma_load_3d(st + BM * 128, &tmap_b, kt * 64, nb * BN, e, full);
        }
#pragma unroll
        for (int i = 0; i < BM / 16; ++i) {
          const bool ok = arow[i] >= 0;
          cp_async16<1>(st + dst + i * 16 * 128, a_k + static_cast<int64_t>(ok ? arow[i] : 0) * p.lda, ok ? 16u : 0u);
        }
        a_k += 64;
        cp_async_mbar_arrive_noinc(full);
        if (++slot == S) {
          slot = 0;
          phase ^= 1u;
        }
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  } else {
    // ---------------- consumers ----------------
    setmaxnreg_inc<Cfg::kConsRegs>();
    const int lane = tid & 31, wq = (tid >> 5) & 3;
    const int wg_m = wg / Cfg::kWGN, wg_n = wg % Cfg::kWGN;
    const uint32_t a_off = static_cast<uint32_t>(wg_m * 64 * 128);
    const uint32_t b_off = static_cast<uint32_t>(BM * 128 + wg_n * NI * 128);
    const int rl = wg_m * 64 + wq * 16 + (lane >> 2);  // tile row of acc[4j], acc[4j + 1]; + 8 for the others
    T* cmat = static_cast<T*>(p.c);
    int slot = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < ts.tiles; tile += gridDim.x) {
      int mb, nb;
      ts.coords(tile, Cfg::kGroupM, mb, nb);
      const int e = __ldg(p.expert_ids + mb);
      if (e < 0) continue;
      // Row bookkeeping for the epilogue (loads consumed only after the main loop).
      int s0 = -1, s1 = -1;
      {
        const int pos0 = mb * BM + rl, pos1 = pos0 + 8;
        if (pos0 < ts.ntpp) s0 = __ldg(p.sorted_token_ids + pos0);
        if (pos1 < ts.ntpp) s1 = __ldg(p.sorted_token_ids + pos1);
        if (!(s0 >= 0 && s0 < p.num_valid)) s0 = -1;
        if (!(s1 >= 0 && s1 < p.num_valid)) s1 = -1;
      }
      float w0 = 1.f, w1 = 1.f;
      if (p.mul_routed_weight) {
        if (s0 >= 0) w0 = __ldg(p.topk_weights + s0);
        if (s1 >= 0) w1 = __ldg(p.topk_weights + s1);
      }
      float acc[NI / 2];
#pragma unroll
      for (int i = 0; i < NI / 2; ++i) acc[i] = 0.f;
      int prev = -1;
#pragma unroll 1
      for (int kt = 0; kt < kt_count; ++kt) {
        mbar_wait(full0 + slot * 8, phase);
        fence_proxy_async_smem();  // the gathered A rows were written by cp.async (generic proxy)
        const uint32_t st = smem_base + slot * Cfg::kStageBytes;
        fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          wgmma_m64k16<T, NI>(acc, wgmma_desc_sw128(st + a_off + kk * 32), wgmma_desc_sw128(st + b_off + kk * 32));
        }
        wgmma_commit();
        wgmma_wait<1>();
        fence_operands(acc);
        if (prev >= 0 && lane == 0) mbar_arrive(empty0 + prev * 8);  // k-step kt - 1 has retired
        prev = slot;
        if (++slot == S) {
          slot = 0;
          phase ^= 1u;
        }
      }
      wgmma_wait<0>();
      fence_operands(acc);
      if (prev >= 0 && lane == 0) mbar_arrive(empty0 + prev * 8);

      // Epilogue: (acc (+ bias)) * w, rounded once, straight to C. For each pair of 8-column
      // slices (j, j + 1) the 4 lanes of a quad hold 2 rows x 16 columns as 4 x 4 packed pairs;
      // a 4 x 4 transpose across the quad (3 shuffles) gives lane q the 8 contiguous columns of
      // slice j + (q & 1) of row r (q < 2) or r + 8, stored as one 16-byte chunk: a warp store
      // covers 8 rows x 64 contiguous bytes (whole 32-byte sectors).
      const int n0 = nb * BN;
      const int q = lane & 3;
      const int cl = wg_n * NI + q * 2;  // tile column of acc[4j] for j = 0
      const T* bias = kBias ? static_cast<const T*>(p.bias) + static_cast<int64_t>(e) * p.n + n0 : nullptr;
      const int s_mine = (q >> 1) ? s1 : s0;  // the row this lane stores
      T* cp_mine = cmat + static_cast<int64_t>(s_mine < 0 ? 0 : s_mine) * p.ldc + n0 + wg_n * NI + (q & 1) * 8;
#pragma unroll
      for (int j = 0; j < NI / 8; j += 2) {
        uint32_t v[4];  // v[(row_sel << 1) | j_sel]: cols 2q, 2q + 1 of slice j + j_sel, row r + 8 row_sel
#pragma unroll
        for (int js = 0; js < 2; ++js) {
          float bx = 0.f, by = 0.f;
          if constexpr (kBias) {
            const float2 bv = bias_pair<T>(bias, cl + (j + js) * 8, p.n - n0);
            bx = bv.x;
            by = bv.y;
          }
          v[js] = pack2<T>((acc[4 * (j + js)] + bx) * w0, (acc[4 * (j + js) + 1] + by) * w0);
          v[2 + js] = pack2<T>((acc[4 * (j + js) + 2] + bx) * w1, (acc[4 * (j + js) + 3] + by) * w1);
        }
        uint32_t o[4];  // o[i]: cols 2i, 2i + 1 of this lane's chunk (from lane i)
        o[0] = o[1] = o[2] = o[3] = 0u;
#pragma unroll
        for (int sft = 0; sft < 4; ++sft) {
          // Round sft: lane q reads lane i = (q + sft) & 3, which sends its v[(i - sft) & 3], i.e.
          // exactly the reader's chunk; it lands in o[i].
          const int send = (q - sft) & 3;
          const uint32_t x = send == 0 ? v[0] : send == 1 ? v[1] : send == 2 ? v[2] : v[3];
          const uint32_t y = sft == 0 ? x : __shfl_sync(0xffffffffu, x, (lane & ~3) | ((q + sft) & 3));
          const int dst_i = (q + sft) & 3;
#pragma unroll
          for (int t = 0; t < 4; ++t) o[t] = dst_i == t ? y : o[t];
        }
        if (s_mine >= 0 && wg_n * NI + (j + (q & 1)) * 8 < p.n - n0)
          *reinterpret_cast<uint4*>(cp_mine + j * 8) = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
  }
#else
  __trap();  // needs the sm_90a target
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------------

/// kBias: the variant with the bias epilogue (a separate instance, so the bias-free kernel's
/// registers are those of the kernel before the bias existed).
template <class Cfg, class T, bool kBias> constexpr auto kernel_of() {
  if constexpr (Cfg::kWs) {
    return &moe_gemm_ws_kernel<Cfg, T, kBias>;
  } else if constexpr (Cfg::kWgmma) {
    return &moe_gemm_wgmma_kernel<Cfg, T, kBias>;
  } else {
    return &moe_gemm_mma_kernel<Cfg, T, kBias>;
  }
}

/// Resident blocks of the configuration on the whole GPU (sets the dynamic shared memory limit on
/// first use; queried once per configuration).
template <class Cfg, class T, bool kBias> int resident_grid() {
  static const int n = [] {
    const auto k = kernel_of<Cfg, T, kBias>();
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes) != cudaSuccess) {
      throw std::runtime_error("moe_grouped_gemm: cannot set " + std::to_string(Cfg::kSmemBytes) +
                               " bytes of dynamic shared memory (" + cudaGetErrorString(cudaGetLastError()) + ")");
    }
    cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, Cfg::kThreads, Cfg::kSmemBytes) != cudaSuccess ||
        per_sm < 1)
      per_sm = 1;
    return per_sm * sm_count();
  }();
  return n;
}

inline bool device_is_sm90() {
  static const bool v = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return v;
}

/// cuTensorMapEncodeTiled (driver API) through cudart's entry-point query: no libcuda link.
using TensorMapEncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                       const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                       CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline TensorMapEncodeFn tensor_map_encoder() {
  static const TensorMapEncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
    if (err != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<TensorMapEncodeFn>(f);
  }();
  return fn;
}

/// TMA descriptor of B [E, N, K] as a 3-d tensor {K, N, kMaxExperts} (row-major, K fastest), box
/// {64, BN, 1}, 128B swizzle. E is not known here; the expert dimension is given a generous bound
/// (only experts named in expert_ids are addressed) while N is exact, so the rows of a partial last
/// n-block are zero-filled instead of read from the next expert or past the end of B.
template <class T, int BN> bool make_b_tensor_map(CUtensorMap* map, const T* B, int N, int K) {
  const TensorMapEncodeFn enc = tensor_map_encoder();
  if (enc == nullptr) return false;
  constexpr cuuint64_t kMaxExperts = 1u << 16;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(N), kMaxExperts};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(K) * sizeof(T),
                                 static_cast<cuuint64_t>(N) * static_cast<cuuint64_t>(K) * sizeof(T)};
  const cuuint32_t box[3] = {64, BN, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType dt =
      std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return enc(map, dt, 3, const_cast<T*>(B), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
         CUDA_SUCCESS;
}

/// Whether the wgmma dispatch takes the warp-specialised configs (Ws64 / Ws128): for both GEMMs
/// whenever the TMA descriptor encoder is available (else the Wgmma configs). The second GEMM
/// (rows gathered as s, routing weight in the epilogue) moved to them on 2026-11-23:
/// bench/micro/moe_gemm_micro --ws --gemm 2 on the H100, at the block_m moe_gemm_block_m picks, was
/// 1.01-1.47x faster than Wgmma64x256 / Wgmma128 over Mixtral, Qwen3-30B-A3B, gpt-oss-20b and
/// DeepSeek-V3 at 1024-16384 tokens (its one loss, 0.85x, is DeepSeek at 4096 tokens with block_m
/// 128, which the heuristic does not pick); fk_bench then measured Mixtral's w2 at 1.10-1.27x torch
/// grouped_mm (0.89-0.97x before). bench/results/2026-11-23-h100-moe-gemm-ws-w2/README.md.
inline bool use_ws() { return tensor_map_encoder() != nullptr; }

[[noreturn]] inline void fail(const std::string& what) { throw std::invalid_argument("moe_grouped_gemm: " + what); }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace moe_gemm_detail

/// moe_grouped_gemm with an explicit configuration (block_m must equal Cfg::kBM). Throws
/// std::invalid_argument naming the violated requirement.
template <class Cfg, class T>
void moe_grouped_gemm_cfg(T* C, int64_t ldc, const T* A, int64_t lda, const T* B, const float* topk_weights,
                          const int32_t* sorted_token_ids, const int32_t* expert_ids,
                          const int32_t* num_tokens_post_padded, int64_t num_valid, int top_k, bool a_div_topk,
                          bool mul_routed_weight, int N, int K, int64_t max_blocks, int block_m, cudaStream_t stream,
                          const T* bias = nullptr) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "T must be bf16 or fp16");
  namespace d = moe_gemm_detail;
  using std::to_string;
  if (block_m != Cfg::kBM)
    d::fail("block_m (=" + to_string(block_m) + ") does not match the configuration's " + to_string(Cfg::kBM));
  if (N <= 0 || N % 64 != 0) d::fail("N (=" + to_string(N) + ") must be a positive multiple of 64");
  if (K <= 0 || K % 64 != 0) d::fail("K (=" + to_string(K) + ") must be a positive multiple of 64");
  if (top_k < 1) d::fail("top_k (=" + to_string(top_k) + ") must be >= 1");
  if (lda < K || lda % 8 != 0) d::fail("lda (=" + to_string(lda) + ") must be >= K and a multiple of 8 elements");
  if (ldc < N || ldc % 8 != 0) d::fail("ldc (=" + to_string(ldc) + ") must be >= N and a multiple of 8 elements");
  if (num_valid < 0 || num_valid >= (int64_t{1} << 31)) d::fail("num_valid (=" + to_string(num_valid) + ") out of range");
  if (max_blocks < 0 || max_blocks * Cfg::kBM >= (int64_t{1} << 31))
    d::fail("max_blocks (=" + to_string(max_blocks) + ") out of range");
  if (num_valid == 0 || max_blocks == 0) return;
  if (!d::aligned16(C)) d::fail("C must be 16-byte aligned");
  if (!d::aligned16(A)) d::fail("A must be 16-byte aligned");
  if (!d::aligned16(B)) d::fail("B must be 16-byte aligned");
  if ((reinterpret_cast<uintptr_t>(bias) & 3u) != 0) d::fail("bias must be 4-byte aligned");
  if (sorted_token_ids == nullptr || expert_ids == nullptr || num_tokens_post_padded == nullptr)
    d::fail("sorted_token_ids, expert_ids and num_tokens_post_padded must not be null");
  if (mul_routed_weight && topk_weights == nullptr) d::fail("topk_weights must not be null when mul_routed_weight");
  if constexpr (Cfg::kWgmma) {
    if (!d::device_is_sm90()) d::fail("the wgmma path needs an sm_90 (H100/H200) device");
  }
  const int64_t n_blocks = (N + Cfg::kBN - 1) / Cfg::kBN;
  const int64_t max_tiles = max_blocks * n_blocks;
  if (max_tiles >= (int64_t{1} << 31)) d::fail("too many tiles (max_blocks x N / BN >= 2^31)");
  const int grid = static_cast<int>(
      std::min<int64_t>(max_tiles, bias ? d::resident_grid<Cfg, T, true>() : d::resident_grid<Cfg, T, false>()));
  d::Params p;
  p.c = C;
  p.ldc = ldc;
  p.a = A;
  p.lda = lda;
  p.b = B;
  p.bias = bias;
  p.topk_weights = topk_weights;
  p.sorted_token_ids = sorted_token_ids;
  p.expert_ids = expert_ids;
  p.num_tokens_post_padded = num_tokens_post_padded;
  p.num_valid = num_valid;
  p.top_k = top_k;
  p.a_div_topk = a_div_topk ? 1 : 0;
  p.mul_routed_weight = mul_routed_weight ? 1 : 0;
  p.n = N;
  p.k = K;
  p.max_blocks = static_cast<int>(max_blocks);
  if constexpr (Cfg::kWs) {
    if (static_cast<int64_t>(N) * K * static_cast<int64_t>(sizeof(T)) >= (int64_t{1} << 40))
      d::fail("B expert too large for a tensor map (N x K x 2 bytes >= 2^40)");
    CUtensorMap tmap;
    if (!d::make_b_tensor_map<T, Cfg::kBN>(&tmap, B, N, K))
      d::fail("cannot encode the tensor map of B (cuTensorMapEncodeTiled unavailable or rejected the shape)");
    if (bias != nullptr) {
      d::kernel_of<Cfg, T, true>()<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, tmap);
    } else {
      d::kernel_of<Cfg, T, false>()<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, tmap);
    }
  } else {
    if (bias != nullptr) {
      d::kernel_of<Cfg, T, true>()<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
    } else {
      d::kernel_of<Cfg, T, false>()<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
    }
  }
}

/// C[s, :] = (A[a_row(s), :] · B[e]^T + bias[e, :]) (× topk_weights[s]) for the slots of the
/// aligned routing (see the top of this file); bias: nullptr (none) or [E, N] contiguous in T,
/// 4-byte aligned (gpt-oss experts). block_m must be a value moe_gemm_block_m returns (16, 64, 128 or 192)
/// and the one the routing was aligned with; max_blocks = ceil(max_padded / block_m), the size of
/// expert_ids. K and N multiples of 64; C, A, B 16-byte aligned; lda, ldc multiples of 8.
/// No host synchronisation, no allocation (CUDA-graph capturable once the configuration has been
/// used outside capture: the first call of each configuration sets its shared memory attribute).
template <class T, MoeGemmImpl kImpl>
void moe_grouped_gemm(T* C, int64_t ldc, const T* A, int64_t lda, const T* B, const float* topk_weights,
                      const int32_t* sorted_token_ids, const int32_t* expert_ids, const int32_t* num_tokens_post_padded,
                      int64_t num_valid, int top_k, bool a_div_topk, bool mul_routed_weight, int N, int K,
                      int64_t max_blocks, int block_m, cudaStream_t stream, const T* bias = nullptr) {
  namespace c = moe_gemm_cfg;
  const auto run = [&](auto cfg) {
    moe_grouped_gemm_cfg<decltype(cfg), T>(C, ldc, A, lda, B, topk_weights, sorted_token_ids, expert_ids,
                                           num_tokens_post_padded, num_valid, top_k, a_div_topk, mul_routed_weight, N,
                                           K, max_blocks, block_m, stream, bias);
  };
  // if constexpr / else: each instance instantiates only the kernels it can launch (the mma.sync
  // one none of the sm_90a kernels).
  switch (block_m) {
    case 16:
      return run(c::Decode16{});
    case 64:
      if constexpr (kImpl == MoeGemmImpl::kWgmma) {
        return moe_gemm_detail::use_ws() ? run(c::Ws64{}) : run(c::Wgmma64x256{});
      } else {
        return run(c::Mma64{});
      }
    case 128:
      if constexpr (kImpl == MoeGemmImpl::kWgmma) {
        return moe_gemm_detail::use_ws() ? run(c::Ws128{}) : run(c::Wgmma128{});
      } else {
        return run(c::Mma128{});
      }
    case 192:  // no plain wgmma config: mma.sync when the TMA encoder is unavailable
      if constexpr (kImpl == MoeGemmImpl::kWgmma) {
        if (moe_gemm_detail::use_ws()) return run(c::Ws192{});
      }
      return run(c::Mma192{});
    default:
      moe_gemm_detail::fail("block_m (=" + std::to_string(block_m) +
                            ") is not supported: use moe_gemm_block_m() (one of 16, 64, 128, 192)");
  }
}

/// The default: wgmma tiles for block_m 64 and 128 on an sm_90 device when this translation unit
/// is compiled for sm_90a (H100, 2026-11-22, bench/micro/moe_gemm_micro --wgmma --variants:
/// Mixtral T=4096 w13 494 vs 347 TFLOP/s, Qwen3-30B-A3B T=4096 w13 325 vs 265 TFLOP/s), else
/// the mma.sync tiles; block_m 16 (decode) is always mma.sync. Both GEMMs take the
/// warp-specialised Ws64 / Ws128: fk_bench on the H100, w13 at 1024-16384 tokens, 0.86-1.21x
/// torch grouped_mm against 0.74-0.87x before on Mixtral, Qwen3-30B-A3B, gpt-oss-20b and
/// DeepSeek-V3 (bench/results/2026-11-23-h100-moe-gemm-ws/README.md, tables and commands); w2:
/// use_ws above.
template <class T>
void moe_grouped_gemm(T* C, int64_t ldc, const T* A, int64_t lda, const T* B, const float* topk_weights,
                      const int32_t* sorted_token_ids, const int32_t* expert_ids, const int32_t* num_tokens_post_padded,
                      int64_t num_valid, int top_k, bool a_div_topk, bool mul_routed_weight, int N, int K,
                      int64_t max_blocks, int block_m, cudaStream_t stream, const T* bias = nullptr) {
#if defined(FK_MOE_GEMM_HAVE_SM90A)
  if (block_m != 16 && moe_gemm_detail::device_is_sm90()) {
    moe_grouped_gemm<T, MoeGemmImpl::kWgmma>(C, ldc, A, lda, B, topk_weights, sorted_token_ids, expert_ids,
                                             num_tokens_post_padded, num_valid, top_k, a_div_topk, mul_routed_weight,
                                             N, K, max_blocks, block_m, stream, bias);
    return;
  }
#endif
  moe_grouped_gemm<T, MoeGemmImpl::kMmaSync>(C, ldc, A, lda, B, topk_weights, sorted_token_ids, expert_ids,
                                             num_tokens_post_padded, num_valid, top_k, a_div_topk, mul_routed_weight,
                                             N, K, max_blocks, block_m, stream, bias);
}

/// The block_m to align the routing with for `num_tokens` tokens of top_k over num_experts
/// experts (and to pass to moe_grouped_gemm); one of 16, 64, 128, 192. By the expected rows per
/// expert R = num_tokens * top_k / num_experts:
///   R < 12        -> 16   decode: weight-bandwidth bound; little padding, B is read once per live
///                         16-row block (further blocks of the same expert hit L2, m-block-fastest
///                         raster). From R = 12 an expert's rows span several 16-row blocks and its
///                         weights stream more than once where L2 does not hold them (DeepSeek-V3's
///                         experts, 29 MB a GEMM, never fit): bench/micro/moe_block_m_sweep.sh on the
///                         H100, both GEMMs, L2 flushed, 16- against 64-row tiles at R = 8..48: at
///                         R = 12 DeepSeek-V3 1.09 / 1.14x faster with 64, Mixtral, Qwen3-30B-A3B and
///                         gpt-oss-20b 0.98-1.02x; at R = 16 DeepSeek-V3 1.43 / 1.38x, the others
///                         1.01-1.07x; at R = 20-24 up to 1.62 / 1.51x (the threshold was 24;
///                         bench/results/2026-12-07-s31/README.md). Below R = 12 the tiles are within
///                         3% of each other (gpt-oss-20b at R = 8: 16 rows 2-3% faster);
///   96 <= R < 192 -> 192  an expert's rows in one 192 x 128 tile, so B is read once by
///                         construction instead of once per 64-row block unless L2 catches it.
///                         bench/micro/moe_gemm_micro on the H100 at R = 128 it beat both other
///                         tiles: DeepSeek-V3 T=4096 w13 and w2 1.30-1.48x, gpt-oss-20b T=1024
///                         1.07-1.15x; at R = 64 (Qwen3-30B-A3B T=1024) and R = 256 (Mixtral
///                         T=1024, Qwen3 T=4096) it lost, the three n128 warpgroups being the
///                         weaker tile where B re-reads matter less
///                         (bench/results/2026-11-23-h100-moe-gemm-ws192/README.md);
///   R < 256       -> 64   e.g. Qwen3-30B-A3B at 1024 tokens (R = 64): padding to 128 would waste
///                         about half the rows;
///   otherwise     -> 128  from R = 256 (Qwen3-30B-A3B at 4096 tokens, Mixtral at 1024): the
///                         128 x 256 warp-specialised tile beats the 64-row one there on H100
///                         despite ~25% padding (fk_bench, the shapes this threshold moved from 64
///                         to 128, 1.13-1.24x: Qwen3 w13 t4096 544 -> 465 us, Mixtral w13 t1024
///                         1110 -> 946, gpt-oss w13 t4096 1206 -> 995;
///                         bench/results/2026-11-23-h100-moe-gemm-ws/README.md, "Second run").
inline int moe_gemm_block_m(int64_t num_tokens, int top_k, int num_experts) {
  const double rows = static_cast<double>(std::max<int64_t>(num_tokens, 0)) * std::max(top_k, 1) /
                      static_cast<double>(std::max(num_experts, 1));
  if (rows < 12.0) return 16;
  if (rows >= 96.0 && rows < 192.0) return 192;
  if (rows < 256.0) return 64;
  return 128;
}

}  // namespace fk::kernels
