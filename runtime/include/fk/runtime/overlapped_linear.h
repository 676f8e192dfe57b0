// Overlapped (async tensor-parallel) linears over NVLink peer memory: the all-gather before a
// column-parallel linear and the reduce-scatter after a row-parallel one, each hidden behind the
// GEMM's chunks (Note [Overlapped linears] in fk/kernels/async_tp.cuh). The production counterparts
// are PyTorch's symmetric-memory fused_all_gather_matmul / fused_matmul_reduce_scatter, which
// vLLM's async-TP compilation pass substitutes for all_gather + mm and mm + reduce_scatter.
//
//   fk::dist::OverlappedLinear ol(store, comm, {max_tokens, k, n});
//   ol.all_gather_matmul(x_shard /*[T/W, k]*/, w /*[n, k]*/, y /*[T, n]*/);
//   ol.matmul_reduce_scatter(x /*[T, k']*/, w2 /*[n, k']*/, y2 /*[T/W, n]*/);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "fk/runtime/comm.h"
#include "fk/runtime/peer_memory.h"
#include "fk/runtime/tensor.h"

namespace fk::dist {

class OverlappedLinear {
 public:
  struct Config {
    int64_t max_tokens = 0;  ///< T, the rows over all ranks (each rank's chunk T / W), the largest call
    int64_t gather_k = 0;    ///< all_gather_matmul's input width (0: not used)
    int64_t scatter_n = 0;   ///< matmul_reduce_scatter's output width (0: not used)
  };
  /// Joins every rank of the communicator's job (one host, every GPU reaching every other; the same
  /// config on every rank). `timeout` bounds the waits for a peer's data (past it the kernel traps).
  OverlappedLinear(TcpStore& store, Communicator& comm, const Config& cfg, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~OverlappedLinear();
  OverlappedLinear(const OverlappedLinear&) = delete;
  OverlappedLinear& operator=(const OverlappedLinear&) = delete;

  /// y [T, N] = all_gather(x_shard) W^T, rows of rank q at [q T/W, (q+1) T/W): x_shard [T/W, K] bf16 with
  /// K = gather_k, w [N, K] bf16 (this rank's column shard), T <= max_tokens a multiple of W. Every rank
  /// calls, in the same order as the others and with the same T, on the current stream; eager only (a call
  /// under CUDA-graph capture is refused).
  void all_gather_matmul(const Tensor& x_shard, const Tensor& w, Tensor& y);
  /// y [T/W, N] = rows [r T/W, (r+1) T/W) of sum over ranks q of x_q W_q^T: x [T, K] bf16 (this rank's
  /// slice of the inner dimension), w [N, K] bf16 with N = scatter_n, T <= max_tokens a multiple of W; every
  /// rank calls with the same T, eager only.
  void matmul_reduce_scatter(const Tensor& x, const Tensor& w, Tensor& y);

  const Config& config() const { return cfg_; }

 private:
  void check_call(const char* op, const Tensor& a, int64_t rows, int64_t cols, const char* what) const;
  Communicator& comm_;
  Config cfg_;
  int rank_ = 0, world_ = 1;
  uint64_t timeout_ns_ = 0;
  uint32_t ag_epoch_ = 0, rs_epoch_ = 0;
  int64_t off_ag_ = 0, off_rs_ = 0;  ///< byte offsets of the receive areas in every rank's buffer
  int64_t ag_slot_ = 0, rs_slot_ = 0;  ///< bytes of one rank's slot in them (256-byte multiples)
  std::unique_ptr<PeerMemory> mem_;
  Tensor stage_;                       ///< matmul_reduce_scatter's partial rows, W slots of rs_slot_ bytes (sent from here)
  /// Copies `bytes` to a peer's slot on copy_[p], then its flag = epoch; sent_[p] marks the end.
  void push(int p, char* dst, const void* src, int64_t bytes, uint32_t* flag, uint32_t epoch);
  void wait_pushes(cudaStream_t s);  ///< s waits for every push of the call
  cudaStream_t copy_[PeerMemory::kMaxRanks] = {};  ///< the transfers to peer p
  cudaEvent_t chunk_[PeerMemory::kMaxRanks] = {};  ///< the data for peer p is ready (on the compute stream)
  cudaEvent_t sent_[PeerMemory::kMaxRanks] = {};   ///< the push to peer p is done
};

}  // namespace fk::dist
