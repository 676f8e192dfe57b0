// The peer all-reduce kernels (Note [Peer all-reduce], Note [Lamport all-reduce] in fk/kernels/peer_allreduce.cuh) with
// every rank of a world on one GPU: W buffers laid out as PeerAllReduce lays out each rank's, every rank's kernel
// launched through the runtime's own launchers (launch_peer_all_reduce, launch_all_reduce_add_rms_norm) on a stream of
// its own, so the W grids run side by side and meet through the same flags and Lamport slots as across NVLink. What this
// checks on a one-GPU machine: the sums (every rank, bitwise the fp32 rank-order sum), the epochs and halves over a run
// of calls of changing sizes (a stale half, or a Lamport slot left uncleared, gives a wrong sum at a later call), and the
// fused all-reduce + RMSNorm against the unfused pair bitwise. Timing means nothing here: the peers share one GPU's
// memory, not NVLink (fk_bench --world-size on a multi-GPU machine times them).
//
// The expert-parallel all-to-all's own kernels (Note [Expert-parallel all-to-all] in fk/kernels/ep_all_to_all.cuh) run
// the same way: every rank's plan, dispatch, stand-in experts and combine on its own stream, each rank with its own token
// count, checked on the host against the routing.
//
// A kernel that waits for a peer traps after kTimeout (the kernels' own bound) rather than hang the suite; every grid is
// small enough (at most 8 ranks x 32 blocks of 512 threads) to be resident at once on any GPU the tests run on.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

#include <algorithm>
#include <cmath>
#include <random>

#include "fk/kernels/ep_all_to_all.cuh"
#include "fk/kernels/rms_norm.cuh"
#include "fk/runtime/ep_all_to_all.h"
#include "fk/runtime/peer_allreduce_fused.cuh"
#include "fk/tasks/harness.h"
#include "gpu_test_util.h"

namespace fk::testing {
namespace {

namespace par = fk::kernels::peer_ar;
using Algo = fk::dist::PeerAllReduce::Algo;

constexpr uint64_t kTimeoutNs = 5'000'000'000ull;

/// W ranks' buffers of `bytes` on this GPU (the first signal_bytes zeroed) and a stream per rank.
class PeerWorld {
 public:
  PeerWorld(int world, int64_t bytes, int64_t signal_bytes) : world_(world) {
    for (int r = 0; r < world; ++r) {
      char* b = nullptr;
      FK_CUDA_CHECK(cudaMalloc(&b, bytes));
      bufs_.push_back(b);
      FK_CUDA_CHECK(cudaMemset(b, 0, signal_bytes));
      cudaStream_t s = nullptr;
      FK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
    }
  }
  ~PeerWorld() {
    cudaDeviceSynchronize();
    for (char* b : bufs_) cudaFree(b);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }
  PeerWorld(const PeerWorld&) = delete;
  PeerWorld& operator=(const PeerWorld&) = delete;

  int world() const { return world_; }
  char* buffer(int rank) const { return bufs_[rank]; }
  char* const* buffers() const { return bufs_.data(); }
  /// launch(rank, stream) for every rank, then waits for all of them.
  template <class F> void run_all(F&& launch) {
    FK_CUDA_CHECK(cudaDeviceSynchronize());  // the inputs, written on the default stream
    for (int r = 0; r < world_; ++r) launch(r, streams_[r]);
    for (cudaStream_t s : streams_) FK_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  int world_;
  std::vector<char*> bufs_;
  std::vector<cudaStream_t> streams_;
};

/// A PeerWorld laid out as PeerAllReduce lays out each rank's buffer, the Lamport buffers cleared.
class Loopback : public PeerWorld {
 public:
  Loopback(int world, int64_t max_bytes, int64_t lamport_bytes)
      : Loopback(world, fk::dist::peer_buffer_layout(world, max_bytes, lamport_bytes)) {}
  int64_t lamport_bytes() const { return layout_.lamport_bytes; }
  par::Args args(int rank, int64_t n) const {
    return fk::dist::peer_kernel_args(buffers(), world(), rank, n, layout_.half_bytes, layout_.lamport_bytes, kTimeoutNs);
  }

