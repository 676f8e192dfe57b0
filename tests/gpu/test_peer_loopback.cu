// The peer all-reduce kernels (Note [Peer all-reduce], Note [Lamport all-reduce] in fk/kernels/peer_allreduce.cuh) with
// every rank of a world on one GPU: W buffers laid out as PeerAllReduce lays out each rank's, every rank's kernel
// launched through the runtime's own launchers (launch_peer_all_reduce, launch_all_reduce_add_rms_norm) on a stream of
// its own, so the W grids run side by side and meet through the same flags and Lamport slots as across NVLink. What this
// checks on a one-GPU machine: the sums (every rank, bitwise the fp32 rank-order sum), the epochs and halves over a run
// of calls of changing sizes (a stale half, or a Lamport slot left uncleared, gives a wrong sum at a later call), and the
// fused all-reduce + RMSNorm against the unfused pair bitwise. Timing means nothing here: the peers share one GPU's
// memory, not NVLink (fk_bench --world-size on a multi-GPU machine times them).
//
// A kernel that waits for a peer traps after kTimeout (the kernels' own bound) rather than hang the suite; every grid is
// small enough (at most 8 ranks x 32 blocks of 512 threads) to be resident at once on any GPU the tests run on.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <vector>

#include "fk/runtime/peer_allreduce_fused.cuh"
#include "fk/kernels/rms_norm.cuh"
#include "gpu_test_util.h"

namespace fk::testing {
namespace {

namespace par = fk::kernels::peer_ar;
using Algo = fk::dist::PeerAllReduce::Algo;

constexpr uint64_t kTimeoutNs = 5'000'000'000ull;

/// W ranks' buffers on this GPU and a stream per rank.
class Loopback {
 public:
  Loopback(int world, int64_t max_bytes, int64_t lamport_bytes)
      : world_(world), layout_(fk::dist::peer_buffer_layout(world, max_bytes, lamport_bytes)) {
    for (int r = 0; r < world; ++r) {
      char* b = nullptr;
      FK_CUDA_CHECK(cudaMalloc(&b, layout_.total_bytes));
      FK_CUDA_CHECK(cudaMemset(b, 0, par::kSignalBytes));
      fk::dist::clear_lamport_buffers(b, layout_);
      bufs_.push_back(b);
      cudaStream_t s = nullptr;
      FK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
    }
    FK_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~Loopback() {
    cudaDeviceSynchronize();
    for (char* b : bufs_) cudaFree(b);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }
  Loopback(const Loopback&) = delete;
  Loopback& operator=(const Loopback&) = delete;

  int64_t lamport_bytes() const { return layout_.lamport_bytes; }
  par::Args args(int rank, int64_t n) const {
    par::Args a{};
    for (int p = 0; p < world_; ++p) a.base[p] = bufs_[p];
    a.rank = rank;
    a.n = n;
    a.half_bytes = layout_.half_bytes;
    a.lamport_bytes = layout_.lamport_bytes;
    a.timeout_ns = kTimeoutNs;
    return a;
  }
  /// launch(rank, stream) for every rank, then waits for all of them.
  template <class F> void run_all(F&& launch) {
    FK_CUDA_CHECK(cudaDeviceSynchronize());  // the inputs, written on the default stream
    for (int r = 0; r < world_; ++r) launch(r, streams_[r]);
    for (cudaStream_t s : streams_) FK_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  int world_;
  fk::dist::PeerBufferLayout layout_;
  std::vector<char*> bufs_;
  std::vector<cudaStream_t> streams_;
};

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

}  // namespace
}  // namespace fk::testing
