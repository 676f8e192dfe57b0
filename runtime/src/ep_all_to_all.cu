// Expert-parallel all-to-all (fk/runtime/ep_all_to_all.h; Note [Expert-parallel all-to-all] in
// fk/kernels/ep_all_to_all.cuh).
#include "fk/runtime/ep_all_to_all.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "fk/kernels/ep_all_to_all.cuh"
#include "fk/runtime/cuda_check.h"

namespace fk::dist {
namespace {

namespace ek = fk::kernels::ep;

/// EpAllToAll objects made by this process so far (the n-th one's store keys; the same order on every rank).
int g_generation = 0;

/// The NCCL baseline's pack and reduce kernels: one block per token, at most this many blocks.
constexpr int64_t kMaxStagingBlocks = 132;

static_assert(ek::kMaxRanks == PeerMemory::kMaxRanks, "the EP kernels address every rank's peer buffer");

}  // namespace

const char* EpAllToAll::backend_name(Backend b) { return b == Backend::kPeer ? "peer" : "nccl"; }

EpAllToAll::EpAllToAll(TcpStore& store, Communicator& comm, const Config& cfg, Backend backend, std::chrono::milliseconds timeout)
    : comm_(comm), cfg_(cfg), backend_(backend), rank_(comm.rank()), world_(comm.world_size()),
      timeout_ns_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count())) {
  const std::string who = std::string("ep all-to-all (") + backend_name(backend) + ", rank " + std::to_string(rank_) + " of " +
                          std::to_string(world_) + ")";
  if (world_ > ek::kMaxRanks) throw std::runtime_error(who + ": serves up to " + std::to_string(ek::kMaxRanks) + " ranks");
  if (cfg.num_experts <= 0 || cfg.num_experts % world_ != 0)
    throw std::runtime_error(who + ": num_experts " + std::to_string(cfg.num_experts) + " must be a positive multiple of the " +
                             std::to_string(world_) + " ranks");
  if (cfg.hidden <= 0 || cfg.hidden % 8 != 0) throw std::runtime_error(who + ": hidden " + std::to_string(cfg.hidden) + " must be a positive multiple of 8");
  if (cfg.topk < 1 || cfg.topk > 32) throw std::runtime_error(who + ": topk " + std::to_string(cfg.topk) + " must be 1 to 32");
  if (cfg.max_tokens < 1) throw std::runtime_error(who + ": max_tokens " + std::to_string(cfg.max_tokens) + " must be positive");
  const int64_t cap = cfg.max_tokens, rows = int64_t(world_) * cap, H = cfg.hidden, K = cfg.topk;
  slot_ = empty({cap, world_}, DType::kI32);
  counts_dev_ = empty({2 * world_}, DType::kI32);
  if (backend == Backend::kPeer) {
    const PeerLayout l = peer_layout(world_, cfg);
    mem_ = std::make_unique<PeerMemory>(store, "fk/ep_a2a/" + std::to_string(g_generation++) + "/", who, l.total, ek::kSignalBytes);
    char* own = mem_->own();
    out_.x = Tensor::from_blob(own + l.recv_x, DType::kBF16, {rows, H});
    out_.topk_ids = Tensor::from_blob(own + l.recv_ids, DType::kI32, {rows, K});
    out_.topk_weights = Tensor::from_blob(own + l.recv_w, DType::kF32, {rows, K});
    out_.counts = reinterpret_cast<const ek::Signals*>(own)->counts;
  } else {
    ++g_generation;  // the same count on every rank whatever the backend
    send_x_ = empty({rows, H}, DType::kBF16);
    send_ids_ = empty({rows, K}, DType::kI32);
    send_w_ = empty({rows, K}, DType::kF32);
    recv_x_ = empty({rows, H}, DType::kBF16);
    recv_ids_ = empty({rows, K}, DType::kI32);
    recv_w_ = empty({rows, K}, DType::kF32);
    comb_x_ = empty({rows, H}, DType::kBF16);
    out_.x = recv_x_;
    out_.topk_ids = recv_ids_;
    out_.topk_weights = recv_w_;
    out_.counts = counts_dev_.data<int32_t>() + world_;
    send_counts_.assign(size_t(world_), 0);
    recv_counts_.assign(size_t(world_), 0);
  }
  out_.capacity = cap;
}

EpAllToAll::~EpAllToAll() = default;

