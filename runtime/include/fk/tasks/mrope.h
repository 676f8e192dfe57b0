// Harness and forward glue for the `mrope` task kind, which mirrors
// vllm.model_executor.layers.rotary_embedding.MRotaryEmbedding: the rotary embedding of Qwen2-VL,
// Qwen2.5-VL and Qwen3-VL's text models, whose tokens carry three positions (temporal, height, width;
// text tokens three equal ones) and whose rotary frequencies are split into sections taking their
// angle from one of the three (Note [mrope sections] in generator/src/passes/parse.cc).
// Cfg (generated): head_size, rotary_dim, max_position, base, is_neox_style, num_heads, num_kv_heads,
// mrope_s0, mrope_s1, mrope_s2, mrope_interleaved, scalar_t.
//
// Note [mrope positions]
// forward(positions, query, key) takes positions [3, T] (i64, rows contiguous: vLLM's
// `positions` of a multimodal step) or [T] (a text-only step: vLLM and HF then rotate exactly as
// RotaryEmbedding does, the three positions being equal). The cos/sin cache is RotaryEmbedding's
// (Note [cos_sin_cache]; shared with a RotaryEmbedding of the same parameters). One launch of the
// rotary kernel with the sections as template constants; a lane whose frequencies lie in one
// section (Qwen2-VL's 16/24/24 at 8 frequencies a lane) loads its cos/sin row as vectors.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fk/kernels/reference/rotary_embedding_ref.cuh"
#include "fk/kernels/rotary_embedding.cuh"
#include "fk/tasks/harness.h"
#include "fk/tasks/reference_ops.h"
#include "fk/tasks/rotary_embedding.h"

namespace fk::tasks {

/// The rope parameters of an mrope config (no scaling: vLLM's MRotaryEmbedding without YaRN).
inline RopeParams mrope_params(int64_t rotary_dim, int64_t max_position, double base) {
  RopeParams p;
  p.rotary_dim = rotary_dim;
  p.max_position = max_position;
  p.base = base;
  return p;
}

/// The axis stride of mrope positions: 0 for [T], the row stride for [3, T] (Note [mrope positions]).
inline int64_t mrope_axis_stride(const Tensor& positions, int64_t tokens) {
  FK_CHECK(positions.dtype() == DType::kI64, "MRotaryEmbedding positions must be i64, got " + positions.str());
  if (positions.dim() == 1) {
    FK_CHECK(positions.size(0) == tokens, "MRotaryEmbedding positions " + positions.str() + " for " + std::to_string(tokens) +
                                              " tokens");
    return 0;
  }
  FK_CHECK(positions.dim() == 2 && positions.size(0) == 3 && positions.size(1) == tokens && positions.stride(1) == 1,
           "MRotaryEmbedding positions: expected [3, " + std::to_string(tokens) + "] (temporal, height, width rows) or [" +
               std::to_string(tokens) + "], got " + positions.str());
  return positions.stride(0);
}

/// MRotaryEmbedding.forward(positions, query, key): query [T, Hq*D] and key [T, Hkv*D] (or [T, H, D]
/// views) rotated in place (one launch) and returned.
template <class Cfg>
std::tuple<Tensor, Tensor> mrope_forward(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& cos_sin_cache) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t D = Cfg::head_size;
  const auto qs = detail::token_strides(query, Cfg::num_heads, D, "MRotaryEmbedding query");
  const auto ks = detail::token_strides(key, Cfg::num_kv_heads, D, "MRotaryEmbedding key");
  const int64_t tokens = query.size(0);
  FK_CHECK(key.size(0) == tokens, "MRotaryEmbedding query " + query.str() + " vs key " + key.str());
  const int64_t axis_stride = mrope_axis_stride(positions, tokens);
  FK_CHECK(cos_sin_cache.dtype() == DType::kF32 && cos_sin_cache.size(-1) == Cfg::rotary_dim, "cos_sin_cache " + cos_sin_cache.str());
  fk::kernels::mrope<T, Cfg::head_size, Cfg::rotary_dim, Cfg::is_neox_style, Cfg::num_heads, Cfg::num_kv_heads, Cfg::mrope_s0,
                     Cfg::mrope_s1, Cfg::mrope_s2, Cfg::mrope_interleaved>(
      positions.data<int64_t>(), axis_stride, query.data<T>(), qs.first, key.data<T>(), ks.first, cos_sin_cache.data<float>(), tokens,
      current_stream(), qs.second, ks.second);
  FK_CHECK_LAUNCH();
  return {query, key};
}

