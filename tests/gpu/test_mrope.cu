// mrope (multimodal rope, vLLM MRotaryEmbedding): the kernel over strided q and k views of qkv with
// [3, T] and [T] positions against the reference (per-token rows built HF's way), the reference's
// section mapping against hand-written expectations, the sections' meaning checked through plain
// rotary embedding, and the task harness.
#include <array>
#include <cstring>
#include <vector>

#include "fk/tasks/llama.h"
#include "fk/tasks/mrope.h"
#include "fk/tasks/reference_ops.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {


/// The raw bits of a bf16 tensor (exact comparisons).
std::vector<uint16_t> bits(const Tensor& t) {
  const std::vector<bf16> v = to_host<bf16>(t);
  std::vector<uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(uint16_t));
  return out;
}

/// Runs the mrope kernel in place on a copy of qkv0 [T, (Hq + 2 Hkv) * D] and returns it.
template <class T, int kD, int kRot, bool kNeox, int kHq, int kHkv, int kS0, int kS1, int kS2, bool kIl>
Tensor run_mrope(const Tensor& qkv0, const Tensor& pos, const Tensor& cache) {
  constexpr int64_t kW = (kHq + 2 * kHkv) * kD, kKoff = kHq * kD;
  const int64_t tokens = qkv0.size(0);
  Tensor qkv = empty({tokens, kW}, dtype_of<T>);
  copy_(qkv, qkv0);
  const int64_t axis_stride = fk::tasks::mrope_axis_stride(pos, tokens);
  fk::kernels::mrope<T, kD, kRot, kNeox, kHq, kHkv, kS0, kS1, kS2, kIl>(pos.data<int64_t>(), axis_stride, qkv.data<T>(), kW,
                                                                       qkv.data<T>() + kKoff, kW, cache.data<float>(), tokens,
                                                                       current_stream());
  FK_CHECK_LAUNCH();
  return qkv;
}

/// Runs the plain rotary kernel in place on a copy of qkv0 and returns it.
template <class T, int kD, int kRot, bool kNeox, int kHq, int kHkv>
Tensor run_rope(const Tensor& qkv0, const Tensor& pos, const Tensor& cache) {
  constexpr int64_t kW = (kHq + 2 * kHkv) * kD, kKoff = kHq * kD;
  const int64_t tokens = qkv0.size(0);
  Tensor qkv = empty({tokens, kW}, dtype_of<T>);
  copy_(qkv, qkv0);
  fk::kernels::rotary_embedding<T, kD, kRot, kNeox, kHq, kHkv>(pos.data<int64_t>(), qkv.data<T>(), kW, qkv.data<T>() + kKoff, kW,
                                                              cache.data<float>(), tokens, current_stream());
  FK_CHECK_LAUNCH();
  return qkv;
}

/// Kernel vs reference with positions drawn independently per axis ([3, T]) and, separately, [T].
template <class T, int kD, int kRot, bool kNeox, int kHq, int kHkv, int kS0, int kS1, int kS2, bool kIl>
void check_mrope(int64_t tokens) {
  constexpr int64_t kW = (kHq + 2 * kHkv) * kD, kKoff = kHq * kD;
  const Tensor cache = fk::tasks::compute_cos_sin_cache(fk::tasks::mrope_params(kRot, 8192, 1000000));
  Tensor qkv0 = empty({tokens, kW}, dtype_of<T>);
  fill_normal(qkv0, 41);
  for (bool three : {true, false}) {
    Tensor pos = three ? empty({3, tokens}, DType::kI64) : empty({tokens}, DType::kI64);
    fill_randint(pos, three ? 42 : 43, 0, cache.size(0));
    Tensor got = run_mrope<T, kD, kRot, kNeox, kHq, kHkv, kS0, kS1, kS2, kIl>(qkv0, pos, cache);
    std::pair<Tensor, Tensor> rows = three ? std::pair<Tensor, Tensor>{fk::tasks::ref::arange_i64(tokens),
                                                                       fk::tasks::ref::mrope_table(pos, cache, kRot, kS0, kS1, kS2, kIl)}
                                           : std::pair<Tensor, Tensor>{pos, cache};
    namespace kr = fk::kernels::reference;
    Tensor e = empty({tokens, kW}, DType::kF32);
    kr::copy_to_f32<T>(e.data<float>(), kW, qkv0.data<T>(), kW, tokens, kW, current_stream());
    kr::rotary_embedding_ref<T>(e.data<float>(), kW, qkv0.data<T>(), kW, rows.first.data<int64_t>(), rows.second.data<float>(),
                                tokens, kHq, kD, kRot, kNeox, current_stream());
    kr::rotary_embedding_ref<T>(e.data<float>() + kKoff, kW, qkv0.data<T>() + kKoff, kW, rows.first.data<int64_t>(),
                                rows.second.data<float>(), tokens, kHkv, kD, kRot, kNeox, current_stream());
    FK_CHECK_LAUNCH();
    SCOPED_TRACE(three ? "positions [3, T]" : "positions [T]");
    FK_EXPECT_CLOSE(got, e, default_tolerance(dtype_of<T>));
  }
}

