// The own all-reduce over NVLink peer memory (issue 23): one-shot and two-shot, in one kernel each,
// capturable in CUDA graphs. The counterparts in production: vLLM's custom all-reduce
// (vllm.distributed.device_communicators.custom_all_reduce.CustomAllreduce, all_reduce) and
// PyTorch's symmetric-memory one_shot_all_reduce / two_shot_all_reduce_. The host side (buffers,
// their exchange between processes, the choice of algorithm) is fk/runtime/peer_allreduce.h.
//
// Note [Peer all-reduce]
// Every rank owns one registered buffer that every other rank has mapped (CUDA IPC): a signal
// area, then two halves of staging space and two halves of result space (max_bytes each). A call
//   1. copies the rank's input into its staging half (each block its own stripe of elements),
//   2. meets the other ranks at a per-block barrier: block b writes the call's epoch into block
//      b's flag of every peer's signal area (release, system scope, after a system fence), then
//      waits until every peer's epoch is in its own flags (acquire, system scope);
//   3. one-shot: reads the stripe from every rank's staging (its own included) and sums in fp32 in
//      rank order 0..n-1, so every rank computes bitwise the same result; two-shot: sums only its
//      own 1/n chunk of the stripe into its result half, meets the peers again (a second flag set),
//      and copies the other chunks' sums from their owners' result halves.
// Block b of every rank copies, reduces and gathers the same element indices (the same grid-
// stride pattern over the same chunks), so a barrier between blocks of one index is enough; no
// grid-wide barrier is needed. The epoch is a per-block counter kept in the rank's own signal area
// (read at the start of a call, written back at its end), so a captured graph replays correctly
// without host arguments changing, and every rank's block b counts the same calls. The halves
// alternate with the epoch's parity: a rank overwrites a half only two calls later, after the call
// in between has met every peer, which a peer cannot do before its previous call (the one reading
// that half) has ended, kernels on one stream running one after another. A block that waits longer
// than the timeout prints which rank it waited for and traps (the process ends with a CUDA error
// rather than hanging on a dead peer).
//
// The fused all-reduce + residual add + RMSNorm (vLLM's AllReduceFusionPass pattern: all_reduce then
// fused_add_rms_norm) is the one-shot kernel over whole rows: block b copies rows b, b + grid, ...
// into its staging half, meets the peers, and for each of those rows sums the ranks' copies (fp32,
// rank order, rounded to T as the all-reduce's output is), then runs fused_add_rms_norm's arithmetic
// with its thread layout (RmsNormShape) and its block reduction, so its outputs equal the unfused
// pair's bitwise.
//
// Note [Lazy loading and waiting kernels]
// CUDA loads a kernel's module at its first launch (CUDA_MODULE_LOADING=LAZY, the default), and the load may wait
// for the kernels already running on the device. A process that runs several ranks' kernels on one GPU (the loopback
// tests, tests/gpu/test_peer_loopback.cu) must load every kernel before the first one that waits for a peer: a first
// launch queued behind a rank that waits for a rank not yet launched never returns (seen: EP dispatch then combine,
// H100, 2026-12-07). One rank per process, as the runtime runs them, is not exposed: a rank's waiting kernel ends
// when the other processes' kernels arrive, whatever this process's host thread is loading meanwhile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "fk/kernels/common.cuh"
#include "fk/kernels/rms_norm.cuh"