template <class R, class = void> struct IsMrope : std::false_type {};
template <class R> struct IsMrope<R, std::void_t<decltype(R::is_mrope)>> : std::bool_constant<R::is_mrope> {};

/// What a reference rope reads for a rotary module `r` and these positions: (lookup positions,
/// fp32 cos/sin rows). RotaryEmbedding: the positions and its cache (longrope: this step's table);
/// MRotaryEmbedding with [3, T] positions: arange(T) and the per-token rows built HF's way
/// (ref::mrope_table), independently of the kernel's section bounds.
template <class R> std::pair<Tensor, Tensor> rope_reference_rows(const R& r, const Tensor& positions) {
  if constexpr (IsMrope<R>::value) {
    if (positions.dim() == 1) return {positions, r.cos_sin_cache};
    using C = typename R::Cfg;
    return {ref::arange_i64(positions.size(1)),
            ref::mrope_table(positions, r.cos_sin_cache, static_cast<int>(r.rotary_dim), C::mrope_s0, C::mrope_s1, C::mrope_s2,
                             C::mrope_interleaved)};
  } else {
    return {positions, r.cache_for(positions)};
  }
}

// Note [VLM rope index]
// The [3, T] positions of a prompt with images, as HF's Qwen2VLModel.get_rope_index numbers them
// (and vLLM's MRotaryEmbedding.get_input_positions): text tokens count up on all three rows; an
// image of grid (t, h, w) patches occupies t * (h / m) * (w / m) image tokens (m: the spatial merge
// size) at (s + frame, s + row, s + column), s being the position after the text before it; the text
// after an image starts at the largest position so far + 1. Decode step k then sits at
// next_position + k on all three rows (HF's mrope_position_delta: next_position - prompt length).
// Qwen2-VL's temporal index is the frame index (Qwen2.5-VL scales it by seconds per grid, for video;
// not served here).
struct VlRopeIndex {
  std::vector<int64_t> rows[3];  ///< temporal, height, width positions of every token
  int64_t next_position = 0;     ///< the first decode position: max + 1
};

/// HF get_rope_index for one prompt with images of grids `grids` (in order of appearance; each
/// image's tokens are image_token_id, contiguous). Errors name what does not match.
inline VlRopeIndex vl_rope_index(const std::vector<int64_t>& ids, int64_t image_token_id,
                                 const std::vector<std::array<int64_t, 3>>& grids, int64_t merge) {
  VlRopeIndex out;
  int64_t st = 0, next = 0;
  const int64_t n = static_cast<int64_t>(ids.size());
  auto push = [&](int64_t t, int64_t h, int64_t w) {
    out.rows[0].push_back(t), out.rows[1].push_back(h), out.rows[2].push_back(w);
    next = std::max(next, std::max(t, std::max(h, w)) + 1);
  };
  for (size_t k = 0; k < grids.size(); ++k) {
    int64_t ed = st;
    while (ed < n && ids[ed] != image_token_id) ++ed;
    FK_CHECK(ed < n, "vl_rope_index: image " + std::to_string(k) + " has no image tokens left in the prompt");
    const int64_t s0 = next;
    for (int64_t p = st; p < ed; ++p) push(s0 + (p - st), s0 + (p - st), s0 + (p - st));
    const auto& g = grids[k];
    FK_CHECK(g[1] % merge == 0 && g[2] % merge == 0, "vl_rope_index: grid rows/columns must be whole merge windows");
    const int64_t gh = g[1] / merge, gw = g[2] / merge, count = g[0] * gh * gw;
    FK_CHECK(ed + count <= n, "vl_rope_index: image " + std::to_string(k) + " needs " + std::to_string(count) +
                                  " image tokens, the prompt ends first");
    const int64_t s = s0 + (ed - st);
    for (int64_t i = 0; i < count; ++i) {
      FK_CHECK(ids[ed + i] == image_token_id, "vl_rope_index: image " + std::to_string(k) + " has " + std::to_string(i) +
                                                  " image tokens, its grid needs " + std::to_string(count));
      push(s + i / (gh * gw), s + (i / gw) % gh, s + i % gw);
    }
    st = ed + count;
  }
  const int64_t s0 = next;
  for (int64_t p = st; p < n; ++p) {
    FK_CHECK(ids[p] != image_token_id, "vl_rope_index: more image tokens than the grids hold");
    push(s0 + (p - st), s0 + (p - st), s0 + (p - st));
  }
  out.next_position = next;
  return out;
}

