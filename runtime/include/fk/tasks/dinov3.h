// Forward glue, references and harnesses of the DINOv3 vision-transformer composites (issue 22),
// mirroring HF transformers' DINOv3ViT (transformers/models/dinov3_vit/modeling_dinov3_vit.py):
//   dinov3_attention (L2)  DINOv3ViTAttention with the model's 2-D rope: o_proj(attn(rope(q), rope(k), v)),
//                          q/k/v one fused projection (a projection without a bias, k_proj, has zeros in
//                          its part of the fused bias), the patch tokens' queries and keys turned by the
//                          vision_rope_2d child (class and register tokens not), bidirectional attention
//                          over each image's tokens
//   dinov3_mlp (L2)        DINOv3ViTMLP down(act(up(x))), or DINOv3ViTGatedMLP down(act(gate(x)) * up(x))
//                          (gate and up one merged projection, the gated activation kind)
//   dinov3_layer (L3)      DINOv3ViTLayer: h = x + ls1(attention(norm1(x))); out = h + ls2(mlp(norm2(h)))
//                          (the layer_scale kind does the scale and the residual add)
//   dinov3_model (L4)      DINOv3ViTModel: patch embedding, cat(class token, register tokens, patches),
//                          the layers, the final LayerNorm; pooled = each image's class token
// Images are whole sequences of 1 + registers + grid^2 tokens under a uniform prefill forward context.
// Parameters carry HF's DINOv3ViTModel names (Note [Seeded weights] in fk/tasks/llama.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fk/kernels/reference/layer_scale_ref.cuh"
#include "fk/tasks/layer_scale.h"
#include "fk/tasks/vision_rope.h"
#include "fk/tasks/vit.h"

