// Harness and forward glue for the four linear task kinds (template `linear`):
// QKVParallelLinear, MergedColumnParallelLinear, RowParallelLinear (forward(x) ->
// (output, output_bias)) and ParallelLMHead (logits = hidden_states · W^T), all
// y[M, N] = x[M, K] · W[N, K]^T (+ bias) in the model dtype with fp32 accumulation.
// Cfg (generated): in_features (K), out_features (N), has_bias, returns_bias, scalar_t.
//
// Dispatch (Note [GEMM dispatch] in fk/kernels/gemm.h): for M <= 16 the forward glue runs
// either the specialised GEMV (fk/kernels/gemv.cuh, templated on K) or cuBLASLt, whichever a
// one-time measurement at the first call with that M found faster; the library path itself is
// cuBLASLt's cached heuristic plan or plain cublasGemmEx, again by a one-time measurement per M.
// linear_forward_cublas is the plain peer (what torch's F.linear runs), for benchmarks that
// time both in one process.
#pragma once

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <tuple>
#include <type_traits>
#include <vector>

#include "fk/kernels/gemm.h"
#include "fk/kernels/gemv.cuh"
#include "fk/kernels/reference/gemm_ref.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

namespace detail {
template <class T> constexpr fk::kernels::GemmDType gemm_dtype() {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>, "linear tasks support bf16/f16");
  return std::is_same_v<T, bf16> ? fk::kernels::GemmDType::kBF16 : fk::kernels::GemmDType::kF16;
}

/// Checks the operands and returns (M, row stride of x) for x [..., K] with unit inner stride.
template <class Cfg> std::pair<int64_t, int64_t> linear_operands(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.dtype() == dtype_of<T> && x.size(-1) == Cfg::in_features && x.stride(-1) == 1,
           "linear input " + x.str() + " (in_features " + std::to_string(Cfg::in_features) + ")");
  FK_CHECK(weight.dtype() == dtype_of<T> && weight.dim() == 2 && weight.size(0) == Cfg::out_features &&
               weight.size(1) == Cfg::in_features && weight.is_contiguous(),
           "linear weight " + weight.str());
  FK_CHECK(!bias.defined() || (bias.dtype() == dtype_of<T> && bias.numel() == Cfg::out_features && bias.is_contiguous()),
           "linear bias " + bias.str());
  const int64_t m = x.numel() / Cfg::in_features;
  int64_t ldx = Cfg::in_features;
  if (x.dim() == 2) {
    ldx = x.stride(0);
  } else {
    FK_CHECK(x.is_contiguous(), "linear input with more than 2 dims must be contiguous: " + x.str());
  }
  return {m, ldx};
}

inline Shape linear_out_shape(const Tensor& x, int64_t n) {
  Shape s = x.sizes();
  s.back() = n;
  return s;
}
/// The memoised GEMM choices of one linear shape at one M (Note [GEMM dispatch]).
struct LinearChoice {
  bool decided = false;       ///< use_lt measured (or forced by a bias)
  bool gemv_decided = false;  ///< use_gemv measured (only where the GEMV applies)
  bool use_lt = true;
  bool use_gemv = false;
};
template <class Cfg> struct LinearChoices {
  std::mutex mu;
  std::unordered_map<int64_t, LinearChoice> by_m;  ///< key 2 * M + has_bias
};
template <class Cfg> LinearChoices<Cfg>& linear_choices() {
  static LinearChoices<Cfg> c;
  return c;
}
template <class Cfg> LinearChoice linear_choice(int64_t m, bool bias) {
  auto& c = linear_choices<Cfg>();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_m.find(2 * m + bias);
  return it == c.by_m.end() ? LinearChoice() : it->second;
}
template <class Cfg> void store_linear_choice(int64_t m, bool bias, const LinearChoice& ch) {
  auto& c = linear_choices<Cfg>();
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_m[2 * m + bias] = ch;
}
}  // namespace detail

