// Harness and forward glue for the cross_attention task kind: the encoder-decoder attention of
// vLLM's CrossAttention (attn_type ENCODER_DECODER): queries from the decoder's tokens, keys and
// values from the encoder's output, non-causal.
//
// Note [Cross-attention cache]
// The encoder's keys and values are computed once per request and cached: the module's first
// call passes them (k, v packed [Tk, Hkv, D], cu_seqlens_k) and they are written into the
// module's cache, padded [B, max_seqlen_k, Hkv, D] with key counts [B]
// (fk/kernels/cross_attention.cuh); every later call passes none (k, v undefined, as vLLM passes
// key = value = None at decode) and attends to the cache. The cache is (re)allocated only when
// the batch or max_seqlen_k of a write differs from the cache's. Attention over the cache:
//   - one query per sequence (decode: max_seqlen_q == 1 and Tq == B): split-KV flash decoding
//     (fk/kernels/flash_decode.cuh) with the key counts as cache_seqlens;
//   - otherwise cuDNN's fused SDPA with the padded keys (seqused_k, Note [Padded keys: seqused_k]
//     in fk/kernels/attention.h); its dense graph when every query and key count is the maximum.
// Cfg (generated): num_heads, num_kv_heads, head_dim, softmax_scale, scalar_t.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fk/kernels/attention.h"
#include "fk/kernels/cross_attention.cuh"
#include "fk/kernels/flash_decode.cuh"
#include "fk/kernels/reference/attention_ref.cuh"
#include "fk/tasks/attention.h"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// The cross-attention KV cache of one module (Note [Cross-attention cache]).
struct CrossKVCache {
  Tensor k, v;      ///< [batch, max_len, Hkv, D]
  Tensor seqlens;   ///< [batch] i32 key counts
  int64_t batch = 0, max_len = 0;
  bool full = false;  ///< every sequence has max_len keys (known on the host from the write)
  bool written() const { return batch > 0; }
};

/// Writes packed k/v [Tk, Hkv, D] (cu_seqlens_k [B+1], max_seqlen_k the true maximum) into `cache`.
template <class Cfg>
void cross_cache_write(CrossKVCache& cache, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_k,
                       int64_t max_seqlen_k) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  // Rows of Hkv * D dense elements, any 16-byte multiple apart (the k and v blocks of a fused kv
  // projection's output are such views).
  auto rows_ok = [](const Tensor& t) {
    return t.dim() == 3 && t.size(1) == Hkv && t.size(2) == D && t.dtype() == dtype_of<T> && t.stride(2) == 1 &&
           t.stride(1) == D && t.stride(0) >= Hkv * D && (t.stride(0) * int64_t(sizeof(T))) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  };
  FK_CHECK(rows_ok(k) && rows_ok(v) && v.size(0) == k.size(0),
           "CrossAttention k/v: expected [Tk, " + std::to_string(Hkv) + ", " + std::to_string(D) + "] " +
               std::string(dtype_name(dtype_of<T>)) + " with dense rows 16-byte aligned, got " + k.str() + ", " + v.str());
  FK_CHECK(cu_seqlens_k.dtype() == DType::kI32 && cu_seqlens_k.dim() == 1 && cu_seqlens_k.numel() >= 2,
           "CrossAttention cu_seqlens_k: expected i32 [B+1], got " + cu_seqlens_k.str());
  const int64_t batch = cu_seqlens_k.numel() - 1;
  FK_CHECK(max_seqlen_k >= 1 && max_seqlen_k * batch >= k.size(0) && k.size(0) >= 1,
           "CrossAttention: max_seqlen_k " + std::to_string(max_seqlen_k) + " cannot hold " + std::to_string(k.size(0)) +
               " keys in " + std::to_string(batch) + " sequences");
  FK_CHECK(batch * max_seqlen_k < (int64_t(1) << 31) / (Hkv * D), "CrossAttention cache too large for i32 offsets");
  if (cache.batch != batch || cache.max_len != max_seqlen_k) {
    cache.k = empty({batch, max_seqlen_k, Hkv, D}, dtype_of<T>);
    cache.v = empty({batch, max_seqlen_k, Hkv, D}, dtype_of<T>);
    cache.seqlens = empty({batch}, DType::kI32);
    cache.batch = batch;
    cache.max_len = max_seqlen_k;
  }
  cache.full = k.size(0) == batch * max_seqlen_k;
  fk::kernels::cross_cache_write<static_cast<int>(Hkv), static_cast<int>(D), T>(
      cache.k.data<T>(), cache.v.data<T>(), cache.seqlens.data<int32_t>(), k.data<T>(), k.stride(0), v.data<T>(), v.stride(0),
      cu_seqlens_k.data<int32_t>(), static_cast<int>(batch), max_seqlen_k, k.size(0), current_stream());
  FK_CHECK_LAUNCH();
}

