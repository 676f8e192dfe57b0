// fk_model: runs a whole generated model (an L4 task) — greedy generation, the dump the HF
// transformers parity check reads, and end-to-end throughput.
//
//   fk_model --list
//   fk_model --arch meta-llama/Llama-3.1-8B-Instruct --layers 4 --save-weights w.safetensors \
//            --dump d.safetensors --prompt-lens 7,33,64,128 --decode-steps 64
//   fk_model --arch meta-llama/Llama-3.1-8B-Instruct --bench --jsonl r.jsonl --markdown r.md
//   fk_model --arch Qwen/Qwen2.5-7B-Instruct --greedy g.json --decode-steps 64   (candidate comparison)
//   fk_model --arch Qwen/Qwen2.5-7B-Instruct --teacher-forced tf.json --force-tokens base/g.json
//   fk_model --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep-text \
//            --vision-arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --layers 4 --vision-layers 4 \
//            --dump d.safetensors --bench   (a vision-language model: images + prompts, Note [Multimodal prefill])
//   fk_model --arch google-bert/bert-base-uncased --layers 4 --dump d.safetensors   (an encoder: per-layer
//            hidden states and pooled vectors; --bench times whole batches, --list says which runner)
//   fk_launch --nproc 2 -- fk_model --arch meta-llama/Llama-3.1-8B-Instruct --tp 2 --greedy g.json --bench
//            (the config's tp2 layout, one process per GPU: Note [Tensor-parallel runs])
//
// The dump and weights formats are the contract with bench/parity/hf_parity.py (docs/parity.md).
// Exit codes: 0 ok; 1 runtime failure; 2 usage error; 3 no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fk/runtime/cuda_check.h"
#include "fk/runtime/dist.h"
#include "fk/runtime/engine.h"
#include "fk/runtime/env.h"
#include "fk/runtime/parallel_state.h"
#include "fk/runtime/random.h"
#include "fk/runtime/runner.h"
#include "fk/runtime/safetensors.h"
#include "fk/runtime/task.h"
#include "fk/tasks/cross_encoder_input.h"
#include "fk/tasks/forward_context.h"
#include "fk/tasks/harness.h"
#include "fk/tasks/llama.h"
#include "fk/tasks/reference_ops.h"

namespace {

using fk::Tensor;

struct Options {
  std::string arch;
  int64_t layers = 0;
  uint64_t seed = 1;
  std::string load_weights, save_weights, dump, greedy, teacher_forced, force_tokens;
  std::vector<int64_t> prompt_lens = {7, 33, 64, 128};
  int64_t decode_steps = 64;
  bool no_graph = false;
  bool bench = false;
  std::vector<int64_t> decode_batches = {1, 8, 32, 64};
  int64_t prompt_len = 128;
  std::vector<std::string> prefill = {"1x2048", "8x2048"};
  int64_t mem_steps = 1000;
  std::string jsonl, markdown;
  int64_t images = 4;                              ///< image encoders: images of the dump
  std::vector<int64_t> image_batches = {1, 8, 32};  ///< image encoders: batches timed
  /// vision towers: the dump's grids "TxHxW" in patches (default: the served size, a smaller
  /// non-square image and a two-frame video)
  std::vector<std::string> grids;
  /// vision-language models (--vision-arch): the vision tower's config id, its depth (0: the config's),
  /// its weights, and where the composite config (the special token ids) is read
  std::string vision_arch, load_vision_weights, save_vision_weights, config_root = "hf_configs";
  int64_t vision_layers = 0;
  int tp = 1;  ///< tensor-parallel ranks (Note [Tensor-parallel runs])
  int ep = 1;  ///< expert-parallel ranks (Note [Expert-parallel MoE] in fk/tasks/moe.h: inside the tensor-parallel group)
  /// --ep without --tp: data-parallel attention (Note [Data-parallel runs]).
  bool data_parallel() const { return ep > 1 && tp == 1; }
  /// The job's ranks: the tensor-parallel size, or the expert-parallel one at a data-parallel layout.
  int ranks() const { return tp > 1 ? tp : ep; }
};

// Note [Tensor-parallel runs]
// `--tp N` runs the config's @tpN layout (Note [Parallel layouts]): one process per GPU, started by
// fk_launch, torchrun or mpirun (their environment names the rank, the world and the rendezvous),
// each building the sharded model, taking its slice of the same weights (seeded or loaded:
// Note [Sharded parameters]) and joining one tensor-parallel group (GroupCoordinator: the own peer
// all-reduce where it serves, NCCL otherwise). Every rank runs the same steps; the logits are
// gathered on every rank, so every rank picks the same greedy tokens. `--teacher-forced` (fed the
// TP-1 run's greedy tokens with --force-tokens) scores every step's logits against the unsharded
// model's composite reference, computed from the ranks' slices (Note [Sharded references] in
// fk/tasks/llama.h), so bench/tp_tokens.py --teacher-forced can hold each row's error to the TP-1
// run's. Rank 0 writes the files; the bench's times are every rank's, reported per rank and as the slowest. A rank that fails ends the
// job (the communicator's abort; fk_launch ends the others).
//
// Note [Data-parallel runs]
// `--ep N` without --tp runs the config's @epN layout (Note [Data-parallel expert MoE] in fk/tasks/moe.h): N processes
// as above in one group, each holding the whole attention and its share of the experts, each running its own prompts
// (vLLM's data-parallel ranks serve different requests). Rank 0's prompts are the TP-1 run's (the same seed), so its
// greedy and teacher-forced files compare with the TP-1 run's like a tensor-parallel run's; every other rank draws
// its own (data_seed), of the same lengths: every rank runs the same batch shapes in lockstep, as vLLM pads its
// data-parallel ranks to one token count. Rank 0 writes the files; the bench's times are the slowest rank's.
fk::dist::TcpStore* g_store = nullptr;  ///< the job's store under --tp / --ep (null otherwise)
bool g_data_parallel = false;           ///< Note [Data-parallel runs]
/// A model id of a data-parallel layout ("org/name@ep2": Note [Data-parallel runs]).
bool data_parallel_arch(const std::string& arch) { return arch.find("@ep") != std::string::npos; }
/// The seed of a draw of prompts: `seed` on rank 0 and outside a data-parallel run, the rank's own elsewhere (Note
/// [Data-parallel runs]).
uint64_t data_seed(uint64_t seed) { return g_data_parallel && fk::dist::tp_rank() > 0 ? fk::mix_seed(seed, 7000 + uint64_t(fk::dist::tp_rank())) : seed; }
bool writes_files() { return fk::dist::tp_world_size() == 1 || fk::dist::tp_rank() == 0; }
/// Every rank's value of `v` (one store round; rank order), {v} outside a tensor-parallel job.
std::vector<double> all_ranks(const std::string& key, double v) {
  if (g_store == nullptr) return {v};
  static int round = 0;
  std::ostringstream os;
  os << std::setprecision(17) << v;
  std::vector<double> out;
  for (const std::string& x : g_store->all_gather("fk_model/" + std::to_string(round++) + "/" + key, os.str())) out.push_back(std::stod(x));
  return out;
}

template <class T> void add_host(fk::SafetensorsWriter& w, const std::string& name, const char* dtype, std::vector<int64_t> shape,
                                 const std::vector<T>& v) {
  w.add(name, dtype, std::move(shape), v.data(), v.size() * sizeof(T));
}

const fk::TaskInfo* find_model(const std::string& arch) {
  for (const fk::TaskInfo* t : fk::all_tasks())
    if (t->level == 4 && (t->make_model || t->make_encoder || t->make_image_encoder || t->make_vision_tower) &&
        std::find(t->archs.begin(), t->archs.end(), arch) != t->archs.end()) {
      return t;
    }
  return nullptr;
}

std::vector<std::vector<int64_t>> random_prompts(const std::vector<int64_t>& lens, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<std::vector<int64_t>> out;
  for (int64_t n : lens) {
    std::vector<int64_t> p(n);
    for (auto& x : p) x = dist(rng);
    out.push_back(std::move(p));
  }
  return out;
}

double gib(double b) { return b / double(1ull << 30); }

// --------------------------------------------------------------------------------------------
// The parity dump (docs/parity.md).

/// The causal-LM parity dump (docs/parity.md) of an engine run on `prompts`: ids, offsets, the residual
/// stream after each layer, the prefill's and the last step's logits, the greedy tokens and their logits,
/// and the metadata every dump has; the caller adds what its runner has besides and writes the file.
void add_causal_dump(fk::SafetensorsWriter& w, const fk::CausalLM& m, const fk::Engine& engine, const Options& o,
                     const std::vector<std::vector<int64_t>>& prompts, const std::vector<std::vector<float>>& layer_out,
                     const Tensor& prefill_logits, const Tensor& last) {
  std::vector<int64_t> ids;
  std::vector<int32_t> cu{0};
  for (const auto& p : prompts) {
    ids.insert(ids.end(), p.begin(), p.end());
    cu.push_back(cu.back() + static_cast<int32_t>(p.size()));
  }
  const int64_t B = static_cast<int64_t>(prompts.size()), T = static_cast<int64_t>(ids.size()), H = m.hidden_size();
  add_host(w, "input_ids", "I64", {T}, ids);
  add_host(w, "cu_seqlens", "I32", {B + 1}, cu);
  for (int64_t i = 0; i < m.num_layers(); ++i) add_host(w, "prefill.layer." + std::to_string(i), "F32", {T, H}, layer_out[i]);
  fk::add_device_tensor(w, "prefill.logits", prefill_logits);
  add_host(w, "decode.tokens", "I64", {B, o.decode_steps + 1}, engine.tokens());
  add_host(w, "decode.token_logit", "F32", {B, o.decode_steps + 1}, engine.token_logits());
  fk::add_device_tensor(w, "decode.logits_last", last);
  w.set_metadata("arch", o.arch.substr(0, o.arch.find('@')));  // the model; a tensor-parallel run says its layout below
  if (o.tp > 1) w.set_metadata("tp", std::to_string(o.tp));
  w.set_metadata("task", m.task_name());
  w.set_metadata("layers", std::to_string(m.num_layers()));
  w.set_metadata("seed", std::to_string(o.seed));
  w.set_metadata("graph", o.no_graph ? "false" : "true");
}

int run_dump(fk::CausalLM& m, const Options& o) {
  const auto prompts = random_prompts(o.prompt_lens, m.vocab_size(), fk::mix_seed(o.seed, 77));
  int64_t longest = 0, total = 0;
  for (const auto& p : prompts) {
    longest = std::max<int64_t>(longest, p.size());
    total += p.size();
  }
  fk::Engine engine(m, static_cast<int64_t>(prompts.size()), longest + o.decode_steps + 1, o.decode_steps);
  std::vector<std::vector<float>> layer_out(m.num_layers());
  fk::tasks::set_layer_hook([&](int i, const Tensor& h, const Tensor& r) {
    Tensor s = fk::tasks::ref::add_f32(h, r);
    layer_out[i] = fk::to_host<float>(s);
  });
  Tensor logits = engine.prefill(prompts);
  fk::tasks::set_layer_hook(nullptr);
  Tensor prefill_logits;
  {
    fk::StreamGuard g(engine.stream());
    prefill_logits = fk::tasks::to_f32(logits);
  }
  for (int64_t s = 0; s < o.decode_steps; ++s) engine.decode_step(!o.no_graph);
  Tensor last;
  {
    fk::StreamGuard g(engine.stream());
    last = fk::tasks::to_f32(engine.last_logits());
  }
  const int64_t B = static_cast<int64_t>(prompts.size());
  fk::SafetensorsWriter w;
  add_causal_dump(w, m, engine, o, prompts, layer_out, prefill_logits, last);
  if (!writes_files()) return fk::kExitOk;  // rank 0 writes (every rank holds the whole hidden states and logits)
  w.write(o.dump);
  std::cerr << "fk_model: wrote " << o.dump << " (" << B << " prompts, " << total << " tokens, " << o.decode_steps
            << " decode steps)\n";
  return fk::kExitOk;
}

// --------------------------------------------------------------------------------------------
// Greedy tokens with their margins: what a candidate build is compared with the baseline on
// (docs/candidates.md). gaps[i] is the top-1 minus top-2 logit of the distribution token i was
// picked from, so a comparison can tell a near-tie flip from a real divergence.

/// Top-1 minus top-2 of each row of logits [B, V] (any float dtype), on the host.
std::vector<float> top2_gaps(const Tensor& logits, cudaStream_t s) {
  std::vector<float> h;
  {
    fk::StreamGuard g(s);  // the conversion and the copy both on the engine's stream, in order
    h = fk::to_host<float>(fk::tasks::to_f32(logits));
  }
  const int64_t B = logits.size(0), V = logits.size(1);
  std::vector<float> out(B);
  for (int64_t b = 0; b < B; ++b) {
    float a = -INFINITY, c = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      const float x = h[b * V + v];
      if (x > a) c = a, a = x;
      else if (x > c) c = x;
    }
    out[b] = a - c;
  }
  return out;
}

