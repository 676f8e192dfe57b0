// Expert-parallel all-to-all for MoE layers (issue 23): dispatch sends each token to the ranks that
// hold its top-k experts, combine brings the experts' outputs back and sums them per token. The
// counterparts in production: DeepEP's intranode Buffer.dispatch / Buffer.combine and vLLM's
// FusedMoEPrepareAndFinalize.prepare / finalize (the modular MoE kernel's all-to-all backends). The
// host side (buffers, the NCCL baseline, the API) is fk/runtime/ep_all_to_all.h.
//
// Note [Expert-parallel all-to-all]
// E experts over W ranks, experts_per_rank = E / W consecutive ids per rank (rank = id / per_rank;
// ids < 0 are not routed, as vLLM's expert_map marks absent experts). Every rank holds T <= capacity
// tokens of hidden H with their top-k ids and weights.
//   plan      one block numbers, for each destination rank d, the tokens with at least one expert
//             on d (token order): slot[t][d] (-1 where none), send_count[d]. A token goes to a rank
//             once, whatever number of its experts live there (DeepEP's layout, not one copy per
//             expert: k / (distinct ranks) times less traffic).
//   dispatch  token t's row, its k ids and weights land on rank d at row src * capacity + slot[t][d]
//             of d's receive area, src the sending rank: the rows from rank q are q's region, its
//             first counts[q] rows.
//   experts   each rank computes, for every received row, the sum of its own experts' outputs
//             weighted by the row's weights (ids of other ranks skipped): y, laid out as the rows.
//   combine   y's rows of region q go back to rank q, into its combine area at row d * capacity +
//             slot (d the rank they come from); rank q then sums, for each token, the rows of every
//             d with slot[t][d] >= 0 in fp32 in rank order and rounds once: the same sum on any
//             backend, bitwise.
// Own backend (peer memory, one host): every rank maps every other rank's buffer (PeerMemory). The
// dispatch kernel writes the rows straight into the destinations' receive areas, then each block
// adds one to a per-source arrival counter in every destination's signal area (system-scope fence
// first; block 0 writes the row count before its fence); block 0 then waits until every source's
// counter reaches calls x grid (acquire), so the kernels after it see every row. Combine does the
// same into the combine areas, and every block waits before summing its tokens. The call counts
// live in the rank's own signal area (read at a kernel's start, written by block 0 at its end,
// after every block of this rank has arrived, hence has read it), so CUDA graphs replay without host
// arguments. One receive and one combine area suffice: a rank's next dispatch into a peer's receive
// area follows its own combine, which waited for that peer's combine, which came after the peer
// read its received rows; likewise for the combine area. A block that waits longer than the timeout
// prints which rank it waited for and traps (a CUDA error rather than a hang on a dead peer).
// NCCL baseline (any ranks, any hosts): the same plan and layout, rows packed by destination, the
// counts exchanged (one int per pair) and copied to the host, then grouped ncclSend / ncclRecv of
// the rows, ids and weights; combine sends y's regions back the same way and sums as above.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "fk/kernels/peer_allreduce.cuh"

