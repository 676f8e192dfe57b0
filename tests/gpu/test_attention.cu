// Attention: cuDNN varlen prefill and the split-KV flash-decoding kernel (attention sinks
// included) against the fp32 reference, and both harnesses through the task protocol.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
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
// causal false: bidirectional (encoders), every query sees its whole sequence.
template <int Hq = kHq, int Hkv = kHkv, int D = kD>
void check_prefill(const std::vector<int64_t>& lens, bool allow_dense = true, int window = 0, bool causal = true) {
  std::vector<int32_t> cu{0}, begin, len;
  int64_t max_len = 0;
  for (int64_t l : lens) {
    for (int64_t p = 0; p < l; ++p) {
      const auto [first, count] = causal ? fk::tasks::window_range(p, window) : std::pair<int64_t, int64_t>{0, l};
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
  a.causal = causal;
  fk::kernels::varlen_attention_cudnn(a, current_stream());
  Tensor ref = empty({total, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), Hq * D, k.data<bf16>(), v.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), len_d.data<int32_t>(), total, Hq,
                                              Hkv, D, scale, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 1.0));  // see FlashAttnPrefillInstance
}

TEST(Kernels, AttnPrefill_bf16_hq32_hkv8_d128_b1_s1024) { FK_REQUIRE_GPU(); FK_REQUIRE_CUDNN(); check_prefill({1024}); }

// Bidirectional (encoder) attention at the issue's head dims: BERT-base 12 x 64 at 512 tokens,
// ViT-B/16 12 x 64 at 197, SigLIP-so400m 16 x 72, a 20 x 80 and a 12 x 96 shape, DINOv3-7B-like
// 32 x 128; equal lengths (the dense graph) and padded/variable lengths (ragged offsets).
TEST(Kernels, AttnBidir_bf16_hq12_hkv12_d64_b1_s512) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<12, 12, 64>({512}, true, 0, false);
}
TEST(Kernels, AttnBidir_bf16_hq12_hkv12_d64_b32_s197_equal) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<12, 12, 64>(std::vector<int64_t>(32, 197), true, 0, false);
}
TEST(Kernels, AttnBidir_bf16_hq12_hkv12_d64_b4_varlen) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<12, 12, 64>({512, 7, 300, 129}, true, 0, false);
}
TEST(Kernels, AttnBidir_bf16_hq16_hkv16_d72_b3_varlen) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<16, 16, 72>({729, 256, 1024}, true, 0, false);
}
TEST(Kernels, AttnBidir_bf16_hq20_hkv20_d80_b2_s577) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<20, 20, 80>({577, 577}, true, 0, false);
}
TEST(Kernels, AttnBidir_bf16_hq12_hkv12_d96_b2_ragged) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<12, 12, 96>({333, 1}, false, 0, false);
}
TEST(Kernels, AttnBidir_bf16_hq32_hkv32_d128_b1_s1029) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  check_prefill<32, 32, 128>({1029}, true, 0, false);
}
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

/// Attention-sink logits per query head, uniform in [lo, hi].
std::vector<float> random_sinks(int hq, uint64_t seed, float lo = -2.f, float hi = 4.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> s(hq);
  for (float& x : s) x = u(rng);
  return s;
}

