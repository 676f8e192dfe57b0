// The all-reduce fused with the residual add and RMSNorm after it (issue 23): the L2 task of kind
// all_reduce_add_rms_norm, what vLLM's AllReduceFusionPass makes of a tensor-parallel layer's
// tensor_model_parallel_all_reduce followed by fused_add_rms_norm.
//
// Note [Fused all-reduce task]
// A layout with tp_size > 1 lowers, per decoder layer kind, one task all_reduce_add_rms_norm_h{H}_eps{e}_tp{n}: the
// layer's post-attention RMSNorm (its child `norm`, the same weights) with the all-reduce of the attention's row-parallel
// output fused in. forward(x, residual) takes this rank's partial x [T, H] (left as it was) and the residual stream
// [T, H] (the same on every rank; updated in place, as fused_add_rms_norm does), and returns (out, residual):
// residual += sum over the ranks of x; out = RMSNorm(residual) * weight. Where the group gives the message to its own
// peer all-reduce (Note [Group all-reduce choice]) that is one kernel (fk::dist::all_reduce_add_rms_norm: the sum in
// fp32 in rank order, bitwise the unfused pair); elsewhere NCCL's all-reduce, then the fused_add_rms_norm kernel.
// Checked against the sum of every rank's partial, redrawn on each rank (Note [Collective tasks]), rounded to the model
// dtype, then the RMSNorm reference; its peer is the unfused pair the layers run today (the group's all-reduce, then
// fused_add_rms_norm). The decoder layers do not call this task: on H100 / H200 the fused kernel took 1.6-2.0x the
// all-reduce alone at decode sizes (bench/results/2026-11-27-h100x4-s25), more than the unfused pair, so the layers keep
// the pair; a candidate that beats the pair is what would change that.
#pragma once

#include <memory>
#include <tuple>
#include <vector>

#include "fk/runtime/peer_allreduce_fused.cuh"
#include "fk/tasks/collective.h"
#include "fk/tasks/rms_norm.h"

namespace fk::tasks {

/// Config: hidden_size, eps, tp_size, scalar_t. residual is updated in place.
template <class Cfg>
std::tuple<Tensor, Tensor> all_reduce_add_rms_norm_forward(const Tensor& x, Tensor& residual, const Tensor& weight, double eps) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.size(-1) == Cfg::hidden_size && residual.sizes() == x.sizes() && x.is_contiguous() && residual.is_contiguous() &&
               x.dtype() == dtype_of<T> && residual.dtype() == dtype_of<T>,
           "all_reduce_add_rms_norm: contiguous x and residual [..., " + std::to_string(Cfg::hidden_size) + "] of one shape, got " +
               x.str() + ", " + residual.str());
  const int64_t bytes = x.numel() * static_cast<int64_t>(sizeof(T));
  fk::dist::PeerAllReduce* par = fk::dist::tp_peer_all_reduce_for(bytes);
  Tensor out = empty_like(x);
  if (par != nullptr && par->unsupported(x).empty() && par->unsupported(residual).empty() && par->unsupported(out).empty()) {
    fk::dist::all_reduce_add_rms_norm<Cfg::hidden_size, T>(*par, x, residual, weight, static_cast<float>(eps), out);
    return {out, residual};
  }
  out = fk::dist::tp_all_reduce(x);
  return fused_add_rms_norm_forward<Cfg>(out, residual, weight, eps);
}

/// One case of an all_reduce_add_rms_norm task (Note [Fused all-reduce task]). Case dims: num_tokens.
template <class Module, class Cfg> class AllReduceAddRmsNormInstance final : public TaskInstance {
 public:
  explicit AllReduceAddRmsNormInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * Cfg::hidden_size * sizeof(T);
    const int n = rotating_sets(4 * set_bytes);
    require_device_memory(set_bytes * n * 4 + set_bytes * 8, "all_reduce_add_rms_norm inputs");
    for (int s = 0; s < n; ++s) {
      x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
      res_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
      res0_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    }
    out_.resize(n);
    seeds_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(module_.norm.weight, mix_seed(seed, 0), 1.f, 0.1f);  // the same on every rank
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 1 + s));
  }
  void refresh(int s, uint64_t seed) override {
    seeds_[s] = seed;
    fill_normal(x_[s], seed_of_rank(seed, fk::dist::tp_rank()));  // this rank's partial
    fill_normal(res0_[s], mix_seed(seed, 1));                       // the residual stream: the same on every rank
    copy_(res_[s], res0_[s]);
  }
  void prepare(int s) override {
    copy_(res_[s], res0_[s]);  // in place: restore the residual
    out_[s] = Tensor();
  }
  void run(int s) override { out_[s] = std::get<0>(module_.forward(x_[s], res_[s])); }
  std::vector<Tensor> inputs(int s) override { return {module_.norm.weight, x_[s], res0_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor other = empty({tokens_, Cfg::hidden_size}, dtype_of<T>);
    // the all-reduce's output, in the model dtype
    const Tensor reduced = ref::round_to(sum_of_rank_draws(other, seeds_[s], Cfg::tp_size), dtype_of<T>);
    Tensor ref_out = empty({tokens_, Cfg::hidden_size}, DType::kF32), ref_res = empty({tokens_, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::rms_norm_ref<T>(ref_out.data<float>(), ref_res.data<float>(), reduced.data<T>(), Cfg::hidden_size,
                                           res0_[s].data<T>(), Cfg::hidden_size, module_.norm.weight.template data<T>(), tokens_,
                                           Cfg::hidden_size, static_cast<float>(Cfg::eps), current_stream());
    FK_CHECK_LAUNCH();
    // An NCCL ring (above the peer all-reduce's sizes, or at more ranks) rounds each partial sum in the model dtype:
    // the sum's bound grows with the ranks as the all-reduce task's does (Note [Collective tasks]).
    Tolerance tol = default_tolerance(dtype_of<T>);
    tol.atol *= Cfg::tp_size;
    return {{"out", out_[s], ref_out, tol}, {"residual", res_[s], ref_res, tol}};
  }
  /// The unfused pair the layers run: the group's all-reduce, then fused_add_rms_norm.
  std::string peer_name() const override { return "all_reduce+fused_add_rms_norm"; }
  void run_peer(int s) override {
    copy_(res_[s], res0_[s]);
    Tensor reduced = fk::dist::tp_all_reduce(x_[s]);
    peer_out_ = std::get<0>(fused_add_rms_norm_forward<Cfg>(reduced, res_[s], module_.norm.weight, Cfg::eps));
  }
  /// This rank's HBM traffic: x and the residual read, the residual and out written, the weight.
  Cost cost() const override {
    const double row = double(Cfg::hidden_size) * sizeof(T);
    return {double(tokens_) * Cfg::hidden_size * (Cfg::tp_size + 4), tokens_ * row * 4 + row};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_{from_config};
  std::vector<Tensor> x_, res_, res0_, out_;
  std::vector<uint64_t> seeds_;
  Tensor peer_out_;
};

}  // namespace fk::tasks
