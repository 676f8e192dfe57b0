// Harnesses and forward glue for the attention task kinds:
//   flash_attn_prefill  vLLM flash_attn_varlen_func (causal, packed THD, GQA) -> cuDNN fused SDPA
//                       (fk/kernels/attention.h)
//   flash_attn_decode   FlashAttention flash_attn_with_kvcache (one query token per sequence)
//                       -> split-KV flash decoding (fk/kernels/flash_decode.cuh)
// Cfg (generated): num_heads, num_kv_heads, head_dim, softmax_scale, sliding_window, softcap, sinks,
// scalar_t.
//
// Note [Attention sinks]
// gpt-oss gives every query head a learned logit s_h (vLLM FlashAttentionImpl.sinks, passed to
// FlashAttention as s_aux; HF GptOssAttention.sinks): it joins each row's softmax as one more
// score and its probability is dropped, so out = sum_j e^(x_j - m) v_j / (sum_j e^(x_j - m) +
// e^(s_h - m)) over the scaled (capped) scores x_j. The modules hold sinks as f32 [Hq]; cuDNN's
// SDPA has no such term, so prefill with sinks runs fk/kernels/flash_prefill.cuh (bf16).
//
// Note [Sliding window]
// sliding_window = W > 0: a query attends to the last W keys of its sequence, its own included
// (HF transformers' sliding_window: key j is kept for query i when j > i - W; vLLM passes
// window_size (W - 1, 0) to FlashAttention). 0: full causal attention. References express the
// window as each row's key range (window_range), so they share nothing with the kernels' masks.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fk/kernels/attention.h"
#include "fk/kernels/flash_decode.cuh"
#include "fk/kernels/flash_prefill.cuh"
#include "fk/kernels/reference/attention_ref.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

namespace detail {
template <class T> constexpr fk::kernels::AttnDType attn_dtype() {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>, "attention tasks support bf16/f16");
  return std::is_same_v<T, bf16> ? fk::kernels::AttnDType::kBF16 : fk::kernels::AttnDType::kF16;
}
/// Cfg::sinks (false for configs without the constant).
template <class Cfg, class = void> struct SinksOf : std::false_type {};
template <class Cfg> struct SinksOf<Cfg, std::void_t<decltype(Cfg::sinks)>> : std::bool_constant<Cfg::sinks> {};
template <class Cfg> inline constexpr bool kSinks = SinksOf<Cfg>::value;
/// The s_aux pointer: the module's f32 [Hq] sinks when Cfg::sinks (checked), else null.
template <class Cfg> const float* sinks_ptr(const Tensor& sinks) {
  if constexpr (!kSinks<Cfg>) {
    return nullptr;
  } else {
    FK_CHECK(sinks.defined() && sinks.dtype() == DType::kF32 && sinks.numel() == Cfg::num_heads && sinks.is_contiguous(),
             "attention sinks: expected f32 [" + std::to_string(Cfg::num_heads) + "], got " +
                 (sinks.defined() ? sinks.str() : std::string("nothing")));
    return sinks.data<float>();
  }
}
}  // namespace detail

/// Sequence lengths of a prefill case: sequence i of `batch` has seq_len - i * seq_len / (2 * batch)
/// tokens (docs/task-kinds.md, flash_attn_prefill).
inline std::vector<int64_t> prefill_seq_lens(int64_t batch, int64_t seq_len) {
  std::vector<int64_t> l;
  for (int64_t i = 0; i < batch; ++i) l.push_back(seq_len - i * seq_len / (2 * batch));
  return l;
}

/// Cached lengths of a decode case: sequence b attends to kv_len - b * kv_len / (2 * batch)
/// tokens (the same deterministic spread as prefill; batch 1 uses the full kv_len).
inline std::vector<int64_t> decode_seq_lens(int64_t batch, int64_t kv_len) { return prefill_seq_lens(batch, kv_len); }

