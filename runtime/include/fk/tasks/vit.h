// Forward glue, references and harnesses of the vision-transformer composites (issue 22),
// mirroring HF transformers' ViT (transformers/models/vit/modeling_vit.py), the pre-norm encoder
// that vision towers share:
//   vit_attention (L2)  ViTAttention: dense(attn(qkv(x))), bidirectional attention over each
//                       image's tokens (flash_attn_varlen_func, causal=False, one sequence per
//                       image under the forward context's cu_seqlens)
//   vit_mlp (L2)        ViTIntermediate + ViTOutput's dense: dense2(act(dense1(x)))
//   vit_layer (L3)      ViTLayer: h = x + attention(layernorm_before(x));
//                       out = h + mlp(layernorm_after(h)), the first add fused into layernorm_after
//   vit_model (L4)      ViTModel: patch embedding, class token and position embeddings, the layers,
//                       the final LayerNorm, the pooler (class token -> dense -> activation)
// Images are whole sequences of tokens_per_image = (image_size / patch_size)^2 + 1 tokens: the
// forward context is a prefill of equal sequences (no KV cache). Parameters carry HF's ViTModel
// names (Note [Seeded weights] in fk/tasks/llama.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fk/kernels/patch_embed.cuh"
#include "fk/kernels/reference/patch_embed_ref.cuh"
#include "fk/tasks/bert.h"
#include "fk/tasks/interpolate.h"
#include "fk/tasks/patch_embed.h"

namespace fk::tasks {

// ---------------------------------------------------------------------------------------------
// Forward glue (the baseline composition; every call goes through the child modules).

/// ViTAttention.forward(hidden_states [T, H]) -> [T, H] over the forward context's images.
template <class Cfg, class M> Tensor vit_attention_forward(M& m, const Tensor& x) { return encoder_self_attention<Cfg>(m, x); }

/// ViTIntermediate + ViTOutput.dense: output_dense(act(intermediate_dense(x))) (the residual add
/// belongs to the layer).
template <class M> Tensor vit_mlp_forward(M& m, const Tensor& x) {
  return std::get<0>(m.output_dense.forward(m.act_fn.forward(std::get<0>(m.intermediate_dense.forward(x)))));
}

/// ViTLayer.forward(x [T, H]) -> [T, H].
template <class M> Tensor vit_layer_forward(M& m, const Tensor& x) {
  Tensor a = m.attention.forward(m.layernorm_before.forward(x));
  auto [normed, h] = m.layernorm_after.forward(a, x);  // (LN(a + x), a + x)
  Tensor out = m.mlp.forward(normed);
  add_(out, h);  // ViTOutput: dense(...) + hidden_states, one rounding
  return out;
}

/// The pos_interp slot of a ViT served at its checkpoint's resolution.
struct NoPosInterp {};
template <class P> inline constexpr bool kHasPosInterp = !std::is_same_v<P, NoPosInterp>;
/// The pos_interp child as the model builds it: Interpolate(size=(grid, grid), mode="bicubic", align_corners=False).
template <class Cfg, class P> P vit_pos_interp() {
  if constexpr (kHasPosInterp<P>) {
    constexpr int64_t g = Cfg::image_size / Cfg::patch_size;
    return P({g, g}, "bicubic", false);
  } else {
    return P{};
  }
}

/// The checkpoint grid's rows of position_embeddings [1, g0^2 + 1, H] as a [1, g0, g0, H] image (a view).
template <class Cfg> Tensor vit_position_grid(const Tensor& position_embeddings) {
  constexpr int64_t H = Cfg::hidden_size, g0 = Cfg::pos_grid;
  return position_embeddings.view({g0 * g0 + 1, H}).narrow_first(1, g0 * g0).view({1, g0, g0, H});
}
/// [1 + g^2, H]: the class token's row of position_embeddings, then the resized grid [1, g, g, H].
template <class Cfg> Tensor vit_position_table(const Tensor& position_embeddings, const Tensor& resized) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, g = Cfg::image_size / Cfg::patch_size;
  Tensor table = empty({g * g + 1, H}, dtype_of<T>);
  const size_t row = size_t(H) * sizeof(T);
  FK_CUDA_CHECK(cudaMemcpyAsync(table.data_ptr(), position_embeddings.data_ptr(), row, cudaMemcpyDeviceToDevice, current_stream()));
  FK_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(table.data_ptr()) + row, resized.data_ptr(), row * g * g,
                                cudaMemcpyDeviceToDevice, current_stream()));
  return table;
}

