// vocab_parallel_embedding: baseline kernel vs the reference gather, and the harness.
#include <cmath>
#include "fk/tasks/embedding.h"
#include "fk/tasks/reference_ops.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int64_t kV, int kH> void check_embedding(int64_t tokens) {
  Tensor w = empty({kV, kH}, dtype_of<T>);
  fill_normal(w, 51);
  Tensor ids = empty({tokens}, DType::kI64);
  fill_randint(ids, 52, 0, kV);
  Tensor out = empty({tokens, kH}, dtype_of<T>);
  poison(out);
  fk::kernels::vocab_parallel_embedding<kH, T>(out.data<T>(), kH, ids.data<int64_t>(), w.data<T>(), kV, tokens,
                                              current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({tokens, kH}, DType::kF32);
  fk::kernels::reference::vocab_parallel_embedding_ref<T>(ref.data<float>(), ids.data<int64_t>(), w.data<T>(), kV, tokens,
                                                          kH, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

#define FK_EMB_TESTS(D, V, H)                                                                                    \
  TEST(Kernels, VocabParallelEmbedding_##D##_v##V##_h##H##_t1) { FK_REQUIRE_GPU(); check_embedding<D, V, H>(1); } \
  TEST(Kernels, VocabParallelEmbedding_##D##_v##V##_h##H##_t7) { FK_REQUIRE_GPU(); check_embedding<D, V, H>(7); } \
  TEST(Kernels, VocabParallelEmbedding_##D##_v##V##_h##H##_t256) { FK_REQUIRE_GPU(); check_embedding<D, V, H>(256); } \
  TEST(Kernels, VocabParallelEmbedding_##D##_v##V##_h##H##_t4096) { FK_REQUIRE_GPU(); check_embedding<D, V, H>(4096); }

FK_EMB_TESTS(bf16, 128256, 4096)
FK_EMB_TESTS(bf16, 152064, 3584)
FK_EMB_TESTS(f32, 1000, 96)

TEST(Kernels, VocabParallelEmbedding_bf16_out_of_range_ids_give_zero_rows) {
  FK_REQUIRE_GPU();
  Tensor w = empty({100, 256}, DType::kBF16);
  fill_normal(w, 53);
  Tensor ids = to_device(std::vector<int64_t>{5, -1, 100, 99}, {4});
  Tensor out = empty({4, 256}, DType::kBF16);
  fk::kernels::vocab_parallel_embedding<256, bf16>(out.data<bf16>(), 256, ids.data<int64_t>(), w.data<bf16>(), 100, 4,
                                                  current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({4, 256}, DType::kF32);
  fk::kernels::reference::vocab_parallel_embedding_ref<bf16>(ref.data<float>(), ids.data<int64_t>(), w.data<bf16>(), 100,
                                                             4, 256, current_stream());
  FK_CHECK_LAUNCH();
  const std::vector<float> r = to_host<float>(ref);
  EXPECT_EQ(r[256], 0.f);
  EXPECT_EQ(r[512 + 7], 0.f);
  FK_EXPECT_CLOSE(out, ref, default_tolerance(DType::kBF16));
}

struct EmbCfg {
  static constexpr int64_t num_embeddings = 128256;
  static constexpr int embedding_dim = 4096;
  static constexpr double embed_scale = 0;
  using scalar_t = bf16;
};
class TestEmbedding {  // shaped like templates/vocab_parallel_embedding.cu.mustache
 public:
  TestEmbedding(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings(num_embeddings), embedding_dim(embedding_dim),
        weight(empty({num_embeddings, embedding_dim}, dtype_of<bf16>)) {}
  Tensor forward(const Tensor& input_) { return fk::tasks::embedding_forward<EmbCfg>(input_, weight); }
  int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

TEST(Tasks, VocabParallelEmbedding_bf16_v128256_h4096_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::EmbeddingInstance<TestEmbedding, EmbCfg> inst(tokens_case(7));
  check_task_instance(inst);
}

// Gemma 3 1B's scaled embedding: rows times bf16(sqrt(1152)) = 34.
struct ScaledEmbCfg {
  static constexpr int64_t num_embeddings = 262144;
  static constexpr int embedding_dim = 1152;
  static constexpr double embed_scale = 33.941125496954285;
  using scalar_t = bf16;
};
class TestScaledEmbedding {
 public:
  TestScaledEmbedding(int64_t num_embeddings, int64_t embedding_dim)
      : weight(empty({num_embeddings, embedding_dim}, dtype_of<bf16>)) {}
  Tensor forward(const Tensor& input_) { return fk::tasks::embedding_forward<ScaledEmbCfg>(input_, weight); }
  Tensor weight;
};

TEST(Tasks, ScaledWordEmbedding_bf16_v262144_h1152_t256) {
  FK_REQUIRE_GPU();
  EXPECT_EQ(fk::tasks::embed_scale_of<ScaledEmbCfg>(), 34.f);  // rounded to bf16 first, as HF does
  fk::tasks::EmbeddingInstance<TestScaledEmbedding, ScaledEmbCfg> inst(tokens_case(256));
  check_task_instance(inst);
  // The scale is applied: the output is 34x the weight row.
  Tensor ids = empty({1}, DType::kI64);
  fill_randint(ids, 5, 0, ScaledEmbCfg::num_embeddings);
  TestScaledEmbedding m(ScaledEmbCfg::num_embeddings, ScaledEmbCfg::embedding_dim);
  fill_normal(m.weight, 6);
  std::vector<bf16> out = to_host<bf16>(m.forward(ids));
  std::vector<bf16> row = to_host<bf16>(fk::tasks::ref::embedding(ids, m.weight));
  for (int i = 0; i < 8; ++i) {
    const float o = __bfloat162float(out[i]), r = __bfloat162float(row[i]);
    EXPECT_NEAR(o, 34.f * r, std::fabs(r) * 34.f / 128.f) << i;
  }
}

}  // namespace
}  // namespace fk::testing
