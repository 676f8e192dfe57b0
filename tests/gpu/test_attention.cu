// Attention: cuDNN varlen prefill and the split-KV flash-decoding kernel against the fp32
// reference, and both harnesses through the task protocol.
#include <cmath>
#include <vector>

#include "fk/kernels/attention.h"
#include "fk/kernels/flash_decode.cuh"
#include "fk/kernels/reference/attention_ref.cuh"
#include "fk/tasks/attention.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128;

#define FK_REQUIRE_CUDNN()                                                                           \
  do {                                                                                               \
    if (!fk::kernels::cudnn_attention_available()) GTEST_SKIP() << "cuDNN SDPA not available here"; \
  } while (0)

void check_prefill(const std::vector<int64_t>& lens, bool allow_dense = true) {
  std::vector<int32_t> cu{0}, begin, len;
  int64_t max_len = 0;
  for (int64_t l : lens) {
    for (int64_t p = 0; p < l; ++p) {
      begin.push_back(cu.back());
      len.push_back(static_cast<int32_t>(p + 1));
    }
    cu.push_back(static_cast<int32_t>(cu.back() + l));
    max_len = std::max(max_len, l);
  }
  const int64_t total = cu.back();
  Tensor q = empty({total, kHq, kD}, DType::kBF16), k = empty({total, kHkv, kD}, DType::kBF16),
         v = empty({total, kHkv, kD}, DType::kBF16), out = empty({total, kHq, kD}, DType::kBF16);
  fill_normal(q, 1);
  fill_normal(k, 2);
  fill_normal(v, 3);
  poison(out);
  Tensor cu_d = to_device(cu, {static_cast<int64_t>(cu.size())});
  Tensor begin_d = to_device(begin, {total}), len_d = to_device(len, {total});
  const float scale = 1.f / std::sqrt(float(kD));
  fk::kernels::VarlenAttentionArgs a;
  a.out = out.data_ptr();
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.cu_seqlens_q = a.cu_seqlens_k = cu_d.data<int32_t>();
  a.batch = static_cast<int64_t>(lens.size());
  a.max_seqlen_q = a.max_seqlen_k = max_len;
  a.total_q = a.total_k = total;
  a.num_heads = kHq;
  a.num_kv_heads = kHkv;
  a.head_dim = kD;
  a.softmax_scale = scale;
  a.allow_dense = allow_dense;
  fk::kernels::varlen_attention_cudnn(a, current_stream());
  Tensor ref = empty({total, kHq, kD}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), kHq * kD, k.data<bf16>(), v.data<bf16>(),
                                              kHkv * kD, begin_d.data<int32_t>(), len_d.data<int32_t>(), total, kHq,
                                              kHkv, kD, scale, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 1.0));  // see FlashAttnPrefillInstance
}

TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_b1_s1024) { FK_REQUIRE_GPU(); FK_REQUIRE_CUDNN(); check_prefill({1024}); }
// Equal lengths: the dense graph (Note [cuDNN SDPA, equal lengths]); b1_s1024 above takes it too.
TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_b3_s320_equal) { FK_REQUIRE_GPU(); FK_REQUIRE_CUDNN(); check_prefill({320, 320, 320}); }
TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_b3_s320_equal_ragged) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill({320, 320, 320}, /*allow_dense=*/false);
}
TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_b4_varlen) { FK_REQUIRE_GPU(); FK_REQUIRE_CUDNN(); check_prefill({700, 513, 1, 64}); }
TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_b16_s128) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill(fk::tasks::prefill_seq_lens(16, 128));
}