/// `j` as one line into `path`, through a temporary file and a rename (never half-written).
void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error("cannot write " + tmp);
    f << j.dump() << "\n";
    if (!f) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

/// The run's layout in a result file: tp, ep and data_parallel where the run had several ranks.
void add_layout(nlohmann::json& j, const Options& o) {
  if (o.ranks() <= 1) return;
  j["tp"] = o.tp;
  if (o.ep > 1) j["ep"] = o.ep;
  if (o.data_parallel()) j["data_parallel"] = true;
}

int run_greedy(fk::CausalLM& m, const Options& o) {
  const auto prompts = random_prompts(o.prompt_lens, m.vocab_size(), data_seed(fk::mix_seed(o.seed, 77)));
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, p.size());
  fk::Engine engine(m, static_cast<int64_t>(prompts.size()), longest + o.decode_steps + 1, o.decode_steps);
  const int64_t B = static_cast<int64_t>(prompts.size()), S = o.decode_steps;
  std::vector<std::vector<float>> gaps(B);
  auto record = [&](const Tensor& logits) {
    const std::vector<float> g = top2_gaps(logits, engine.stream());
    for (int64_t b = 0; b < B; ++b) gaps[b].push_back(g[b]);
  };
  record(engine.prefill(prompts));
  for (int64_t s = 0; s < S; ++s) {
    engine.decode_step(!o.no_graph);
    record(engine.last_logits());
  }
  const std::vector<int64_t> tokens = engine.tokens();
  nlohmann::json seqs = nlohmann::json::array();
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> t(tokens.begin() + b * (S + 1), tokens.begin() + (b + 1) * (S + 1));
    seqs.push_back({{"prompt_len", prompts[b].size()}, {"tokens", t}, {"gaps", gaps[b]}});
  }
  nlohmann::json j = {{"tool", "fk_model"}, {"arch", o.arch}, {"task", m.task_name()}, {"layers", m.num_layers()},
                      {"seed", o.seed}, {"steps", S}, {"graph", !o.no_graph}, {"sequences", seqs},
                      {"env", fk::environment_json(0)}};
  add_layout(j, o);
  if (!writes_files()) return fk::kExitOk;
  write_json_file(o.greedy, j);
  std::cerr << "fk_model: wrote " << o.greedy << " (" << B << " sequences, " << S << " greedy steps)\n";
  return fk::kExitOk;
}

// --------------------------------------------------------------------------------------------
// Note [Teacher-forced check]
// The greedy check judges a candidate build by its tokens, which says little: with random
// weights many top-2 gaps are small, and past the first divergence nothing compares. The
// teacher-forced check judges the logits of every decode step instead. Both builds (baseline and
// candidate) run the same prompts (same seed) and, at every step, are fed the same tokens: the
// baseline's greedy tokens (--force-tokens, the baseline's --greedy file), whatever they would
// have picked themselves. Each build records the logits of every step (the prefill's last row,
// then each decode step, CUDA graphs as in --greedy), then computes the composite fp32 reference
// of the same model over the whole forced sequences (one prefill of prompt + forced tokens,
// runtime reference operators only, no task kernel) and scores every step's row against it:
// relative L2 and largest absolute error over the vocabulary, with the reference's top token,
// its logit and top-2 gap (so a comparison can see that both builds were scored against the
// same reference). The same depth (layers), batch, positions and KV lengths as the greedy run,
// so `fastkernels compare` can hold the candidate's error at each row to the baseline's error at
// that same row (Note [Teacher-forced bound] in generator/src/tools/compare.cc).
// Weight scale (Note [Seeded weights] in fk/tasks/llama.h): activations O(1), logits about N(0, 1)
// over the vocabulary (`ref_logit_std` records the measured spread): not flat, so relative
// errors are meaningful, and bf16 rounding keeps the baseline's rows within ~1% of the reference.
// Scaling the logits up would not separate the top tokens from rounding (errors scale with them);
// forcing the tokens is what removes the dependence on near-ties.

/// The token lists of an `fk_model --greedy` file written for the same run (arch, layers, seed,
/// steps, prompts); errors name the file and the field.
std::vector<std::vector<int64_t>> read_forced_tokens(const std::string& path, const Options& o, const fk::CausalLM& m,
                                                     const std::vector<std::vector<int64_t>>& prompts) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot read (--force-tokens expects an fk_model --greedy file)");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  auto want = [&](const char* field, const nlohmann::json& expected) {
    if (!j.is_object() || !j.contains(field) || j[field] != expected)
      throw std::runtime_error(path + ": $." + field + ": expected " + expected.dump() + " (this run's), got " +
                               (j.is_object() && j.contains(field) ? j[field].dump() : "nothing"));
  };
  want("tool", "fk_model");
  // The same model: a tensor-parallel run (arch "<id>@tpN") may be fed the unsharded run's tokens.
  const std::string base_arch = o.arch.substr(0, o.arch.find('@'));
  if (!j.is_object() || !j.contains("arch") || !j["arch"].is_string() || j["arch"].get<std::string>().substr(0, j["arch"].get<std::string>().find('@')) != base_arch)
    throw std::runtime_error(path + ": $.arch: expected \"" + base_arch + "\" (this run's model, any layout), got " +
                             (j.is_object() && j.contains("arch") ? j["arch"].dump() : "nothing"));
  want("layers", m.num_layers());
  want("seed", o.seed);
  want("steps", o.decode_steps);
  const nlohmann::json& seqs = j["sequences"];
  if (!seqs.is_array() || seqs.size() != prompts.size())
    throw std::runtime_error(path + ": $.sequences: expected " + std::to_string(prompts.size()) + " sequences (--prompt-lens), got " +
                             (seqs.is_array() ? std::to_string(seqs.size()) : seqs.dump()));
  std::vector<std::vector<int64_t>> out;
  for (size_t b = 0; b < seqs.size(); ++b) {
    const std::string at = "$.sequences[" + std::to_string(b) + "]";
    const nlohmann::json& q = seqs[b];
    if (!q.is_object() || !q.contains("prompt_len") || q["prompt_len"] != prompts[b].size())
      throw std::runtime_error(path + ": " + at + ".prompt_len: expected " + std::to_string(prompts[b].size()));
    if (!q.contains("tokens") || !q["tokens"].is_array() || q["tokens"].size() != static_cast<size_t>(o.decode_steps + 1))
      throw std::runtime_error(path + ": " + at + ".tokens: expected " + std::to_string(o.decode_steps + 1) + " token ids");
    std::vector<int64_t> t;
    for (size_t s = 0; s < q["tokens"].size(); ++s) {
      const nlohmann::json& x = q["tokens"][s];
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m.vocab_size())
        throw std::runtime_error(path + ": " + at + ".tokens[" + std::to_string(s) + "]: expected a token id in [0, " +
                                 std::to_string(m.vocab_size()) + "), got " + x.dump());
      t.push_back(x.get<int64_t>());
    }
    out.push_back(std::move(t));
  }
  return out;
}

/// The build's own greedy tokens for `prompts` (steps + 1 per sequence).
std::vector<std::vector<int64_t>> own_greedy_tokens(fk::CausalLM& m, const Options& o, const std::vector<std::vector<int64_t>>& prompts,
                                                    int64_t max_len) {
  fk::Engine engine(m, static_cast<int64_t>(prompts.size()), max_len, o.decode_steps);
  engine.prefill(prompts);
  for (int64_t s = 0; s < o.decode_steps; ++s) engine.decode_step(!o.no_graph);
  const std::vector<int64_t> flat = engine.tokens();
  std::vector<std::vector<int64_t>> out;
  for (size_t b = 0; b < prompts.size(); ++b)
    out.emplace_back(flat.begin() + b * (o.decode_steps + 1), flat.begin() + (b + 1) * (o.decode_steps + 1));
  return out;
}