namespace fk::kernels::peer_ar {

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 64;
constexpr int kThreads = 512;

/// The start of every rank's buffer.
struct Signals {
  uint32_t flag[2][kMaxBlocks][kMaxRanks];  ///< [phase][block][from rank]: the last epoch that rank's block reached
  uint32_t epoch[kMaxBlocks];                ///< this rank's calls per block (only its own blocks touch it)
  uint32_t lamport_epoch[kMaxBlocks];        ///< the same for the Lamport kernel (Note [Lamport all-reduce])
  int64_t lamport_bytes[kMaxBlocks];         ///< the message bytes of the block's previous Lamport call
};
/// The Lamport kernel's grid: fixed, so that every block counts every call (Note [Lamport all-reduce]).
constexpr int kLamportGrid = 16;
/// Bytes before the staging halves (the signal area, rounded up).
constexpr int64_t kSignalBytes = (sizeof(Signals) + 4095) / 4096 * 4096;

struct Args {
  char* base[kMaxRanks];  ///< every rank's buffer as mapped in this process (this rank's own included)
  int rank;
  int64_t n;              ///< elements
  int64_t half_bytes;     ///< the size of one staging / result half (the largest message)
  int64_t lamport_bytes;  ///< the size of one Lamport slot (the Lamport kernel's largest message)
  uint64_t timeout_ns;
};

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Spins until *flag reaches want (wrapping compare: counters and epochs may wrap); past timeout_ns, says who
/// (`tool`, this rank and block) waited for what from which rank, and traps. The peer kernels' one wait.
__device__ __forceinline__ void wait_for_peer(const uint32_t* flag, uint32_t want, uint64_t timeout_ns, const char* tool, int rank,
                                              int from, const char* what) {
  const uint64_t t0 = global_timer_ns();
  while (static_cast<int32_t>(ld_acquire_sys(flag) - want) < 0) {
    if (global_timer_ns() - t0 > timeout_ns) {
      printf("fk %s: rank %d block %d waited %.1f s for rank %d's %s; a peer is gone or the ranks' calls differ\n", tool, rank,
             int(blockIdx.x), double(timeout_ns) * 1e-9, from, what);
      __trap();
    }
  }
}

/// Block blockIdx.x of every rank meets here (Note [Peer all-reduce], step 2).
template <int W> __device__ __forceinline__ void block_barrier(const Args& a, int phase, uint32_t epoch) {
  __syncthreads();
  const int p = threadIdx.x;
  if (p < W && p != a.rank) {
    Signals* mine = reinterpret_cast<Signals*>(a.base[a.rank]);
    Signals* theirs = reinterpret_cast<Signals*>(a.base[p]);
    __threadfence_system();
    st_release_sys(&theirs->flag[phase][blockIdx.x][a.rank], epoch);
    const uint32_t* f = &mine->flag[phase][blockIdx.x][p];
    const uint64_t t0 = global_timer_ns();
    while (static_cast<int32_t>(ld_acquire_sys(f) - epoch) < 0) {
      if (global_timer_ns() - t0 > a.timeout_ns) {
        printf("fk peer all-reduce: rank %d block %d waited %.1f s for rank %d at barrier %d of call %u; a peer is gone or the ranks' calls differ\n",
               a.rank, int(blockIdx.x), double(a.timeout_ns) * 1e-9, p, phase, epoch);
        __trap();
      }
    }
  }
  __syncthreads();
}

/// acc += the 16-byte pack `i` of x (elements past n count as absent).
template <class T> __device__ __forceinline__ void add_pack(float (&acc)[Vec16<T>::kN], const T* x, int64_t i, int64_t n) {
  constexpr int N = Vec16<T>::kN;
  const int64_t e = i * N;
  if (e + N <= n) {
    Vec16<T> v;
    *reinterpret_cast<uint4*>(&v) = __ldcg(reinterpret_cast<const uint4*>(x + e));
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] += to_float(v.v[k]);
  } else {
    for (int k = 0; e + k < n; ++k) acc[k] += to_float(x[e + k]);
  }
}
template <class T> __device__ __forceinline__ void copy_pack(T* dst, const T* src, int64_t i, int64_t n) {
  constexpr int N = Vec16<T>::kN;
  const int64_t e = i * N;
  if (e + N <= n) *reinterpret_cast<uint4*>(dst + e) = __ldcg(reinterpret_cast<const uint4*>(src + e));
  else
    for (int k = 0; e + k < n; ++k) dst[e + k] = src[e + k];
}
template <class T> __device__ __forceinline__ void store_pack(T* dst, const float (&acc)[Vec16<T>::kN], int64_t i, int64_t n) {
  constexpr int N = Vec16<T>::kN;
  const int64_t e = i * N;
  Vec16<T> v;
#pragma unroll
  for (int k = 0; k < N; ++k) v.v[k] = from_float<T>(acc[k]);
  if (e + N <= n) *reinterpret_cast<uint4*>(dst + e) = *reinterpret_cast<const uint4*>(&v);
  else
    for (int k = 0; e + k < n; ++k) dst[e + k] = v.v[k];
}