/// One case of an mrope task. Case dims: num_tokens. query and key are column views of one qkv tensor
/// [T, (Hq + 2 Hkv) * D] (vLLM's qkv.split). Even input sets carry [3, T] positions drawn independently
/// per axis (every section's row exercised), odd sets [T] (a text-only step).
template <class Module, class Cfg> class MRotaryEmbeddingInstance final : public TaskInstance {
 public:
  explicit MRotaryEmbeddingInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")), module_(Cfg::head_size, Cfg::rotary_dim, Cfg::max_position, Cfg::base, Cfg::is_neox_style) {
    const double set_bytes = double(tokens_) * (kWidth * sizeof(T) * 2 + 3 * sizeof(int64_t));
    const int n = std::max(2, rotating_sets(set_bytes));
    require_device_memory(set_bytes * n, "mrope inputs");
    for (int s = 0; s < n; ++s) {
      qkv_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      qkv0_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      pos_.push_back(s % 2 == 0 ? empty({3, tokens_}, DType::kI64) : empty({tokens_}, DType::kI64));
      query_.push_back(qkv_.back().narrow_last(0, Cfg::num_heads * Cfg::head_size));
      key_.push_back(qkv_.back().narrow_last(Cfg::num_heads * Cfg::head_size, Cfg::num_kv_heads * Cfg::head_size));
    }
  }
  int num_sets() const override { return static_cast<int>(qkv_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(qkv0_[s], mix_seed(seed, 0));
    fill_randint(pos_[s], mix_seed(seed, 1), 0, Cfg::max_position);
    copy_(qkv_[s], qkv0_[s]);
  }
  void prepare(int s) override { copy_(qkv_[s], qkv0_[s]); }  // in place: restore q and k
  void run(int s) override { module_.forward(pos_[s], query_[s], key_[s]); }
  std::vector<Tensor> inputs(int s) override { return {module_.cos_sin_cache, pos_[s], qkv0_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    namespace kr = fk::kernels::reference;
    Tensor expected = empty({tokens_, kWidth}, DType::kF32);
    const T* x0 = qkv0_[s].data<T>();
    float* e = expected.data<float>();
    kr::copy_to_f32<T>(e, kWidth, x0, kWidth, tokens_, static_cast<int>(kWidth), current_stream());
    const std::pair<Tensor, Tensor> rows = rope_reference_rows(module_, pos_[s]);
    const int64_t koff = Cfg::num_heads * Cfg::head_size;
    kr::rotary_embedding_ref<T>(e, kWidth, x0, kWidth, rows.first.data<int64_t>(), rows.second.data<float>(), tokens_, Cfg::num_heads,
                                Cfg::head_size, Cfg::rotary_dim, Cfg::is_neox_style, current_stream());
    kr::rotary_embedding_ref<T>(e + koff, kWidth, x0 + koff, kWidth, rows.first.data<int64_t>(), rows.second.data<float>(), tokens_,
                                Cfg::num_kv_heads, Cfg::head_size, Cfg::rotary_dim, Cfg::is_neox_style, current_stream());
    FK_CHECK_LAUNCH();
    return {{"qkv (query, key rotated in place)", qkv_[s], expected, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    // Read and write the rotary part of every q and k head; read three positions and (at most) three
    // cache rows per token.
    const double rot_elems = double(tokens_) * (Cfg::num_heads + Cfg::num_kv_heads) * Cfg::rotary_dim;
    const double rows = std::min<double>(3.0 * double(tokens_), double(Cfg::max_position));
    const double bytes = rot_elems * sizeof(T) * 2 + 3.0 * tokens_ * sizeof(int64_t) + rows * Cfg::rotary_dim * sizeof(float);
    return {rot_elems * 3, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int64_t kWidth = (Cfg::num_heads + 2 * Cfg::num_kv_heads) * Cfg::head_size;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> qkv_, qkv0_, pos_, query_, key_;
};

}  // namespace fk::tasks
