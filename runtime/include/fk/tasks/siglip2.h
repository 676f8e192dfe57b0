// Forward glue, references and harnesses of SigLIP-2's NaFlex vision tower (issue 22), mirroring
// HF transformers' Siglip2VisionModel (transformers/models/siglip2/modeling_siglip2.py):
//   siglip2_vision_model (L4)  Siglip2VisionModel: the patch embedding (a Linear over the
//                              processor's patchified rows) plus the learned position table resized
//                              to each image's grid (Note [NaFlex positions]); SigLIP's pre-norm
//                              layers (the vit_* composites, naming "siglip"); post_layernorm; the
//                              multihead-attention pooling head (siglip_map_head) over each image
// Images are sequences of their own length (h x w patches each): where HF pads the batch to the
// longest image and masks the padding (pixel_attention_mask), one sequence per image runs here
// (cu_seqlens), so that no padded row is computed; the valid rows are the same.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fk/kernels/reference/interpolate_weights.h"
#include "fk/runtime/model.h"
#include "fk/tasks/qwen2_vl.h"
#include "fk/tasks/siglip.h"

namespace fk::tasks {

// Note [NaFlex positions]
// SigLIP-2 NaFlex keeps a learned table of num_patches rows (side x side, 16 x 16 in the released
// checkpoints) and resizes it to every image's h x w patch grid with
// F.interpolate(mode="bilinear", align_corners=False, antialias=True) (HF
// Siglip2VisionEmbeddings.resize_positional_embeddings), casts the result to the model dtype and
// adds it to the patch embedding. The antialiased resize is PyTorch's _upsample_bilinear2d_aa
// (Note [Antialiased resize] in fk/kernels/interpolate.cuh): along an axis that grows it is plain
// bilinear with half-pixel centres; along one that shrinks the triangle filter widens to cover
// every table row the output row spans (an elongated image of 8 x 32 patches averages pairs of
// table rows and interpolates columns). Production recomputes the resize per image per forward;
// here NaflexBatch computes every patch's taps and weights once per batch of grids on the host, in
// fp32 as PyTorch's kernel does (naflex_position_taps; a patch has up to (2 side/h + 2) x
// (2 side/w + 2) taps: a list per row, not a fixed count), and the model adds
// sum_k w_k * table[tap_k], rounded to the model dtype, to each patch row (add_weighted_rows_).
// PyTorch's CUDA kernel stores the weights in the model dtype (bf16: 8 bits of mantissa); ours
// stay fp32, an error below the bf16 rounding of the result. The references resize each image's
// table separably with interp_matrix's double weights (ref_naflex_positions), not from the taps.

/// One axis of PyTorch's antialiased bilinear resize from `in` samples to `out` (Note [NaFlex
/// positions]), in fp32: output o's first input sample and its normalised weights.
struct AaAxisTaps {
  int first = 0;
  std::vector<float> w;
};
inline std::vector<AaAxisTaps> aa_bilinear_axis_taps(int in, int out) {
  FK_CHECK(in >= 1 && out >= 1, "antialiased resize: sizes must be >= 1, got " + std::to_string(in) + " -> " + std::to_string(out));
  const float scale = float(in) / float(out);
  const float support = scale >= 1.f ? scale : 1.f;  // (interp_size / 2) * max(scale, 1), interp_size 2
  const float invscale = scale >= 1.f ? 1.f / scale : 1.f;
  std::vector<AaAxisTaps> taps(static_cast<size_t>(out));
  for (int o = 0; o < out; ++o) {
    const float center = scale * (float(o) + 0.5f);
    AaAxisTaps& t = taps[static_cast<size_t>(o)];
    t.first = std::max(static_cast<int>(center - support + 0.5f), 0);  // truncation toward zero, as static_cast<int> in PyTorch
    const int count = std::min(static_cast<int>(center + support + 0.5f), in) - t.first;
    float total = 0.f;
    for (int j = 0; j < count; ++j) {
      const float x = std::fabs((float(j + t.first) - center + 0.5f) * invscale);
      const float w = x < 1.f ? 1.f - x : 0.f;
      t.w.push_back(w);
      total += w;
    }
    if (total != 0.f)
      for (float& w : t.w) w /= total;
  }
  return taps;
}

/// Every patch's taps into a side x side table and their weights (Note [NaFlex positions]), row by
/// row in the processor's order (each image row-major).
inline WeightedRows naflex_position_taps(const std::vector<VisionGrid>& grids, int64_t side) {
  FK_CHECK(side >= 1, "NaFlex position taps: expected a table of at least one row a side, got " + std::to_string(side));
  WeightedRows out;
  for (const VisionGrid& g : grids) {
    const std::vector<AaAxisTaps> ty = aa_bilinear_axis_taps(int(side), int(g.h)), tx = aa_bilinear_axis_taps(int(side), int(g.w));
    for (int64_t y = 0; y < g.h; ++y)
      for (int64_t x = 0; x < g.w; ++x) {
        const AaAxisTaps &a = ty[static_cast<size_t>(y)], &b = tx[static_cast<size_t>(x)];
        for (size_t j = 0; j < a.w.size(); ++j)
          for (size_t i = 0; i < b.w.size(); ++i) {
            const float wt = a.w[j] * b.w[i];
            if (wt == 0.f) continue;
            out.idx.push_back(static_cast<int32_t>((a.first + int64_t(j)) * side + b.first + int64_t(i)));
            out.w.push_back(wt);
          }
        out.ptr.push_back(static_cast<int32_t>(out.idx.size()));
      }
  }
  return out;
}

/// Checks a batch of NaFlex grids: single images (t = 1) of at least one patch a side; names the first bad one.
inline void check_naflex_grids(const std::vector<VisionGrid>& grids) {
  FK_CHECK(!grids.empty(), "spatial_shapes: expected at least one image");
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    FK_CHECK(g.t == 1 && g.h >= 1 && g.w >= 1, "spatial_shapes[" + std::to_string(i) + "] = (t " + std::to_string(g.t) + ", h " +
                                                    std::to_string(g.h) + ", w " + std::to_string(g.w) +
                                                    "): SigLIP-2 NaFlex takes single images (t = 1) of at least one patch a side");
  }
}