namespace fk::tasks {

// ---------------------------------------------------------------------------------------------
// Forward glue.

/// The fused q/k/v bias with zeros in the parts of projections that have none (HF: bias=False for
/// that projection; DINOv3's k_proj), set once at construction.
template <class Cfg, class M> void zero_missing_qkv_bias(M& m) {
  constexpr int64_t q_size = Cfg::num_heads * Cfg::head_dim;
  if (!m.qkv_proj.bias.defined()) return;
  const bool have[3] = {Cfg::query_bias, Cfg::key_bias, Cfg::value_bias};
  for (int i = 0; i < 3; ++i)
    if (!have[i]) {
      Tensor part = m.qkv_proj.bias.narrow_first(i * q_size, q_size);
      FK_CUDA_CHECK(cudaMemsetAsync(part.data_ptr(), 0, part.nbytes(), current_stream()));
    }
}

/// DINOv3ViTAttention.forward(hidden_states [T, H]) -> [T, H] over the forward context's images.
template <class Cfg, class M> Tensor dinov3_attention_forward(M& m, const Tensor& x) {
  constexpr int64_t Hq = Cfg::num_heads, D = Cfg::head_dim, q_size = Hq * D;
  const AttnMetadata& meta = forward_context();
  FK_CHECK(meta.is_prefill, "a vision encoder runs whole images: the forward context must be a prefill");
  const int64_t tokens = x.size(0);
  Tensor qkv = std::get<0>(m.qkv_proj.forward(x));
  m.rotary_emb.forward(qkv.narrow_last(0, q_size), qkv.narrow_last(q_size, q_size));  // in place, the column blocks
  Tensor q = contiguous_rows(qkv.narrow_last(0, q_size)).view({tokens, Hq, D});
  Tensor k = contiguous_rows(qkv.narrow_last(q_size, q_size)).view({tokens, Hq, D});
  Tensor v = contiguous_rows(qkv.narrow_last(2 * q_size, q_size)).view({tokens, Hq, D});
  Tensor attn = m.attn.forward(q, k, v, meta.cu_seqlens, meta.cu_seqlens, meta.max_seqlen, meta.max_seqlen);
  return std::get<0>(m.o_proj.forward(attn.view({tokens, q_size})));
}

/// DINOv3ViTMLP / DINOv3ViTGatedMLP.forward(x) -> down_proj(act(up_proj(x))) (gated: up_proj is the merged
/// [gate | up] projection and act the gated activation).
template <class M> Tensor dinov3_mlp_forward(M& m, const Tensor& x) {
  return std::get<0>(m.down_proj.forward(m.act_fn.forward(std::get<0>(m.up_proj.forward(x)))));
}

/// DINOv3ViTLayer.forward(x [T, H]) -> [T, H].
template <class L> Tensor dinov3_layer_forward(L& l, const Tensor& x) {
  Tensor h = l.layer_scale1.forward(l.attention.forward(l.norm1.forward(x)), x);
  return l.layer_scale2.forward(l.mlp.forward(l.norm2.forward(h)), h);
}

/// DINOv3ViTEmbeddings (no masking): cat(cls_token, register_tokens, patch_embeddings(pixels)) per image;
/// the model keeps the class and register tokens as one [prefix_tokens, H] table (cls_token and
/// register_tokens are views of it).
template <class Cfg, class M> Tensor dinov3_embeddings_forward(M& m, const Tensor& pixel_values) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = Cfg::grid * Cfg::grid, P = Cfg::prefix_tokens;
  const int64_t b = pixel_values.size(0);
  Tensor patches = m.patch_embeddings.forward(pixel_values);  // [b * N, H]
  Tensor out = empty({b * (P + N), H}, dtype_of<T>);
  fk::kernels::prepend_tokens<T, static_cast<int>(H)>(out.data<T>(), patches.data<T>(), m.prefix_tokens.template data<T>(), b, P, N,
                                                     current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parameters (HF DINOv3ViTModel names).

/// `prefix`: e.g. "model.layer.0.attention."; a projection without a bias has no bias parameter.
template <class Cfg, class M> void add_dinov3_attention_params(ParamList& out, M& m, const std::string& prefix) {
  constexpr int64_t q_size = Cfg::num_heads * Cfg::head_dim;
  const float std = 1.f / std::sqrt(static_cast<float>(Cfg::hidden_size));
  const char* names[3] = {"q_proj", "k_proj", "v_proj"};
  const bool bias[3] = {Cfg::query_bias, Cfg::key_bias, Cfg::value_bias};
  for (int i = 0; i < 3; ++i) {
    out.push_back({prefix + names[i] + ".weight", m.qkv_proj.weight.narrow_first(i * q_size, q_size), 0.f, std});
    if (bias[i]) out.push_back({prefix + names[i] + ".bias", m.qkv_proj.bias.narrow_first(i * q_size, q_size), 0.f, 0.1f});
  }
  add_linear(out, m.o_proj, {Part(prefix + "o_proj", Cfg::hidden_size)});
}
/// `prefix`: e.g. "model.layer.0.mlp."
template <class Cfg, class M> void add_dinov3_mlp_params(ParamList& out, M& m, const std::string& prefix) {
  if constexpr (Cfg::gated) add_linear(out, m.up_proj, {Part(prefix + "gate_proj", Cfg::intermediate_size), Part(prefix + "up_proj", Cfg::intermediate_size)});
  else add_linear(out, m.up_proj, {Part(prefix + "up_proj", Cfg::intermediate_size)});
  add_linear(out, m.down_proj, {Part(prefix + "down_proj", Cfg::hidden_size)});
}
/// `prefix`: e.g. "model.layer.0."; the layer scales ~ N(0.5, 0.2) (a trained model's are far from 1).
template <class L> void add_dinov3_layer_params(ParamList& out, L& l, const std::string& prefix) {
  add_layer_norm_params(out, l.norm1, prefix + "norm1");
  l.attention.named_parameters(prefix + "attention.", out);
  out.push_back({prefix + "layer_scale1.lambda1", l.layer_scale1.lambda1, 0.5f, 0.2f});
  add_layer_norm_params(out, l.norm2, prefix + "norm2");
  l.mlp.named_parameters(prefix + "mlp.", out);
  out.push_back({prefix + "layer_scale2.lambda1", l.layer_scale2.lambda1, 0.5f, 0.2f});
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]).

/// The vision_rope_2d constants of a DINOv3 attention's config (centred patch coordinates, no merge windows).
template <class Cfg> struct Dinov3RopeConstants {
  static constexpr int64_t prefix_tokens = Cfg::prefix_tokens, grid_h = Cfg::grid, grid_w = Cfg::grid, merge_size = 1;
  static constexpr double rope_theta = Cfg::rope_theta;
  static constexpr bool centered = true;
};

/// The 2-D rope of q and k ([T, Hq*D] model dtype) by reference, rounded to the model dtype.
template <class Cfg> Tensor ref_vision_rope(const Tensor& x) {
  using T = typename Cfg::scalar_t;
  using G = Dinov3RopeConstants<Cfg>;
  Tensor out = empty({x.size(0), Cfg::num_heads * Cfg::head_dim}, DType::kF32);
  fk::kernels::reference::vision_rope_2d_ref<T>(out.data<float>(), out.stride(0), x.data<T>(), x.stride(0), x.size(0),
                                                static_cast<int>(Cfg::num_heads), static_cast<int>(Cfg::head_dim),
                                                vision_rope_geometry<G>(), current_stream());
  FK_CHECK_LAUNCH();
  return ref::round_to(out, dtype_of<T>);
}
template <class Cfg, class M> Tensor ref_dinov3_attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) {
  constexpr int Hq = Cfg::num_heads, D = Cfg::head_dim;
  Tensor qkv = ref::linear(x, m.qkv_proj.weight, m.qkv_proj.bias);
  Tensor q = ref_vision_rope<Cfg>(qkv.narrow_last(0, Hq * D)), k = ref_vision_rope<Cfg>(qkv.narrow_last(Hq * D, Hq * D));
  // q and k are the rope's contiguous outputs: v as contiguous rows too (the reference takes one row stride for k and v).
  Tensor attn = ref::attention_prefill(q, k, contiguous_rows(qkv.narrow_last(2 * Hq * D, Hq * D)), cu, Hq, Hq, D, Cfg::softmax_scale, 0, 0, Tensor(), false);
  return ref::linear(attn, m.o_proj.weight, m.o_proj.bias);
}
template <class Cfg, class M> Tensor ref_dinov3_mlp(M& m, const Tensor& x) {
  Tensor u = ref::linear(x, m.up_proj.weight, m.up_proj.bias);
  Tensor a;
  if constexpr (Cfg::gated) a = ref::silu_and_mul(u, Cfg::activation == fk::kernels::Act::kGeluTanh);
  else a = ref::activation(u, Cfg::activation);
  return ref::linear(a, m.down_proj.weight, m.down_proj.bias);
}
/// residual + round(x * lambda1), rounded (Note [Layer scale rounding]).
template <class Cfg> Tensor ref_layer_scale(const Tensor& x, const Tensor& residual, const Tensor& lambda1) {
  using T = typename Cfg::scalar_t;
  Tensor out = empty({x.size(0), Cfg::hidden_size}, DType::kF32);
  fk::kernels::reference::layer_scale_ref<T>(out.data<float>(), x.data<T>(), x.stride(0), residual.data<T>(), residual.stride(0),
                                             lambda1.data<T>(), x.size(0), static_cast<int>(Cfg::hidden_size), current_stream());
  FK_CHECK_LAUNCH();
  return ref::round_to(out, dtype_of<T>);
}
template <class Cfg, class L> Tensor ref_dinov3_layer(L& l, const std::vector<int32_t>& cu, const Tensor& x) {
  Tensor a = ref_dinov3_attention<Cfg>(l.attention, cu, ref::layer_norm(x, l.norm1.weight, l.norm1.bias, l.norm1.eps));
  Tensor h = ref_layer_scale<Cfg>(a, x, l.layer_scale1.lambda1);
  Tensor m = ref_dinov3_mlp<Cfg>(l.mlp, ref::layer_norm(h, l.norm2.weight, l.norm2.bias, l.norm2.eps));
  return ref_layer_scale<Cfg>(m, h, l.layer_scale2.lambda1);
}

