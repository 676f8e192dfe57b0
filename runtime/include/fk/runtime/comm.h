// The job's NCCL communicator (issue 23; docs/multi-gpu.md), on top of the rendezvous store of
// fk/runtime/dist.h: one per process, every rank of the job.
//
// Note [Communicator]
// Rank 0 draws NCCL's unique id and publishes it in the store; every rank binds the GPU LOCAL_RANK
// (modulo the visible devices) and joins with ncclCommInitRankConfig in non-blocking mode, so that
// no wait is NCCL's own: the join, and synchronize() after collectives, poll ncclCommGetAsyncError,
// the store's abort flag (set by abort(), which any rank calls when it fails) and a deadline; on any
// of them the communicator is aborted (ncclCommAbort) and the wait throws naming the cause, so one
// rank's failure ends the others with an error within the polling interval instead of a hang. The
// ranks create communicators in the same order; the n-th one's keys are "fk/nccl/<n>/...", so a job
// may make several (a test after an abort). Collectives are enqueued on fk::current_stream() and are
// in place where NCCL allows it, as vLLM's device communicators (GroupCoordinator.all_reduce etc.).
#pragma once

#include <nccl.h>

#include <chrono>
#include <string>
#include <vector>

#include "fk/runtime/dist.h"
#include "fk/runtime/tensor.h"

namespace fk::dist {

class Communicator {
 public:
  /// Joins every rank of store.env(); `timeout` bounds the join and every synchronize().
  Communicator(TcpStore& store, std::chrono::milliseconds timeout);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int device() const { return device_; }
  ncclComm_t nccl() const { return comm_; }

  /// Sum over the ranks, in place (t contiguous, the same shape on every rank).
  void all_reduce_(Tensor& t);
  /// out = the sum over the ranks of in (both contiguous, the same size; in is left as it was).
  void all_reduce(const Tensor& in, Tensor& out);
  /// out [world * n] = every rank's in [n], in rank order (flat, contiguous).
  void all_gather(const Tensor& in, Tensor& out);
  /// out [n / world] = the sum over the ranks of in's rank-th slice (flat, contiguous).
  void reduce_scatter(const Tensor& in, Tensor& out);
  /// One point-to-point transfer of a grouped exchange: `bytes` from / to `peer` (torch's P2POp).
  struct P2P {
    bool send;
    int peer;
    void* data;
    int64_t bytes;
  };
  /// Every transfer of `ops` in one NCCL group (ncclSend / ncclRecv, this rank included as a peer;
  /// zero-byte ones skipped), as torch.distributed.batch_isend_irecv; the peers' groups must match.
  void send_recv(const std::vector<P2P>& ops);
  /// Waits for `stream`'s work; throws (after aborting) on an NCCL error, another rank's abort, or the timeout.
  void synchronize(cudaStream_t stream);
  /// Sets the store's abort flag with `why` (the other ranks see it) and aborts this rank's communicator.
  void abort(const std::string& why);
  bool aborted() const { return aborted_; }

 private:
  void wait_ready(const std::string& what);
  void poll_failures(const std::string& what, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(const std::string& what);
  std::string key(const std::string& name) const;
  TcpStore& store_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, world_ = 1, device_ = 0, generation_ = 0;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  std::chrono::steady_clock::time_point last_flag_check_{};
};

}  // namespace fk::dist