// window > 0: the last `window` keys; softcap > 0: soft-capped scores (Note [Decode window and
// soft-capping] in fk/kernels/flash_decode.cuh); sinks: empty or Hq attention-sink logits (Note
// [Decode attention sinks]). want_split: -1 any, 0 the single-split path (the block writes out),
// 1 the split path (combine kernel); checked against flash_decode_split.
template <int Hq, int Hkv, int D = kD>
void check_decode(int64_t batch, int64_t max_len, const std::vector<int32_t>& lens, int window = 0, float softcap = 0.f,
                  const std::vector<float>& sinks = {}, int want_split = -1) {
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
  Tensor sinks_d;
  const float* sinks_p = nullptr;
  if (!sinks.empty()) {
    sinks_d = to_device(sinks, {Hq});
    sinks_p = sinks_d.data<float>();
  }
  const int splits = fk::kernels::flash_decode_split<Hq, Hkv, D>(batch, max_len, 0, window).splits;
  if (want_split >= 0) EXPECT_EQ(splits > 1, want_split == 1) << "splits " << splits;
  fk::kernels::flash_decode<Hq, Hkv, D, bf16>(out.data<bf16>(), q.data<bf16>(), kc.data<bf16>(), vc.data<bf16>(),
                                             lens_d.data<int32_t>(), batch, max_len, scale, ws.data_ptr(),
                                             current_stream(), 0, window, softcap, sinks_p);
  FK_CHECK_LAUNCH();
  Tensor ref = empty({batch, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), Hq * D, kc.data<bf16>(), vc.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), rlen_d.data<int32_t>(), batch, Hq, Hkv,
                                              D, scale, current_stream(), softcap, sinks_p);
  FK_CHECK_LAUNCH();
  const CompareResult r = compare(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 0.05));
  if (!sinks.empty())
    std::printf("[ flash_decode ] hq%d hkv%d d%d b%lld kv%lld window %d softcap %g sinks splits %d: %s\n", Hq, Hkv, D,
                static_cast<long long>(batch), static_cast<long long>(max_len), window, softcap, splits,
                r.summary().c_str());
  EXPECT_TRUE(r.passed) << r.summary();
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

// Attention sinks (gpt-oss: 64/8 heads, D 64, full and 128-key sliding layers; Note [Decode
// attention sinks]): the single-split path (short or windowed caches, large batches) and the
// split path with its combine kernel.
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_b1_kv1) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(1, 1, {1}, 0, 0.f, random_sinks(64, 1), 0);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sw128_sinks_b1_kv1) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(1, 1, {1}, 128, 0.f, random_sinks(64, 2), 0);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_b4_ragged_split) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(4, 5000, {5000, 1, 37, 4093}, 0, 0.f, random_sinks(64, 3), 1);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sw128_sinks_b4_ragged) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(4, 5000, {5000, 1, 128, 129}, 128, 0.f, random_sinks(64, 4), 0);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_b8_kv8192_split) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(8, 8192, {8192, 8000, 7000, 6000, 5000, 4000, 129, 1}, 0, 0.f, random_sinks(64, 5), 1);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sw128_sinks_b8_kv8192) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(8, 8192, {8192, 8000, 7000, 6000, 5000, 4000, 129, 1}, 128, 0.f, random_sinks(64, 6), 0);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_b128_kv200) {
  FK_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int b = 0; b < 128; ++b) lens.push_back(200 - b);
  check_decode<64, 8, 64>(128, 200, lens, 0, 0.f, random_sinks(64, 7), 0);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_b3_kv2048_split) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(3, 2048, {2048, 1, 129}, 0, 0.f, random_sinks(64, 8), 1);
}
// Sinks that dominate (logits 6..10; scores ~N(0, 1)), on both paths.
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_dominant_split) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(4, 5000, {5000, 1, 37, 4093}, 0, 0.f, random_sinks(64, 9, 6.f, 10.f), 1);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sw128_sinks_dominant) {
  FK_REQUIRE_GPU();
  check_decode<64, 8, 64>(4, 5000, {5000, 1, 37, 4093}, 128, 0.f, random_sinks(64, 10, 6.f, 10.f), 0);
}
// The capped domain (the sink is a post-cap logit) and another head size.
TEST(Kernels, FlashDecode_bf16_hq16_hkv8_d256_softcap50_sinks_b2_kv4096_split) {
  FK_REQUIRE_GPU();
  check_decode<16, 8, 256>(2, 4096, {4096, 1000}, 0, 50.f, random_sinks(16, 11), 1);
}
TEST(Kernels, FlashDecode_bf16_hq32_hkv8_d128_sinks_b128_kv100) {
  FK_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int b = 0; b < 128; ++b) lens.push_back(1 + (37 * b) % 100);
  check_decode<32, 8, 128>(128, 100, lens, 0, 0.f, random_sinks(32, 12), 0);
}