namespace fk::kernels::ep {

using peer_ar::kMaxRanks;  // the peer buffers' limit (fk::dist::PeerMemory)
constexpr int kThreads = 512;
constexpr int kPlanThreads = 1024;  // 32 warps: one warp total per lane of warp 0 in the scan
/// The peer kernels' fixed grid: every block signals every call, so counters advance by kGrid.
constexpr int kGrid = 32;

/// The start of every rank's peer buffer (zeroed once).
struct Signals {
  uint32_t dispatch_arrived[kMaxRanks];  ///< blocks of rank q that have pushed rows here, over all calls
  uint32_t combine_arrived[kMaxRanks];   ///< the same for combine
  uint32_t dispatch_calls, combine_calls;  ///< this rank's own calls (only its kernels touch them)
  int32_t counts[kMaxRanks];  ///< rows rank q sent here at its last dispatch
};
constexpr int64_t kSignalBytes = 4096;
static_assert(sizeof(Signals) <= kSignalBytes, "signal area");

/// Where the rows go: rank d's receive (or, for NCCL, send-staging) row r of the dispatch.
struct RowsAt {
  __nv_bfloat16* x[kMaxRanks];
  int32_t* ids[kMaxRanks];
  float* w[kMaxRanks];
  int64_t first_row[kMaxRanks];  ///< the row of slot 0 on destination d
};

struct PeerArgs {
  char* base[kMaxRanks];  ///< every rank's buffer as mapped here
  int rank, world;
  int64_t capacity;
  int hidden, topk;
  int64_t off_recv_x, off_recv_ids, off_recv_w, off_comb_x;
  uint64_t timeout_ns;
};

__device__ __forceinline__ Signals* signals(char* base) { return reinterpret_cast<Signals*>(base); }

/// Waits until *counter reaches want (peer_ar::wait_for_peer), naming the rows awaited.
__device__ __forceinline__ void wait_counter(const uint32_t* counter, uint32_t want, uint64_t timeout_ns, int rank, int from,
                                             const char* what) {
  peer_ar::wait_for_peer(counter, want, timeout_ns, "ep all-to-all", rank, from, what);
}

/// slot[t * world + d] and send_count[d] (Note [Expert-parallel all-to-all], plan); one block.
static __global__ void __launch_bounds__(kPlanThreads) plan_kernel(const int32_t* __restrict__ ids, int64_t tokens, int topk, int per_rank,
                                                          int num_experts, int world, int32_t* __restrict__ slot,
                                                          int32_t* __restrict__ send_count) {
  __shared__ int warp_off[32];
  __shared__ int base[kMaxRanks];
  __shared__ int chunk_total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x < world) base[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t t0 = 0; t0 < tokens; t0 += kPlanThreads) {
    const int64_t t = t0 + threadIdx.x;
    uint32_t mask = 0;
    if (t < tokens)
      for (int j = 0; j < topk; ++j) {
        const int e = ids[t * topk + j];
        if (e >= num_experts) {
          printf("fk ep all-to-all: token %lld's expert id %d is not below the %d experts\n", static_cast<long long>(t), e, num_experts);
          __trap();
        }
        if (e >= 0) mask |= 1u << (e / per_rank);
      }
    for (int d = 0; d < world; ++d) {
      const bool to_d = (mask >> d) & 1u;
      const unsigned ballot = __ballot_sync(0xffffffffu, to_d);
      if (lane == 0) warp_off[warp] = __popc(ballot);
      __syncthreads();
      if (warp == 0) {  // exclusive scan of the 32 warps' counts
        const int v = warp_off[lane];
        int incl = v;
        for (int o = 1; o < 32; o <<= 1) {
          const int n = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += n;
        }
        warp_off[lane] = incl - v;
        if (lane == 31) chunk_total = incl;
      }
      __syncthreads();
      if (t < tokens) slot[t * world + d] = to_d ? base[d] + warp_off[warp] + __popc(ballot & ((1u << lane) - 1u)) : -1;
      __syncthreads();
      if (threadIdx.x == 0) base[d] += chunk_total;
      __syncthreads();
    }
  }
  if (threadIdx.x < world) send_count[threadIdx.x] = base[threadIdx.x];
}

/// Token rows, ids and weights to every destination of their slots (blocks stride over the tokens).
__device__ __forceinline__ void scatter_rows(const RowsAt& to, const __nv_bfloat16* __restrict__ x, const int32_t* __restrict__ ids,
                                             const float* __restrict__ w, int64_t tokens, int hidden, int topk, int world,
                                             const int32_t* __restrict__ slot) {
  __shared__ int s_slot[kMaxRanks];
  const int packs = hidden / 8;  // 16-byte packs (hidden % 8 == 0: the host checks)
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    if (threadIdx.x < world) s_slot[threadIdx.x] = slot[t * world + threadIdx.x];
    __syncthreads();
    const uint4* src = reinterpret_cast<const uint4*>(x + t * hidden);
    for (int i = threadIdx.x; i < packs; i += blockDim.x) {
      const uint4 v = src[i];
      for (int d = 0; d < world; ++d)
        if (s_slot[d] >= 0) reinterpret_cast<uint4*>(to.x[d] + (to.first_row[d] + s_slot[d]) * int64_t(hidden))[i] = v;
    }
    if (threadIdx.x < topk)
      for (int d = 0; d < world; ++d)
        if (s_slot[d] >= 0) {
          const int64_t r = to.first_row[d] + s_slot[d];
          to.ids[d][r * topk + threadIdx.x] = ids[t * topk + threadIdx.x];
          to.w[d][r * topk + threadIdx.x] = w[t * topk + threadIdx.x];
        }
    __syncthreads();
  }
}

/// out[t] = the sum over ranks d (in order) of comb[d * capacity + slot[t][d]] where slot >= 0, fp32, rounded once.
__device__ __forceinline__ void reduce_rows(const __nv_bfloat16* __restrict__ comb, int64_t capacity, const int32_t* __restrict__ slot,
                                            int64_t tokens, int hidden, int world, __nv_bfloat16* __restrict__ out) {
  __shared__ int s_slot[kMaxRanks];
  const int packs = hidden / 8;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    if (threadIdx.x < world) s_slot[threadIdx.x] = slot[t * world + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.x; i < packs; i += blockDim.x) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int d = 0; d < world; ++d) {
        if (s_slot[d] < 0) continue;
        const uint4 v = reinterpret_cast<const uint4*>(comb + (d * capacity + s_slot[d]) * int64_t(hidden))[i];
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(h[k]);
          acc[2 * k] += f.x;
          acc[2 * k + 1] += f.y;
        }
      }
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; ++k) oh[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
      reinterpret_cast<uint4*>(out + t * int64_t(hidden))[i] = o;
    }
    __syncthreads();
  }
}

