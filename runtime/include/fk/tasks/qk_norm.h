// Harness and forward glue for the `qk_norm` task kind (Qwen3): mirrors
// vllm.model_executor.models.qwen3.Qwen3Attention.q_norm / k_norm, RMSNorm(head_dim) applied per
// head to q.view(T, Hq, D) and k.view(T, Hkv, D), both in one launch.
// The `gemma_qk_norm` kind (Gemma 3: GemmaRMSNorm(head_dim), weight used as 1 + w, one
// rounding) shares it with Cfg::gemma set; the `olmo2_qk_norm` kind (OLMo-2: RMSNorm over all
// heads, weights [Hq*D] and [Hkv*D]; Note [Full-width q/k norm] in fk/kernels/qk_norm.cuh) with
// Cfg::full_width set.
// Cfg (generated): num_heads, num_kv_heads, head_dim, eps, gemma, scalar_t (full_width: olmo2).
#pragma once

#include <tuple>
#include <type_traits>

#include "fk/kernels/qk_norm.cuh"
#include "fk/kernels/reference/qk_norm_ref.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// T::full_width (the olmo2_qk_norm kind's Config and module class); false where T has no such member.
template <class Cfg, class = void> struct FullWidthQKNorm : std::false_type {};
template <class Cfg> struct FullWidthQKNorm<Cfg, std::void_t<decltype(Cfg::full_width)>> : std::bool_constant<Cfg::full_width> {};
/// The q and k weight lengths: head_dim per-head, all heads' width when full-width.
template <class Cfg> constexpr int64_t qk_norm_q_width() { return FullWidthQKNorm<Cfg>::value ? Cfg::num_heads * Cfg::head_dim : Cfg::head_dim; }
template <class Cfg> constexpr int64_t qk_norm_k_width() { return FullWidthQKNorm<Cfg>::value ? Cfg::num_kv_heads * Cfg::head_dim : Cfg::head_dim; }

/// QKNorm.forward(q [T, Hq*D], k [T, Hkv*D]) -> (q_out, k_out), new contiguous tensors. q and k
/// may be strided row views (e.g. columns of the qkv projection output).
template <class Cfg>
std::tuple<Tensor, Tensor> qk_norm_forward(const Tensor& q, const Tensor& k, const Tensor& q_weight,
                                           const Tensor& k_weight, double eps) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t kQ = Cfg::num_heads * Cfg::head_dim, kK = Cfg::num_kv_heads * Cfg::head_dim;
  FK_CHECK(q.dim() == 2 && q.size(1) == kQ && q.stride(1) == 1, "QKNorm q " + q.str());
  FK_CHECK(k.dim() == 2 && k.size(1) == kK && k.stride(1) == 1 && k.size(0) == q.size(0), "QKNorm k " + k.str());
  FK_CHECK(q_weight.numel() == qk_norm_q_width<Cfg>() && k_weight.numel() == qk_norm_k_width<Cfg>(),
           "QKNorm weights " + q_weight.str() + ", " + k_weight.str());
  const int64_t tokens = q.size(0);
  Tensor q_out = empty({tokens, kQ}, dtype_of<T>);
  Tensor k_out = empty({tokens, kK}, dtype_of<T>);
  if constexpr (FullWidthQKNorm<Cfg>::value) {
    static_assert(!Cfg::gemma, "full-width q/k norm: plain RMSNorm weights only");
    fk::kernels::qk_norm_full<T, static_cast<int>(kQ), static_cast<int>(kK)>(
        q_out.data<T>(), kQ, k_out.data<T>(), kK, q.data<T>(), q.stride(0), k.data<T>(), k.stride(0), q_weight.data<T>(),
        k_weight.data<T>(), tokens, static_cast<float>(eps), current_stream());
  } else {
    fk::kernels::qk_norm<T, Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim, Cfg::gemma>(
        q_out.data<T>(), kQ, k_out.data<T>(), kK, q.data<T>(), q.stride(0), k.data<T>(), k.stride(0),
        q_weight.data<T>(), k_weight.data<T>(), tokens, static_cast<float>(eps), current_stream());
  }
  FK_CHECK_LAUNCH();
  return {q_out, k_out};
}

/// One case of a qk_norm task. Case dims: num_tokens. q and k are column views of one qkv
/// tensor [T, (Hq + 2 Hkv) * D], as after Qwen3Attention's qkv.split.
template <class Module, class Cfg> class QKNormInstance final : public TaskInstance {
 public:
  explicit QKNormInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")), module_(Cfg::num_heads, Cfg::num_kv_heads, Cfg::head_dim, Cfg::eps) {
    const double set_bytes = double(tokens_) * (kWidth + kQ + kK) * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "qk_norm inputs");
    for (int s = 0; s < n; ++s) {
      qkv_.push_back(empty({tokens_, kWidth}, dtype_of<T>));
      q_.push_back(qkv_.back().narrow_last(0, kQ));
      k_.push_back(qkv_.back().narrow_last(kQ, kK));
    }
    q_out_.resize(n);
    k_out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(qkv_.size()); }
  void randomize(uint64_t seed) override {
    const float mean = Cfg::gemma ? 0.f : 1.f;  // Gemma: 1 + w ~ 1
    fill_normal(module_.q_weight, mix_seed(seed, 0), mean, 0.1f);
    fill_normal(module_.k_weight, mix_seed(seed, 1), mean, 0.1f);
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(qkv_[s], seed); }
  void run(int s) override { std::tie(q_out_[s], k_out_[s]) = module_.forward(q_[s], k_[s]); }
  std::vector<Tensor> inputs(int s) override { return {module_.q_weight, module_.k_weight, qkv_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    namespace ref = fk::kernels::reference;
    Tensor q_ref = empty({tokens_, kQ}, DType::kF32);
    Tensor k_ref = empty({tokens_, kK}, DType::kF32);
    const float eps = static_cast<float>(Cfg::eps);
    constexpr float kOffset = Cfg::gemma ? 1.f : 0.f;
    // Full width: one "head" of all heads' width (the reference does not share the kernel's shape).
    constexpr bool kFull = FullWidthQKNorm<Cfg>::value;
    ref::qk_norm_ref<T>(q_ref.data<float>(), q_[s].data<T>(), kWidth, module_.q_weight.template data<T>(), tokens_,
                        kFull ? 1 : Cfg::num_heads, static_cast<int>(qk_norm_q_width<Cfg>()), eps, current_stream(), kOffset);
    ref::qk_norm_ref<T>(k_ref.data<float>(), k_[s].data<T>(), kWidth, module_.k_weight.template data<T>(), tokens_,
                        kFull ? 1 : Cfg::num_kv_heads, static_cast<int>(qk_norm_k_width<Cfg>()), eps, current_stream(), kOffset);
    FK_CHECK_LAUNCH();
    const Tolerance tol = default_tolerance(dtype_of<T>);
    return {{"q_out", q_out_[s], q_ref, tol}, {"k_out", k_out_[s], k_ref, tol}};
  }
  Cost cost() const override {
    const double elems = double(tokens_) * (kQ + kK);
    return {elems * 4, elems * sizeof(T) * 2 + double(qk_norm_q_width<Cfg>() + qk_norm_k_width<Cfg>()) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int64_t kQ = Cfg::num_heads * Cfg::head_dim, kK = Cfg::num_kv_heads * Cfg::head_dim;
  static constexpr int64_t kWidth = kQ + 2 * kK;
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> qkv_, q_, k_, q_out_, k_out_;
};

}  // namespace fk::tasks
