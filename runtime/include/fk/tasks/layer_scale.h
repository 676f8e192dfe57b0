// Harness and forward glue for the `layer_scale` task kind (vision transformers with layer scale,
// issue 22: DINOv3, CaiT-style blocks): HF DINOv3ViTLayerScale (x * lambda1) and the block's
// residual add, forward(x [T, H], residual [T, H]) -> residual + x * lambda1 (Note [Layer scale
// rounding] in fk/kernels/layer_scale.cuh). Cfg (generated): hidden_size, scalar_t.
#pragma once

#include <string>
#include <vector>

#include "fk/kernels/layer_scale.cuh"
#include "fk/kernels/reference/layer_scale_ref.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// LayerScale.forward(x [T, H], residual [T, H], rows may be strided) -> residual + x * lambda1, a new tensor.
template <class Cfg> Tensor layer_scale_forward(const Tensor& x, const Tensor& residual, const Tensor& lambda1) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size;
  for (const Tensor* t : {&x, &residual})
    FK_CHECK(t->dim() == 2 && t->size(1) == H && t->stride(1) == 1 && t->dtype() == dtype_of<T>,
             "LayerScale input " + t->str() + ": expected [T, " + std::to_string(H) + "] rows of " + dtype_name(dtype_of<T>));
  FK_CHECK(residual.size(0) == x.size(0), "LayerScale: residual " + residual.str() + " and x " + x.str() + " differ in rows");
  FK_CHECK(lambda1.numel() == H && lambda1.is_contiguous() && lambda1.dtype() == dtype_of<T>,
           "LayerScale lambda1 " + lambda1.str() + ": expected [" + std::to_string(H) + "]");
  Tensor out = empty({x.size(0), H}, x.dtype());
  fk::kernels::layer_scale<T, H>(out.data<T>(), x.data<T>(), x.stride(0), residual.data<T>(), residual.stride(0), lambda1.data<T>(),
                                 x.size(0), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// One case of a layer_scale task. Case dims: num_tokens. x ~ N(0, 9), residual ~ N(0, 1), lambda1
/// ~ N(0.5, 0.3) (not 1: a kernel that skips the scale fails).
template <class Module, class Cfg> class LayerScaleInstance final : public TaskInstance {
 public:
  explicit LayerScaleInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * Cfg::hidden_size * 3 * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "layer_scale inputs and outputs");
    for (int s = 0; s < n; ++s) {
      x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
      res_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(module_.lambda1, mix_seed(seed, 1000), 0.5f, 0.3f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(x_[s], mix_seed(seed, 0), 0.f, 3.f);
    fill_normal(res_[s], mix_seed(seed, 1), 0.f, 1.f);
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s], res_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s], res_[s], module_.lambda1}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::hidden_size}, DType::kF32);
    const Tensor& g = module_.lambda1;
    fk::kernels::reference::layer_scale_ref<T>(ref.data<float>(), x_[s].data<T>(), Cfg::hidden_size, res_[s].data<T>(), Cfg::hidden_size,
                                               g.data<T>(), tokens_, static_cast<int>(Cfg::hidden_size), current_stream());
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double elems = double(tokens_) * Cfg::hidden_size;
    return {elems * 2, elems * 3 * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, res_, out_;
};

}  // namespace fk::tasks
