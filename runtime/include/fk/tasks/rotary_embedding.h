// Harness and forward glue for the `rotary_embedding` task kind, which mirrors
// vllm.model_executor.layers.rotary_embedding.RotaryEmbedding and its scaled variants
// (Llama3RotaryEmbedding, LinearScalingRotaryEmbedding, YaRNScalingRotaryEmbedding).
// Cfg (generated): head_size, rotary_dim, max_position, base, is_neox_style, num_heads,
// num_kv_heads, scaling_type, scaling_factor, low_freq_factor, high_freq_factor,
// original_max_position, beta_fast, beta_slow, scalar_t.
//
// Note [cos_sin_cache]
// Built on the host in the module constructor the way vLLM's _compute_cos_sin_cache does it
// (inv_freq and the angles t * inv_freq in fp32, as torch computes them; cos/sin of that fp32
// angle), kept in fp32 on the device: [rows, rotary_dim], cos in the first rotary_dim/2
// columns, sin in the last. rows = max_position, except, as in vLLM, linear scaling
// (max_position * factor) and YaRN (original_max_position * factor, cos/sin times mscale).
//
// Note [LongRoPE]
// Phi-3/Phi-4 LongRoPE (vLLM Phi3LongRoPEScaledRotaryEmbedding; HF _compute_longrope_parameters):
// two tables in one cache, as vLLM keeps them: rows [0, original_max) with inv_freq divided by
// short_factor, then rows [original_max, original_max + max_position) with inv_freq divided by
// long_factor; cos and sin of both times scaling_factor, the attention factor (the config's
// attention_factor, else sqrt(1 + ln(max / original_max) / ln(original_max)): the generator
// derives it). A step whose positions include one past original_max reads the long table for
// every token (position + original_max), else the short one: vLLM's rule, per batch. HF decides
// per forward call by max(position) + 1 > original_max, which differs from it only when the
// largest position is exactly original_max. The choice is made on the device
// (longrope_offset, one int the rotary kernel adds to each position), so decode steps stay
// capturable in a CUDA graph.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fk/kernels/reference/rotary_embedding_ref.cuh"
#include "fk/kernels/rotary_embedding.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// kYarnNoTrunc: YaRN with truncate=False (gpt-oss): the correction range is not rounded to whole
/// dimensions (HF _compute_yarn_parameters, vLLM yarn_find_correction_range(truncate=False)).
/// kDeepseekYarn: vLLM DeepseekScalingRotaryEmbedding with mscale == mscale_all_dim (DeepSeek-V2/V3):
/// YaRN's frequencies and rows, cos/sin times yarn_mscale(f, mscale) / yarn_mscale(f, mscale_all_dim)
/// = 1 (the generator lowers no other ratio; the softmax scale carries mscale_all_dim instead).
/// kLongrope: Note [LongRoPE].
enum class RopeScaling { kNone, kLlama3, kLinear, kYarn, kYarnNoTrunc, kDeepseekYarn, kLongrope };

/// Everything the cos/sin cache depends on (see Note [cos_sin_cache]).
struct RopeParams {
  int64_t rotary_dim = 0;
  int64_t max_position = 0;
  double base = 10000;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1;
  double low_freq_factor = 0, high_freq_factor = 0;  // llama3
  int64_t original_max_position = 0;                 // llama3, yarn
  double beta_fast = 32, beta_slow = 1;              // yarn
  std::vector<double> long_factor, short_factor;      // longrope (factor: the cos/sin scale)

  bool operator==(const RopeParams& o) const {
    return rotary_dim == o.rotary_dim && max_position == o.max_position && base == o.base && scaling == o.scaling &&
           factor == o.factor && low_freq_factor == o.low_freq_factor && high_freq_factor == o.high_freq_factor &&
           original_max_position == o.original_max_position && beta_fast == o.beta_fast && beta_slow == o.beta_slow &&
           long_factor == o.long_factor && short_factor == o.short_factor;
  }
};

/// The numbers of a comma-joined list (the generator's spelling of longrope's factors).
inline std::vector<double> parse_factor_list(const char* joined) {
  std::vector<double> out;
  std::string item;
  for (const char* c = joined;; ++c) {
    if (*c == ',' || *c == 0) {
      if (!item.empty()) out.push_back(std::stod(item));
      item.clear();
      if (*c == 0) break;
    } else {
      item += *c;
    }
  }
  return out;
}

