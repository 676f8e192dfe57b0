// Harness and forward glue for the `embedding_pooler` and `l2_normalize` task kinds (embedding
// models, issue 22): vLLM's pooling layers over a packed variable-length batch (CLS, mean, last
// token; normalised where the model asks), forward(hidden_states [T, H], cu_seqlens [B + 1] i32)
// -> [B, H]; and torch.nn.functional.normalize(x, dim=-1) on token vectors, forward(x [T, H]) ->
// [T, H] (ColBERT's multi-vector output); and the per-token classifier head of sparse embedding
// models (`token_classifier`: BGE-M3's lexical weights relu(x w^T + b)), forward(x [T, H]) ->
// [T, num_labels]. Kernels: fk/kernels/pooler.cuh (Note [Token heads]).
// Cfg (generated): hidden_size, pooling (fk::kernels::Pool), normalize, scalar_t; l2_normalize:
// hidden_size, scalar_t; token_classifier: hidden_size, num_labels, act (fk::kernels::HeadAct),
// has_bias, scalar_t.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fk/kernels/pooler.cuh"
#include "fk/kernels/reference/pooler_ref.cuh"
#include "fk/tasks/attention.h"  // case_seq_lens
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// Pooler.forward(hidden_states [T, H] (rows may be strided), cu_seqlens i32 [B + 1]) -> [B, H].
template <class Cfg> Tensor embedding_pool_forward(const Tensor& x, const Tensor& cu_seqlens) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size;
  FK_CHECK(x.dim() == 2 && x.size(1) == H && x.stride(1) == 1 && x.dtype() == dtype_of<T>,
           "Pooler input " + x.str() + ": expected [T, " + std::to_string(H) + "] rows of " + dtype_name(dtype_of<T>));
  FK_CHECK(cu_seqlens.dtype() == DType::kI32 && cu_seqlens.dim() == 1 && cu_seqlens.numel() >= 1,
           "Pooler cu_seqlens " + cu_seqlens.str() + ": expected i32 [B + 1]");
  const int64_t b = cu_seqlens.numel() - 1;
  Tensor out = empty({b, H}, x.dtype());
  fk::kernels::embedding_pool<H, T, Cfg::pooling, Cfg::normalize>(out.data<T>(), x.data<T>(), x.stride(0),
                                                                    cu_seqlens.data<int32_t>(), b, current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// L2Normalize.forward(x [T, H], rows may be strided) -> x / max(||x||, 1e-12) per row.
template <class Cfg> Tensor l2_normalize_forward(const Tensor& x) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size;
  FK_CHECK(x.dim() == 2 && x.size(1) == H && x.stride(1) == 1 && x.dtype() == dtype_of<T>,
           "L2Normalize input " + x.str() + ": expected [T, " + std::to_string(H) + "] rows of " + dtype_name(dtype_of<T>));
  Tensor out = empty({x.size(0), H}, x.dtype());
  fk::kernels::l2_normalize<H, T>(out.data<T>(), x.data<T>(), x.stride(0), x.size(0), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// TokenClassifier.forward(x [T, H], rows may be strided) -> act(x w^T (+ b)) [T, num_labels].
template <class Cfg> Tensor token_classifier_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t H = Cfg::hidden_size, N = Cfg::num_labels;
  FK_CHECK(x.dim() == 2 && x.size(1) == H && x.stride(1) == 1 && x.dtype() == dtype_of<T>,
           "TokenClassifier input " + x.str() + ": expected [T, " + std::to_string(H) + "] rows of " + dtype_name(dtype_of<T>));
  FK_CHECK(weight.dim() == 2 && weight.size(0) == N && weight.size(1) == H && weight.is_contiguous() && weight.dtype() == dtype_of<T>,
           "TokenClassifier weight " + weight.str() + ": expected contiguous [" + std::to_string(N) + ", " + std::to_string(H) + "]");
  FK_CHECK(bias.defined() == Cfg::has_bias, std::string("TokenClassifier bias: ") + (Cfg::has_bias ? "expected one" : "expected none"));
  Tensor out = empty({x.size(0), N}, x.dtype());
  fk::kernels::token_classify<H, N, T, Cfg::act, Cfg::has_bias>(out.data<T>(), x.data<T>(), x.stride(0), weight.data<T>(),
                                                                  Cfg::has_bias ? bias.data<T>() : nullptr, x.size(0), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// The host side of drop_sequence_ends: the kept rows' offsets ([B + 1]) of sequences at `cu`.
inline std::vector<int32_t> kept_offsets(const std::vector<int32_t>& cu, int first, int last) {
  std::vector<int32_t> out{0};
  for (size_t s = 0; s + 1 < cu.size(); ++s) out.push_back(out.back() + std::max(0, cu[s + 1] - cu[s] - first - last));
  return out;
}

/// The rows of x [T, W] (a packed batch at cu_seqlens: i32 on the device, `host_cu` its host
/// copy) without each sequence's first `first` and last `last` rows (vLLM's BOSEOSFilter; Note
/// [Token heads]): [sum of max(0, len - first - last), W].
inline Tensor drop_sequence_ends(const Tensor& x, const Tensor& cu_seqlens, const std::vector<int32_t>& host_cu, int first, int last) {
  FK_CHECK(x.dim() == 2 && x.stride(1) == 1, "drop_sequence_ends: expected rows [T, W], got " + x.str());
  const auto b = static_cast<int64_t>(host_cu.size()) - 1;
  FK_CHECK(b >= 0 && cu_seqlens.dtype() == DType::kI32 && cu_seqlens.numel() >= b + 1 && host_cu.back() == x.size(0),
           "drop_sequence_ends: cu_seqlens " + cu_seqlens.str() + " does not describe " + x.str());
  int64_t max_len = 0;
  for (int64_t s = 0; s < b; ++s) max_len = std::max<int64_t>(max_len, host_cu[s + 1] - host_cu[s]);
  Tensor out = empty({kept_offsets(host_cu, first, last).back(), x.size(1)}, x.dtype());
  auto go = [&](auto tag) {
    using E = decltype(tag);
    fk::kernels::drop_sequence_ends<E>(out.data<E>(), x.data<E>(), x.stride(0), x.size(1), cu_seqlens.data<int32_t>(), b, first, last,
                                       max_len, current_stream());
  };
  switch (x.dtype()) {
    case DType::kBF16: go(__nv_bfloat16{}); break;
    case DType::kF16: go(__half{}); break;
    case DType::kF32: go(float{}); break;
    default: FK_CHECK(false, "drop_sequence_ends: unsupported dtype " + std::string(dtype_name(x.dtype())));
  }
  FK_CHECK_LAUNCH();
  return out;
}

/// One case of an embedding_pooler task. Case dims: batch, seq_len (ragged: lengths drawn by
/// case_seq_lens). Hidden states ~ N(0.3, 1) (a common offset, so that a pooled mean is not ~0
/// and a normalisation that skipped the mean's division or the norm would show).
template <class Module, class Cfg> class PoolerInstance final : public TaskInstance {
 public:
  explicit PoolerInstance(const ShapeCase& c) {
    const std::vector<int64_t> lens = case_seq_lens(c, "seq_len");
    std::vector<int32_t> cu{0};
    for (int64_t l : lens) cu.push_back(static_cast<int32_t>(cu.back() + l));
    total_ = cu.back();
    batch_ = static_cast<int64_t>(lens.size());
    const double set_bytes = double(total_) * Cfg::hidden_size * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "pooler inputs");
    cu_ = to_device(cu, {batch_ + 1});
    for (int s = 0; s < n; ++s) x_.push_back(empty({total_, Cfg::hidden_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed, 0.3f, 1.f); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s], cu_); }
  std::vector<Tensor> inputs(int s) override { return {x_[s], cu_}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({batch_, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::pool_ref<T>(ref.data<float>(), x_[s].data<T>(), Cfg::hidden_size, cu_.data<int32_t>(), batch_,
                                        static_cast<int>(Cfg::hidden_size), Cfg::pooling, Cfg::normalize, current_stream());
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double read_rows = Cfg::pooling == fk::kernels::Pool::kMean ? double(total_) : double(batch_);
    return {read_rows * Cfg::hidden_size, (read_rows + batch_) * Cfg::hidden_size * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  Module module_;
  int64_t total_ = 0, batch_ = 0;
  Tensor cu_;
  std::vector<Tensor> x_, out_;
};

/// One case of an l2_normalize task. Case dims: num_tokens. Inputs N(0, 1) times a per-set
/// scale far from 1 (so that a kernel returning its input would fail).
template <class Module, class Cfg> class L2NormalizeInstance final : public TaskInstance {
 public:
  explicit L2NormalizeInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * Cfg::hidden_size * 2 * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "l2_normalize inputs and outputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed, 0.f, 3.f); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::hidden_size}, DType::kF32);
    fk::kernels::reference::l2_normalize_ref<T>(ref.data<float>(), x_[s].data<T>(), Cfg::hidden_size, tokens_,
                                                static_cast<int>(Cfg::hidden_size), current_stream());
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    const double elems = double(tokens_) * Cfg::hidden_size;
    return {elems * 3, elems * 2 * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, out_;
};

/// One case of a token_classifier task. Case dims: num_tokens. Inputs N(0, 1), weights
/// N(0, 1/H), bias N(0, 1) (so that ReLU clips about half the outputs).
template <class Module, class Cfg> class TokenClassifierInstance final : public TaskInstance {
 public:
  explicit TokenClassifierInstance(const ShapeCase& c) : tokens_(c.get("num_tokens")) {
    const double set_bytes = double(tokens_) * (Cfg::hidden_size + Cfg::num_labels) * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "token_classifier inputs and outputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({tokens_, Cfg::hidden_size}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(module_.weight, mix_seed(seed, 1000), 0.f, static_cast<float>(1.0 / std::sqrt(double(Cfg::hidden_size))));
    if (module_.bias.defined()) fill_normal(module_.bias, mix_seed(seed, 1001), 0.f, 1.f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed, 0.f, 1.f); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override {
    std::vector<Tensor> v{x_[s], module_.weight};
    if (module_.bias.defined()) v.push_back(module_.bias);
    return v;
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::num_labels}, DType::kF32);
    const Tensor &w = module_.weight, &b = module_.bias;
    fk::kernels::reference::token_classify_ref<T>(ref.data<float>(), x_[s].data<T>(), Cfg::hidden_size, w.data<T>(),
                                                  b.defined() ? b.data<T>() : nullptr, tokens_,
                                                  static_cast<int>(Cfg::hidden_size), static_cast<int>(Cfg::num_labels), Cfg::act,
                                                  current_stream());
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    return {2.0 * tokens_ * Cfg::hidden_size * Cfg::num_labels, double(tokens_) * (Cfg::hidden_size + Cfg::num_labels) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> x_, out_;
};

}  // namespace fk::tasks
