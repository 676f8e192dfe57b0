// The multi-GPU bootstrap's host side (fk/runtime/dist.h, Note [Rendezvous]): the launchers'
// environments (torchrun, mpirun, Slurm, none) with their refusals, and the TCP store between ranks
// in threads: an id set by rank 0 and read by every rank, counters, barriers, and the timeouts that
// turn a missing rank or an unreachable rank 0 into an error instead of a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fk/runtime/dist.h"

namespace {

using fk::dist::DistEnv;
using fk::dist::TcpStore;
using namespace std::chrono_literals;

DistEnv env_of(const std::map<std::string, std::string>& vars) {
  return fk::dist::dist_env_from([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    env_of(vars);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(DistEnv, LaunchersConventions) {
  const DistEnv none = env_of({});
  EXPECT_EQ(none.launcher, "single");
  EXPECT_EQ(none.world_size, 1);
  EXPECT_EQ(none.master_port, 29500);
  const DistEnv t = env_of({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                            {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29511"}});
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.master_addr, "10.0.0.7");
  EXPECT_EQ(t.master_port, 29511);
  const DistEnv m = env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.local_rank, 1);  // no local rank: one host
  EXPECT_EQ(m.local_world_size, 2);
  const DistEnv s = env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4"}});
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
}

TEST(DistEnv, RefusalsNameTheVariable) {
  EXPECT_EQ(error_of({{"RANK", "0"}}), "rendezvous: WORLD_SIZE is not set (expected an integer >= 1)");
  EXPECT_EQ(error_of({{"RANK", "two"}, {"WORLD_SIZE", "2"}}), "rendezvous: RANK=\"two\": expected an integer >= 0");
  EXPECT_EQ(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "rendezvous: RANK=2 is not below WORLD_SIZE=2");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}}),
            "rendezvous: LOCAL_RANK=3 / LOCAL_WORLD_SIZE=2: expected a local rank below the ranks on this host, and at most 2 of them");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
            "rendezvous: MASTER_PORT=70000: expected a TCP port (0-65535)");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}),
            "rendezvous: MASTER_PORT=0 with 2 ranks: the other ranks cannot find the port");
}

DistEnv rank_env(int rank, int world, int port) {
  DistEnv e;
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.local_world_size = world;
  e.master_port = port;
  e.launcher = "torchrun";
  return e;
}

// Four ranks as threads: rank 0 serves on a free port, sets an id; the others start first and
// wait for it; counters, two barriers and an all-gather.
TEST(TcpStore, RanksMeetThroughRankZero) {
  constexpr int kWorld = 4;
  TcpStore root(rank_env(0, kWorld, 0), 10s);  // port 0: a free port, then handed to the others
  const int port = root.port();
  ASSERT_GT(port, 0);
  std::vector<std::string> seen(kWorld);
  std::atomic<int> errors{0};
  std::vector<std::thread> ranks;
  for (int r = 1; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      try {
        TcpStore s(rank_env(r, kWorld, port), 10s);
        seen[r] = s.get("nccl_unique_id");
        s.add("arrived", 1);
        s.barrier("after-id");
        s.set("rank/" + std::to_string(r), std::to_string(r * r));
        s.barrier("after-set");
        const std::vector<std::string> all = s.all_gather("squares", std::to_string(r * r));
        for (int q = 0; q < kWorld; ++q) EXPECT_EQ(all[size_t(q)], std::to_string(q * q)) << "rank " << r << " sees rank " << q;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++errors;
      }
    });
  std::this_thread::sleep_for(50ms);  // the others are already waiting on the key
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);  // bytes, zeros included
  root.set("nccl_unique_id", id);
  seen[0] = root.get("nccl_unique_id");
  root.add("arrived", 1);
  root.barrier("after-id");
  EXPECT_EQ(root.add("arrived", 0), kWorld);
  root.barrier("after-set");
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(root.get("rank/" + std::to_string(r)), std::to_string(r * r));
  EXPECT_EQ(root.all_gather("squares", "0"), (std::vector<std::string>{"0", "1", "4", "9"}));
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(errors.load(), 0);
  for (const std::string& s : seen) EXPECT_EQ(s, id);
  EXPECT_FALSE(root.check("never-set"));
}

// A key no rank sets and a barrier a rank never reaches end at the timeout with the key's name.
TEST(TcpStore, MissingRanksAreErrorsNotHangs) {
  TcpStore root(rank_env(0, 2, 0), 300ms);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    root.get("nccl_unique_id");
    FAIL() << "get of a key nobody sets returned";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rendezvous (rank 0 of 2): \"nccl_unique_id\" was not set within 300 ms (a rank missing or ended?)");
  }
  try {
    root.barrier("start");
    FAIL() << "a barrier one rank never reaches returned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("barrier \"start\": 1 of 2 ranks arrived within 300 ms"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A rank whose rank 0 never comes up ends at its timeout naming the address.
TEST(TcpStore, UnreachableRankZeroIsAnError) {
  int port = 0;
  {
    TcpStore probe(rank_env(0, 1, 0), 1s);  // a port that was free a moment ago, and is closed again
    port = probe.port();
  }
  try {
    TcpStore s(rank_env(1, 2, port), 200ms);
    FAIL() << "connected to nothing";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "rendezvous (rank 1 of 2): could not reach the store at 127.0.0.1:" + std::to_string(port) +
                                         " within 200 ms (is rank 0 running, and MASTER_ADDR / MASTER_PORT the same on every rank?)");
  }
}

}  // namespace