template <class Cfg, class = void> struct HasLongFactor : std::false_type {};
template <class Cfg> struct HasLongFactor<Cfg, std::void_t<decltype(Cfg::long_factor)>> : std::true_type {};

template <class Cfg> RopeParams rope_params(int64_t rotary_dim, int64_t max_position, double base) {
  RopeParams p;
  p.rotary_dim = rotary_dim;
  p.max_position = max_position;
  p.base = base;
  p.scaling = Cfg::scaling_type;
  p.factor = Cfg::scaling_factor;
  p.low_freq_factor = Cfg::low_freq_factor;
  p.high_freq_factor = Cfg::high_freq_factor;
  p.original_max_position = Cfg::original_max_position;
  p.beta_fast = Cfg::beta_fast;
  p.beta_slow = Cfg::beta_slow;
  if constexpr (HasLongFactor<Cfg>::value) {
    p.long_factor = parse_factor_list(Cfg::long_factor);
    p.short_factor = parse_factor_list(Cfg::short_factor);
  }
  return p;
}

/// Rows of the cache vLLM builds for these parameters.
inline int64_t cos_sin_cache_rows(const RopeParams& p) {
  switch (p.scaling) {
    case RopeScaling::kLinear: return static_cast<int64_t>(static_cast<double>(p.max_position) * p.factor);
    case RopeScaling::kYarn:
    case RopeScaling::kYarnNoTrunc:
    case RopeScaling::kDeepseekYarn: return static_cast<int64_t>(static_cast<double>(p.original_max_position) * p.factor);
    case RopeScaling::kLongrope: return p.original_max_position + p.max_position;
    default: return p.max_position;
  }
}

