// The job's process groups (fk/runtime/parallel_state.h, Note [Group all-reduce choice]).
#include "fk/runtime/parallel_state.h"

#include <stdexcept>

#include "fk/kernels/moe_routing.cuh"
#include "fk/runtime/cuda_check.h"

namespace fk::dist {
namespace {

GroupCoordinator* g_tp_group = nullptr;

}  // namespace

GroupCoordinator::GroupCoordinator(TcpStore& store, std::chrono::milliseconds timeout, bool use_peer, int64_t peer_max_bytes)
    : store_(store), timeout_(timeout), comm_(std::make_unique<Communicator>(store, timeout)) {
  if (!use_peer) peer_why_ = "not asked for (NCCL only)";
  else if (comm_->world_size() < 2) peer_why_ = "a single rank";
  else {
    // Every rank constructs it or every rank fails (the constructor agrees through the store).
    try {
      peer_ = std::make_unique<PeerAllReduce>(store, peer_max_bytes, timeout);
    } catch (const std::exception& e) {
      peer_why_ = e.what();
    }
  }
}

GroupCoordinator::~GroupCoordinator() {
  if (g_tp_group == this) g_tp_group = nullptr;
}

EpAllToAll& GroupCoordinator::ep_all_to_all(int num_experts, int hidden, int topk, int64_t max_tokens) {
  std::unique_ptr<EpAllToAll>& a = ep_[{num_experts, hidden, topk, max_tokens}];
  if (!a) {
    const EpAllToAll::Backend b = peer_ ? EpAllToAll::Backend::kPeer : EpAllToAll::Backend::kNccl;
    a = std::make_unique<EpAllToAll>(store_, *comm_, EpAllToAll::Config{num_experts, hidden, topk, static_cast<int>(max_tokens)}, b, timeout_);
  }
  return *a;
}

namespace {
int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }
}  // namespace

void GroupCoordinator::all_reduce_(Tensor& t) {
  if (world_size() == 1) return;
  if (PeerAllReduce* p = peer_for(bytes_of(t)); p && p->unsupported(t).empty()) p->all_reduce_(t);
  else comm_->all_reduce_(t);
}

Tensor GroupCoordinator::all_reduce(const Tensor& input) {
  FK_CHECK(input.is_contiguous(), "GroupCoordinator::all_reduce: a contiguous tensor, got " + input.str());
  Tensor out = empty_like(input);
  if (world_size() == 1) {
    copy_(out, input);
    return out;
  }
  if (PeerAllReduce* p = peer_for(bytes_of(input)); p && p->unsupported(input).empty() && p->unsupported(out).empty()) {
    p->all_reduce(input, out);
    return out;
  }
  comm_->all_reduce(input, out);  // out of place: no copy first
  return out;
}

Tensor GroupCoordinator::all_gather_last_dim(const Tensor& input) {
  FK_CHECK(input.dim() == 2 && input.is_contiguous(), "GroupCoordinator::all_gather_last_dim: a contiguous [rows, n] tensor, got " + input.str());
  const int64_t w = world_size(), rows = input.size(0), n = input.size(1);
  Tensor out = empty({rows, w * n}, input.dtype());
  if (w == 1) {
    copy_(out, input);
    return out;
  }
  // NCCL gathers whole buffers in rank order ([w, rows, n]); the ranks' columns are then interleaved.
  Tensor gathered = empty({w, rows, n}, input.dtype());
  Tensor flat = gathered.view({w * rows * n});
  comm_->all_gather(input.view({rows * n}), flat);
  copy_strided_(out.as_strided({w, rows, n}, {n, w * n, 1}), gathered);
  return out;
}

Tensor GroupCoordinator::reduce_scatter_first_dim(const Tensor& input) {
  FK_CHECK(input.dim() >= 1 && input.is_contiguous() && input.size(0) % world_size() == 0,
           "GroupCoordinator::reduce_scatter_first_dim: a contiguous tensor whose rows divide by the world size (" +
               std::to_string(world_size()) + "), got " + input.str());
  Shape shape = input.sizes();
  shape[0] /= world_size();
  Tensor out = empty(shape, input.dtype());
  if (world_size() == 1) {
    copy_(out, input);
    return out;
  }
  Tensor flat_out = out.view({out.numel()});
  comm_->reduce_scatter(input.view({input.numel()}), flat_out);
  return out;
}

