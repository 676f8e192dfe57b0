// The whole-model path (L4 tasks through fk::Engine) on reduced-depth models: CUDA-graph decode
// is the eager decode; a decode step after the KV cache was filled agrees with a prefill over
// the same tokens (positions, slots and cache reads line up); weights round-trip through
// safetensors by their HF names.
#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "fk/runtime/engine.h"
#include "fk/runtime/safetensors.h"
#include "fk/runtime/task.h"
#include "fk/tasks/harness.h"
#include "fk/tasks/llama.h"
#include "gpu_test_util.h"

namespace {

std::vector<const fk::TaskInfo*> models() {
  std::vector<const fk::TaskInfo*> out;
  for (const fk::TaskInfo* t : fk::all_tasks())
    if (t->level == 4 && t->make_model && t->tp_size == 1) out.push_back(t);  // sharded models run in a tensor-parallel group
  return out;
}

std::vector<std::vector<int64_t>> prompts(int64_t vocab) {
  std::vector<std::vector<int64_t>> p = {std::vector<int64_t>(5), std::vector<int64_t>(17), std::vector<int64_t>(2)};
  int64_t x = 12345;
  for (auto& s : p)
    for (auto& t : s) t = (x = (x * 1103515245 + 12345) % 2147483648LL) % vocab;
  return p;
}

std::vector<float> host_f32(const fk::Tensor& t, cudaStream_t s) {
  fk::StreamGuard g(s);
  fk::Tensor f = fk::tasks::to_f32(t);
  return fk::to_host<float>(f);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class WholeModel : public ::testing::TestWithParam<const fk::TaskInfo*> {};

TEST_P(WholeModel, GraphDecodeEqualsEagerAndPrefill) {
  FK_REQUIRE_GPU();
  auto model = GetParam()->make_model(2);
  ASSERT_EQ(model->num_layers(), 2);
  fk::tasks::init_params(model->named_parameters(), 7);
  const auto p = prompts(model->vocab_size());
  constexpr int kSteps = 6;
  std::vector<int64_t> tokens[2];
  std::vector<float> last[2];
  for (int graph = 0; graph < 2; ++graph) {
    fk::Engine e(*model, 3, 64, kSteps);
    e.prefill(p);
    for (int s = 0; s < kSteps; ++s) e.decode_step(graph == 1);
    tokens[graph] = e.tokens();
    last[graph] = host_f32(e.last_logits(), e.stream());
  }
  ASSERT_EQ(tokens[0].size(), size_t(3 * (kSteps + 1)));
  EXPECT_EQ(tokens[0], tokens[1]) << "graph replay chose other tokens than eager decode";
  EXPECT_LE(rel_l2(last[1], last[0]), 1e-6) << "graph replay logits differ from eager decode";

  // Teacher forcing: prefill over prompt + the tokens fed by decode steps 1..kSteps must give
  // (nearly) the logits of the last decode step.
  std::vector<std::vector<int64_t>> forced = p;
  for (size_t b = 0; b < p.size(); ++b)
    for (int s = 0; s < kSteps; ++s) forced[b].push_back(tokens[0][b * (kSteps + 1) + s]);
  fk::Engine e(*model, 3, 64, 0);
  const auto prefill_last = host_f32(e.prefill(forced), e.stream());
  EXPECT_LE(rel_l2(prefill_last, last[0]), 0.02) << "decode over the KV cache disagrees with prefill of the same tokens";
  const int64_t V = model->vocab_size();
  int agree = 0;
  for (int b = 0; b < 3; ++b) {
    int64_t arg = 0;
    for (int64_t v = 1; v < V; ++v)
      if (prefill_last[b * V + v] > prefill_last[b * V + arg]) arg = v;
    agree += arg == tokens[0][b * (kSteps + 1) + kSteps];
  }
  EXPECT_GE(agree, 2) << "greedy tokens after prefill and after decode disagree for most sequences";
}

// Note [Teacher-forced check] (runtime/runner/model_main.cu): forcing a build's own greedy tokens
// replays its greedy run exactly; forcing other tokens feeds them (the logits follow them); the
// fp32 reference over prompt + fed tokens scores every step's row within the whole-model bound.
TEST_P(WholeModel, TeacherForcedStepsMatchTheReferenceOverTheForcedSequence) {
  FK_REQUIRE_GPU();
  auto model = GetParam()->make_model(2);
  fk::tasks::init_params(model->named_parameters(), 11);
  const auto p = prompts(model->vocab_size());
  constexpr int kSteps = 5;
  const int64_t V = model->vocab_size(), B = static_cast<int64_t>(p.size());
  fk::Engine free_run(*model, B, 64, kSteps);
  free_run.prefill(p);
  for (int s = 0; s < kSteps; ++s) free_run.decode_step(true);
  const std::vector<int64_t> own = free_run.tokens();
  std::vector<std::vector<int64_t>> own_rows, other_rows;
  for (int64_t b = 0; b < B; ++b) {
    own_rows.emplace_back(own.begin() + b * (kSteps + 1), own.begin() + (b + 1) * (kSteps + 1));
    std::vector<int64_t> o;
    for (int s = 0; s <= kSteps; ++s) o.push_back((own_rows.back()[s] + 7 * s + 1) % V);  // never the own pick
    other_rows.push_back(o);
  }
  for (int variant = 0; variant < 2; ++variant) {
    const auto& fed = variant == 0 ? own_rows : other_rows;
    fk::Engine e(*model, B, 64, kSteps);
    e.force_tokens(fed);
    std::vector<std::vector<float>> rows(B);  // [b] -> (kSteps + 1) x V
    auto record = [&](const fk::Tensor& logits) {
      const auto h = host_f32(logits, e.stream());
      for (int64_t b = 0; b < B; ++b) rows[b].insert(rows[b].end(), h.begin() + b * V, h.begin() + (b + 1) * V);
    };
    record(e.prefill(p));
    for (int s = 0; s < kSteps; ++s) {
      e.decode_step(true);
      record(e.last_logits());
    }
    if (variant == 0) EXPECT_EQ(e.tokens(), own) << "forcing the own greedy tokens must replay the greedy run";
    std::vector<std::vector<int64_t>> seqs, at;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> q = p[b];
      q.insert(q.end(), fed[b].begin(), fed[b].begin() + kSteps);
      seqs.push_back(q);
      std::vector<int64_t> r;
      for (int s = 0; s <= kSteps; ++s) r.push_back(static_cast<int64_t>(p[b].size()) - 1 + s);
      at.push_back(r);
    }
    std::vector<float> ref;
    {
      fk::StreamGuard g(e.stream());  // the reference ran on the engine's (non-blocking) stream
      ref = fk::to_host<float>(e.reference_logits(seqs, at));
    }
    ASSERT_EQ(ref.size(), static_cast<size_t>(B * (kSteps + 1) * V));
    // The whole-model bound of the L4 checks, for every row of a dense model. An MoE model's row
    // can be far off where the bf16 router picks another expert than the fp32 one for a token (the
    // reference here adopts no routing; measured on gpt-oss at 2 layers: up to 11 of 18 rows beyond
    // the bound, up to 0.34): there no row may be unrelated to the reference (rel L2 < 0.5).
    bool moe = false;
    for (const auto& q : model->named_parameters()) moe |= q.name.find("experts") != std::string::npos;
    const double bound = fk::tasks::depth_tolerance(2).max_rel_l2;
    int beyond = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int s = 0; s <= kSteps; ++s) {
        const std::vector<float> got(rows[b].begin() + s * V, rows[b].begin() + (s + 1) * V);
        const std::vector<float> want(ref.begin() + (b * (kSteps + 1) + s) * V, ref.begin() + (b * (kSteps + 1) + s + 1) * V);
        const double err = rel_l2(got, want);
        beyond += err > bound;
        EXPECT_LE(err, moe ? 0.5 : bound) << (variant ? "other" : "own") << " tokens, sequence " << b << " step " << s;
      }
    if (moe) std::printf("%s tokens: %d of %d rows beyond %.4f (MoE routing flips)\n", variant ? "other" : "own", beyond,
                         static_cast<int>(B * (kSteps + 1)), bound);
    EXPECT_THROW(e.decode_step(true), std::exception) << "the reference overwrote the KV cache: decoding on must be refused";
  }
  fk::Engine e(*model, B, 64, kSteps);
  EXPECT_THROW(e.force_tokens({{1, 2}}), std::exception) << "a row of the wrong length must be refused";
}

