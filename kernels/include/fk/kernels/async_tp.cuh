// Device side of the overlapped (async tensor-parallel) linears, fk::dist::OverlappedLinear
// (fk/runtime/overlapped_linear.h).
//
// Note [Overlapped linears]
// Column-parallel linear after an all-gather (all_gather_matmul: y[T, N] = allgather(x)[T, K] W^T)
// and row-parallel linear before a reduce-scatter (matmul_reduce_scatter: y[T/W, N] = the rank's
// rows of sum over ranks of x_q[T, K] W_q^T), the two patterns vLLM's async-TP pass rewrites into
// PyTorch's symmetric-memory fused_all_gather_matmul / fused_matmul_reduce_scatter. The GEMMs run
// on the caller's stream one chunk of T / W rows at a time (cuBLASLt); the transfers run on one stream
// per peer (side by side on the links) as copy-engine copies into the peers' mapped buffers (no SM
// spent on moving data; slots 256-byte aligned for the GEMMs that read them), each
// followed by a one-thread signal kernel that writes the call's epoch into the receiver's flag for
// this sender. A wait kernel on the compute stream spins on such a flag before the GEMM or the
// reduction that reads the data.
//   all_gather_matmul, rank r: GEMM of its own chunk while pushing its shard to ranks r+1, r+2, ...;
//   then chunk by chunk from ranks r-1, r-2, ... (rank r-i pushes to r as its i-th copy, so the
//   chunks come in the order they are needed).
//   matmul_reduce_scatter, rank r: GEMM of the rows destined to rank r+1, push them while computing
//   those of r+2, ..., its own rows last; then wait for every peer's rows and sum the W partials in
//   rank order 0..W-1 in fp32 (every rank the same order: the result does not depend on arrivals).
// Receive areas alternate between two halves by the call's parity. A sender writes half h of call k
// only after its compute stream reached call k, which it does after waiting in call k-1 for that
// receiver's own call-(k-1) data; the receiver sent that data after finishing call k-2, the last
// reader of half h. Eager only: the epoch and the half are host values (graphs would replay one).
#pragma once

#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>

#include "fk/kernels/peer_allreduce.cuh"

namespace fk::kernels::async_tp {

using peer_ar::kMaxRanks;  // the peer buffers' limit (fk::dist::PeerMemory)

/// The flags at the start of every rank's buffer: ag[q] / rs[q] the last call (epoch) whose data rank q
/// has delivered here.
struct Flags {
  uint32_t ag[kMaxRanks];
  uint32_t rs[kMaxRanks];
};
constexpr int64_t kFlagBytes = 4096;
static_assert(sizeof(Flags) <= kFlagBytes, "the flags fit their area");

/// One thread: release-store `epoch` into a peer's flag (after the copies before it on the stream).
template <int = 0> __global__ void signal_kernel(uint32_t* flag, uint32_t epoch) {
  __threadfence_system();
  peer_ar::st_release_sys(flag, epoch);
}

/// One thread: waits until *flag reaches `epoch` (peer_ar::wait_for_peer); op 0 all-gather, 1 reduce-scatter.
template <int = 0> __global__ void wait_kernel(const uint32_t* flag, uint32_t epoch, uint64_t timeout_ns, int rank, int peer, int op) {
  peer_ar::wait_for_peer(flag, epoch, timeout_ns, "overlapped linear", rank, peer, op == 0 ? "all-gather data" : "reduce-scatter data");
}

/// out[i] = sum over q = 0..W-1 of part[q][i] in fp32 (rank order), bf16 out; n a multiple of 8.
struct SumArgs {
  const __nv_bfloat16* part[kMaxRanks];
  int world;
};
template <int = 0> __global__ void __launch_bounds__(256) sum_partials_kernel(SumArgs a, __nv_bfloat16* out, int64_t n) {
  const int64_t packs = n / 8, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride) {
    float acc[8] = {};
    for (int q = 0; q < a.world; ++q) {
      const uint4 v = reinterpret_cast<const uint4*>(a.part[q])[i];
      const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(e[k]);
    }
    uint4 o;
    __nv_bfloat16* oe = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
    for (int k = 0; k < 8; ++k) oe[k] = __float2bfloat16(acc[k]);
    reinterpret_cast<uint4*>(out)[i] = o;
  }
}

}  // namespace fk::kernels::async_tp
