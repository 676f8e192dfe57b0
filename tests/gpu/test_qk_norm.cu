// qk_norm: baseline kernel vs the fp64 reference (q and k as strided views of qkv), and the harness.
#include "fk/tasks/qk_norm.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kHq, int kHkv, int kD, bool kGemma = false> void check_qk_norm(int64_t tokens) {
  constexpr int64_t kQ = kHq * kD, kK = kHkv * kD, kW = kQ + 2 * kK;
  const float eps = 1e-6f;
  Tensor qkv = empty({tokens, kW}, dtype_of<T>);
  Tensor qw = empty({kD}, dtype_of<T>), kw = empty({kD}, dtype_of<T>);
  fill_normal(qkv, 21);
  const float mean = kGemma ? 0.f : 1.f;  // GemmaRMSNorm multiplies by 1 + w
  fill_normal(qw, 22, mean, 0.1f);
  fill_normal(kw, 23, mean, 0.1f);
  Tensor q_out = empty({tokens, kQ}, dtype_of<T>), k_out = empty({tokens, kK}, dtype_of<T>);
  poison(q_out);
  poison(k_out);
  const T* q = qkv.data<T>();
  const T* k = q + kQ;
  fk::kernels::qk_norm<T, kHq, kHkv, kD, kGemma>(q_out.data<T>(), kQ, k_out.data<T>(), kK, q, kW, k, kW, qw.data<T>(),
                                         kw.data<T>(), tokens, eps, current_stream());
  FK_CHECK_LAUNCH();
  Tensor q_ref = empty({tokens, kQ}, DType::kF32), k_ref = empty({tokens, kK}, DType::kF32);
  const float offset = kGemma ? 1.f : 0.f;
  fk::kernels::reference::qk_norm_ref<T>(q_ref.data<float>(), q, kW, qw.data<T>(), tokens, kHq, kD, eps, current_stream(), offset);
  fk::kernels::reference::qk_norm_ref<T>(k_ref.data<float>(), k, kW, kw.data<T>(), tokens, kHkv, kD, eps, current_stream(), offset);
  FK_CHECK_LAUNCH();
  const Tolerance tol = default_tolerance(dtype_of<T>);
  FK_EXPECT_CLOSE(q_out, q_ref, tol);
  FK_EXPECT_CLOSE(k_out, k_ref, tol);
}