 private:
  Loopback(int world, const fk::dist::PeerBufferLayout& l) : PeerWorld(world, l.total_bytes, par::kSignalBytes), layout_(l) {
    for (int r = 0; r < world; ++r) fk::dist::clear_lamport_buffers(buffer(r), layout_);
    FK_CUDA_CHECK(cudaDeviceSynchronize());
  }
  fk::dist::PeerBufferLayout layout_;
};

/// Loads each kernel's module now (Note [Lazy loading and waiting kernels] in fk/kernels/peer_allreduce.cuh).
template <class... K> void preload_kernels(K... kernels) {
  for (const void* k : {reinterpret_cast<const void*>(kernels)...}) {
    cudaFuncAttributes attr;
    FK_CUDA_CHECK(cudaFuncGetAttributes(&attr, k));
  }
}

struct Inputs {
  const void* p[par::kMaxRanks];
};
/// out = the sum of the ranks' inputs in fp32 in rank order 0..world-1, rounded to T: what every algorithm must give.
template <class T> __global__ void rank_order_sum_kernel(Inputs in, int world, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int p = 0; p < world; ++p) acc += fk::kernels::to_float(static_cast<const T*>(in.p[p])[i]);
    out[i] = fk::kernels::from_float<T>(acc);
  }
}
template <class T> Tensor rank_order_sum(const std::vector<Tensor>& xs) {
  Inputs in{};
  for (size_t p = 0; p < xs.size(); ++p) in.p[p] = xs[p].data_ptr();
  Tensor out = empty(xs[0].sizes(), dtype_of<T>);
  rank_order_sum_kernel<T><<<256, 256>>>(in, static_cast<int>(xs.size()), xs[0].numel(), out.data<T>());
  FK_CHECK_LAUNCH();
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> b(t.numel() * dtype_size(t.dtype()));
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  FK_CUDA_CHECK(cudaMemcpy(b.data(), t.data_ptr(), b.size(), cudaMemcpyDeviceToHost));
  return b;
}
/// The index of the first element where a and b differ bitwise (-1: equal).
int64_t first_difference(const Tensor& a, const Tensor& b) {
  const auto x = bytes_of(a), y = bytes_of(b);
  const size_t es = dtype_size(a.dtype());
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i]) return static_cast<int64_t>(i / es);
  return -1;
}

/// A run of calls of changing sizes (odd tails, a large call before small ones, more calls than halves and Lamport
/// buffers) with fresh inputs each; every rank's output must be the rank-order sum bitwise.
template <class T> void check_all_reduce(int world, Algo algo) {
  const std::vector<int64_t> sizes = {4096, 1, 7, 65536 + 3, 8, 100000, 33, 4096, 9, 262144};
  Loopback lb(world, int64_t(1) << 20, int64_t(1) << 20);
  for (size_t call = 0; call < sizes.size(); ++call) {
    const int64_t n = sizes[call];
    if (algo == Algo::kLamport && n * int64_t(sizeof(T)) > lb.lamport_bytes()) continue;
    std::vector<Tensor> in, out;
    for (int r = 0; r < world; ++r) {
      in.push_back(empty({n}, dtype_of<T>));
      fill_normal(in.back(), 1000 * call + r);
      out.push_back(empty({n}, dtype_of<T>));
    }
    const Tensor want = rank_order_sum<T>(in);
    lb.run_all([&](int r, cudaStream_t s) {
      fk::dist::launch_peer_all_reduce(world, algo, lb.args(r, n), dtype_of<T>, in[r].data_ptr(), out[r].data_ptr(), s);
    });
    for (int r = 0; r < world; ++r)
      ASSERT_EQ(first_difference(out[r], want), -1) << fk::dist::algo_name(algo) << " at " << world << " ranks, call " << call
                                                     << " (" << n << " elements): rank " << r << "'s sum differs";
  }
}

#define FK_LOOPBACK_AR(T, W, ALGO, NAME)                                      \
  TEST(PeerLoopback, AllReduce_##NAME##_##T##_w##W) {                        \
    FK_REQUIRE_GPU();                                                         \
    check_all_reduce<T>(W, Algo::ALGO);                                       \
  }