/// The production forward: out = x W^T (+ bias), a new tensor [..., out_features].
template <class Cfg> Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t K = Cfg::in_features, N = Cfg::out_features;
  const auto mld = detail::linear_operands<Cfg>(input, weight, bias);
  const int64_t m = mld.first, ldx = mld.second;  // (plain names: lambdas below capture them)
  Tensor out = empty(detail::linear_out_shape(input, N), dtype_of<T>);
  if (m == 0) return out;
  T* y = out.data<T>();
  const T* x = input.data<T>();
  const T* w = weight.data<T>();
  const T* b = bias.defined() ? bias.data<T>() : nullptr;
  cudaStream_t st = current_stream();
  auto cublaslt = [&] { fk::kernels::gemm_cublaslt(y, N, x, ldx, w, b, m, N, K, detail::gemm_dtype<T>(), st); };
  auto cublas = [&] { fk::kernels::gemm_cublas_default(y, N, x, ldx, w, b, m, N, K, detail::gemm_dtype<T>(), st); };
  // The measured choices (Note [GEMM dispatch]) are memoised per (Cfg, M, bias), so a call in
  // steady state builds no key string; a choice made while capturing a graph is not memoised.
  detail::LinearChoice ch = detail::linear_choice<Cfg>(m, b != nullptr);
  auto lt = [&] { ch.use_lt ? cublaslt() : cublas(); };
  const bool gemv_ok = [&] {
    if constexpr (fk::kernels::gemv_supported_k<K>()) return fk::kernels::gemv_supported(m, N, x, ldx, w);
    return false;
  }();
  if (!ch.decided || (gemv_ok && !ch.gemv_decided)) {
    const std::string shape_key = std::string("linear_") + dtype_name(dtype_of<T>) + "_k" + std::to_string(K) + "_n" +
                                  std::to_string(N) + (b ? "_bias" : "_nobias") + "_m" + std::to_string(m);
    // Library path: cuBLASLt's heuristic plan, or cublasGemmEx's own choice where that measured
    // faster for this M (with a bias both are the cuBLASLt epilogue, so there is nothing to choose).
    ch.use_lt = b != nullptr || fk::kernels::choose_faster(shape_key + " cublaslt|cublas", cublaslt, cublas, st);
    if constexpr (fk::kernels::gemv_supported_k<K>()) {
      if (gemv_ok) {
        auto gv = [&] {
          fk::kernels::gemv<K, T>(y, N, x, ldx, w, b, m, N, st);
          FK_CHECK_LAUNCH();
        };
        ch.use_gemv = fk::kernels::choose_faster(shape_key + " gemv|library", gv, lt, st, /*fallback=*/true);
      }
    }
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    FK_CUDA_CHECK(cudaStreamIsCapturing(st, &cap));
    if (cap == cudaStreamCaptureStatusNone) {
      ch.decided = true;
      ch.gemv_decided = ch.gemv_decided || gemv_ok;
      detail::store_linear_choice<Cfg>(m, b != nullptr, ch);
    }
  }
  const bool use_gemv = gemv_ok && ch.use_gemv;
  if constexpr (fk::kernels::gemv_supported_k<K>()) {
    if (use_gemv) {
      fk::kernels::gemv<K, T>(y, N, x, ldx, w, b, m, N, st);
      FK_CHECK_LAUNCH();
    }
  }
  if (!use_gemv) lt();
  return out;
}

/// What the generated class's forward returns: (output, output_bias = undefined) for the
/// vLLM linear layers (bias fused into the GEMM), the logits tensor for ParallelLMHead.
// Note [Tensor-parallel linears]
// A linear sharded for tensor parallelism (Cfg::tp_size > 1; Note [Parallel layouts]) holds this rank's
// part of the weight: its constants are per rank. A row-parallel one (vLLM's RowParallelLinear with
// reduce_results) multiplies this rank's columns of the input, adds the bias on rank 0 only, and sums
// over the tensor-parallel group; the column-parallel kinds need no communication (their outputs stay
// sharded) and keep tp_size 1. Only kinds whose forward communicates carry tp_size > 1.
/// The input-feature shards of a linear module: a sharded RowParallelLinear's tp_size (its
/// row_shards), 1 for the other kinds and for modules that do not say. Parents build their
/// row-parallel children with the unsharded input size, as vLLM does (input_size x this).
template <class L, class = void> struct RowShardsOf : std::integral_constant<int, 1> {};
template <class L> struct RowShardsOf<L, std::void_t<decltype(L::row_shards)>> : std::integral_constant<int, L::row_shards> {};