/// The call's epoch for this block (thread 0 reads the counter; every thread gets it).
__device__ __forceinline__ uint32_t begin_call(const Args& a) {
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) s_epoch = reinterpret_cast<Signals*>(a.base[a.rank])->epoch[blockIdx.x] + 1;
  __syncthreads();
  return s_epoch;
}
__device__ __forceinline__ void end_call(const Args& a, uint32_t epoch) {
  if (threadIdx.x == 0) reinterpret_cast<Signals*>(a.base[a.rank])->epoch[blockIdx.x] = epoch;
}
template <class T> __device__ __forceinline__ T* staging(const Args& a, int rank, uint32_t epoch) {
  return reinterpret_cast<T*>(a.base[rank] + kSignalBytes + int64_t(epoch & 1u) * a.half_bytes);
}
template <class T> __device__ __forceinline__ T* result(const Args& a, int rank, uint32_t epoch) {
  return reinterpret_cast<T*>(a.base[rank] + kSignalBytes + 2 * a.half_bytes + int64_t(epoch & 1u) * a.half_bytes);
}

/// One-shot: out = the sum over the ranks of in (out may be in).
template <class T, int W> __global__ void __launch_bounds__(kThreads) one_shot_kernel(Args a, const T* in, T* out) {
  const uint32_t epoch = begin_call(a);
  constexpr int N = Vec16<T>::kN;
  const int64_t packs = (a.n + N - 1) / N, stride = int64_t(gridDim.x) * blockDim.x;
  T* mine = staging<T>(a, a.rank, epoch);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride) copy_pack(mine, in, i, a.n);
  block_barrier<W>(a, 0, epoch);
  const T* src[W];
#pragma unroll
  for (int p = 0; p < W; ++p) src[p] = staging<T>(a, p, epoch);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride) {
    float acc[N] = {};
#pragma unroll
    for (int p = 0; p < W; ++p) add_pack(acc, src[p], i, a.n);
    store_pack(out, acc, i, a.n);
  }
  end_call(a, epoch);
}

/// Two-shot: rank r reduces chunk r of the packs, then every rank gathers the other chunks.
template <class T, int W> __global__ void __launch_bounds__(kThreads) two_shot_kernel(Args a, const T* in, T* out) {
  const uint32_t epoch = begin_call(a);
  constexpr int N = Vec16<T>::kN;
  const int64_t packs = (a.n + N - 1) / N, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  auto chunk_begin = [&](int c) { return packs * c / W; };
  T* mine = staging<T>(a, a.rank, epoch);
#pragma unroll
  for (int c = 0; c < W; ++c)
    for (int64_t i = chunk_begin(c) + first; i < chunk_begin(c + 1); i += stride) copy_pack(mine, in, i, a.n);
  block_barrier<W>(a, 0, epoch);
  const T* src[W];
#pragma unroll
  for (int p = 0; p < W; ++p) src[p] = staging<T>(a, p, epoch);
  T* sums = result<T>(a, a.rank, epoch);
  for (int64_t i = chunk_begin(a.rank) + first; i < chunk_begin(a.rank + 1); i += stride) {
    float acc[N] = {};
#pragma unroll
    for (int p = 0; p < W; ++p) add_pack(acc, src[p], i, a.n);
    store_pack(sums, acc, i, a.n);
    store_pack(out, acc, i, a.n);
  }
  block_barrier<W>(a, 1, epoch);
#pragma unroll
  for (int c = 0; c < W; ++c) {
    if (c == a.rank) continue;
    const T* theirs = result<T>(a, c, epoch);
    for (int64_t i = chunk_begin(c) + first; i < chunk_begin(c + 1); i += stride) copy_pack(out, theirs, i, a.n);
  }
  end_call(a, epoch);
}

