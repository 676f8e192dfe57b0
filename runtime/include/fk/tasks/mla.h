// Harnesses and forward glue for the multi-head latent attention task kinds (DeepSeek-V2/V3,
// vLLM MLACommonImpl and its FlashMLA backend):
//   concat_and_cache_mla  vLLM concat_and_cache_mla: [kv_c_normed | k_pe] rows into the latent
//                         cache (fk/kernels/mla_cache.cuh)
//   mla_prefill           prefill over the kv_b_proj-expanded keys (qk_head_dim = nope + rope)
//                         and values (v_head_dim): flash_attn_varlen_func with v head dim != qk
//                         head dim -> cuDNN fused SDPA (fk/kernels/attention.h)
//   mla_decode            absorbed decode over the latent cache (FlashMLA dense decode): every
//                         query head attends to the shared rows [c_kv | k_pe] (kv_lora_rank +
//                         rope), values are their first kv_lora_rank elements
//                         (fk/kernels/mla_decode.cuh)
//
// Note [MLA latent cache]
// MLA caches one latent row per token, [kv_c_normed (kv_lora_rank) | k_pe (qk_rope_head_dim)]
// (DeepSeek-V3: 512 + 64 bf16 = 1152 bytes, against 2 * 128 * 192 * 2 = 96 KiB for the expanded
// keys and values). Layout as Note [KV cache layout]: [max_seqs, max_len, kv_lora_rank + rope],
// sequence b's token p in row b * max_len + p. Decode absorbs W_UK into the query (q_nope [H,
// 128] x W_UK [H, 128, 512] -> [H, 512]) and W_UV into the output, so attention reads only the
// latent rows; prefill expands them through kv_b_proj and runs ordinary attention with qk 192 /
// v 128 (vLLM MLACommonImpl._forward_prefill).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "fk/kernels/attention.h"
#include "fk/kernels/mla_cache.cuh"
#include "fk/kernels/mla_decode.cuh"
#include "fk/kernels/reference/mla_decode_ref.cuh"
#include "fk/kernels/reference/mla_ref.cuh"
#include "fk/tasks/attention.h"
#include "fk/tasks/forward_context.h"
#include "fk/tasks/harness.h"
#include "fk/tasks/kv_cache.h"

namespace fk::tasks {

/// ConcatAndCacheMLA.forward: kv_cache[slot_mapping[t]] = [kv_c_normed[t] | k_pe[t]] for every
/// slot >= 0. kv_c_normed [T, kv_lora_rank] and k_pe [T, rope] (or [T, 1, rope]) may be strided
/// row views (e.g. of kv_a_proj's output); the cache is contiguous with rows of kv_lora_rank + rope.
template <class Cfg>
void concat_and_cache_mla_forward(const Tensor& kv_c_normed, const Tensor& k_pe, Tensor& kv_cache, const Tensor& slot_mapping) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t KV = Cfg::kv_lora_rank, R = Cfg::qk_rope_head_dim;
  FK_CHECK(kv_c_normed.dim() == 2 && kv_c_normed.size(1) == KV && kv_c_normed.stride(1) == 1 &&
               kv_c_normed.dtype() == dtype_of<T>,
           "ConcatAndCacheMLA kv_c_normed " + kv_c_normed.str() + " (expected [T, " + std::to_string(KV) + "])");
  const int64_t ps = detail::kv_strides(k_pe, 1, R, "ConcatAndCacheMLA k_pe").first;
  FK_CHECK(k_pe.dtype() == dtype_of<T>, "ConcatAndCacheMLA k_pe " + k_pe.str());
  const int64_t tokens = slot_mapping.numel();
  FK_CHECK(slot_mapping.dtype() == DType::kI64 && kv_c_normed.size(0) == tokens && k_pe.size(0) == tokens,
           "ConcatAndCacheMLA slot_mapping " + slot_mapping.str() + " vs kv_c_normed " + kv_c_normed.str());
  FK_CHECK(kv_cache.is_contiguous() && kv_cache.dtype() == dtype_of<T> && kv_cache.size(-1) == KV + R,
           "ConcatAndCacheMLA kv_cache " + kv_cache.str() + " (expected rows of " + std::to_string(KV + R) + ")");
  fk::kernels::concat_and_cache_mla<T, Cfg::kv_lora_rank, Cfg::qk_rope_head_dim>(
      kv_c_normed.data<T>(), kv_c_normed.stride(0), k_pe.data<T>(), ps, kv_cache.data<T>(), slot_mapping.data<int64_t>(),
      tokens, current_stream());
  FK_CHECK_LAUNCH();
}

