// The overlapped (async tensor-parallel) linears as L2 tasks (issue 23): kinds matmul_reduce_scatter and
// all_gather_matmul.
//
// Note [Overlapped linear tasks]
// Under sequence parallelism (Note [Collective tasks] in fk/tasks/collective.h) a row-parallel linear's partial product
// is reduce-scattered over the token rows and a column-parallel linear's input is the all-gather of the ranks' token
// chunks. Async TP (vLLM's AsyncTPPass over its SequenceParallelismPass; PyTorch's
// torch.ops.symm_mem.fused_matmul_reduce_scatter and fused_all_gather_matmul) hides that communication behind the GEMM's
// chunks. A layout with tp_size > 1 lowers, per decoder layer kind, one task of each pair the layer holds:
//  - matmul_reduce_scatter_k{k}_n{n}_tp{W}: the row-parallel linear (child `linear`: o_proj, down_proj; its weight, this
//    rank's [n, k] slice of the inner dimension) with its reduce-scatter (child `collective`, kind reduce_scatter).
//    forward(x [T, k]) -> [T / W, n]: rows [r T/W, (r+1) T/W) of the sum over the ranks of x_q w_q^T.
//  - all_gather_matmul_k{k}_n{n}_tp{W}: the all-gather of the token chunks (child `collective`, kind all_gather_rows)
//    with the column-parallel linear after it (child `linear`: qkv_proj, gate_up_proj; this rank's [n, k] columns).
//    forward(x_shard [T / W, k]) -> [T, n] = all_gather(x_shard, dim 0) w^T.
// The task runs the group's overlapped linears (fk/runtime/overlapped_linear.h: the GEMM in W row chunks, each chunk's
// rows pushed to, or pulled from, its peer over NVLink while the next chunk multiplies; eager only) where the ranks map
// each other's memory, and otherwise the serial pair through its children, which is also its peer: the cuBLASLt GEMM and
// NCCL's reduce-scatter / all-gather one after the other, what vLLM runs with sequence parallelism and no async TP. The
// decoder layers do not call these tasks (their layouts keep the residual stream whole on every rank); they time the
// communication-overlap kernels at the layers' shapes, and a candidate for them (or for their collective children) is
// judged like any L2 task.
// Checking: every rank draws its own input rows and weight slice from its rank's seed (seed_of_rank) and redraws the
// other ranks' where the reference needs them. matmul_reduce_scatter: this rank's fp32 product (cuBLAS, fp32 out), the
// ranks' products reduce-scattered in fp32 through the group (not the task's path); all_gather_matmul: every rank's
// chunk redrawn, stacked in rank order and multiplied in fp32. Case dim rows_per_rank (T / W), as the collectives'.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "fk/kernels/gemm.h"
#include "fk/tasks/collective.h"
#include "fk/tasks/harness.h"

