// `fastkernels audit` (fk/gen/audit.h): the coverage figures over the real hf_configs/, the agreement
// of its terminal/markdown/CSV/JSON renderings, and docs/coverage.md's staleness check.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fk/gen/audit.h"
#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;
namespace cov = fk::gen::coverage;


struct Run {
  size_t configs = 0;
  Generation g;
  cov::Audit a;
};

Run audit_of(const fs::path& root) {
  Run r;
  Diagnostics diag;
  auto configs = discover_configs(root, diag);
  r.configs = configs.size();
  r.g = run_pipeline(root, configs, /*emit_outputs=*/false, diag);
  EXPECT_TRUE(diag.ok()) << diag.text();
  r.a = cov::build(r.g);
  return r;
}

const Run& repo() {
  static const Run r = audit_of(source_dir());
  return r;
}

const cov::ArchRow* arch(const cov::Audit& a, const std::string& id) {
  for (const auto& r : a.archs)
    if (r.id == id) return &r;
  return nullptr;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

TEST(Audit, OneMatrixRowPerConfigOneColumnPerRegisteredKind) {
  const auto& [configs, g, a] = repo();
  ASSERT_GT(configs, 1u);
  // One row per lowered model: every config, and each of its parallel layouts (Note [Parallel layouts]).
  size_t layouts = 0;
  for (const auto& m : g.lowered) layouts += m.id.find('@') != std::string::npos;
  EXPECT_GT(layouts, 0u);
  EXPECT_EQ(a.archs.size(), configs + layouts);
  ASSERT_EQ(a.matrix.size(), configs + layouts);
  const size_t registered = kind_names(false).size() + kind_names(true).size();
  EXPECT_EQ(a.kinds.size(), registered);
  EXPECT_EQ(a.total.registered_kinds, registered);
  for (const auto& row : a.matrix) EXPECT_EQ(row.size(), registered);
  EXPECT_TRUE(std::is_sorted(a.archs.begin(), a.archs.end(), [](const auto& x, const auto& y) { return x.id < y.id; }));
  // Every task of every model is counted once in its row.
  for (size_t i = 0; i < a.archs.size(); ++i) {
    size_t sum = 0;
    for (size_t n : a.matrix[i]) sum += n;
    EXPECT_EQ(sum, a.archs[i].tasks) << a.archs[i].id;
  }
}

TEST(Audit, KindsEachArchitectureNeeds) {
  const cov::Audit& a = repo().a;
  const auto* llama = arch(a, "meta-llama/Llama-3.1-8B-Instruct");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->family, "llama");
  for (const char* k : {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "flash_attn_decode",
                        "llama_mlp", "llama_decoder_layer", "llama_for_causal_lm"})
    EXPECT_TRUE(has(llama->kinds, k)) << k;
  EXPECT_FALSE(has(llama->kinds, "moe_grouped_gemm"));
  EXPECT_TRUE(llama->exclusive.empty());  // Mistral and Phi-3 lower to the same kinds
  const auto* mixtral = arch(a, "mistralai/Mixtral-8x7B-v0.1");
  ASSERT_NE(mixtral, nullptr);
  for (const char* k : {"topk_softmax", "moe_align_block_size", "moe_grouped_gemm", "moe_sum", "sparse_moe_block"})
    EXPECT_TRUE(has(mixtral->kinds, k)) << k;
  const auto* deepseek = arch(a, "deepseek-ai/DeepSeek-V3");
  ASSERT_NE(deepseek, nullptr);
  EXPECT_TRUE(has(deepseek->kinds, "grouped_topk"));
  for (const auto& r : a.archs)  // DeepSeek's routing: its own kind (the model and its sharded layouts alone use it)
    if (has(r.kinds, "grouped_topk")) EXPECT_EQ(r.id.rfind("deepseek-ai/DeepSeek-V3", 0), 0u) << r.id;
  // The per-arch kinds are exactly the kinds of its tasks.
  for (const auto& m : repo().g.tasks.models) {
    std::set<std::string> kinds;
    for (const auto& t : m.tasks) kinds.insert(repo().g.tasks.tasks.at(t).kind);
    const auto* r = arch(a, m.id);
    ASSERT_NE(r, nullptr) << m.id;
    EXPECT_EQ(std::set<std::string>(r->kinds.begin(), r->kinds.end()), kinds) << m.id;
  }
}

