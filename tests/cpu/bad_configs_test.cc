// Strict parsing: every file in tests/fixtures/bad_configs/ breaks one rule; the generator must
// report exactly the messages in the .expected file next to it (and nothing may pass silently).
#include <gtest/gtest.h>

#include <algorithm>

#include "fk/gen/pipeline.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;

std::vector<std::string> bad_config_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fixtures() / "bad_configs"))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class BadConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(BadConfig, ReportsExactMessage) {
  const std::string name = GetParam();
  const fs::path json = fixtures() / "bad_configs" / (name + ".json");
  const fs::path expected = fixtures() / "bad_configs" / (name + ".expected");
  Diagnostics diag;
  std::string file = "tests/fixtures/bad_configs/" + name + ".json";
  run_pipeline(source_dir(), {ConfigFile{"bad/" + name, file, slurp(json)}}, /*emit_outputs=*/false, diag);
  ASSERT_FALSE(diag.ok()) << name << " was accepted";
  EXPECT_FALSE(diag.io_failed());
  if (update_golden()) spit(expected, diag.text());
  ASSERT_TRUE(fs::exists(expected)) << "missing " << expected;
  EXPECT_EQ(diag.text(), slurp(expected));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BadConfig, ::testing::ValuesIn(bad_config_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(BadConfigs, AtLeastFifteenRulesAreCovered) { EXPECT_GE(bad_config_names().size(), 15u); }

TEST(BadConfigs, EveryExpectedFileHasAConfig) {
  for (const auto& e : fs::directory_iterator(fixtures() / "bad_configs"))
    if (e.path().extension() == ".expected")
      EXPECT_TRUE(fs::exists(fs::path(e.path()).replace_extension(".json"))) << e.path();
}

}  // namespace
}  // namespace fk::gen