int run_teacher_forced(fk::CausalLM& m, const Options& o) {
  const auto prompts = random_prompts(o.prompt_lens, m.vocab_size(), data_seed(fk::mix_seed(o.seed, 77)));
  const int64_t B = static_cast<int64_t>(prompts.size()), S = o.decode_steps, V = m.vocab_size();
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, p.size());
  const int64_t max_len = longest + S + 1;
  const auto forced = o.force_tokens.empty() ? own_greedy_tokens(m, o, prompts, max_len) : read_forced_tokens(o.force_tokens, o, m, prompts);
  fk::Engine engine(m, B, max_len, S);
  engine.force_tokens(forced);
  // Every step's logits, fp32 [B, S + 1, V], row (b, s) at (b * (S + 1) + s) * V.
  Tensor all;
  {
    fk::StreamGuard g(engine.stream());
    all = fk::empty({B, S + 1, V}, fk::DType::kF32);
  }
  auto record = [&](const Tensor& logits, int64_t s) {
    fk::StreamGuard g(engine.stream());
    Tensor f = fk::tasks::to_f32(logits);
    FK_CUDA_CHECK(cudaMemcpy2DAsync(all.data<float>() + s * V, static_cast<size_t>((S + 1) * V) * sizeof(float), f.data<float>(),
                                    static_cast<size_t>(V) * sizeof(float), static_cast<size_t>(V) * sizeof(float),
                                    static_cast<size_t>(B), cudaMemcpyDeviceToDevice, engine.stream()));
    FK_CUDA_CHECK(cudaStreamSynchronize(engine.stream()));  // f is freed at the end of this scope
  };
  record(engine.prefill(prompts), 0);
  for (int64_t s = 1; s <= S; ++s) {
    engine.decode_step(!o.no_graph);
    record(engine.last_logits(), s);
  }
  const std::vector<int64_t> picks = engine.tokens();
  // The reference over prompt + the S forced tokens fed; row s of sequence b is position P_b - 1 + s.
  std::vector<std::vector<int64_t>> seqs, rows;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> q = prompts[b];
    q.insert(q.end(), forced[b].begin(), forced[b].begin() + S);
    std::vector<int64_t> r;
    for (int64_t s = 0; s <= S; ++s) r.push_back(static_cast<int64_t>(prompts[b].size()) - 1 + s);
    seqs.push_back(std::move(q));
    rows.push_back(std::move(r));
  }
  Tensor ref = engine.reference_logits(seqs, rows);
  std::vector<float> a, r;
  {
    fk::StreamGuard g(engine.stream());
    a = fk::to_host<float>(all);
    r = fk::to_host<float>(ref);
  }
  double sum = 0, sum2 = 0;
  nlohmann::json out_seqs = nlohmann::json::array();
  int64_t nonfinite = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> rel, maxabs, top_logit, gap;
    std::vector<int64_t> top, own;
    std::vector<bool> agrees;
    for (int64_t s = 0; s <= S; ++s) {
      const float* x = a.data() + (b * (S + 1) + s) * V;
      const float* y = r.data() + (b * (S + 1) + s) * V;
      double d2 = 0, y2 = 0, mx = 0;
      float t1 = -INFINITY, t2 = -INFINITY, o1 = -INFINITY;
      int64_t i1 = 0, j1 = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double d = double(x[v]) - double(y[v]);
        if (!std::isfinite(d)) ++nonfinite;
        d2 += d * d;
        y2 += double(y[v]) * y[v];
        mx = std::max(mx, std::abs(d));
        sum += y[v];
        sum2 += double(y[v]) * y[v];
        if (y[v] > t1) t2 = t1, t1 = y[v], i1 = v;
        else if (y[v] > t2) t2 = y[v];
        if (x[v] > o1) o1 = x[v], j1 = v;
      }
      rel.push_back(y2 > 0 ? std::sqrt(d2 / y2) : std::sqrt(d2));
      maxabs.push_back(mx);
      top.push_back(i1);
      top_logit.push_back(t1);
      gap.push_back(double(t1) - double(t2));
      own.push_back(picks[b * (S + 1) + s]);
      agrees.push_back(j1 == i1);
    }
    out_seqs.push_back({{"prompt_len", prompts[b].size()}, {"tokens", forced[b]}, {"picks", own}, {"rel_l2", rel},
                        {"max_abs", maxabs}, {"ref_top", top}, {"ref_top_logit", top_logit}, {"ref_gap", gap},
                        {"top_agrees", agrees}});
  }
  if (nonfinite > 0) std::cerr << "fk_model: " << nonfinite << " non-finite logits differences (recorded as NaN/inf errors)\n";
  const double n = double(B) * double(S + 1) * double(V), mean = sum / n;
  nlohmann::json j = {{"tool", "fk_model"}, {"mode", "teacher-forced"}, {"arch", o.arch}, {"task", m.task_name()},
                      {"layers", m.num_layers()}, {"seed", o.seed}, {"steps", S}, {"graph", !o.no_graph},
                      {"forced_from", o.force_tokens.empty() ? std::string("own greedy tokens") : o.force_tokens},
                      {"ref_logit_mean", mean}, {"ref_logit_std", std::sqrt(std::max(0.0, sum2 / n - mean * mean))},
                      {"sequences", out_seqs}, {"env", fk::environment_json(0)}};
  add_layout(j, o);
  if (!writes_files()) return fk::kExitOk;
  write_json_file(o.teacher_forced, j);  // NaN/inf errors are written as null by nlohmann::json
  std::cerr << "fk_model: wrote " << o.teacher_forced << " (" << B << " sequences, " << S + 1 << " teacher-forced rows each)\n";
  return fk::kExitOk;
}

// --------------------------------------------------------------------------------------------
// End-to-end throughput.

double elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  FK_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

/// `iters` timed calls of `call` on `stream` (CUDA events around each), sorted ascending.
template <class F> std::vector<double> timed_calls(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, int iters, F call) {
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    FK_CUDA_CHECK(cudaEventRecord(e0, stream));
    call();
    FK_CUDA_CHECK(cudaEventRecord(e1, stream));
    FK_CUDA_CHECK(cudaEventSynchronize(e1));
    ms.push_back(elapsed_ms(e0, e1));
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

/// The bench rows as JSON lines, each with the environment block.
void write_bench_jsonl(std::vector<nlohmann::json>& rows, const std::string& path) {
  if (path.empty()) return;
  const nlohmann::json env = fk::environment_json(0);
  std::ofstream f(path);
  for (auto& j : rows) {
    j["env"] = env;
    f << j.dump() << "\n";
  }
}

int run_bench(fk::CausalLM& m, const Options& o) {
  std::vector<nlohmann::json> rows;
  cudaEvent_t e0, e1;
  FK_CUDA_CHECK(cudaEventCreate(&e0));
  FK_CUDA_CHECK(cudaEventCreate(&e1));
  auto base = [&](const std::string& mode) {
    nlohmann::json j;
    j["tool"] = "fk_model";
    j["arch"] = o.arch;
    j["task"] = m.task_name();
    j["layers"] = m.num_layers();
    j["mode"] = mode;
    return j;
  };
  // Decode: tokens/s over the decode loop (prefill excluded), graphs on (and off for batch 1).
  for (int64_t b : o.decode_batches) {
    for (bool graph : {true, false}) {
      if (!graph && b != o.decode_batches.front()) continue;
      fk::release_cached_memory();
      const int64_t steps = std::max<int64_t>(o.decode_steps, 8);
      fk::Engine engine(m, b, o.prompt_len + steps + 1, steps);
      engine.prefill(random_prompts(std::vector<int64_t>(b, o.prompt_len), m.vocab_size(), data_seed(fk::mix_seed(o.seed, b))));
      engine.decode_step(graph);
      engine.decode_step(graph);  // first replay (graph) / second eager step
      const int64_t timed = steps - 2;
      FK_CUDA_CHECK(cudaEventRecord(e0, engine.stream()));
      for (int64_t s = 0; s < timed; ++s) engine.decode_step(graph);
      FK_CUDA_CHECK(cudaEventRecord(e1, engine.stream()));
      FK_CUDA_CHECK(cudaEventSynchronize(e1));
      const std::vector<double> rank_ms = all_ranks("decode", elapsed_ms(e0, e1));
      const double ms = *std::max_element(rank_ms.begin(), rank_ms.end());  // the slowest rank's
      nlohmann::json j = base("decode");
      if (o.ranks() > 1) {
        j["tp"] = o.tp;
        if (o.ep > 1) j["ep"] = o.ep;
        if (o.data_parallel()) j["data_parallel"] = true;
        j["rank_ms_per_step"] = nlohmann::json::array();
        for (double r : rank_ms) j["rank_ms_per_step"].push_back(r / double(steps - 2));
      }
      j["batch"] = b;
      j["prompt_len"] = o.prompt_len;
      j["steps"] = timed;
      j["graph"] = graph;
      j["ms_per_step"] = ms / timed;
      j["tokens_per_s"] = 1000.0 * b * timed / ms;
      j["peak_reserved_gib"] = gib(double(fk::allocator_peak_reserved_bytes()));
      if (writes_files())  // rank 0 reports (the times are the slowest rank's)
        std::cerr << "decode b" << b << (graph ? " graph" : " eager") << ": " << std::fixed << std::setprecision(2)
                << j["ms_per_step"].get<double>() << " ms/step, " << j["tokens_per_s"].get<double>() << " tokens/s\n";
      rows.push_back(j);
    }
  }
  // Prefill: tokens/s of one step over B sequences of S tokens (forward + last-token logits).
  for (const std::string& spec : o.prefill) {
    const auto x = spec.find('x');
    const int64_t b = std::stoll(spec.substr(0, x)), s = std::stoll(spec.substr(x + 1));
    fk::release_cached_memory();
    fk::Engine engine(m, b, s, 0);
    const auto prompts = random_prompts(std::vector<int64_t>(b, s), m.vocab_size(), data_seed(fk::mix_seed(o.seed, 1000 + b)));
    for (int i = 0; i < 2; ++i) engine.prefill(prompts);
    std::vector<double> ms = timed_calls(engine.stream(), e0, e1, 5, [&] { engine.prefill(prompts); });
    nlohmann::json j = base("prefill");
    if (o.ranks() > 1) {  // the k-th fastest of the 5 calls: the slowest rank's
      j["tp"] = o.tp;
      if (o.ep > 1) j["ep"] = o.ep;
      if (o.data_parallel()) j["data_parallel"] = true;
      for (double& m : ms) {
        const std::vector<double> r = all_ranks("prefill", m);
        m = *std::max_element(r.begin(), r.end());
      }
      std::sort(ms.begin(), ms.end());
    }
    j["batch"] = b;
    j["seq_len"] = s;
    j["ms"] = ms[ms.size() / 2];
    j["ms_min"] = ms.front();
    j["ms_max"] = ms.back();
    j["tokens_per_s"] = 1000.0 * b * s / ms[ms.size() / 2];
    j["peak_reserved_gib"] = gib(double(fk::allocator_peak_reserved_bytes()));
    if (writes_files())
      std::cerr << "prefill " << spec << ": " << j["ms"].get<double>() << " ms, " << j["tokens_per_s"].get<double>() << " tokens/s\n";
    rows.push_back(j);
  }
  // Memory over a long decode: device memory in use must not grow.
  if (o.mem_steps > 0) {
    fk::release_cached_memory();
    fk::Engine engine(m, 1, o.prompt_len + o.mem_steps + 1, o.mem_steps);
    engine.prefill(random_prompts({o.prompt_len}, m.vocab_size(), data_seed(fk::mix_seed(o.seed, 5))));
    engine.decode_step(true);
    engine.decode_step(true);
    FK_CUDA_CHECK(cudaStreamSynchronize(engine.stream()));
    size_t free0 = 0, total = 0, free1 = 0;
    FK_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    const size_t reserved0 = fk::allocator_reserved_bytes();
    FK_CUDA_CHECK(cudaEventRecord(e0, engine.stream()));
    for (int64_t s = 2; s < o.mem_steps; ++s) engine.decode_step(true);
    FK_CUDA_CHECK(cudaEventRecord(e1, engine.stream()));
    FK_CUDA_CHECK(cudaEventSynchronize(e1));
    FK_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    const size_t reserved1 = fk::allocator_reserved_bytes();
    nlohmann::json j = base("memory");
    j["batch"] = 1;
    j["steps"] = o.mem_steps;
    j["device_used_gib_before"] = gib(double(total - free0));
    j["device_used_gib_after"] = gib(double(total - free1));
    j["reserved_gib_before"] = gib(double(reserved0));
    j["reserved_gib_after"] = gib(double(reserved1));
    j["growth_bytes"] = static_cast<double>(free0) - static_cast<double>(free1);
    j["tokens_per_s"] = 1000.0 * (o.mem_steps - 2) / elapsed_ms(e0, e1);
    j["peak_reserved_gib"] = gib(double(fk::allocator_peak_reserved_bytes()));
    if (writes_files())
      std::cerr << "memory over " << o.mem_steps << " decode steps: " << j["device_used_gib_before"].get<double>() << " -> "
              << j["device_used_gib_after"].get<double>() << " GiB used\n";
    rows.push_back(j);
  }
  if (!writes_files()) return fk::kExitOk;
  write_bench_jsonl(rows, o.jsonl);
  if (!o.markdown.empty()) {
    std::ofstream f(o.markdown);
    f << "| arch | layers | mode | batch | tokens | graph | ms | tokens/s | peak reserved GiB |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& j : rows) {
      const std::string mode = j["mode"];
      f << "| " << o.arch << " | " << j["layers"] << " | " << mode << " | " << j["batch"] << " | "
        << (mode == "prefill" ? j["seq_len"].get<int64_t>() : j.value("prompt_len", int64_t(0))) << " | "
        << (j.contains("graph") ? (j["graph"].get<bool>() ? "yes" : "no") : "-") << " | "
        << std::fixed << std::setprecision(2) << (mode == "prefill" ? j["ms"].get<double>() : j.value("ms_per_step", 0.0))
        << " | " << std::setprecision(1) << j["tokens_per_s"].get<double>() << " | " << std::setprecision(2)
        << j["peak_reserved_gib"].get<double>() << " |\n";
    }
  }
  return fk::kExitOk;
}


