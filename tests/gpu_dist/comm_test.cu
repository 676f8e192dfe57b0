// The job's NCCL communicator (fk/runtime/comm.h, Note [Communicator]) on 2 ranks started by
// fk_launch (tests/CMakeLists.txt: dist_comm_2ranks, dist_killed_rank_2ranks): all-reduce,
// all-gather and reduce-scatter against values computed by hand; an aborting rank ends its peer's
// wait with the abort's reason; a rank killed inside a collective is ended by the launcher. The own
// all-reduce over peer memory (fk/runtime/peer_allreduce.h): bitwise against the host's sum in rank
// order, both algorithms, every dtype, odd sizes, in and out of place, replayed from a CUDA graph.
// The expert-parallel dispatch + combine (fk/runtime/ep_all_to_all.h), both backends, against the
// host's per-token sums and bitwise against each other, replayed from a CUDA graph (own backend).
// The overlapped linears (fk/runtime/overlapped_linear.h) exactly against the host on integer inputs,
// several calls in a row (both receive halves) with changing row counts, and their refusals.
// Every test skips, on every rank alike, where fewer GPUs than ranks are visible.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "fk/runtime/comm.h"
#include "fk/runtime/cuda_check.h"
#include "fk/kernels/rms_norm.cuh"
#include "fk/runtime/ep_all_to_all.h"
#include "fk/runtime/overlapped_linear.h"
#include "fk/kernels/ep_all_to_all.cuh"
#include "fk/runtime/peer_allreduce.h"
#include "fk/runtime/peer_allreduce_fused.cuh"
#include "fk/runtime/parallel_state.h"
#include "fk/runtime/random.h"
#include "fk/tasks/llama.h"

namespace {

using namespace std::chrono_literals;

fk::dist::TcpStore& store() {
  static std::unique_ptr<fk::dist::TcpStore> s = std::make_unique<fk::dist::TcpStore>(fk::dist::dist_env(), 60s);
  return *s;
}
/// Why this rank cannot run the 2-rank tests ("" when it can); the same on every rank.
std::string cannot_run() {
  const fk::dist::DistEnv e = fk::dist::dist_env();
  if (e.world_size < 2) return "a single process: run under fk_launch --nproc 2";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < e.local_world_size)
    return "fewer than 2 GPUs (" + std::to_string(devices) + " visible for " + std::to_string(e.local_world_size) + " local ranks)";
  return "";
}
#define FK_REQUIRE_RANKS()                                      \
  do {                                                          \
    const std::string why = cannot_run();                       \
    if (!why.empty()) GTEST_SKIP() << why;                      \
  } while (0)

template <class T> std::vector<T> host_of(const fk::Tensor& t) { return fk::to_host<T>(t); }

TEST(Communicator, AllReduceSumsOverTheRanks) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size();
  const int64_t n = int64_t(1) << 20;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(c.rank() + 1) + float(i % 7);
  fk::Tensor t = fk::to_device(x, {n});
  c.all_reduce_(t);
  c.synchronize(fk::current_stream());
  const std::vector<float> y = host_of<float>(t);
  const float ranks = float(w * (w + 1) / 2);
  for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(y[size_t(i)], ranks + float(w) * float(i % 7)) << i;
  // bf16: small integers stay exact
  fk::Tensor b = fk::to_device(std::vector<fk::bf16>(4096, __float2bfloat16(float(c.rank() + 1))), {4096});
  c.all_reduce_(b);
  c.synchronize(fk::current_stream());
  for (fk::bf16 v : host_of<fk::bf16>(b)) ASSERT_EQ(__bfloat162float(v), ranks);
}

TEST(Communicator, AllGatherAndReduceScatter) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size();
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(c.rank() * 10000 + i);
  const fk::Tensor in = fk::to_device(x, {n});
  fk::Tensor out = fk::empty({w * n}, fk::DType::kF32);
  c.all_gather(in, out);
  c.synchronize(fk::current_stream());
  const std::vector<float> g = host_of<float>(out);
  for (int r = 0; r < w; ++r)
    for (int64_t i = 0; i < n; i += 101) ASSERT_EQ(g[size_t(r * n + i)], float(r * 10000 + i)) << r << "," << i;
  // reduce-scatter: rank r gets the sum over ranks of slice r (value rank + 1 + slice index)
  std::vector<float> z(static_cast<size_t>(w * n));
  for (int r = 0; r < w; ++r)
    for (int64_t i = 0; i < n; ++i) z[size_t(r * n + i)] = float(c.rank() + 1 + r);
  const fk::Tensor zin = fk::to_device(z, {w * n});
  fk::Tensor part = fk::empty({n}, fk::DType::kF32);
  c.reduce_scatter(zin, part);
  c.synchronize(fk::current_stream());
  for (float v : host_of<float>(part)) ASSERT_EQ(v, float(w * (w + 1) / 2 + w * c.rank()));
  EXPECT_THROW(c.all_gather(in, part), std::exception);  // out too small
}

