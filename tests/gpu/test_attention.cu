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

// window > 0: a sliding window of that many keys (Note [Sliding window] in fk/tasks/attention.h);
// the reference gets it as each row's key range.
template <int Hq = kHq, int Hkv = kHkv, int D = kD>
void check_prefill(const std::vector<int64_t>& lens, bool allow_dense = true, int window = 0) {
  std::vector<int32_t> cu{0}, begin, len;
  int64_t max_len = 0;
  for (int64_t l : lens) {
    for (int64_t p = 0; p < l; ++p) {
      const auto [first, count] = fk::tasks::window_range(p, window);
      begin.push_back(static_cast<int32_t>(cu.back() + first));
      len.push_back(static_cast<int32_t>(count));
    }
    cu.push_back(static_cast<int32_t>(cu.back() + l));
    max_len = std::max(max_len, l);
  }
  const int64_t total = cu.back();
  Tensor q = empty({total, Hq, D}, DType::kBF16), k = empty({total, Hkv, D}, DType::kBF16),
         v = empty({total, Hkv, D}, DType::kBF16), out = empty({total, Hq, D}, DType::kBF16);
  fill_normal(q, 1);
  fill_normal(k, 2);
  fill_normal(v, 3);
  poison(out);
  Tensor cu_d = to_device(cu, {static_cast<int64_t>(cu.size())});
  Tensor begin_d = to_device(begin, {total}), len_d = to_device(len, {total});
  const float scale = 1.f / std::sqrt(float(D));
  fk::kernels::VarlenAttentionArgs a;
  a.out = out.data_ptr();
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.cu_seqlens_q = a.cu_seqlens_k = cu_d.data<int32_t>();
  a.batch = static_cast<int64_t>(lens.size());
  a.max_seqlen_q = a.max_seqlen_k = max_len;
  a.total_q = a.total_k = total;
  a.num_heads = Hq;
  a.num_kv_heads = Hkv;
  a.head_dim = D;
  a.softmax_scale = scale;
  a.allow_dense = allow_dense;
  a.window = window;
  fk::kernels::varlen_attention_cudnn(a, current_stream());
  Tensor ref = empty({total, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), Hq * D, k.data<bf16>(), v.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), len_d.data<int32_t>(), total, Hq,
                                              Hkv, D, scale, current_stream());
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
// Sliding windows (Phi-3: 2047 keys, head_dim 96; Gemma 3: 512 keys, head_dim 256), ragged and
// dense graphs; a window of 1 attends to the token itself only.
TEST(Kernels, AttnPrefill_bf16_hq32_hkv32_d96_sw2047_b2_varlen) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<32, 32, 96>({4096, 2500}, true, 2047);
}
TEST(Kernels, AttnPrefill_bf16_hq32_hkv32_d96_sw2047_b2_equal_dense) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<32, 32, 96>({3000, 3000}, true, 2047);
}
TEST(Kernels, AttnPrefill_bf16_hq4_hkv1_d256_sw512_b3_varlen) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<4, 1, 256>({1500, 511, 1025}, true, 512);
}
TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_sw1_ragged) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill({300, 17}, false, 1);
}

// window > 0: the last `window` keys; softcap > 0: soft-capped scores (Note [Decode window and
// soft-capping] in fk/kernels/flash_decode.cuh).
template <int Hq, int Hkv, int D = kD>
void check_decode(int64_t batch, int64_t max_len, const std::vector<int32_t>& lens, int window = 0, float softcap = 0.f) {
  Tensor q = empty({batch, Hq, D}, DType::kBF16), out = empty({batch, Hq, D}, DType::kBF16);
  Tensor kc = empty({batch, max_len, Hkv, D}, DType::kBF16), vc = empty({batch, max_len, Hkv, D}, DType::kBF16);
  fill_normal(q, 4);
  fill_normal(kc, 5);
  fill_normal(vc, 6);
  poison(out);
  if (softcap > 0.f) fill_normal(q, 4, 0.f, 4.f);  // scores ~ N(0, 16): the cap binds
  std::vector<int32_t> begin, rlen;
  for (int64_t b = 0; b < batch; ++b) {
    const auto [first, count] = lens[b] > 0 ? fk::tasks::window_range(lens[b] - 1, window) : std::pair<int64_t, int64_t>{0, 0};
    begin.push_back(static_cast<int32_t>(b * max_len + first));
    rlen.push_back(static_cast<int32_t>(count));
  }
  Tensor lens_d = to_device(lens, {batch}), begin_d = to_device(begin, {batch}), rlen_d = to_device(rlen, {batch});
  const float scale = 1.f / std::sqrt(float(D));
  const size_t ws_bytes = fk::kernels::flash_decode_workspace_bytes<Hq, Hkv, D>(batch, max_len, 0, window);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4 + 1)}, DType::kF32);
  fk::kernels::flash_decode<Hq, Hkv, D, bf16>(out.data<bf16>(), q.data<bf16>(), kc.data<bf16>(), vc.data<bf16>(),
                                             lens_d.data<int32_t>(), batch, max_len, scale, ws.data_ptr(),
                                             current_stream(), 0, window, softcap);
  FK_CHECK_LAUNCH();
  Tensor ref = empty({batch, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), Hq * D, kc.data<bf16>(), vc.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), rlen_d.data<int32_t>(), batch, Hq, Hkv,
                                              D, scale, current_stream(), softcap);
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
// Head sizes whose D/8 is not a power of two (Phi-3's 96), D 256 (Gemma), windows, soft-capping.
TEST(Kernels, FlashDecode_bf16_hq32_hkv32_d96_b4_ragged) {
  FK_REQUIRE_GPU();
  check_decode<32, 32, 96>(4, 5000, {5000, 1, 37, 4093});
}
TEST(Kernels, FlashDecode_bf16_hq32_hkv32_d96_sw2047_b4_ragged) {
  FK_REQUIRE_GPU();
  check_decode<32, 32, 96>(4, 5000, {5000, 1, 2047, 2048}, 2047);
}
TEST(Kernels, FlashDecode_bf16_hq4_hkv1_d256_sw512_b3_kv32768) {
  FK_REQUIRE_GPU();
  check_decode<4, 1, 256>(3, 32768, {32768, 600, 100}, 512);
}
TEST(Kernels, FlashDecode_bf16_hq16_hkv8_d256_softcap50_b2_kv4096) {
  FK_REQUIRE_GPU();
  check_decode<16, 8, 256>(2, 4096, {4096, 1000}, 0, 50.f);
}
TEST(Kernels, FlashDecode_bf16_hq16_hkv8_d256_sw4096_softcap50_b2_kv8192) {
  FK_REQUIRE_GPU();
  check_decode<16, 8, 256>(2, 8192, {8192, 5000}, 4096, 50.f);
}

