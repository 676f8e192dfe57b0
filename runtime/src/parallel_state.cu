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

EpAllToAll& GroupCoordinator::ep_all_to_all(int num_experts, int hidden, int topk, int64_t max_tokens, bool nccl) {
  std::unique_ptr<EpAllToAll>& a = ep_[{num_experts, hidden, topk, max_tokens, nccl}];
  if (!a) {
    const EpAllToAll::Backend b = peer_ && !nccl ? EpAllToAll::Backend::kPeer : EpAllToAll::Backend::kNccl;
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

Tensor GroupCoordinator::all_gather_first_dim(const Tensor& input) {
  FK_CHECK(input.dim() >= 1 && input.is_contiguous(), "GroupCoordinator::all_gather_first_dim: a contiguous tensor, got " + input.str());
  Shape shape = input.sizes();
  shape[0] *= world_size();
  Tensor out = empty(shape, input.dtype());
  if (world_size() == 1) {
    copy_(out, input);
    return out;
  }
  Tensor flat_out = out.view({out.numel()});
  comm_->all_gather(input.view({input.numel()}), flat_out);  // rank q's rows land at [q rows, (q + 1) rows)
  return out;
}

OverlappedLinear* GroupCoordinator::overlapped_linear(int64_t max_tokens, int64_t gather_k, int64_t scatter_n) {
  if (!peer_ || world_size() < 2) return nullptr;
  std::unique_ptr<OverlappedLinear>& o = overlapped_[{max_tokens, gather_k, scatter_n}];
  if (!o) o = std::make_unique<OverlappedLinear>(store_, *comm_, OverlappedLinear::Config{max_tokens, gather_k, scatter_n}, timeout_);
  return o.get();
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

Tensor tp_all_gather_first_dim(const Tensor& t) { return tp_group().all_gather_first_dim(t); }

Tensor tp_reduce_scatter_first_dim(const Tensor& t) { return tp_group().reduce_scatter_first_dim(t); }

Tensor tp_matmul_reduce_scatter(const Tensor& x, const Tensor& w) {
  GroupCoordinator& g = tp_group();
  FK_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && x.size(0) % g.world_size() == 0,
           "tp_matmul_reduce_scatter: x [T, k] with T a multiple of the " + std::to_string(g.world_size()) + " ranks and w [n, k], got " +
               x.str() + ", " + w.str());
  OverlappedLinear* o = g.overlapped_linear(doubling_bucket(x.size(0), int64_t(g.world_size()) * 8), 0, w.size(0));
  if (o == nullptr) return Tensor();
  Tensor y = empty({x.size(0) / g.world_size(), w.size(0)}, x.dtype());
  o->matmul_reduce_scatter(x, w, y);
  return y;
}

Tensor tp_all_gather_matmul(const Tensor& x_shard, const Tensor& w) {
  GroupCoordinator& g = tp_group();
  FK_CHECK(x_shard.dim() == 2 && w.dim() == 2 && x_shard.size(1) == w.size(1),
           "tp_all_gather_matmul: x_shard [T / world, k] and w [n, k], got " + x_shard.str() + ", " + w.str());
  const int64_t rows = x_shard.size(0) * g.world_size();
  OverlappedLinear* o = g.overlapped_linear(doubling_bucket(rows, int64_t(g.world_size()) * 8), w.size(1), 0);
  if (o == nullptr) return Tensor();
  Tensor y = empty({rows, w.size(0)}, x_shard.dtype());
  o->all_gather_matmul(x_shard, w, y);
  return y;
}

// Note [Data-parallel expert MoE] (fk/tasks/moe.h).
EpDispatch tp_ep_dispatch(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights, int num_experts, bool nccl) {
  GroupCoordinator& g = tp_group();
  FK_CHECK(x.dim() == 2 && x.dtype() == DType::kBF16 && x.is_contiguous(),
           "expert-parallel dispatch: contiguous bf16 hidden states [tokens, hidden], got " + x.str());
  FK_CHECK(topk_ids.dim() == 2 && topk_ids.size(0) == x.size(0) && topk_weights.sizes() == topk_ids.sizes(),
           "expert-parallel dispatch: topk_ids " + topk_ids.str() + " and topk_weights " + topk_weights.str() + " for hidden states " + x.str());
  const int64_t tokens = x.size(0);
  // One all-to-all per power-of-two bucket of the token count (at least 8): every rank picks the same one at the same
  // call as long as their counts share a bucket, and the experts run over world x bucket rows, not a fixed maximum.
  const int64_t cap = doubling_bucket(tokens, 8);
  const int topk = static_cast<int>(topk_ids.size(1)), world = g.world_size();
  FK_CHECK(num_experts % world == 0, "expert-parallel dispatch: " + std::to_string(num_experts) + " experts over " + std::to_string(world) + " ranks");
  EpAllToAll& a2a = g.ep_all_to_all(num_experts, static_cast<int>(x.size(1)), topk, cap, nccl);
  const EpAllToAll::Dispatched& d = a2a.dispatch(x, topk_ids, topk_weights);
  EpDispatch out;
  out.x = d.x;
  out.topk_ids = d.topk_ids;
  out.topk_weights = d.topk_weights;
  out.counts = d.counts;
  out.capacity = d.capacity;
  out.world = world;
  out.first_expert = a2a.first_expert();
  out.experts_per_rank = a2a.experts_per_rank();
  out.tokens = tokens;
  out.route = &a2a;
  return out;
}

Tensor tp_ep_combine(const EpDispatch& d, const Tensor& y) {
  FK_CHECK(d.route != nullptr, "expert-parallel combine: a handle from tp_ep_dispatch, got none");
  FK_CHECK(y.dim() == 2 && y.size(0) == d.x.size(0) && y.size(1) == d.x.size(1) && y.dtype() == DType::kBF16 && y.is_contiguous(),
           "expert-parallel combine: the rows' results must be laid out as the dispatched rows " + d.x.str() + ", got " + y.str());
  Tensor out = empty({d.tokens, d.x.size(1)}, DType::kBF16);
  d.route->combine(y, out);
  return out;
}

}  // namespace fk::dist
