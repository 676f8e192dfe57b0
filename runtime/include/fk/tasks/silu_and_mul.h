// Harness and forward glue for the `silu_and_mul` task kind: mirrors
// vllm.model_executor.layers.activation.SiluAndMul (forward(x [T, 2I]) -> [T, I]), and of its
// GeluAndMul (tanh: Gemma; exact: the gelu_and_mul kind) and SwigluOAIAndMul (gpt-oss:
// interleaved gate/up, clamped) forms.
// Cfg (generated): intermediate_size, activation, alpha, limit, scalar_t.
#pragma once

#include "fk/kernels/reference/silu_and_mul_ref.cuh"
#include "fk/kernels/silu_and_mul.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// The gate activation of a Cfg (Cfg::activation; silu when absent).
template <class Cfg, class = void> struct ActOf {
  static constexpr fk::kernels::GatedAct value = fk::kernels::GatedAct::kSilu;
};
template <class Cfg> struct ActOf<Cfg, std::void_t<decltype(Cfg::activation)>> {
  static constexpr fk::kernels::GatedAct value = Cfg::activation;
};

/// SiluAndMul.forward(x) / GeluAndMul.forward(x): act(x[..., :I]) * x[..., I:] (a new tensor).
template <class Cfg> Tensor silu_and_mul_forward(const Tensor& x) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t I = Cfg::intermediate_size;
  FK_CHECK(x.size(-1) == 2 * I && x.stride(-1) == 1 && (x.dim() == 2 || x.is_contiguous()), "SiluAndMul input " + x.str());
  const int64_t rows = x.numel() / (2 * I);
  Shape out_shape = x.sizes();
  out_shape.back() = I;
  Tensor out = empty(out_shape, x.dtype());
  const int64_t x_stride = x.dim() == 2 ? x.stride(0) : 2 * I;
  if constexpr (ActOf<Cfg>::value == fk::kernels::GatedAct::kSwigluOai) {
    fk::kernels::swigluoai_and_mul<T, I>(out.data<T>(), I, x.data<T>(), x_stride, rows, static_cast<float>(Cfg::alpha),
                                         static_cast<float>(Cfg::limit), current_stream());
  } else {
    fk::kernels::silu_and_mul<T, I, ActOf<Cfg>::value>(out.data<T>(), I, x.data<T>(), x_stride, rows, current_stream());
  }
  FK_CHECK_LAUNCH();
  return out;
}

/// One case of a silu_and_mul task. Case dims: num_tokens.
template <class Module, class Cfg> class SiluAndMulInstance final : public TaskInstance {
 public:
  explicit SiluAndMulInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * Cfg::intermediate_size * 3 * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "silu_and_mul inputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, 2 * Cfg::intermediate_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    // SwigluOAIAndMul clamps at +-limit (7 for gpt-oss): spread the inputs past it (N(0, 4)).
    const float std = ActOf<Cfg>::value == fk::kernels::GatedAct::kSwigluOai ? 4.f : 1.f;
    fill_normal(x_[s], seed, 0.f, std);
  }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::intermediate_size}, DType::kF32);
    if constexpr (ActOf<Cfg>::value == fk::kernels::GatedAct::kSwigluOai) {
      fk::kernels::reference::swigluoai_and_mul_ref<T>(ref.data<float>(), x_[s].data<T>(), 2 * Cfg::intermediate_size, tokens_,
                                                       Cfg::intermediate_size, static_cast<float>(Cfg::alpha),
                                                       static_cast<float>(Cfg::limit), current_stream());
    } else {
      fk::kernels::reference::silu_and_mul_ref<T>(ref.data<float>(), x_[s].data<T>(), 2 * Cfg::intermediate_size, tokens_,
                                                  Cfg::intermediate_size, current_stream(), ActOf<Cfg>::value);
    }
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double elems = double(tokens_) * Cfg::intermediate_size;
    return {elems * 5, elems * 3 * sizeof(T)};  // read gate and up, write out
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, out_;
};

}  // namespace fk::tasks
