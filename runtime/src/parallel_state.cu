// The job's process groups (fk/runtime/parallel_state.h, Note [Group all-reduce choice]).
#include "fk/runtime/parallel_state.h"

#include <stdexcept>

#include "fk/runtime/cuda_check.h"

namespace fk::dist {
namespace {

GroupCoordinator* g_tp_group = nullptr;

}  // namespace

GroupCoordinator::GroupCoordinator(TcpStore& store, std::chrono::milliseconds timeout, bool use_peer, int64_t peer_max_bytes)
    : comm_(std::make_unique<Communicator>(store, timeout)) {
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

}  // namespace fk::dist