// Rank 1 aborts (a failure of its own); rank 0, inside an all-reduce rank 1 never joins, ends with
// the abort's reason within seconds instead of hanging.
TEST(Communicator, AnAbortingRankEndsItsPeersWait) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 30s);
  if (c.rank() == 1) {
    c.abort("injected failure");
    EXPECT_TRUE(c.aborted());
    store().barrier("abort-test-done");
    return;
  }
  fk::Tensor t = fk::empty({1 << 16}, fk::DType::kF32);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.all_reduce_(t);
    c.synchronize(fk::current_stream());
    if (c.rank() == 0) ADD_FAILURE() << "an all-reduce without rank 1 completed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("another rank aborted the job (rank 1: injected failure)"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
  store().barrier("abort-test-done");
}

// Run alone (dist_killed_rank_2ranks): rank 1 kills itself inside a collective; fk_launch ends rank 0.
TEST(Communicator, KilledRankInsideACollective) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 60s);
  fk::Tensor t = fk::empty({1 << 16}, fk::DType::kF32);
  if (c.rank() == 1) raise(SIGKILL);
  c.all_reduce_(t);
  c.synchronize(fk::current_stream());  // never completes: the launcher ends this rank
}

// ---------------------------------------------------------------------------------------------
// The own all-reduce over peer memory (Note [Peer all-reduce]).

template <class T> float as_float(T v) { return float(v); }
template <> float as_float<fk::bf16>(fk::bf16 v) { return __bfloat162float(v); }
template <> float as_float<fk::f16>(fk::f16 v) { return __half2float(v); }
template <class T> T from_f(float v) { return T(v); }
template <> fk::bf16 from_f<fk::bf16>(float v) { return __float2bfloat16(v); }
template <> fk::f16 from_f<fk::f16>(float v) { return __float2half(v); }

/// Rank q's input of a test: n values of dtype T drawn from seed (q, n), as floats after rounding to T.
template <class T> std::vector<T> peer_input(int q, int64_t n, uint64_t salt) {
  std::mt19937_64 g(salt * 1000003ull + uint64_t(q) * 7919ull + uint64_t(n));
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<T> x(static_cast<size_t>(n));
  for (auto& v : x) v = from_f<T>(d(g));
  return x;
}
/// The sum the kernels compute: fp32, ranks 0..w-1 in order, rounded to T once.
template <class T> std::vector<T> peer_expected(int w, int64_t n, uint64_t salt) {
  std::vector<float> acc(static_cast<size_t>(n), 0.f);
  for (int q = 0; q < w; ++q) {
    const std::vector<T> x = peer_input<T>(q, n, salt);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += as_float(x[i]);
  }
  std::vector<T> out(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) out[i] = from_f<T>(acc[i]);
  return out;
}
template <class T> int64_t count_unequal(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

template <class T> void check_peer_sizes(fk::dist::PeerAllReduce& par, int rank, int w) {
  using Algo = fk::dist::PeerAllReduce::Algo;
  const int64_t sizes[] = {1, 5, 8, 13, 1000, 4099, 65543, int64_t(1) << 20};
  uint64_t salt = 1;
  for (Algo algo : {Algo::kOneShot, Algo::kTwoShot, Algo::kLamport, Algo::kAuto})
    for (int64_t n : sizes) {
      if (n * int64_t(sizeof(T)) > (algo == Algo::kLamport ? par.lamport_bytes() : par.max_bytes())) continue;
      ++salt;
      fk::Tensor t = fk::to_device(peer_input<T>(rank, n, salt), {n});
      const bool in_place = n % 2 == 1;
      fk::Tensor out = in_place ? t : fk::empty({n}, fk::dtype_of<T>);
      par.all_reduce(t, out, algo);
      FK_CUDA_CHECK(cudaStreamSynchronize(fk::current_stream()));
      ASSERT_EQ(count_unequal(fk::to_host<T>(out), peer_expected<T>(w, n, salt)), 0)
          << fk::dist::algo_name(algo) << " n=" << n << (in_place ? " in place" : "") << " rank " << rank;
    }
}

TEST(PeerAllReduce, EqualsTheRankOrderSumBitwise) {
  FK_REQUIRE_RANKS();
  const fk::dist::DistEnv e = fk::dist::dist_env();
  fk::dist::PeerAllReduce par(store(), int64_t(4) << 20, 30s);
  check_peer_sizes<fk::bf16>(par, e.rank, e.world_size);
  check_peer_sizes<fk::f16>(par, e.rank, e.world_size);
  check_peer_sizes<float>(par, e.rank, e.world_size);
}

// Captured once, replayed on new contents: the epochs live on the GPU, so every replay is a new call.
TEST(PeerAllReduce, ReplaysFromACudaGraph) {
  FK_REQUIRE_RANKS();
  using Algo = fk::dist::PeerAllReduce::Algo;
  const fk::dist::DistEnv e = fk::dist::dist_env();
  fk::dist::PeerAllReduce par(store(), int64_t(1) << 20, 30s);
  cudaStream_t s = nullptr;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    fk::StreamGuard guard(s);
    const int64_t n = 3000;
    fk::Tensor a = fk::empty({n}, fk::DType::kBF16), b = fk::empty({n}, fk::DType::kBF16);
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    FK_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    par.all_reduce_(a, Algo::kLamport);
    par.all_reduce(a, b, Algo::kTwoShot);  // the sum of the sums: w x the first
    FK_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    FK_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (uint64_t salt = 100; salt < 104; ++salt) {
      const std::vector<fk::bf16> x = peer_input<fk::bf16>(e.rank, n, salt);
      FK_CUDA_CHECK(cudaMemcpyAsync(a.data_ptr(), x.data(), x.size() * sizeof(fk::bf16), cudaMemcpyHostToDevice, s));
      FK_CUDA_CHECK(cudaGraphLaunch(exec, s));
      FK_CUDA_CHECK(cudaStreamSynchronize(s));
      const std::vector<fk::bf16> want = peer_expected<fk::bf16>(e.world_size, n, salt);
      ASSERT_EQ(count_unequal(fk::to_host<fk::bf16>(a), want), 0) << "replay " << salt;
      std::vector<fk::bf16> twice(want.size());
      for (size_t i = 0; i < want.size(); ++i) twice[i] = __float2bfloat16(__bfloat162float(want[i]) * float(e.world_size));
      ASSERT_EQ(count_unequal(fk::to_host<fk::bf16>(b), twice), 0) << "replay " << salt;
    }
    FK_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FK_CUDA_CHECK(cudaGraphDestroy(g));
  }
  FK_CUDA_CHECK(cudaStreamDestroy(s));
}