/// Host copy of the cache, row-major [cos_sin_cache_rows(p), rotary_dim].
inline std::vector<float> compute_cos_sin_cache_host(const RopeParams& p) {
  const int64_t half = p.rotary_dim / 2;
  FK_CHECK(p.rotary_dim > 0 && p.rotary_dim % 2 == 0, "rotary_dim must be positive and even");
  const float kPi = 3.14159265358979323846f;
  // inv_freq = 1 / base ** (arange(0, rot, 2) / rot), in fp32 as torch computes it.
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(p.base), expo);
  }
  if (p.scaling == RopeScaling::kLongrope) {
    FK_CHECK(static_cast<int64_t>(p.long_factor.size()) == half && static_cast<int64_t>(p.short_factor.size()) == half &&
                 p.original_max_position > 0 && p.factor > 0,
             "longrope needs rotary_dim / 2 = " + std::to_string(half) + " long and short factors, original_max_position > 0 "
             "and a positive cos/sin scale");
    const int64_t rows = cos_sin_cache_rows(p);
    std::vector<float> cache(static_cast<size_t>(rows * p.rotary_dim));
    const float mscale = static_cast<float>(p.factor);
    for (int table = 0; table < 2; ++table) {
      const std::vector<double>& f = table == 0 ? p.short_factor : p.long_factor;
      std::vector<float> inv(half);
      for (int64_t i = 0; i < half; ++i) {  // 1 / (factor * base ** (2i / rot)), in fp32 as torch
        const float expo = static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim);
        inv[i] = 1.0f / (static_cast<float>(f[i]) * std::pow(static_cast<float>(p.base), expo));
      }
      const int64_t first = table == 0 ? 0 : p.original_max_position;
      const int64_t n = table == 0 ? p.original_max_position : p.max_position;
      for (int64_t t = 0; t < n; ++t) {
        float* row = cache.data() + (first + t) * p.rotary_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(static_cast<float>(t) * inv[i]);  // fp32 product, as torch
          row[i] = static_cast<float>(std::cos(angle)) * mscale;
          row[half + i] = static_cast<float>(std::sin(angle)) * mscale;
        }
      }
    }
    return cache;
  }
  float mscale = 1.0f;
  float t_scale = 1.0f;  // t = arange(rows) / t_scale
  switch (p.scaling) {
    case RopeScaling::kNone:
    case RopeScaling::kLongrope: break;
    case RopeScaling::kLinear: t_scale = static_cast<float>(p.factor); break;
    case RopeScaling::kLlama3: {
      const float factor = static_cast<float>(p.factor);
      const float lff = static_cast<float>(p.low_freq_factor), hff = static_cast<float>(p.high_freq_factor);
      const float omp = static_cast<float>(p.original_max_position);
      const float low_freq_wavelen = omp / lff, high_freq_wavelen = omp / hff;
      for (auto& f : inv_freq) {
        const float wave_len = 2 * kPi / f;
        const float smooth = lff != hff ? (omp / wave_len - lff) / (hff - lff) : 0.f;
        if (wave_len < high_freq_wavelen) {
          // unchanged
        } else if (wave_len > low_freq_wavelen) {
          f = f / factor;
        } else {
          f = (1 - smooth) * f / factor + smooth * f;
        }
      }
      break;
    }
    case RopeScaling::kYarn:
    case RopeScaling::kYarnNoTrunc:
    case RopeScaling::kDeepseekYarn: {
      const bool truncate = p.scaling != RopeScaling::kYarnNoTrunc;
      const double dim = static_cast<double>(p.rotary_dim);
      auto correction_dim = [&](double num_rotations) {
        return dim * std::log(static_cast<double>(p.original_max_position) / (num_rotations * 2 * 3.14159265358979323846)) /
               (2 * std::log(p.base));
      };
      const double lo = correction_dim(p.beta_fast), hi = correction_dim(p.beta_slow);
      const double low = std::max(truncate ? std::floor(lo) : lo, 0.0);
      double high = std::min(truncate ? std::ceil(hi) : hi, dim - 1);
      if (low == high) high += 0.001;
      const float factor = static_cast<float>(p.factor);
      for (int64_t i = 0; i < half; ++i) {
        const float pos_freq = std::pow(static_cast<float>(p.base), static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim));
        const float extrap = 1.0f / pos_freq, interp = 1.0f / (factor * pos_freq);
        float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
        ramp = std::min(std::max(ramp, 0.f), 1.f);
        const float mask = 1.0f - ramp;  // extrapolation_factor = 1
        inv_freq[i] = interp * (1 - mask) + extrap * mask;
      }
      if (p.scaling != RopeScaling::kDeepseekYarn)
        mscale = p.factor <= 1 ? 1.0f : static_cast<float>(0.1 * std::log(p.factor) + 1.0);  // attn_factor = 1
      break;
    }
  }
  const int64_t rows = cos_sin_cache_rows(p);
  std::vector<float> cache(static_cast<size_t>(rows * p.rotary_dim));
  for (int64_t t = 0; t < rows; ++t) {
    const float tf = p.scaling == RopeScaling::kLinear ? static_cast<float>(t) / t_scale : static_cast<float>(t);
    float* row = cache.data() + t * p.rotary_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(tf * inv_freq[i]);  // fp32 product, as torch
      row[i] = static_cast<float>(std::cos(angle)) * mscale;
      row[half + i] = static_cast<float>(std::sin(angle)) * mscale;
    }
  }
  return cache;
}

/// The module's cos_sin_cache buffer (fp32, on the device).
inline Tensor compute_cos_sin_cache(const RopeParams& p) {
  return to_device(compute_cos_sin_cache_host(p), {cos_sin_cache_rows(p), p.rotary_dim});
}

// Note [Shared cos_sin_cache]
// vLLM's get_rope returns one RotaryEmbedding per parameter set (its _ROPE_DICT), so every layer
// of a model reads the same cos_sin_cache buffer. The modules here do the same: a cache is
// computed once per (device, RopeParams) and shared while any module holds it (the registry keeps
// only weak references, so it is freed with the last module). Per layer it would cost
// max_position x rotary_dim x 4 bytes each: 16 GiB over Seed-OSS-36B's 64 layers of 524288
// positions, and minutes of host trigonometry.