/// The sequence lengths of a case whose longest sequence has `max_len` tokens (dim `len_key`:
/// seq_len or kv_len): the deterministic spread above, or, for a ragged case (dim `ragged`, a
/// seed: off-registry cases, Note [Off-registry shapes] in runner.cc), lengths drawn uniformly
/// from [1, max_len] with the first sequence at max_len; a uniform case (dim `uniform`: the
/// vision encoders' images, each exactly max_len tokens) has every sequence at max_len.
inline std::vector<int64_t> case_seq_lens(const ShapeCase& c, const std::string& len_key) {
  const int64_t batch = c.get("batch"), max_len = c.get(len_key);
  if (c.has("uniform")) return std::vector<int64_t>(static_cast<size_t>(batch), max_len);
  if (!c.has("ragged")) return prefill_seq_lens(batch, max_len);
  std::vector<int64_t> l{max_len};
  uint64_t h = static_cast<uint64_t>(c.get("ragged"));
  for (int64_t i = 1; i < batch; ++i) l.push_back(1 + static_cast<int64_t>((h = mix_seed(h, i)) % uint64_t(max_len)));
  return l;
}

/// The keys a query at position `pos` (0-based in its sequence) attends to: [first, pos], with
/// first = pos - W + 1 clipped at 0 under a window of W (0: none). Returns (first, count).
inline std::pair<int64_t, int64_t> window_range(int64_t pos, int64_t window) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  return {first, pos - first + 1};
}

/// Cfg::causal (false: bidirectional, the encoders' flash_attn_varlen_func(causal=False)); true
/// where the Cfg has no such member.
template <class Cfg, class = void> struct CausalOf : std::true_type {};
template <class Cfg> struct CausalOf<Cfg, std::void_t<decltype(Cfg::causal)>> : std::bool_constant<Cfg::causal> {};

/// Cfg::logit_bias (an additive bias on the scores, Note [Attention logit bias] in fk/kernels/attention.h);
/// false where the Cfg has no such member.
template <class Cfg, class = void> struct LogitBiasOf : std::false_type {};
template <class Cfg> struct LogitBiasOf<Cfg, std::void_t<decltype(Cfg::logit_bias)>> : std::bool_constant<Cfg::logit_bias> {};

/// flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
/// softmax_scale, causal=Cfg::causal): out [T, Hq, D] (a new tensor). With Cfg::logit_bias,
/// attn_bias [Hq, >= max_seqlen_q, >= max_seqlen_k] (the model dtype, contiguous; or one per sequence,
/// [batch, Hq, ., .]) is added to the sequences' scaled scores, as torch SDPA's float attn_mask (Note
/// [Attention logit bias]).
template <class Cfg>
Tensor flash_attn_prefill_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                  const Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                  const Tensor& sinks = Tensor(), const Tensor& attn_bias = Tensor()) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  if constexpr (LogitBiasOf<Cfg>::value) {
    static_assert(Cfg::sliding_window == 0 && Cfg::softcap == 0.0 && !detail::kSinks<Cfg>,
                  "FlashAttnPrefill with a logit bias: no window, soft-capping or sinks (cuDNN's SDPA takes the bias alone)");
    const int64_t nd = attn_bias.defined() ? attn_bias.dim() : 0, batch = cu_seqlens_q.numel() - 1;
    FK_CHECK((nd == 3 || (nd == 4 && attn_bias.size(0) == batch)) && attn_bias.size(nd - 3) == Hq &&
                 attn_bias.size(nd - 2) >= max_seqlen_q && attn_bias.size(nd - 1) >= max_seqlen_k && attn_bias.is_contiguous() &&
                 attn_bias.dtype() == dtype_of<T>,
             "FlashAttnPrefill attn_bias " + (attn_bias.defined() ? attn_bias.str() : std::string("(none)")) + ": expected contiguous [" +
                 std::to_string(Hq) + ", >= " + std::to_string(max_seqlen_q) + ", >= " + std::to_string(max_seqlen_k) + "] " +
                 dtype_name(dtype_of<T>) + ", or one per sequence [" + std::to_string(batch) + ", ...] (Note [Attention logit bias])");
  } else {
    FK_CHECK(!attn_bias.defined(), "FlashAttnPrefill: this task takes no logit bias (Config::logit_bias is false), got " + attn_bias.str());
  }
  FK_CHECK(q.dim() == 3 && q.size(1) == Hq && q.size(2) == D && q.is_contiguous() && q.dtype() == dtype_of<T>,
           "FlashAttnPrefill q " + q.str());
  FK_CHECK(k.dim() == 3 && k.size(1) == Hkv && k.size(2) == D && k.is_contiguous() && k.dtype() == dtype_of<T> &&
               v.sizes() == k.sizes() && v.is_contiguous() && v.dtype() == dtype_of<T>,
           "FlashAttnPrefill k/v " + k.str() + ", " + v.str());
  FK_CHECK(cu_seqlens_q.dtype() == DType::kI32 && cu_seqlens_k.dtype() == DType::kI32 &&
               cu_seqlens_q.numel() == cu_seqlens_k.numel() && cu_seqlens_q.numel() >= 2,
           "FlashAttnPrefill cu_seqlens " + cu_seqlens_q.str() + ", " + cu_seqlens_k.str());
  const float* s_aux = detail::sinks_ptr<Cfg>(sinks);
  Tensor out = empty(q.sizes(), q.dtype());
  fk::kernels::VarlenAttentionArgs a;
  a.out = out.data_ptr();
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.cu_seqlens_q = cu_seqlens_q.data<int32_t>();
  a.cu_seqlens_k = cu_seqlens_k.data<int32_t>();
  a.batch = cu_seqlens_q.numel() - 1;
  a.max_seqlen_q = max_seqlen_q;
  a.max_seqlen_k = max_seqlen_k;
  a.total_q = q.size(0);
  a.total_k = k.size(0);
  a.num_heads = static_cast<int>(Hq);
  a.num_kv_heads = static_cast<int>(Hkv);
  a.head_dim = static_cast<int>(D);
  a.softmax_scale = static_cast<float>(Cfg::softmax_scale);
  a.causal = CausalOf<Cfg>::value;
  static_assert(CausalOf<Cfg>::value || (Cfg::sliding_window == 0 && Cfg::softcap == 0.0 && !detail::kSinks<Cfg>),
                "bidirectional prefill: no window, soft-capping or sinks");
  a.window = static_cast<int>(Cfg::sliding_window);
  a.dtype = detail::attn_dtype<T>();
  if (attn_bias.defined()) {
    a.bias = attn_bias.data_ptr();
    a.bias_per_seq = attn_bias.dim() == 4;
    a.bias_rows = attn_bias.size(attn_bias.dim() - 2);
    a.bias_cols = attn_bias.size(attn_bias.dim() - 1);
  }
  // Soft-capping and sinks: our own kernel, since cuDNN's SDPA refuses a score modifier together
  // with causal/padding masks (Note [Prefill soft-capping] in fk/kernels/flash_prefill.cuh) and
  // has no sink term (Note [Attention sinks]).
  if constexpr (Cfg::softcap > 0.0 || detail::kSinks<Cfg>) {
    static_assert(std::is_same_v<T, bf16>, "FlashAttnPrefill with soft-capping or sinks: bf16 only (flash_prefill.cuh)");
    FK_CHECK(cu_seqlens_q.data_ptr() == cu_seqlens_k.data_ptr() && max_seqlen_q == max_seqlen_k && q.size(0) == k.size(0),
             "FlashAttnPrefill with soft-capping or sinks: self-attention prefill only (q and k share cu_seqlens)");
    fk::kernels::flash_prefill<static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D)>(
        a.out, a.q, a.k, a.v, a.cu_seqlens_q, a.batch, max_seqlen_q, a.total_q, a.softmax_scale, a.window,
        static_cast<float>(Cfg::softcap), current_stream(), s_aux);
    return out;
  }
  fk::kernels::varlen_attention_cudnn(a, current_stream());
  return out;
}