// The fused all-reduce + residual add + RMSNorm equals the peer all-reduce followed by
// fused_add_rms_norm bitwise (the output and the residual), at decode and prefill-like row counts.
TEST(PeerAllReduce, FusedAddRmsNormEqualsTheUnfusedPair) {
  FK_REQUIRE_RANKS();
  const fk::dist::DistEnv e = fk::dist::dist_env();
  if (e.world_size != 2 && e.world_size != 4 && e.world_size != 8) GTEST_SKIP() << "the fused kernel serves 2, 4 or 8 ranks";
  fk::dist::PeerAllReduce par(store(), int64_t(4) << 20, 30s);
  constexpr int H = 4096;
  for (auto algo : {fk::dist::PeerAllReduce::Algo::kLamport, fk::dist::PeerAllReduce::Algo::kOneShot})
  for (int64_t rows : {1, 7, 64, 100}) {
    const int64_t n = rows * H;
    const uint64_t salt = 500 + uint64_t(rows);
    fk::Tensor x = fk::to_device(peer_input<fk::bf16>(e.rank, n, salt), {rows, H});
    fk::Tensor res = fk::to_device(peer_input<fk::bf16>(99, n, salt), {rows, H});  // the residual is the same on every rank
    const fk::Tensor w = fk::to_device(peer_input<fk::bf16>(98, H, salt), {H});
    fk::Tensor x2 = fk::to_device(fk::to_host<fk::bf16>(x), {rows, H}), res2 = fk::to_device(fk::to_host<fk::bf16>(res), {rows, H});
    fk::dist::all_reduce_add_rms_norm<H, fk::bf16>(par, x, res, w, 1e-5f, x, algo);
    par.all_reduce_(x2, fk::dist::PeerAllReduce::Algo::kOneShot);
    fk::kernels::fused_add_rms_norm<H, fk::bf16>(x2.data<fk::bf16>(), H, res2.data<fk::bf16>(), H, w.data<fk::bf16>(), rows, 1e-5f,
                                                 fk::current_stream());
    FK_CUDA_CHECK(cudaStreamSynchronize(fk::current_stream()));
    EXPECT_EQ(count_unequal(fk::to_host<fk::bf16>(x), fk::to_host<fk::bf16>(x2)), 0)
        << fk::dist::algo_name(algo) << ", " << rows << " rows: the normed output";
    EXPECT_EQ(count_unequal(fk::to_host<fk::bf16>(res), fk::to_host<fk::bf16>(res2)), 0)
        << fk::dist::algo_name(algo) << ", " << rows << " rows: the residual";
  }
  fk::Tensor bad = fk::empty({3, 100}, fk::DType::kBF16);
  EXPECT_THROW((fk::dist::all_reduce_add_rms_norm<H, fk::bf16>(par, bad, bad, bad, 1e-5f, bad)), std::runtime_error);
}