EpAllToAll::PeerLayout EpAllToAll::peer_layout(int world, const Config& cfg) {
  const int64_t rows = int64_t(world) * cfg.max_tokens, H = cfg.hidden, K = cfg.topk;
  PeerLayout l;
  l.recv_x = ek::kSignalBytes;
  l.recv_ids = align_up(l.recv_x + rows * H * 2, 256);
  l.recv_w = align_up(l.recv_ids + rows * K * 4, 256);
  l.comb_x = align_up(l.recv_w + rows * K * 4, 256);
  l.total = l.comb_x + rows * H * 2;
  return l;
}

fk::kernels::ep::PeerArgs EpAllToAll::peer_args(char* const* bases, int rank, int world, const Config& cfg, uint64_t timeout_ns) {
  const PeerLayout l = peer_layout(world, cfg);
  ek::PeerArgs a{};
  for (int p = 0; p < world; ++p) a.base[p] = bases[p];
  a.rank = rank;
  a.world = world;
  a.capacity = cfg.max_tokens;
  a.hidden = cfg.hidden;
  a.topk = cfg.topk;
  a.off_recv_x = l.recv_x;
  a.off_recv_ids = l.recv_ids;
  a.off_recv_w = l.recv_w;
  a.off_comb_x = l.comb_x;
  a.timeout_ns = timeout_ns;
  return a;
}

fk::kernels::ep::PeerArgs EpAllToAll::peer_args() const { return peer_args(mem_->buffers(), rank_, world_, cfg_, timeout_ns_); }

const EpAllToAll::Dispatched& EpAllToAll::dispatch(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights) {
  const int64_t T = x.dim() == 2 ? x.size(0) : -1, H = cfg_.hidden, K = cfg_.topk, cap = cfg_.max_tokens;
  auto bad = [&](const std::string& what) {
    return std::runtime_error("ep all-to-all dispatch (rank " + std::to_string(rank_) + "): " + what);
  };
  if (T < 0 || x.size(1) != H || x.dtype() != DType::kBF16 || !x.is_contiguous())
    throw bad("x " + x.str() + ": a contiguous bf16 [tokens, " + std::to_string(H) + "] expected");
  if (T > cap) throw bad(std::to_string(T) + " tokens, above max_tokens " + std::to_string(cap));
  if (topk_ids.dim() != 2 || topk_ids.size(0) != T || topk_ids.size(1) != K || topk_ids.dtype() != DType::kI32 || !topk_ids.is_contiguous())
    throw bad("topk_ids " + topk_ids.str() + ": a contiguous i32 [" + std::to_string(T) + ", " + std::to_string(K) + "] expected");
  if (topk_weights.dim() != 2 || topk_weights.size(0) != T || topk_weights.size(1) != K || topk_weights.dtype() != DType::kF32 ||
      !topk_weights.is_contiguous())
    throw bad("topk_weights " + topk_weights.str() + ": a contiguous f32 [" + std::to_string(T) + ", " + std::to_string(K) + "] expected");
  const cudaStream_t s = current_stream();
  tokens_ = T;
  int32_t* slot = slot_.data<int32_t>();
  int32_t* send_count = counts_dev_.data<int32_t>();
  ek::plan_kernel<<<1, ek::kPlanThreads, 0, s>>>(topk_ids.data<int32_t>(), T, int(K), experts_per_rank(), cfg_.num_experts, world_, slot,
                                                 send_count);
  FK_CHECK_LAUNCH();
  const auto* xp = x.data<__nv_bfloat16>();
  if (backend_ == Backend::kPeer) {
    const ek::PeerArgs a = peer_args();
    ek::peer_dispatch_kernel<<<ek::kGrid, ek::kThreads, 0, s>>>(a, xp, topk_ids.data<int32_t>(), topk_weights.data<float>(), T, slot, send_count);
    FK_CHECK_LAUNCH();
    return out_;
  }
  // NCCL: pack by destination, exchange the counts, bring them to the host, move the rows.
  ek::RowsAt to{};
  for (int d = 0; d < world_; ++d) {
    to.x[d] = send_x_.data<__nv_bfloat16>();
    to.ids[d] = send_ids_.data<int32_t>();
    to.w[d] = send_w_.data<float>();
    to.first_row[d] = int64_t(d) * cap;
  }
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(T, kMaxStagingBlocks)));
  if (T > 0) {
    ek::pack_kernel<<<grid, ek::kThreads, 0, s>>>(to, xp, topk_ids.data<int32_t>(), topk_weights.data<float>(), T, int(H), int(K), world_, slot);
    FK_CHECK_LAUNCH();
  }
  std::vector<Communicator::P2P> ops;
  for (int p = 0; p < world_; ++p) {
    ops.push_back({true, p, send_count + p, 4});
    ops.push_back({false, p, send_count + world_ + p, 4});
  }
  comm_.send_recv(ops);
  std::vector<int32_t> host(size_t(2 * world_));
  FK_CUDA_CHECK(cudaMemcpyAsync(host.data(), send_count, host.size() * 4, cudaMemcpyDeviceToHost, s));
  comm_.synchronize(s);
  ops.clear();
  for (int p = 0; p < world_; ++p) {
    send_counts_[size_t(p)] = host[size_t(p)];
    recv_counts_[size_t(p)] = host[size_t(world_ + p)];
    const int64_t so = int64_t(p) * cap, n_s = send_counts_[size_t(p)], n_r = recv_counts_[size_t(p)];
    if (n_s > cap || n_r > cap) throw bad("rank " + std::to_string(p) + " exchanged " + std::to_string(std::max(n_s, n_r)) + " rows, above max_tokens");
    ops.push_back({true, p, send_x_.data<__nv_bfloat16>() + so * H, n_s * H * 2});
    ops.push_back({true, p, send_ids_.data<int32_t>() + so * K, n_s * K * 4});
    ops.push_back({true, p, send_w_.data<float>() + so * K, n_s * K * 4});
    ops.push_back({false, p, recv_x_.data<__nv_bfloat16>() + so * H, n_r * H * 2});
    ops.push_back({false, p, recv_ids_.data<int32_t>() + so * K, n_r * K * 4});
    ops.push_back({false, p, recv_w_.data<float>() + so * K, n_r * K * 4});
  }
  comm_.send_recv(ops);
  return out_;
}