// --------------------------------------------------------------------------------------------
// Encoders (embedding models behind fk::EncoderModel): the parity dump and throughput.

/// One batch of whole sequences as vLLM's pooling runner packs it: ids, positions 0.. per
/// sequence, token types (with token types: the second half of each sequence is type 1, a
/// sentence pair), cu_seqlens; the forward context is a prefill without a KV cache.
/// A decoder with cross-attention (bert2bert's) also gets an encoder output (CrossEncoderInput:
/// the prompts' lengths in reverse order), states ~ N(0, 1) in the model dtype, named in the
/// forward context (encoder_cu_seqlens).
struct EncoderBatch {
  fk::tasks::AttnMetadata meta;
  Tensor ids, positions, types;
  std::vector<int64_t> ids_h, types_h;
  std::vector<int32_t> cu{0};
  fk::tasks::CrossEncoderInput encoder;  ///< states undefined without cross-attention
};

/// One row of an encoder bench (embedding or image batches): 3 warm-up calls of `step`, 10 timed
/// (timed_calls), and the fields every such row has; the caller adds its throughput fields.
template <class M, class F>
nlohmann::json timed_batch_row(const M& m, const Options& o, const char* mode, int64_t batch, F step) {
  for (int i = 0; i < 3; ++i) step();
  cudaEvent_t e0, e1;
  FK_CUDA_CHECK(cudaEventCreate(&e0));
  FK_CUDA_CHECK(cudaEventCreate(&e1));
  const std::vector<double> ms = timed_calls(fk::current_stream(), e0, e1, 10, step);
  FK_CUDA_CHECK(cudaEventDestroy(e0));
  FK_CUDA_CHECK(cudaEventDestroy(e1));
  nlohmann::json j;
  j["tool"] = "fk_model";
  j["arch"] = o.arch;
  j["task"] = m.task_name();
  j["layers"] = m.num_layers();
  j["mode"] = mode;
  j["batch"] = batch;
  j["ms"] = ms[ms.size() / 2];
  j["ms_min"] = ms.front();
  j["ms_max"] = ms.back();
  j["peak_reserved_gib"] = gib(double(fk::allocator_peak_reserved_bytes()));
  return j;
}

/// Random prompts for an encoder. RoBERTa-style models (position_offset > 0) take the id
/// padding_idx = position_offset - 1 as padding (HF numbers positions from the ids and skips it),
/// so the prompts do not contain it.
std::vector<std::vector<int64_t>> encoder_prompts(const fk::EncoderModel& m, const std::vector<int64_t>& lens, uint64_t seed) {
  auto prompts = random_prompts(lens, m.vocab_size(), seed);
  if (m.position_offset() > 0)
    for (auto& p : prompts)
      for (auto& id : p)
        if (id == m.position_offset() - 1) id = (id + 1) % m.vocab_size();
  return prompts;
}

EncoderBatch make_encoder_batch(const fk::EncoderModel& m, const std::vector<std::vector<int64_t>>& prompts, uint64_t seed) {
  EncoderBatch e;
  std::vector<int64_t> pos;
  for (const auto& p : prompts) {
    const auto n = static_cast<int64_t>(p.size());
    if (n < 1 || n > m.max_position())
      throw std::runtime_error("a sequence of " + std::to_string(n) + " tokens; " + m.task_name() + " takes 1 to " +
                               std::to_string(m.max_position()));
    for (int64_t i = 0; i < n; ++i) {
      e.ids_h.push_back(p[i]);
      pos.push_back(i);
      e.types_h.push_back(m.type_vocab_size() > 1 && 2 * i >= n ? 1 : 0);
    }
    e.cu.push_back(e.cu.back() + static_cast<int32_t>(n));
    e.meta.max_seqlen = std::max(e.meta.max_seqlen, n);
  }
  const auto t = static_cast<int64_t>(e.ids_h.size()), b = static_cast<int64_t>(prompts.size());
  e.meta.is_prefill = true;
  e.meta.num_seqs = b;
  e.meta.num_tokens = t;
  e.meta.cu_seqlens = fk::to_device(e.cu, {b + 1});
  e.meta.host_cu_seqlens = e.cu;  // the per-token heads size their outputs by it
  e.ids = fk::to_device(e.ids_h, {t});
  e.positions = fk::to_device(pos, {t});
  if (m.type_vocab_size() > 0) e.types = fk::to_device(e.types_h, {t});
  if (m.cross_attention()) {
    e.encoder.attach(e.cu, e.meta, m.hidden_size(), m.dtype());
    fk::fill_normal(e.encoder.ref.states, fk::mix_seed(seed, 79));
  }
  return e;
}

int run_encoder_dump(fk::EncoderModel& m, const Options& o) {
  const auto prompts = encoder_prompts(m, o.prompt_lens, fk::mix_seed(o.seed, 77));
  EncoderBatch e = make_encoder_batch(m, prompts, o.seed);
  std::vector<Tensor> layers;
  Tensor pooled, vectors, weights;
  {
    fk::tasks::ForwardContextGuard ctx(&e.meta);
    Tensor h = m.forward(e.ids, e.positions, e.types, &layers, e.encoder.ref.states);
    pooled = fk::tasks::to_f32(m.pool(h));
    if (m.multi_vector_dim() > 0) vectors = fk::tasks::to_f32(m.token_embed(h));
    if (m.sparse()) weights = fk::tasks::to_f32(m.token_weights(h));
  }
  const int64_t B = static_cast<int64_t>(prompts.size()), T = e.meta.num_tokens;
  fk::SafetensorsWriter w;
  add_host(w, "input_ids", "I64", {T}, e.ids_h);
  add_host(w, "token_type_ids", "I64", {T}, e.types_h);
  add_host(w, "cu_seqlens", "I32", {B + 1}, e.cu);
  if (e.encoder.ref.states.defined()) {  // the decoder's cross-attention input, for the HF side of the parity
    add_host(w, "encoder_cu_seqlens", "I32", {B + 1}, e.encoder.ref.cu);
    fk::add_device_tensor(w, "encoder_hidden_states", fk::tasks::to_f32(e.encoder.ref.states));
  }
  for (size_t i = 0; i < layers.size(); ++i) fk::add_device_tensor(w, "prefill.layer." + std::to_string(i), fk::tasks::to_f32(layers[i]));
  fk::add_device_tensor(w, "pooled", pooled);
  // The per-token heads: packed over the sequences, without the dropped special tokens.
  if (vectors.defined()) fk::add_device_tensor(w, "token_vectors", vectors);
  if (weights.defined()) fk::add_device_tensor(w, "lexical_weights", weights);
  w.set_metadata("arch", o.arch);
  w.set_metadata("task", m.task_name());
  w.set_metadata("runner", "embedding");
  w.set_metadata("pooling", m.pooling());
  w.set_metadata("multi_vector", std::to_string(m.multi_vector_dim()));
  w.set_metadata("sparse", m.sparse() ? "1" : "0");
  w.set_metadata("drop_special_tokens", m.drop_special_tokens() ? "1" : "0");
  w.set_metadata("layers", std::to_string(m.num_layers()));
  w.set_metadata("seed", std::to_string(o.seed));
  w.write(o.dump);
  std::cerr << "fk_model: wrote " << o.dump << " (" << B << " sequences, " << T << " tokens, embedding)\n";
  return fk::kExitOk;
}