// ---------------------------------------------------------------------------------------------
// The group coordinator (fk/runtime/parallel_state.h, Note [Group all-reduce choice]).

TEST(GroupCoordinator, AllReduceGatherScatter) {
  FK_REQUIRE_RANKS();
  fk::dist::GroupCoordinator g(store(), 30s, /*use_peer=*/true, /*peer_max_bytes=*/64 << 10);
  const int w = g.world_size(), r = g.rank();
  EXPECT_TRUE(g.peer() != nullptr) << g.peer_unavailable();
  const float ranks = float(w * (w + 1) / 2);
  // Small (the peer all-reduce) and large (above its 64 KiB: NCCL), in place and out of place.
  for (int64_t n : {int64_t(1000), int64_t(1) << 18}) {
    fk::Tensor t = fk::to_device(std::vector<float>(size_t(n), float(r + 1)), {n});
    const fk::Tensor sum = g.all_reduce(t);
    g.all_reduce_(t);
    g.synchronize(fk::current_stream());
    for (float v : host_of<float>(sum)) ASSERT_EQ(v, ranks) << n;
    for (float v : host_of<float>(t)) ASSERT_EQ(v, ranks) << n;
  }
  // all_gather along the last dimension: rank q's [3, 5] block lands in columns [5q, 5q + 5).
  std::vector<float> x(15);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) x[size_t(i * 5 + j)] = float(r * 100 + i * 10 + j);
  const fk::Tensor gathered = g.all_gather_last_dim(fk::to_device(x, {3, 5}));
  g.synchronize(fk::current_stream());
  ASSERT_EQ(gathered.sizes(), (fk::Shape{3, 5 * w}));
  const std::vector<float> gh = host_of<float>(gathered);
  for (int i = 0; i < 3; ++i)
    for (int q = 0; q < w; ++q)
      for (int j = 0; j < 5; ++j) ASSERT_EQ(gh[size_t(i * 5 * w + q * 5 + j)], float(q * 100 + i * 10 + j)) << i << "," << q << "," << j;
  // reduce_scatter along the first dimension: rank r keeps rows [2r, 2r + 2) summed over the ranks.
  std::vector<float> z(size_t(2 * w * 4));
  for (int row = 0; row < 2 * w; ++row)
    for (int j = 0; j < 4; ++j) z[size_t(row * 4 + j)] = float((r + 1) * (row + 1));
  const fk::Tensor part = g.reduce_scatter_first_dim(fk::to_device(z, {2 * w, 4}));
  g.synchronize(fk::current_stream());
  ASSERT_EQ(part.sizes(), (fk::Shape{2, 4}));
  const std::vector<float> ph = host_of<float>(part);
  for (int row = 0; row < 2; ++row)
    for (int j = 0; j < 4; ++j) ASSERT_EQ(ph[size_t(row * 4 + j)], ranks * float(2 * r + row + 1));
}

TEST(GroupCoordinator, TpGroupIsInstalledOrNamesHowToStartOne) {
  FK_REQUIRE_RANKS();
  EXPECT_EQ(fk::dist::tp_world_size(), 1);
  try {
    fk::dist::tp_group();
    ADD_FAILURE() << "tp_group() without a group";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("fk_launch --nproc N"), std::string::npos) << e.what();
  }
  fk::dist::GroupCoordinator g(store(), 30s, /*use_peer=*/false);
  fk::dist::set_tp_group(&g);
  EXPECT_EQ(fk::dist::tp_world_size(), g.world_size());
  EXPECT_EQ(&fk::dist::tp_group(), &g);
  EXPECT_EQ(g.peer(), nullptr);
  fk::dist::set_tp_group(nullptr);
}