GroupCoordinator& tp_group() {
  if (g_tp_group == nullptr)
    throw std::runtime_error(
        "this task is sharded for tensor parallelism but the process has no tensor-parallel group: start one process per GPU "
        "(fk_launch --nproc N, torchrun or mpirun; docs/multi-gpu.md) with a runner that installs the group");
  return *g_tp_group;
}

void set_tp_group(GroupCoordinator* group) { g_tp_group = group; }

int tp_world_size() { return g_tp_group == nullptr ? 1 : g_tp_group->world_size(); }

int tp_rank() { return tp_group().rank(); }

void tp_all_reduce_(Tensor& t) { tp_group().all_reduce_(t); }

Tensor tp_all_reduce(const Tensor& t) { return tp_group().all_reduce(t); }

PeerAllReduce* tp_peer_all_reduce_for(int64_t bytes) { return tp_group().peer_for(bytes); }

Tensor tp_nccl_all_reduce(const Tensor& t) {
  FK_CHECK(t.is_contiguous(), "tp_nccl_all_reduce: a contiguous tensor, got " + t.str());
  Tensor out = empty_like(t);
  tp_group().nccl().all_reduce(t, out);
  return out;
}

Tensor tp_all_gather_last_dim(const Tensor& t) { return tp_group().all_gather_last_dim(t); }

// Note [Data-parallel expert MoE] (fk/tasks/moe.h).
Tensor tp_ep_moe(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids, int num_experts, const EpExperts& experts) {
  GroupCoordinator& g = tp_group();
  FK_CHECK(x.dim() == 2 && x.dtype() == DType::kBF16 && x.is_contiguous(),
           "expert-parallel MoE (data-parallel layout): contiguous bf16 hidden states [tokens, hidden], got " + x.str());
  FK_CHECK(topk_ids.dim() == 2 && topk_ids.size(0) == x.size(0), "expert-parallel MoE: topk_ids " + topk_ids.str() + " for hidden states " + x.str());
  const int64_t tokens = x.size(0);
  // One all-to-all per power-of-two bucket of the token count (at least 8): every rank picks the same one at the same
  // call as long as their counts share a bucket, and the experts run over world x bucket rows, not a fixed maximum.
  int64_t cap = 8;
  while (cap < tokens) cap *= 2;
  const int topk = static_cast<int>(topk_ids.size(1)), world = g.world_size();
  FK_CHECK(num_experts % world == 0, "expert-parallel MoE: " + std::to_string(num_experts) + " experts over " + std::to_string(world) + " ranks");
  EpAllToAll& a2a = g.ep_all_to_all(num_experts, static_cast<int>(x.size(1)), topk, cap);
  const EpAllToAll::Dispatched& d = a2a.dispatch(x, topk_ids, topk_weights);
  Tensor local = empty(d.topk_ids.sizes(), DType::kI32);
  fk::kernels::ep_localize_received_ids(local.data<int32_t>(), d.topk_ids.data<int32_t>(), d.counts, world, d.capacity, topk,
                                        a2a.first_expert(), a2a.experts_per_rank(), current_stream());
  FK_CHECK_LAUNCH();
  const Tensor y = experts(d.x, d.topk_weights, local);
  FK_CHECK(y.dim() == 2 && y.size(0) == d.x.size(0) && y.size(1) == x.size(1) && y.dtype() == DType::kBF16 && y.is_contiguous(),
           "expert-parallel MoE: the experts returned " + y.str() + " for the dispatched rows " + d.x.str());
  Tensor out = empty({tokens, x.size(1)}, DType::kBF16);
  a2a.combine(y, out);
  return out;
}

}  // namespace fk::dist
