// rotary_embedding: baseline kernel (in place over strided q and k views of qkv, one launch)
// vs the fp64 reference, the cos/sin cache construction, and the harness.
#include <cmath>

#include "fk/tasks/rotary_embedding.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::tasks::RopeParams;
using fk::tasks::RopeScaling;

RopeParams params(RopeScaling s, int64_t rot, int64_t max_pos, double base) {
  RopeParams p;
  p.rotary_dim = rot, p.max_position = max_pos, p.base = base, p.scaling = s;
  if (s == RopeScaling::kLlama3) p.factor = 8, p.low_freq_factor = 1, p.high_freq_factor = 4, p.original_max_position = 8192;
  if (s == RopeScaling::kLinear) p.factor = 2;
  if (s == RopeScaling::kYarn) p.factor = 4, p.original_max_position = 32768, p.beta_fast = 32, p.beta_slow = 1;
  return p;
}

template <class T, int kD, int kRot, bool kNeox, int kHq, int kHkv>
void check_rope(int64_t tokens, RopeScaling scaling = RopeScaling::kNone) {
  constexpr int64_t kW = (kHq + 2 * kHkv) * kD, kKoff = kHq * kD;
  const RopeParams p = params(scaling, kRot, 16384, 500000);
  Tensor cache = fk::tasks::compute_cos_sin_cache(p);
  ASSERT_EQ(cache.size(0), fk::tasks::cos_sin_cache_rows(p));
  Tensor qkv = empty({tokens, kW}, dtype_of<T>), qkv0 = empty({tokens, kW}, dtype_of<T>);
  Tensor pos = empty({tokens}, DType::kI64);
  fill_normal(qkv0, 31);
  fill_randint(pos, 32, 0, cache.size(0));
  copy_(qkv, qkv0);
  fk::kernels::rotary_embedding<T, kD, kRot, kNeox, kHq, kHkv>(pos.data<int64_t>(), qkv.data<T>(), kW,
                                                              qkv.data<T>() + kKoff, kW, cache.data<float>(), tokens,
                                                              current_stream());
  FK_CHECK_LAUNCH();
  namespace ref = fk::kernels::reference;
  Tensor e = empty({tokens, kW}, DType::kF32);
  ref::copy_to_f32<T>(e.data<float>(), kW, qkv0.data<T>(), kW, tokens, kW, current_stream());
  ref::rotary_embedding_ref<T>(e.data<float>(), kW, qkv0.data<T>(), kW, pos.data<int64_t>(), cache.data<float>(), tokens,
                               kHq, kD, kRot, kNeox, current_stream());
  ref::rotary_embedding_ref<T>(e.data<float>() + kKoff, kW, qkv0.data<T>() + kKoff, kW, pos.data<int64_t>(),
                               cache.data<float>(), tokens, kHkv, kD, kRot, kNeox, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(qkv, e, default_tolerance(dtype_of<T>));
}

#define FK_ROPE_TESTS(NAME, ...)                                                              \
  TEST(Kernels, NAME##_t1) { FK_REQUIRE_GPU(); check_rope<__VA_ARGS__>(1); }                  \
  TEST(Kernels, NAME##_t7) { FK_REQUIRE_GPU(); check_rope<__VA_ARGS__>(7); }                  \
  TEST(Kernels, NAME##_t256) { FK_REQUIRE_GPU(); check_rope<__VA_ARGS__>(256); }              \
  TEST(Kernels, NAME##_t4096) { FK_REQUIRE_GPU(); check_rope<__VA_ARGS__>(4096); }

FK_ROPE_TESTS(RotaryEmbedding_bf16_d128_rot128_neox_hq32_hkv8, bf16, 128, 128, true, 32, 8)
FK_ROPE_TESTS(RotaryEmbedding_bf16_d128_rot128_neox_hq28_hkv4, bf16, 128, 128, true, 28, 4)
FK_ROPE_TESTS(RotaryEmbedding_bf16_d128_rot128_gptj_hq32_hkv8, bf16, 128, 128, false, 32, 8)
FK_ROPE_TESTS(RotaryEmbedding_bf16_d128_rot64_neox_hq8_hkv1, bf16, 128, 64, true, 8, 1)
FK_ROPE_TESTS(RotaryEmbedding_f16_d64_rot64_neox_hq12_hkv4, f16, 64, 64, true, 12, 4)
FK_ROPE_TESTS(RotaryEmbedding_f32_d128_rot128_neox_hq32_hkv8, f32, 128, 128, true, 32, 8)

TEST(Kernels, RotaryEmbedding_bf16_d128_rot128_neox_hq32_hkv8_llama3_t256) {
  FK_REQUIRE_GPU();
  check_rope<bf16, 128, 128, true, 32, 8>(256, RopeScaling::kLlama3);
}
TEST(Kernels, RotaryEmbedding_bf16_d128_rot128_neox_hq28_hkv4_yarn_t256) {
  FK_REQUIRE_GPU();
  check_rope<bf16, 128, 128, true, 28, 4>(256, RopeScaling::kYarn);
}
TEST(Kernels, RotaryEmbedding_bf16_d128_rot128_neox_hq32_hkv8_linear_t7) {
  FK_REQUIRE_GPU();
  check_rope<bf16, 128, 128, true, 32, 8>(7, RopeScaling::kLinear);
}

// Cache construction against closed forms (host only, but kept with the GPU tests).
TEST(RopeCache, NoneMatchesClosedForm) {
  const RopeParams p = params(RopeScaling::kNone, 128, 64, 10000);
  const std::vector<float> c = fk::tasks::compute_cos_sin_cache_host(p);
  ASSERT_EQ(c.size(), 64u * 128u);
  for (int t : {0, 1, 63})
    for (int i : {0, 1, 31, 63}) {
      const double a = t * std::pow(10000.0, -2.0 * i / 128);
      EXPECT_NEAR(c[t * 128 + i], std::cos(a), 1e-5) << t << "," << i;
      EXPECT_NEAR(c[t * 128 + 64 + i], std::sin(a), 1e-5) << t << "," << i;
    }
}
TEST(RopeCache, Llama3KeepsHighAndScalesLowFrequencies) {
  const RopeParams p = params(RopeScaling::kLlama3, 128, 16, 500000);
  const std::vector<float> c = fk::tasks::compute_cos_sin_cache_host(p);
  // i = 0 (wavelength 2 pi < 8192/4): unchanged; i = 63 (wavelength ~ 2 pi * 500000^(126/128)
  // > 8192): divided by the factor 8.
  const double f0 = 1.0, f63 = std::pow(500000.0, -126.0 / 128) / 8;
  EXPECT_NEAR(c[5 * 128 + 64 + 0], std::sin(5 * f0), 1e-5);
  EXPECT_NEAR(c[15 * 128 + 64 + 63], std::sin(15 * f63), 1e-6);
}
// Note [Shared cos_sin_cache]: one buffer per parameter set while any module holds it.
TEST(RopeCache, SharedPerParameterSetWhileHeld) {
  FK_REQUIRE_GPU();
  const RopeParams a = params(RopeScaling::kNone, 128, 4096, 1e4), b = params(RopeScaling::kNone, 128, 4096, 5e5);
  fk::Tensor x = fk::tasks::shared_cos_sin_cache(a);
  fk::Tensor y = fk::tasks::shared_cos_sin_cache(a);
  fk::Tensor z = fk::tasks::shared_cos_sin_cache(b);
  EXPECT_EQ(x.data_ptr(), y.data_ptr());
  EXPECT_NE(x.data_ptr(), z.data_ptr());
  EXPECT_EQ(x.sizes(), (fk::Shape{4096, 128}));
  EXPECT_EQ(fk::to_host<float>(x), fk::tasks::compute_cos_sin_cache_host(a));  // the same values as computed afresh
  EXPECT_EQ(fk::to_host<float>(z), fk::tasks::compute_cos_sin_cache_host(b));
  EXPECT_EQ(x.storage().use_count(), 2);  // x and y: the registry holds no reference
  x = fk::Tensor();
  y = fk::Tensor();
  fk::Tensor again = fk::tasks::shared_cos_sin_cache(a);  // released with its last holder, then rebuilt
  EXPECT_EQ(again.storage().use_count(), 1);
  EXPECT_EQ(fk::to_host<float>(again), fk::tasks::compute_cos_sin_cache_host(a));
}
TEST(RopeCache, RowsFollowVllm) {
  EXPECT_EQ(fk::tasks::cos_sin_cache_rows(params(RopeScaling::kNone, 128, 4096, 1e4)), 4096);
  EXPECT_EQ(fk::tasks::cos_sin_cache_rows(params(RopeScaling::kLinear, 128, 4096, 1e4)), 8192);
  EXPECT_EQ(fk::tasks::cos_sin_cache_rows(params(RopeScaling::kYarn, 128, 4096, 1e4)), 131072);
  const std::vector<float> c = fk::tasks::compute_cos_sin_cache_host(params(RopeScaling::kYarn, 128, 4096, 1e6));
  EXPECT_NEAR(c[0], 0.1 * std::log(4.0) + 1, 1e-6);  // cos(0) * mscale
}

// LongRoPE (Note [LongRoPE]): short table then long table, each inv_freq divided by its factor,
// cos/sin times the attention factor; checked against the closed form in fp64.
RopeParams longrope_params() {
  RopeParams p;
  p.rotary_dim = 8, p.max_position = 64, p.base = 10000, p.scaling = RopeScaling::kLongrope;
  p.original_max_position = 16, p.factor = 1.19;
  p.short_factor = {1.0, 1.5, 2.0, 3.0};
  p.long_factor = {1.0, 4.0, 16.0, 47.77};
  return p;
}
TEST(RopeCache, LongropeTablesMatchClosedForm) {
  const RopeParams p = longrope_params();
  EXPECT_EQ(fk::tasks::cos_sin_cache_rows(p), 16 + 64);
  const std::vector<float> c = fk::tasks::compute_cos_sin_cache_host(p);
  ASSERT_EQ(c.size(), 80u * 8u);
  for (int table = 0; table < 2; ++table)
    for (int t : {0, 1, 15}) {
      const int row = table * 16 + t;
      for (int i = 0; i < 4; ++i) {
        const double f = table ? p.long_factor[i] : p.short_factor[i];
        const double a = t / (f * std::pow(10000.0, 2.0 * i / 8));
        EXPECT_NEAR(c[row * 8 + i], 1.19 * std::cos(a), 2e-6) << table << "," << t << "," << i;
        EXPECT_NEAR(c[row * 8 + 4 + i], 1.19 * std::sin(a), 2e-6) << table << "," << t << "," << i;
      }
    }
  // The long table covers every position up to max_position.
  const double a = 63 / (47.77 * std::pow(10000.0, 6.0 / 8));
  EXPECT_NEAR(c[(16 + 63) * 8 + 4 + 3], 1.19 * std::sin(a), 2e-6);
}
TEST(Kernels, LongropeOffsetIsPerBatch) {
  FK_REQUIRE_GPU();
  Tensor off = empty({1}, DType::kI32);
  // vLLM's rule: the long table (offset original_max) when any position exceeds original_max.
  std::vector<int64_t> large(5000, 7);
  large[4321] = 63;  // one long position far into a large batch
  for (const auto& [pv, expected] : std::vector<std::pair<std::vector<int64_t>, int>>{
           {{0, 5, 16}, 0}, {{16}, 0}, {{17}, 16}, {{3, 2, 40, 1}, 16}, {std::vector<int64_t>(5000, 7), 0}, {large, 16}}) {
    Tensor pos = to_device(pv, {static_cast<int64_t>(pv.size())});
    fk::kernels::longrope_offset(pos.data<int64_t>(), pos.numel(), 16, off.data<int>(), current_stream());
    FK_CHECK_LAUNCH();
    EXPECT_EQ(to_host<int>(off)[0], expected) << pv.size() << " positions";
  }
}

struct RopeCfg {
  static constexpr int head_size = 128, rotary_dim = 128;
  static constexpr int64_t max_position = 131072;
  static constexpr double base = 500000;
  static constexpr bool is_neox_style = true;
  static constexpr int num_heads = 32, num_kv_heads = 8;
  static constexpr fk::tasks::RopeScaling scaling_type = fk::tasks::RopeScaling::kLlama3;
  static constexpr double scaling_factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  static constexpr int64_t original_max_position = 8192;
  static constexpr double beta_fast = 0, beta_slow = 0;
  using scalar_t = bf16;
};
class TestRotaryEmbedding {  // shaped like templates/rotary_embedding.cu.mustache
 public:
  TestRotaryEmbedding(int64_t head_size, int64_t rotary_dim, int64_t max_position_embeddings, double base, bool neox)
      : head_size(head_size), rotary_dim(rotary_dim), max_position_embeddings(max_position_embeddings), base(base),
        is_neox_style(neox),
        cos_sin_cache(fk::tasks::compute_cos_sin_cache(fk::tasks::rope_params<RopeCfg>(rotary_dim, max_position_embeddings, base))) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& positions, Tensor& query, Tensor& key) {
    return fk::tasks::rotary_embedding_forward<RopeCfg>(positions, query, key, cos_sin_cache);
  }
  int64_t head_size, rotary_dim, max_position_embeddings;
  double base;
  bool is_neox_style;
  Tensor cos_sin_cache;
};

TEST(Tasks, RotaryEmbedding_bf16_llama3_t1) {
  FK_REQUIRE_GPU();
  fk::tasks::RotaryEmbeddingInstance<TestRotaryEmbedding, RopeCfg> inst(tokens_case(1));
  check_task_instance(inst);
}
TEST(Tasks, RotaryEmbedding_bf16_llama3_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::RotaryEmbeddingInstance<TestRotaryEmbedding, RopeCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