// Note [Sharded parameters] (fk/tasks/llama.h): each rank's seeded slice is the unsharded tensor's.
TEST(ShardedParams, EveryRankHoldsItsSliceOfTheUnshardedTensor) {
  FK_REQUIRE_RANKS();
  fk::dist::GroupCoordinator g(store(), 30s, /*use_peer=*/false);
  fk::dist::set_tp_group(&g);
  const int w = g.world_size(), r = g.rank();
  const uint64_t seed = 11;
  auto whole_of = [&](const fk::NamedParam& p) {  // the tensor as the unsharded model draws it
    fk::Tensor t = fk::empty(p.full_shape(), fk::DType::kF32);
    fk::fill_normal(t, fk::mix_seed(seed, fk::tasks::name_hash(p.name)), p.init_mean, p.init_std);
    return host_of<float>(t);
  };
  // Rows (column-parallel), columns (row-parallel), and a vocabulary padded to split evenly: 5 rows
  // a rank of 5w - 3 (the last rank's last 3 rows are padding, zero).
  const fk::NamedParam rows = fk::tasks::shard({"m.q_proj.weight", fk::empty({3, 8}, fk::DType::kF32), 0.f, 1.f}, 0, w, 3 * w);
  const fk::NamedParam cols = fk::tasks::shard({"m.o_proj.weight", fk::empty({4, 5}, fk::DType::kF32), 0.f, 1.f}, 1, w, 5 * w);
  const fk::NamedParam vocab = fk::tasks::shard({"m.embed.weight", fk::empty({5, 6}, fk::DType::kF32), 0.f, 1.f}, 0, w, 5 * w - 3);
  for (const fk::NamedParam* p : {&rows, &cols, &vocab}) fk::tasks::init_param(*p, seed);
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_EQ(rows.shard_start, 3 * r);
  ASSERT_EQ(cols.shard_start, 5 * r);
  ASSERT_EQ(rows.full_shape(), (fk::Shape{3 * w, 8}));
  const std::vector<float> wr = whole_of(rows), hr = host_of<float>(rows.tensor);
  for (int i = 0; i < 3 * 8; ++i) ASSERT_EQ(hr[size_t(i)], wr[size_t(3 * r * 8 + i)]) << i;
  const std::vector<float> wc = whole_of(cols), hc = host_of<float>(cols.tensor);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) ASSERT_EQ(hc[size_t(i * 5 + j)], wc[size_t(i * 5 * w + 5 * r + j)]) << i << "," << j;
  const std::vector<float> wv = whole_of(vocab), hv = host_of<float>(vocab.tensor);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) {
      const int row = 5 * r + i;
      ASSERT_EQ(hv[size_t(i * 6 + j)], row < 5 * w - 3 ? wv[size_t(row * 6 + j)] : 0.f) << row << "," << j;
    }
  // A slice that cannot be one of the group's parts is refused, naming the parameter.
  try {
    fk::tasks::shard({"m.bad.weight", fk::empty({2, 4}, fk::DType::kF32), 0.f, 1.f}, 0, w, 3 * w);
    ADD_FAILURE() << "a [2, 4] slice of " << 3 * w << " rows";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("m.bad.weight"), std::string::npos) << e.what();
  }
  fk::dist::set_tp_group(nullptr);
}

TEST(PeerAllReduce, RefusesWhatItCannotServeNamingWhy) {
  FK_REQUIRE_RANKS();
  fk::dist::PeerAllReduce par(store(), 4096, 30s);
  auto message = [&](fk::Tensor t) {
    try {
      par.all_reduce_(t);
    } catch (const std::runtime_error& err) {
      return std::string(err.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message(fk::empty({8}, fk::DType::kI32)).find("dtype i32"), std::string::npos);
  EXPECT_NE(message(fk::empty({4096}, fk::DType::kF32)).find("above the buffer's 4096"), std::string::npos);
  fk::dist::PeerAllReduce small_lamport(store(), 16384, 30s, 4096);
  try {
    fk::Tensor big = fk::empty({2048}, fk::DType::kF32);  // within the 16 KiB buffer, above the 4 KiB Lamport slot
    small_lamport.all_reduce_(big, fk::dist::PeerAllReduce::Algo::kLamport);
    ADD_FAILURE() << "a Lamport call above its slot went through";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("above the Lamport buffer's 4096"), std::string::npos) << err.what();
  }
  EXPECT_NE(message(fk::empty({64}, fk::DType::kBF16).narrow_first(1, 8)).find("16-byte aligned"), std::string::npos);
  EXPECT_EQ(par.unsupported(fk::empty({2048}, fk::DType::kBF16)), "");
}

}  // namespace

namespace {

/// One rank's tokens for the EP tests: x small integers, top-k distinct experts (some slots -1:
/// not routed), weights in [0.25, 1); want[t] = x[t] x sum_j w_j (1 + id_j % 3) over the routed ids.
struct EpTokens {
  std::vector<fk::bf16> x;
  std::vector<int32_t> ids;
  std::vector<float> w, f;
};
EpTokens ep_tokens(int rank, int tokens, int hidden, int topk, int experts, uint32_t salt) {
  std::mt19937 rng(salt * 7919u + uint32_t(rank) * 104729u + uint32_t(tokens));
  EpTokens e;
  e.x.resize(size_t(tokens) * hidden);
  for (size_t i = 0; i < e.x.size(); ++i) e.x[i] = __float2bfloat16(float(int(rng() % 9) - 4));
  e.ids.resize(size_t(tokens) * topk);
  e.w.resize(e.ids.size());
  e.f.assign(size_t(tokens), 0.f);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> perm(static_cast<size_t>(experts));
    for (int i = 0; i < experts; ++i) perm[size_t(i)] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < topk; ++j) {
      const size_t k = size_t(t) * topk + j;
      e.ids[k] = (rng() % 11 == 0) ? -1 : perm[size_t(j)];
      e.w[k] = 0.25f + 0.75f * float(rng() % 1000) / 1000.f;
      if (e.ids[k] >= 0) e.f[size_t(t)] += e.w[k] * float(1 + e.ids[k] % 3);
    }
  }
  return e;
}