/// The per-forward metadata of a batch of NaFlex images on the device: the forward context (one
/// prefill sequence per image) and the position taps (Note [NaFlex positions]).
struct NaflexBatch {
  std::vector<VisionGrid> grids;
  AttnMetadata meta;
  Tensor pos_ptr, pos_idx, pos_w;  ///< i32 [T + 1], i32 [nnz], f32 [nnz]
  int64_t tokens = 0;

  NaflexBatch() = default;
  NaflexBatch(std::vector<VisionGrid> g, int64_t side) : grids(std::move(g)) {
    check_naflex_grids(grids);
    std::vector<int32_t> cu{0};
    for (const VisionGrid& x : grids) {
      cu.push_back(static_cast<int32_t>(cu.back() + x.h * x.w));
      meta.max_seqlen = std::max(meta.max_seqlen, x.h * x.w);
    }
    tokens = cu.back();
    meta.is_prefill = true;
    meta.num_seqs = static_cast<int64_t>(grids.size());
    meta.num_tokens = tokens;
    meta.cu_seqlens = to_device(cu, {meta.num_seqs + 1});
    meta.host_cu_seqlens = cu;
    const WeightedRows taps = naflex_position_taps(grids, side);
    pos_ptr = to_device(taps.ptr, {tokens + 1});
    pos_idx = to_device(taps.idx, {static_cast<int64_t>(taps.idx.size())});
    pos_w = to_device(taps.w, {static_cast<int64_t>(taps.w.size())});
  }
  double pairs() const { return VisionBatch::pairs_of(meta.host_cu_seqlens); }
};

// ---------------------------------------------------------------------------------------------
// Forward glue.

/// Siglip2VisionEmbeddings.forward(rows [T, C * P * P], batch) -> patch_embedding(rows) + the table
/// resized to each image's grid [T, hidden] (Note [NaFlex positions]).
template <class Cfg, class M> Tensor siglip2_embeddings_forward(M& m, const Tensor& rows, const NaflexBatch& batch) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(rows.dim() == 2 && rows.size(0) == batch.tokens && rows.size(1) == Cfg::patch_dim && rows.dtype() == dtype_of<T> &&
               rows.is_contiguous(),
           "Siglip2VisionEmbeddings: pixel rows " + rows.str() + ": expected contiguous [" + std::to_string(batch.tokens) + ", " +
               std::to_string(Cfg::patch_dim) + "] " + dtype_name(dtype_of<T>) + " (the grids' patches, C * P * P each)");
  Tensor h = std::get<0>(m.patch_embedding.forward(rows));
  add_weighted_rows_(h, m.position_embedding, batch.pos_ptr, batch.pos_idx, batch.pos_w);
  return h;
}

// ---------------------------------------------------------------------------------------------
// References (Note [Composite references]).