/// Sum over each group of kThreads consecutive threads of the block (kGroups groups); every thread
/// gets its group's sum. The same order as block_sum (warp sums, then the warps' sums), so that a
/// group's result equals block_sum's over a block of kThreads. scratch: kGroups x 32 floats; every
/// thread of the block must call it.
template <int kThreads, int kGroups> __device__ __forceinline__ float group_sum(float v, float* scratch) {
  if constexpr (kGroups == 1) {
    return fk::kernels::block_sum<kThreads>(v, scratch);
  } else {
    static_assert(kThreads % 32 == 0 && kThreads * kGroups <= 1024, "groups of whole warps, at most 1024 threads");
    constexpr int kWarps = kThreads / 32;
    v = fk::kernels::warp_sum(v);
    const int g = threadIdx.x / kThreads, warp = (threadIdx.x % kThreads) / 32, lane = threadIdx.x % 32;
    if (lane == 0) scratch[g * 32 + warp] = v;
    __syncthreads();
    float t = lane < kWarps ? scratch[g * 32 + lane] : 0.f;
    t = fk::kernels::warp_sum(t);
    __syncthreads();  // scratch may be reused by the caller
    return t;
  }
}

/// This thread's vectors of a row (the residual, issued before the all-reduce's waits); tid: the
/// thread's index in its row group.
template <int kHidden, class T>
__device__ __forceinline__ void load_row(Vec16<T> (&v)[fk::kernels::detail::RmsNormShape<kHidden, T>::kVecPerThread], const T* row, int tid) {
  using S = fk::kernels::detail::RmsNormShape<kHidden, T>;
#pragma unroll
  for (int i = 0; i < S::kVecPerThread; ++i) {
    const int vi = tid + i * S::kThreads;
    if (vi < S::kVecs) *reinterpret_cast<uint4*>(&v[i]) = __ldcg(reinterpret_cast<const uint4*>(row + vi * S::kVecElems));
  }
}

/// The tail both fused kernels share, for one row: acc holds this thread's all-reduced sums (fp32,
/// its vectors of the row), r its vectors of the residual row; the sums are rounded to T (the
/// all-reduce's output), the residual is added and kept in T (written back), and RMSNorm x weight
/// goes to out, with fused_add_rms_norm's thread layout, arithmetic and block reduction. The block
/// holds kGroups rows at once (tid: the thread's index in its row's group); a group whose row is
/// past the end (live false) only joins the reduction.
template <int kHidden, class T, int kGroups = 1>
__device__ __forceinline__ void add_rms_norm_row(
    float (&acc)[fk::kernels::detail::RmsNormShape<kHidden, T>::kVecPerThread][Vec16<T>::kN],
    const Vec16<T> (&r)[fk::kernels::detail::RmsNormShape<kHidden, T>::kVecPerThread], T* residual_row,
    const Vec16<T> (&w)[fk::kernels::detail::RmsNormShape<kHidden, T>::kVecPerThread], T* out_row, float eps, float* scratch, int tid,
    bool live) {
  using S = fk::kernels::detail::RmsNormShape<kHidden, T>;
  constexpr int kN = S::kVecElems, kV = S::kVecPerThread;
  Vec16<T> v[kV];
  float sumsq = 0.f;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = tid + i * S::kThreads;
    if (live && vi < S::kVecs) {
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        float z = to_float(from_float<T>(acc[i][j]));  // the all-reduce's output, in T
        z += to_float(r[i].v[j]);
        v[i].v[j] = from_float<T>(z);  // the residual, kept in T (fused_add_rms_norm)
        sumsq += z * z;
      }
      *reinterpret_cast<uint4*>(residual_row + vi * kN) = *reinterpret_cast<const uint4*>(&v[i]);
    }
  }
  const float total = group_sum<S::kThreads, kGroups>(sumsq, scratch);
  if (!live) return;
  const float inv_rms = rsqrtf(total / static_cast<float>(kHidden) + eps);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = tid + i * S::kThreads;
    if (vi < S::kVecs) {
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float normed = to_float(from_float<T>(to_float(v[i].v[j]) * inv_rms));
        o.v[j] = from_float<T>(normed * to_float(w[i].v[j]));
      }
      *reinterpret_cast<uint4*>(out_row + vi * kN) = *reinterpret_cast<const uint4*>(&o);
    }
  }
}