/// out = combine(stand-in experts(dispatch(tokens))) through `ep`, on the current stream.
void ep_round_trip(fk::dist::EpAllToAll& ep, const fk::Tensor& x, const fk::Tensor& ids, const fk::Tensor& w, fk::Tensor& y, fk::Tensor& out) {
  const fk::dist::EpAllToAll::Dispatched& d = ep.dispatch(x, ids, w);
  const auto& c = ep.config();
  fk::kernels::ep::scale_by_experts_kernel<<<dim3(8, unsigned(d.x.size(0) / d.capacity)), 128, 0, fk::current_stream()>>>(
      d.x.data<fk::bf16>(), d.topk_ids.data<int32_t>(), d.topk_weights.data<float>(), d.counts, d.capacity, c.hidden, c.topk,
      ep.first_expert(), ep.experts_per_rank(), y.data<fk::bf16>());
  FK_CHECK_LAUNCH();
  ep.combine(y, out);
}

int64_t ep_wrong(const std::vector<fk::bf16>& got, const EpTokens& e, int hidden) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = e.f[i / size_t(hidden)] * __bfloat162float(e.x[i]), g = __bfloat162float(got[i]);
    if (!(std::fabs(g - want) <= 1e-2f * std::fabs(want) + 1e-3f)) ++bad;
  }
  return bad;
}

}  // namespace

// Both backends: every token's output is its experts' weighted sum (ranks with different token
// counts, one with none; unrouted slots), and the two backends agree bitwise (one fp32 sum in rank order).
TEST(EpAllToAll, DispatchCombineMatchesTheHostOnBothBackendsBitwiseAlike) {
  FK_REQUIRE_RANKS();
  using fk::dist::EpAllToAll;
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size(), r = c.rank(), hidden = 264, topk = 4, experts = 6 * w;
  const int cap = 40 + 21 * w;  // the most tokens one rank sends: 37 + 21 (w - 1) + 3
  EpAllToAll peer(store(), c, {experts, hidden, topk, cap}, EpAllToAll::Backend::kPeer, 30s);
  EpAllToAll nccl(store(), c, {experts, hidden, topk, cap}, EpAllToAll::Backend::kNccl, 30s);
  EXPECT_EQ(peer.experts_per_rank(), 6);
  EXPECT_EQ(peer.first_expert(), 6 * r);
  for (uint32_t salt = 1; salt <= 3; ++salt) {
    const int T = r == 1 && salt == 2 ? 0 : 37 + 21 * r + int(salt);
    const EpTokens e = ep_tokens(r, T, hidden, topk, experts, salt);
    fk::Tensor x = fk::to_device(e.x, {T, hidden}), ids = fk::to_device(e.ids, {T, topk}), wt = fk::to_device(e.w, {T, topk});
    fk::Tensor y = fk::empty({int64_t(w) * cap, hidden}, fk::DType::kBF16), o1 = fk::empty({T, hidden}, fk::DType::kBF16),
               o2 = fk::empty({T, hidden}, fk::DType::kBF16);
    ep_round_trip(peer, x, ids, wt, y, o1);
    ep_round_trip(nccl, x, ids, wt, y, o2);
    c.synchronize(fk::current_stream());
    const std::vector<fk::bf16> a = fk::to_host<fk::bf16>(o1), b = fk::to_host<fk::bf16>(o2);
    EXPECT_EQ(ep_wrong(a, e, hidden), 0) << "peer, rank " << r << ", salt " << salt;
    EXPECT_EQ(ep_wrong(b, e, hidden), 0) << "nccl, rank " << r << ", salt " << salt;
    EXPECT_EQ(count_unequal(a, b), 0) << "rank " << r << ", salt " << salt;
  }
}