// Note [Collectives per step]: counted from the tasks of each sharded layout; none unsharded.
TEST(Audit, CollectivesPerStepOfTheShardedLayouts) {
  const cov::Audit& a = repo().a;
  const std::map<std::string, int64_t> none;
  EXPECT_EQ(arch(a, "meta-llama/Llama-3.1-8B-Instruct")->collectives, none);
  EXPECT_EQ(arch(a, "mistralai/Mixtral-8x7B-v0.1")->collectives, none);
  // 32 layers: o_proj and down_proj reduce in each, the embedding reduces once, the logits are gathered once.
  const std::map<std::string, int64_t> llama = {{"all_reduce", 2 * 32 + 1}, {"all_gather", 1}};
  for (const char* id : {"meta-llama/Llama-3.1-8B-Instruct@tp2", "meta-llama/Llama-3.1-8B-Instruct@tp4"}) {
    ASSERT_NE(arch(a, id), nullptr) << id;
    EXPECT_EQ(arch(a, id)->collectives, llama) << id;
  }
  // MoE: o_proj and the sparse block (a layer-scope module, once per layer) in each of 48 layers, whether the experts
  // are sliced (TP) or whole (EP inside the TP group).
  const std::map<std::string, int64_t> qwen = {{"all_reduce", 2 * 48 + 1}, {"all_gather", 1}};
  for (const char* id : {"Qwen/Qwen3-30B-A3B@tp2", "Qwen/Qwen3-30B-A3B@tp2_ep2"}) {
    ASSERT_NE(arch(a, id), nullptr) << id;
    EXPECT_EQ(arch(a, id)->collectives, qwen) << id;
  }
  // Data-parallel attention (Note [Data-parallel expert MoE]): no all-reduce, one dispatch and one combine per MoE layer
  // (all 48 of Qwen3-30B-A3B's; 58 of DeepSeek-V3's 61, whose first 3 are dense).
  for (const char* id : {"Qwen/Qwen3-30B-A3B@ep2", "Qwen/Qwen3-30B-A3B@ep4"}) {
    ASSERT_NE(arch(a, id), nullptr) << id;
    EXPECT_EQ(arch(a, id)->collectives, (std::map<std::string, int64_t>{{"ep_combine", 48}, {"ep_dispatch", 48}})) << id;
  }
  for (const char* id : {"deepseek-ai/DeepSeek-V3@ep2", "deepseek-ai/DeepSeek-V3@ep4"}) {
    ASSERT_NE(arch(a, id), nullptr) << id;
    EXPECT_EQ(arch(a, id)->collectives, (std::map<std::string, int64_t>{{"ep_combine", 58}, {"ep_dispatch", 58}})) << id;
  }
  // The fused all-reduce + norm and the overlapped linears are not called by the layers: they add no collective to a
  // step (the counts above), though their tasks are the layout's.
  const auto& llama_tasks = arch(a, "meta-llama/Llama-3.1-8B-Instruct@tp2")->kinds;
  for (const char* k : {"matmul_reduce_scatter", "all_gather_matmul", "reduce_scatter", "all_gather_rows", "all_reduce_add_rms_norm"})
    EXPECT_NE(std::find(llama_tasks.begin(), llama_tasks.end(), k), llama_tasks.end()) << k;
}

TEST(Audit, SharingIsSortedAndAgreesWithTheMatrix) {
  const cov::Audit& a = repo().a;
  auto shared = cov::by_sharing(a);
  ASSERT_EQ(shared.size(), a.kinds.size());
  for (size_t i = 1; i < shared.size(); ++i) EXPECT_GE(shared[i - 1]->archs.size(), shared[i]->archs.size());
  // Every config has an LM head.
  EXPECT_EQ(shared.front()->archs.size(), a.archs.size());
  for (size_t k = 0; k < a.kinds.size(); ++k) {
    size_t users = 0;
    for (size_t i = 0; i < a.archs.size(); ++i) users += a.matrix[i][k] ? 1 : 0;
    EXPECT_EQ(users, a.kinds[k].archs.size()) << a.kinds[k].kind;
    EXPECT_EQ(a.kinds[k].level, find_kind(a.kinds[k].kind)->level);
  }
}