/// Throughput of whole batches: forward + pooler over B sequences of S tokens, eager (the
/// encoder's kernels are large at these shapes; batch-1 latency is reported as measured).
int run_encoder_bench(fk::EncoderModel& m, const Options& o, const std::vector<std::string>& shapes) {
  std::vector<nlohmann::json> rows;
  for (const std::string& spec : shapes) {
    const auto x = spec.find('x');
    const int64_t b = std::stoll(spec.substr(0, x)), s = std::stoll(spec.substr(x + 1));
    fk::release_cached_memory();
    EncoderBatch e =
        make_encoder_batch(m, encoder_prompts(m, std::vector<int64_t>(b, s), fk::mix_seed(o.seed, 1000 + b)), fk::mix_seed(o.seed, b));
    fk::tasks::ForwardContextGuard ctx(&e.meta);
    // A decoder with cross-attention: every call passes the encoder output (projects and caches its
    // keys and values: the first decoder step over whole sequences).
    // Every output the model serves: the pooled vectors and, where chosen, the token heads.
    nlohmann::json j = timed_batch_row(m, o, "embed", b, [&] {
      Tensor h = m.forward(e.ids, e.positions, e.types, nullptr, e.encoder.ref.states);
      if (m.multi_vector_dim() > 0) m.token_embed(h);
      if (m.sparse()) m.token_weights(h);
      return m.pool(h);
    });
    if (e.encoder.ref.states.defined()) j["encoder_tokens"] = e.encoder.ref.cu.back();
    j["seq_len"] = s;
    j["sequences_per_s"] = 1000.0 * b / j["ms"].get<double>();
    j["tokens_per_s"] = 1000.0 * b * s / j["ms"].get<double>();
    std::cerr << "embed " << spec << ": " << j["ms"].get<double>() << " ms, " << j["sequences_per_s"].get<double>()
              << " sequences/s\n";
    rows.push_back(j);
  }
  write_bench_jsonl(rows, o.jsonl);
  if (!o.markdown.empty()) {
    std::ofstream f(o.markdown);
    f << "| arch | layers | mode | batch | tokens | ms | sequences/s | tokens/s | peak reserved GiB |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& j : rows)
      f << "| " << o.arch << " | " << j["layers"] << " | embed | " << j["batch"] << " | " << j["seq_len"] << " | " << std::fixed
        << std::setprecision(2) << j["ms"].get<double>() << " | " << std::setprecision(1) << j["sequences_per_s"].get<double>()
        << " | " << j["tokens_per_s"].get<double>() << " | " << std::setprecision(2) << j["peak_reserved_gib"].get<double>()
        << " |\n";
  }
  return fk::kExitOk;
}

// --------------------------------------------------------------------------------------------
// Image encoders (vision transformers behind fk::ImageEncoderModel): the parity dump and throughput.

/// The image benches' rows as JSON lines and a markdown table (`per_image`: the tokens column's name).
void write_image_rows(std::vector<nlohmann::json>& rows, const Options& o, const char* per_image) {
  write_bench_jsonl(rows, o.jsonl);
  if (o.markdown.empty()) return;
  std::ofstream f(o.markdown);
  f << "| arch | layers | mode | batch | " << per_image << " | ms | images/s | peak reserved GiB |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& j : rows)
    f << "| " << o.arch << " | " << j["layers"] << " | images | " << j["batch"] << " | " << j["tokens_per_image"] << " | " << std::fixed
      << std::setprecision(2) << j["ms"].get<double>() << " | " << std::setprecision(1) << j["images_per_s"].get<double>() << " | "
      << std::setprecision(2) << j["peak_reserved_gib"].get<double>() << " |\n";
}

/// B images ~ N(0, 1) (normalised pixels) in the model dtype, NCHW.
Tensor random_images(const fk::ImageEncoderModel& m, int64_t b, uint64_t seed) {
  Tensor px = fk::empty({b, m.num_channels(), m.image_size(), m.image_size()}, m.dtype());
  fk::fill_normal(px, seed);
  return px;
}

int run_image_dump(fk::ImageEncoderModel& m, const Options& o) {
  Tensor px = random_images(m, o.images, fk::mix_seed(o.seed, 78));
  std::vector<Tensor> layers;
  Tensor last = m.forward(px, &layers);
  Tensor pooled = fk::tasks::to_f32(m.pool(last));
  fk::SafetensorsWriter w;
  fk::add_device_tensor(w, "pixel_values", fk::tasks::to_f32(px));
  for (size_t i = 0; i < layers.size(); ++i) fk::add_device_tensor(w, "prefill.layer." + std::to_string(i), fk::tasks::to_f32(layers[i]));
  fk::add_device_tensor(w, "last_hidden_state", fk::tasks::to_f32(last));
  fk::add_device_tensor(w, "pooled", pooled);
  w.set_metadata("arch", o.arch);
  w.set_metadata("task", m.task_name());
  w.set_metadata("runner", "image-encoder");
  w.set_metadata("layers", std::to_string(m.num_layers()));
  w.set_metadata("seed", std::to_string(o.seed));
  w.set_metadata("tokens_per_image", std::to_string(m.tokens_per_image()));
  w.write(o.dump);
  std::cerr << "fk_model: wrote " << o.dump << " (" << o.images << " images, " << m.tokens_per_image() << " tokens each, image-encoder)\n";
  return fk::kExitOk;
}

/// Throughput of whole batches of images: forward (patch embedding .. final norm) + pooler, eager.
int run_image_bench(fk::ImageEncoderModel& m, const Options& o) {
  std::vector<nlohmann::json> rows;
  for (int64_t b : o.image_batches) {
    fk::release_cached_memory();
    Tensor px = random_images(m, b, fk::mix_seed(o.seed, 2000 + b));
    nlohmann::json j = timed_batch_row(m, o, "images", b, [&] { return m.pool(m.forward(px)); });
    j["image_size"] = m.image_size();
    j["tokens_per_image"] = m.tokens_per_image();
    j["images_per_s"] = 1000.0 * b / j["ms"].get<double>();
    std::cerr << "images " << b << ": " << j["ms"].get<double>() << " ms, " << j["images_per_s"].get<double>() << " images/s\n";
    rows.push_back(j);
  }
  write_image_rows(rows, o, "tokens/image");
  return fk::kExitOk;
}

// --------------------------------------------------------------------------------------------
// Vision towers (dynamic resolution, fk::VisionTowerModel): the parity dump and throughput.

/// "TxHxW" -> (t, h, w); the option and value named in errors.
std::array<int64_t, 3> parse_grid(const std::string& spec) {
  std::array<int64_t, 3> g{};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? spec.find('x', pos) : spec.size();
    try {
      if (end == std::string::npos || end == pos) throw std::invalid_argument("");
      size_t used = 0;
      g[i] = std::stoll(spec.substr(pos, end - pos), &used);
      if (used != end - pos || g[i] < 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw std::runtime_error("--grids: expected TxHxW with positive integers (frames, patch rows, patch columns), got \"" + spec + "\"");
    }
    pos = end + 1;
  }
  return g;
}

/// The processor's patch rows ~ N(0, 1) (normalised pixels) of a batch of grids, in the model dtype.
Tensor random_patch_rows(const fk::VisionTowerModel& m, const std::vector<std::array<int64_t, 3>>& grids, uint64_t seed) {
  int64_t rows = 0;
  for (const auto& g : grids) rows += g[0] * g[1] * g[2];
  Tensor px = fk::empty({rows, m.patch_dim()}, m.dtype());
  fk::fill_normal(px, seed);
  return px;
}

int run_tower_dump(fk::VisionTowerModel& m, const Options& o) {
  std::vector<std::array<int64_t, 3>> grids;
  for (const std::string& s : o.grids) grids.push_back(parse_grid(s));
  if (grids.empty()) grids = m.default_grids();
  Tensor px = random_patch_rows(m, grids, fk::mix_seed(o.seed, 79));
  std::vector<Tensor> layers;
  Tensor last = m.forward(px, grids, &layers);
  Tensor merged = fk::tasks::to_f32(m.merge(last));
  std::vector<int64_t> flat;
  for (const auto& g : grids) flat.insert(flat.end(), g.begin(), g.end());
  fk::SafetensorsWriter w;
  fk::add_device_tensor(w, "pixel_values", fk::tasks::to_f32(px));
  add_host(w, "grid_thw", "I64", {static_cast<int64_t>(grids.size()), 3}, flat);
  for (size_t i = 0; i < layers.size(); ++i) fk::add_device_tensor(w, "prefill.layer." + std::to_string(i), fk::tasks::to_f32(layers[i]));
  fk::add_device_tensor(w, "last_hidden_state", fk::tasks::to_f32(last));
  fk::add_device_tensor(w, "merged", merged);
  if (m.has_pool()) fk::add_device_tensor(w, "pooled", fk::tasks::to_f32(m.pool(last)));  // SigLIP-2: one vector per image
  const std::vector<Tensor> deepstack = m.deepstack_features();  // Qwen3-VL: those of the blocks the tower has
  for (size_t j = 0; j < deepstack.size(); ++j) fk::add_device_tensor(w, "deepstack." + std::to_string(j), fk::tasks::to_f32(deepstack[j]));
  w.set_metadata("arch", o.arch);
  w.set_metadata("task", m.task_name());
  w.set_metadata("runner", "vision-tower");
  w.set_metadata("layers", std::to_string(m.num_layers()));
  w.set_metadata("seed", std::to_string(o.seed));
  w.write(o.dump);
  std::cerr << "fk_model: wrote " << o.dump << " (" << grids.size() << " images, " << px.size(0) << " patches, vision-tower)\n";
  return fk::kExitOk;
}