TEST_P(WholeModel, WeightsRoundTripByHFName) {
  FK_REQUIRE_GPU();
  auto model = GetParam()->make_model(1);
  const auto params = model->named_parameters();
  fk::tasks::init_params(params, 3);
  ASSERT_FALSE(params.empty());
  EXPECT_EQ(params.front().name, "model.embed_tokens.weight");
  bool has_q = false, has_gate = false;
  for (const auto& q : params) {
    has_q |= q.name == "model.layers.0.self_attn.q_proj.weight" ||
             q.name == "model.layers.0.self_attn.q_a_proj.weight";  // DeepSeek MLA with a q LoRA: no q_proj
    has_gate |= q.name == "model.layers.0.mlp.gate_proj.weight" ||  // dense MLP: the HF part of gate_up
                q.name == "model.layers.0.mlp.experts.gate_up_proj";   // MoE: HF transformers 5 fused experts
  }
  EXPECT_TRUE(has_q && has_gate) << "fused qkv / gate_up weights must appear by their HF names";
  std::vector<uint64_t> prints;
  for (const auto& q : params) prints.push_back(fk::fingerprint(q.tensor));
  const std::string path = ::testing::TempDir() + "fk_model_weights_" + std::to_string(::getpid()) + ".safetensors";
  fk::save_weights(*model, path);
  auto other = GetParam()->make_model(1);
  const auto oparams = other->named_parameters();
  auto f = fk::SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), oparams.size());
  fk::load_weights(*other, path);
  for (size_t i = 0; i < oparams.size(); ++i) EXPECT_EQ(fk::fingerprint(oparams[i].tensor), prints[i]) << oparams[i].name;
  std::remove(path.c_str());
}

std::string name_of(const ::testing::TestParamInfo<const fk::TaskInfo*>& info) {
  std::string n = info.param->name;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(L4, WholeModel, ::testing::ValuesIn(models()), name_of);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(WholeModel);

}  // namespace
