// Harness and forward glue for the `embedding_pooler` and `l2_normalize` task kinds (embedding
// models, issue 22): vLLM's pooling layers over a packed variable-length batch (CLS, mean, last
// token; normalised where the model asks), forward(hidden_states [T, H], cu_seqlens [B + 1] i32)
// -> [B, H]; and torch.nn.functional.normalize(x, dim=-1) on token vectors, forward(x [T, H]) ->
// [T, H] (ColBERT's multi-vector output). Kernels: fk/kernels/pooler.cuh.
// Cfg (generated): hidden_size, pooling (fk::kernels::Pool), normalize, scalar_t; l2_normalize:
// hidden_size, scalar_t.
#pragma once

#include <algorithm>
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

}  // namespace fk::tasks