/// Throughput of batches of images of the served size: the patch rows -> the merged tokens, eager.
int run_tower_bench(fk::VisionTowerModel& m, const Options& o) {
  std::vector<nlohmann::json> rows;
  const int64_t g = m.bench_grid();
  for (int64_t b : o.image_batches) {
    fk::release_cached_memory();
    const std::vector<std::array<int64_t, 3>> grids(static_cast<size_t>(b), std::array<int64_t, 3>{1, g, g});
    Tensor px = random_patch_rows(m, grids, fk::mix_seed(o.seed, 2000 + b));
    // The tokens a language model reads, and each image's vector where the tower pools (SigLIP-2, as HF's forward).
    nlohmann::json j = timed_batch_row(m, o, "images", b, [&] {
      Tensor merged = m.merge(m.forward(px, grids));
      return m.has_pool() ? m.pool(merged) : merged;
    });
    j["image_size"] = g * m.patch_size();
    j["tokens_per_image"] = g * g;
    j["images_per_s"] = 1000.0 * b / j["ms"].get<double>();
    std::cerr << "images " << b << ": " << j["ms"].get<double>() << " ms, " << j["images_per_s"].get<double>() << " images/s\n";
    rows.push_back(j);
  }
  write_image_rows(rows, o, "patches/image");
  return fk::kExitOk;
}

// --------------------------------------------------------------------------------------------
// Vision-language models (Note [Multimodal prefill] in fk/runtime/engine.h): the vision tower
// (--vision-arch, a fk::VisionTowerModel) and the text model with multimodal rope (--arch, a
// fk::CausalLM) run as HF's Qwen2VLForConditionalGeneration: each prompt's image -> the tower's
// merged tokens, written over the prompt's image tokens; prefill at get_rope_index positions
// (Note [VLM rope index] in fk/tasks/mrope.h); greedy decode.

struct VlmTokens {
  int64_t image = -1, vision_start = -1, vision_end = -1;
};

/// The composite config's special token ids, from <config_root>/<arch>/config.json (the text
/// component's directory holds the whole composite config, verbatim); errors name the file and field.
VlmTokens read_vlm_tokens(const std::string& config_root, const std::string& arch) {
  const std::string path = config_root + "/" + arch + "/config.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot read (the composite config of --arch; --config-root names the folder)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
  VlmTokens t;
  for (auto [key, dst] : {std::pair<const char*, int64_t*>{"image_token_id", &t.image}, {"vision_start_token_id", &t.vision_start},
                          {"vision_end_token_id", &t.vision_end}}) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0)
      throw std::runtime_error(path + ": $." + key + ": expected a non-negative integer (a vision-language config's token id), got " +
                               (j.contains(key) ? j[key].dump() : std::string("nothing")));
    *dst = j[key].get<int64_t>();
  }
  return t;
}

/// Prompts with one image each (text, <vision_start>, the image's tokens, <vision_end>, text), their
/// packed [3, T] positions, the first decode positions and the packed rows of the image tokens.
struct VlmBatch {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::array<int64_t, 3>> grids;
  std::vector<int64_t> positions;  ///< host [3, T]
  std::vector<int64_t> next_positions;
  std::vector<int32_t> image_rows;
  int64_t tokens = 0;
};

VlmBatch make_vlm_batch(const std::vector<int64_t>& text_lens, const std::vector<std::array<int64_t, 3>>& grids, int64_t merge,
                        const VlmTokens& tok, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  auto text_token = [&] {
    for (;;) {
      const int64_t x = dist(rng);
      if (x != tok.image && x != tok.vision_start && x != tok.vision_end) return x;
    }
  };
  VlmBatch out;
  out.grids = grids;
  std::vector<std::vector<int64_t>> rows3(3);
  for (size_t b = 0; b < text_lens.size(); ++b) {
    const auto& g = grids[b];
    const int64_t image_tokens = g[0] * (g[1] / merge) * (g[2] / merge);
    std::vector<int64_t> p;
    for (int64_t i = 0; i < text_lens[b] / 2; ++i) p.push_back(text_token());
    p.push_back(tok.vision_start);
    for (int64_t i = 0; i < image_tokens; ++i) {
      out.image_rows.push_back(static_cast<int32_t>(out.tokens + static_cast<int64_t>(p.size())));
      p.push_back(tok.image);
    }
    p.push_back(tok.vision_end);
    for (int64_t i = text_lens[b] / 2; i < text_lens[b]; ++i) p.push_back(text_token());
    const fk::tasks::VlRopeIndex idx = fk::tasks::vl_rope_index(p, tok.image, {g}, merge);
    for (int a = 0; a < 3; ++a) rows3[a].insert(rows3[a].end(), idx.rows[a].begin(), idx.rows[a].end());
    out.next_positions.push_back(idx.next_position);
    out.tokens += static_cast<int64_t>(p.size());
    out.prompts.push_back(std::move(p));
  }
  for (int a = 0; a < 3; ++a) out.positions.insert(out.positions.end(), rows3[a].begin(), rows3[a].end());
  return out;
}

/// The images' merged tokens [N, H] and, for Qwen3-VL, the deepstack mergers' tokens of the blocks the
/// tower has (Note [DeepStack]), on the current stream (the engine's, so that the prefill is ordered after them).
struct VlmFeatures {
  Tensor merged;
  std::vector<Tensor> deepstack;
};
VlmFeatures vlm_features(fk::VisionTowerModel& tower, const fk::CausalLM& lm, const Tensor& px,
                         const std::vector<std::array<int64_t, 3>>& grids) {
  VlmFeatures f{tower.merge(tower.forward(px, grids)), tower.deepstack_features()};
  FK_CHECK(f.merged.size(1) == lm.hidden_size(), "the vision tower's merged tokens are " + std::to_string(f.merged.size(1)) +
                                                     " wide, the text model's hidden size is " + std::to_string(lm.hidden_size()));
  return f;
}

int run_vlm_dump(fk::CausalLM& lm, fk::VisionTowerModel& tower, const Options& o, const VlmTokens& tok) {
  const int64_t m = tower.merge_size();
  std::vector<std::array<int64_t, 3>> grids;
  for (size_t b = 0; b < o.prompt_lens.size(); ++b)  // images of several shapes, whole merge windows
    grids.push_back({1, m * (2 + static_cast<int64_t>(b % 3)), m * (2 + static_cast<int64_t>((b + 1) % 3))});
  const VlmBatch vb = make_vlm_batch(o.prompt_lens, grids, m, tok, lm.vocab_size(), fk::mix_seed(o.seed, 77));
  int64_t longest = 0;
  for (const auto& p : vb.prompts) longest = std::max<int64_t>(longest, p.size());
  const int64_t B = static_cast<int64_t>(vb.prompts.size()), T = vb.tokens;
  fk::Engine engine(lm, B, longest + o.decode_steps + 1, o.decode_steps);
  Tensor px, logits, positions, rows;
  std::vector<std::vector<float>> layer_out(lm.num_layers());
  {
    fk::StreamGuard g(engine.stream());
    px = random_patch_rows(tower, grids, fk::mix_seed(o.seed, 79));
    const VlmFeatures features = vlm_features(tower, lm, px, grids);
    positions = fk::to_device(vb.positions, {3, T});
    rows = fk::to_device(vb.image_rows, {static_cast<int64_t>(vb.image_rows.size())});
    fk::tasks::set_layer_hook([&](int i, const Tensor& h, const Tensor& r) { layer_out[i] = fk::to_host<float>(fk::tasks::ref::add_f32(h, r)); });
    logits = engine.prefill_multimodal(vb.prompts, rows, features.merged, positions, vb.next_positions, features.deepstack);
    fk::tasks::set_layer_hook(nullptr);
    logits = fk::tasks::to_f32(logits);
  }
  for (int64_t s = 0; s < o.decode_steps; ++s) engine.decode_step(!o.no_graph);
  Tensor last;
  {
    fk::StreamGuard g(engine.stream());
    last = fk::tasks::to_f32(engine.last_logits());
  }
  fk::SafetensorsWriter w;
  add_causal_dump(w, lm, engine, o, vb.prompts, layer_out, logits, last);
  std::vector<int64_t> flat;
  for (const auto& g : grids) flat.insert(flat.end(), g.begin(), g.end());
  fk::add_device_tensor(w, "pixel_values", fk::tasks::to_f32(px));
  add_host(w, "grid_thw", "I64", {B, 3}, flat);
  add_host(w, "positions", "I64", {3, T}, vb.positions);
  w.set_metadata("runner", "vlm");
  w.set_metadata("vision_arch", o.vision_arch);
  w.set_metadata("vision_task", tower.task_name());
  w.set_metadata("vision_layers", std::to_string(tower.num_layers()));
  w.write(o.dump);
  std::cerr << "fk_model: wrote " << o.dump << " (" << B << " prompts with one image each, " << T << " tokens, " << o.decode_steps
            << " decode steps, vlm)\n";
  return fk::kExitOk;
}