/// Attention of q [Tq, Hq, D] (cu_seqlens_q [B+1], max_seqlen_q the true maximum) over `cache`:
/// out [Tq, Hq, D] (a new tensor).
template <class Cfg>
Tensor cross_attention_over_cache(const CrossKVCache& cache, const Tensor& q, const Tensor& cu_seqlens_q,
                                  int64_t max_seqlen_q) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t Hq = Cfg::num_heads, Hkv = Cfg::num_kv_heads, D = Cfg::head_dim;
  FK_CHECK(cache.written(), "CrossAttention: no keys/values cached yet; the first call must pass the encoder's k and v");
  FK_CHECK(q.dim() == 3 && q.size(1) == Hq && q.size(2) == D && q.is_contiguous() && q.dtype() == dtype_of<T>,
           "CrossAttention q: expected contiguous [Tq, " + std::to_string(Hq) + ", " + std::to_string(D) + "], got " + q.str());
  FK_CHECK(cu_seqlens_q.dtype() == DType::kI32 && cu_seqlens_q.numel() == cache.batch + 1,
           "CrossAttention cu_seqlens_q: expected i32 [" + std::to_string(cache.batch + 1) +
               "] (one entry per cached sequence + 1), got " + cu_seqlens_q.str());
  FK_CHECK(max_seqlen_q >= 1 && max_seqlen_q * cache.batch >= q.size(0),
           "CrossAttention: max_seqlen_q " + std::to_string(max_seqlen_q) + " cannot hold " + std::to_string(q.size(0)) + " queries");
  Tensor out = empty(q.sizes(), q.dtype());
  if (max_seqlen_q == 1 && q.size(0) == cache.batch) {  // one query per sequence: flash decoding
    const size_t ws_bytes =
        fk::kernels::flash_decode_workspace_bytes<int(Hq), int(Hkv), int(D)>(cache.batch, cache.max_len, 0, 0);
    Tensor ws = ws_bytes ? empty({static_cast<int64_t>(ws_bytes / sizeof(float))}, DType::kF32) : Tensor();
    fk::kernels::flash_decode<int(Hq), int(Hkv), int(D), T>(out.data<T>(), q.data<T>(), cache.k.data<T>(),
                                                            cache.v.data<T>(), cache.seqlens.data<int32_t>(), cache.batch,
                                                            cache.max_len, static_cast<float>(Cfg::softmax_scale),
                                                            ws.data_ptr(), current_stream(), 0, 0, 0.f, nullptr);
    FK_CHECK_LAUNCH();
    return out;
  }
  fk::kernels::VarlenAttentionArgs a;
  a.out = out.data_ptr();
  a.q = q.data_ptr();
  a.k = cache.k.data_ptr();
  a.v = cache.v.data_ptr();
  a.cu_seqlens_q = cu_seqlens_q.data<int32_t>();
  a.seqused_k = cache.seqlens.data<int32_t>();
  a.seqused_k_full = cache.full;
  a.batch = cache.batch;
  a.max_seqlen_q = max_seqlen_q;
  a.max_seqlen_k = cache.max_len;
  a.total_q = q.size(0);
  a.total_k = cache.batch * cache.max_len;
  a.num_heads = static_cast<int>(Hq);
  a.num_kv_heads = static_cast<int>(Hkv);
  a.head_dim = static_cast<int>(D);
  a.softmax_scale = static_cast<float>(Cfg::softmax_scale);
  a.causal = false;
  a.dtype = detail::attn_dtype<T>();
  fk::kernels::varlen_attention_cudnn(a, current_stream());
  return out;
}

