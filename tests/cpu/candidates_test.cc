// `fastkernels scaffold` and `fastkernels check` (docs/candidates.md). The check tests need the
// Clang LibTooling build (FK_WITH_LIBTOOLING); without it they are skipped, and one test asserts
// that `check` says so with exit 2.
#include <gtest/gtest.h>

#include "test_util.h"

namespace fk::gen {
namespace {

using namespace fk::gen::testing;

const char* kTask = "rms_norm_h4096_eps1e-05_bf16";

bool has_libtooling() {
  std::string out;
  return run(bin() + " check --root " + q(source_dir()) + " /nonexistent.cu", &out) != 2 ||
         out.find("without Clang LibTooling") == std::string::npos;
}

// ---- scaffold ---------------------------------------------------------------------------------

TEST(Scaffold, L1TaskCopiesTheGeneratedInterface) {
  TempDir tmp;
  std::string out;
  ASSERT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --task " + kTask + " --out " + q(tmp.path()), &out), 0) << out;
  const fs::path f = tmp.path() / "L1" / (std::string(kTask) + ".cu");
  ASSERT_TRUE(fs::exists(f)) << out;
  const std::string s = slurp(f);
  for (const char* line : {
           "#include \"fk/tasks/rms_norm.h\"\n",
           "namespace fk::generated::rms_norm_h4096_eps1e_05_bf16 {\n",
           "  static constexpr int64_t hidden_size = 4096;\n",
           "class RMSNorm {\n",
           "  explicit RMSNorm(int64_t hidden_size, double eps = 1e-6)\n",
           "  // TODO: replace with your kernel",
           "  fk::Tensor forward(const fk::Tensor& x) { return fk::tasks::rms_norm_forward<Config>(x, weight, variance_epsilon); }\n",
           "  std::tuple<fk::Tensor, fk::Tensor> forward(fk::Tensor& x, fk::Tensor& residual) {\n",
           "`fastkernels check` reports SUSPECT (baseline-call)",
       })
    EXPECT_NE(s.find(line), std::string::npos) << "missing: " << line << "\n---\n" << s;
  EXPECT_EQ(s.find("@generated"), std::string::npos) << "a candidate is edited by hand: no @generated banner";
  EXPECT_EQ(s.find("#pragma once"), std::string::npos);
  // Two forward overloads, two TODO markers.
  size_t n = 0;
  for (size_t p = s.find("// TODO: replace with your kernel"); p != std::string::npos; p = s.find("// TODO: replace with your kernel", p + 1)) ++n;
  EXPECT_EQ(n, 2u);
  // Deterministic.
  TempDir tmp2;
  ASSERT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --task " + kTask + " --out " + q(tmp2.path()), &out), 0) << out;
  EXPECT_EQ(slurp(tmp2.path() / "L1" / (std::string(kTask) + ".cu")), s);
}

TEST(Scaffold, RefusesToOverwriteUnlessForced) {
  TempDir tmp;
  std::string out;
  const std::string cmd = bin() + " scaffold --root " + q(source_dir()) + " --task " + kTask + " --out " + q(tmp.path());
  ASSERT_EQ(run(cmd, &out), 0) << out;
  const fs::path f = tmp.path() / "L1" / (std::string(kTask) + ".cu");
  spit(f, "// my work\n");
  EXPECT_EQ(run(cmd, &out), 1) << out;
  EXPECT_NE(out.find("already exists; refusing to overwrite"), std::string::npos) << out;
  EXPECT_NE(out.find(kTask), std::string::npos) << out;
  EXPECT_EQ(slurp(f), "// my work\n");
  EXPECT_EQ(run(cmd + " --force", &out), 0) << out;
  EXPECT_NE(slurp(f).find("class RMSNorm"), std::string::npos);
}

TEST(Scaffold, UnknownTaskListsCloseNames) {
  std::string out;
  EXPECT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --task rms_norm_h4095_eps1e-05_bf16 --out /nonexistent", &out), 1) << out;
  EXPECT_NE(out.find("unknown task \"rms_norm_h4095_eps1e-05_bf16\""), std::string::npos) << out;
  EXPECT_NE(out.find("  rms_norm_h4096_eps1e-05_bf16"), std::string::npos) << out;
  EXPECT_EQ(run(bin() + " scaffold --root " + q(source_dir()), &out), 2) << out;  // neither --task nor --arch
}

TEST(Scaffold, ArchSelectsEveryTaskOfTheConfig) {
  // Count the config's tasks in the manifest independently (by its archs lists).
  const std::string manifest = slurp(source_dir() / "generated" / "manifest.json");
  const std::string arch = "meta-llama/Llama-3.1-8B-Instruct";
  TempDir tmp;
  std::string out;
  ASSERT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --arch " + arch + " --out " + q(tmp.path()), &out), 0) << out;
  size_t written = read_tree(tmp.path()).size();
  std::string list;
  ASSERT_EQ(run(bin() + " list --tasks --root " + q(source_dir()), &list), 0);
  size_t expected = 0;
  std::istringstream in(list);
  for (std::string line; std::getline(in, line);)
    if (line.find(" kind=") != std::string::npos &&
        (line.find(arch + ",") != std::string::npos || line.find(arch + ")") != std::string::npos))  // not its layouts' ids (arch@tp2)
      ++expected;
  EXPECT_GT(expected, 10u);
  EXPECT_EQ(written, expected) << out;
  EXPECT_NE(out.find(std::to_string(expected) + " candidate(s) scaffolded"), std::string::npos) << out;
  // --level filters.
  TempDir tmp2;
  ASSERT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --arch " + arch + " --level 4 --out " + q(tmp2.path()), &out), 0) << out;
  EXPECT_EQ(read_tree(tmp2.path()).size(), 1u) << out;
  EXPECT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --arch no-such-model --out " + q(tmp2.path()), &out), 1) << out;
}

// ---- check ------------------------------------------------------------------------------------

TEST(Check, WithoutLibToolingExitsTwoAndSaysHow) {
  if (has_libtooling()) GTEST_SKIP() << "built with Clang LibTooling";
  std::string out;
  EXPECT_EQ(run(bin() + " check --root " + q(source_dir()) + " " + q(fixtures() / "candidates" / "good_rms_norm.cu"), &out), 2);
  EXPECT_NE(out.find("-DFK_WITH_LIBTOOLING=ON"), std::string::npos) << out;
}

struct Case {
  const char* file;
  int rc;
  std::vector<const char*> needles;
};

TEST(Check, FixtureSuite) {
  if (!has_libtooling()) GTEST_SKIP() << "fastkernels was built without Clang LibTooling (FK_WITH_LIBTOOLING=OFF)";
  const std::vector<Case> cases = {
      {"good_rms_norm.cu", 0, {"PASSED (task rms_norm_h4096_eps1e-05_bf16"}},
      {"bad_class_name.cu", 1, {"error: [INTERFACE_MISMATCH] missing class `RMSNorm`", "(the candidate defines: Config, RmsNorm)"}},
      {"bad_param_type.cu", 1, {"RMSNorm::forward: parameter 1 `x` has type `const fk::Tensor *`, expected `const fk::Tensor &`",
                                "note: expected signature: fk::Tensor forward(const fk::Tensor & x)"}},
      {"bad_const_ref.cu", 1, {"parameter 2 `residual` has type `const fk::Tensor &`, expected `fk::Tensor &`"}},
      {"bad_return_type.cu", 1, {"RMSNorm::forward: returns `fk::Tensor`, expected `std::tuple<fk::Tensor, fk::Tensor>`"}},
      {"bad_missing_ctor.cu", 1, {"missing RMSNorm constructor: expected `explicit RMSNorm(int64_t hidden_size, double eps = 1e-6)`",
                                  "unexpected RMSNorm constructor overload `RMSNorm()`"}},
      {"bad_cublas.cu", 5, {"warning: [SUSPECT:vendor-library] uses `cublasHandle_t`", "SUSPECT (task"}},
      {"bad_baseline_call.cu", 5, {"[SUSPECT:baseline-call] calls the baseline kernel `fk::kernels::fused_add_rms_norm`",
                                   "[SUSPECT:baseline-call] calls the baseline glue `fk::tasks::fused_add_rms_norm_forward`"}},
      {"bad_stream.cu", 5, {"[SUSPECT:stream-create] creates a stream (`cudaStreamCreateWithFlags`)",
                            "[SUSPECT:foreign-stream] kernel launch `my_rms_norm<kAdd><<<...>>>` on a stream that is not fk::current_stream()"}},
      {"bad_host_timing.cu", 5, {"[SUSPECT:host-sync-timing] `std::chrono::steady_clock::now`",
                                 "[SUSPECT:host-sync-timing] `cudaDeviceSynchronize`",
                                 "[SUSPECT:static-cache] static local `cached` of type `fk::Tensor`"}},
      {"bad_compiler_branch.cu", 5, {"[SUSPECT:preprocessor-branch] `#ifndef` on `__clang__`, which tells the compilers apart"}},
      {"bad_host_thread.cu", 5, {"[SUSPECT:host-thread] `std::thread`"}},
      {"bad_function_pointer.cu", 5, {"[SUSPECT:baseline-call] calls the baseline glue `fk::tasks::rms_norm_forward`"}},
      {"bad_device_pass_call.cu", 5, {"[SUSPECT:baseline-call] calls the baseline kernel `fk::kernels::to_float`"}},
      {"bad_local_include.cu", 5, {"[SUSPECT:local-include] `#include \"helpers/fast_path.cuh\"`"}},
      {"../candidates_runtime/bad_persisting_l2/L1/silu_and_mul_i14336_bf16.cu", 5,
       {"[SUSPECT:persisting-l2] `cudaDeviceSetLimit`", "[SUSPECT:persisting-l2] `cudaStreamSetAttribute`"}},
  };
  for (const auto& c : cases) {
    std::string out;
    const fs::path f = fixtures() / "candidates" / c.file;
    int rc = run(bin() + " check --root " + q(source_dir()) + " " + q(f), &out);
    EXPECT_EQ(rc, c.rc) << c.file << ":\n" << out;
    for (const char* n : c.needles) EXPECT_NE(out.find(n), std::string::npos) << c.file << ": missing `" << n << "` in:\n" << out;
    if (c.rc != 0) EXPECT_NE(out.find(f.string() + ":"), std::string::npos) << "diagnostics carry file:line:col\n" << out;
  }
}

TEST(Check, TaskOptionAndUnknownTask) {
  if (!has_libtooling()) GTEST_SKIP() << "built without Clang LibTooling";
  std::string out;
  const fs::path good = fixtures() / "candidates" / "good_rms_norm.cu";
  EXPECT_EQ(run(bin() + " check --root " + q(source_dir()) + " --task " + kTask + " " + q(good), &out), 0) << out;
  // Against another task's header: the namespace is missing there.
  EXPECT_EQ(run(bin() + " check --root " + q(source_dir()) + " --task rms_norm_h3584_eps1e-06_bf16 " + q(good), &out), 1) << out;
  EXPECT_EQ(run(bin() + " check --root " + q(source_dir()) + " --task rms_norm_h4095 " + q(good), &out), 2) << out;
  EXPECT_NE(out.find("unknown task `rms_norm_h4095`"), std::string::npos) << out;
}

// Every scaffold (= every generated interface) parses through the checker's CUDA shim with no
// error, matches its header, and is flagged only for its baseline calls.
TEST(Check, EveryScaffoldMatchesItsHeader) {
  if (!has_libtooling()) GTEST_SKIP() << "built without Clang LibTooling";
  TempDir tmp;
  std::string out;
  ASSERT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --arch Qwen/Qwen3-8B --out " + q(tmp.path()), &out), 0) << out;
  for (const auto& [rel, text] : read_tree(tmp.path())) {
    int rc = run(bin() + " check --root " + q(source_dir()) + " " + q(tmp.path() / rel), &out);
    EXPECT_TRUE(rc == 5 || rc == 0) << rel << ":\n" << out;
    EXPECT_EQ(out.find("INTERFACE_MISMATCH"), std::string::npos) << rel << ":\n" << out;
    EXPECT_EQ(out.find("COMPILE_ERROR"), std::string::npos) << rel << ":\n" << out;
    EXPECT_EQ(out.find("error(s) in included files"), std::string::npos) << rel << ":\n" << out;
  }
}

// The MoE, MLA and multi-GPU kinds include the TMA / driver-API / PDL parts of fk's kernel headers: their scaffolds
// parse through the shim too (it once lacked CUtensorMap, cudaLaunchKernelEx and the warp reductions), and the
// all-to-all's dispatch / combine glue is flagged as baseline like every *_forward.
TEST(Check, MoeMlaAndCollectiveScaffoldsParse) {
  if (!has_libtooling()) GTEST_SKIP() << "built without Clang LibTooling";
  TempDir tmp;
  std::string out;
  for (const char* task : {"fused_experts_e256_top8_h7168_i2048_bf16", "sparse_moe_block_e128_top8_h2048_i768_renorm_ep2_bf16",
                           "deepseek_moe_h7168_e256_top8_g8_tg4_sigmoid_renorm_rs2.5_bias_i2048_shared2048_bf16",
                           "ep_all_to_all_e256_top8_h7168_ep2_bf16", "matmul_reduce_scatter_k7168_n4096_tp2_bf16",
                           "all_gather_matmul_k4096_n14336_tp2_bf16", "reduce_scatter_n4096_tp2_bf16",
                           "mla_decode_hq128_kv512_r64_scale0.1352337788608801_bf16", "mla_prefill_hq128_dqk192_dv128_causal_scale0.1352337788608801_bf16",
                           "grouped_topk_e256_top8_g8_tg4_sigmoid_renorm_rs2.5_bias_bf16"})
    ASSERT_EQ(run(bin() + " scaffold --root " + q(source_dir()) + " --task " + task + " --out " + q(tmp.path()), &out), 0) << out;
  int checked = 0;
  for (const auto& [rel, text] : read_tree(tmp.path())) {
    int rc = run(bin() + " check --root " + q(source_dir()) + " " + q(tmp.path() / rel), &out);
    EXPECT_TRUE(rc == 5 || rc == 0) << rel << ":\n" << out;
    EXPECT_EQ(out.find("INTERFACE_MISMATCH"), std::string::npos) << rel << ":\n" << out;
    EXPECT_EQ(out.find("COMPILE_ERROR"), std::string::npos) << rel << ":\n" << out;
    EXPECT_EQ(out.find("does not parse"), std::string::npos) << rel << ":\n" << out;
    if (rel.find("ep_all_to_all_") != std::string::npos) {
      EXPECT_NE(out.find("baseline glue `fk::tasks::ep_dispatch_forward`"), std::string::npos) << out;
      EXPECT_NE(out.find("baseline glue `fk::tasks::ep_combine_forward`"), std::string::npos) << out;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 10);
  // The all-to-all candidate fixtures (tests/fixtures/candidates_ep) keep the generated interface: both pass statically
  // (the bad one is caught when run).
  for (const char* set : {"good_ep_all_to_all_nccl", "bad_ep_skip_remote"}) {
    const fs::path f = fixtures() / "candidates_ep" / set / "L1" / "ep_all_to_all_e128_top8_h2048_ep2_bf16.cu";
    EXPECT_EQ(run(bin() + " check --root " + q(source_dir()) + " " + q(f), &out), 0) << set << ":\n" << out;
    EXPECT_NE(out.find("PASSED"), std::string::npos) << set << ":\n" << out;
  }
}

}  // namespace
}  // namespace fk::gen