template <int kHidden, class T>
__device__ __forceinline__ void load_weight(Vec16<T> (&w)[fk::kernels::detail::RmsNormShape<kHidden, T>::kVecPerThread], const T* weight,
                                            int tid) {
  using S = fk::kernels::detail::RmsNormShape<kHidden, T>;
#pragma unroll
  for (int i = 0; i < S::kVecPerThread; ++i) {
    const int vi = tid + i * S::kThreads;
    if (vi < S::kVecs) w[i] = load16(weight + vi * S::kVecElems);
  }
}

/// x [rows, kHidden] all-reduced, then residual += x (rounded to T), out = RMSNorm(residual) x weight;
/// blockDim = RmsNormShape<kHidden, T>::kThreads. out may be x.
template <int kHidden, class T, int W>
__global__ void __launch_bounds__(fk::kernels::detail::RmsNormShape<kHidden, T>::kThreads)
    one_shot_add_rms_norm_kernel(Args a, const T* x, T* residual, const T* __restrict__ weight, T* out, int64_t rows, float eps) {
  using S = fk::kernels::detail::RmsNormShape<kHidden, T>;
  constexpr int kN = S::kVecElems, kV = S::kVecPerThread;
  __shared__ float scratch[32];
  const uint32_t epoch = begin_call(a);
  T* mine = staging<T>(a, a.rank, epoch);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
    for (int vi = threadIdx.x; vi < S::kVecs; vi += blockDim.x)
      *reinterpret_cast<uint4*>(mine + row * kHidden + vi * kN) = __ldcg(reinterpret_cast<const uint4*>(x + row * kHidden + vi * kN));
  block_barrier<W>(a, 0, epoch);
  const T* src[W];
#pragma unroll
  for (int p = 0; p < W; ++p) src[p] = staging<T>(a, p, epoch);
  Vec16<T> w[kV];
  load_weight<kHidden, T>(w, weight, threadIdx.x);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    Vec16<T> r[kV];
    load_row<kHidden, T>(r, residual + row * kHidden, threadIdx.x);
    float acc[kV][kN] = {};
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = threadIdx.x + i * S::kThreads;
      if (vi < S::kVecs)
#pragma unroll
        for (int p = 0; p < W; ++p) add_pack(acc[i], src[p] + row * kHidden, vi, kHidden);
    }
    add_rms_norm_row<kHidden, T>(acc, r, residual + row * kHidden, w, out + row * kHidden, eps, scratch, threadIdx.x, true);
  }
  end_call(a, epoch);
}

// Note [Lamport all-reduce]
// The one-shot above pulls: a barrier (a flag written to every peer, the peers' flags awaited), then
// reads over NVLink, each a round trip. The Lamport variant pushes and needs no flag: every rank
// writes its input straight into its own slot of every peer's receive buffer, and a reader spins on
// the values themselves until none is the sentinel, which a writer never sends: negative zero for
// bf16 / f16 (sent as +0, the same in any sum), for f32 the bits 0x80008000 (a denormal of -4.6e-41,
// sent as +0), so that one 32-bit pattern 0x80008000 clears a buffer for every dtype. Three buffers
// rotate with the call's epoch: call k writes buffer k % 3 and clears (to the sentinel) the slots of buffer (k - 1) % 3 it read in the previous
// call. A peer writes into that buffer again only in call k + 2, which it starts after seeing this
// rank's writes of call k + 1, issued after call k (and its clearing) ended. A rank's own slot is
// never written: its own values come from its input. The sum is in rank order 0..n-1 in fp32, as
// the one-shot's, so both give the same bits. Every block must count every call (the epoch picks
// the buffer), hence one fixed grid; each block remembers the previous call's bytes to clear them.
// The production counterpart is TensorRT-LLM's Lamport one-shot all-reduce (in vLLM through
// FlashInfer's trtllm_allreduce_fusion); PyTorch's symmetric-memory one_shot_all_reduce pulls.