/// (last hidden state [T, H] after the final norm, pooled [B, H]: the class tokens) of a DINOv3ViTModel by reference.
template <class Cfg, class M>
std::pair<Tensor, Tensor> ref_dinov3_model(M& m, const std::vector<int32_t>& cu, const Tensor& pixels, const Tensor& first_rows) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = Cfg::grid * Cfg::grid, P = Cfg::prefix_tokens;
  const int64_t b = pixels.size(0);
  auto& pe = m.patch_embeddings;
  Tensor patches = empty({b * N, H}, DType::kF32);
  fk::kernels::reference::patch_embed_ref<T>(patches.data<float>(), pixels.data<T>(), pe.weight.template data<T>(),
                                             pe.bias.defined() ? pe.bias.template data<T>() : nullptr, b,
                                             static_cast<int>(Cfg::num_channels), static_cast<int>(Cfg::patch_size),
                                             static_cast<int>(Cfg::image_size), static_cast<int>(H), current_stream());
  FK_CHECK_LAUNCH();
  Tensor patches_t = ref::round_to(patches, dtype_of<T>);
  // The token rows assembled on the host side of the reference: per image the prefix rows, then its patches.
  Tensor h = empty({b * (P + N), H}, dtype_of<T>);
  const size_t row = size_t(H) * sizeof(T);
  for (int64_t i = 0; i < b; ++i) {
    char* dst = static_cast<char*>(h.data_ptr()) + size_t(i * (P + N)) * row;
    FK_CUDA_CHECK(cudaMemcpyAsync(dst, m.prefix_tokens.data_ptr(), size_t(P) * row, cudaMemcpyDeviceToDevice, current_stream()));
    FK_CUDA_CHECK(cudaMemcpyAsync(dst + size_t(P) * row, static_cast<const char*>(patches_t.data_ptr()) + size_t(i * N) * row,
                                  size_t(N) * row, cudaMemcpyDeviceToDevice, current_stream()));
  }
  for (auto& layer : m.layers) h = ref_dinov3_layer<Cfg>(layer, cu, h);
  Tensor last = ref::layer_norm(h, m.norm.weight, m.norm.bias, m.norm.eps);
  return {last, gather_rows(last, first_rows)};
}