/// MLA prefill: flash_attn_varlen_func(q [T, H, Dqk], k [T, H, Dqk], v [T, H, Dv], ...,
/// softmax_scale, causal=True) -> out [T, H, Dv] (a new tensor).
template <class Cfg>
Tensor mla_prefill_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                           const Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::num_heads, Dqk = Cfg::qk_head_dim, Dv = Cfg::v_head_dim;
  FK_CHECK(q.dim() == 3 && q.size(1) == H && q.size(2) == Dqk && q.is_contiguous() && q.dtype() == dtype_of<T>,
           "MLAPrefill q " + q.str());
  FK_CHECK(k.dim() == 3 && k.size(1) == H && k.size(2) == Dqk && k.is_contiguous() && k.dtype() == dtype_of<T>,
           "MLAPrefill k " + k.str());
  FK_CHECK(v.dim() == 3 && v.size(0) == k.size(0) && v.size(1) == H && v.size(2) == Dv && v.is_contiguous() &&
               v.dtype() == dtype_of<T>,
           "MLAPrefill v " + v.str());
  FK_CHECK(cu_seqlens_q.dtype() == DType::kI32 && cu_seqlens_k.dtype() == DType::kI32 &&
               cu_seqlens_q.numel() == cu_seqlens_k.numel() && cu_seqlens_q.numel() >= 2,
           "MLAPrefill cu_seqlens " + cu_seqlens_q.str() + ", " + cu_seqlens_k.str());
  Tensor out = empty({q.size(0), H, Dv}, q.dtype());
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
  a.num_heads = a.num_kv_heads = static_cast<int>(H);
  a.head_dim = static_cast<int>(Dqk);
  a.head_dim_v = static_cast<int>(Dv);
  a.softmax_scale = static_cast<float>(Cfg::softmax_scale);
  a.causal = true;
  a.dtype = detail::attn_dtype<T>();
  fk::kernels::varlen_attention_cudnn(a, current_stream());
  return out;
}

