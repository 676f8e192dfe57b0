// Harness and forward glue for the `patch_embedding` task kind (issue 22): the Conv2d patch
// embedding of vision transformers (HF ViTPatchEmbeddings, SiglipVisionEmbeddings.patch_embedding,
// vLLM's Conv2dLayer in the VLM towers) with stride = kernel = patch:
//   forward(pixel_values [B, C, S, S] NCHW) -> [B * (S / P)^2, hidden], patches row-major per
//   image (HF: conv(x).flatten(2).transpose(1, 2), flattened over the batch, as the encoder's
//   token-major activations are).
// Baseline: patchify (fk/kernels/patch_embed.cuh) then the linear GEMM with the bias in its
// epilogue (fk/tasks/linear.h's dispatch) on the weight viewed as [hidden, C * P * P].
// Cfg (generated): num_channels, patch_size, image_size, hidden_size, bias, scalar_t.
//
// And the `patch_embedding_3d` kind: the Conv3d patch embedding of the Qwen-VL towers (vLLM
// Qwen2VisionPatchEmbed, HF PatchEmbed) with stride = kernel = (T, P, P) over rows the image
// processor has already patchified (channel, frame, row, column):
//   forward(x [L, C * T * P * P]) -> [L, hidden]
// one GEMM on the weight viewed as [hidden, C * T * P * P]: a convolution whose stride is its kernel
// over one patch per row is exactly that dot product. Cfg: num_channels, temporal_patch_size,
// patch_size, hidden_size, bias, scalar_t.
#pragma once

#include <cmath>

#include "fk/kernels/patch_embed.cuh"
#include "fk/kernels/reference/patch_embed_ref.cuh"
#include "fk/tasks/harness.h"
#include "fk/tasks/linear.h"

namespace fk::tasks {

/// The GEMM of a patch embedding as a linear layer (K = C * P * P, N = hidden).
template <class Cfg> struct PatchGemmCfg {
  static constexpr int64_t in_features = Cfg::num_channels * Cfg::patch_size * Cfg::patch_size;
  static constexpr int64_t out_features = Cfg::hidden_size;
  static constexpr bool has_bias = Cfg::bias;
  static constexpr bool returns_bias = false;
  using scalar_t = typename Cfg::scalar_t;
};
template <class Cfg> constexpr int64_t patches_per_image() {
  return (Cfg::image_size / Cfg::patch_size) * (Cfg::image_size / Cfg::patch_size);
}

/// PatchEmbedding.forward(pixel_values [B, C, S, S]) -> [B * N, hidden] (N = (S / P)^2).
template <class Cfg> Tensor patch_embed_forward(const Tensor& pixels, const Tensor& weight, const Tensor& bias) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t C = Cfg::num_channels, P = Cfg::patch_size, S = Cfg::image_size, K = C * P * P;
  FK_CHECK(pixels.dim() == 4 && pixels.size(1) == C && pixels.size(2) == S && pixels.size(3) == S && pixels.is_contiguous() &&
               pixels.dtype() == dtype_of<T>,
           "PatchEmbedding input " + pixels.str() + ": expected contiguous [B, " + std::to_string(C) + ", " + std::to_string(S) +
               ", " + std::to_string(S) + "] " + dtype_name(dtype_of<T>) + " (NCHW)");
  FK_CHECK(weight.dim() == 4 && weight.size(0) == Cfg::hidden_size && weight.size(1) == C && weight.size(2) == P &&
               weight.size(3) == P && weight.is_contiguous(),
           "PatchEmbedding weight " + weight.str());
  const int64_t b = pixels.size(0);
  Tensor patches = empty({b * patches_per_image<Cfg>(), K}, dtype_of<T>);
  fk::kernels::patchify<T, static_cast<int>(C), static_cast<int>(P), static_cast<int>(S)>(patches.data<T>(), pixels.data<T>(), b,
                                                                                         current_stream());
  FK_CHECK_LAUNCH();
  return linear_forward<PatchGemmCfg<Cfg>>(patches, weight.view({Cfg::hidden_size, K}), bias);
}