/// The position table of the served grid [1 + N, H]: position_embeddings itself, or (pos_interp) the class
/// token's row followed by the checkpoint grid's rows resized to the served grid (HF interpolate_pos_encoding:
/// the [1, g0, g0, H] rows as an image, bicubic, align_corners False; the model dtype throughout).
template <class Cfg, class M> Tensor vit_positions(M& m) {
  if constexpr (!kHasPosInterp<std::decay_t<decltype(m.pos_interp)>>) {
    return m.position_embeddings;
  } else {
    return vit_position_table<Cfg>(m.position_embeddings, m.pos_interp.forward(vit_position_grid<Cfg>(m.position_embeddings)));
  }
}

/// ViTEmbeddings: cat(cls_token, patch_embeddings(pixels)) + position_embeddings (of the served grid), per image.
template <class Cfg, class M> Tensor vit_embeddings_forward(M& m, const Tensor& pixel_values) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = (Cfg::image_size / Cfg::patch_size) * (Cfg::image_size / Cfg::patch_size);
  const int64_t b = pixel_values.size(0);
  Tensor patches = m.patch_embeddings.forward(pixel_values);
  Tensor positions = vit_positions<Cfg>(m);
  Tensor out = empty({b * (N + 1), H}, dtype_of<T>);
  fk::kernels::add_cls_and_positions<T, static_cast<int>(H)>(out.data<T>(), patches.data<T>(), m.cls_token.template data<T>(),
                                                             positions.template data<T>(), b, N, current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parameters (HF ViTModel names, or SiglipVisionModel's: the same pre-norm layer under other names).

/// Whose HF parameter names a ViT composite carries (the `naming` parameter of the vit_* kinds).
enum class VitNaming { kVit, kSiglip };

/// `prefix`: ViT "encoder.layer.0.attention." (attention.query/key/value, output.dense); SigLIP
/// "encoder.layers.0.self_attn." (q_proj/k_proj/v_proj, out_proj).
template <class Cfg, class M> void add_vit_attention_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr int64_t q_size = Cfg::num_heads * Cfg::head_dim;
  if constexpr (Cfg::naming == VitNaming::kSiglip) {
    add_linear(out, m.qkv_proj, {Part(prefix + "q_proj", q_size), Part(prefix + "k_proj", q_size), Part(prefix + "v_proj", q_size)});
    add_linear(out, m.dense, {Part(prefix + "out_proj", Cfg::hidden_size)});
  } else {
    add_linear(out, m.qkv_proj,
               {Part(prefix + "attention.query", q_size), Part(prefix + "attention.key", q_size), Part(prefix + "attention.value", q_size)});
    add_linear(out, m.dense, {Part(prefix + "output.dense", Cfg::hidden_size)});
  }
}
/// `prefix`: ViT "encoder.layer.0." (intermediate.dense, output.dense); SigLIP "encoder.layers.0.mlp." (fc1, fc2).
template <class Cfg, class M> void add_vit_mlp_params(ParamList& out, M& m, const std::string& prefix) {
  const bool siglip = Cfg::naming == VitNaming::kSiglip;
  add_linear(out, m.intermediate_dense, {Part(prefix + (siglip ? "fc1" : "intermediate.dense"), Cfg::intermediate_size)});
  add_linear(out, m.output_dense, {Part(prefix + (siglip ? "fc2" : "output.dense"), Cfg::hidden_size)});
}
/// `prefix`: e.g. "encoder.layer.0." (ViT: layernorm_before, attention., layernorm_after, the MLP's at the
/// layer's prefix; SigLIP: layer_norm1, self_attn., layer_norm2, mlp.).
template <class Cfg, class L> void add_vit_layer_params(ParamList& out, L& l, const std::string& prefix) {
  const bool siglip = Cfg::naming == VitNaming::kSiglip;
  add_layer_norm_params(out, l.layernorm_before, prefix + (siglip ? "layer_norm1" : "layernorm_before"));
  l.attention.named_parameters(prefix + (siglip ? "self_attn." : "attention."), out);
  add_layer_norm_params(out, l.layernorm_after, prefix + (siglip ? "layer_norm2" : "layernorm_after"));
  l.mlp.named_parameters(prefix + (siglip ? "mlp." : ""), out);
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]): op by op from the model dtype, rounded where a
// bf16 network rounds; attention over each image's tokens.