#define FK_MROPE_TESTS(NAME, ...)                                                  \
  TEST(Kernels, NAME##_t1) { FK_REQUIRE_GPU(); check_mrope<__VA_ARGS__>(1); }      \
  TEST(Kernels, NAME##_t7) { FK_REQUIRE_GPU(); check_mrope<__VA_ARGS__>(7); }      \
  TEST(Kernels, NAME##_t1000) { FK_REQUIRE_GPU(); check_mrope<__VA_ARGS__>(1000); }

// Qwen2-VL / Qwen2.5-VL (sections 16/24/24: the vector path), Qwen3-VL (interleaved 24/20/20), sections
// that split a lane's frequencies (the per-element path), GPT-J style and fp16.
FK_MROPE_TESTS(Mrope_bf16_d128_neox_hq28_hkv4_s16x24x24, bf16, 128, 128, true, 28, 4, 16, 24, 24, false)
FK_MROPE_TESTS(Mrope_bf16_d128_neox_hq64_hkv8_i24x20x20, bf16, 128, 128, true, 64, 8, 24, 20, 20, true)
FK_MROPE_TESTS(Mrope_bf16_d128_neox_hq16_hkv2_s20x22x22, bf16, 128, 128, true, 16, 2, 20, 22, 22, false)
FK_MROPE_TESTS(Mrope_bf16_d64_gptj_hq8_hkv2_s10x11x11, bf16, 64, 64, false, 8, 2, 10, 11, 11, false)
FK_MROPE_TESTS(Mrope_f16_d128_neox_hq12_hkv4_i24x20x20, f16, 128, 128, true, 12, 4, 24, 20, 20, true)

// Three equal position rows (a text token) rotate exactly as the plain kernel at that position.
TEST(Kernels, MropeTextTokensMatchRotaryEmbedding) {
  FK_REQUIRE_GPU();
  constexpr int64_t kT = 300;
  const Tensor cache = fk::tasks::compute_cos_sin_cache(fk::tasks::mrope_params(128, 4096, 1000000));
  Tensor qkv0 = empty({kT, (28 + 8) * 128}, DType::kBF16);
  fill_normal(qkv0, 5);
  Tensor pos1 = empty({kT}, DType::kI64);
  fill_randint(pos1, 6, 0, 4096);
  std::vector<int64_t> p = to_host<int64_t>(pos1), p3;
  for (int a = 0; a < 3; ++a) p3.insert(p3.end(), p.begin(), p.end());
  const Tensor pos3 = to_device(p3, {3, kT});
  const Tensor plain = run_rope<bf16, 128, 128, true, 28, 4>(qkv0, pos1, cache);
  for (const Tensor& got : {run_mrope<bf16, 128, 128, true, 28, 4, 16, 24, 24, false>(qkv0, pos3, cache),
                            run_mrope<bf16, 128, 128, true, 28, 4, 24, 20, 20, true>(qkv0, pos3, cache),
                            run_mrope<bf16, 128, 128, true, 28, 4, 16, 24, 24, false>(qkv0, pos1, cache)})
    EXPECT_EQ(bits(got), bits(plain));
}

// The sections' meaning, through the kernel alone: with the temporal and width positions 0 (angle 0:
// cos 1, sin 0) and the height position p, exactly the height section's frequencies rotate, by the
// plain rotary angle at p; the other elements come back unchanged.
TEST(Kernels, MropeHeightSectionRotatesAlone) {
  FK_REQUIRE_GPU();
  constexpr int64_t kT = 64, kD = 128, kHalf = 64, kW = (28 + 8) * kD;
  const Tensor cache = fk::tasks::compute_cos_sin_cache(fk::tasks::mrope_params(kD, 4096, 1000000));
  Tensor qkv0 = empty({kT, kW}, DType::kBF16);
  fill_normal(qkv0, 7);
  Tensor ph = empty({kT}, DType::kI64);
  fill_randint(ph, 8, 1, 4096);
  std::vector<int64_t> h = to_host<int64_t>(ph), p3(3 * kT, 0);
  for (int64_t t = 0; t < kT; ++t) p3[kT + t] = h[t];
  const Tensor pos3 = to_device(p3, {3, kT});
  const std::vector<uint16_t> x0 = bits(qkv0);
  const std::vector<uint16_t> full = bits(run_rope<bf16, 128, 128, true, 28, 4>(qkv0, ph, cache));
  auto height_of = [&](bool interleaved, int f) {  // HF's section rules, written out
    if (interleaved) return f % 3 == 1 && f < 3 * 20;
    return f >= 16 && f < 40;
  };
  for (bool interleaved : {false, true}) {
    const std::vector<uint16_t> got =
        interleaved ? bits(run_mrope<bf16, 128, 128, true, 28, 4, 24, 20, 20, true>(qkv0, pos3, cache))
                    : bits(run_mrope<bf16, 128, 128, true, 28, 4, 16, 24, 24, false>(qkv0, pos3, cache));
    int64_t rotated = 0, bad = 0;
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t head = 0; head < 28 + 4; ++head)  // q and k heads (v follows and is untouched)
        for (int64_t e = 0; e < kD; ++e) {
          const int64_t i = t * kW + head * kD + e;
          const bool in_height = height_of(interleaved, static_cast<int>(e % kHalf));
          rotated += in_height;
          bad += got[i] != (in_height ? full[i] : x0[i]);
        }
    EXPECT_EQ(bad, 0) << (interleaved ? "interleaved 24/20/20" : "16/24/24");
    EXPECT_EQ(rotated, kT * 32 * 2 * (interleaved ? 20 : 24));
  }
}

// The reference's per-token rows against the section rules written by hand: rotary_dim 12 (6
// frequencies), sections 2/2/2; the cache row of position p holds p + column / 100 so that the row and
// column read are visible.
TEST(Kernels, MropeReferenceTableFollowsHfSections) {
  FK_REQUIRE_GPU();
  constexpr int kRot = 12, kT = 2;
  std::vector<float> c(100 * kRot);
  for (int p = 0; p < 100; ++p)
    for (int j = 0; j < kRot; ++j) c[p * kRot + j] = static_cast<float>(p) + j / 100.0f;
  const Tensor cache = to_device(c, {100, kRot});
  const Tensor pos = to_device(std::vector<int64_t>{10, 11, 20, 21, 30, 31}, {3, kT});  // t, h, w rows
  const int consecutive[6] = {0, 0, 1, 1, 2, 2};  // frequency -> axis: chunks [2, 2, 2]
  const int interleaved[6] = {0, 1, 2, 0, 1, 2};  // h at 1, 4 (< 6); w at 2, 5 (< 6)
  for (bool il : {false, true}) {
    const std::vector<float> got = to_host<float>(fk::tasks::ref::mrope_table(pos, cache, kRot, 2, 2, 2, il));
    for (int t = 0; t < kT; ++t)
      for (int j = 0; j < kRot; ++j) {
        const int axis = (il ? interleaved : consecutive)[j % 6];
        EXPECT_FLOAT_EQ(got[t * kRot + j], static_cast<float>(10 * (axis + 1) + t) + j / 100.0f)
            << (il ? "interleaved" : "consecutive") << " token " << t << " column " << j;
      }
  }
}

// The positions' shape is checked: [3, T] or [T] only.
TEST(Kernels, MropeRefusesOtherPositionShapes) {
  FK_REQUIRE_GPU();
  EXPECT_THROW(fk::tasks::mrope_axis_stride(empty({2, 5}, DType::kI64), 5), std::exception);
  EXPECT_THROW(fk::tasks::mrope_axis_stride(empty({3, 4}, DType::kI64), 5), std::exception);
  EXPECT_THROW(fk::tasks::mrope_axis_stride(empty({5}, DType::kI32), 5), std::exception);
  EXPECT_EQ(fk::tasks::mrope_axis_stride(empty({3, 5}, DType::kI64), 5), 5);
  EXPECT_EQ(fk::tasks::mrope_axis_stride(empty({5}, DType::kI64), 5), 0);
}

// The [3, T] positions of the composite harnesses' prefill steps (Note [mrope step positions]): one
// sequence of 32 tokens holds a 4 x 4 image grid from token 8 on; text after it resumes at 8 + 4; a
// sequence shorter than 8 tokens is text only. Host only (kept with the GPU tests).
TEST(Kernels, MropeStepPositionsFollowGetRopeIndex) {
  const std::vector<int64_t> p = fk::tasks::mrope_prefill_positions({0, 32, 37});
  ASSERT_EQ(p.size(), 3u * 37u);
  auto at = [&](int a, int t) { return p[static_cast<size_t>(a * 37 + t)]; };
  for (int t = 0; t < 8; ++t)
    for (int a = 0; a < 3; ++a) EXPECT_EQ(at(a, t), t);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(at(0, 8 + i), 8);
    EXPECT_EQ(at(1, 8 + i), 8 + i / 4);
    EXPECT_EQ(at(2, 8 + i), 8 + i % 4);
  }
  for (int t = 24; t < 32; ++t)
    for (int a = 0; a < 3; ++a) EXPECT_EQ(at(a, t), 12 + (t - 24));
  for (int t = 0; t < 5; ++t)
    for (int a = 0; a < 3; ++a) EXPECT_EQ(at(a, 32 + t), t);
}

// HF get_rope_index for one prompt with one image (Note [VLM rope index]): two text tokens, <vision_start>,
// a 1 x 4 x 6 grid merged 2 x 2 (2 x 3 image tokens at (3, 3 + row, 3 + column)), <vision_end> at 6 (the
// largest position so far + 1), one text token at 7; the first decode position is 8. Host only.
TEST(Kernels, VlRopeIndexFollowsGetRopeIndex) {
  constexpr int64_t kImg = 99, kVs = 98, kVe = 97;
  const std::vector<int64_t> ids = {5, 6, kVs, kImg, kImg, kImg, kImg, kImg, kImg, kVe, 7};
  const fk::tasks::VlRopeIndex r = fk::tasks::vl_rope_index(ids, kImg, {{1, 4, 6}}, 2);
  EXPECT_EQ(r.rows[0], (std::vector<int64_t>{0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7}));
  EXPECT_EQ(r.rows[1], (std::vector<int64_t>{0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7}));
  EXPECT_EQ(r.rows[2], (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r.next_position, 8);
  // A grid that needs more image tokens than the prompt holds, or image tokens beyond the grids, are named.
  EXPECT_THROW(fk::tasks::vl_rope_index(ids, kImg, {{1, 4, 8}}, 2), std::exception);
  EXPECT_THROW(fk::tasks::vl_rope_index(ids, kImg, {{1, 2, 2}}, 2), std::exception);
  EXPECT_THROW(fk::tasks::vl_rope_index(ids, kImg, {}, 2), std::exception);
}

// The harness (the generated tasks' instance) under the runner's protocol.
struct MropeCfg {
  static constexpr int head_size = 128, rotary_dim = 128;
  static constexpr int64_t max_position = 32768;
  static constexpr double base = 1000000;
  static constexpr bool is_neox_style = true;
  static constexpr int num_heads = 28, num_kv_heads = 4;
  static constexpr int mrope_s0 = 16, mrope_s1 = 24, mrope_s2 = 24;
  static constexpr bool mrope_interleaved = false;
  using scalar_t = bf16;
};
struct TestMrope {
  using Cfg = MropeCfg;
  static constexpr bool is_mrope = true;
  TestMrope(int64_t head_size, int64_t rotary_dim, int64_t max_position_embeddings, double base, bool is_neox_style)
      : rotary_dim(rotary_dim),
        cos_sin_cache(fk::tasks::shared_cos_sin_cache(fk::tasks::mrope_params(rotary_dim, max_position_embeddings, base))) {
    (void)head_size, (void)is_neox_style;
  }
  std::tuple<Tensor, Tensor> forward(const Tensor& positions, Tensor& query, Tensor& key) {
    return fk::tasks::mrope_forward<MropeCfg>(positions, query, key, cos_sin_cache);
  }
  int64_t rotary_dim;
  Tensor cos_sin_cache;
};

TEST(Tasks, Mrope_bf16_s16x24x24_t1) {
  FK_REQUIRE_GPU();
  fk::tasks::MRotaryEmbeddingInstance<TestMrope, MropeCfg> inst(tokens_case(1));
  check_task_instance(inst);
}
TEST(Tasks, Mrope_bf16_s16x24x24_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::MRotaryEmbeddingInstance<TestMrope, MropeCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