// Note [Partial row-parallel results]
// vLLM builds some row-parallel linears with reduce_results=False: the parent adds several partial sums and
// reduces once (DeepseekV2MoE: the shared experts' down_proj partials plus the routed experts' partials, one
// all-reduce for both). Such a task (generated name _partial, Config::reduce_results false, no collective child)
// returns this rank's partial product, the bias added on rank 0 only; its reference is that rank's partial.
// Unsharded there is nothing to reduce: the task is the reducing one's (same name, reduce_results true).

/// Whether a linear module's (or its Config's) forward reduces over the tensor-parallel group (reduce_results; true
/// for types that do not say).
template <class L, class = void> struct ReducesOf : std::true_type {};
template <class L> struct ReducesOf<L, std::void_t<decltype(L::reduce_results)>> : std::bool_constant<L::reduce_results> {};

/// Reduce: the task's all-reduce child (Note [Collective tasks] in fk/tasks/collective.h), called on the partial
/// product as vLLM's RowParallelLinear calls tensor_model_parallel_all_reduce.
template <class Cfg, class Reduce = NoCollective>
Tensor linear_forward_tp(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if constexpr (TpSizeOf<Cfg>::value == 1) {
    return linear_forward<Cfg>(input, weight, bias);
  } else {
    Tensor partial = linear_forward<Cfg>(input, weight, fk::dist::tp_rank() == 0 ? bias : Tensor());
    if constexpr (!ReducesOf<Cfg>::value) return partial;  // Note [Partial row-parallel results]
    else return collective_call<Reduce>(partial);
  }
}

/// The logits of a model sharded for tensor parallelism: every rank's shard of the (padded) vocabulary
/// side by side, cut to the model's vocab_size (vLLM's LogitsProcessor: gather, then [..., :vocab]).
/// Gather: the model's all-gather child (Note [Collective tasks]); the default, the group's own all-gather, serves
/// the references.
template <class Gather = void> Tensor gather_vocab_logits(const Tensor& local, int64_t vocab_size) {
  const int64_t cols = local.size(-1), rows = local.numel() / cols;
  Tensor all;
  if constexpr (std::is_void_v<Gather>) all = fk::dist::tp_all_gather_last_dim(local.view({rows, cols}));
  else all = collective_call<Gather>(local.view({rows, cols}));
  FK_CHECK(all.size(1) >= vocab_size, "gather_vocab_logits: " + all.str() + " has fewer than " + std::to_string(vocab_size) + " columns");
  Tensor out = empty({rows, vocab_size}, local.dtype());
  copy_strided_(out, all.narrow_last(0, vocab_size));
  Shape shape = local.sizes();
  shape.back() = vocab_size;
  return out.view(shape);
}

template <class Cfg> auto linear_result(const Tensor& output) {
  if constexpr (Cfg::returns_bias) {
    // Spelled out, not std::make_tuple: nvcc (EDG) would then name std::tuple<Tensor, Tensor> as
    // tuple<__remove_cv(const Tensor), ...> in host code, which g++ 13 rejects.
    return std::tuple<Tensor, Tensor>(output, Tensor());
  } else {
    return output;
  }
}

/// The peer, what torch.nn.functional.linear runs (cublasGemmEx; cuBLASLt + bias epilogue with bias).
template <class Cfg> Tensor linear_forward_cublas(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  using T = typename Cfg::scalar_t;
  const auto [m, ldx] = detail::linear_operands<Cfg>(input, weight, bias);
  Tensor out = empty(detail::linear_out_shape(input, Cfg::out_features), dtype_of<T>);
  fk::kernels::gemm_cublas_default(out.data_ptr(), Cfg::out_features, input.data_ptr(), ldx, weight.data_ptr(),
                                   bias.defined() ? bias.data_ptr() : nullptr, m, Cfg::out_features, Cfg::in_features,
                                   detail::gemm_dtype<T>(), current_stream());
  return out;
}