/// The GEMM of a 3-D patch embedding (K = C * T * P * P, N = hidden).
template <class Cfg> struct Patch3dGemmCfg {
  static constexpr int64_t in_features = Cfg::num_channels * Cfg::temporal_patch_size * Cfg::patch_size * Cfg::patch_size;
  static constexpr int64_t out_features = Cfg::hidden_size;
  static constexpr bool has_bias = Cfg::bias;
  static constexpr bool returns_bias = false;
  using scalar_t = typename Cfg::scalar_t;
};

/// PatchEmbedding3D.forward(x [L, C * T * P * P]) -> [L, hidden].
template <class Cfg> Tensor patch_embed_3d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t K = Patch3dGemmCfg<Cfg>::in_features;
  FK_CHECK(x.dim() == 2 && x.size(1) == K && x.stride(1) == 1 && x.dtype() == dtype_of<T>,
           "PatchEmbedding3D input " + x.str() + ": expected [L, " + std::to_string(K) + "] " + dtype_name(dtype_of<T>) +
               " (one patch per row: C x T x P x P)");
  FK_CHECK(weight.dim() == 5 && weight.size(0) == Cfg::hidden_size && weight.numel() == Cfg::hidden_size * K && weight.is_contiguous(),
           "PatchEmbedding3D weight " + weight.str());
  return linear_forward<Patch3dGemmCfg<Cfg>>(x, weight.view({Cfg::hidden_size, K}), bias);
}

