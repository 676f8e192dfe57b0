// The process's tensor-parallel group, as generated tasks reach it (issue 23; Note [Parallel layouts]
// in generator/include/fk/gen/config.h): declarations only, without NCCL's headers (task headers
// include this, and the candidate checker parses them with its CUDA shim); fk/runtime/parallel_state.h
// defines the group.
#pragma once

#include <cstdint>

#include "fk/runtime/tensor.h"

namespace fk::dist {

class GroupCoordinator;
class PeerAllReduce;
/// The process's tensor-parallel group (vLLM's get_tp_group()). Throws, naming how to start ranks,
/// when none was installed.
GroupCoordinator& tp_group();
/// Installs (or, with nullptr, removes) the tensor-parallel group; the caller keeps it alive.
void set_tp_group(GroupCoordinator* group);
/// The tensor-parallel size: the group's world size, 1 when there is none.
int tp_world_size();
/// This process's rank in the tensor-parallel group (throws as tp_group() when there is none).
int tp_rank();
/// tp_group().all_reduce_(t): the sum over the group, in place (Note [Group all-reduce choice]).
void tp_all_reduce_(Tensor& t);
/// tp_group().all_reduce(t): the sum over the group in a new tensor (t is left as it was).
Tensor tp_all_reduce(const Tensor& t);
/// The sum over the group through NCCL alone (ncclAllReduce out of place: what torch.distributed.all_reduce runs), in
/// a new tensor: the peer of the all-reduce task (Note [Collective tasks] in fk/tasks/collective.h).
Tensor tp_nccl_all_reduce(const Tensor& t);
/// tp_group().peer_for(bytes): the group's own peer all-reduce where the group would give it a message of `bytes`
/// (Note [Group all-reduce choice]), else nullptr: what a fused all-reduce task runs on.
PeerAllReduce* tp_peer_all_reduce_for(int64_t bytes);
/// tp_group().all_gather_last_dim(t): every rank's [rows, n] side by side, [rows, world x n].
Tensor tp_all_gather_last_dim(const Tensor& t);
/// tp_group().all_gather_first_dim(t): every rank's [rows, ...] one after another, [world x rows, ...] in rank order
/// (vLLM's all_gather(dim=0): a sequence-parallel layer's gather of the ranks' token chunks).
Tensor tp_all_gather_first_dim(const Tensor& t);
/// tp_group().reduce_scatter_first_dim(t): [rows, ...] summed over the group, this rank's rows / world (vLLM's
/// reduce_scatter(dim=0)).
Tensor tp_reduce_scatter_first_dim(const Tensor& t);
/// Row-parallel GEMM with its reduce-scatter overlapped (Note [Overlapped linear tasks] in fk/tasks/overlapped_linear.h):
/// x [T, k] (this rank's slice of the inner dimension), w [n, k] -> [T / world, n], rows [r T/W, (r+1) T/W) of the sum over
/// the ranks of x_q w_q^T, over the group's own peer-memory kernels (eager only). Returns an undefined tensor where the
/// group has no peer access (ranks on several hosts, or GPUs without peer access): the caller then runs the serial GEMM
/// and reduce-scatter.
Tensor tp_matmul_reduce_scatter(const Tensor& x, const Tensor& w);
/// Column-parallel GEMM with the all-gather of its input overlapped: x_shard [T / world, k] (this rank's token chunk),
/// w [n, k] (this rank's output columns) -> [T, n] = all_gather(x_shard, dim 0) w^T; undefined where the group has no
/// peer access (as tp_matmul_reduce_scatter).
Tensor tp_all_gather_matmul(const Tensor& x_shard, const Tensor& w);

/// The size bucket the group's communication buffers are made for: `floor` doubled until it holds n (every rank picks
/// the same one for the same call, and a few buffers serve every count). The expert-parallel all-to-all buckets each
/// rank's tokens from 8; the overlapped linears the rows over all ranks from world x 8.
inline int64_t doubling_bucket(int64_t n, int64_t floor) {
  int64_t cap = floor;
  while (cap < n) cap *= 2;
  return cap;
}

class EpAllToAll;
/// What an expert-parallel dispatch delivered to this rank (Note [Data-parallel expert MoE] in fk/tasks/moe.h; the
/// group's fk::dist::EpAllToAll::Dispatched, NCCL-free for task headers): source rank q's rows are rows
/// [q capacity, q capacity + counts[q]) of x / topk_ids / topk_weights, the rest of each region is stale; topk_ids are
/// global expert ids (this rank's: [first_expert, first_expert + experts_per_rank)). Also the handle combine takes
/// (DeepEP's dispatch handle): which all-to-all carried the rows and how many tokens this rank sent.
struct EpDispatch {
  Tensor x;             ///< [world x capacity, hidden] bf16
  Tensor topk_ids;      ///< [world x capacity, topk] i32
  Tensor topk_weights;  ///< [world x capacity, topk] f32
  const int32_t* counts = nullptr;  ///< [world] on the device
  int64_t capacity = 0;
  int world = 1;
  int first_expert = 0;
  int experts_per_rank = 0;
  int64_t tokens = 0;            ///< this rank's tokens (the combined output's rows)
  EpAllToAll* route = nullptr;   ///< the all-to-all that carried them
};
/// The group's expert-parallel dispatch (Note [Data-parallel expert MoE]): this rank's tokens x [T, hidden] bf16 with
/// their routing (topk_ids i32 [T, topk], global ids over num_experts, < 0: not routed; topk_weights f32 [T, topk]) to
/// the ranks of their experts, each token once per rank. Over the group's own peer-memory kernels where the ranks map
/// each other (one host), NCCL send / recv otherwise, or with `nccl` always (the baseline). One all-to-all per
/// power-of-two bucket of T (at least 8), made on first use: every rank calls, in the same order, with counts in one
/// bucket (the harness and the runners give every rank the same batch shape, as vLLM pads its data-parallel ranks).
EpDispatch tp_ep_dispatch(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights, int num_experts, bool nccl = false);
/// The combine of that dispatch: y [world x capacity, hidden] bf16 laid out as d.x (the rows' results) -> [d.tokens,
/// hidden], per token the sum (fp32, rank order) of the rows of every rank it went to.
Tensor tp_ep_combine(const EpDispatch& d, const Tensor& y);

}  // namespace fk::dist