template <class T> struct Sentinel;
template <> struct Sentinel<__nv_bfloat16> { static constexpr uint32_t kBits = 0x8000u; using U = uint16_t; };
template <> struct Sentinel<__half> { static constexpr uint32_t kBits = 0x8000u; using U = uint16_t; };
template <> struct Sentinel<float> { static constexpr uint32_t kBits = 0x80008000u; using U = uint32_t; };
/// Every Lamport buffer's cleared state, one word for every dtype.
constexpr uint32_t kLamportClear = 0x80008000u;

template <class T> __device__ __forceinline__ T lamport_clean(T v) {
  using U = typename Sentinel<T>::U;
  U u;
  memcpy(&u, &v, sizeof u);
  if (u == U(Sentinel<T>::kBits)) u = 0;
  memcpy(&v, &u, sizeof u);
  return v;
}
template <class T> __device__ __forceinline__ bool is_sentinel(T v) {
  using U = typename Sentinel<T>::U;
  U u;
  memcpy(&u, &v, sizeof u);
  return u == U(Sentinel<T>::kBits);
}
__device__ __forceinline__ uint4 ld_volatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
template <class T> __device__ __forceinline__ T ld_volatile(const T* p) {
  using U = typename Sentinel<T>::U;
  U u;
  if constexpr (sizeof(U) == 2) asm volatile("ld.volatile.global.u16 %0, [%1];" : "=h"(u) : "l"(p) : "memory");
  else asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(u) : "l"(p) : "memory");
  T v;
  memcpy(&v, &u, sizeof u);
  return v;
}
template <class T> __device__ __forceinline__ T* lamport_slot(const Args& a, int rank, uint32_t buffer, int slot, int world) {
  return reinterpret_cast<T*>(a.base[rank] + kSignalBytes + 4 * a.half_bytes + (int64_t(buffer) * world + slot) * a.lamport_bytes);
}
__device__ __forceinline__ void lamport_timeout(const Args& a, uint64_t t0, int peer, uint32_t epoch) {
  if (global_timer_ns() - t0 > a.timeout_ns) {
    printf("fk peer all-reduce (Lamport): rank %d block %d waited %.1f s for rank %d's values of call %u; a peer is gone or the ranks' calls differ\n",
           a.rank, int(blockIdx.x), double(a.timeout_ns) * 1e-9, peer, epoch);
    __trap();
  }
}