template <class Cfg, class M> Tensor ref_vit_attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) {
  return ref_encoder_self_attention<Cfg>(m, cu, x);
}
template <class Cfg, class M> Tensor ref_vit_mlp(M& m, const Tensor& x) {
  Tensor h = ref::activation(ref::linear(x, m.intermediate_dense.weight, m.intermediate_dense.bias), Cfg::activation);
  return ref::linear(h, m.output_dense.weight, m.output_dense.bias);
}
template <class Cfg, class L> Tensor ref_vit_layer(L& l, const std::vector<int32_t>& cu, const Tensor& x) {
  Tensor a = ref_vit_attention<Cfg>(l.attention, cu,
                                    ref::layer_norm(x, l.layernorm_before.weight, l.layernorm_before.bias, l.layernorm_before.eps));
  auto [normed, h] = ref::add_layer_norm(a, x, l.layernorm_after.weight, l.layernorm_after.bias, l.layernorm_after.eps);
  return ref::round_to(ref::add_f32(ref_vit_mlp<Cfg>(l.mlp, normed), h), x.dtype());
}

/// The interpolate constants of HF ViT's position-grid resize (bicubic, align_corners False, NHWC).
template <class T, int64_t H, int64_t G0, int64_t G> struct VitGridInterp {
  static constexpr const char* mode = "bicubic";
  static constexpr bool align_corners = false, channels_last = true;
  static constexpr int64_t channels = H, in_h = G0, in_w = G0, out_h = G, out_w = G;
  using scalar_t = T;
};

/// The served position table by reference: with interpolation, the checkpoint grid's rows resized by
/// the bicubic (align_corners False) interpolation matrices of interpolate_weights.h (not the
/// pos_interp child), rounded to the model dtype as HF's bf16 interpolate rounds.
template <class Cfg, class M> Tensor ref_vit_positions(M& m) {
  using T = typename Cfg::scalar_t;
  if constexpr (!kHasPosInterp<std::decay_t<decltype(m.pos_interp)>>) {
    return m.position_embeddings;
  } else {
    using Grid = VitGridInterp<T, Cfg::hidden_size, Cfg::pos_grid, Cfg::image_size / Cfg::patch_size>;
    Tensor resized = ref::round_to(interpolate_reference<Grid>(vit_position_grid<Cfg>(m.position_embeddings)), dtype_of<T>);
    return vit_position_table<Cfg>(m.position_embeddings, resized);
  }
}

/// (last hidden state [T, H] after the final norm, pooled [B, P]) of a ViTModel by reference.
template <class Cfg, class M>
std::pair<Tensor, Tensor> ref_vit_model(M& m, const std::vector<int32_t>& cu, const Tensor& pixels, const Tensor& first_rows) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = (Cfg::image_size / Cfg::patch_size) * (Cfg::image_size / Cfg::patch_size);
  const int64_t b = pixels.size(0);
  auto& pe = m.patch_embeddings;
  Tensor patches = empty({b * N, H}, DType::kF32);
  fk::kernels::reference::patch_embed_ref<T>(patches.data<float>(), pixels.data<T>(), pe.weight.template data<T>(),
                                             pe.bias.defined() ? pe.bias.template data<T>() : nullptr, b,
                                             static_cast<int>(Cfg::num_channels), static_cast<int>(Cfg::patch_size),
                                             static_cast<int>(Cfg::image_size), static_cast<int>(H), current_stream());
  FK_CHECK_LAUNCH();
  Tensor patches_t = ref::round_to(patches, dtype_of<T>);  // the convolution's output in the model dtype
  Tensor positions = ref_vit_positions<Cfg>(m);
  Tensor e = empty({b * (N + 1), H}, DType::kF32);
  fk::kernels::reference::cls_positions_ref<T>(e.data<float>(), patches_t.data<T>(), m.cls_token.template data<T>(),
                                               positions.template data<T>(), b, N, static_cast<int>(H), current_stream());
  FK_CHECK_LAUNCH();
  Tensor h = ref::round_to(e, dtype_of<T>);
  for (auto& layer : m.layers) h = ref_vit_layer<Cfg>(layer, cu, h);
  Tensor last = ref::layer_norm(h, m.layernorm.weight, m.layernorm.bias, m.layernorm.eps);
  Tensor cls = gather_rows(last, first_rows);
  Tensor pooled = ref::activation(ref::linear(cls, m.pooler_dense.weight, m.pooler_dense.bias), Cfg::pooler_act);
  return {last, pooled};
}

