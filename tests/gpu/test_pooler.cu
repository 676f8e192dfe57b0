// embedding_pooler (CLS, mean, last token; normalised or not) and l2_normalize: the baseline
// kernels against the fp64 references at embedding widths (MiniLM 384, BERT 768, XLM-R large
// 1024, a 4096-wide LLM embedder) over packed variable-length batches with an empty sequence and
// strided rows; the reference against closed-form values; and the task harnesses.
#include "fk/kernels/reference/pooler_ref.cuh"
#include "fk/tasks/pooler.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::kernels::Pool;

template <class T, int kH, Pool kPool, bool kNorm> void check_pool(const std::vector<int32_t>& lens, int64_t x_stride = kH) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  const int64_t total = cu.back(), b = static_cast<int64_t>(lens.size());
  Tensor xs = empty({std::max<int64_t>(total, 1), x_stride}, dtype_of<T>);
  fill_normal(xs, 61, 0.3f, 1.f);
  Tensor cus = to_device(cu, {b + 1});
  Tensor out = empty({b, kH}, dtype_of<T>);
  poison(out);
  fk::kernels::embedding_pool<kH, T, kPool, kNorm>(out.data<T>(), xs.data<T>(), x_stride, cus.data<int32_t>(), b, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({b, kH}, DType::kF32);
  fk::kernels::reference::pool_ref<T>(ref.data<float>(), xs.data<T>(), x_stride, cus.data<int32_t>(), b, kH, kPool, kNorm,
                                      current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

const std::vector<int32_t> kRagged = {512, 1, 37, 0, 200, 511, 128, 3};

TEST(Kernels, Pool_Cls_bf16_h768) { FK_REQUIRE_GPU(); check_pool<bf16, 768, Pool::kCls, false>(kRagged); }
TEST(Kernels, Pool_ClsNorm_bf16_h1024) { FK_REQUIRE_GPU(); check_pool<bf16, 1024, Pool::kCls, true>(kRagged); }
TEST(Kernels, Pool_Mean_bf16_h768) { FK_REQUIRE_GPU(); check_pool<bf16, 768, Pool::kMean, false>(kRagged); }
TEST(Kernels, Pool_MeanNorm_bf16_h384_strided) { FK_REQUIRE_GPU(); check_pool<bf16, 384, Pool::kMean, true>(kRagged, 384 * 3); }
TEST(Kernels, Pool_MeanNorm_f16_h4096) { FK_REQUIRE_GPU(); check_pool<f16, 4096, Pool::kMean, true>({300, 2, 4096}); }
TEST(Kernels, Pool_LastNorm_bf16_h4096) { FK_REQUIRE_GPU(); check_pool<bf16, 4096, Pool::kLast, true>(kRagged); }
TEST(Kernels, Pool_Last_f32_h1000) { FK_REQUIRE_GPU(); check_pool<float, 1000, Pool::kLast, false>({5, 9}); }
TEST(Kernels, Pool_Mean_bf16_h768_b32_s512) {
  FK_REQUIRE_GPU();
  check_pool<bf16, 768, Pool::kMean, true>(std::vector<int32_t>(32, 512));
}

template <class T, int kH> void check_l2(int64_t rows, int64_t x_stride = kH) {
  Tensor xs = empty({rows, x_stride}, dtype_of<T>);
  fill_normal(xs, 62, 0.f, 3.f);
  Tensor out = empty({rows, kH}, dtype_of<T>);
  poison(out);
  fk::kernels::l2_normalize<kH, T>(out.data<T>(), xs.data<T>(), x_stride, rows, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({rows, kH}, DType::kF32);
  fk::kernels::reference::l2_normalize_ref<T>(ref.data<float>(), xs.data<T>(), x_stride, rows, kH, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

TEST(Kernels, L2Normalize_bf16_h128_t16384) { FK_REQUIRE_GPU(); check_l2<bf16, 128>(16384); }  // ColBERT's token vectors
TEST(Kernels, L2Normalize_bf16_h1024_t33_strided) { FK_REQUIRE_GPU(); check_l2<bf16, 1024>(33, 2048); }
TEST(Kernels, L2Normalize_f16_h768_t1) { FK_REQUIRE_GPU(); check_l2<f16, 768>(1); }

// The references at known values: mean of rows (1, 2) and (3, 4) is (2, 3), normalised (0.5547, 0.8321).
TEST(Kernels, PoolReferenceKnownValues) {
  FK_REQUIRE_GPU();
  Tensor x = to_device(std::vector<float>{1.f, 2.f, 3.f, 4.f, 0.f, 0.f}, {3, 2});
  Tensor cu = to_device(std::vector<int32_t>{0, 2, 3}, {3});
  Tensor out = empty({2, 2}, DType::kF32);
  auto run = [&](Pool p, bool norm) {
    fk::kernels::reference::pool_ref<float>(out.data<float>(), x.data<float>(), 2, cu.data<int32_t>(), 2, 2, p, norm, current_stream());
    FK_CHECK_LAUNCH();
    return to_host<float>(out);
  };
  std::vector<float> o = run(Pool::kMean, false);
  EXPECT_EQ(o, (std::vector<float>{2.f, 3.f, 0.f, 0.f}));
  o = run(Pool::kMean, true);
  EXPECT_NEAR(o[0], 2.0 / std::sqrt(13.0), 1e-6);
  EXPECT_NEAR(o[1], 3.0 / std::sqrt(13.0), 1e-6);
  EXPECT_EQ(o[2], 0.f);  // a zero vector stays zero (the norm is clamped at 1e-12)
  EXPECT_EQ(run(Pool::kCls, false), (std::vector<float>{1.f, 2.f, 0.f, 0.f}));
  EXPECT_EQ(run(Pool::kLast, false), (std::vector<float>{3.f, 4.f, 0.f, 0.f}));
}

struct MeanCfg {
  static constexpr int64_t hidden_size = 768;
  static constexpr Pool pooling = Pool::kMean;
  static constexpr bool normalize = true;
  using scalar_t = bf16;
};
class TestPooler {  // shaped like templates/embedding_pooler.h.mustache
 public:
  Tensor forward(const Tensor& x, const Tensor& cu) { return fk::tasks::embedding_pool_forward<MeanCfg>(x, cu); }
};
struct L2Cfg {
  static constexpr int64_t hidden_size = 128;
  using scalar_t = bf16;
};
class TestL2 {
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::l2_normalize_forward<L2Cfg>(x); }
};

TEST(Tasks, Pooler_MeanNorm_bf16_h768_b8_ragged) {
  FK_REQUIRE_GPU();
  fk::tasks::PoolerInstance<TestPooler, MeanCfg> inst(ShapeCase{"b8_s512_ragged", "prefill", {{"batch", 8}, {"seq_len", 512}, {"ragged", 22}}});
  check_task_instance(inst);
}
TEST(Tasks, Pooler_MeanNorm_bf16_h768_b32_s128) {
  FK_REQUIRE_GPU();
  fk::tasks::PoolerInstance<TestPooler, MeanCfg> inst(ShapeCase{"b32_s128", "prefill", {{"batch", 32}, {"seq_len", 128}}});
  check_task_instance(inst);
}
TEST(Tasks, L2Normalize_bf16_h128_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::L2NormalizeInstance<TestL2, L2Cfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