TEST(Audit, ConsolidationIsMonotoneAndAddsUp) {
  const auto& [configs, g, a] = repo();
  ASSERT_EQ(a.levels.size(), 4u);
  size_t instances = 0;
  for (const auto& m : g.tasks.models) instances += m.ops.size() + m.modules.size();
  EXPECT_EQ(a.total.op_instances, instances);
  EXPECT_EQ(a.total.tasks, g.tasks.tasks.size());
  cov::LevelFigures sum;
  for (const auto& f : a.levels) {
    EXPECT_GE(f.op_instances, f.tasks) << "L" << f.level;
    EXPECT_GE(f.tasks, f.kinds) << "L" << f.level;
    EXPECT_GE(f.registered_kinds, f.kinds) << "L" << f.level;
    EXPECT_GT(f.kinds, 0u) << "L" << f.level;
    sum.op_instances += f.op_instances, sum.tasks += f.tasks, sum.kinds += f.kinds;
  }
  EXPECT_EQ(sum.op_instances, a.total.op_instances);
  EXPECT_EQ(sum.tasks, a.total.tasks);
  EXPECT_EQ(sum.kinds, a.total.kinds);
  EXPECT_GT(a.total.op_instances, a.total.tasks);  // dedupe merges per-layer instances
  EXPECT_GT(a.total.tasks, a.total.kinds);
}

TEST(Audit, GreedySetCoverCoversEveryNeededKind) {
  const cov::Audit& a = repo().a;
  std::set<std::string> universe;
  for (const auto& r : a.archs) universe.insert(r.kinds.begin(), r.kinds.end());
  EXPECT_EQ(a.needed_kinds, universe.size());
  std::set<std::string> covered;
  ASSERT_FALSE(a.cover.empty());
  for (size_t i = 0; i < a.cover.size(); ++i) {
    const auto& p = a.cover[i];
    const auto* r = arch(a, p.arch);
    ASSERT_NE(r, nullptr) << p.arch;
    EXPECT_FALSE(p.new_kinds.empty()) << p.arch;
    for (const auto& k : p.new_kinds) {
      EXPECT_TRUE(has(r->kinds, k)) << p.arch << " " << k;
      EXPECT_TRUE(covered.insert(k).second) << k << " covered twice";
    }
    EXPECT_EQ(p.covered, covered.size());
    if (i) EXPECT_LE(p.new_kinds.size(), a.cover[i - 1].new_kinds.size());  // greedy gains never grow
  }
  EXPECT_EQ(covered, universe);
  EXPECT_LT(a.cover.size(), a.archs.size());  // a proper subset suffices here
  // The first pick needs the most kinds; ties go to the smaller id.
  const cov::ArchRow* best = &a.archs.front();
  for (const auto& r : a.archs)
    if (r.kinds.size() > best->kinds.size()) best = &r;
  EXPECT_EQ(a.cover.front().arch, best->id);
  EXPECT_EQ(a.cover.front().new_kinds.size(), best->kinds.size());
}