/// The cos/sin cache for `p` on the current device, shared (Note [Shared cos_sin_cache]).
inline Tensor shared_cos_sin_cache(const RopeParams& p) {
  struct Entry {
    int device;
    RopeParams params;
    std::weak_ptr<void> storage;
    void* data;
    Shape shape;
  };
  static std::mutex mu;
  static std::vector<Entry> entries;
  int device = 0;
  FK_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = entries.begin(); it != entries.end();) {
    std::shared_ptr<void> s = it->storage.lock();
    if (!s) {
      it = entries.erase(it);
      continue;
    }
    if (it->device == device && it->params == p) return Tensor(s, it->data, DType::kF32, it->shape, {it->shape[1], 1});
    ++it;
  }
  Tensor t = compute_cos_sin_cache(p);
  entries.push_back({device, p, t.storage(), t.data_ptr(), t.sizes()});
  return t;
}

namespace detail {
/// (row stride, head stride) of a [T, H*D] view or a [T, H, D] view whose heads may be strided
/// (MLA rotates q_pe = q.view(T, H, nope + rope)[..., nope:], heads nope + rope apart).
inline std::pair<int64_t, int64_t> token_strides(const Tensor& t, int64_t heads, int64_t d, const char* what) {
  FK_CHECK(t.dim() >= 2 && t.stride(-1) == 1, std::string(what) + " " + t.str());
  if (t.dim() == 3) {
    FK_CHECK(t.size(1) == heads && t.size(2) == d && (heads == 1 || t.stride(1) >= d),
             std::string(what) + " has the wrong shape: " + t.str() + " (expected [T, " + std::to_string(heads) + ", " +
                 std::to_string(d) + "])");
    return {t.stride(0), heads == 1 ? d : t.stride(1)};
  }
  FK_CHECK(t.dim() == 2 && t.size(1) == heads * d, std::string(what) + " has the wrong row size: " + t.str());
  return {t.stride(0), d};
}
}  // namespace detail

/// The rows of `cache` that `positions` index (host decision; for references): longrope's short
/// or long table (Note [LongRoPE]), else the whole cache.
template <class Cfg> Tensor rope_cache_for(const Tensor& cache, const Tensor& positions) {
  if constexpr (Cfg::scaling_type != RopeScaling::kLongrope) {
    return cache;
  } else {
    const std::vector<int64_t> pos = to_host<int64_t>(positions);
    const bool long_table = std::any_of(pos.begin(), pos.end(), [](int64_t x) { return x > Cfg::original_max_position; });
    return long_table ? cache.narrow_first(Cfg::original_max_position, cache.size(0) - Cfg::original_max_position) : cache;
  }
}

/// RotaryEmbedding.forward(positions, query, key): rotates query [T, Hq*D] and key [T, Hkv*D]
/// (or [T, H, D] views, heads possibly strided) in place (one launch; longrope: two, Note
/// [LongRoPE], with the device int long_offset) and returns them.
template <class Cfg>
std::tuple<Tensor, Tensor> rotary_embedding_forward(const Tensor& positions, Tensor& query, Tensor& key,
                                                   const Tensor& cos_sin_cache, const Tensor& long_offset = Tensor()) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t D = Cfg::head_size;
  const auto qs = detail::token_strides(query, Cfg::num_heads, D, "RotaryEmbedding query");
  const auto ks = detail::token_strides(key, Cfg::num_kv_heads, D, "RotaryEmbedding key");
  const int64_t tokens = positions.numel();
  FK_CHECK(query.size(0) == tokens && key.size(0) == tokens, "positions " + positions.str() + " vs query " + query.str());
  FK_CHECK(cos_sin_cache.dtype() == DType::kF32 && cos_sin_cache.size(-1) == Cfg::rotary_dim,
           "cos_sin_cache " + cos_sin_cache.str());
  const int* offset = nullptr;
  if constexpr (Cfg::scaling_type == RopeScaling::kLongrope) {
    FK_CHECK(long_offset.defined() && long_offset.dtype() == DType::kI32 && long_offset.numel() == 1,
             "longrope needs the module's long_offset (one int32), got " + long_offset.str());
    if (tokens > 0)
      fk::kernels::longrope_offset(positions.data<int64_t>(), tokens, Cfg::original_max_position,
                                   const_cast<Tensor&>(long_offset).data<int>(), current_stream());
    offset = long_offset.data<int>();
  }
  fk::kernels::rotary_embedding<T, Cfg::head_size, Cfg::rotary_dim, Cfg::is_neox_style, Cfg::num_heads,
                                Cfg::num_kv_heads>(positions.data<int64_t>(), query.data<T>(), qs.first, key.data<T>(),
                                                   ks.first, cos_sin_cache.data<float>(), tokens, current_stream(),
                                                   qs.second, ks.second, offset);
  FK_CHECK_LAUNCH();
  return {query, key};
}

