// Harness and forward glue for the `rms_norm` and `fused_add_rms_norm` task kinds, which both
// mirror vllm.model_executor.layers.layernorm.RMSNorm (forward(x) and forward(x, residual)).
// The `gemma_rms_norm` / `gemma_fused_add_rms_norm` kinds mirror GemmaRMSNorm (weight used as
// 1 + w, no intermediate rounding) through the same glue with Cfg::gemma set.
// Cfg (generated): hidden_size, eps, scalar_t, gemma (optional, false when absent).
#pragma once

#include <tuple>
#include <type_traits>

#include "fk/kernels/reference/rms_norm_ref.cuh"
#include "fk/kernels/rms_norm.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

template <class Cfg, class = void> struct GemmaNormOf : std::false_type {};
template <class Cfg> struct GemmaNormOf<Cfg, std::void_t<decltype(Cfg::gemma)>> : std::bool_constant<Cfg::gemma> {};

/// RMSNorm.forward(x): out = rmsnorm(x) * weight (a new tensor).
template <class Cfg> Tensor rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.size(-1) == Cfg::hidden_size && x.stride(-1) == 1, "RMSNorm input " + x.str());
  const int64_t rows = x.numel() / Cfg::hidden_size;
  Tensor x2 = x.dim() == 2 ? x : x.view({rows, Cfg::hidden_size});
  Tensor out = empty(x.sizes(), x.dtype());
  fk::kernels::rms_norm<Cfg::hidden_size, T, 0, -1, GemmaNormOf<Cfg>::value>(out.data<T>(), Cfg::hidden_size, x2.data<T>(), x2.stride(0),
                                            weight.data<T>(), rows, static_cast<float>(eps), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// RMSNorm.forward(x, residual): residual += x; x = rmsnorm(residual) * weight, in place.
template <class Cfg>
std::tuple<Tensor, Tensor> fused_add_rms_norm_forward(Tensor& x, Tensor& residual, const Tensor& weight, double eps) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.size(-1) == Cfg::hidden_size && residual.sizes() == x.sizes(), "RMSNorm inputs " + x.str() + ", " + residual.str());
  const int64_t rows = x.numel() / Cfg::hidden_size;
  fk::kernels::fused_add_rms_norm<Cfg::hidden_size, T, 0, -1, GemmaNormOf<Cfg>::value>(x.data<T>(), x.dim() == 2 ? x.stride(0) : Cfg::hidden_size,
                                                      residual.data<T>(), residual.dim() == 2 ? residual.stride(0) : Cfg::hidden_size,
                                                      weight.data<T>(), rows, static_cast<float>(eps), current_stream());
  FK_CHECK_LAUNCH();
  return {x, residual};
}

/// One case of an rms_norm / fused_add_rms_norm task. Case dims: num_tokens.
template <class Module, class Cfg, bool kFusedAdd> class RmsNormInstance final : public TaskInstance {
 public:
  explicit RmsNormInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), module_(Cfg::hidden_size, Cfg::eps) {
    const double set_bytes = double(tokens_) * Cfg::hidden_size * sizeof(T) * (kFusedAdd ? 2 : 1);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n * (kFusedAdd ? 2 : 1) + set_bytes, "rms_norm inputs");
    for (int s = 0; s < n; ++s) {
      x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
      if (kFusedAdd) {
        res_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
        x0_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
        res0_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
      }
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(module_.weight, mix_seed(seed, 0), GemmaNormOf<Cfg>::value ? 0.f : 1.f, 0.1f);  // Gemma: 1 + w ~ 1
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 1 + s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(x_[s], mix_seed(seed, 0));
    if (kFusedAdd) {
      fill_normal(res_[s], mix_seed(seed, 1));
      copy_(x0_[s], x_[s]);
      copy_(res0_[s], res_[s]);
    }
  }
  void prepare(int s) override {
    if (kFusedAdd) {  // in place: restore both inputs from their pristine copies
      copy_(x_[s], x0_[s]);
      copy_(res_[s], res0_[s]);
    }
  }
  void run(int s) override {
    if constexpr (kFusedAdd) {
      module_.forward(x_[s], res_[s]);
    } else {
      out_[s] = module_.forward(x_[s]);
    }
  }
  std::vector<Tensor> inputs(int s) override {
    if (kFusedAdd) return {module_.weight, x0_[s], res0_[s]};
    return {module_.weight, x_[s]};
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::hidden_size}, DType::kF32);
    Tol tol = default_tolerance(dtype_of<T>);
    constexpr float kOffset = GemmaNormOf<Cfg>::value ? 1.f : 0.f;  // GemmaRMSNorm multiplies by 1 + w
    if constexpr (kFusedAdd) {
      Tensor ref_res = empty({tokens_, Cfg::hidden_size}, DType::kF32);
      fk::kernels::reference::rms_norm_ref<T>(ref.data<float>(), ref_res.data<float>(), x0_[s].data<T>(), Cfg::hidden_size,
                                             res0_[s].data<T>(), Cfg::hidden_size, module_.weight.template data<T>(), tokens_,
                                             Cfg::hidden_size, static_cast<float>(Cfg::eps), current_stream(), kOffset);
      FK_CHECK_LAUNCH();
      return {{"out", x_[s], ref, tol}, {"residual", res_[s], ref_res, tol}};
    } else {
      fk::kernels::reference::rms_norm_ref<T>(ref.data<float>(), nullptr, x_[s].data<T>(), Cfg::hidden_size, nullptr, 0,
                                             module_.weight.template data<T>(), tokens_, Cfg::hidden_size,
                                             static_cast<float>(Cfg::eps), current_stream(), kOffset);
      FK_CHECK_LAUNCH();
      return {{"out", out_[s], ref, tol}};
    }
  }
  Cost cost() const override {
    const double row = double(Cfg::hidden_size) * sizeof(T);
    // plain: read x, write out; fused: read x and residual, write both; plus the weight once.
    const double bytes = tokens_ * row * (kFusedAdd ? 4 : 2) + row;
    return {double(tokens_) * Cfg::hidden_size * (kFusedAdd ? 5 : 4), bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  using Tol = Tolerance;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, res_, x0_, res0_, out_;
};

}  // namespace fk::tasks
