// cross_attention (issue 22): encoder-decoder attention over a cache written once, through the
// task harness at Whisper-, BERT- and GQA-shaped constants: decode steps (one query per sequence:
// flash decoding over the padded cache), first steps that write the cache (cuDNN SDPA with
// seqused_k, dense and ragged), the cache rows checked exactly; then the module's contract: a
// cache outlives calls, a call before any write and a batch other than the cached one are refused.
#include <cmath>
#include <string>

#include "fk/kernels/attention.h"
#include "fk/tasks/cross_attention.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

#define FK_REQUIRE_CUDNN()                                                                           \
  do {                                                                                               \
    if (!fk::kernels::cudnn_attention_available()) GTEST_SKIP() << "cuDNN SDPA not available here"; \
  } while (0)

template <int64_t Hq, int64_t Hkv, int64_t D, class T> struct XCfg {
  static constexpr int64_t num_heads = Hq, num_kv_heads = Hkv, head_dim = D;
  static_assert(D == 64 || D == 128, "head_dim^-0.5 spelled for 64 and 128");
  static constexpr double softmax_scale = D == 64 ? 0.125 : 0.088388347648318447;
  using scalar_t = T;
};

/// The generated module's behaviour (templates/cross_attention.h.mustache), for the harness.
template <class Cfg> struct TestCrossAttention {
  TestCrossAttention(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& cu_k, int64_t max_q,
                 int64_t max_k) {
    FK_CHECK(k.defined() == v.defined(), "k and v");
    if (k.defined()) fk::tasks::cross_cache_write<Cfg>(cache, k, v, cu_k, max_k);
    return fk::tasks::cross_attention_over_cache<Cfg>(cache, q, cu_q, max_q);
  }
  fk::tasks::CrossKVCache cache;
};

template <class Cfg> void check_case(const ShapeCase& c) {
  fk::tasks::CrossAttentionInstance<TestCrossAttention<Cfg>, Cfg> inst(c);
  check_task_instance(inst);
}

ShapeCase xcase(const std::string& name, int64_t b, int64_t q, int64_t kv, bool write, bool ragged) {
  ShapeCase c{name, write ? "prefill" : "decode", {{"batch", b}, {"q_len", q}, {"kv_len", kv}, {"write", write ? 1 : 0}}};
  c.dims.push_back(ragged ? std::pair<std::string, int64_t>{"ragged", 23} : std::pair<std::string, int64_t>{"uniform", 1});
  return c;
}

using Whisper = XCfg<20, 20, 64, bf16>;  // whisper-large-v3's decoder: 20 heads of 64 over 1500 frames
using Bert = XCfg<12, 12, 64, f16>;
using Gqa = XCfg<16, 4, 128, bf16>;

TEST(Harness, CrossAttention_bf16_whisper_decode_b8_kv1500) {
  FK_REQUIRE_GPU();
  check_case<Whisper>(xcase("b8_q1_kv1500", 8, 1, 1500, false, false));
}
TEST(Harness, CrossAttention_bf16_whisper_decode_b32_ragged) {
  FK_REQUIRE_GPU();
  check_case<Whisper>(xcase("b32_q1_kv1500_ragged", 32, 1, 1500, false, true));
}
TEST(Harness, CrossAttention_bf16_whisper_write_b2_q4) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_case<Whisper>(xcase("b2_q4_kv1500_write", 2, 4, 1500, true, false));
}
TEST(Harness, CrossAttention_f16_bert_write_b4_q128_kv512) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_case<Bert>(xcase("b4_q128_kv512_write", 4, 128, 512, true, false));
}
TEST(Harness, CrossAttention_f16_bert_write_b8_ragged) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_case<Bert>(xcase("b8_q128_kv512_write_ragged", 8, 128, 512, true, true));
}
TEST(Harness, CrossAttention_bf16_gqa_d128_write_ragged_and_decode) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_case<Gqa>(xcase("b8_q64_kv300_write_ragged", 8, 64, 300, true, true));
  check_case<Gqa>(xcase("b16_q1_kv300_ragged", 16, 1, 300, false, true));
}