namespace fk::tasks {

namespace detail {
template <class T> constexpr fk::kernels::GemmDType overlapped_gemm_dtype() {
  static_assert(std::is_same_v<T, bf16>, "the overlapped linears serve bf16 (the peer-memory kernels' dtype)");
  return fk::kernels::GemmDType::kBF16;
}
/// y [m, n] = x [m, k] w [n, k]^T in T (cuBLASLt: the GEMM the overlapped kernels run per chunk).
template <class T> Tensor overlapped_gemm(const Tensor& x, const Tensor& w) {
  Tensor y = empty({x.size(0), w.size(0)}, dtype_of<T>);
  if (x.size(0) > 0)
    fk::kernels::gemm_cublaslt(y.data_ptr(), w.size(0), x.data_ptr(), x.size(1), w.data_ptr(), nullptr, x.size(0), w.size(0),
                               x.size(1), overlapped_gemm_dtype<T>(), current_stream());
  return y;
}
template <class Cfg> void check_overlapped_weight(const char* kind, const Tensor& w) {
  FK_CHECK(w.dim() == 2 && w.size(0) == Cfg::out_features && w.size(1) == Cfg::in_features && w.is_contiguous() &&
               w.dtype() == dtype_of<typename Cfg::scalar_t>,
           std::string(kind) + ": the linear's weight must be a contiguous [" + std::to_string(Cfg::out_features) + ", " +
               std::to_string(Cfg::in_features) + "] tensor, got " + w.str());
}
}  // namespace detail

/// The serial pair: the GEMM of this rank's partial, then the reduce-scatter child (NCCL).
template <class Cfg, class Collective> Tensor matmul_then_reduce_scatter(const Tensor& x, const Tensor& w) {
  return collective_call<Collective>(detail::overlapped_gemm<typename Cfg::scalar_t>(x, w));
}

/// The serial pair: the all-gather child (NCCL), then the GEMM of every rank's rows.
template <class Cfg, class Collective> Tensor all_gather_then_matmul(const Tensor& x_shard, const Tensor& w) {
  return detail::overlapped_gemm<typename Cfg::scalar_t>(collective_call<Collective>(x_shard), w);
}

/// matmul_reduce_scatter's forward (Note [Overlapped linear tasks]): x [T, in_features] with T a multiple of tp_size.
template <class Cfg, class Collective> Tensor matmul_reduce_scatter_forward(const Tensor& x, const Tensor& w) {
  detail::check_overlapped_weight<Cfg>("matmul_reduce_scatter", w);
  FK_CHECK(x.dim() == 2 && x.size(1) == Cfg::in_features && x.size(0) % Cfg::tp_size == 0 && x.is_contiguous() &&
               x.dtype() == dtype_of<typename Cfg::scalar_t>,
           "matmul_reduce_scatter: a contiguous [T, " + std::to_string(Cfg::in_features) + "] input with T a multiple of the " +
               std::to_string(Cfg::tp_size) + " ranks (vLLM pads the tokens to one), got " + x.str());
  if (Tensor y = fk::dist::tp_matmul_reduce_scatter(x, w); y.defined()) return y;
  return matmul_then_reduce_scatter<Cfg, Collective>(x, w);
}

/// all_gather_matmul's forward (Note [Overlapped linear tasks]): x_shard [T / tp_size, in_features].
template <class Cfg, class Collective> Tensor all_gather_matmul_forward(const Tensor& x_shard, const Tensor& w) {
  detail::check_overlapped_weight<Cfg>("all_gather_matmul", w);
  FK_CHECK(x_shard.dim() == 2 && x_shard.size(1) == Cfg::in_features && x_shard.is_contiguous() &&
               x_shard.dtype() == dtype_of<typename Cfg::scalar_t>,
           "all_gather_matmul: a contiguous [T / " + std::to_string(Cfg::tp_size) + ", " + std::to_string(Cfg::in_features) +
               "] input (this rank's token chunk), got " + x_shard.str());
  if (Tensor y = fk::dist::tp_all_gather_matmul(x_shard, w); y.defined()) return y;
  return all_gather_then_matmul<Cfg, Collective>(x_shard, w);
}

/// One case of an overlapped linear task (Note [Overlapped linear tasks]). Case dims: rows_per_rank (T / W).
/// Module: the generated class (forward(x), `linear` with its weight); Cfg: in_features, out_features, tp_size,
/// scalar_t, Collective (the collective child's class, for the peer), Gather: all_gather_matmul, else
/// matmul_reduce_scatter.
template <class Module, class Cfg, bool Gather> class OverlappedLinearInstance final : public TaskInstance {
 public:
  explicit OverlappedLinearInstance(const ShapeCase& c) : chunk_(c.get("rows_per_rank")) {
    constexpr double K = double(Cfg::in_features), N = double(Cfg::out_features);
    const double in_rows = Gather ? double(chunk_) : double(chunk_) * kTp, out_rows = Gather ? double(chunk_) * kTp : double(chunk_);
    const double set_bytes = (in_rows * K + out_rows * N) * sizeof(T);
    const int n = rotating_sets(set_bytes);
    // weight, sets, the fp32 product of every row (T x N) and, gathering, the stacked input while checking
    require_device_memory(N * K * sizeof(T) + set_bytes * n + double(chunk_) * kTp * (N * 4 + K * sizeof(T)) * 2,
                          Gather ? "all_gather_matmul inputs" : "matmul_reduce_scatter inputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({static_cast<int64_t>(in_rows), Cfg::in_features}, dtype_of<T>));
    out_.resize(n);
    seeds_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    // Row-parallel: the weight's fan-in is the unsharded inner dimension (this rank's slice of it); column-parallel:
    // this rank's output columns of a fan-in of in_features.
    fill_normal(module_.linear.weight, seed_of_rank(mix_seed(seed, 0), fk::dist::tp_rank()), 0.f, weight_scale());
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    seeds_[s] = seed;
    fill_normal(x_[s], seed_of_rank(seed, fk::dist::tp_rank()));
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {module_.linear.weight, x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    constexpr int64_t K = Cfg::in_features, N = Cfg::out_features;
    Tensor ref;
    if constexpr (Gather) {
      Tensor all = empty({chunk_ * kTp, K}, dtype_of<T>), other = empty({chunk_, K}, dtype_of<T>);
      for (int q = 0; q < kTp; ++q) {  // rank q's chunk, redrawn: rows [q c, (q + 1) c)
        fill_normal(other, seed_of_rank(seeds_[s], q));
        Tensor rows = all.narrow_first(q * chunk_, chunk_);
        copy_(rows, other);
      }
      ref = empty({chunk_ * kTp, N}, DType::kF32);
      fk::kernels::gemm_f32_out(ref.data<float>(), N, all.data_ptr(), K, module_.linear.weight.data_ptr(), chunk_ * kTp, N, K,
                                detail::overlapped_gemm_dtype<T>(), current_stream());
    } else {
      Tensor mine = empty({chunk_ * kTp, N}, DType::kF32);  // this rank's fp32 partial product of every row
      fk::kernels::gemm_f32_out(mine.data<float>(), N, x_[s].data_ptr(), K, module_.linear.weight.data_ptr(), chunk_ * kTp, N, K,
                                detail::overlapped_gemm_dtype<T>(), current_stream());
      ref = fk::dist::tp_reduce_scatter_first_dim(mine);  // the ranks' fp32 partials summed, this rank's rows
    }
    // Outputs ~N(0, 1) (the weight's scale is the unsharded fan-in's). Reduce-scattered, each rank's partial is rounded
    // to the model dtype before the sum (and NCCL's ring rounds the running sums): kTp roundings, as the row-parallel
    // linear's all-reduce (Note in fk/tasks/linear.h).
    const double typical = 0.8 * (Gather ? 1 : kTp);
    return {{"output", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
  }
  /// The serial pair through the children: cuBLASLt's GEMM and NCCL's collective, one after the other.
  std::string peer_name() const override { return Gather ? "nccl_all_gather+gemm" : "gemm+nccl_reduce_scatter"; }
  void run_peer(int s) override {
    if constexpr (Gather) peer_out_ = all_gather_then_matmul<Cfg, typename Cfg::Collective>(x_[s], module_.linear.weight);
    else peer_out_ = matmul_then_reduce_scatter<Cfg, typename Cfg::Collective>(x_[s], module_.linear.weight);
  }
  /// The GEMM's flops over all T rows; this rank's HBM traffic: its input rows, the weight, the output rows, and the
  /// received chunks (gathered inputs, or partial rows to sum).
  Cost cost() const override {
    constexpr double K = double(Cfg::in_features), N = double(Cfg::out_features);
    const double rows = double(chunk_) * kTp;
    const double bytes = Gather ? (rows * K * 2 + N * K + rows * N) * sizeof(T)
                                : (rows * K + N * K + rows * N + double(chunk_) * N * (kTp + 1)) * sizeof(T);
    return {2.0 * rows * N * K, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int kTp = Cfg::tp_size;
  static float weight_scale() { return static_cast<float>(1.0 / std::sqrt(double(Cfg::in_features) * (Gather ? 1 : kTp))); }
  int64_t chunk_;
  Module module_{from_config};
  std::vector<Tensor> x_, out_;
  std::vector<uint64_t> seeds_;
  Tensor peer_out_;
};

}  // namespace fk::tasks