TEST(Audit, RenderingsAgree) {
  const cov::Audit& a = repo().a;
  const auto j = nlohmann::json::parse(cov::render_json(a));
  // JSON matrix == Audit::matrix; CSV == JSON matrix.
  ASSERT_EQ(j["matrix"]["rows"].size(), a.archs.size());
  ASSERT_EQ(j["matrix"]["columns"].size(), a.kinds.size());
  std::map<std::pair<std::string, std::string>, size_t> cells;
  for (const auto& row : j["matrix"]["rows"])
    for (size_t k = 0; k < a.kinds.size(); ++k)
      cells[{row["config"].get<std::string>(), j["matrix"]["columns"][k].get<std::string>()}] = row["cells"][k].get<size_t>();
  auto csv = split(cov::render_csv(a), '\n');
  ASSERT_EQ(csv.size(), a.archs.size() + 1);
  auto header = split(csv[0], ',');
  ASSERT_EQ(header.size(), 3 + a.kinds.size());
  EXPECT_EQ(header[0], "config");
  for (size_t i = 1; i < csv.size(); ++i) {
    auto f = split(csv[i], ',');
    ASSERT_EQ(f.size(), header.size()) << csv[i];
    EXPECT_EQ(f[0], a.archs[i - 1].id);
    EXPECT_EQ(f[1], a.archs[i - 1].family);
    for (size_t c = 3; c < f.size(); ++c) EXPECT_EQ(std::stoul(f[c]), cells.at({f[0], header[c]})) << f[0] << " " << header[c];
  }
  // The markdown operator table: one row per kind with its sharing count and the same cells.
  const std::string md = cov::render_markdown(a);
  std::map<std::string, std::vector<std::string>> md_rows;
  for (const auto& line : split(md, '\n')) {
    if (line.rfind("| `", 0) != 0) continue;
    auto f = split(line, '|');
    std::vector<std::string> cols;
    for (size_t i = 1; i < f.size(); ++i) cols.push_back(trim(f[i]));
    if (cols.size() == 6 + a.archs.size() && cols[1].size() == 2 && cols[1][0] == 'L') md_rows[cols[0]] = cols;
  }
  ASSERT_EQ(md_rows.size(), a.kinds.size());
  size_t position = 0;
  for (const auto& k : j["kinds"]) {
    const std::string name = k["kind"].get<std::string>();
    const auto& cols = md_rows.at("`" + name + "`");
    EXPECT_EQ(cols[1], "L" + std::to_string(k["level"].get<int>())) << name;
    EXPECT_EQ(std::stoul(cols[3]), k["architectures"].size()) << name;
    EXPECT_EQ(std::stoul(cols[4]), k["tasks"].get<size_t>()) << name;
    for (size_t i = 0; i < a.archs.size(); ++i) {
      size_t n = cells.at({a.archs[i].id, name});
      EXPECT_EQ(cols[6 + i], n ? std::to_string(n) : ".") << name << " " << a.archs[i].id;
    }
    EXPECT_EQ(cov::by_sharing(a)[position++]->kind, name);  // JSON kinds are in sharing order
  }
  // Figures in JSON and markdown.
  EXPECT_EQ(j["consolidation"]["total"]["op_instances"].get<size_t>(), a.total.op_instances);
  EXPECT_NE(md.find("| all | " + std::to_string(a.total.op_instances) + " | " + std::to_string(a.total.tasks) + " | " +
                    std::to_string(a.total.kinds) + " | "),
            std::string::npos);
  ASSERT_EQ(j["set_cover"]["picks"].size(), a.cover.size());
  EXPECT_EQ(j["set_cover"]["picks"][0]["arch"], a.cover[0].arch);
  EXPECT_NE(md.find("| 1 | " + a.cover[0].arch + " | +" + std::to_string(a.cover[0].new_kinds.size()) + " | "), std::string::npos);
  // Terminal output names the same first pick and totals.
  const std::string term = cov::render_terminal(a);
  EXPECT_NE(term.find(a.cover[0].arch), std::string::npos);
  EXPECT_NE(term.find(std::to_string(a.total.op_instances)), std::string::npos);
  EXPECT_EQ(md.rfind("<!-- @generated by fastkernels", 0), 0u);
}

TEST(AuditCli, CommittedCoverageDocIsUpToDate) {
  std::string out;
  EXPECT_EQ(run(bin() + " audit --check --root " + q(source_dir()), &out), 0) << out;
  EXPECT_NE(out.find("docs/coverage.md is up to date"), std::string::npos) << out;
}

TEST(AuditCli, CheckDetectsMissingAndStaleDocs) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  const fs::path doc = tmp.path() / "docs" / "coverage.md";
  std::string out;
  EXPECT_EQ(run(bin() + " audit --check --root " + q(tmp.path()), &out), 3) << out;
  EXPECT_NE(out.find("missing: docs/coverage.md"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "docs"));  // --check writes nothing
  ASSERT_EQ(run(bin() + " audit --write-docs --root " + q(tmp.path()), &out), 0) << out;
  EXPECT_NE(out.find("wrote    docs/coverage.md"), std::string::npos) << out;
  EXPECT_EQ(run(bin() + " audit --check --root " + q(tmp.path()), &out), 0) << out;
  ASSERT_EQ(run(bin() + " audit --write-docs --root " + q(tmp.path()), &out), 0) << out;
  EXPECT_NE(out.find("unchanged docs/coverage.md"), std::string::npos) << out;
  spit(doc, slurp(doc) + "edited by hand\n");
  EXPECT_EQ(run(bin() + " audit --check --root " + q(tmp.path()), &out), 3) << out;
  EXPECT_NE(out.find("stale:   docs/coverage.md"), std::string::npos) << out;
  EXPECT_NE(out.find("run `fastkernels audit --write-docs`"), std::string::npos) << out;
  // A new config changes the figures: the doc goes stale.
  ASSERT_EQ(run(bin() + " audit --write-docs --root " + q(tmp.path()), &out), 0) << out;
  fs::remove_all(tmp.path() / "hf_configs" / "tiny" / "qwen3-moe");
  EXPECT_EQ(run(bin() + " audit --check --root " + q(tmp.path()), &out), 3) << out;
}