/// The side x side table resized to every image's grid by reference (Note [NaFlex positions]):
/// interp_matrix's antialiased double weights applied separably on the host -> fp32 [T, E].
inline Tensor ref_naflex_positions(const Tensor& table, const std::vector<VisionGrid>& grids, int64_t side) {
  using fk::kernels::reference::interp_matrix;
  using fk::kernels::reference::InterpRefMode;
  const int64_t E = table.size(1), S = side;
  FK_CHECK(table.size(0) == S * S, "reference NaFlex positions: table " + table.str() + " is not " + std::to_string(S) + " x " +
                                       std::to_string(S) + " rows");
  const std::vector<float> P = to_host<float>(to_f32(table));
  std::vector<float> out;
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> resized;  // per distinct grid
  for (const VisionGrid& g : grids) {
    std::vector<float>& r = resized[{g.h, g.w}];
    if (r.empty()) {
      const std::vector<double> wy = interp_matrix(int(S), int(g.h), InterpRefMode::kBilinearAA, false);  // [h, S]
      const std::vector<double> wx = interp_matrix(int(S), int(g.w), InterpRefMode::kBilinearAA, false);  // [w, S]
      std::vector<double> cols(static_cast<size_t>(S * g.w * E), 0.0);                                  // [S, w, E]: columns resized
      for (int64_t i = 0; i < S; ++i)
        for (int64_t x = 0; x < g.w; ++x)
          for (int64_t j = 0; j < S; ++j) {
            const double c = wx[static_cast<size_t>(x * S + j)];
            if (c == 0) continue;
            const float* src = &P[static_cast<size_t>((i * S + j) * E)];
            double* dst = &cols[static_cast<size_t>((i * g.w + x) * E)];
            for (int64_t e = 0; e < E; ++e) dst[e] += c * src[e];
          }
      std::vector<double> acc(static_cast<size_t>(g.h * g.w * E), 0.0);
      for (int64_t y = 0; y < g.h; ++y)
        for (int64_t i = 0; i < S; ++i) {
          const double c = wy[static_cast<size_t>(y * S + i)];
          if (c == 0) continue;
          for (int64_t x = 0; x < g.w; ++x) {
            const double* src = &cols[static_cast<size_t>((i * g.w + x) * E)];
            double* dst = &acc[static_cast<size_t>((y * g.w + x) * E)];
            for (int64_t e = 0; e < E; ++e) dst[e] += c * src[e];
          }
        }
      r.assign(acc.begin(), acc.end());
    }
    out.insert(out.end(), r.begin(), r.end());
  }
  return to_device(out, {static_cast<int64_t>(out.size()) / E, E});
}

/// (last hidden state [T, H] after post_layernorm, pooled [B, H]) of a Siglip2VisionModel by reference.
template <class Cfg, class M> std::pair<Tensor, Tensor> ref_siglip2_model(M& m, const NaflexBatch& batch, const Tensor& rows) {
  using T = typename Cfg::scalar_t;
  Tensor h = ref::linear(rows, m.patch_embedding.weight, m.patch_embedding.bias);
  const Tensor pos = ref::round_to(ref_naflex_positions(m.position_embedding, batch.grids, Cfg::pos_side), dtype_of<T>);
  h = ref::round_to(ref::add_f32(h, pos), dtype_of<T>);
  for (auto& layer : m.layers) h = ref_vit_layer<Cfg>(layer, batch.meta.host_cu_seqlens, h);
  Tensor last = ref::layer_norm(h, m.post_layernorm.weight, m.post_layernorm.bias, m.post_layernorm.eps);
  return {last, ref_siglip_map_head<Cfg>(m.head, batch.meta.host_cu_seqlens, last)};
}

// ---------------------------------------------------------------------------------------------
// Harnesses.