// The own backend captured once and replayed on new tokens: its call counts live on the GPU.
TEST(EpAllToAll, PeerBackendReplaysFromACudaGraph) {
  FK_REQUIRE_RANKS();
  using fk::dist::EpAllToAll;
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size(), r = c.rank(), hidden = 512, topk = 8, experts = 8 * w, T = 48;
  cudaStream_t s = nullptr;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    fk::StreamGuard guard(s);
    EpAllToAll ep(store(), c, {experts, hidden, topk, T}, EpAllToAll::Backend::kPeer, 30s);
    fk::Tensor x = fk::empty({T, hidden}, fk::DType::kBF16), ids = fk::empty({T, topk}, fk::DType::kI32), wt = fk::empty({T, topk}, fk::DType::kF32);
    fk::Tensor y = fk::empty({int64_t(w) * T, hidden}, fk::DType::kBF16), out = fk::empty({T, hidden}, fk::DType::kBF16);
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    FK_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ep_round_trip(ep, x, ids, wt, y, out);
    FK_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    FK_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (uint32_t salt = 10; salt < 14; ++salt) {
      const EpTokens e = ep_tokens(r, T, hidden, topk, experts, salt);
      FK_CUDA_CHECK(cudaMemcpyAsync(x.data_ptr(), e.x.data(), e.x.size() * sizeof(fk::bf16), cudaMemcpyHostToDevice, s));
      FK_CUDA_CHECK(cudaMemcpyAsync(ids.data_ptr(), e.ids.data(), e.ids.size() * 4, cudaMemcpyHostToDevice, s));
      FK_CUDA_CHECK(cudaMemcpyAsync(wt.data_ptr(), e.w.data(), e.w.size() * 4, cudaMemcpyHostToDevice, s));
      FK_CUDA_CHECK(cudaGraphLaunch(exec, s));
      c.synchronize(s);
      EXPECT_EQ(ep_wrong(fk::to_host<fk::bf16>(out), e, hidden), 0) << "replay " << salt << ", rank " << r;
    }
    FK_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FK_CUDA_CHECK(cudaGraphDestroy(g));
  }
  FK_CUDA_CHECK(cudaStreamDestroy(s));
}

// Bad input is refused on the host, naming what was expected.
TEST(EpAllToAll, RefusesBadConfigsAndInputsNamingWhy) {
  FK_REQUIRE_RANKS();
  using fk::dist::EpAllToAll;
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size();
  try {
    EpAllToAll bad(store(), c, {7 * w + 1, 256, 2, 8}, EpAllToAll::Backend::kNccl);
    ADD_FAILURE() << "num_experts not a multiple of the ranks was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_experts"), std::string::npos) << e.what();
  }
  try {
    EpAllToAll bad(store(), c, {8 * w, 260, 2, 8}, EpAllToAll::Backend::kNccl);
    ADD_FAILURE() << "hidden 260 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 8"), std::string::npos) << e.what();
  }
  EpAllToAll ep(store(), c, {8 * w, 256, 2, 8}, EpAllToAll::Backend::kNccl);
  fk::Tensor x = fk::empty({9, 256}, fk::DType::kBF16), ids = fk::empty({9, 2}, fk::DType::kI32), wt = fk::empty({9, 2}, fk::DType::kF32);
  try {
    ep.dispatch(x, ids, wt);
    ADD_FAILURE() << "9 tokens above max_tokens 8 were accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("max_tokens"), std::string::npos) << e.what();
  }
  fk::Tensor out = fk::empty({8, 256}, fk::DType::kBF16);
  try {
    ep.combine(out, out);
    ADD_FAILURE() << "combine before any dispatch was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no dispatch"), std::string::npos) << e.what();
  }
}

namespace {

/// Small integers in {-1, 0, 1}, different per rank, call and element: GEMM sums of 32 of them and
/// sums of up to 8 such partials are exact in fp32 and in bf16 (|v| <= 256).
std::vector<fk::bf16> ternary(int64_t n, int rank, int salt, int kind) {
  std::vector<fk::bf16> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = fk::bf16(float(int((i * 5 + rank * 7 + salt * 3 + kind * 11 + (i / 7) * 13) % 3) - 1));
  return v;
}
/// y[m, n] = x[m, k] w[n, k]^T on the host (row-major).
std::vector<float> host_gemm(const std::vector<fk::bf16>& x, const std::vector<fk::bf16>& w, int64_t m, int64_t n, int64_t k) {
  std::vector<float> y(size_t(m * n), 0.f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += float(x[size_t(i * k + l)]) * float(w[size_t(j * k + l)]);
      y[size_t(i * n + j)] = acc;
    }
  return y;
}

}  // namespace

TEST(OverlappedLinear, AllGatherMatmulMatchesTheHostExactly) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size(), r = c.rank();
  const int64_t K = 32, N = 48;
  fk::dist::OverlappedLinear ol(store(), c, {int64_t(8) * w, K, 0}, 30s);
  int call = 0;
  for (int64_t rows : {int64_t(3), int64_t(8), int64_t(1), int64_t(0), int64_t(5)}) {  // rows per rank; five calls: both halves, twice
    ++call;
    const int64_t T = rows * w;
    std::vector<fk::bf16> full;
    for (int q = 0; q < w; ++q) {
      const std::vector<fk::bf16> xq = ternary(rows * K, q, call, 0);
      full.insert(full.end(), xq.begin(), xq.end());
    }
    const std::vector<fk::bf16> wh = ternary(N * K, r, call, 1);
    fk::Tensor x = fk::to_device(ternary(rows * K, r, call, 0), {rows, K}), wt = fk::to_device(wh, {N, K}), y = fk::empty({T, N}, fk::DType::kBF16);
    ol.all_gather_matmul(x, wt, y);
    c.synchronize(fk::current_stream());
    const std::vector<float> want = host_gemm(full, wh, T, N, K);
    const std::vector<fk::bf16> got = host_of<fk::bf16>(y);
    int64_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += float(got[i]) != want[i];
    EXPECT_EQ(wrong, 0) << "rank " << r << ", call " << call << ", " << rows << " rows per rank";
  }
}