FK_LOOPBACK_AR(bf16, 2, kLamport, lamport)
FK_LOOPBACK_AR(bf16, 4, kLamport, lamport)
FK_LOOPBACK_AR(bf16, 8, kLamport, lamport)
FK_LOOPBACK_AR(float, 4, kLamport, lamport)
FK_LOOPBACK_AR(f16, 3, kLamport, lamport)
FK_LOOPBACK_AR(bf16, 2, kOneShot, one_shot)
FK_LOOPBACK_AR(bf16, 4, kOneShot, one_shot)
FK_LOOPBACK_AR(float, 8, kOneShot, one_shot)
FK_LOOPBACK_AR(bf16, 4, kTwoShot, two_shot)
FK_LOOPBACK_AR(f16, 8, kTwoShot, two_shot)
FK_LOOPBACK_AR(bf16, 5, kTwoShot, two_shot)

/// The fused all-reduce + residual add + RMSNorm on every rank against the unfused pair (the rank-order sum, then
/// fk::kernels::fused_add_rms_norm), bitwise, over a run of row counts.
template <int kHidden, class T> void check_fused(int world, bool lamport) {
  const std::vector<int64_t> rows_run = {1, 7, 64, 3, 300, 2, 16};
  const float eps = 1e-6f;
  Loopback lb(world, int64_t(8) << 20, int64_t(8) << 20);
  Tensor weight = empty({kHidden}, dtype_of<T>);
  fill_normal(weight, 7, 1.f, 0.1f);
  for (size_t call = 0; call < rows_run.size(); ++call) {
    const int64_t rows = rows_run[call];
    std::vector<Tensor> x, res, out;
    Tensor res0 = empty({rows, kHidden}, dtype_of<T>);
    fill_normal(res0, 500 + call);
    for (int r = 0; r < world; ++r) {
      x.push_back(empty({rows, kHidden}, dtype_of<T>));
      fill_normal(x.back(), 2000 * call + r);
      res.push_back(empty({rows, kHidden}, dtype_of<T>));
      copy_(res.back(), res0);
      out.push_back(empty({rows, kHidden}, dtype_of<T>));
    }
    Tensor want_out = rank_order_sum<T>(x), want_res = empty({rows, kHidden}, dtype_of<T>);
    copy_(want_res, res0);
    fk::kernels::fused_add_rms_norm<kHidden, T>(want_out.data<T>(), kHidden, want_res.data<T>(), kHidden, weight.data<T>(), rows, eps,
                                                nullptr);
    FK_CHECK_LAUNCH();
    lb.run_all([&](int r, cudaStream_t s) {
      fk::dist::launch_all_reduce_add_rms_norm<kHidden, T>(world, lamport, lb.args(r, rows * kHidden), x[r].data<T>(), res[r].data<T>(),
                                                           weight.data<T>(), out[r].data<T>(), rows, eps, s);
    });
    for (int r = 0; r < world; ++r) {
      const char* algo = lamport ? "lamport" : "one_shot";
      ASSERT_EQ(first_difference(res[r], want_res), -1) << algo << " at " << world << " ranks, call " << call << " (" << rows
                                                        << " rows): rank " << r << "'s residual differs from the unfused pair's";
      ASSERT_EQ(first_difference(out[r], want_out), -1) << algo << " at " << world << " ranks, call " << call << " (" << rows
                                                        << " rows): rank " << r << "'s output differs from the unfused pair's";
    }
  }
}

#define FK_LOOPBACK_FUSED(T, H, W, LAMPORT, NAME)                             \
  TEST(PeerLoopback, AllReduceAddRmsNorm_##NAME##_##T##_h##H##_w##W) {       \
    FK_REQUIRE_GPU();                                                         \
    check_fused<H, T>(W, LAMPORT);                                            \
  }