/// The query and key counts of a cross_attention case (dims batch, q_len, kv_len; `uniform`: every
/// sequence at the maximum; `ragged` (a seed): drawn lengths, the first sequence at the maximum).
struct CrossCaseLens {
  std::vector<int64_t> q, k;
};
inline CrossCaseLens cross_case_lens(const ShapeCase& c) {
  CrossCaseLens l;
  l.k = case_seq_lens(c, "kv_len");
  if (c.get("q_len") == 1) {
    l.q.assign(l.k.size(), 1);
  } else {
    l.q = case_seq_lens(c, "q_len");
    if (c.has("ragged")) std::reverse(l.q.begin() + 1, l.q.end());  // decorrelate from the key counts
  }
  return l;
}

/// One case of a cross_attention task. Case dims: batch, q_len, kv_len, write (1: every call
/// passes k/v and writes the cache, the decoder's first step; 0: the cache is written once in
/// randomize and every call attends to it, the decode steps), uniform / ragged. q, k, v ~ N(0, 1).
/// Reference: fp32 attention of each query over its sequence's keys, read from the packed k/v
/// (not the cache); write cases also check the cache rows against k/v (exact).
template <class Module, class Cfg> class CrossAttentionInstance final : public TaskInstance {
 public:
  explicit CrossAttentionInstance(const ShapeCase& c)
      : write_(c.get("write") != 0), module_(Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim) {
    const CrossCaseLens l = cross_case_lens(c);
    std::vector<int32_t> cu_q{0}, cu_k{0}, begin, len;
    for (size_t b = 0; b < l.k.size(); ++b) {
      for (int64_t p = 0; p < l.q[b]; ++p) {
        begin.push_back(cu_k.back());
        len.push_back(static_cast<int32_t>(l.k[b]));
        pairs_ += double(l.k[b]);
      }
      cu_q.push_back(static_cast<int32_t>(cu_q.back() + l.q[b]));
      cu_k.push_back(static_cast<int32_t>(cu_k.back() + l.k[b]));
      max_q_ = std::max(max_q_, l.q[b]);
      max_k_ = std::max(max_k_, l.k[b]);
      min_k_ = min_k_ == 0 ? l.k[b] : std::min(min_k_, l.k[b]);
    }
    lens_k_ = l.k;
    tq_ = cu_q.back();
    tk_ = cu_k.back();
    const double q_bytes = double(tq_) * Cfg::num_heads * Cfg::head_dim * sizeof(T) * 2;  // q and out
    const double kv_bytes = 2.0 * tk_ * Cfg::num_kv_heads * Cfg::head_dim * sizeof(T);
    // Write cases rotate q, k and v; cached cases rotate q over one cache.
    const int n = rotating_sets(write_ ? q_bytes + kv_bytes : q_bytes);
    const double cache_bytes = 2.0 * double(l.k.size()) * max_k_ * Cfg::num_kv_heads * Cfg::head_dim * sizeof(T);
    require_device_memory((write_ ? (q_bytes + kv_bytes) * n : q_bytes * n + kv_bytes) + cache_bytes +
                              double(tq_) * Cfg::num_heads * Cfg::head_dim * 4,
                          "cross-attention inputs and cache");
    cu_q_ = to_device(cu_q, {static_cast<int64_t>(cu_q.size())});
    cu_k_ = to_device(cu_k, {static_cast<int64_t>(cu_k.size())});
    ref_begin_ = to_device(begin, {tq_});
    ref_len_ = to_device(len, {tq_});
    for (int s = 0; s < n; ++s) {
      q_.push_back(empty({tq_, Cfg::num_heads, Cfg::head_dim}, dtype_of<T>));
      if (write_ || s == 0) {
        k_.push_back(empty({tk_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
        v_.push_back(empty({tk_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>));
      }
    }
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(q_.size()); }
  bool sets_independent() const override { return !write_; }  // a write replaces the one cache
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
    if (!write_) {  // the encoder's keys and values, cached once (the call's output is not used)
      fill_normal_each({k_[0], v_[0]}, mix_seed(seed, 777));
      (void)module_.forward(q_[0], k_[0], v_[0], cu_q_, cu_k_, max_q_, max_k_);
    }
  }
  void refresh(int s, uint64_t seed) override {
    if (write_) fill_normal_each({q_[s], k_[s], v_[s]}, seed);
    else fill_normal(q_[s], seed);
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override {
    out_[s] = write_ ? module_.forward(q_[s], k_[s], v_[s], cu_q_, cu_k_, max_q_, max_k_)
                     : module_.forward(q_[s], Tensor(), Tensor(), cu_q_, cu_k_, max_q_, max_k_);
  }
  std::vector<Tensor> inputs(int s) override {
    if (write_) return {q_[s], k_[s], v_[s], cu_q_, cu_k_};
    return {q_[s], cu_q_, cu_k_, module_.cache.k, module_.cache.v, module_.cache.seqlens};
  }
  std::vector<CheckedOutput> reference(int s) override {
    const Tensor& k = kv(k_, s);
    const Tensor& v = kv(v_, s);
    Tensor ref = empty({tq_, Cfg::num_heads, Cfg::head_dim}, DType::kF32);
    fk::kernels::reference::attention_ref<T>(ref.data<float>(), q_[s].data<T>(), Cfg::num_heads * Cfg::head_dim, k.data<T>(),
                                             v.data<T>(), Cfg::num_kv_heads * Cfg::head_dim, ref_begin_.data<int32_t>(),
                                             ref_len_.data<int32_t>(), tq_, Cfg::num_heads, Cfg::num_kv_heads,
                                             Cfg::head_dim, static_cast<float>(Cfg::softmax_scale), current_stream(), 0.f,
                                             nullptr);
    FK_CHECK_LAUNCH();
    // ~sqrt(e / n) for n >= the fewest keys of a sequence (as flash_attn_decode's check).
    const double typical = 0.8 * std::sqrt(2.72 / std::max<double>(1.0, double(min_k_)));
    std::vector<CheckedOutput> out{{"out", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
    if (write_) {  // the cache rows the call wrote, gathered by the host's lengths
      out.push_back({"k_cache", gather_cache(module_.cache.k), to_f32(k), Tolerance{}});
      out.push_back({"v_cache", gather_cache(module_.cache.v), to_f32(v), Tolerance{}});
    }
    return out;
  }
  Cost cost() const override {
    const double flops = 4.0 * pairs_ * Cfg::head_dim * Cfg::num_heads;
    const double qo = 2.0 * tq_ * Cfg::num_heads * Cfg::head_dim * sizeof(T);
    const double kv = 2.0 * tk_ * Cfg::num_kv_heads * Cfg::head_dim * sizeof(T);
    // Write: the packed k/v read and the cache written; cached: the cache read.
    return {flops, qo + (write_ ? 2 * kv : kv)};
  }

 private:
  using T = typename Cfg::scalar_t;
  static const Tensor& kv(const std::vector<Tensor>& t, int s) { return t[t.size() == 1 ? 0 : s]; }
  /// The valid rows of a padded cache, packed like k/v (one copy per sequence).
  Tensor gather_cache(const Tensor& cache) const {
    FK_CHECK(cache.defined() && cache.dim() == 4 && cache.size(0) == int64_t(lens_k_.size()) && cache.size(1) == max_k_,
             "CrossAttention cache: expected [" + std::to_string(lens_k_.size()) + ", " + std::to_string(max_k_) +
                 ", Hkv, D], got " + (cache.defined() ? cache.str() : std::string("nothing")));
    Tensor packed = empty({tk_, Cfg::num_kv_heads, Cfg::head_dim}, dtype_of<T>);
    const size_t row = size_t(Cfg::num_kv_heads) * Cfg::head_dim * sizeof(T);
    int64_t at = 0;
    for (size_t b = 0; b < lens_k_.size(); ++b) {
      FK_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(packed.data_ptr()) + at * row,
                                    static_cast<const char*>(cache.data_ptr()) + int64_t(b) * max_k_ * row,
                                    lens_k_[b] * row, cudaMemcpyDeviceToDevice, current_stream()));
      at += lens_k_[b];
    }
    return packed;
  }

  bool write_;
  Module module_;
  std::vector<int64_t> lens_k_;
  int64_t tq_ = 0, tk_ = 0, max_q_ = 0, max_k_ = 0, min_k_ = 0;
  double pairs_ = 0;
  Tensor cu_q_, cu_k_, ref_begin_, ref_len_;
  std::vector<Tensor> q_, k_, v_, out_;
};

}  // namespace fk::tasks