void EpAllToAll::combine(const Tensor& y, Tensor& out) {
  const int64_t H = cfg_.hidden, cap = cfg_.max_tokens, rows = int64_t(world_) * cap;
  auto bad = [&](const std::string& what) {
    return std::runtime_error("ep all-to-all combine (rank " + std::to_string(rank_) + "): " + what);
  };
  if (tokens_ < 0) throw bad("no dispatch before it");
  if (y.dim() != 2 || y.size(0) != rows || y.size(1) != H || y.dtype() != DType::kBF16 || !y.is_contiguous())
    throw bad("y " + y.str() + ": a contiguous bf16 [" + std::to_string(rows) + ", " + std::to_string(H) + "] expected (laid out as the dispatched rows)");
  if (out.dim() != 2 || out.size(0) != tokens_ || out.size(1) != H || out.dtype() != DType::kBF16 || !out.is_contiguous())
    throw bad("out " + out.str() + ": a contiguous bf16 [" + std::to_string(tokens_) + ", " + std::to_string(H) + "] expected");
  const cudaStream_t s = current_stream();
  const int32_t* slot = slot_.data<int32_t>();
  if (backend_ == Backend::kPeer) {
    const ek::PeerArgs a = peer_args();
    ek::peer_combine_kernel<<<ek::kGrid, ek::kThreads, 0, s>>>(a, y.data<__nv_bfloat16>(), tokens_, slot, out.data<__nv_bfloat16>());
    FK_CHECK_LAUNCH();
    return;
  }
  std::vector<Communicator::P2P> ops;
  for (int p = 0; p < world_; ++p) {
    const int64_t so = int64_t(p) * cap;
    ops.push_back({true, p, const_cast<__nv_bfloat16*>(y.data<__nv_bfloat16>()) + so * H, int64_t(recv_counts_[size_t(p)]) * H * 2});
    ops.push_back({false, p, comb_x_.data<__nv_bfloat16>() + so * H, int64_t(send_counts_[size_t(p)]) * H * 2});
  }
  comm_.send_recv(ops);
  if (tokens_ > 0) {
    const int grid = static_cast<int>(std::min<int64_t>(tokens_, kMaxStagingBlocks));
    ek::reduce_kernel<<<grid, ek::kThreads, 0, s>>>(comb_x_.data<__nv_bfloat16>(), cap, slot, tokens_, int(H), world_, out.data<__nv_bfloat16>());
    FK_CHECK_LAUNCH();
  }
}

}  // namespace fk::dist