// Harnesses, with modules shaped like templates/flash_attn_{prefill,decode}.cu.mustache.
struct AttnCfg {
  static constexpr int64_t num_heads = kHq;
  static constexpr int64_t num_kv_heads = kHkv;
  static constexpr int64_t head_dim = kD;
  static constexpr double softmax_scale = 0.088388347648318447;
  static constexpr int64_t sliding_window = 0;
  static constexpr double softcap = 0;
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
// Windowed tasks (Phi-3 shape): the harness's reference ranges and costs follow the window.
struct WindowCfg {
  static constexpr int64_t num_heads = 32;
  static constexpr int64_t num_kv_heads = 32;
  static constexpr int64_t head_dim = 96;
  static constexpr double softmax_scale = 0.10206207261596575;
  static constexpr int64_t sliding_window = 2047;
  static constexpr double softcap = 0;
  using scalar_t = bf16;
};
class WindowPrefill {
 public:
  WindowPrefill(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return fk::tasks::flash_attn_prefill_forward<WindowCfg>(q, k, v, cq, ck, mq, mk);
  }
};
class WindowDecode {
 public:
  WindowDecode(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens) {
    return fk::tasks::flash_attn_decode_forward<WindowCfg>(q, kc, vc, lens);
  }
};
TEST(Tasks, FlashAttnPrefill_bf16_hq32_hkv32_d96_sw2047_b1_s4096) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<WindowPrefill, WindowCfg> inst(prefill_case(1, 4096));
  check_task_instance(inst);
  // (query, key) pairs inside the window: 2047 * 2048 / 2 for the first 2047 tokens, then 2047 each.
  EXPECT_DOUBLE_EQ(inst.cost().flops, 4.0 * (2047.0 * 2048 / 2 + (4096.0 - 2047) * 2047) * 96 * 32);
}
TEST(Tasks, FlashAttnDecode_bf16_hq32_hkv32_d96_sw2047_b8_kv4096) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<WindowDecode, WindowCfg> inst(decode_case(8, 4096));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnDecode_bf16_hq32_hkv8_d128_b1_kv32768) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<TestDecode, AttnCfg> inst(decode_case(1, 32768));
  check_task_instance(inst);
}

// Gemma 2 decode through the harness: window 4096, soft-capping 50, query_pre_attn_scalar 256.
struct CapCfg {
  static constexpr int64_t num_heads = 16;
  static constexpr int64_t num_kv_heads = 8;
  static constexpr int64_t head_dim = 256;
  static constexpr double softmax_scale = 0.0625;
  static constexpr int64_t sliding_window = 4096;
  static constexpr double softcap = 50;
  using scalar_t = bf16;
};
class CapDecode {
 public:
  CapDecode(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens) {
    return fk::tasks::flash_attn_decode_forward<CapCfg>(q, kc, vc, lens);
  }
};
class CapPrefill {
 public:
  CapPrefill(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return fk::tasks::flash_attn_prefill_forward<CapCfg>(q, k, v, cq, ck, mq, mk);
  }
};
// Soft-capped prefill runs our own kernel (flash_prefill.cuh); mixed lengths, the window active.
TEST(Tasks, FlashAttnPrefill_bf16_hq16_hkv8_d256_sw4096_cap50_b4_s8192) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnPrefillInstance<CapPrefill, CapCfg> inst(prefill_case(4, 8192));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnDecode_bf16_hq16_hkv8_d256_sw4096_cap50_b8_kv8192) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<CapDecode, CapCfg> inst(decode_case(8, 8192));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