// ---------------------------------------------------------------------------------------------
// Harnesses.

template <class Cfg> struct Dinov3Refs {
  template <class M> static Tensor attention(M& m, const std::vector<int32_t>& cu, const Tensor& x) { return ref_dinov3_attention<Cfg>(m, cu, x); }
  template <class L> static Tensor layer(L& l, const std::vector<int32_t>& cu, const Tensor& x) { return ref_dinov3_layer<Cfg>(l, cu, x); }
  template <class M> static Tensor mlp(M& m, const Tensor& x) { return ref_dinov3_mlp<Cfg>(m, x); }
  template <class M>
  static std::pair<Tensor, Tensor> model(M& m, const std::vector<int32_t>& cu, const Tensor& pixels, const Tensor& first_rows) {
    return ref_dinov3_model<Cfg>(m, cu, pixels, first_rows);
  }
};

/// dinov3_attention (L2) and dinov3_layer (L3) over a batch of images; dinov3_mlp (L2) over tokens.
template <class Module, class Cfg, VisionKind kKind>
using Dinov3Instance =
    EncoderStepInstance<Module, Cfg, Dinov3Refs<Cfg>, kKind == VisionKind::kLayer ? EncoderKind::kLayer : EncoderKind::kAttention>;
template <class Module, class Cfg> using Dinov3MlpInstance = EncoderMlpStepInstance<Module, Cfg, Dinov3Refs<Cfg>>;
/// dinov3_model (L4): the image-encoder harness with DINOv3's whole-model reference.
template <class Model, class Cfg> using Dinov3ModelInstance = ImageEncoderInstance<Model, Cfg, Dinov3Refs<Cfg>>;

}  // namespace fk::tasks
