// Configs as users bring them (issue 21): every real config of tests/fixtures/config_corpus/ goes
// through `fastkernels add` in a scratch repository of its own, and either generates or fails
// with exactly the lines recorded in expected.json (scripts/config_corpus.py regenerates it).
// A failed add leaves nothing behind.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;

std::vector<std::string> outcome_lines(const std::string& out, const std::string& file) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    for (size_t p; (p = l.find(file)) != std::string::npos;) l.replace(p, file.size(), "{file}");
    if (l.rfind("wrote ", 0) == 0 || l.rfind("added ", 0) == 0 || l.rfind("recorded ", 0) == 0 || l.rfind("removed ", 0) == 0)
      continue;
    lines.push_back(l);
  }
  return lines;
}

size_t files_under(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) ++n;
  return n;
}

TEST(ConfigCorpus, EveryConfigGeneratesOrFailsPrecisely) {
  const fs::path corpus = fixtures() / "config_corpus";
  const auto expected = nlohmann::json::parse(slurp(corpus / "expected.json"));
  std::set<std::string> covered;
  int generated = 0;
  for (const auto& r : expected.at("runs")) {
    const std::string config = r.at("config"), args = r.at("args");
    SCOPED_TRACE(config + (args.empty() ? "" : " " + args));
    covered.insert(config);
    TempDir tmp;
    fs::create_directories(tmp.path() / "hf_configs");
    fs::copy(source_dir() / "templates", tmp.path() / "templates", fs::copy_options::recursive);
    fs::create_directories(tmp.path() / "generator");
    fs::copy(source_dir() / "generator" / "descriptors", tmp.path() / "generator" / "descriptors", fs::copy_options::recursive);
    const fs::path file = corpus / config;
    std::string out;
    const int rc = run(bin() + " add --root " + q(tmp.path()) + (args.empty() ? "" : " " + args) + " " + q(file), &out);
    ASSERT_EQ(rc, r.at("rc").get<int>()) << out;
    if (rc == 0) {
      ++generated;
      const std::string name = r.at("name");
      EXPECT_NE(out.find("name     " + name + " "), std::string::npos) << out;
      EXPECT_EQ(slurp(tmp.path() / "hf_configs" / name / "config.json"), slurp(file)) << "stored verbatim";
      EXPECT_NE(slurp(tmp.path() / "generated" / "manifest.json").find("\"" + name + "\""), std::string::npos);
    } else {
      EXPECT_EQ(outcome_lines(out, file.string()), r.at("output").get<std::vector<std::string>>()) << out;
      EXPECT_EQ(files_under(tmp.path() / "hf_configs"), 0u) << "a failed add leaves no config behind";
    }
  }
  // Every file of the corpus is tried (a new config needs its expected outcome).
  for (const auto& e : fs::directory_iterator(corpus))
    if (e.path().extension() == ".json" && e.path().filename() != "expected.json")
      EXPECT_TRUE(covered.count(e.path().filename().string())) << e.path().filename() << " has no expected outcome";
  EXPECT_GE(generated, 11);
}

}  // namespace
}  // namespace fk::gen