template <int Hq, int Hkv> void check_decode(int64_t batch, int64_t max_len, const std::vector<int32_t>& lens) {
  Tensor q = empty({batch, Hq, kD}, DType::kBF16), out = empty({batch, Hq, kD}, DType::kBF16);
  Tensor kc = empty({batch, max_len, Hkv, kD}, DType::kBF16), vc = empty({batch, max_len, Hkv, kD}, DType::kBF16);
  fill_normal(q, 4);
  fill_normal(kc, 5);
  fill_normal(vc, 6);
  poison(out);
  std::vector<int32_t> begin;
  for (int64_t b = 0; b < batch; ++b) begin.push_back(static_cast<int32_t>(b * max_len));
  Tensor lens_d = to_device(lens, {batch}), begin_d = to_device(begin, {batch});
  const float scale = 1.f / std::sqrt(float(kD));
  const size_t ws_bytes = fk::kernels::flash_decode_workspace_bytes<Hq, Hkv, kD>(batch, max_len);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4 + 1)}, DType::kF32);
  fk::kernels::flash_decode<Hq, Hkv, kD, bf16>(out.data<bf16>(), q.data<bf16>(), kc.data<bf16>(), vc.data<bf16>(),
                                              lens_d.data<int32_t>(), batch, max_len, scale, ws.data_ptr(),
                                              current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({batch, Hq, kD}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), Hq * kD, kc.data<bf16>(), vc.data<bf16>(),
                                              Hkv * kD, begin_d.data<int32_t>(), lens_d.data<int32_t>(), batch, Hq, Hkv,
                                              kD, scale, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 0.05));
}

TEST(Kernels, FlashDecode_bf16_hq32_hkv8_d128_b1_kv1024) { FK_REQUIRE_GPU(); check_decode<32, 8>(1, 1024, {1024}); }
TEST(Kernels, FlashDecode_bf16_hq32_hkv8_d128_b1_kv32768) { FK_REQUIRE_GPU(); check_decode<32, 8>(1, 32768, {32768}); }
TEST(Kernels, FlashDecode_bf16_hq32_hkv8_d128_b4_ragged) {
  FK_REQUIRE_GPU();
  check_decode<32, 8>(4, 5000, {5000, 1, 37, 4093});
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d128_b8_kv8192) {
  FK_REQUIRE_GPU();
  check_decode<64, 8>(8, 8192, {8192, 8000, 7000, 6000, 5000, 4000, 3000, 2000});
}
TEST(Kernels, FlashDecode_bf16_hq28_hkv4_d128_b64_kv1024) {
  FK_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int b = 0; b < 64; ++b) lens.push_back(1024 - 7 * b);
  check_decode<28, 4>(64, 1024, lens);
}

// Harnesses, with modules shaped like templates/flash_attn_{prefill,decode}.cu.mustache.
struct AttnCfg {
  static constexpr int64_t num_heads = kHq;
  static constexpr int64_t num_kv_heads = kHkv;
  static constexpr int64_t head_dim = kD;
  static constexpr double softmax_scale = 0.088388347648318447;
  using scalar_t = bf16;
};
class TestPrefill {
 public:
  TestPrefill(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return fk::tasks::flash_attn_prefill_forward<AttnCfg>(q, k, v, cq, ck, mq, mk);
  }
};
class TestDecode {
 public:
  TestDecode(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens) {
    return fk::tasks::flash_attn_decode_forward<AttnCfg>(q, kc, vc, lens);
  }
};
ShapeCase prefill_case(int64_t b, int64_t s) {
  return {"b" + std::to_string(b) + "_s" + std::to_string(s), "prefill", {{"batch", b}, {"seq_len", s}}};
}
ShapeCase decode_case(int64_t b, int64_t l) {
  return {"b" + std::to_string(b) + "_kv" + std::to_string(l), "decode", {{"batch", b}, {"kv_len", l}}};
}

TEST(Tasks, FlashAttnPrefill_bf16_hq32_hkv8_d128_b4_s2048) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<TestPrefill, AttnCfg> inst(prefill_case(4, 2048));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnPrefill_bf16_hq32_hkv8_d128_b1_s4096) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<TestPrefill, AttnCfg> inst(prefill_case(1, 4096));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnDecode_bf16_hq32_hkv8_d128_b8_kv8192) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<TestDecode, AttnCfg> inst(decode_case(8, 8192));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnDecode_bf16_hq32_hkv8_d128_b1_kv32768) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<TestDecode, AttnCfg> inst(decode_case(1, 32768));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
