// fk_launch (runtime/runner/launch.cc, Note [Rank failure]): every rank gets torchrun's environment;
// the first rank to fail (an exit code, a signal, a rank that cannot start) ends the others within
// the grace period, even one that ignores SIGTERM, and the launcher exits with that rank's code.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "test_util.h"

namespace {

using fk::gen::testing::run;
const std::string kLaunch = FK_LAUNCH_BIN;

double seconds_of(const std::string& cmd, std::string* out, int* rc) {
  const auto t0 = std::chrono::steady_clock::now();
  *rc = run(cmd, out);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Launch, EveryRankGetsTorchrunsEnvironment) {
  std::string out;
  const int rc = run(kLaunch + " --nproc 3 --master-port 29876 -- sh -c "
                               "'echo \"rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE at=$MASTER_ADDR:$MASTER_PORT\"'",
                     &out);
  EXPECT_EQ(rc, 0) << out;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(out.find("rank=" + std::to_string(r) + " world=3 local=" + std::to_string(r) + "/3 at=127.0.0.1:29876"), std::string::npos)
        << out;
}

TEST(Launch, AFailedRankEndsTheOthersWithItsCode) {
  std::string out;
  int rc = 0;
  const double s = seconds_of(kLaunch + " --nproc 4 -- sh -c 'if [ \"$RANK\" = 2 ]; then sleep 0.2; exit 7; fi; sleep 60'", &out, &rc);
  EXPECT_EQ(rc, 7) << out;
  EXPECT_LT(s, 10.0) << out;
  EXPECT_NE(out.find("fk_launch: rank 2 of 4 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find(") exited with code 7; ending the other ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("fk_launch: every rank ended"), std::string::npos) << out;
}

// A killed rank (kill -9, as the failure test does) and ranks that ignore SIGTERM: SIGKILL
// after the grace period.
TEST(Launch, AKilledRankEndsRanksThatIgnoreSigterm) {
  std::string out;
  int rc = 0;
  const double s = seconds_of(kLaunch + " --nproc 3 --grace 1 -- sh -c "
                                        "'trap \"\" TERM; if [ \"$RANK\" = 1 ]; then sleep 0.2; kill -9 $$; fi; sleep 60'",
                              &out, &rc);
  EXPECT_EQ(rc, 128 + 9) << out;
  EXPECT_LT(s, 10.0) << out;
  EXPECT_NE(out.find("rank 1 of 3"), std::string::npos) << out;
  EXPECT_NE(out.find("was killed by signal 9"), std::string::npos) << out;
}

TEST(Launch, ARankThatCannotStartAndUsageErrors) {
  std::string out;
  int rc = run(kLaunch + " --nproc 2 -- /nonexistent/fk_rank_binary", &out);
  EXPECT_EQ(rc, 127) << out;
  EXPECT_NE(out.find("cannot run \"/nonexistent/fk_rank_binary\""), std::string::npos) << out;
  rc = run(kLaunch + " --nproc 2 --nnodes 2 -- true", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--nnodes 2 needs --master-port"), std::string::npos) << out;
  rc = run(kLaunch + " --nproc 0 -- true", &out);
  EXPECT_NE(rc, 0) << out;
}

}  // namespace