/// flash_attn_with_kvcache(q [B, 1, Hq, D], k_cache, v_cache, cache_seqlens, softmax_scale):
/// here q [B, Hq, D], caches [B, max_len, Hkv, D] contiguous, cache_seqlens [B] i32; out [B, Hq, D].
template <class Cfg>
Tensor flash_attn_decode_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cache_seqlens,
                                 const Tensor& sinks = Tensor()) {
  using T = typename Cfg::scalar_t;
  constexpr int Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  FK_CHECK(q.dim() == 3 && q.size(1) == Hq && q.size(2) == D && q.is_contiguous() && q.dtype() == dtype_of<T>,
           "FlashAttnDecode q " + q.str());
  const int64_t batch = q.size(0);
  FK_CHECK(k_cache.dim() == 4 && k_cache.size(0) == batch && k_cache.size(2) == Hkv && k_cache.size(3) == D &&
               k_cache.is_contiguous() && k_cache.dtype() == dtype_of<T> && v_cache.sizes() == k_cache.sizes() &&
               v_cache.is_contiguous() && v_cache.dtype() == dtype_of<T>,
           "FlashAttnDecode caches " + k_cache.str() + ", " + v_cache.str());
  FK_CHECK(cache_seqlens.dtype() == DType::kI32 && cache_seqlens.numel() == batch,
           "FlashAttnDecode cache_seqlens " + cache_seqlens.str());
  const int64_t max_len = k_cache.size(1);
  const float* s_aux = detail::sinks_ptr<Cfg>(sinks);
  Tensor out = empty(q.sizes(), q.dtype());
  constexpr int kWindow = static_cast<int>(Cfg::sliding_window);
  const size_t ws_bytes = fk::kernels::flash_decode_workspace_bytes<Hq, Hkv, D>(batch, max_len, 0, kWindow);
  Tensor ws = ws_bytes ? empty({static_cast<int64_t>(ws_bytes / sizeof(float))}, DType::kF32) : Tensor();
  fk::kernels::flash_decode<Hq, Hkv, D, T>(out.data<T>(), q.data<T>(), k_cache.data<T>(), v_cache.data<T>(),
                                           cache_seqlens.data<int32_t>(), batch, max_len,
                                           static_cast<float>(Cfg::softmax_scale), ws.data_ptr(), current_stream(), 0,
                                           kWindow, static_cast<float>(Cfg::softcap), s_aux);
  FK_CHECK_LAUNCH();
  return out;
}