/// One Lamport call as a block sees it: its epoch, the buffer it writes, the one it clears, and the
/// previous call's bytes.
struct LamportCall {
  uint32_t epoch, buf, prev;
  int64_t prev_bytes;
};
__device__ __forceinline__ LamportCall lamport_begin(const Args& a) {
  __shared__ uint32_t s_epoch;
  __shared__ int64_t s_prev_bytes;
  const Signals* sig = reinterpret_cast<const Signals*>(a.base[a.rank]);
  if (threadIdx.x == 0) {
    s_epoch = sig->lamport_epoch[blockIdx.x] + 1;
    s_prev_bytes = sig->lamport_bytes[blockIdx.x];
  }
  __syncthreads();
  return {s_epoch, s_epoch % 3u, (s_epoch + 2u) % 3u, s_prev_bytes};
}
__device__ __forceinline__ void lamport_end(const Args& a, const LamportCall& c, int64_t bytes) {
  __syncthreads();
  if (threadIdx.x == 0) {
    Signals* sig = reinterpret_cast<Signals*>(a.base[a.rank]);
    sig->lamport_epoch[blockIdx.x] = c.epoch;
    sig->lamport_bytes[blockIdx.x] = bytes;
  }
}
/// Clears what the previous call read here (the peers' slots of buffer c.prev; whole 16-byte words,
/// whatever that call's dtype: it has ended, and no peer writes c.prev before call k + 2).
template <int W> __device__ __forceinline__ void lamport_clear_previous(const Args& a, const LamportCall& c) {
  const int64_t words = (c.prev_bytes + 15) / 16, stride = int64_t(gridDim.x) * blockDim.x;
  const uint4 z = make_uint4(kLamportClear, kLamportClear, kLamportClear, kLamportClear);
#pragma unroll
  for (int p = 0; p < W; ++p) {
    if (p == a.rank) continue;
    uint4* slot = reinterpret_cast<uint4*>(lamport_slot<char>(a, a.rank, c.prev, p, W));
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) slot[i] = z;
  }
}
/// This rank's 16 bytes at element e, cleaned of the sentinel, into its slot of every peer's buffer.
template <class T, int W> __device__ __forceinline__ void lamport_push(const Args& a, const LamportCall& c, int64_t e, Vec16<T> v) {
#pragma unroll
  for (int k = 0; k < Vec16<T>::kN; ++k) v.v[k] = lamport_clean(v.v[k]);
#pragma unroll
  for (int p = 0; p < W; ++p)
    if (p != a.rank) *reinterpret_cast<Vec16<T>*>(lamport_slot<T>(a, p, c.buf, a.rank, W) + e) = v;
}
/// Rank p's 16 bytes at element e: this rank's own from `own` (cleaned as pushed), a peer's once they
/// have arrived in this rank's buffer.
template <class T, int W>
__device__ __forceinline__ Vec16<T> lamport_take(const Args& a, const LamportCall& c, int p, int64_t e, const T* own) {
  Vec16<T> v;
  if (p == a.rank) {
    v = *reinterpret_cast<const Vec16<T>*>(own + e);
#pragma unroll
    for (int k = 0; k < Vec16<T>::kN; ++k) v.v[k] = lamport_clean(v.v[k]);
    return v;
  }
  const T* src = lamport_slot<T>(a, a.rank, c.buf, p, W) + e;
  const uint64_t t0 = global_timer_ns();
  for (uint32_t spin = 0;; ++spin) {
    *reinterpret_cast<uint4*>(&v) = ld_volatile16(src);
    bool ready = true;
#pragma unroll
    for (int k = 0; k < Vec16<T>::kN; ++k) ready &= !is_sentinel(v.v[k]);
    if (ready) return v;
    if ((spin & 1023u) == 1023u) lamport_timeout(a, t0, p, c.epoch);
  }
}

/// Lamport one-shot: out = the sum over the ranks of in (out may be in); grid = kLamportGrid.
template <class T, int W> __global__ void __launch_bounds__(kThreads) lamport_kernel(Args a, const T* in, T* out) {
  constexpr int N = Vec16<T>::kN;
  const LamportCall c = lamport_begin(a);
  const int64_t full = a.n / N, stride = int64_t(gridDim.x) * blockDim.x, first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < full; i += stride) lamport_push<T, W>(a, c, i * N, *reinterpret_cast<const Vec16<T>*>(in + i * N));
  for (int64_t e = full * N + first; e < a.n; e += stride) {  // the last partial 16 bytes, element by element
    const T v = lamport_clean(in[e]);
#pragma unroll
    for (int p = 0; p < W; ++p)
      if (p != a.rank) lamport_slot<T>(a, p, c.buf, a.rank, W)[e] = v;
  }
  lamport_clear_previous<W>(a, c);
  for (int64_t i = first; i < full; i += stride) {
    float acc[N] = {};
#pragma unroll
    for (int p = 0; p < W; ++p) {
      const Vec16<T> v = lamport_take<T, W>(a, c, p, i * N, in);
#pragma unroll
      for (int k = 0; k < N; ++k) acc[k] += to_float(v.v[k]);
    }
    store_pack(out, acc, i, a.n);
  }
  for (int64_t e = full * N + first; e < a.n; e += stride) {
    float acc = 0.f;
#pragma unroll
    for (int p = 0; p < W; ++p) {
      T v;
      if (p == a.rank) v = lamport_clean(in[e]);
      else {
        const T* src = lamport_slot<T>(a, a.rank, c.buf, p, W) + e;
        const uint64_t t0 = global_timer_ns();
        for (uint32_t spin = 0;; ++spin) {
          v = ld_volatile(src);
          if (!is_sentinel(v)) break;
          if ((spin & 1023u) == 1023u) lamport_timeout(a, t0, p, c.epoch);
        }
      }
      acc += to_float(v);
    }
    out[e] = from_float<T>(acc);
  }
  lamport_end(a, c, a.n * int64_t(sizeof(T)));
}

