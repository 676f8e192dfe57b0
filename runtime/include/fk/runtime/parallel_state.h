// The job's process groups as tasks use them (issue 23): the counterpart of vLLM's GroupCoordinator
// (vllm.distributed.parallel_state: get_tp_group().all_reduce / all_gather / reduce_scatter), on top
// of the NCCL communicator (fk/runtime/comm.h) and the own all-reduce over peer memory
// (fk/runtime/peer_allreduce.h).
//
// Note [Group all-reduce choice]
// As vLLM's device communicator picks its custom all-reduce where it serves the message and NCCL
// otherwise, all_reduce goes to the own peer all-reduce (its own choice of Lamport, one-shot or
// two-shot) when every rank is on one host with peer access (decided once, by every rank alike: the
// peer all-reduce's constructor agrees through the store) and the message is at most the size up to
// which it beat NCCL (peer_preferred_bytes: 2 MiB at 2 ranks, 256 KiB at more; measured on 2 and 4
// H100s in CUDA graphs, bench/results/2026-11-27-h100x4-s25: at 2 ranks own 25.8 against NCCL 29.0 us at
// 2 MiB, 41.5 against 33.5 at 4 MiB; at 4 ranks 10.7 against 15.5 us at 256 KiB, 15.9 against 15.3 at
// 512 KiB), and to NCCL otherwise (vLLM's custom all-reduce likewise serves small messages only).
// Both sum in a fixed order on every rank, so every rank holds the same result.
// all_gather / reduce_scatter are NCCL's. A task sharded for tensor parallelism reaches the group
// through tp_group(), which names how to start one when the process has none.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "fk/runtime/comm.h"
#include "fk/runtime/ep_all_to_all.h"
#include "fk/runtime/overlapped_linear.h"
#include "fk/runtime/peer_allreduce.h"
#include "fk/runtime/tp_group.h"

namespace fk::dist {

class GroupCoordinator {
 public:
  /// Every rank of store.env(); `use_peer` false: NCCL only. peer_max_bytes: the peer all-reduce's buffer. The store
  /// must outlive the group (the expert-parallel all-to-alls it makes later rendezvous through it).
  GroupCoordinator(TcpStore& store, std::chrono::milliseconds timeout, bool use_peer = true, int64_t peer_max_bytes = int64_t(8) << 20);
  ~GroupCoordinator();
  GroupCoordinator(const GroupCoordinator&) = delete;
  GroupCoordinator& operator=(const GroupCoordinator&) = delete;

  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  Communicator& nccl() { return *comm_; }
  /// The own all-reduce, or nullptr where it cannot serve this job (peer_unavailable() says why).
  PeerAllReduce* peer() { return peer_.get(); }
  /// The largest message all_reduce gives the own all-reduce (Note [Group all-reduce choice]).
  int64_t peer_preferred_bytes() const { return world_size() == 2 ? int64_t(2) << 20 : int64_t(256) << 10; }
  /// The own all-reduce where the group gives it a message of `bytes` (Note [Group all-reduce choice]), else
  /// nullptr (NCCL's size, one rank, or no peer access); the caller still asks it whether it serves the tensors.
  PeerAllReduce* peer_for(int64_t bytes) { return world_size() > 1 && bytes <= peer_preferred_bytes() ? peer_.get() : nullptr; }
  const std::string& peer_unavailable() const { return peer_why_; }

  /// The sum over the ranks, in place (Note [Group all-reduce choice]); enqueued on fk::current_stream().
  void all_reduce_(Tensor& t);
  /// vLLM's GroupCoordinator.all_reduce: a new tensor (the input is left as it was).
  Tensor all_reduce(const Tensor& input);
  /// vLLM's all_gather(input, dim=-1): every rank's [rows, n] side by side, [rows, world * n] in rank
  /// order (2-D, contiguous).
  Tensor all_gather_last_dim(const Tensor& input);
  /// vLLM's reduce_scatter(input, dim=0): [rows, ...] summed over the ranks, this rank's rows / world.
  Tensor reduce_scatter_first_dim(const Tensor& input);
  /// vLLM's all_gather(input, dim=0): every rank's [rows, ...] in rank order, [world * rows, ...].
  Tensor all_gather_first_dim(const Tensor& input);
  /// The group's overlapped linears (fk/runtime/overlapped_linear.h) for calls of at most `max_tokens` rows over the
  /// ranks, gathering inputs of width gather_k or scattering outputs of width scatter_n: made on first use, by every
  /// rank in the same call (it maps peer memory through the store); nullptr where the group has no peer access (the
  /// own all-reduce could not map the ranks' memory: peer_unavailable() says why).
  OverlappedLinear* overlapped_linear(int64_t max_tokens, int64_t gather_k, int64_t scatter_n);
  /// The group's expert-parallel all-to-all for MoE blocks of this shape whose calls carry at most `max_tokens` tokens
  /// per rank (Note [Data-parallel expert MoE] in fk/tasks/moe.h): made on first use, by every rank in the same call
  /// (it maps peer memory through the store), over peer memory where the own all-reduce could map it, else NCCL.
  /// `nccl`: the NCCL send / recv backend whatever the group's peer access (the baseline a task times beside its own).
  EpAllToAll& ep_all_to_all(int num_experts, int hidden, int topk, int64_t max_tokens, bool nccl = false);
  /// Waits for the stream's collectives, bounded (Communicator::synchronize).
  void synchronize(cudaStream_t stream) { comm_->synchronize(stream); }

 private:
  TcpStore& store_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<PeerAllReduce> peer_;
  std::string peer_why_;
  std::map<std::tuple<int, int, int, int64_t, bool>, std::unique_ptr<EpAllToAll>> ep_;  ///< by (experts, hidden, topk, max_tokens, nccl)
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<OverlappedLinear>> overlapped_;  ///< by (max_tokens, k, n)
};

}  // namespace fk::dist