/// Throughput of a VLM: per batch, one image of the served size per prompt plus --prompt-len text
/// tokens; "vlm_prefill" times the tower and the prefill together (one forward of images + prompts,
/// last-token logits), "decode" the greedy decode loop after it (CUDA graphs), as run_bench.
int run_vlm_bench(fk::CausalLM& lm, fk::VisionTowerModel& tower, const Options& o, const VlmTokens& tok) {
  std::vector<nlohmann::json> rows;
  cudaEvent_t e0, e1;
  FK_CUDA_CHECK(cudaEventCreate(&e0));
  FK_CUDA_CHECK(cudaEventCreate(&e1));
  const int64_t g = tower.bench_grid(), m = tower.merge_size();
  for (int64_t b : o.decode_batches) {
    fk::release_cached_memory();
    const std::vector<std::array<int64_t, 3>> grids(static_cast<size_t>(b), std::array<int64_t, 3>{1, g, g});
    const VlmBatch vb = make_vlm_batch(std::vector<int64_t>(static_cast<size_t>(b), o.prompt_len), grids, m, tok, lm.vocab_size(),
                                       fk::mix_seed(o.seed, 3000 + b));
    int64_t longest = 0;
    for (const auto& p : vb.prompts) longest = std::max<int64_t>(longest, p.size());
    const int64_t steps = std::max<int64_t>(o.decode_steps, 8);
    fk::Engine engine(lm, b, longest + steps + 1, steps);
    std::vector<double> prefill_ms;
    {
      fk::StreamGuard sg(engine.stream());
      Tensor px = random_patch_rows(tower, grids, fk::mix_seed(o.seed, 4000 + b));
      Tensor positions = fk::to_device(vb.positions, {3, vb.tokens});
      Tensor image_rows = fk::to_device(vb.image_rows, {static_cast<int64_t>(vb.image_rows.size())});
      auto step = [&] {
        const VlmFeatures f = vlm_features(tower, lm, px, grids);
        engine.prefill_multimodal(vb.prompts, image_rows, f.merged, positions, vb.next_positions, f.deepstack);
      };
      step();  // warm-up (GEMM choices)
      prefill_ms = timed_calls(engine.stream(), e0, e1, 3, step);
    }
    nlohmann::json jp;
    jp["tool"] = "fk_model", jp["arch"] = o.arch, jp["vision_arch"] = o.vision_arch, jp["task"] = lm.task_name();
    jp["vision_task"] = tower.task_name(), jp["layers"] = lm.num_layers(), jp["vision_layers"] = tower.num_layers();
    nlohmann::json jd = jp;
    jp["mode"] = "vlm_prefill", jp["batch"] = b, jp["image_tokens"] = (g / m) * (g / m), jp["text_tokens"] = o.prompt_len;
    jp["ms"] = prefill_ms[prefill_ms.size() / 2], jp["ms_min"] = prefill_ms.front(), jp["ms_max"] = prefill_ms.back();
    jp["images_per_s"] = 1000.0 * b / jp["ms"].get<double>();
    jp["peak_reserved_gib"] = gib(double(fk::allocator_peak_reserved_bytes()));
    engine.decode_step(true);
    engine.decode_step(true);  // the first replay
    const int64_t timed = steps - 2;
    FK_CUDA_CHECK(cudaEventRecord(e0, engine.stream()));
    for (int64_t s = 0; s < timed; ++s) engine.decode_step(true);
    FK_CUDA_CHECK(cudaEventRecord(e1, engine.stream()));
    FK_CUDA_CHECK(cudaEventSynchronize(e1));
    const double ms = elapsed_ms(e0, e1);
    jd["mode"] = "decode", jd["batch"] = b, jd["prompt_len"] = longest, jd["steps"] = timed, jd["graph"] = true;
    jd["ms_per_step"] = ms / timed, jd["tokens_per_s"] = 1000.0 * b * timed / ms;
    jd["peak_reserved_gib"] = gib(double(fk::allocator_peak_reserved_bytes()));
    std::cerr << "vlm b" << b << ": images + prefill " << std::fixed << std::setprecision(2) << jp["ms"].get<double>()
              << " ms; decode " << jd["ms_per_step"].get<double>() << " ms/step, " << jd["tokens_per_s"].get<double>() << " tokens/s\n";
    rows.push_back(jp);
    rows.push_back(jd);
  }
  write_bench_jsonl(rows, o.jsonl);
  if (!o.markdown.empty()) {
    std::ofstream f(o.markdown);
    f << "| arch | layers | vision layers | mode | batch | ms | images/s or tokens/s | peak reserved GiB |\n|---|---|---|---|---|---|---|---|\n";
    for (const auto& j : rows) {
      const bool pre = j["mode"] == "vlm_prefill";
      f << "| " << o.arch << " | " << j["layers"] << " | " << j["vision_layers"] << " | " << j["mode"].get<std::string>() << " | "
        << j["batch"] << " | " << std::fixed << std::setprecision(2) << (pre ? j["ms"].get<double>() : j["ms_per_step"].get<double>())
        << " | " << std::setprecision(1) << (pre ? j["images_per_s"].get<double>() : j["tokens_per_s"].get<double>()) << " | "
        << std::setprecision(2) << j["peak_reserved_gib"].get<double>() << " |\n";
    }
  }
  return fk::kExitOk;
}