// The sinks must change the result, a -1e30 sink must not, and sinks = nullptr must be bitwise
// the call without the argument; on both the split and the single-split path.
template <int Hq, int Hkv, int D>
void check_decode_sinks_matter(int64_t batch, int64_t max_len, int window) {
  Tensor q = empty({batch, Hq, D}, DType::kBF16), out = empty({batch, Hq, D}, DType::kBF16);
  Tensor out2 = empty({batch, Hq, D}, DType::kBF16);
  Tensor kc = empty({batch, max_len, Hkv, D}, DType::kBF16), vc = empty({batch, max_len, Hkv, D}, DType::kBF16);
  fill_normal(q, 51);
  fill_normal(kc, 52);
  fill_normal(vc, 53);
  std::vector<int32_t> lens(batch), begin(batch), rlen(batch);
  for (int64_t b = 0; b < batch; ++b) {
    lens[b] = static_cast<int32_t>(b == 0 ? max_len : 1 + 7 * b);  // short rows: the sinks weigh
    const auto [first, count] = fk::tasks::window_range(lens[b] - 1, window);
    begin[b] = static_cast<int32_t>(b * max_len + first);
    rlen[b] = static_cast<int32_t>(count);
  }
  Tensor lens_d = to_device(lens, {batch}), begin_d = to_device(begin, {batch}), rlen_d = to_device(rlen, {batch});
  Tensor sinks_d = to_device(random_sinks(Hq, 54), {Hq});
  Tensor off_d = to_device(std::vector<float>(Hq, -1e30f), {Hq});
  const float scale = 1.f / std::sqrt(float(D));
  const size_t ws_bytes = fk::kernels::flash_decode_workspace_bytes<Hq, Hkv, D>(batch, max_len, 0, window);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4 + 1)}, DType::kF32);
  Tensor plain = empty({batch, Hq, D}, DType::kF32), sunk = empty({batch, Hq, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(plain.data<float>(), q.data<bf16>(), Hq * D, kc.data<bf16>(), vc.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), rlen_d.data<int32_t>(), batch, Hq, Hkv,
                                              D, scale, current_stream());
  fk::kernels::reference::attention_ref<bf16>(sunk.data<float>(), q.data<bf16>(), Hq * D, kc.data<bf16>(), vc.data<bf16>(),
                                              Hkv * D, begin_d.data<int32_t>(), rlen_d.data<int32_t>(), batch, Hq, Hkv,
                                              D, scale, current_stream(), 0.f, sinks_d.data<float>());
  FK_CHECK_LAUNCH();
  const auto tol = fk::tasks::matmul_tolerance(DType::kBF16, 0.05);
  auto run = [&](Tensor& o, const float* sinks) {
    fk::kernels::flash_decode<Hq, Hkv, D, bf16>(o.data<bf16>(), q.data<bf16>(), kc.data<bf16>(), vc.data<bf16>(),
                                               lens_d.data<int32_t>(), batch, max_len, scale, ws.data_ptr(),
                                               current_stream(), 0, window, 0.f, sinks);
    FK_CHECK_LAUNCH();
  };
  run(out, sinks_d.data<float>());
  EXPECT_TRUE(compare(out, sunk, tol).passed);
  EXPECT_FALSE(compare(out, plain, tol).passed);
  run(out, off_d.data<float>());
  FK_EXPECT_CLOSE(out, plain, tol);
  run(out, nullptr);
  fk::kernels::flash_decode<Hq, Hkv, D, bf16>(out2.data<bf16>(), q.data<bf16>(), kc.data<bf16>(), vc.data<bf16>(),
                                             lens_d.data<int32_t>(), batch, max_len, scale, ws.data_ptr(),
                                             current_stream(), 0, window);
  FK_CHECK_LAUNCH();
  const std::vector<bf16> ha = to_host<bf16>(out), hb = to_host<bf16>(out2);
  EXPECT_EQ(std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(bf16)), 0);
  FK_EXPECT_CLOSE(out, plain, tol);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sinks_matter_split) {
  FK_REQUIRE_GPU();
  ASSERT_GT((fk::kernels::flash_decode_split<64, 8, 64>(4, 3000, 0, 0).splits), 1);
  check_decode_sinks_matter<64, 8, 64>(4, 3000, 0);
}
TEST(Kernels, FlashDecode_bf16_hq64_hkv8_d64_sw128_sinks_matter) {
  FK_REQUIRE_GPU();
  ASSERT_EQ((fk::kernels::flash_decode_split<64, 8, 64>(4, 3000, 0, 128).splits), 1);
  check_decode_sinks_matter<64, 8, 64>(4, 3000, 128);
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
  Tensor sinks;  // undefined: the Cfg has no sinks (the harness reads module.sinks)
};
class TestDecode {
 public:
  TestDecode(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens) {
    return fk::tasks::flash_attn_decode_forward<AttnCfg>(q, kc, vc, lens);
  }
  Tensor sinks;  // undefined: the Cfg has no sinks (the harness reads module.sinks)
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
struct BidirCfg {  // BERT-base's attention
  static constexpr int64_t num_heads = 12;
  static constexpr int64_t num_kv_heads = 12;
  static constexpr int64_t head_dim = 64;
  static constexpr double softmax_scale = 0.125;
  static constexpr int64_t sliding_window = 0;
  static constexpr double softcap = 0;
  static constexpr bool causal = false;
  using scalar_t = bf16;
};
class TestBidirPrefill {
 public:
  TestBidirPrefill(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return fk::tasks::flash_attn_prefill_forward<BidirCfg>(q, k, v, cq, ck, mq, mk);
  }
  Tensor sinks;
};
TEST(Tasks, FlashAttnPrefillBidir_bf16_hq12_hkv12_d64_b8_s512) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<TestBidirPrefill, BidirCfg> inst(prefill_case(8, 512));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnPrefillBidir_bf16_hq12_hkv12_d64_b1_s197) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<TestBidirPrefill, BidirCfg> inst(prefill_case(1, 197));
  check_task_instance(inst);
}