#define FK_QKN_TESTS(D, HQ, HKV, HD)                                                                                   \
  TEST(Kernels, QKNorm_##D##_hq##HQ##_hkv##HKV##_d##HD##_t1) { FK_REQUIRE_GPU(); check_qk_norm<D, HQ, HKV, HD>(1); }   \
  TEST(Kernels, QKNorm_##D##_hq##HQ##_hkv##HKV##_d##HD##_t7) { FK_REQUIRE_GPU(); check_qk_norm<D, HQ, HKV, HD>(7); }   \
  TEST(Kernels, QKNorm_##D##_hq##HQ##_hkv##HKV##_d##HD##_t256) { FK_REQUIRE_GPU(); check_qk_norm<D, HQ, HKV, HD>(256); } \
  TEST(Kernels, QKNorm_##D##_hq##HQ##_hkv##HKV##_d##HD##_t4096) { FK_REQUIRE_GPU(); check_qk_norm<D, HQ, HKV, HD>(4096); }

FK_QKN_TESTS(bf16, 32, 8, 128)
FK_QKN_TESTS(bf16, 40, 8, 128)
FK_QKN_TESTS(f16, 16, 8, 64)
FK_QKN_TESTS(f32, 32, 8, 128)

// GemmaRMSNorm q/k norm (Gemma 3 1B: 4 query heads, 1 KV head of 256; 27B-like 32/16/128).
TEST(Kernels, GemmaQKNorm_bf16_hq4_hkv1_d256_t7) { FK_REQUIRE_GPU(); check_qk_norm<bf16, 4, 1, 256, true>(7); }
TEST(Kernels, GemmaQKNorm_bf16_hq4_hkv1_d256_t4096) { FK_REQUIRE_GPU(); check_qk_norm<bf16, 4, 1, 256, true>(4096); }
TEST(Kernels, GemmaQKNorm_bf16_hq32_hkv16_d128_t16384) { FK_REQUIRE_GPU(); check_qk_norm<bf16, 32, 16, 128, true>(16384); }

// Full-width q/k norm (OLMo-2: one RMSNorm over each token's q row and its k row; Note
// [Full-width q/k norm]); the reference is the per-head one with a single head of the row's width.
template <class T, int kQ, int kK> void check_qk_norm_full(int64_t tokens) {
  constexpr int64_t kW = kQ + 2 * kK;
  const float eps = 1e-6f;
  Tensor qkv = empty({tokens, kW}, dtype_of<T>);
  Tensor qw = empty({kQ}, dtype_of<T>), kw = empty({kK}, dtype_of<T>);
  fill_normal(qkv, 31);
  fill_normal(qw, 32, 1.f, 0.1f);
  fill_normal(kw, 33, 1.f, 0.1f);
  Tensor q_out = empty({tokens, kQ}, dtype_of<T>), k_out = empty({tokens, kK}, dtype_of<T>);
  poison(q_out);
  poison(k_out);
  const T* q = qkv.data<T>();
  const T* k = q + kQ;
  fk::kernels::qk_norm_full<T, kQ, kK>(q_out.data<T>(), kQ, k_out.data<T>(), kK, q, kW, k, kW, qw.data<T>(), kw.data<T>(),
                                       tokens, eps, current_stream());
  FK_CHECK_LAUNCH();
  Tensor q_ref = empty({tokens, kQ}, DType::kF32), k_ref = empty({tokens, kK}, DType::kF32);
  fk::kernels::reference::qk_norm_ref<T>(q_ref.data<float>(), q, kW, qw.data<T>(), tokens, 1, kQ, eps, current_stream());
  fk::kernels::reference::qk_norm_ref<T>(k_ref.data<float>(), k, kW, kw.data<T>(), tokens, 1, kK, eps, current_stream());
  FK_CHECK_LAUNCH();
  const Tolerance tol = default_tolerance(dtype_of<T>);
  FK_EXPECT_CLOSE(q_out, q_ref, tol);
  FK_EXPECT_CLOSE(k_out, k_ref, tol);
}

// OLMo-2 7B (32 x 128 both), a 40/8-head 32B-like shape (q 5120, k 1024: 2.5 vectors per thread)
// and fp16.
TEST(Kernels, QKNormFull_bf16_q4096_k4096_t1) { FK_REQUIRE_GPU(); check_qk_norm_full<bf16, 4096, 4096>(1); }
TEST(Kernels, QKNormFull_bf16_q4096_k4096_t7) { FK_REQUIRE_GPU(); check_qk_norm_full<bf16, 4096, 4096>(7); }
TEST(Kernels, QKNormFull_bf16_q4096_k4096_t4096) { FK_REQUIRE_GPU(); check_qk_norm_full<bf16, 4096, 4096>(4096); }
TEST(Kernels, QKNormFull_bf16_q5120_k1024_t33) { FK_REQUIRE_GPU(); check_qk_norm_full<bf16, 5120, 1024>(33); }
TEST(Kernels, QKNormFull_f16_q5120_k5120_t256) { FK_REQUIRE_GPU(); check_qk_norm_full<f16, 5120, 5120>(256); }

struct QKCfg {
  static constexpr int64_t num_heads = 32, num_kv_heads = 8, head_dim = 128;
  static constexpr double eps = 1e-6;
  static constexpr bool gemma = false;
  using scalar_t = bf16;
};
class TestQKNorm {  // shaped like templates/qk_norm.cu.mustache
 public:
  TestQKNorm(int64_t, int64_t, int64_t head_dim, double eps)
      : q_weight(empty({head_dim}, dtype_of<bf16>)), k_weight(empty({head_dim}, dtype_of<bf16>)), variance_epsilon(eps) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& q, const Tensor& k) {
    return fk::tasks::qk_norm_forward<QKCfg>(q, k, q_weight, k_weight, variance_epsilon);
  }
  Tensor q_weight, k_weight;
  double variance_epsilon;
};

TEST(Tasks, QKNorm_bf16_hq32_hkv8_d128_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::QKNormInstance<TestQKNorm, QKCfg> inst(tokens_case(7));
  check_task_instance(inst);
}
TEST(Tasks, QKNorm_bf16_hq32_hkv8_d128_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::QKNormInstance<TestQKNorm, QKCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