/// Rows a block of the Lamport fused kernel holds at once: the Lamport kernels run kLamportGrid blocks
/// (their per-block epochs), so each block takes several rows side by side, up to 1024 threads.
template <int kHidden, class T> constexpr int lamport_row_groups() {
  constexpr int t = fk::kernels::detail::RmsNormShape<kHidden, T>::kThreads;
  return 1024 / t >= 4 ? 4 : (1024 / t >= 2 ? 2 : 1);
}

/// The Lamport form of one_shot_add_rms_norm_kernel: x pushed into every peer's buffer, the sums formed
/// as they arrive (Note [Lamport all-reduce]), then add_rms_norm_row; grid = kLamportGrid, blockDim =
/// lamport_row_groups x RmsNormShape<kHidden, T>::kThreads (a row per group of threads; the residual
/// rows are read before the waits).
template <int kHidden, class T, int W>
__global__ void __launch_bounds__(lamport_row_groups<kHidden, T>() * fk::kernels::detail::RmsNormShape<kHidden, T>::kThreads)
    lamport_add_rms_norm_kernel(Args a, const T* x, T* residual, const T* __restrict__ weight, T* out, int64_t rows, float eps) {
  using S = fk::kernels::detail::RmsNormShape<kHidden, T>;
  constexpr int kN = S::kVecElems, kV = S::kVecPerThread, G = lamport_row_groups<kHidden, T>();
  __shared__ float scratch[G * 32];
  const LamportCall c = lamport_begin(a);
  const int64_t vecs = rows * S::kVecs, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vecs; i += stride)
    lamport_push<T, W>(a, c, i * kN, *reinterpret_cast<const Vec16<T>*>(x + i * kN));
  lamport_clear_previous<W>(a, c);
  const int tid = threadIdx.x % S::kThreads, g = threadIdx.x / S::kThreads;
  Vec16<T> w[kV];
  load_weight<kHidden, T>(w, weight, tid);
  // Rows interleaved over the blocks (group g of block b: rows b + (g + G k) x grid), so that a few rows
  // spread over as many blocks (SMs) as a row per block would: with a block's rows consecutive, 8 rows
  // sat in 2 blocks and 1-16 rows ran slower than one row per block (2 x H100, session 25).
  for (int64_t base = 0; base < rows; base += int64_t(gridDim.x) * G) {
    const int64_t row = base + int64_t(g) * gridDim.x + blockIdx.x;
    const bool live = row < rows;
    Vec16<T> r[kV];
    float acc[kV][kN] = {};
    if (live) {
      load_row<kHidden, T>(r, residual + row * kHidden, tid);
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const int vi = tid + i * S::kThreads;
        if (vi < S::kVecs)
#pragma unroll
          for (int p = 0; p < W; ++p) {
            const Vec16<T> v = lamport_take<T, W>(a, c, p, row * kHidden + vi * kN, x);
#pragma unroll
            for (int k = 0; k < kN; ++k) acc[i][k] += to_float(v.v[k]);
          }
      }
    }
    add_rms_norm_row<kHidden, T, G>(acc, r, residual + (live ? row : 0) * kHidden, w, out + (live ? row : 0) * kHidden, eps, scratch, tid, live);
  }
  lamport_end(a, c, rows * int64_t(kHidden) * int64_t(sizeof(T)));
}

}  // namespace fk::kernels::peer_ar