TEST(Tasks, FlashAttnDecode_bf16_hq32_hkv8_d128_b8_kv8192) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<TestDecode, AttnCfg> inst(decode_case(8, 8192));
  check_task_instance(inst);
}
// An additive logit bias (Note [Attention logit bias]): T5-base's encoder self-attention (12 x 64, no
// softmax scaling, a [heads, L, L] relative-position bias) and its decoder's (causal), through the
// harness (bias ~ N(0, 2) against the fp32 reference): varlen batches (the ragged graph), uniform ones
// (the dense graph); then a table larger than the batch read in place, and the refusals.
template <bool kCausal> struct BiasCfg {
  static constexpr int64_t num_heads = 12;
  static constexpr int64_t num_kv_heads = 12;
  static constexpr int64_t head_dim = 64;
  static constexpr double softmax_scale = 1.0;
  static constexpr int64_t sliding_window = 0;
  static constexpr double softcap = 0;
  static constexpr bool causal = kCausal;
  static constexpr bool logit_bias = true;
  using scalar_t = bf16;
};
template <bool kCausal> class BiasPrefill {
 public:
  BiasPrefill(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk,
                 const Tensor& bias) {
    return fk::tasks::flash_attn_prefill_forward<BiasCfg<kCausal>>(q, k, v, cq, ck, mq, mk, Tensor(), bias);
  }
  Tensor sinks;
};
TEST(Tasks, FlashAttnPrefillBias_bf16_hq12_d64_bidir_b8_s512_varlen) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<BiasPrefill<false>, BiasCfg<false>> inst(prefill_case(8, 512));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnPrefillBias_bf16_hq12_d64_bidir_b4_s197_uniform) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<BiasPrefill<false>, BiasCfg<false>> inst(
      ShapeCase{"b4_s197", "prefill", {{"batch", 4}, {"seq_len", 197}, {"uniform", 1}}});
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnPrefillBias_bf16_hq12_d64_causal_b3_s300_varlen) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  fk::tasks::FlashAttnPrefillInstance<BiasPrefill<true>, BiasCfg<true>> inst(prefill_case(3, 300));
  check_task_instance(inst);
}
TEST(Kernels, AttnBidirBias_bf16_table_larger_than_the_batch) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  constexpr int64_t H = 12, D = 64, L = 160;  // a 160 x 160 table; sequences of 100 and 37 read its top-left blocks
  const std::vector<int32_t> cu{0, 100, 137};
  Tensor q = empty({137, H, D}, DType::kBF16), k = empty({137, H, D}, DType::kBF16), v = empty({137, H, D}, DType::kBF16);
  Tensor bias = empty({H, L, L}, DType::kBF16);
  fill_normal(q, 11);
  fill_normal(k, 12);
  fill_normal(v, 13);
  fill_normal(bias, 14, 0.f, 2.f);
  const Tensor cu_d = to_device(cu, {3});
  const Tensor out = fk::tasks::flash_attn_prefill_forward<BiasCfg<false>>(q, k, v, cu_d, cu_d, 100, 100, Tensor(), bias);
  std::vector<int32_t> begin, len, off;
  for (int s = 0; s < 2; ++s)
    for (int32_t p = 0; p < cu[s + 1] - cu[s]; ++p) {
      begin.push_back(cu[s]);
      len.push_back(cu[s + 1] - cu[s]);
      off.push_back(p * int32_t(L));
    }
  const Tensor begin_d = to_device(begin, {137}), len_d = to_device(len, {137}), off_d = to_device(off, {137});
  const Tensor bias_f32 = fk::tasks::to_f32(bias);
  Tensor ref = empty({137, H, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), H * D, k.data<bf16>(), v.data<bf16>(), H * D,
                                              begin_d.data<int32_t>(), len_d.data<int32_t>(), 137, H, H, D, 1.f, current_stream(),
                                              0.f, nullptr, bias_f32.data<float>(), off_d.data<int32_t>(), L * L);
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 1.0));
  // The bias matters at this scale (the reference without it is far off), and bad biases are refused.
  Tensor unbiased = empty({137, H, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(unbiased.data<float>(), q.data<bf16>(), H * D, k.data<bf16>(), v.data<bf16>(), H * D,
                                              begin_d.data<int32_t>(), len_d.data<int32_t>(), 137, H, H, D, 1.f, current_stream());
  const std::vector<float> a = to_host<float>(ref), b = to_host<float>(unbiased);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(a[i]) * a[i];
  EXPECT_GT(std::sqrt(num / den), 0.1);
  EXPECT_THROW(fk::tasks::flash_attn_prefill_forward<BiasCfg<false>>(q, k, v, cu_d, cu_d, 100, 100), std::exception);
  EXPECT_THROW(fk::tasks::flash_attn_prefill_forward<BiasCfg<false>>(q, k, v, cu_d, cu_d, 100, 100, Tensor(),
                                                                      empty({H, 64, 64}, DType::kBF16)),
               std::exception);  // smaller than the longest sequence
  EXPECT_THROW(fk::tasks::flash_attn_prefill_forward<BidirCfg>(q, k, v, cu_d, cu_d, 100, 100, Tensor(), bias), std::exception);
}

// One bias per sequence ([batch, heads, L, L]: LayoutLMv3's 2-D positions, CPM-Ant's segments), varlen.
TEST(Kernels, AttnBidirBias_bf16_one_table_per_sequence) {
  FK_REQUIRE_GPU();
  FK_REQUIRE_CUDNN();
  constexpr int64_t H = 12, D = 64, L = 120;
  const std::vector<int32_t> cu{0, 50, 170, 179};
  const int64_t T = 179;
  Tensor q = empty({T, H, D}, DType::kBF16), k = empty({T, H, D}, DType::kBF16), v = empty({T, H, D}, DType::kBF16);
  Tensor bias = empty({3, H, L, L}, DType::kBF16);
  fill_normal(q, 21);
  fill_normal(k, 22);
  fill_normal(v, 23);
  fill_normal(bias, 24, 0.f, 2.f);
  const Tensor cu_d = to_device(cu, {4});
  const Tensor out = fk::tasks::flash_attn_prefill_forward<BiasCfg<false>>(q, k, v, cu_d, cu_d, L, L, Tensor(), bias);
  std::vector<int32_t> begin, len, off;
  for (int b = 0; b < 3; ++b)
    for (int32_t p = 0; p < cu[b + 1] - cu[b]; ++p) {
      begin.push_back(cu[b]);
      len.push_back(cu[b + 1] - cu[b]);
      off.push_back(static_cast<int32_t>(b * H * L * L + p * L));
    }
  const Tensor begin_d = to_device(begin, {T}), len_d = to_device(len, {T}), off_d = to_device(off, {T});
  const Tensor bias_f32 = fk::tasks::to_f32(bias);
  Tensor ref = empty({T, H, D}, DType::kF32);
  fk::kernels::reference::attention_ref<bf16>(ref.data<float>(), q.data<bf16>(), H * D, k.data<bf16>(), v.data<bf16>(), H * D,
                                              begin_d.data<int32_t>(), len_d.data<int32_t>(), T, H, H, D, 1.f, current_stream(),
                                              0.f, nullptr, bias_f32.data<float>(), off_d.data<int32_t>(), L * L);
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, fk::tasks::matmul_tolerance(DType::kBF16, 1.0));
  EXPECT_THROW(fk::tasks::flash_attn_prefill_forward<BiasCfg<false>>(q, k, v, cu_d, cu_d, L, L, Tensor(),
                                                                      empty({2, H, L, L}, DType::kBF16)),
               std::exception);  // one table per sequence: 3 of them
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
  Tensor sinks;  // undefined: the Cfg has no sinks (the harness reads module.sinks)
};
class WindowDecode {
 public:
  WindowDecode(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens) {
    return fk::tasks::flash_attn_decode_forward<WindowCfg>(q, kc, vc, lens);
  }
  Tensor sinks;  // undefined: the Cfg has no sinks (the harness reads module.sinks)
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
  Tensor sinks;  // undefined: the Cfg has no sinks (the harness reads module.sinks)
};
class CapPrefill {
 public:
  CapPrefill(int64_t, int64_t, int64_t) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return fk::tasks::flash_attn_prefill_forward<CapCfg>(q, k, v, cq, ck, mq, mk);
  }
  Tensor sinks;  // undefined: the Cfg has no sinks (the harness reads module.sinks)
};