// ---------------------------------------------------------------------------------------------
// Harnesses.

/// ViT's composite references, as the encoder harnesses (fk/tasks/bert.h) take them.
template <class Cfg> struct VitRefs {
  template <class M> static Tensor attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) { return ref_vit_attention<Cfg>(m, cu, x); }
  template <class L> static Tensor layer(L& l, const std::vector<int32_t>& cu, const Tensor& x) { return ref_vit_layer<Cfg>(l, cu, x); }
  template <class M> static Tensor mlp(M& m, const Tensor& x) { return ref_vit_mlp<Cfg>(m, x); }
  template <class M>
  static std::pair<Tensor, Tensor> model(M& m, const std::vector<int32_t>& cu, const Tensor& pixels, const Tensor& first_rows) {
    return ref_vit_model<Cfg>(m, cu, pixels, first_rows);
  }
};

enum class VisionKind { kAttention, kLayer };
/// Cfg::prefix_tokens (class + register tokens before the patches); 1 (ViT's class token) where the config has none.
template <class Cfg, class = void> struct PrefixTokensOf : std::integral_constant<int64_t, 1> {};
template <class Cfg> struct PrefixTokensOf<Cfg, std::void_t<decltype(Cfg::prefix_tokens)>> : std::integral_constant<int64_t, Cfg::prefix_tokens> {};
/// vit_attention (L2) and vit_layer (L3) over a batch of images (case dims batch, seq_len = tokens
/// per image, uniform): the encoder harness with ViT's references.
template <class Module, class Cfg, VisionKind kKind>
using VisionInstance =
    EncoderStepInstance<Module, Cfg, VitRefs<Cfg>, kKind == VisionKind::kLayer ? EncoderKind::kLayer : EncoderKind::kAttention>;
/// vit_mlp (L2). Case dims: num_tokens.
template <class Module, class Cfg> using VisionMlpInstance = EncoderMlpStepInstance<Module, Cfg, VitRefs<Cfg>>;