/// One case of a flash_attn_prefill task. Case dims: batch, seq_len (lengths from
/// prefill_seq_lens). q, k, v ~ N(0, 1) (scores ~ N(0, 1) at scale D^-0.5); the sets rotate
/// q/k/v, cu_seqlens is shared. Reference: fp32 attention over each token's causal range (its
/// whole sequence when Cfg::causal is false).
template <class Module, class Cfg> class FlashAttnPrefillInstance final : public TaskInstance {
 public:
  explicit FlashAttnPrefillInstance(const ShapeCase& c) : module_(Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim) {
    lens_ = case_seq_lens(c, "seq_len");
    std::vector<int32_t> cu{0}, begin, len;
    for (int64_t l : lens_) {
      for (int64_t p = 0; p < l; ++p) {
        const auto [first, count] =
            CausalOf<Cfg>::value ? window_range(p, Cfg::sliding_window) : std::pair<int64_t, int64_t>{0, l};
        begin.push_back(static_cast<int32_t>(cu.back() + first));
        len.push_back(static_cast<int32_t>(count));
        pairs_ += double(count);
      }
      cu.push_back(static_cast<int32_t>(cu.back() + l));
      max_len_ = std::max(max_len_, l);
    }
    total_ = cu.back();
    if constexpr (LogitBiasOf<Cfg>::value) {  // each row's bias offset: its query position, its range's first key
      std::vector<int32_t> off;
      for (int64_t l : lens_)
        for (int64_t p = 0; p < l; ++p) off.push_back(static_cast<int32_t>(p * max_len_));
      bias_off_ = to_device(off, {total_});
      bias_ = empty({Cfg::num_heads, max_len_, max_len_}, dtype_of<T>);
    }
    const double set_bytes = double(total_) * (2 * Cfg::num_heads + 2 * Cfg::num_kv_heads) * Cfg::head_dim * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + double(total_) * Cfg::num_heads * Cfg::head_dim * 4, "attention inputs");
    cu_ = to_device(cu, {static_cast<int64_t>(cu.size())});
    ref_begin_ = to_device(begin, {total_});
    ref_len_ = to_device(len, {total_});
    for (int s = 0; s < n; ++s) {
      q_.push_back(empty({total_, Cfg::num_heads, Cfg::head_dim}, dtype_of<T>));
      k_.push_back(empty({total_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
      v_.push_back(empty({total_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(q_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
    // Sinks around the scores' scale and above it (N(2, 2)), so they matter (Note [Attention sinks]).
    if (module_.sinks.defined()) fill_normal(module_.sinks, mix_seed(seed, 991), 2.f, 2.f);
    // A logit bias of twice the scores' spread (N(0, 2)), so that it reorders the keys (T5's learned biases span several units).
    if (bias_.defined()) fill_normal(bias_, mix_seed(seed, 992), 0.f, 2.f);
  }
  void refresh(int s, uint64_t seed) override { fill_normal_each({q_[s], k_[s], v_[s]}, seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override {
    if constexpr (LogitBiasOf<Cfg>::value) out_[s] = module_.forward(q_[s], k_[s], v_[s], cu_, cu_, max_len_, max_len_, bias_);
    else out_[s] = module_.forward(q_[s], k_[s], v_[s], cu_, cu_, max_len_, max_len_);
  }
  std::vector<Tensor> inputs(int s) override {
    std::vector<Tensor> in{q_[s], k_[s], v_[s], cu_};
    if (module_.sinks.defined()) in.push_back(module_.sinks);
    if (bias_.defined()) in.push_back(bias_);
    return in;
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({total_, Cfg::num_heads, Cfg::head_dim}, DType::kF32);
    const Tensor bias_f32 = bias_.defined() ? to_f32(bias_) : Tensor();
    fk::kernels::reference::attention_ref<T>(ref.data<float>(), q_[s].data<T>(), Cfg::num_heads * Cfg::head_dim,
                                             k_[s].data<T>(), v_[s].data<T>(), Cfg::num_kv_heads * Cfg::head_dim,
                                             ref_begin_.data<int32_t>(), ref_len_.data<int32_t>(), total_,
                                             Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim,
                                             static_cast<float>(Cfg::softmax_scale), current_stream(),
                                             static_cast<float>(Cfg::softcap), detail::sinks_ptr<Cfg>(module_.sinks),
                                             bias_f32.defined() ? bias_f32.data<float>() : nullptr,
                                             bias_.defined() ? bias_off_.data<int32_t>() : nullptr, max_len_ * max_len_);
    FK_CHECK_LAUNCH();
    // Outputs are softmax-weighted means of N(0, 1) values. Flash attention rounds the
    // probabilities to the model dtype before P·V, so an output's error scales with the
    // magnitude of its terms (|v| ~ 1), not with the output itself (which cancels towards 0):
    // atol is set for |v| ~ 1; rel_l2 (1e-2; measured ~2e-3 for cuDNN) guards the whole output.
    return {{"out", out_[s], ref, matmul_tolerance(dtype_of<T>, 1.0)}};
  }
  Cost cost() const override {
    const double flops = 4.0 * pairs_ * Cfg::head_dim * Cfg::num_heads;  // (query, key) pairs inside the mask
    const double bytes = double(total_) * (2 * Cfg::num_heads + 2 * Cfg::num_kv_heads) * Cfg::head_dim * sizeof(T);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  Module module_;
  std::vector<int64_t> lens_;
  int64_t total_ = 0, max_len_ = 0;
  double pairs_ = 0;
  Tensor cu_, ref_begin_, ref_len_;
  Tensor bias_, bias_off_;  ///< Cfg::logit_bias: [Hq, max_len, max_len] and each row's offset into a head's plane
  std::vector<Tensor> q_, k_, v_, out_;
};

/// One case of a flash_attn_decode task. Case dims: batch, kv_len. Caches [B, kv_len, Hkv, D]
/// (max_len = kv_len), cache_seqlens from decode_seq_lens. Caches are large: they rotate only
/// while small (the runner flushes the L2 before every timed call anyway).
template <class Module, class Cfg> class FlashAttnDecodeInstance final : public TaskInstance {
 public:
  explicit FlashAttnDecodeInstance(const ShapeCase& c)
      : batch_(c.get("batch")), max_len_(c.get("kv_len")), module_(Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim) {
    lens_ = case_seq_lens(c, "kv_len");
    std::vector<int32_t> lens32, begin, ref_len;
    for (int64_t b = 0; b < batch_; ++b) {
      lens32.push_back(static_cast<int32_t>(lens_[b]));
      const auto [first, count] = window_range(lens_[b] - 1, Cfg::sliding_window);  // the new token is the last
      begin.push_back(static_cast<int32_t>(b * max_len_ + first));
      ref_len.push_back(static_cast<int32_t>(count));
      keys_ += double(count);
    }
    const double cache_bytes = 2.0 * batch_ * max_len_ * Cfg::num_kv_heads * Cfg::head_dim * sizeof(T);
    const double set_bytes = cache_bytes + 2.0 * batch_ * Cfg::num_heads * Cfg::head_dim * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "decode caches");
    FK_CHECK(batch_ * max_len_ < (int64_t(1) << 31), "decode case too large for i32 token indices");
    seqlens_ = to_device(lens32, {batch_});
    ref_begin_ = to_device(begin, {batch_});
    ref_len_ = to_device(ref_len, {batch_});
    for (int s = 0; s < n; ++s) {
      q_.push_back(empty({batch_, Cfg::num_heads, Cfg::head_dim}, dtype_of<T>));
      k_.push_back(empty({batch_, max_len_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
      v_.push_back(empty({batch_, max_len_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(q_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
    // Sinks around the scores' scale and above it (N(2, 2)), so they matter (Note [Attention sinks]).
    if (module_.sinks.defined()) fill_normal(module_.sinks, mix_seed(seed, 991), 2.f, 2.f);
  }
  void refresh(int s, uint64_t seed) override { fill_normal_each({q_[s], k_[s], v_[s]}, seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(q_[s], k_[s], v_[s], seqlens_); }
  std::vector<Tensor> inputs(int s) override {
    std::vector<Tensor> in{q_[s], k_[s], v_[s], seqlens_};
    if (module_.sinks.defined()) in.push_back(module_.sinks);
    return in;
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({batch_, Cfg::num_heads, Cfg::head_dim}, DType::kF32);
    fk::kernels::reference::attention_ref<T>(ref.data<float>(), q_[s].data<T>(), Cfg::num_heads * Cfg::head_dim,
                                             k_[s].data<T>(), v_[s].data<T>(), Cfg::num_kv_heads * Cfg::head_dim,
                                             ref_begin_.data<int32_t>(), ref_len_.data<int32_t>(), batch_,
                                             Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim,
                                             static_cast<float>(Cfg::softmax_scale), current_stream(),
                                             static_cast<float>(Cfg::softcap), detail::sinks_ptr<Cfg>(module_.sinks));
    FK_CHECK_LAUNCH();
    // ~sqrt(e / n) for n >= min(kv_len / 2, window) keys (mean |N(0, s^2)| = 0.8 s).
    double min_keys = double(max_len_) / 2;
    if (Cfg::sliding_window > 0) min_keys = std::min<double>(min_keys, double(Cfg::sliding_window));
    const double typical = 0.8 * std::sqrt(2.72 / std::max<double>(1.0, min_keys));
    return {{"out", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
  }
  Cost cost() const override {
    const double toks = keys_;  // keys read (inside the window)
    const double flops = 4.0 * toks * Cfg::head_dim * Cfg::num_heads;
    const double bytes = (2.0 * toks * Cfg::num_kv_heads + 2.0 * batch_ * Cfg::num_heads) * Cfg::head_dim * sizeof(T) +
                         batch_ * sizeof(int32_t);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t batch_, max_len_;
  Module module_;
  std::vector<int64_t> lens_;
  double keys_ = 0;
  Tensor seqlens_, ref_begin_, ref_len_;
  std::vector<Tensor> q_, k_, v_, out_;
};

}  // namespace fk::tasks
