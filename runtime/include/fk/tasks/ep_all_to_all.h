// The expert-parallel all-to-all as an L1 task (issue 23): kind ep_all_to_all, the dispatch and combine of an MoE block
// at a data-parallel layout.
//
// Note [Expert-parallel all-to-all task]
// A layout with data-parallel attention and expert parallelism ({"ep": N} alone: Note [Data-parallel expert MoE] in
// fk/tasks/moe.h) lowers, per MoE block shape, one task ep_all_to_all_e{E}_top{k}_h{H}_ep{N}: the block's collective
// child, the module the block calls to move its tokens to the ranks of their experts and back. Its interface is
// DeepEP's intranode Buffer (vLLM's FusedMoEPrepareAndFinalize.prepare / finalize at --enable-expert-parallel):
//   dispatch(x [T, H] bf16, topk_ids i32 [T, k], topk_weights f32 [T, k]) -> handle (fk::dist::EpDispatch): the rows
//     every rank sent here, each token once per rank holding one of its experts, with its k global ids and weights;
//   combine(handle, y) -> [T, H]: y laid out as the received rows (the rank's results for them); per token the sum of
//     the rows of every rank it went to.
// The task's own path is the group's fk::dist::EpAllToAll (Note [Expert-parallel all-to-all] in
// fk/kernels/ep_all_to_all.cuh: peer-memory kernels on one host); a candidate replaces both calls, and with them the
// all-to-all of every MoE block, layer and model of the layout above it.
// Checked as a round trip: between dispatch and combine the task runs stand-in experts on the received rows
// (ep_weighted_rows: a row times the sum of its weights on this rank's experts, 0 for a stale row), so the combined row
// of a token must be x times the sum of all its k weights: a token sent to a wrong rank, twice, or not at all, a row
// delivered with another token's ids or weights, a stale row read, or a combine that drops a rank all change it. Each
// rank draws its own tokens and routing (seed_of_rank: data-parallel ranks hold different tokens); the reference is
// computed on the host from the rank's own draws. The peer: the same round trip over NCCL send / recv (the group's
// EpAllToAll with its NCCL backend: what a vLLM data-parallel deployment without DeepEP runs), timed in the same run.
// Case dim num_tokens is each rank's token count (DeepEP's "tokens per GPU"); every rank runs the same case.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "fk/kernels/moe_routing.cuh"
#include "fk/tasks/moe.h"