/// MLA decode (FlashMLA flash_mla_with_kvcache, dense): q [B, H, KV + R] (absorbed), kv_cache
/// [B', max_len, KV + R] contiguous (B' >= B), cache_seqlens [B] i32 -> out [B, H, KV].
template <class Cfg>
Tensor mla_decode_forward(const Tensor& q, const Tensor& kv_cache, const Tensor& cache_seqlens) {
  using T = typename Cfg::scalar_t;
  constexpr int H = Cfg::num_heads, KV = Cfg::kv_lora_rank, R = Cfg::qk_rope_head_dim;
  FK_CHECK(q.dim() == 3 && q.size(1) == H && q.size(2) == KV + R && q.is_contiguous() && q.dtype() == dtype_of<T>,
           "MLADecode q " + q.str() + " (expected [B, " + std::to_string(H) + ", " + std::to_string(KV + R) + "])");
  const int64_t batch = q.size(0);
  FK_CHECK(kv_cache.dim() == 3 && kv_cache.size(0) >= batch && kv_cache.size(2) == KV + R && kv_cache.is_contiguous() &&
               kv_cache.dtype() == dtype_of<T>,
           "MLADecode kv_cache " + kv_cache.str() + " (expected [>= B, max_len, " + std::to_string(KV + R) + "])");
  FK_CHECK(cache_seqlens.dtype() == DType::kI32 && cache_seqlens.numel() == batch,
           "MLADecode cache_seqlens " + cache_seqlens.str());
  const int64_t max_len = kv_cache.size(1);
  Tensor out = empty({batch, H, KV}, q.dtype());
  const size_t ws_bytes = fk::kernels::mla_decode_workspace_bytes<H, KV, R>(batch, max_len);
  Tensor ws = ws_bytes ? empty({static_cast<int64_t>((ws_bytes + 3) / 4)}, DType::kF32) : Tensor();
  fk::kernels::mla_decode<H, KV, R, T>(out.data<T>(), q.data<T>(), kv_cache.data<T>(), cache_seqlens.data<int32_t>(), batch,
                                      max_len, static_cast<float>(Cfg::softmax_scale), ws.data_ptr(), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// One case of a concat_and_cache_mla task. Case dims: num_tokens. The cache has
/// max(2 * num_tokens, 4096) slots shared by the sets; each set writes its tokens to distinct
/// random slots; prepare() restores the cache and the whole cache is checked. The inputs are
/// strided views, as in the model (kv_c_normed and k_pe slices of one [T, KV + R + 64] buffer).
template <class Module, class Cfg> class ConcatAndCacheMLAInstance final : public TaskInstance {
 public:
  explicit ConcatAndCacheMLAInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")), slots_(std::max<int64_t>(2 * tokens_, 4096)) {
    const double set_bytes = double(tokens_) * (kIn * sizeof(T) + sizeof(int64_t));
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + 3.0 * slots_ * kRow * sizeof(T), "concat_and_cache_mla inputs and cache");
    for (int s = 0; s < n; ++s) buf_.push_back(empty({tokens_, kIn}, dtype_of<T>));
    slot_mapping_.resize(n);
    cache_ = empty({slots_, kRow}, dtype_of<T>);
    cache0_ = empty({slots_, kRow}, dtype_of<T>);
  }
  int num_sets() const override { return static_cast<int>(buf_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(cache0_, mix_seed(seed, 0));
    copy_(cache_, cache0_);
    for (int s = 0; s < num_sets(); ++s) fill_set(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    prepare(s);  // the cache is shared by the sets: back to pristine, then this set's writes
    fill_set(s, seed);
  }
  bool sets_independent() const override { return false; }
  void prepare(int) override { copy_(cache_, cache0_); }
  void run(int s) override { module_.forward(kv_c(s), k_pe(s), cache_, slot_mapping_[s]); }
  std::vector<Tensor> inputs(int s) override { return {buf_[s], slot_mapping_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    namespace ref = fk::kernels::reference;
    Tensor expected = to_f32(cache0_);
    ref::concat_and_cache_mla_ref<T>(expected.data<float>(), buf_[s].data<T>(), kIn, buf_[s].data<T>() + Cfg::kv_lora_rank,
                                     kIn, slot_mapping_[s].data<int64_t>(), tokens_, Cfg::kv_lora_rank,
                                     Cfg::qk_rope_head_dim, current_stream());
    FK_CHECK_LAUNCH();
    return {{"kv_cache", cache_, expected, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override { return {0.0, tokens_ * (2.0 * kRow * sizeof(T) + sizeof(int64_t))}; }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int64_t kRow = Cfg::kv_lora_rank + Cfg::qk_rope_head_dim;
  static constexpr int64_t kIn = kRow + 64;  // row of the input buffer: [kv_c | k_pe | 64 unused]
  void fill_set(int s, uint64_t seed) {
    fill_normal(buf_[s], mix_seed(seed, 0));
    slot_mapping_[s] = random_distinct_slots(tokens_, slots_, mix_seed(seed, 1));
  }
  Tensor kv_c(int s) const { return buf_[s].narrow_last(0, Cfg::kv_lora_rank); }
  Tensor k_pe(int s) const { return buf_[s].narrow_last(Cfg::kv_lora_rank, Cfg::qk_rope_head_dim); }
  int64_t tokens_, slots_;
  Module module_;
  std::vector<Tensor> buf_, slot_mapping_;
  Tensor cache_, cache0_;
};

/// One case of an mla_prefill task. Case dims: batch, seq_len (lengths from prefill_seq_lens).
/// q, k, v ~ N(0, 1); reference: fp32 attention over each token's causal range. The reference
/// costs (query, key) pairs x heads x (Dqk + Dv) fp32 FMAs without tensor cores; past
/// kRefPairHeads pair-heads (b1_s4096 at 128 heads, ~15 s) it checks a sample of the query rows:
/// every s-th token and the last token of every sequence (all heads, all columns; s printed in
/// the output's name).
template <class Module, class Cfg> class MLAPrefillInstance final : public TaskInstance {
 public:
  explicit MLAPrefillInstance(const ShapeCase& c) : module_(Cfg::num_heads, Cfg::qk_head_dim, Cfg::v_head_dim) {
    std::vector<int32_t> cu{0}, begin, len;
    for (int64_t l : case_seq_lens(c, "seq_len")) {
      for (int64_t p = 0; p < l; ++p) {
        begin.push_back(cu.back());
        len.push_back(static_cast<int32_t>(p + 1));
        pairs_ += double(p + 1);
      }
      cu.push_back(static_cast<int32_t>(cu.back() + l));
      max_len_ = std::max(max_len_, l);
    }
    total_ = cu.back();
    stride_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(pairs_ * Cfg::num_heads / kRefPairHeads)));
    std::vector<int32_t> rows, rbegin, rlen;
    for (size_t i = 1; i < cu.size(); ++i)
      for (int32_t t = cu[i - 1]; t < cu[i]; ++t)
        if (t % stride_ == 0 || t == cu[i] - 1) {
          rows.push_back(t);
          rbegin.push_back(begin[t]);
          rlen.push_back(len[t]);
        }
    const double set_bytes = double(total_) * Cfg::num_heads * (2 * Cfg::qk_head_dim + 2 * Cfg::v_head_dim) * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + double(total_) * Cfg::num_heads * Cfg::v_head_dim * 4, "MLA prefill inputs");
    cu_ = to_device(cu, {static_cast<int64_t>(cu.size())});
    ref_rows_ = to_device(rows, {static_cast<int64_t>(rows.size())});
    ref_begin_ = to_device(rbegin, {static_cast<int64_t>(rows.size())});
    ref_len_ = to_device(rlen, {static_cast<int64_t>(rows.size())});
    for (int s = 0; s < n; ++s) {
      q_.push_back(empty({total_, Cfg::num_heads, Cfg::qk_head_dim}, dtype_of<T>));
      k_.push_back(empty({total_, Cfg::num_heads, Cfg::qk_head_dim}, dtype_of<T>));
      v_.push_back(empty({total_, Cfg::num_heads, Cfg::v_head_dim}, dtype_of<T>));
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(q_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal_each({q_[s], k_[s], v_[s]}, seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(q_[s], k_[s], v_[s], cu_, cu_, max_len_, max_len_); }
  std::vector<Tensor> inputs(int s) override { return {q_[s], k_[s], v_[s], cu_}; }
  std::vector<CheckedOutput> reference(int s) override {
    constexpr int64_t H = Cfg::num_heads, Dqk = Cfg::qk_head_dim, Dv = Cfg::v_head_dim;
    const int64_t nrows = ref_rows_.numel();
    Tensor ref = empty({nrows, H * Dv}, DType::kF32);
    fk::kernels::reference::mla_prefill_ref<T>(ref.data<float>(), q_[s].data<T>(), k_[s].data<T>(), v_[s].data<T>(),
                                               ref_begin_.data<int32_t>(), ref_len_.data<int32_t>(), nrows,
                                               static_cast<int>(H), static_cast<int>(Dqk), static_cast<int>(Dv),
                                               static_cast<float>(Cfg::softmax_scale), current_stream(),
                                               ref_rows_.data<int32_t>());
    FK_CHECK_LAUNCH();
    Tensor got = stride_ == 1 ? out_[s].view({total_, H * Dv}) : gather_rows(out_[s].view({total_, H * Dv}), ref_rows_);
    // As flash_attn_prefill: probabilities rounded to the model dtype before P·V, |v| ~ 1.
    return {{stride_ == 1 ? std::string("out") : "out_rows_every_" + std::to_string(stride_), got, ref,
             matmul_tolerance(dtype_of<T>, 1.0)}};
  }
  Cost cost() const override {
    const double flops = 2.0 * pairs_ * Cfg::num_heads * (Cfg::qk_head_dim + Cfg::v_head_dim);
    const double bytes = double(total_) * Cfg::num_heads * (2 * Cfg::qk_head_dim + 2 * Cfg::v_head_dim) * sizeof(T);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr double kRefPairHeads = 1.2e9;
  Module module_;
  int64_t total_ = 0, max_len_ = 0, stride_ = 1;
  double pairs_ = 0;
  Tensor cu_, ref_rows_, ref_begin_, ref_len_;
  std::vector<Tensor> q_, k_, v_, out_;
};

/// One case of an mla_decode task. Case dims: batch, kv_len. Cache [B, kv_len, KV + R]
/// (max_len = kv_len), cache_seqlens from decode_seq_lens. q ~ N(0, 1) and cache ~ N(0, 1), so
/// scores have s.d. sqrt(KV + R) * scale (~3 for DeepSeek-V3's scale): peaked, as in the model.
template <class Module, class Cfg> class MLADecodeInstance final : public TaskInstance {
 public:
  explicit MLADecodeInstance(const ShapeCase& c)
      : batch_(c.get("batch")), max_len_(c.get("kv_len")), module_(Cfg::num_heads, Cfg::kv_lora_rank, Cfg::qk_rope_head_dim) {
    std::vector<int32_t> lens32;
    for (int64_t l : case_seq_lens(c, "kv_len")) {
      lens32.push_back(static_cast<int32_t>(l));
      keys_ += double(l);
    }
    const double cache_bytes = double(batch_) * max_len_ * kRow * sizeof(T);
    const double set_bytes = cache_bytes + double(batch_) * Cfg::num_heads * kRow * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "MLA decode cache");
    FK_CHECK(batch_ * max_len_ < (int64_t(1) << 31), "decode case too large for i32 token indices");
    seqlens_ = to_device(lens32, {batch_});
    for (int s = 0; s < n; ++s) {
      q_.push_back(empty({batch_, Cfg::num_heads, kRow}, dtype_of<T>));
      cache_.push_back(empty({batch_, max_len_, kRow}, dtype_of<T>));
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(q_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(q_[s], mix_seed(seed, 0));
    fill_normal(cache_[s], mix_seed(seed, 1));
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(q_[s], cache_[s], seqlens_); }
  std::vector<Tensor> inputs(int s) override { return {q_[s], cache_[s], seqlens_}; }
  std::vector<CheckedOutput> reference(int s) override {
    constexpr int64_t H = Cfg::num_heads, KV = Cfg::kv_lora_rank;
    Tensor ref = empty({batch_, H, KV}, DType::kF32);
    fk::kernels::reference::mla_decode_ref<T>(ref.data<float>(), q_[s].data<T>(), cache_[s].data<T>(),
                                              seqlens_.data<int32_t>(), batch_, max_len_, static_cast<int>(H),
                                              static_cast<int>(KV), static_cast<int>(Cfg::qk_rope_head_dim),
                                              static_cast<float>(Cfg::softmax_scale), current_stream());
    FK_CHECK_LAUNCH();
    // Outputs are probability-weighted means of N(0, 1) latents with peaked scores: an output
    // element is O(1) at worst; atol for |v| ~ 1, as the prefill tasks.
    return {{"out", out_[s], ref, matmul_tolerance(dtype_of<T>, 1.0)}};
  }
  Cost cost() const override {
    const double flops = 2.0 * keys_ * Cfg::num_heads * (kRow + Cfg::kv_lora_rank);
    const double bytes = (keys_ * kRow + 2.0 * batch_ * Cfg::num_heads * kRow) * sizeof(T) + batch_ * sizeof(int32_t);
    return {flops, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int64_t kRow = Cfg::kv_lora_rank + Cfg::qk_rope_head_dim;
  int64_t batch_, max_len_;
  Module module_;
  double keys_ = 0;
  Tensor seqlens_;
  std::vector<Tensor> q_, cache_, out_;
};

}  // namespace fk::tasks
