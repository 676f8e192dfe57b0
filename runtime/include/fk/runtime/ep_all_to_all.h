// Expert-parallel all-to-all for MoE layers (issue 23): dispatch and combine, with an own backend over
// NVLink peer memory and a baseline on NCCL send / recv. The counterparts in production: DeepEP's
// intranode Buffer (dispatch / combine) and vLLM's FusedMoEPrepareAndFinalize (prepare / finalize) of
// its modular MoE kernels. The layout, the plan and the kernels: Note [Expert-parallel all-to-all] in
// fk/kernels/ep_all_to_all.cuh.
//
//   EpAllToAll ep(store, comm, {num_experts, hidden, topk, max_tokens}, EpAllToAll::Backend::kPeer);
//   const EpAllToAll::Dispatched& d = ep.dispatch(x, topk_ids, topk_weights);   // rows for my experts
//   ... y (laid out as d.x) = the sum of my experts' weighted outputs per received row ...
//   ep.combine(y, out);                                                       // out [T, hidden]
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "fk/runtime/comm.h"
#include "fk/runtime/dist.h"
#include "fk/runtime/peer_memory.h"
#include "fk/runtime/tensor.h"

namespace fk::kernels::ep {
struct PeerArgs;
}

namespace fk::dist {

class EpAllToAll {
 public:
  enum class Backend {
    kPeer,  ///< own kernels over peer memory (one host, every GPU reaching every other); CUDA-graph capturable
    kNccl,  ///< grouped ncclSend / ncclRecv after a host-side count exchange (any ranks); eager only
  };
  struct Config {
    int num_experts = 0;  ///< over all ranks; a multiple of the world size
    int hidden = 0;       ///< a multiple of 8 (16-byte rows of bf16)
    int topk = 0;         ///< 1 to 32
    int max_tokens = 0;   ///< per rank and call
  };
  /// What dispatch delivers to this rank: the rows of source rank q are rows [q * capacity, q * capacity
  /// + counts[q]) of x / topk_ids / topk_weights (the rest of each region is stale); topk_ids are
  /// global expert ids (this rank's: [first_expert, first_expert + experts_per_rank)).
  struct Dispatched {
    Tensor x;             ///< [world * capacity, hidden] bf16
    Tensor topk_ids;      ///< [world * capacity, topk] i32
    Tensor topk_weights;  ///< [world * capacity, topk] f32
    const int32_t* counts = nullptr;  ///< [world] on the device
    int64_t capacity = 0;
  };

  /// Joins every rank of the communicator's job (the same config and backend on every rank); the
  /// peer backend maps every rank's buffers and throws on every rank where the GPUs cannot reach each
  /// other. `timeout` bounds the peer kernels' waits for a peer (past it they trap).
  EpAllToAll(TcpStore& store, Communicator& comm, const Config& cfg, Backend backend,
             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~EpAllToAll();
  EpAllToAll(const EpAllToAll&) = delete;
  EpAllToAll& operator=(const EpAllToAll&) = delete;

  /// x [T, hidden] bf16, topk_ids [T, topk] i32 (ids < 0: not routed), topk_weights [T, topk] f32,
  /// T <= max_tokens (0 allowed); every rank calls, in the same order as the others.
  const Dispatched& dispatch(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights);
  /// out [T, hidden] bf16 (T of the last dispatch) = per token, the sum over the ranks it went to of
  /// y's row for it (y [world * capacity, hidden] bf16, laid out as the dispatched rows).
  void combine(const Tensor& y, Tensor& out);

  /// The peer backend's buffer on every rank (Note [Expert-parallel all-to-all]): the signal area, the receive
  /// area's rows, ids and weights, then the combine area; byte offsets and the total.
  struct PeerLayout {
    int64_t recv_x = 0, recv_ids = 0, recv_w = 0, comb_x = 0, total = 0;
  };
  static PeerLayout peer_layout(int world, const Config& cfg);
  /// The peer kernels' view of `world` ranks' buffers (`bases`, each laid out as peer_layout says) for rank `rank`.
  static fk::kernels::ep::PeerArgs peer_args(char* const* bases, int rank, int world, const Config& cfg, uint64_t timeout_ns);

  Backend backend() const { return backend_; }
  static const char* backend_name(Backend b);
  int experts_per_rank() const { return cfg_.num_experts / world_; }
  int first_expert() const { return rank_ * experts_per_rank(); }
  const Config& config() const { return cfg_; }

 private:
  fk::kernels::ep::PeerArgs peer_args() const;  ///< kPeer: the kernels' view of the buffers
  Communicator& comm_;
  Config cfg_;
  Backend backend_;
  int rank_ = 0, world_ = 1;
  uint64_t timeout_ns_ = 0;
  int64_t tokens_ = -1;  ///< T of the last dispatch (-1: none yet)
  std::unique_ptr<PeerMemory> mem_;          ///< kPeer
  Tensor slot_, counts_dev_;                 ///< plan: [max_tokens, world], send then receive counts [2 * world]
  Tensor send_x_, send_ids_, send_w_, recv_x_, recv_ids_, recv_w_, comb_x_;  ///< kNccl staging
  std::vector<int32_t> send_counts_, recv_counts_;  ///< kNccl: the last dispatch's, on the host
  Dispatched out_;
};

}  // namespace fk::dist
