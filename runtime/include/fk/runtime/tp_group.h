// The process's tensor-parallel group, as generated tasks reach it (issue 23; Note [Parallel layouts]
// in generator/include/fk/gen/config.h): declarations only, without NCCL's headers (task headers
// include this, and the candidate checker parses them with its CUDA shim); fk/runtime/parallel_state.h
// defines the group.
#pragma once

#include <functional>

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

/// A rank's experts on the rows an expert-parallel dispatch delivered to it: x [R, hidden], topk_weights f32 [R, topk],
/// local_ids i32 [R, topk] (this rank's experts renumbered from 0, every other slot -1, every slot of a stale row -1)
/// -> [R, hidden]: per row the sum of its local slots' weighted expert outputs (0 for rows with none).
using EpExperts = std::function<Tensor(const Tensor& x, const Tensor& topk_weights, const Tensor& local_ids)>;
/// The routed experts of an MoE block at a data-parallel layout (Note [Data-parallel expert MoE] in fk/tasks/moe.h): this
/// rank's tokens x [T, hidden] bf16 with their routing (topk_weights f32 [T, topk], topk_ids i32 [T, topk], global ids
/// over num_experts) dispatched to the ranks of their experts (the group's fk::dist::EpAllToAll: own peer-memory
/// kernels on one host, NCCL send / recv otherwise), `experts` run there, the rows combined back: [T, hidden], per token
/// the weighted sum over all its experts. Every rank of the group calls it, in the same order, with token counts in the
/// same power-of-two bucket (the harness and the runners give every rank the same batch shape, as vLLM pads its
/// data-parallel ranks to one count).
Tensor tp_ep_moe(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids, int num_experts, const EpExperts& experts);

}  // namespace fk::dist
