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
};
/// Bytes before the staging halves (the signal area, rounded up).
constexpr int64_t kSignalBytes = (sizeof(Signals) + 4095) / 4096 * 4096;

struct Args {
  char* base[kMaxRanks];  ///< every rank's buffer as mapped in this process (this rank's own included)
  int rank;
  int64_t n;              ///< elements
  int64_t half_bytes;     ///< the size of one staging / result half (the largest message)
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
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = threadIdx.x + i * S::kThreads;
    if (vi < S::kVecs) w[i] = load16(weight + vi * kN);
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    Vec16<T> v[kV];
    float sumsq = 0.f;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = threadIdx.x + i * S::kThreads;
      if (vi < S::kVecs) {
        float acc[kN] = {};
#pragma unroll
        for (int p = 0; p < W; ++p) add_pack(acc, src[p] + row * kHidden, vi, kHidden);
        Vec16<T> r;
        *reinterpret_cast<uint4*>(&r) = __ldcg(reinterpret_cast<const uint4*>(residual + row * kHidden + vi * kN));
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          float z = to_float(from_float<T>(acc[j]));  // the all-reduce's output, in T
          z += to_float(r.v[j]);
          v[i].v[j] = from_float<T>(z);  // the residual, kept in T (fused_add_rms_norm)
          sumsq += z * z;
        }
        *reinterpret_cast<uint4*>(residual + row * kHidden + vi * kN) = *reinterpret_cast<const uint4*>(&v[i]);
      }
    }
    const float total = fk::kernels::block_sum<S::kThreads>(sumsq, scratch);
    const float inv_rms = rsqrtf(total / static_cast<float>(kHidden) + eps);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = threadIdx.x + i * S::kThreads;
      if (vi < S::kVecs) {
        Vec16<T> o;
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          const float normed = to_float(from_float<T>(to_float(v[i].v[j]) * inv_rms));
          o.v[j] = from_float<T>(normed * to_float(w[i].v[j]));
        }
        *reinterpret_cast<uint4*>(out + row * kHidden + vi * kN) = *reinterpret_cast<const uint4*>(&o);
      }
    }
  }
  end_call(a, epoch);
}

}  // namespace fk::kernels::peer_ar