/// One case of a patch_embedding_3d task. Case dims: num_tokens (patches L). Rows ~ N(0, 1)
/// (normalised pixels), weights ~ N(0, 1/K), bias ~ N(0, 1); the reference is the fp32 GEMM of
/// the flattened patches (a stride-equals-kernel Conv3d sums exactly those products).
template <class Module, class Cfg> class PatchEmbed3DInstance final : public TaskInstance {
 public:
  explicit PatchEmbed3DInstance(const ShapeCase& c) : rows_(c.get("num_tokens")) {
    constexpr double K = double(Patch3dGemmCfg<Cfg>::in_features), N = Cfg::hidden_size;
    const double set_bytes = double(rows_) * K * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + N * K * sizeof(T) + double(rows_) * N * (4 + sizeof(T)), "3-D patch embedding inputs and outputs");
    module_ = std::make_unique<Module>(Cfg::patch_size, Cfg::temporal_patch_size, Cfg::num_channels, Cfg::hidden_size);
    for (int s = 0; s < n; ++s) x_.push_back(empty({rows_, Patch3dGemmCfg<Cfg>::in_features}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    constexpr double K = double(Patch3dGemmCfg<Cfg>::in_features);
    fill_normal(module_->weight, mix_seed(seed, 0), 0.f, static_cast<float>(1.0 / std::sqrt(K)));
    if constexpr (Cfg::bias) fill_normal(module_->bias, mix_seed(seed, 1), 0.f, 1.f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_->forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override {
    if constexpr (Cfg::bias) return {module_->weight, module_->bias, x_[s]};
    return {module_->weight, x_[s]};
  }
  std::vector<CheckedOutput> reference(int s) override {
    constexpr int64_t K = Patch3dGemmCfg<Cfg>::in_features;
    Tensor ref = empty({rows_, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::gemm_ref<T>(ref.data<float>(), Cfg::hidden_size, x_[s].data<T>(), K, module_->weight.template data<T>(), K,
                                        Cfg::bias ? module_->bias.template data<T>() : nullptr, rows_, Cfg::hidden_size, K,
                                        current_stream());
    FK_CHECK_LAUNCH();
    const double typical = 0.8 * std::sqrt(Cfg::bias ? 2.0 : 1.0);
    return {{"output", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
  }
  /// cuBLAS over the same rows, as torch's Conv3d-as-linear path runs it.
  std::string peer_name() const override { return "cublas"; }
  void run_peer(int s) override {
    constexpr int64_t K = Patch3dGemmCfg<Cfg>::in_features;
    peer_out_ = linear_forward_cublas<Patch3dGemmCfg<Cfg>>(x_[s], module_->weight.view({Cfg::hidden_size, K}), module_->bias);
  }
  Cost cost() const override {
    constexpr double K = double(Patch3dGemmCfg<Cfg>::in_features), N = Cfg::hidden_size;
    return {2.0 * double(rows_) * K * N, (double(rows_) * (K + N) + N * K) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t rows_;
  std::unique_ptr<Module> module_;
  std::vector<Tensor> x_, out_;
  Tensor peer_out_;
};

/// One case of a patch_embedding task. Case dims: batch (images). Pixels ~ N(0, 1) (normalised
/// images), weights ~ N(0, 1/K), bias ~ N(0, 1).
template <class Module, class Cfg> class PatchEmbedInstance final : public TaskInstance {
 public:
  explicit PatchEmbedInstance(const ShapeCase& c) : batch_(c.get("batch")) {
    constexpr double C = Cfg::num_channels, S = Cfg::image_size, K = C * Cfg::patch_size * Cfg::patch_size;
    const double rows = double(batch_) * patches_per_image<Cfg>();
    const double set_bytes = double(batch_) * C * S * S * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + rows * (K + Cfg::hidden_size) * sizeof(T) + rows * Cfg::hidden_size * 4.0,
                          "patch embedding images, patches and outputs");
    module_ = std::make_unique<Module>(Cfg::num_channels, Cfg::hidden_size, Cfg::patch_size, Cfg::patch_size);
    for (int s = 0; s < n; ++s)
      x_.push_back(empty({batch_, Cfg::num_channels, Cfg::image_size, Cfg::image_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    constexpr double K = double(Cfg::num_channels) * Cfg::patch_size * Cfg::patch_size;
    fill_normal(module_->weight, mix_seed(seed, 0), 0.f, static_cast<float>(1.0 / std::sqrt(K)));
    if constexpr (Cfg::bias) fill_normal(module_->bias, mix_seed(seed, 1), 0.f, 1.f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_->forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override {
    if constexpr (Cfg::bias) return {module_->weight, module_->bias, x_[s]};
    return {module_->weight, x_[s]};
  }
  std::vector<CheckedOutput> reference(int s) override {
    const int64_t rows = batch_ * patches_per_image<Cfg>();
    Tensor ref = empty({rows, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::patch_embed_ref<T>(ref.data<float>(), x_[s].data<T>(), module_->weight.template data<T>(),
                                               Cfg::bias ? module_->bias.template data<T>() : nullptr, batch_,
                                               static_cast<int>(Cfg::num_channels), static_cast<int>(Cfg::patch_size),
                                               static_cast<int>(Cfg::image_size), static_cast<int>(Cfg::hidden_size),
                                               current_stream());
    FK_CHECK_LAUNCH();
    const double typical = 0.8 * std::sqrt(Cfg::bias ? 2.0 : 1.0);  // |N(0, s^2)|: mean 0.8 s
    return {{"output", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
  }
  Cost cost() const override {
    constexpr double K = double(Cfg::num_channels) * Cfg::patch_size * Cfg::patch_size, N = Cfg::hidden_size;
    const double rows = double(batch_) * patches_per_image<Cfg>();
    const double image_bytes = double(batch_) * Cfg::num_channels * Cfg::image_size * Cfg::image_size * sizeof(T);
    return {2.0 * rows * K * N, image_bytes + (N * K + rows * N) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t batch_;
  std::unique_ptr<Module> module_;
  std::vector<Tensor> x_, out_;
};

}  // namespace fk::tasks