namespace fk::tasks {

/// The task's dispatch (Note [Expert-parallel all-to-all task]): the group's all-to-all.
template <class Cfg> fk::dist::EpDispatch ep_dispatch_forward(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights) {
  FK_CHECK(x.dim() == 2 && x.size(1) == Cfg::hidden_size && x.dtype() == dtype_of<typename Cfg::scalar_t>,
           "ep_all_to_all dispatch: hidden states [T, " + std::to_string(Cfg::hidden_size) + "] of " +
               dtype_name(dtype_of<typename Cfg::scalar_t>) + ", got " + x.str());
  FK_CHECK(topk_ids.dim() == 2 && topk_ids.size(0) == x.size(0) && topk_ids.size(1) == Cfg::top_k && topk_ids.dtype() == DType::kI32 &&
               topk_weights.sizes() == topk_ids.sizes() && topk_weights.dtype() == DType::kF32,
           "ep_all_to_all dispatch: topk_ids i32 and topk_weights f32 [T, " + std::to_string(Cfg::top_k) + "], got " + topk_ids.str() +
               ", " + topk_weights.str());
  FK_CHECK(fk::dist::tp_world_size() == Cfg::ep_size, "ep_all_to_all: " + std::to_string(Cfg::ep_size) + " expert-parallel ranks in a group of " +
                                                          std::to_string(fk::dist::tp_world_size()));
  return fk::dist::tp_ep_dispatch(x, topk_ids, topk_weights, static_cast<int>(Cfg::num_experts));
}

/// The task's combine: the handle's all-to-all.
template <class Cfg> Tensor ep_combine_forward(const fk::dist::EpDispatch& handle, const Tensor& y) {
  return fk::dist::tp_ep_combine(handle, y);
}

/// The round trip's stand-in experts (ep_weighted_rows) on the rows `d` delivered.
inline Tensor ep_stand_in_experts(const fk::dist::EpDispatch& d) {
  const Tensor local = ep_received_local_ids(d);
  Tensor y = empty(d.x.sizes(), DType::kBF16);
  fk::kernels::ep_weighted_rows(y.data<bf16>(), d.x.data<bf16>(), d.topk_weights.data<float>(), local.data<int32_t>(), d.x.size(0),
                                d.x.size(1), static_cast<int>(d.topk_ids.size(1)), current_stream());
  FK_CHECK_LAUNCH();
  return y;
}

/// One case of an ep_all_to_all task (Note [Expert-parallel all-to-all task]). Case dims: num_tokens (per rank).
template <class Module, class Cfg> class EpAllToAllInstance final : public TaskInstance {
 public:
  explicit EpAllToAllInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    static_assert(std::is_same_v<typename Cfg::scalar_t, bf16>, "the expert-parallel all-to-all moves bf16 rows");
    const double row = double(Cfg::hidden_size) * sizeof(T);
    const double set_bytes = double(tokens_) * (row + Cfg::top_k * 8.0);
    const int n = rotating_sets(set_bytes);
    // the sets, every rank's rows received (a bucket each) and their results, the output and its fp32 reference
    const int64_t cap = fk::dist::doubling_bucket(tokens_, 8);  // tp_ep_dispatch's capacity
    require_device_memory(set_bytes * n + 2.0 * Cfg::ep_size * cap * (row + Cfg::top_k * 8.0) + tokens_ * (row + 4.0 * Cfg::hidden_size),
                          "ep_all_to_all rows");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    routing_.resize(n);
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    const uint64_t mine = seed_of_rank(seed, fk::dist::tp_rank());  // this rank's tokens and routing
    fill_normal(x_[s], mine);
    // Not renormalized: the weights' sum differs by token, so a combine that hands back the input unchanged fails.
    routing_[s] = random_routing(tokens_, static_cast<int>(Cfg::num_experts), Cfg::top_k, false, mix_seed(mine, 1));
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override {
    Module m(from_config);
    const fk::dist::EpDispatch d = m.dispatch(x_[s], routing_[s].ids, routing_[s].weights);
    out_[s] = m.combine(d, ep_stand_in_experts(d));
  }
  std::vector<Tensor> inputs(int s) override { return {x_[s], routing_[s].ids, routing_[s].weights}; }
  std::vector<CheckedOutput> reference(int s) override {
    // out[t] = x[t] * (sum of its k weights), from this rank's own draws, on the host.
    const std::vector<float> x = to_host<float>(to_f32(x_[s])), w = to_host<float>(routing_[s].weights);
    const std::vector<int32_t>& ids = routing_[s].host_ids;
    std::vector<float> ref(x.size());
    for (int64_t t = 0; t < tokens_; ++t) {
      float scale = 0.f;
      for (int k = 0; k < Cfg::top_k; ++k)
        if (ids[t * Cfg::top_k + k] >= 0) scale += w[t * Cfg::top_k + k];
      for (int64_t c = 0; c < Cfg::hidden_size; ++c) ref[t * Cfg::hidden_size + c] = x[t * Cfg::hidden_size + c] * scale;
    }
    // Each rank's row is rounded to bf16 once (its share of the weights), the ranks' rows summed in fp32 and rounded
    // again: a few bf16 roundings of an O(1) value.
    return {{"output", out_[s], to_device(ref, {tokens_, Cfg::hidden_size}), default_tolerance(dtype_of<T>)}};
  }
  /// The same round trip over NCCL send / recv (the group's EpAllToAll with its NCCL backend).
  std::string peer_name() const override { return "nccl_send_recv"; }
  void run_peer(int s) override {
    const fk::dist::EpDispatch d = fk::dist::tp_ep_dispatch(x_[s], routing_[s].ids, routing_[s].weights, static_cast<int>(Cfg::num_experts), true);
    peer_out_ = fk::dist::tp_ep_combine(d, ep_stand_in_experts(d));
  }
  /// This rank's HBM traffic: its rows read and sent to each rank holding one of their experts (expected ranks per
  /// token for k distinct experts out of E spread evenly), the same rows received, weighted and returned, the output.
  Cost cost() const override {
    const double row = double(Cfg::hidden_size) * sizeof(T);
    return {double(tokens_) * Cfg::hidden_size * expected_ranks(), double(tokens_) * row * (2.0 + 4.0 * expected_ranks())};
  }

 private:
  using T = typename Cfg::scalar_t;
  /// E[ranks holding at least one of a token's k distinct experts] = W (1 - C(E - E/W, k) / C(E, k)).
  static double expected_ranks() {
    const double E = double(Cfg::num_experts), L = E / Cfg::ep_size;
    double none = 1.0;  // P(no expert on a given rank)
    for (int i = 0; i < Cfg::top_k; ++i) none *= std::max(0.0, (E - L - i) / (E - i));
    return Cfg::ep_size * (1.0 - none);
  }
  int64_t tokens_;
  std::vector<Tensor> x_, out_;
  std::vector<Routing> routing_;
  Tensor peer_out_;
};

}  // namespace fk::tasks
