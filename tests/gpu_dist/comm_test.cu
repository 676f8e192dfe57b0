// The job's NCCL communicator (fk/runtime/comm.h, Note [Communicator]) on 2 ranks started by
// fk_launch (tests/CMakeLists.txt: dist_comm_2ranks, dist_killed_rank_2ranks): all-reduce,
// all-gather and reduce-scatter against values computed by hand; an aborting rank ends its peer's
// wait with the abort's reason; a rank killed inside a collective is ended by the launcher.
// Every test skips, on every rank alike, where fewer GPUs than ranks are visible.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <vector>

#include "fk/runtime/comm.h"

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

}  // namespace
