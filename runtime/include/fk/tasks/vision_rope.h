// Harness and forward glue for the `vision_rope_2d` task kind (issue 22): the 2-D rotary
// embedding of vision towers, in place on q and k (fk/kernels/vision_rope.cuh): DINOv3's
// (DINOv3ViTRopePositionEmbedding + apply_rotary_pos_emb: normalised patch centres, class and
// register tokens unrotated) and Qwen2-VL's vision rope (integer patch rows and columns in 2 x 2
// merge windows). forward(query [T, H*D], key [T, H*D]) -> (query, key), rows may be strided
// (views of one qkv tensor), T a whole number of images.
// Cfg (generated): head_dim, num_heads, rope_theta, grid_h, grid_w, prefix_tokens, merge_size,
// centered, scalar_t.
#pragma once

#include <tuple>
#include <utility>
#include <vector>

#include "fk/kernels/reference/rotary_embedding_ref.cuh"
#include "fk/kernels/reference/vision_rope_ref.cuh"
#include "fk/kernels/vision_rope.cuh"
#include "fk/tasks/attention.h"  // case_seq_lens
#include "fk/tasks/harness.h"

namespace fk::tasks {

template <class Cfg> constexpr int64_t vision_rope_tokens_per_image() { return Cfg::prefix_tokens + Cfg::grid_h * Cfg::grid_w; }
template <class Cfg> fk::kernels::VisionRopeGeometry vision_rope_geometry() {
  return {static_cast<int>(vision_rope_tokens_per_image<Cfg>()), static_cast<int>(Cfg::prefix_tokens), static_cast<int>(Cfg::grid_h),
          static_cast<int>(Cfg::grid_w), static_cast<int>(Cfg::merge_size), static_cast<float>(Cfg::rope_theta), Cfg::centered};
}

/// VisionRope2D.forward(query, key[, positions]): both rotated in place, returned. positions (i32
/// [T, 2] on the device: each token's patch row and column, Qwen2-VL's towers over images of any
/// size) replaces the constants' uniform grid.
template <class Cfg>
std::tuple<Tensor, Tensor> vision_rope_2d_forward(const Tensor& query, const Tensor& key, const Tensor& positions = Tensor()) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t W = Cfg::num_heads * Cfg::head_dim;
  for (const Tensor* x : {&query, &key})
    FK_CHECK(x->dim() == 2 && x->size(1) == W && x->stride(1) == 1 && x->dtype() == dtype_of<T>,
             "VisionRope2D input " + x->str() + ": expected [T, " + std::to_string(W) + "] rows of " + dtype_name(dtype_of<T>));
  fk::kernels::VisionRopeGeometry g = vision_rope_geometry<Cfg>();
  if (positions.defined()) {
    FK_CHECK(Cfg::prefix_tokens == 0, "VisionRope2D: a position table serves towers without class or register tokens");
    FK_CHECK(positions.dtype() == DType::kI32 && positions.dim() == 2 && positions.size(0) == query.size(0) && positions.size(1) == 2 &&
                 positions.is_contiguous(),
             "VisionRope2D positions " + positions.str() + ": expected contiguous i32 [" + std::to_string(query.size(0)) + ", 2] (row, column)");
    FK_CHECK(query.size(0) == key.size(0), "VisionRope2D: query and key have different token counts");
    g.positions = positions.data<int32_t>();
  } else {
    FK_CHECK(query.size(0) == key.size(0) && query.size(0) % vision_rope_tokens_per_image<Cfg>() == 0,
             "VisionRope2D: " + std::to_string(query.size(0)) + " tokens are not whole images of " +
                 std::to_string(vision_rope_tokens_per_image<Cfg>()));
  }
  Tensor q = query, k = key;  // in place
  fk::kernels::vision_rope_2d<T, static_cast<int>(Cfg::head_dim)>(q.data<T>(), q.stride(0), static_cast<int>(Cfg::num_heads), k.data<T>(),
                                                                  k.stride(0), static_cast<int>(Cfg::num_heads), q.size(0), g,
                                                                  current_stream());
  FK_CHECK_LAUNCH();
  return {query, key};
}

/// One case of a vision_rope_2d task. Case dims: batch (images), seq_len (= tokens per image,
/// uniform). query and key are column views of one qkv tensor [T, 3 * H * D] (v untouched),
/// restored before every call (in place).
template <class Module, class Cfg> class VisionRopeInstance final : public TaskInstance {
 public:
  explicit VisionRopeInstance(const ShapeCase& c) : module_(Cfg::head_dim, Cfg::rope_theta) {
    const std::vector<int64_t> lens = case_seq_lens(c, "seq_len");
    for (int64_t l : lens)
      FK_CHECK(l == vision_rope_tokens_per_image<Cfg>(), "vision rope cases are whole images of " +
                                                             std::to_string(vision_rope_tokens_per_image<Cfg>()) + " tokens");
    tokens_ = static_cast<int64_t>(lens.size()) * vision_rope_tokens_per_image<Cfg>();
    const double set_bytes = double(tokens_) * kWidth * sizeof(T) * 2;
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "vision rope inputs");
    for (int s = 0; s < n; ++s) {
      qkv_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      qkv0_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      query_.push_back(qkv_.back().narrow_last(0, kHeadsWidth));
      key_.push_back(qkv_.back().narrow_last(kHeadsWidth, kHeadsWidth));
    }
  }
  int num_sets() const override { return static_cast<int>(qkv_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(qkv0_[s], seed);
    copy_(qkv_[s], qkv0_[s]);
  }
  void prepare(int s) override { copy_(qkv_[s], qkv0_[s]); }  // in place: restore q and k
  void run(int s) override { module_.forward(query_[s], key_[s]); }
  std::vector<Tensor> inputs(int s) override { return {qkv0_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    namespace ref = fk::kernels::reference;
    Tensor expected = empty({tokens_, kWidth}, DType::kF32);
    const T* x0 = qkv0_[s].data<T>();
    float* e = expected.data<float>();
    ref::copy_to_f32<T>(e, kWidth, x0, kWidth, tokens_, static_cast<int>(kWidth), current_stream());  // v unchanged
    const fk::kernels::VisionRopeGeometry g = vision_rope_geometry<Cfg>();
    for (int64_t off : {int64_t{0}, kHeadsWidth})
      ref::vision_rope_2d_ref<T>(e + off, kWidth, x0 + off, kWidth, tokens_, static_cast<int>(Cfg::num_heads),
                                 static_cast<int>(Cfg::head_dim), g, current_stream());
    FK_CHECK_LAUNCH();
    return {{"qkv (query, key rotated in place)", qkv_[s], expected, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double elems = double(tokens_) * 2 * kHeadsWidth;  // q and k, read and written
    return {elems * 3, elems * 2 * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int64_t kHeadsWidth = Cfg::num_heads * Cfg::head_dim;
  static constexpr int64_t kWidth = 3 * kHeadsWidth;
  int64_t tokens_ = 0;
  Module module_;
  std::vector<Tensor> qkv_, qkv0_, query_, key_;
};

}  // namespace fk::tasks
