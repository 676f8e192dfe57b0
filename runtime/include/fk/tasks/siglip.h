// Forward glue, references and harnesses of SigLIP's vision tower (issue 22), mirroring HF
// transformers' SiglipVisionModel (transformers/models/siglip/modeling_siglip.py): the patch
// embedding plus learned position embeddings (no class token), the pre-norm layers (the vit_*
// composites with SigLIP's parameter names, `naming` "siglip"), post_layernorm, and the pooling
// head:
//   siglip_map_head (L2)      SiglipMultiheadAttentionPoolingHead: a learned probe attends to each
//                             image's tokens (nn.MultiheadAttention: q from the probe, k and v from the
//                             tokens, out_proj), then h + mlp(layernorm(h)); one vector per image
//   siglip_vision_model (L4)  SiglipVisionModel: forward -> last_hidden_state (after post_layernorm),
//                             pool -> the head's vectors
// The checkpoint is a composite SiglipConfig whose vision_config this lowers (`add --component
// vision_config`, Note [Config components]). Images are whole sequences of (image_size / patch)^2 tokens.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fk/tasks/vit.h"

namespace fk::tasks {

/// nn.MultiheadAttention's packed in_proj ([3H, H] weight, [3H] bias: q | k | v): the q_proj and kv_proj
/// children's parameters become views of one allocation, as HF's checkpoint holds them.
template <class M> void pack_in_proj(M& m, int64_t h) {
  m.q_proj.weight = m.in_proj_weight.narrow_first(0, h);
  m.kv_proj.weight = m.in_proj_weight.narrow_first(h, 2 * h);
  m.q_proj.bias = m.in_proj_bias.narrow_first(0, h);
  m.kv_proj.bias = m.in_proj_bias.narrow_first(h, 2 * h);
}

// ---------------------------------------------------------------------------------------------
// Forward glue.

/// SiglipVisionEmbeddings: patch_embedding(pixels) + position_embedding, per image.
template <class Cfg, class M> Tensor siglip_embeddings_forward(M& m, const Tensor& pixel_values) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = Cfg::tokens_per_image;
  const int64_t b = pixel_values.size(0);
  Tensor patches = m.patch_embeddings.forward(pixel_values);
  Tensor out = empty({b * N, H}, dtype_of<T>);
  fk::kernels::add_positions<T, static_cast<int>(H)>(out.data<T>(), patches.data<T>(), m.position_embedding.template data<T>(), b, N,
                                                    current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// The query offsets [0, 1, ..., b] of b images with one probe query each (kept per batch size).
inline const Tensor& probe_offsets(std::map<int64_t, Tensor>& cache, int64_t b) {
  Tensor& t = cache[b];
  if (!t.defined()) {
    std::vector<int32_t> cu(static_cast<size_t>(b + 1));
    for (int64_t i = 0; i <= b; ++i) cu[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    t = to_device(cu, {b + 1});
  }
  return t;
}

/// SiglipMultiheadAttentionPoolingHead.forward(hidden_state [B * N, H]) -> [B, H] over the forward
/// context's images: q = q_proj(probe) for every image, k / v = kv_proj(tokens), attention of the
/// one query over its image's tokens, out_proj; then h + mlp(layernorm(h)).
template <class Cfg, class M> Tensor siglip_map_head_forward(M& m, const Tensor& x) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t Hq = Cfg::num_heads, D = Cfg::head_dim, q_size = Hq * D, H = Cfg::hidden_size;
  const AttnMetadata& meta = forward_context();
  FK_CHECK(meta.is_prefill, "the pooling head reads whole images: the forward context must be a prefill");
  const int64_t b = meta.num_seqs;
  Tensor q1 = std::get<0>(m.q_proj.forward(m.probe.view({1, H})));  // [1, q_size]
  Tensor q = empty({b, q_size}, dtype_of<T>);
  fk::kernels::prepend_tokens<T, static_cast<int>(q_size)>(q.data<T>(), nullptr, q1.data<T>(), b, 1, 0, current_stream());  // broadcast
  FK_CHECK_LAUNCH();
  Tensor kv = std::get<0>(m.kv_proj.forward(x));  // [B * N, 2 * q_size]: key | value
  const int64_t tokens = x.size(0);
  Tensor k = contiguous_rows(kv.narrow_last(0, q_size)).view({tokens, Hq, D});
  Tensor v = contiguous_rows(kv.narrow_last(q_size, q_size)).view({tokens, Hq, D});
  Tensor attn = m.attn.forward(q.view({b, Hq, D}), k, v, probe_offsets(m.query_offsets, b), meta.cu_seqlens, 1, meta.max_seqlen);
  Tensor h = std::get<0>(m.out_proj.forward(attn.view({b, q_size})));
  Tensor out = m.mlp.forward(m.layernorm.forward(h));
  add_(out, h);  // residual + mlp(...), one rounding
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parameters (HF SiglipVisionModel names).

/// `prefix`: "head." (probe, attention.in_proj_{weight,bias} = q|k|v packed, attention.out_proj, layernorm, mlp.fc1/fc2).
template <class Cfg, class M> void add_siglip_head_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr int64_t H = Cfg::hidden_size;
  out.push_back({prefix + "probe", m.probe, 0.f, 1.f});
  // nn.MultiheadAttention packs q, k, v in one in_proj: q_proj's and kv_proj's weights and biases are views of it.
  const float std = 1.f / std::sqrt(static_cast<float>(H));
  out.push_back({prefix + "attention.in_proj_weight", m.in_proj_weight, 0.f, std});
  out.push_back({prefix + "attention.in_proj_bias", m.in_proj_bias, 0.f, 0.1f});
  add_linear(out, m.out_proj, {Part(prefix + "attention.out_proj", H)});
  add_layer_norm_params(out, m.layernorm, prefix + "layernorm");
  m.mlp.named_parameters(prefix + "mlp.", out);
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]).

template <class Cfg, class M> Tensor ref_siglip_map_head(M& m, const std::vector<int32_t>& cu, const Tensor& x) {
  using T = typename Cfg::scalar_t;
  constexpr int Hq = Cfg::num_heads, D = Cfg::head_dim;
  constexpr int64_t H = Cfg::hidden_size;
  const int64_t b = static_cast<int64_t>(cu.size()) - 1;
  Tensor q1 = ref::linear(m.probe.view({1, H}), m.q_proj.weight, m.q_proj.bias);
  Tensor q = empty({b, int64_t(Hq) * D}, dtype_of<T>);
  for (int64_t i = 0; i < b; ++i)
    FK_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(q.data_ptr()) + size_t(i) * q1.nbytes(), q1.data_ptr(), q1.nbytes(),
                                  cudaMemcpyDeviceToDevice, current_stream()));
  Tensor kv = ref::linear(x, m.kv_proj.weight, m.kv_proj.bias);
  std::vector<int32_t> cu_q(static_cast<size_t>(b + 1));
  for (int64_t i = 0; i <= b; ++i) cu_q[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  Tensor attn = ref::attention_cross(q, kv.narrow_last(0, Hq * D), kv.narrow_last(Hq * D, Hq * D), cu_q, cu, Hq, Hq, D, Cfg::softmax_scale);
  Tensor h = ref::linear(attn, m.out_proj.weight, m.out_proj.bias);
  Tensor n = ref::layer_norm(h, m.layernorm.weight, m.layernorm.bias, m.layernorm.eps);
  return ref::round_to(ref::add_f32(ref_vit_mlp<Cfg>(m.mlp, n), h), dtype_of<T>);
}