/// The whole vision encoder (L4) over a batch of images (case dims batch, seq_len = tokens per
/// image): pixels [B, C, S, S] ~ N(0, 1) (normalised images) -> last hidden state and pooled
/// vectors, both checked against the composite reference; HF transformers is the external check
/// (bench/parity/).
template <class Model, class Cfg, class Refs = VitRefs<Cfg>> class ImageEncoderInstance final : public TaskInstance {
 public:
  explicit ImageEncoderInstance(const ShapeCase& c) : step_(c) {
    constexpr double H = Cfg::hidden_size, I = Cfg::intermediate_size;
    FK_CHECK(step_.max_len == Cfg::tokens_per_image && step_.tokens() == step_.meta.num_seqs * Cfg::tokens_per_image,
             "image cases are uniform batches of seq_len = tokens per image (" + std::to_string(Cfg::tokens_per_image) +
                 ") each");
    const double t = double(step_.tokens()), b = double(step_.meta.num_seqs);
    const double weights = Cfg::num_hidden_layers * (4 * H * H + 2 * H * I);
    const double act = t * (8 * H + 2 * I) + b * Cfg::num_channels * Cfg::image_size * Cfg::image_size;
    require_device_memory((weights + 3 * act) * sizeof(T), "the whole vision encoder (weights, activations)");
    model_ = std::make_unique<Model>();
    model_->named_parameters(params_);
    pixels_ = empty({step_.meta.num_seqs, Cfg::num_channels, Cfg::image_size, Cfg::image_size}, dtype_of<T>);
    first_rows_ = step_.meta.cu_seqlens.narrow_first(0, step_.meta.num_seqs);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 5101));
  }
  void refresh(int, uint64_t seed) override { fill_normal(pixels_, seed); }
  void prepare(int) override { hidden_ = pooled_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    hidden_ = model_->forward(pixels_);
    pooled_ = model_->pool(hidden_);
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(pixels_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    std::pair<Tensor, Tensor> r = Refs::model(*model_, step_.host.cu, pixels_, first_rows_);
    const Tolerance tol = depth_tolerance(static_cast<size_t>(model_->num_layers()));
    return {{"last_hidden_state", hidden_, to_f32(r.first), tol}, {"pooled", pooled_, to_f32(r.second), tol}};
  }
  Cost cost() const override {
    constexpr double H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim, I = Cfg::intermediate_size;
    constexpr double K = double(Cfg::num_channels) * Cfg::patch_size * Cfg::patch_size;
    const double t = double(step_.tokens()), L = double(model_->num_layers()), b = double(step_.meta.num_seqs);
    const double patches = b * (Cfg::tokens_per_image - PrefixTokensOf<Cfg>::value);
    const double flops = 2 * patches * K * H +
                         L * (2 * t * H * 3 * Hq * D + 4 * step_.bidirectional_pairs() * Hq * D + 2 * t * Hq * D * H + 4 * t * H * I) +
                         2 * b * H * Cfg::pooler_size;
    const double bytes = param_bytes(params_) + (b * Cfg::num_channels * Cfg::image_size * Cfg::image_size + t * H) * sizeof(T);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  StepInputs step_;
  std::unique_ptr<Model> model_;
  ParamList params_;
  Tensor pixels_, first_rows_, hidden_, pooled_;
};

/// The generated ViTModel behind the ImageEncoderModel interface (fk_model, parity).
template <class Model, class Cfg> class ImageEncoderAdapter final : public ImageEncoderModel {
 public:
  /// num_layers 0: the config's layer count.
  ImageEncoderAdapter(std::string task_name, int64_t num_layers)
      : name_(std::move(task_name)), m_(num_layers > 0 ? num_layers : Cfg::num_hidden_layers) {}
  std::string task_name() const override { return name_; }
  int64_t num_layers() const override { return m_.num_layers(); }
  int64_t hidden_size() const override { return Cfg::hidden_size; }
  int64_t pooled_size() const override { return Cfg::pooler_size; }
  int64_t num_channels() const override { return Cfg::num_channels; }
  int64_t image_size() const override { return Cfg::image_size; }
  int64_t tokens_per_image() const override { return Cfg::tokens_per_image; }
  DType dtype() const override { return dtype_of<typename Cfg::scalar_t>; }
  ParamList named_parameters() override {
    ParamList p;
    m_.named_parameters(p);
    return p;
  }
  Tensor forward(const Tensor& pixel_values, std::vector<Tensor>* layer_outputs) override {
    FK_CHECK(pixel_values.dim() == 4, "pixel_values " + pixel_values.str() + ": expected [B, C, S, S]");
    ForwardContextGuard ctx(&meta_for(pixel_values.size(0)));
    return m_.forward(pixel_values, layer_outputs);
  }
  Tensor pool(const Tensor& hidden_states) override {
    FK_CHECK(hidden_states.dim() == 2 && hidden_states.size(0) % Cfg::tokens_per_image == 0,
             "hidden_states " + hidden_states.str() + ": expected [B * " + std::to_string(Cfg::tokens_per_image) + ", H]");
    ForwardContextGuard ctx(&meta_for(hidden_states.size(0) / Cfg::tokens_per_image));
    return m_.pool(hidden_states);
  }

 private:
  /// The forward context of a batch of b images (a uniform prefill, as the image cases are), built
  /// once per batch size (no copy per call).
  const AttnMetadata& meta_for(int64_t b) {
    std::unique_ptr<StepInputs>& p = batches_[b];
    if (!p)
      p = std::make_unique<StepInputs>(
          ShapeCase{"images", "prefill", {{"batch", b}, {"seq_len", Cfg::tokens_per_image}, {"uniform", 1}}});
    return p->meta;
  }
  std::string name_;
  Model m_;
  std::map<int64_t, std::unique_ptr<StepInputs>> batches_;
};

}  // namespace fk::tasks
