// Harness and forward glue for the `layer_norm` and `fused_add_layer_norm` task kinds. Both
// mirror torch.nn.LayerNorm (what vLLM's and HF's encoders and vision towers call):
// forward(x) -> out; the fused kind adds forward(x, residual) -> (out, x + residual), the
// pre-norm encoder's `h = attn_out + h; out = norm(h)` in one pass (flash-attn's
// layer_norm_fn(..., residual, prenorm=True) is the fused production form). Post-norm encoders
// (BERT: norm(dense_out + input)) take `out` and drop the sum.
// Cfg (generated): hidden_size, eps, bias, scalar_t.
#pragma once

#include <tuple>

#include "fk/kernels/layer_norm.cuh"
#include "fk/kernels/reference/layer_norm_ref.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// LayerNorm.forward(x): a new tensor (x - mean) * rstd * weight (+ bias) over the last dim.
template <class Cfg> Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.size(-1) == Cfg::hidden_size && x.stride(-1) == 1, "LayerNorm input " + x.str());
  const int64_t rows = x.numel() / Cfg::hidden_size;
  FK_CHECK(x.dim() == 2 || x.is_contiguous(), "LayerNorm input " + x.str() + ": rows must be one stride apart");
  const int64_t stride = x.dim() == 2 ? x.stride(0) : Cfg::hidden_size;
  Tensor out = empty(x.sizes(), x.dtype());
  fk::kernels::layer_norm<Cfg::hidden_size, T, Cfg::bias>(out.data<T>(), x.data<T>(), stride, weight.data<T>(),
                                                          Cfg::bias ? bias.data<T>() : nullptr, rows,
                                                          static_cast<float>(eps), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// forward(x, residual) -> (layer_norm(x + residual), x + residual), both new tensors.
template <class Cfg>
std::tuple<Tensor, Tensor> fused_add_layer_norm_forward(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                                        const Tensor& bias, double eps) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.size(-1) == Cfg::hidden_size && residual.sizes() == x.sizes() && x.stride(-1) == 1 &&
               residual.stride(-1) == 1,
           "LayerNorm inputs " + x.str() + ", " + residual.str());
  FK_CHECK((x.dim() == 2 || x.is_contiguous()) && (residual.dim() == 2 || residual.is_contiguous()),
           "LayerNorm inputs " + x.str() + ", " + residual.str() + ": rows must be one stride apart");
  const int64_t rows = x.numel() / Cfg::hidden_size;
  Tensor out = empty(x.sizes(), x.dtype()), sum = empty(x.sizes(), x.dtype());
  fk::kernels::fused_add_layer_norm<Cfg::hidden_size, T, Cfg::bias>(
      out.data<T>(), sum.data<T>(), x.data<T>(), x.dim() == 2 ? x.stride(0) : Cfg::hidden_size, residual.data<T>(),
      residual.dim() == 2 ? residual.stride(0) : Cfg::hidden_size, weight.data<T>(), Cfg::bias ? bias.data<T>() : nullptr,
      rows, static_cast<float>(eps), current_stream());
  FK_CHECK_LAUNCH();
  return {out, sum};
}

/// One case of a layer_norm / fused_add_layer_norm task. Case dims: num_tokens. Weights are
/// drawn around 1 (std 0.1) and biases around 0 (std 0.1), inputs N(0, 1) with a per-row offset,
/// so that the mean subtraction matters (a kernel that skipped it would fail).
template <class Module, class Cfg, bool kFusedAdd> class LayerNormInstance final : public TaskInstance {
  using T = typename Cfg::scalar_t;

 public:
  explicit LayerNormInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), module_(Cfg::hidden_size, Cfg::eps) {
    const double row_bytes = double(Cfg::hidden_size) * sizeof(T);
    const double set_bytes = tokens_ * row_bytes * (kFusedAdd ? 2 : 1);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + tokens_ * row_bytes * (kFusedAdd ? 2 : 1) * n, "layer_norm inputs and outputs");
    for (int s = 0; s < n; ++s) {
      x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
      if (kFusedAdd) res_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    }
    out_.resize(n);
    sum_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(module_.weight, mix_seed(seed, 0), 1.f, 0.1f);
    if (Cfg::bias) fill_normal(module_.bias, mix_seed(seed, 1), 0.f, 0.1f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(x_[s], mix_seed(seed, 0), 0.5f, 1.f);  // a mean of 0.5: the subtraction is not a no-op
    if (kFusedAdd) fill_normal(res_[s], mix_seed(seed, 1), -0.25f, 1.f);
  }
  void run(int s) override {
    if constexpr (kFusedAdd) {
      std::tie(out_[s], sum_[s]) = module_.forward(x_[s], res_[s]);
    } else {
      out_[s] = module_.forward(x_[s]);
    }
  }
  std::vector<Tensor> inputs(int s) override {
    std::vector<Tensor> in{module_.weight, x_[s]};
    if (Cfg::bias) in.push_back(module_.bias);
    if (kFusedAdd) in.push_back(res_[s]);
    return in;
  }
  std::vector<CheckedOutput> reference(int s) override {
    const Tolerance tol = default_tolerance(dtype_of<T>);
    Tensor ref = empty({tokens_, Cfg::hidden_size}, DType::kF32);
    Tensor ref_sum = kFusedAdd ? empty({tokens_, Cfg::hidden_size}, DType::kF32) : Tensor();
    fk::kernels::reference::layer_norm_ref<T>(
        ref.data<float>(), kFusedAdd ? ref_sum.data<float>() : nullptr, x_[s].data<T>(), Cfg::hidden_size,
        kFusedAdd ? res_[s].data<T>() : nullptr, Cfg::hidden_size, module_.weight.template data<T>(),
        Cfg::bias ? module_.bias.template data<T>() : nullptr, tokens_, Cfg::hidden_size, Cfg::eps, current_stream());
    FK_CHECK_LAUNCH();
    if constexpr (kFusedAdd) return {{"out", out_[s], ref, tol}, {"residual", sum_[s], ref_sum, tol}};
    return {{"out", out_[s], ref, tol}};
  }
  Cost cost() const override {
    const double row = double(Cfg::hidden_size) * sizeof(T);
    // plain: read x, write out; fused: read x and residual, write out and the sum; plus the
    // weight (and bias) once.
    const double bytes = tokens_ * row * (kFusedAdd ? 4 : 2) + row * (Cfg::bias ? 2 : 1);
    return {double(tokens_) * Cfg::hidden_size * (kFusedAdd ? 8 : 7), bytes};
  }

 private:
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, res_, out_, sum_;
};

}  // namespace fk::tasks