TEST(AuditCli, WritesEveryFormatDeterministically) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  const std::string outputs = " --markdown " + q(tmp.path() / "o" / "a.md") + " --csv " + q(tmp.path() / "o" / "m.csv") +
                              " --json " + q(tmp.path() / "o" / "a.json");
  ASSERT_EQ(run(bin() + " audit --root " + q(tmp.path()) + outputs, &out), 0) << out;
  EXPECT_NE(out.find("fastkernels audit: 5 architecture(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("set cover"), std::string::npos) << out;
  const std::string md = slurp(tmp.path() / "o" / "a.md"), csv = slurp(tmp.path() / "o" / "m.csv"),
                    js = slurp(tmp.path() / "o" / "a.json");
  ASSERT_FALSE(md.empty());
  // The tiny fixture: 5 configs, 85 tasks (as `list` counts them).
  const auto j = nlohmann::json::parse(js);
  EXPECT_EQ(j["architectures"].size(), 5u);
  EXPECT_EQ(j["consolidation"]["total"]["tasks"].get<size_t>(), 85u);
  EXPECT_EQ(split(csv, '\n').size(), 6u);
  EXPECT_EQ(md.find(tmp.path().string()), std::string::npos);  // no absolute paths
  // Same bytes on a second run; --markdown holds what --write-docs writes.
  ASSERT_EQ(run(bin() + " audit --write-docs --root " + q(tmp.path()) + outputs, &out), 0) << out;
  EXPECT_NE(out.find("unchanged " + (tmp.path() / "o" / "m.csv").string()), std::string::npos) << out;
  EXPECT_EQ(slurp(tmp.path() / "o" / "a.json"), js);
  EXPECT_EQ(slurp(tmp.path() / "docs" / "coverage.md"), md);
}

TEST(AuditCli, BadOutputPathsAreClearErrors) {
  TempDir tmp;
  make_repo(fixtures() / "golden" / "root", tmp.path());
  std::string out;
  fs::create_directories(tmp.path() / "adir");
  EXPECT_EQ(run(bin() + " audit --root " + q(tmp.path()) + " --json " + q(tmp.path() / "ok.json") + " --csv " +
                    q(tmp.path() / "adir"),
                &out),
            2)
      << out;
  EXPECT_NE(out.find("--csv " + (tmp.path() / "adir").string() + ": is a directory; expected a file path"), std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "ok.json"));  // nothing written when any output path is bad
  EXPECT_EQ(run(bin() + " audit --root " + q(tmp.path()) + " --json " + q(tmp.path() / "x.json") + " --markdown " +
                    q(tmp.path() / "x.json"),
                &out),
            2)
      << out;
  EXPECT_NE(out.find("named by another output option too"), std::string::npos) << out;
  spit(tmp.path() / "afile", "x\n");
  EXPECT_EQ(run(bin() + " audit --root " + q(tmp.path()) + " --json " + q(tmp.path() / "afile" / "sub" / "a.json"), &out), 2)
      << out;
  EXPECT_NE(out.find("--json " + (tmp.path() / "afile" / "sub" / "a.json").string() + ": "), std::string::npos) << out;
  EXPECT_NE(out.find("afile is not a directory"),
            std::string::npos)
      << out;
  EXPECT_EQ(run(bin() + " audit --check --write-docs --root " + q(tmp.path()), &out), 2) << out;
  EXPECT_EQ(run(bin() + " audit --check --csv x.csv --root " + q(tmp.path()), &out), 2) << out;
}

TEST(AuditCli, HelpDocumentsTheCheckExitCode) {
  std::string out;
  ASSERT_EQ(run(bin() + " audit --help", &out), 0) << out;
  EXPECT_NE(out.find("`audit --check`: 3 when docs/coverage.md is out of date"), std::string::npos) << out;
  EXPECT_NE(out.find("--write-docs"), std::string::npos) << out;
}

}  // namespace
}  // namespace fk::gen