TEST(OverlappedLinear, MatmulReduceScatterMatchesTheHostExactly) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size(), r = c.rank();
  const int64_t K = 32, N = 40;
  fk::dist::OverlappedLinear ol(store(), c, {int64_t(8) * w, 0, N}, 30s);
  int call = 0;
  for (int64_t rows : {int64_t(2), int64_t(8), int64_t(1), int64_t(0), int64_t(7)}) {
    ++call;
    const int64_t T = rows * w;
    std::vector<float> want(size_t(rows * N), 0.f);
    for (int q = 0; q < w; ++q) {
      const std::vector<float> part = host_gemm(ternary(T * K, q, call, 2), ternary(N * K, q, call, 3), T, N, K);
      for (int64_t i = 0; i < rows * N; ++i) want[size_t(i)] += part[size_t(r * rows * N + i)];
    }
    fk::Tensor x = fk::to_device(ternary(T * K, r, call, 2), {T, K}), wt = fk::to_device(ternary(N * K, r, call, 3), {N, K});
    fk::Tensor y = fk::empty({rows, N}, fk::DType::kBF16);
    ol.matmul_reduce_scatter(x, wt, y);
    c.synchronize(fk::current_stream());
    const std::vector<fk::bf16> got = host_of<fk::bf16>(y);
    int64_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += float(got[i]) != want[i];
    EXPECT_EQ(wrong, 0) << "rank " << r << ", call " << call << ", " << rows << " rows per rank";
  }
}

// Bad configs and inputs are refused on the host (every rank alike), naming the field.
TEST(OverlappedLinear, RefusesBadConfigsAndInputsNamingWhy) {
  FK_REQUIRE_RANKS();
  fk::dist::Communicator c(store(), 60s);
  const int w = c.world_size();
  auto expect_refused = [](const std::function<void()>& f, const std::string& word, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << what << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { fk::dist::OverlappedLinear bad(store(), c, {int64_t(8) * w + 1, 32, 0}); }, "max_tokens", "max_tokens not a multiple of the ranks");
  expect_refused([&] { fk::dist::OverlappedLinear bad(store(), c, {int64_t(8) * w, 36, 0}); }, "multiples of 8", "gather_k 36");
  fk::dist::OverlappedLinear ol(store(), c, {int64_t(4) * w, 32, 0});
  fk::Tensor wt = fk::empty({16, 32}, fk::DType::kBF16);
  fk::Tensor x5 = fk::empty({5, 32}, fk::DType::kBF16), y5 = fk::empty({5 * w, 16}, fk::DType::kBF16);
  expect_refused([&] { ol.all_gather_matmul(x5, wt, y5); }, "max_tokens", "5 rows per rank above max_tokens");
  fk::Tensor xf = fk::empty({2, 32}, fk::DType::kF32), y2 = fk::empty({2 * w, 16}, fk::DType::kBF16);
  expect_refused([&] { ol.all_gather_matmul(xf, wt, y2); }, "bf16", "an f32 x_shard");
  fk::Tensor x2 = fk::empty({2, 32}, fk::DType::kBF16), ybad = fk::empty({2 * w, 8}, fk::DType::kBF16);
  expect_refused([&] { ol.all_gather_matmul(x2, wt, ybad); }, "y", "y of the wrong width");
  fk::Tensor xr = fk::empty({2 * w, 32}, fk::DType::kBF16), yr = fk::empty({2, 16}, fk::DType::kBF16);
  expect_refused([&] { ol.matmul_reduce_scatter(xr, wt, yr); }, "scatter_n 0", "matmul_reduce_scatter without scatter_n");
  // Under CUDA-graph capture (its epochs are host values): refused before anything is enqueued.
  cudaStream_t cs = nullptr;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  {
    fk::StreamGuard guard(cs);
    fk::Tensor y2ok = fk::empty({2 * w, 16}, fk::DType::kBF16);
    FK_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    expect_refused([&] { ol.all_gather_matmul(x2, wt, y2ok); }, "CUDA graph", "a call under capture");
    cudaGraph_t g = nullptr;
    FK_CUDA_CHECK(cudaStreamEndCapture(cs, &g));
    if (g) FK_CUDA_CHECK(cudaGraphDestroy(g));
  }
  FK_CUDA_CHECK(cudaStreamDestroy(cs));
}