/// siglip2_vision_model (L4) over a batch of images (case dims batch, grid_h, grid_w, mixed: the
/// grids of case_vision_grids with a merge window of 1): the processor's rows [T, C*P*P] ~ N(0, 1)
/// (normalised pixels) -> the last hidden state and the pooled vectors, both checked against the
/// composite reference; HF transformers is the external check (bench/parity/).
template <class Model, class Cfg> class Siglip2ModelInstance final : public TaskInstance {
 public:
  explicit Siglip2ModelInstance(const ShapeCase& c) : batch_(case_vision_grids(c, 1), Cfg::pos_side) {
    constexpr double H = Cfg::hidden_size, I = Cfg::intermediate_size;
    const double t = double(batch_.tokens);
    const double weights = (Cfg::num_hidden_layers + 1) * (4 * H * H + 2 * H * I) + Cfg::patch_dim * H;
    require_device_memory((weights + 3 * t * (8 * H + 2 * I + Cfg::patch_dim)) * sizeof(T), "the whole vision tower (weights, activations)");
    model_ = std::make_unique<Model>();
    model_->named_parameters(params_);
    rows_ = empty({batch_.tokens, Cfg::patch_dim}, dtype_of<T>);
  }
  int num_sets() const override { return 1; }
  void randomize(uint64_t seed) override {
    init_params(params_, seed);
    refresh(0, mix_seed(seed, 5301));
  }
  void refresh(int, uint64_t seed) override { fill_normal(rows_, seed); }
  void prepare(int) override { hidden_ = pooled_ = Tensor(); }
  void run(int) override {
    ForwardContextGuard ctx(&batch_.meta);
    hidden_ = model_->forward(rows_, batch_);
    pooled_ = model_->pool(hidden_);
  }
  std::vector<Tensor> inputs(int) override {
    auto v = param_tensors(params_);
    v.push_back(rows_);
    return v;
  }
  std::vector<CheckedOutput> reference(int) override {
    std::pair<Tensor, Tensor> r = ref_siglip2_model<Cfg>(*model_, batch_, rows_);
    const Tolerance tol = depth_tolerance(static_cast<size_t>(model_->num_layers()));
    return {{"last_hidden_state", hidden_, to_f32(r.first), tol}, {"pooled", pooled_, to_f32(r.second), tol}};
  }
  Cost cost() const override {
    constexpr double H = Cfg::hidden_size, Hq = Cfg::num_heads, D = Cfg::head_dim, I = Cfg::intermediate_size, K = Cfg::patch_dim;
    const double t = double(batch_.tokens), L = double(model_->num_layers()), b = double(batch_.meta.num_seqs);
    const double flops = 2 * t * K * H + L * (2 * t * H * 3 * Hq * D + 4 * batch_.pairs() * Hq * D + 2 * t * Hq * D * H + 4 * t * H * I) +
                         2 * t * H * 2 * Hq * D + 4 * t * Hq * D + 2 * b * (2 * H * Hq * D + 2 * H * I);
    return {flops, param_bytes(params_) + t * (K + H) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  NaflexBatch batch_;
  std::unique_ptr<Model> model_;
  ParamList params_;
  Tensor rows_, hidden_, pooled_;
};

/// The generated Siglip2VisionModel behind the VisionTowerModel interface (fk_model, parity): the
/// processor's rows and grids (t = 1) in; forward -> last_hidden_state (the tokens a language model
/// reads: merge is the identity), pool -> one vector per image of the last forward.
template <class Model, class Cfg> class Siglip2TowerAdapter final : public VisionTowerModel {
 public:
  /// num_layers 0: the config's depth.
  Siglip2TowerAdapter(std::string task_name, int64_t num_layers)
      : name_(std::move(task_name)), m_(num_layers > 0 ? num_layers : Cfg::num_hidden_layers) {}
  std::string task_name() const override { return name_; }
  int64_t num_layers() const override { return m_.num_layers(); }
  int64_t hidden_size() const override { return Cfg::hidden_size; }
  int64_t out_hidden_size() const override { return Cfg::hidden_size; }
  int64_t patch_dim() const override { return Cfg::patch_dim; }
  int64_t patch_size() const override { return Cfg::patch_size; }
  int64_t merge_size() const override { return 1; }
  int64_t bench_grid() const override { return Cfg::pos_side; }
  DType dtype() const override { return dtype_of<typename Cfg::scalar_t>; }
  /// The table's own grid, an elongated image (rows shrunk, columns stretched), a small and a wide one.
  std::vector<std::array<int64_t, 3>> default_grids() const override {
    const int64_t s = Cfg::pos_side;
    return {{1, s, s}, {1, std::max<int64_t>(1, s / 2), 2 * s}, {1, std::max<int64_t>(1, 3 * s / 4), std::max<int64_t>(1, s / 3)},
            {1, 3, 5 * s / 2}};
  }
  ParamList named_parameters() override {
    ParamList p;
    m_.named_parameters(p);
    return p;
  }
  Tensor forward(const Tensor& pixel_values, const std::vector<std::array<int64_t, 3>>& grid_thw,
                 std::vector<Tensor>* layer_outputs) override {
    last_ = &batches_.get(grid_thw, [](std::vector<VisionGrid> g) { return NaflexBatch(std::move(g), Cfg::pos_side); });
    ForwardContextGuard ctx(&last_->meta);
    return m_.forward(pixel_values, *last_, layer_outputs);
  }
  Tensor merge(const Tensor& hidden_states) override { return hidden_states; }
  bool has_pool() const override { return true; }
  Tensor pool(const Tensor& hidden_states) override {
    FK_CHECK(last_ != nullptr && hidden_states.dim() == 2 && hidden_states.size(0) == last_->tokens,
             name_ + ": pool takes the last forward's hidden states (" + std::to_string(last_ ? last_->tokens : 0) + " rows), got " +
                 hidden_states.str());
    ForwardContextGuard ctx(&last_->meta);
    return m_.pool(hidden_states);
  }

 private:
  std::string name_;
  Model m_;
  const NaflexBatch* last_ = nullptr;
  VisionBatchCache<NaflexBatch> batches_;
};

}  // namespace fk::tasks