/// (last hidden state [T, H] after post_layernorm, pooled [B, H]) of a SiglipVisionModel by reference.
template <class Cfg, class M>
std::pair<Tensor, Tensor> ref_siglip_model(M& m, const std::vector<int32_t>& cu, const Tensor& pixels, const Tensor&) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = Cfg::tokens_per_image;
  const int64_t b = pixels.size(0);
  auto& pe = m.patch_embeddings;
  Tensor patches = empty({b * N, H}, DType::kF32);
  fk::kernels::reference::patch_embed_ref<T>(patches.data<float>(), pixels.data<T>(), pe.weight.template data<T>(),
                                             pe.bias.defined() ? pe.bias.template data<T>() : nullptr, b,
                                             static_cast<int>(Cfg::num_channels), static_cast<int>(Cfg::patch_size),
                                             static_cast<int>(Cfg::image_size), static_cast<int>(H), current_stream());
  FK_CHECK_LAUNCH();
  Tensor patches_t = ref::round_to(patches, dtype_of<T>);
  Tensor pos = empty({b * N, H}, dtype_of<T>);  // the position table once per image
  for (int64_t i = 0; i < b; ++i)
    FK_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(pos.data_ptr()) + size_t(i) * m.position_embedding.nbytes(),
                                  m.position_embedding.data_ptr(), m.position_embedding.nbytes(), cudaMemcpyDeviceToDevice,
                                  current_stream()));
  Tensor h = ref::round_to(ref::add_f32(patches_t, pos), dtype_of<T>);
  for (auto& layer : m.layers) h = ref_vit_layer<Cfg>(layer, cu, h);
  Tensor last = ref::layer_norm(h, m.post_layernorm.weight, m.post_layernorm.bias, m.post_layernorm.eps);
  return {last, ref_siglip_map_head<Cfg>(m.head, cu, last)};
}