/// Every runner's model set-up: the weights loaded from --load-weights (HF names) or seeded
/// (Note [Seeded weights]), the model reported, and the weights saved when --save-weights asks.
/// A VLM's tower takes --load-vision-weights / --save-vision-weights and --vision-arch instead.
template <class M> void prepare_model(M& model, const fk::TaskInfo& task, const Options& o, bool vision = false) {
  const std::string& load = vision ? o.load_vision_weights : o.load_weights;
  const std::string& save = vision ? o.save_vision_weights : o.save_weights;
  if (!load.empty()) fk::load_weights(model, load);
  else fk::tasks::init_params(model.named_parameters(), vision ? fk::mix_seed(o.seed, 31) : o.seed);
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  std::cerr << "fk_model: " << task.name << " with " << model.num_layers() << " layers, " << std::fixed << std::setprecision(2)
            << gib(fk::tasks::param_bytes(model.named_parameters())) << " GiB of weights\n";
  if (!save.empty())
    fk::save_weights(model, save, {{"arch", vision ? o.vision_arch : o.arch}, {"seed", std::to_string(o.seed)}});
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fk_model: run a generated whole model (L4): greedy generation, the HF parity dump, throughput"};
  app.footer("Exit codes: 0 ok; 1 runtime failure; 2 usage error; 3 no CUDA device.");
  Options o;
  bool list = false;
  app.add_flag("--list", list, "list the models (L4 tasks) and their architectures");
  app.add_option("--arch", o.arch, "config id, e.g. meta-llama/Llama-3.1-8B-Instruct");
  app.add_option("--layers", o.layers, "decoder layers to build (0 = the config's)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "seed of the weights (Note [Seeded weights]) and prompts");
  app.add_option("--load-weights", o.load_weights, "load the weights from this safetensors file (HF names)");
  app.add_option("--save-weights", o.save_weights, "save the weights to this safetensors file (HF names)");
  app.add_option("--dump", o.dump, "run the parity dump and write it here (docs/parity.md)");
  app.add_option("--prompt-lens", o.prompt_lens, "dump: prompt lengths, one sequence each")->delimiter(',');
  app.add_option("--decode-steps", o.decode_steps, "decode steps (dump; bench decode loop)")->check(CLI::Range(1, 100000));
  app.add_flag("--no-graph", o.no_graph, "dump/greedy: decode eagerly instead of replaying a CUDA graph");
  app.add_option("--greedy", o.greedy,
                 "write greedy tokens and top-2 logit gaps (prompts of --prompt-lens, --decode-steps) as JSON here");
  app.add_option("--teacher-forced", o.teacher_forced,
                 "feed fixed tokens at every decode step and write each step's logits error against the fp32 reference "
                 "(Note [Teacher-forced check]) as JSON here");
  app.add_option("--force-tokens", o.force_tokens,
                 "teacher-forced: the tokens to feed, from an fk_model --greedy file of the same run settings "
                 "(default: this build's own greedy tokens)");
  app.add_flag("--bench", o.bench, "measure decode and prefill throughput and memory");
  app.add_option("--decode-batches", o.decode_batches, "bench: decode batch sizes")->delimiter(',');
  app.add_option("--prompt-len", o.prompt_len, "bench: prompt length before decoding")->check(CLI::Range(1, 1 << 20));
  CLI::Option* prefill_opt =
      app.add_option("--prefill", o.prefill, "bench: prefill shapes BxS (encoders: the batches timed; default 1x128,1x512,32x128,32x512)")
          ->delimiter(',');
  app.add_option("--images", o.images, "dump (image encoders): images in the batch")->check(CLI::Range(1, 4096));
  app.add_option("--image-batches", o.image_batches, "bench (image encoders): image batch sizes (default 1,8,32)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--vision-arch", o.vision_arch,
                 "vision-language model: the vision tower's config id (--arch: the text model with multimodal rope); "
                 "--dump and --bench then run images + prompts (Note [Multimodal prefill])");
  app.add_option("--vision-layers", o.vision_layers, "vision-language model: tower blocks to build (0 = the config's)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--load-vision-weights", o.load_vision_weights, "vision-language model: load the tower's weights (HF names)");
  app.add_option("--save-vision-weights", o.save_vision_weights, "vision-language model: save the tower's weights (HF names)");
  app.add_option("--config-root", o.config_root, "vision-language model: the folder of <arch>/config.json (the special token ids)");
  app.add_option("--grids", o.grids, "dump (vision towers): image grids TxHxW in patches (default: the served size and two others)")
      ->delimiter(',');
  app.add_option("--tp", o.tp,
                 "tensor-parallel ranks: run the config's @tpN layout, one process per GPU started by fk_launch --nproc N, torchrun "
                 "or mpirun (causal LMs: --greedy, --teacher-forced, --dump, --bench, --load-weights)")
      ->check(CLI::Range(1, 64));
  app.add_option("--ep", o.ep,
                 "expert-parallel ranks of an MoE model: its experts split over the tensor-parallel group (--ep equal to --tp; "
                 "runs the config's @tpN_epN layout), or without --tp data-parallel attention with the experts split over the "
                 "ranks (the @epN layout; each rank its own prompts: --greedy, --teacher-forced, --bench)")
      ->check(CLI::Range(1, 64));
  app.add_option("--mem-steps", o.mem_steps, "bench: decode steps of the memory-growth check (0 = skip)");
  app.add_option("--jsonl", o.jsonl, "bench: write JSON lines here");
  app.add_option("--markdown", o.markdown, "bench: write a markdown table here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : fk::kExitUsage;
  }
  const bool prefill_given = prefill_opt->count() > 0;
  if (list) {
    // arch, runner (causal-lm: generation; embedding: pooled vectors), task
    for (const fk::TaskInfo* t : fk::all_tasks()) {
      if (t->level != 4 || !(t->make_model || t->make_encoder || t->make_image_encoder || t->make_vision_tower)) continue;
      const char* runner = t->make_model             ? "causal-lm"
                           : t->make_encoder         ? "embedding"
                           : t->make_image_encoder   ? "image-encoder"
                                                     : "vision-tower";
      for (const auto& a : t->archs) {
        const bool dp = data_parallel_arch(a);
        std::cout << a << "  " << runner << "  " << t->name
                  << (dp                ? "  (data-parallel attention + expert parallelism: --ep " + std::to_string(t->tp_size) + ")"
                      : t->tp_size > 1 ? "  (tensor-parallel: --tp " + std::to_string(t->tp_size) + ")"
                                       : "")
                  << "\n";
      }
    }
    return fk::kExitOk;
  }
  if (o.arch.empty()) {
    std::cerr << "fk_model: --arch is required (see --list)\n";
    return fk::kExitUsage;
  }
  for (const std::string& spec : o.prefill) {
    const auto x = spec.find('x');
    if (x == std::string::npos || x == 0 || x + 1 == spec.size() ||
        spec.find_first_not_of("0123456789x") != std::string::npos) {
      std::cerr << "fk_model: --prefill: '" << spec << "' is not BxS (e.g. 8x2048)\n";
      return fk::kExitUsage;
    }
  }
  if (o.vision_arch.empty() && (o.vision_layers || !o.load_vision_weights.empty() || !o.save_vision_weights.empty())) {
    std::cerr << "fk_model: --vision-layers, --load-vision-weights and --save-vision-weights need --vision-arch\n";
    return fk::kExitUsage;
  }
  if (o.dump.empty() && !o.bench && o.save_weights.empty() && o.save_vision_weights.empty() && o.greedy.empty() &&
      o.teacher_forced.empty()) {
    std::cerr << "fk_model: nothing to do: give --dump, --greedy, --teacher-forced, --bench or --save-weights\n";
    return fk::kExitUsage;
  }
  if (!o.force_tokens.empty() && o.teacher_forced.empty()) {
    std::cerr << "fk_model: --force-tokens needs --teacher-forced\n";
    return fk::kExitUsage;
  }
  if (o.tp > 1) {  // Note [Tensor-parallel runs]
    if (o.arch.find('@') != std::string::npos) {
      std::cerr << "fk_model: --arch " << o.arch << " names a layout already; give the config id and --tp " << o.tp << "\n";
      return fk::kExitUsage;
    }
    if (!o.save_weights.empty() || !o.vision_arch.empty()) {
      std::cerr << "fk_model: --tp runs --greedy, --teacher-forced, --dump and --bench (weights seeded or from --load-weights); "
                   "--save-weights and --vision-arch run unsharded (drop --tp; save the unsharded model's weights and load them)\n";
      return fk::kExitUsage;
    }
    o.arch += "@tp" + std::to_string(o.tp);
    if (o.ep > 1) o.arch += "_ep" + std::to_string(o.ep);
  }
  if (o.ep > 1 && o.tp > 1 && o.ep != o.tp) {
    std::cerr << "fk_model: --ep " << o.ep << " with --tp " << o.tp
              << ": expected --ep equal to --tp (expert parallelism inside the tensor-parallel group) or --ep alone (data-parallel "
                 "attention: Note [Data-parallel runs])\n";
    return fk::kExitUsage;
  }
  if (o.data_parallel()) {  // Note [Data-parallel runs]
    if (o.arch.find('@') != std::string::npos) {
      std::cerr << "fk_model: --arch " << o.arch << " names a layout already; give the config id and --ep " << o.ep << "\n";
      return fk::kExitUsage;
    }
    if (!o.save_weights.empty() || !o.vision_arch.empty() || !o.dump.empty()) {
      std::cerr << "fk_model: --ep without --tp (data-parallel attention) runs --greedy, --teacher-forced and --bench (weights seeded "
                   "or from --load-weights); --dump, --save-weights and --vision-arch run unsharded or under --tp\n";
      return fk::kExitUsage;
    }
    o.arch += "@ep" + std::to_string(o.ep);
  }
  const fk::TaskInfo* task = find_model(o.arch);
  if (!task) {
    std::cerr << "fk_model: no generated model for architecture '" << o.arch << "' (see --list"
              << (o.tp > 1 ? "; a layout is generated where the config's fastkernels.json lists it: fastkernels add --parallel tp" +
                                 std::to_string(o.tp)
                           : std::string())
              << ")\n";
    return fk::kExitUsage;
  }
  if (task->tp_size != o.ranks()) {
    const bool dp = data_parallel_arch(o.arch);
    std::cerr << "fk_model: " << o.arch << " (" << task->name << ") is sharded for " << task->tp_size
              << (dp ? "-way data-parallel attention with expert parallelism: run it with --ep " : "-way tensor parallelism: run it with --tp ")
              << task->tp_size << " and the config id\n";
    return fk::kExitUsage;
  }
  if (o.ranks() > 1 && !task->make_model) {
    std::cerr << "fk_model: --tp / --ep run causal LMs; " << o.arch << " is not one\n";
    return fk::kExitUsage;
  }
  if ((task->make_encoder || task->make_image_encoder || task->make_vision_tower) && (!o.greedy.empty() || !o.teacher_forced.empty())) {
    std::cerr << "fk_model: " << o.arch << " is an encoder (" << task->name
              << "): --greedy and --teacher-forced are for causal LMs; use --dump, --bench or --save-weights\n";
    return fk::kExitUsage;
  }
  if (!o.vision_arch.empty()) {  // checked before the device: usage errors need no GPU
    const fk::TaskInfo* vtask = find_model(o.vision_arch);
    if (!task->make_model || !vtask || !vtask->make_vision_tower) {
      std::cerr << "fk_model: --arch " << o.arch << " must be a causal LM and --vision-arch " << o.vision_arch
                << " a vision tower (see --list): " << (!task->make_model ? "--arch is not a causal LM" : "--vision-arch is not a vision tower")
                << "\n";
      return fk::kExitUsage;
    }
    if (!o.greedy.empty() || !o.teacher_forced.empty()) {
      std::cerr << "fk_model: --greedy and --teacher-forced are for text-only causal LMs; with --vision-arch use --dump, --bench or the weights\n";
      return fk::kExitUsage;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cerr << "fk_model: no CUDA device\n";
    return fk::kExitNoGpu;
  }
  if (!o.vision_arch.empty()) {  // a vision-language model: the tower + the text model (Note [Multimodal prefill])
    const fk::TaskInfo* vtask = find_model(o.vision_arch);
    try {
      const VlmTokens tok = read_vlm_tokens(o.config_root, o.arch);
      std::unique_ptr<fk::CausalLM> lm = task->make_model(o.layers);
      std::unique_ptr<fk::VisionTowerModel> tower = vtask->make_vision_tower(o.vision_layers);
      if (!lm->takes_input_embeddings()) throw std::runtime_error(task->name + " takes no input embeddings: it cannot be a VLM's text model");
      prepare_model(*lm, *task, o);
      prepare_model(*tower, *vtask, o, /*vision=*/true);
      int rc = fk::kExitOk;
      if (!o.dump.empty()) rc = run_vlm_dump(*lm, *tower, o, tok);
      if (rc == fk::kExitOk && o.bench) rc = run_vlm_bench(*lm, *tower, o, tok);
      return rc;
    } catch (const std::exception& e) {
      std::cerr << "fk_model: " << e.what() << "\n";
      return fk::kExitFailed;
    }
  }
  if (task->make_vision_tower) {  // a dynamic-resolution vision tower: the dump, throughput, weights
    try {
      std::unique_ptr<fk::VisionTowerModel> model = task->make_vision_tower(o.layers);
      prepare_model(*model, *task, o);
      int rc = fk::kExitOk;
      if (!o.dump.empty()) rc = run_tower_dump(*model, o);
      if (rc == fk::kExitOk && o.bench) rc = run_tower_bench(*model, o);
      return rc;
    } catch (const std::exception& e) {
      std::cerr << "fk_model: " << e.what() << "\n";
      return fk::kExitFailed;
    }
  }
  if (task->make_image_encoder) {  // a vision encoder: the dump, throughput, weights
    try {
      std::unique_ptr<fk::ImageEncoderModel> model = task->make_image_encoder(o.layers);
      prepare_model(*model, *task, o);
      int rc = fk::kExitOk;
      if (!o.dump.empty()) rc = run_image_dump(*model, o);
      if (rc == fk::kExitOk && o.bench) rc = run_image_bench(*model, o);
      return rc;
    } catch (const std::exception& e) {
      std::cerr << "fk_model: " << e.what() << "\n";
      return fk::kExitFailed;
    }
  }
  if (task->make_encoder) {  // an embedding model: the dump, throughput, weights
    try {
      std::unique_ptr<fk::EncoderModel> model = task->make_encoder(o.layers);
      prepare_model(*model, *task, o);
      int rc = fk::kExitOk;
      if (!o.dump.empty()) rc = run_encoder_dump(*model, o);
      if (rc == fk::kExitOk && o.bench) {
        std::vector<std::string> shapes = o.prefill;
        if (!prefill_given) {  // batch-1 latency and batch-32 throughput at 128 tokens and at the context
          shapes.clear();
          const int64_t ctx = std::min<int64_t>(512, model->max_position());
          for (int64_t b : {1, 32})
            for (int64_t l : {std::min<int64_t>(128, ctx), ctx}) {
              const std::string spec = std::to_string(b) + "x" + std::to_string(l);
              if (std::find(shapes.begin(), shapes.end(), spec) == shapes.end()) shapes.push_back(spec);
            }
        }
        rc = run_encoder_bench(*model, o, shapes);
      }
      return rc;
    } catch (const std::exception& e) {
      std::cerr << "fk_model: " << e.what() << "\n";
      return fk::kExitFailed;
    }
  }
  std::unique_ptr<fk::dist::TcpStore> store;  // outlive the model: its forward uses the group
  std::unique_ptr<fk::dist::GroupCoordinator> group;
  struct Unset {  // the group's destructor uninstalls it
    ~Unset() {
      g_store = nullptr;
      g_data_parallel = false;
    }
  } unset;
  try {
    if (o.ranks() > 1) {
      const fk::dist::DistEnv env = fk::dist::dist_env();
      const std::string flag = o.tp > 1 ? "--tp " + std::to_string(o.tp) : "--ep " + std::to_string(o.ep);
      if (env.world_size != o.ranks())
        throw std::runtime_error(flag + " needs " + std::to_string(o.ranks()) + " processes, one per GPU; this one is rank " +
                                 std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " (launcher: " + env.launcher +
                                 "): start it with fk_launch --nproc " + std::to_string(o.ranks()) + " -- fk_model ... (or torchrun / mpirun)");
      store = std::make_unique<fk::dist::TcpStore>(env, std::chrono::seconds(300));
      group = std::make_unique<fk::dist::GroupCoordinator>(*store, std::chrono::seconds(300));
      fk::dist::set_tp_group(group.get());
      g_store = store.get();
      g_data_parallel = o.data_parallel();
      std::cerr << "fk_model: rank " << group->rank() << " of " << group->world_size() << " (" << env.launcher << "), all-reduce "
                << (group->peer() ? "own peer all-reduce + NCCL" : "NCCL (" + group->peer_unavailable() + ")") << "\n";
    }
    std::unique_ptr<fk::CausalLM> model = task->make_model(o.layers);  // 0: the config's layer count
    prepare_model(*model, *task, o);
    int rc = fk::kExitOk;
    if (!o.dump.empty()) rc = run_dump(*model, o);
    if (rc == fk::kExitOk && !o.greedy.empty()) rc = run_greedy(*model, o);
    if (rc == fk::kExitOk && !o.teacher_forced.empty()) rc = run_teacher_forced(*model, o);
    if (rc == fk::kExitOk && o.bench) rc = run_bench(*model, o);
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "fk_model: " << e.what() << "\n";
    return fk::kExitFailed;
  }
}
