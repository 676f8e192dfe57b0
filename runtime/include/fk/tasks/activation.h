// Harness and forward glue for the `activation` task kind: one single-tensor activation (GELU,
// GELU-tanh, QuickGELU, ReLU, SiLU, Sigmoid, Tanh) as vLLM's get_act_fn(name) module applies it
// (forward(x [T, H]) -> [T, H]): the encoder and vision MLPs' fc1 -> act -> fc2.
// Cfg (generated): hidden_size, activation, scalar_t.
#pragma once

#include "fk/kernels/activation.cuh"
#include "fk/kernels/reference/activation_ref.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// Activation.forward(x [T, H], rows may be strided) -> act(x), a new contiguous tensor.
template <class Cfg> Tensor activation_forward(const Tensor& x) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size;
  FK_CHECK(x.dim() == 2 && x.size(1) == H && x.stride(1) == 1 && x.dtype() == dtype_of<T>,
           "Activation input " + x.str() + ": expected [T, " + std::to_string(H) + "] rows of " + dtype_name(dtype_of<T>));
  Tensor out = empty({x.size(0), H}, x.dtype());
  fk::kernels::activation<T, H, Cfg::activation>(out.data<T>(), x.data<T>(), x.stride(0), x.size(0), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// One case of an activation task. Case dims: num_tokens. Inputs N(0, 3^2): GELU's and the
/// sigmoid's curved range and both ReLU halves, and tanh into saturation.
template <class Module, class Cfg> class ActivationInstance final : public TaskInstance {
 public:
  explicit ActivationInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * Cfg::hidden_size * 2 * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "activation inputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed, 0.f, 3.f); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::activation_ref<T>(ref.data<float>(), x_[s].data<T>(), Cfg::hidden_size, tokens_,
                                              static_cast<int>(Cfg::hidden_size), Cfg::activation, current_stream());
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double elems = double(tokens_) * Cfg::hidden_size;
    return {elems * 8, elems * 2 * sizeof(T)};  // read x, write out
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, out_;
};

}  // namespace fk::tasks