// gpt-oss through the harness (64/8 heads, D 64, window 128, attention sinks held by the module
// as f32 [Hq], as templates/flash_attn_{prefill,decode}.h.mustache hold them).
struct OssCfg {
  static constexpr int64_t num_heads = 64;
  static constexpr int64_t num_kv_heads = 8;
  static constexpr int64_t head_dim = 64;
  static constexpr double softmax_scale = 0.125;
  static constexpr int64_t sliding_window = 128;
  static constexpr double softcap = 0;
  static constexpr bool sinks = true;
  using scalar_t = bf16;
};
class OssPrefill {
 public:
  OssPrefill(int64_t num_heads, int64_t, int64_t) : sinks(empty({num_heads}, DType::kF32)) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return fk::tasks::flash_attn_prefill_forward<OssCfg>(q, k, v, cq, ck, mq, mk, sinks);
  }
  Tensor sinks;
};
class OssDecode {
 public:
  OssDecode(int64_t num_heads, int64_t, int64_t) : sinks(empty({num_heads}, DType::kF32)) {}
  Tensor forward(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens) {
    return fk::tasks::flash_attn_decode_forward<OssCfg>(q, kc, vc, lens, sinks);
  }
  Tensor sinks;
};
TEST(Tasks, FlashAttnPrefill_bf16_hq64_hkv8_d64_sw128_sinks_b4_s2048) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnPrefillInstance<OssPrefill, OssCfg> inst(prefill_case(4, 2048));
  check_task_instance(inst);
}
TEST(Tasks, FlashAttnDecode_bf16_hq64_hkv8_d64_sw128_sinks_b8_kv4096) {
  FK_REQUIRE_GPU();
  fk::tasks::FlashAttnDecodeInstance<OssDecode, OssCfg> inst(decode_case(8, 4096));
  check_task_instance(inst);
}
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
