// The own all-reduce for small and medium messages over NVLink peer memory (issue 23): one-shot and
// two-shot kernels (Note [Peer all-reduce] in fk/kernels/peer_allreduce.cuh), buffers registered
// once and mapped by every rank, capturable in CUDA graphs. As vLLM's CustomAllreduce, it serves
// the ranks of one host whose GPUs reach each other directly; messages larger than its buffer, or
// GPUs without peer access, go to NCCL (Communicator::all_reduce_). The choice between the Lamport
// one-shot, one-shot and two-shot (kAuto) is by world size and message size (Note [Peer all-reduce
// choice]).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "fk/runtime/dist.h"
#include "fk/runtime/peer_memory.h"
#include "fk/runtime/tensor.h"

namespace fk::dist {

class PeerAllReduce {
 public:
  enum class Algo { kAuto, kOneShot, kTwoShot, kLamport };
  /// Joins every rank of store.env() (all on this host, the current device being the rank's GPU):
  /// allocates and maps the buffers (messages up to max_bytes). Throws naming the reason where the
  /// GPUs cannot reach each other or the ranks span hosts. `timeout` bounds the join and each
  /// kernel's wait for a peer (past it the kernel traps).
  /// lamport_bytes: the Lamport kernel's largest message (Note [Lamport all-reduce]; at most max_bytes).
  PeerAllReduce(TcpStore& store, int64_t max_bytes = int64_t(8) << 20, std::chrono::milliseconds timeout = std::chrono::seconds(60),
                int64_t lamport_bytes = int64_t(1) << 20);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  int64_t max_bytes() const { return max_bytes_; }
  int64_t lamport_bytes() const { return lamport_bytes_; }
  int world_size() const { return world_; }
  /// Why t cannot go through this all-reduce ("" when it can): dtype bf16 / f16 / f32, contiguous,
  /// 16-byte aligned, at most max_bytes.
  std::string unsupported(const Tensor& t) const;
  /// The algorithm kAuto takes for a message of `bytes` on this world size.
  Algo choose(int64_t bytes) const;
  /// Sum over the ranks, in place, enqueued on fk::current_stream(); every rank must make the same
  /// calls in the same order with the same sizes and algorithms. Throws where unsupported(t) says so.
  void all_reduce_(Tensor& t, Algo algo = Algo::kAuto);
  /// out = the sum over the ranks of in (out may be in; same shape and dtype).
  void all_reduce(const Tensor& in, Tensor& out, Algo algo = Algo::kAuto);

  /// For the fused kernels (fk/runtime/peer_allreduce_fused.cuh): every rank's buffer as mapped
  /// here, this rank, the kernels' wait bound; require() throws naming `what` where unsupported(t).
  char* const* buffers() const { return mem_->buffers(); }
  int rank() const { return rank_; }
  uint64_t timeout_ns() const { return timeout_ns_; }
  void require(const Tensor& t, const std::string& what) const;

 private:
  int rank_ = 0, world_ = 1, generation_ = 0;
  int64_t max_bytes_ = 0, lamport_bytes_ = 0;
  uint64_t timeout_ns_ = 0;
  std::unique_ptr<PeerMemory> mem_;
};

const char* algo_name(PeerAllReduce::Algo a);

}  // namespace fk::dist