// The cache outlives calls: a multi-query call and a decode call after one write both see the
// written keys (checked against the packed-k/v reference), and the module refuses misuse.
TEST(Kernels, CrossAttentionCacheServesLaterCalls) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  using Cfg = Bert;
  TestCrossAttention<Cfg> m(12, 12, 64);
  Tensor q1 = empty({1, 12, 64}, DType::kF16);
  fill_normal(q1, 3);
  Tensor cu1 = to_device(std::vector<int32_t>{0, 1}, {2});
  EXPECT_THROW(m.forward(q1, Tensor(), Tensor(), cu1, cu1, 1, 1), std::exception);  // nothing cached yet

  const std::vector<int32_t> lens_k{37, 100, 5};
  std::vector<int32_t> cu_k{0};
  for (int32_t l : lens_k) cu_k.push_back(cu_k.back() + l);
  Tensor k = empty({cu_k.back(), 12, 64}, DType::kF16), v = empty_like(k);
  fill_normal(k, 4);
  fill_normal(v, 5);
  Tensor cuk = to_device(cu_k, {4});
  // First call: 3 sequences of 2, 7 and 1 queries, writing the cache.
  const std::vector<int32_t> cu_q{0, 2, 9, 10};
  Tensor q = empty({10, 12, 64}, DType::kF16);
  fill_normal(q, 6);
  Tensor cuq = to_device(cu_q, {4});
  (void)m.forward(q, k, v, cuq, cuk, 7, 100);
  // Later calls attend to the cache: one more multi-query call, then a decode step.
  Tensor out = m.forward(q, Tensor(), Tensor(), cuq, cuk, 7, 100);
  Tensor qd = empty({3, 12, 64}, DType::kF16);
  fill_normal(qd, 7);
  Tensor cud = to_device(std::vector<int32_t>{0, 1, 2, 3}, {4});
  Tensor outd = m.forward(qd, Tensor(), Tensor(), cud, Tensor(), 1, 0);
  auto check = [&](const Tensor& qq, const std::vector<int32_t>& cq, const Tensor& got) {
    std::vector<int32_t> begin, len;
    for (size_t b = 0; b < lens_k.size(); ++b)
      for (int32_t i = cq[b]; i < cq[b + 1]; ++i) {
        begin.push_back(cu_k[b]);
        len.push_back(lens_k[b]);
      }
    const int64_t n = static_cast<int64_t>(begin.size());
    Tensor rb = to_device(begin, {n}), rl = to_device(len, {n});
    Tensor ref = empty({n, 12, 64}, DType::kF32);
    fk::kernels::reference::attention_ref<f16>(ref.data<float>(), qq.data<f16>(), 12 * 64, k.data<f16>(), v.data<f16>(), 12 * 64,
                                               rb.data<int32_t>(), rl.data<int32_t>(), n, 12, 12, 64, 0.125f, current_stream(),
                                               0.f, nullptr);
    FK_CHECK_LAUNCH();
    FK_EXPECT_CLOSE(got, ref, fk::tasks::matmul_tolerance(DType::kF16, 0.8 * std::sqrt(2.72 / 5)));
  };
  check(q, cu_q, out);
  check(qd, {0, 1, 2, 3}, outd);
  // A batch other than the cached one, and k without v, are refused.
  Tensor cu2 = to_device(std::vector<int32_t>{0, 1, 2}, {3});
  EXPECT_THROW(m.forward(qd.narrow_first(0, 2), Tensor(), Tensor(), cu2, Tensor(), 1, 0), std::exception);
  EXPECT_THROW(m.forward(q, k, Tensor(), cuq, cuk, 7, 100), std::exception);
}

// k and v as the column blocks of one fused kv projection output [Tk, 2 * Hkv * D] (row stride
// 2 * Hkv * D): the write reads the strided rows, no contiguous copies needed.
TEST(Kernels, CrossAttentionWritesStridedKV) {
  FK_REQUIRE_GPU();
  using Cfg = Whisper;
  constexpr int64_t W = 20 * 64;
  TestCrossAttention<Cfg> m(20, 20, 64);
  const std::vector<int32_t> cu_k{0, 300, 301, 700};
  Tensor kv = empty({700, 2 * W}, DType::kBF16);
  fill_normal(kv, 8);
  Tensor k = kv.as_strided({700, 20, 64}, {2 * W, 64, 1}), v = kv.as_strided({700, 20, 64}, {2 * W, 64, 1}, W);
  Tensor kc = empty({700, 20, 64}, DType::kBF16), vc = empty({700, 20, 64}, DType::kBF16);
  copy_strided_(kc, k);
  copy_strided_(vc, v);
  Tensor q = empty({3, 20, 64}, DType::kBF16);
  fill_normal(q, 9);
  Tensor cuq = to_device(std::vector<int32_t>{0, 1, 2, 3}, {4}), cuk = to_device(cu_k, {4});
  Tensor got = m.forward(q, k, v, cuq, cuk, 1, 400);
  TestCrossAttention<Cfg> m2(20, 20, 64);
  Tensor want = m2.forward(q, kc, vc, cuq, cuk, 1, 400);
  FK_EXPECT_CLOSE(got, fk::tasks::to_f32(want), Tolerance{});  // the same kernel on the same values: bitwise
  // A row stride that is not a multiple of 16 bytes is refused.
  Tensor odd = empty({700, 2 * W + 4}, DType::kBF16);
  EXPECT_THROW(m.forward(q, odd.as_strided({700, 20, 64}, {2 * W + 4, 64, 1}), odd.as_strided({700, 20, 64}, {2 * W + 4, 64, 1}, W),
                         cuq, cuk, 1, 400),
               std::exception);
}

}  // namespace
}  // namespace fk::testing
