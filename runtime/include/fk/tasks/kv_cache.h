// Harness and forward glue for the `store_kvcache` task kind: mirrors vLLM's
// reshape_and_cache_flash behind StoreKVCache() (forward(key, value, k_cache, v_cache,
// slot_mapping): writes the new tokens' keys and values into the cache in place).
// Cfg (generated): num_kv_heads, head_dim, scalar_t.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "fk/kernels/reference/store_kvcache_ref.cuh"
#include "fk/kernels/store_kvcache.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// `count` distinct slots drawn uniformly from [0, num_slots) in random order (a partial
/// Fisher-Yates shuffle on the host, seeded), as an i64 device tensor [count].
inline Tensor random_distinct_slots(int64_t count, int64_t num_slots, uint64_t seed) {
  FK_CHECK(count <= num_slots, "random_distinct_slots: more slots requested than exist");
  std::vector<int64_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), int64_t{0});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < count; ++i) {
    std::uniform_int_distribution<int64_t> pick(i, num_slots - 1);
    std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(pick(rng))]);
  }
  all.resize(static_cast<size_t>(count));
  return to_device(all, {count});
}

namespace detail {
/// (token stride, head stride) of key/value given as [T, Hkv, D] or [T, Hkv*D].
inline std::pair<int64_t, int64_t> kv_strides(const Tensor& t, int64_t heads, int64_t head_dim, const char* what) {
  FK_CHECK(t.stride(-1) == 1, std::string(what) + " " + t.str());
  if (t.dim() == 3) {
    FK_CHECK(t.size(1) == heads && t.size(2) == head_dim, std::string(what) + " " + t.str());
    return {t.stride(0), t.stride(1)};
  }
  FK_CHECK(t.dim() == 2 && t.size(1) == heads * head_dim, std::string(what) + " " + t.str());
  return {t.stride(0), head_dim};
}
}  // namespace detail

/// StoreKVCache.forward: k_cache[slot_mapping[t]] = key[t], v_cache[slot_mapping[t]] = value[t]
/// for every slot >= 0. Caches contiguous, [num_slots, Hkv, D] (or [blocks, block_size, Hkv, D]).
template <class Cfg>
void store_kvcache_forward(const Tensor& key, const Tensor& value, Tensor& k_cache, Tensor& v_cache,
                           const Tensor& slot_mapping) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::num_kv_heads, D = Cfg::head_dim;
  const auto [ks, khs] = detail::kv_strides(key, H, D, "StoreKVCache key");
  const auto [vs, vhs] = detail::kv_strides(value, H, D, "StoreKVCache value");
  const int64_t tokens = slot_mapping.numel();
  FK_CHECK(slot_mapping.dtype() == DType::kI64 && key.size(0) == tokens && value.size(0) == tokens,
           "StoreKVCache slot_mapping " + slot_mapping.str() + " vs key " + key.str());
  FK_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.sizes() == v_cache.sizes() &&
               k_cache.numel() % (H * D) == 0 && k_cache.size(-1) == D,
           "StoreKVCache caches " + k_cache.str() + ", " + v_cache.str());
  fk::kernels::store_kvcache<T, Cfg::num_kv_heads, Cfg::head_dim>(key.data<T>(), ks, khs, value.data<T>(), vs, vhs,
                                                                   k_cache.data<T>(), v_cache.data<T>(),
                                                                   slot_mapping.data<int64_t>(), tokens,
                                                                   current_stream());
  FK_CHECK_LAUNCH();
}

/// One case of a store_kvcache task. Case dims: num_tokens. The caches have
/// max(2 * num_tokens, 4096) slots and are shared by the sets; each set writes its tokens to
/// distinct random slots. prepare() restores the caches from pristine copies, and the whole
/// caches are checked (untouched slots included).
template <class Module, class Cfg> class StoreKVCacheInstance final : public TaskInstance {
 public:
  explicit StoreKVCacheInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")), slots_(std::max<int64_t>(2 * tokens_, 4096)) {
    const double set_bytes = double(tokens_) * (2 * kRow * sizeof(T) + sizeof(int64_t));
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + 4.0 * slots_ * kRow * sizeof(T), "store_kvcache inputs and caches");
    for (int s = 0; s < n; ++s) {
      key_.push_back(empty({tokens_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
      value_.push_back(empty({tokens_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
    }
    slot_mapping_.resize(n);
    for (Tensor* t : {&k_cache_, &v_cache_, &k_cache0_, &v_cache0_})
      *t = empty({slots_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>);
  }
  int num_sets() const override { return static_cast<int>(key_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(k_cache0_, mix_seed(seed, 0));
    fill_normal(v_cache0_, mix_seed(seed, 1));
    copy_(k_cache_, k_cache0_);
    copy_(v_cache_, v_cache0_);
    for (int s = 0; s < num_sets(); ++s) fill_set(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    prepare(s);  // the caches are shared by the sets: back to pristine, then this set's writes
    fill_set(s, seed);
  }
  bool sets_independent() const override { return false; }
  void prepare(int) override {  // in place: restore the caches
    copy_(k_cache_, k_cache0_);
    copy_(v_cache_, v_cache0_);
  }
  void run(int s) override { module_.forward(key_[s], value_[s], k_cache_, v_cache_, slot_mapping_[s]); }
  std::vector<Tensor> inputs(int s) override { return {key_[s], value_[s], slot_mapping_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    namespace ref = fk::kernels::reference;
    Tensor k_ref = empty({slots_, Cfg::num_kv_heads, Cfg::head_dim}, DType::kF32);
    Tensor v_ref = empty({slots_, Cfg::num_kv_heads, Cfg::head_dim}, DType::kF32);
    const int64_t* sm = slot_mapping_[s].data<int64_t>();
    ref::store_kvcache_ref<T>(k_ref.data<float>(), k_cache0_.data<T>(), slots_, key_[s].data<T>(), kRow,
                              Cfg::head_dim, sm, tokens_, Cfg::num_kv_heads, Cfg::head_dim, current_stream());
    ref::store_kvcache_ref<T>(v_ref.data<float>(), v_cache0_.data<T>(), slots_, value_[s].data<T>(), kRow,
                              Cfg::head_dim, sm, tokens_, Cfg::num_kv_heads, Cfg::head_dim, current_stream());
    FK_CHECK_LAUNCH();
    const Tolerance tol = default_tolerance(dtype_of<T>);
    return {{"k_cache", k_cache_, k_ref, tol}, {"v_cache", v_cache_, v_ref, tol}};
  }
  Cost cost() const override {
    // Read key, value and the slots; write one cache row of each per token.
    return {0.0, tokens_ * (4.0 * kRow * sizeof(T) + sizeof(int64_t))};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int64_t kRow = Cfg::num_kv_heads * Cfg::head_dim;
  void fill_set(int s, uint64_t seed) {
    fill_normal(key_[s], mix_seed(seed, 0));
    fill_normal(value_[s], mix_seed(seed, 1));
    slot_mapping_[s] = random_distinct_slots(tokens_, slots_, mix_seed(seed, 2));
  }
  int64_t tokens_, slots_;
  Module module_;
  std::vector<Tensor> key_, value_, slot_mapping_;
  Tensor k_cache_, v_cache_, k_cache0_, v_cache0_;
};

}  // namespace fk::tasks