/// One case of a linear task. Case dims: num_tokens (M). The weight (and bias) are one copy
/// (weights are large and the runner flushes the L2 before every timed call); the inputs
/// rotate. Weights ~ N(0, 1/K), inputs and bias ~ N(0, 1): outputs are O(1).
template <class Module, class Cfg> class LinearInstance final : public TaskInstance {
 public:
  explicit LinearInstance(const ShapeCase& c) : m_(c.get("num_tokens")) {
    constexpr double K = double(Cfg::in_features), N = double(Cfg::out_features);
    const double weight_bytes = (N * K + (Cfg::has_bias ? N : 0)) * sizeof(T);
    const double set_bytes = double(m_) * (K + N) * sizeof(T);
    const int n = rotating_sets(set_bytes);
    // weights + sets + the fp32 reference and one transient output while checking
    require_device_memory(weight_bytes + set_bytes * n + double(m_) * N * (4 + sizeof(T)), "linear weights and inputs");
    module_ = std::make_unique<Module>(from_config);
    for (int s = 0; s < n; ++s) x_.push_back(empty({m_, Cfg::in_features}, dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  // Sharded for tensor parallelism (a RowParallelLinear at tp_size > 1; Note [Sharded references] in
  // fk/tasks/llama.h): each rank draws its own columns of the weight and the input (its rank mixed into
  // the seeds; the bias is the same on every rank and added once), and the reference is the sum of the
  // ranks' fp32 products: the unsharded linear's.
  void randomize(uint64_t seed) override {
    fill_normal(module_->weight, rank_seed<Cfg>(seed, mix_seed(seed, 0)), 0.f, static_cast<float>(1.0 / std::sqrt(double(Cfg::in_features * kTp))));
    if constexpr (Cfg::has_bias) fill_normal(module_->bias, mix_seed(seed, 1), 0.f, 1.f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    fill_normal(x_[s], rank_seed<Cfg>(seed, seed));
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override {
    if constexpr (Cfg::returns_bias) {
      out_[s] = std::get<0>(module_->forward(x_[s]));
    } else {
      out_[s] = module_->forward(x_[s]);
    }
  }
  std::vector<Tensor> inputs(int s) override {
    if constexpr (Cfg::has_bias) return {module_->weight, module_->bias, x_[s]};
    return {module_->weight, x_[s]};
  }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({m_, Cfg::out_features}, DType::kF32);
    const bool bias_here = Cfg::has_bias && (kTp == 1 || fk::dist::tp_rank() == 0);  // added once
    fk::kernels::reference::gemm_ref<T>(ref.data<float>(), Cfg::out_features, x_[s].data<T>(), Cfg::in_features,
                                        module_->weight.template data<T>(), Cfg::in_features,
                                        bias_here ? module_->bias.template data<T>() : nullptr, m_,
                                        Cfg::out_features, Cfg::in_features, current_stream());
    FK_CHECK_LAUNCH();
    if constexpr (kTp > 1 && ReducesOf<Cfg>::value) fk::dist::tp_all_reduce_(ref);  // the ranks' fp32 partial products, summed
    // |N(0, s^2)| has mean 0.8 s; s^2 = 1 (+ 1 with bias): the weight's scale is the unsharded fan-in's.
    // Sharded, the output carries kTp roundings, not one: each rank's partial product is rounded to T,
    // and an all-reduce in T (NCCL's ring) rounds each running sum of partials again, as production's
    // row-parallel linear does. Those sums are not bounded by the output (partials cancel), so the
    // absolute part of the bound grows with the roundings: seen at 4 ranks on H200, 1-6 elements in
    // 10^5-10^7 at 0.03-0.04 against one rounding's 0.016 + 2% (rel_l2 0.0032 either way).
    // A partial result (Note [Partial row-parallel results]) is one rounding of this rank's product.
    const double typical = 0.8 * std::sqrt(Cfg::has_bias ? 2.0 : 1.0) * (ReducesOf<Cfg>::value ? kTp : 1);
    return {{"output", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
  }
  /// cuBLAS as torch's F.linear calls it, timed beside the task in the same run.
  std::string peer_name() const override { return "cublas"; }
  void run_peer(int s) override { peer_out_ = linear_forward_cublas<Cfg>(x_[s], module_->weight, module_->bias); }
  Cost cost() const override {
    constexpr double K = double(Cfg::in_features), N = double(Cfg::out_features);
    const double bytes = (double(m_) * K + N * K + double(m_) * N + (Cfg::has_bias ? N : 0)) * sizeof(T);
    return {2.0 * double(m_) * N * K, bytes};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int kTp = TpSizeOf<Cfg>::value;
  int64_t m_;
  std::unique_ptr<Module> module_;
  std::vector<Tensor> x_, out_;
  Tensor peer_out_;
};

}  // namespace fk::tasks