// ---------------------------------------------------------------------------------------------
// Harnesses.

template <class Cfg> struct SiglipRefs {
  template <class M>
  static std::pair<Tensor, Tensor> model(M& m, const std::vector<int32_t>& cu, const Tensor& pixels, const Tensor& first_rows) {
    return ref_siglip_model<Cfg>(m, cu, pixels, first_rows);
  }
};
template <class Model, class Cfg> using SiglipModelInstance = ImageEncoderInstance<Model, Cfg, SiglipRefs<Cfg>>;

/// siglip_map_head (L2) over a batch of images (case dims batch, seq_len = tokens per image,
/// uniform): the final hidden states ~ N(0, 1) -> one vector per image, against ref_siglip_map_head.
template <class Module, class Cfg> class SiglipHeadInstance final : public TaskInstance {
 public:
  explicit SiglipHeadInstance(const ShapeCase& c) : step_(c), module_(from_config) {
    FK_CHECK(step_.meta.is_prefill, "pooling-head cases are whole images (batch, seq_len)");
    require_device_memory(double(step_.tokens()) * Cfg::hidden_size * 6 * sizeof(T), "pooling-head activations");
    module_.named_parameters("head.", params_);
    x_ = empty({step_.tokens(), Cfg::hidden_size}, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 4101));
  }
  void refresh(int, uint64_t seed) override { fill_normal(x_, seed); }
  void prepare(int) override { out_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&step_.meta);
    out_ = module_.forward(x_);
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(x_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    return {{"out", out_, to_f32(ref_siglip_map_head<Cfg>(module_, step_.host.cu, x_)), composite_tolerance(dtype_of<T>, 1.0, 0.01)}};
  }
  Cost cost() const override {
    constexpr double H = Cfg::hidden_size, I = Cfg::intermediate_size, Hq = Cfg::num_heads, D = Cfg::head_dim;
    const double t = double(step_.tokens()), b = double(step_.meta.num_seqs);
    return {2 * t * H * 2 * Hq * D + 4 * t * Hq * D + 2 * b * (2 * H * Hq * D + 2 * H * I), param_bytes(params_) + t * H * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  StepInputs step_;
  Module module_;
  ParamList params_;
  Tensor x_, out_;
};

}  // namespace fk::tasks