FK_LOOPBACK_FUSED(bf16, 4096, 2, true, lamport)
FK_LOOPBACK_FUSED(bf16, 4096, 4, true, lamport)
FK_LOOPBACK_FUSED(bf16, 7168, 8, true, lamport)
FK_LOOPBACK_FUSED(f16, 5120, 4, true, lamport)
FK_LOOPBACK_FUSED(bf16, 4096, 2, false, one_shot)
FK_LOOPBACK_FUSED(bf16, 2048, 8, false, one_shot)

/// Every rank's tokens through dispatch, the stand-in experts (each received row times sum_j w_j (1 + id_j % 3) over
/// the rank's own experts: fk::kernels::ep::scale_by_experts_kernel) and combine, over a run of calls with different
/// token counts per rank (0 included), routing that skips experts (-1) and sends some tokens to one rank only. Each
/// token's output must be x[t] x sum_j w_j (1 + id_j % 3) over its routed experts (the ranks' partial sums rounded to
/// bf16 on the way): a token lost, sent twice, or combined from the wrong slot is off by far more than the bound.
void check_ep_all_to_all(int world, int num_experts, int hidden, int topk) {
  namespace ek = fk::kernels::ep;
  // CUDA loads a kernel's module at its first launch (lazy loading), and a load may wait for the kernels running on
  // the device: rank 0's dispatch spins until rank 1's arrives, so a first launch of combine behind it would never
  // return (Note [Lazy loading and waiting kernels] in fk/kernels/peer_allreduce.cuh). Loaded here, before any waits.
  preload_kernels(ek::plan_kernel, ek::peer_dispatch_kernel, ek::scale_by_experts_kernel, ek::peer_combine_kernel);
  const int cap = 96, per_rank = num_experts / world;
  const fk::dist::EpAllToAll::Config cfg{num_experts, hidden, topk, cap};
  const auto layout = fk::dist::EpAllToAll::peer_layout(world, cfg);
  PeerWorld peers(world, layout.total, ek::kSignalBytes);
  std::vector<Tensor> slot(world), counts(world), y(world);
  for (int r = 0; r < world; ++r) {
    slot[r] = empty({cap, world}, DType::kI32);
    counts[r] = empty({2 * world}, DType::kI32);
    y[r] = empty({int64_t(world) * cap, hidden}, DType::kBF16);
  }
  std::mt19937 rng(1234u + unsigned(world));
  const std::vector<std::vector<int>> tokens_run = {{5, 96, 0, 17, 1, 64, 33, 2}, {96, 1, 50, 0, 7, 96, 3, 40}, {0, 0, 1, 96, 96, 2, 11, 9}};
  for (size_t call = 0; call < tokens_run.size(); ++call) {
    std::vector<Tensor> x(world), ids(world), w(world), out(world);
    std::vector<std::vector<int32_t>> h_ids(world);
    std::vector<std::vector<float>> h_w(world);
    for (int r = 0; r < world; ++r) {
      const int T = tokens_run[call][r % tokens_run[call].size()];
      x[r] = empty({T, hidden}, DType::kBF16);
      fill_normal(x[r], 100 * call + r);
      h_ids[r].resize(size_t(T) * topk);
      h_w[r].resize(size_t(T) * topk);
      for (int t = 0; t < T; ++t) {
        std::vector<int> e(num_experts);
        for (int i = 0; i < num_experts; ++i) e[i] = i;
        std::shuffle(e.begin(), e.end(), rng);
        if (t % 5 == 1) std::sort(e.begin(), e.begin() + topk);  // often all on one or two ranks
        if (t % 7 == 3) for (int j = 0; j < topk; ++j) e[j] = (e[j] % per_rank) + per_rank * (r % world);  // all on one rank
        for (int j = 0; j < topk; ++j) {
          h_ids[r][size_t(t) * topk + j] = (t % 4 == 2 && j == topk - 1) ? -1 : e[j];
          h_w[r][size_t(t) * topk + j] = std::uniform_real_distribution<float>(0.5f, 1.f)(rng);
        }
      }
      ids[r] = empty({T, topk}, DType::kI32);
      w[r] = empty({T, topk}, DType::kF32);
      if (T > 0) {
        FK_CUDA_CHECK(cudaMemcpy(ids[r].data_ptr(), h_ids[r].data(), h_ids[r].size() * 4, cudaMemcpyHostToDevice));
        FK_CUDA_CHECK(cudaMemcpy(w[r].data_ptr(), h_w[r].data(), h_w[r].size() * 4, cudaMemcpyHostToDevice));
      }
      out[r] = empty({T, hidden}, DType::kBF16);
    }
    peers.run_all([&](int r, cudaStream_t s) {
      const ek::PeerArgs a = fk::dist::EpAllToAll::peer_args(peers.buffers(), r, world, cfg, kTimeoutNs);
      const int64_t T = x[r].size(0);
      int32_t* sl = slot[r].data<int32_t>();
      int32_t* sc = counts[r].data<int32_t>();
      ek::plan_kernel<<<1, ek::kPlanThreads, 0, s>>>(ids[r].data<int32_t>(), T, topk, per_rank, num_experts, world, sl, sc);
      ek::peer_dispatch_kernel<<<ek::kGrid, ek::kThreads, 0, s>>>(a, x[r].data<__nv_bfloat16>(), ids[r].data<int32_t>(), w[r].data<float>(),
                                                                  T, sl, sc);
      const char* own = peers.buffer(r);
      ek::scale_by_experts_kernel<<<dim3(32, unsigned(world)), 256, 0, s>>>(
          reinterpret_cast<const __nv_bfloat16*>(own + layout.recv_x), reinterpret_cast<const int32_t*>(own + layout.recv_ids),
          reinterpret_cast<const float*>(own + layout.recv_w), reinterpret_cast<const ek::Signals*>(own)->counts, cap, hidden, topk,
          r * per_rank, per_rank, y[r].data<__nv_bfloat16>());
      ek::peer_combine_kernel<<<ek::kGrid, ek::kThreads, 0, s>>>(a, y[r].data<__nv_bfloat16>(), T, sl, out[r].data<__nv_bfloat16>());
      FK_CHECK_LAUNCH();
    });
    for (int r = 0; r < world; ++r) {
      const int64_t T = x[r].size(0);
      if (T == 0) continue;
      const std::vector<float> hx = to_host<float>(fk::tasks::to_f32(x[r])), ho = to_host<float>(fk::tasks::to_f32(out[r]));
      for (int64_t t = 0; t < T; ++t) {
        double f = 0;
        for (int j = 0; j < topk; ++j) {
          const int e = h_ids[r][size_t(t) * topk + j];
          if (e >= 0) f += h_w[r][size_t(t) * topk + j] * (1 + e % 3);
        }
        for (int i = 0; i < hidden; ++i) {
          const double want = f * hx[size_t(t) * hidden + i], got = ho[size_t(t) * hidden + i];
          // every partial row rounded to bf16 (at most 2^-8 of it; the partials are all of one sign), then the sum once
          // more: 2 x 2^-8 of the whole. An expert's share lost or doubled is at least 0.5 / 24 of it (weights 0.5-1,
          // factors 1-3, top-8 at most): 5 x 2^-8.
          const double bound = 2.5 * std::ldexp(1.0, -8) * f * std::fabs(hx[size_t(t) * hidden + i]) + 1e-6;
          ASSERT_LE(std::fabs(got - want), bound) << world << " ranks, call " << call << ": rank " << r << " token " << t << " of " << T
                                                  << " element " << i << ": got " << got << ", want " << want;
        }
      }
    }
  }
}

TEST(PeerLoopback, EpDispatchCombine_e16_top4_h1024_w2) { FK_REQUIRE_GPU(); check_ep_all_to_all(2, 16, 1024, 4); }
TEST(PeerLoopback, EpDispatchCombine_e64_top8_h7168_w4) { FK_REQUIRE_GPU(); check_ep_all_to_all(4, 64, 7168, 8); }
TEST(PeerLoopback, EpDispatchCombine_e256_top8_h2048_w8) { FK_REQUIRE_GPU(); check_ep_all_to_all(8, 256, 2048, 8); }

}  // namespace
}  // namespace fk::testing