/// One case of a rotary_embedding task. Case dims: num_tokens. query and key are column views
/// of one qkv tensor [T, (Hq + 2 Hkv) * D], as after vLLM's qkv.split (strided rows).
template <class Module, class Cfg> class RotaryEmbeddingInstance final : public TaskInstance {
 public:
  explicit RotaryEmbeddingInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")),
        module_(Cfg::head_size, Cfg::rotary_dim, Cfg::max_position, Cfg::base, Cfg::is_neox_style) {
    const double set_bytes = double(tokens_) * (kWidth * sizeof(T) * 2 + sizeof(int64_t));
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "rotary_embedding inputs");
    for (int s = 0; s < n; ++s) {
      qkv_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      qkv0_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      pos_.push_back(empty({tokens_}, DType::kI64));
      query_.push_back(qkv_.back().narrow_last(0, Cfg::num_heads * Cfg::head_size));
      key_.push_back(qkv_.back().narrow_last(Cfg::num_heads * Cfg::head_size, Cfg::num_kv_heads * Cfg::head_size));
    }
  }
  int num_sets() const override { return static_cast<int>(qkv_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    int64_t max_pos = std::min<int64_t>(Cfg::max_position, module_.cos_sin_cache.size(0));
    // longrope: even sets stay within the original context (short table; original_max itself
    // included, the boundary), odd sets range over every position (long table).
    if constexpr (Cfg::scaling_type == RopeScaling::kLongrope)
      if (s % 2 == 0) max_pos = std::min<int64_t>(max_pos, Cfg::original_max_position + 1);
    fill_normal(qkv0_[s], mix_seed(seed, 0));
    fill_randint(pos_[s], mix_seed(seed, 1), 0, max_pos);
    copy_(qkv_[s], qkv0_[s]);
  }
  void prepare(int s) override { copy_(qkv_[s], qkv0_[s]); }  // in place: restore q and k
  void run(int s) override { module_.forward(pos_[s], query_[s], key_[s]); }
  std::vector<Tensor> inputs(int s) override { return {module_.cos_sin_cache, pos_[s], qkv0_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    namespace ref = fk::kernels::reference;
    // Expected qkv: v (and any non-rotary columns) unchanged, q and k rotated.
    Tensor expected = empty({tokens_, kWidth}, DType::kF32);
    const T* x0 = qkv0_[s].data<T>();
    float* e = expected.data<float>();
    ref::copy_to_f32<T>(e, kWidth, x0, kWidth, tokens_, static_cast<int>(kWidth), current_stream());
    const Tensor cache = rope_cache_for<Cfg>(module_.cos_sin_cache, pos_[s]);  // Note [LongRoPE]
    ref::rotary_embedding_ref<T>(e, kWidth, x0, kWidth, pos_[s].data<int64_t>(), cache.template data<float>(),
                                 tokens_, Cfg::num_heads, Cfg::head_size, Cfg::rotary_dim, Cfg::is_neox_style,
                                 current_stream());
    const int64_t koff = Cfg::num_heads * Cfg::head_size;
    ref::rotary_embedding_ref<T>(e + koff, kWidth, x0 + koff, kWidth, pos_[s].data<int64_t>(),
                                 cache.template data<float>(), tokens_, Cfg::num_kv_heads, Cfg::head_size,
                                 Cfg::rotary_dim, Cfg::is_neox_style, current_stream());
    FK_CHECK_LAUNCH();
    return {{"qkv (query, key rotated in place)", qkv_[s], expected, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    // Read and write the rotary part of every q and k head; read the positions and (at most)
    // one cache row per token.
    const double rot_elems = double(tokens_) * (Cfg::num_heads + Cfg::num_kv_heads) * Cfg::rotary_dim;
    const double rows = std::min<double>(double(tokens_), double(cos_sin_cache_rows(
                                                              rope_params<Cfg>(Cfg::rotary_dim, Cfg::max_position, Cfg::base))));
    const double bytes = rot_elems * sizeof(T) * 2 + tokens_ * sizeof(int64_t) + rows * Cfg::rotary_dim * sizeof(float);
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