/// NCCL baseline: rows packed by destination into the send staging (to: d's region of it).
static __global__ void __launch_bounds__(kThreads) pack_kernel(RowsAt to, const __nv_bfloat16* x, const int32_t* ids, const float* w, int64_t tokens,
                                                        int hidden, int topk, int world, const int32_t* slot) {
  scatter_rows(to, x, ids, w, tokens, hidden, topk, world, slot);
}
static __global__ void __launch_bounds__(kThreads) reduce_kernel(const __nv_bfloat16* comb, int64_t capacity, const int32_t* slot, int64_t tokens,
                                                          int hidden, int world, __nv_bfloat16* out) {
  reduce_rows(comb, capacity, slot, tokens, hidden, world, out);
}

/// Own backend, dispatch (Note [Expert-parallel all-to-all]); grid kGrid.
static __global__ void __launch_bounds__(kThreads) peer_dispatch_kernel(PeerArgs a, const __nv_bfloat16* x, const int32_t* ids, const float* w,
                                                                 int64_t tokens, const int32_t* slot, const int32_t* send_count) {
  Signals* mine = signals(a.base[a.rank]);
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) s_epoch = mine->dispatch_calls + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  RowsAt to;
  for (int d = 0; d < a.world; ++d) {
    to.x[d] = reinterpret_cast<__nv_bfloat16*>(a.base[d] + a.off_recv_x);
    to.ids[d] = reinterpret_cast<int32_t*>(a.base[d] + a.off_recv_ids);
    to.w[d] = reinterpret_cast<float*>(a.base[d] + a.off_recv_w);
    to.first_row[d] = int64_t(a.rank) * a.capacity;
  }
  scatter_rows(to, x, ids, w, tokens, a.hidden, a.topk, a.world, slot);
  __syncthreads();
  if (threadIdx.x < a.world) {
    Signals* theirs = signals(a.base[threadIdx.x]);
    if (blockIdx.x == 0) theirs->counts[a.rank] = send_count[threadIdx.x];
    __threadfence_system();
    atomicAdd_system(&theirs->dispatch_arrived[a.rank], 1u);
  }
  if (blockIdx.x == 0) {
    if (threadIdx.x < a.world)
      wait_counter(&mine->dispatch_arrived[threadIdx.x], epoch * gridDim.x, a.timeout_ns, a.rank, threadIdx.x, "dispatched rows");
    __syncthreads();
    if (threadIdx.x == 0) mine->dispatch_calls = epoch;
  }
}

/// Own backend, combine: y's region q back to rank q, then every block sums its tokens; grid kGrid.
static __global__ void __launch_bounds__(kThreads) peer_combine_kernel(PeerArgs a, const __nv_bfloat16* y, int64_t tokens, const int32_t* slot,
                                                                __nv_bfloat16* out) {
  Signals* mine = signals(a.base[a.rank]);
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) s_epoch = mine->combine_calls + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const int packs = a.hidden / 8;
  for (int q = 0; q < a.world; ++q) {
    const int64_t n = mine->counts[q];
    __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(a.base[q] + a.off_comb_x) + int64_t(a.rank) * a.capacity * a.hidden;
    const __nv_bfloat16* src = y + int64_t(q) * a.capacity * a.hidden;
    for (int64_t s = blockIdx.x; s < n; s += gridDim.x)
      for (int i = threadIdx.x; i < packs; i += blockDim.x)
        reinterpret_cast<uint4*>(dst + s * a.hidden)[i] = reinterpret_cast<const uint4*>(src + s * a.hidden)[i];
  }
  __syncthreads();
  if (threadIdx.x < a.world) {
    __threadfence_system();
    atomicAdd_system(&signals(a.base[threadIdx.x])->combine_arrived[a.rank], 1u);
    wait_counter(&mine->combine_arrived[threadIdx.x], epoch * gridDim.x, a.timeout_ns, a.rank, threadIdx.x, "combined rows");
  }
  __syncthreads();
  reduce_rows(reinterpret_cast<const __nv_bfloat16*>(a.base[a.rank] + a.off_comb_x), a.capacity, slot, tokens, a.hidden, a.world, out);
  if (blockIdx.x == 0 && threadIdx.x == 0) mine->combine_calls = epoch;
}

/// A stand-in for the experts in checks: y[row] = sum over the row's local ids j of w_j x (1 + id_j % 3)
/// x x[row] (fp32, rounded once), rows of region q up to counts[q], the rest left as they are.
static __global__ void __launch_bounds__(kThreads) scale_by_experts_kernel(const __nv_bfloat16* x, const int32_t* ids, const float* w,
                                                                    const int32_t* counts, int64_t capacity, int hidden, int topk,
                                                                    int first_expert, int per_rank, __nv_bfloat16* y) {
  const int q = blockIdx.y;
  for (int64_t s = blockIdx.x; s < counts[q]; s += gridDim.x) {
    const int64_t r = q * capacity + s;
    float f = 0.f;
    for (int j = 0; j < topk; ++j) {
      const int e = ids[r * topk + j];
      if (e >= first_expert && e < first_expert + per_rank) f += w[r * topk + j] * float(1 + e % 3);
    }
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
      y[r * hidden + i] = __float2bfloat16(f * __bfloat162float(x[r * hidden + i]));
  }
}

}  // namespace fk::kernels::ep
