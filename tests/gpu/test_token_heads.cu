// The per-token heads of multi-vector and sparse embedding models (Note [Token heads]):
// token_classifier (BGE-M3's lexical weights relu(x w^T + b); sigmoid and identity heads) against
// its fp64 reference at encoder widths, with strided rows, and the reference at known values;
// drop_sequence_ends (vLLM's BOSEOSFilter) against the host's slicing over ragged batches with
// sequences too short to keep anything; and the token_classifier harness.
#include <algorithm>
#include <cmath>

#include "fk/kernels/reference/pooler_ref.cuh"
#include "fk/tasks/pooler.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::kernels::HeadAct;

template <class T, int kH, int kN, HeadAct kAct, bool kBias> void check_classify(int64_t rows, int64_t x_stride = kH) {
  Tensor xs = empty({rows, x_stride}, dtype_of<T>);
  fill_normal(xs, 71, 0.f, 1.f);
  Tensor w = empty({kN, kH}, dtype_of<T>);
  fill_normal(w, 72, 0.f, 1.f / std::sqrt(float(kH)));
  Tensor b = empty({kN}, dtype_of<T>);
  fill_normal(b, 73, 0.f, 1.f);
  Tensor out = empty({rows, kN}, dtype_of<T>);
  poison(out);
  fk::kernels::token_classify<kH, kN, T, kAct, kBias>(out.data<T>(), xs.data<T>(), x_stride, w.data<T>(), kBias ? b.data<T>() : nullptr,
                                                      rows, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({rows, kN}, DType::kF32);
  fk::kernels::reference::token_classify_ref<T>(ref.data<float>(), xs.data<T>(), x_stride, w.data<T>(), kBias ? b.data<T>() : nullptr,
                                                rows, kH, kN, kAct, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
  if (kAct == HeadAct::kRelu && rows * kN >= 64) {  // ReLU clips some outputs and keeps others (a large enough sample)
    const std::vector<float> r = to_host<float>(ref);
    EXPECT_GT(std::count(r.begin(), r.end(), 0.f), 0);
    EXPECT_LT(std::count(r.begin(), r.end(), 0.f), static_cast<long>(r.size()));
  }
}

TEST(Kernels, TokenClassify_ReluBias_bf16_h1024_n1) { FK_REQUIRE_GPU(); check_classify<bf16, 1024, 1, HeadAct::kRelu, true>(16384); }
TEST(Kernels, TokenClassify_ReluBias_bf16_h1024_n1_t7_strided) {
  FK_REQUIRE_GPU();
  check_classify<bf16, 1024, 1, HeadAct::kRelu, true>(7, 3 * 1024);
}
TEST(Kernels, TokenClassify_Sigmoid_f16_h768_n3) { FK_REQUIRE_GPU(); check_classify<f16, 768, 3, HeadAct::kSigmoid, false>(1000); }
TEST(Kernels, TokenClassify_None_bf16_h4096_n32) { FK_REQUIRE_GPU(); check_classify<bf16, 4096, 32, HeadAct::kNone, true>(129); }
TEST(Kernels, TokenClassify_Relu_f32_h384_n2) { FK_REQUIRE_GPU(); check_classify<float, 384, 2, HeadAct::kRelu, false>(33); }

// The reference at known values: x = (1, 2), w = (3, -1), b = -0.5 -> 0.5; ReLU of -0.5 -> 0.
TEST(Kernels, TokenClassifyReferenceKnownValues) {
  FK_REQUIRE_GPU();
  Tensor x = to_device(std::vector<float>{1.f, 2.f, -1.f, 0.f}, {2, 2});
  Tensor w = to_device(std::vector<float>{3.f, -1.f}, {1, 2});
  Tensor b = to_device(std::vector<float>{-0.5f}, {1});
  Tensor out = empty({2, 1}, DType::kF32);
  fk::kernels::reference::token_classify_ref<float>(out.data<float>(), x.data<float>(), 2, w.data<float>(), b.data<float>(), 2, 2, 1,
                                                    HeadAct::kRelu, current_stream());
  FK_CHECK_LAUNCH();
  EXPECT_EQ(to_host<float>(out), (std::vector<float>{0.5f, 0.f}));
}

/// drop_sequence_ends against Python's slicing h[first : len - last] per sequence, done on the host.
void check_drop(const std::vector<int32_t>& lens, int first, int last, int64_t width, int64_t stride) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  const int64_t total = cu.back();
  std::vector<float> xh(static_cast<size_t>(std::max<int64_t>(total, 1) * stride));
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>(i);
  Tensor x = to_device(xh, {std::max<int64_t>(total, 1), stride}).narrow_first(0, total);
  Tensor xv = x.narrow_last(0, width);
  Tensor cud = to_device(cu, {static_cast<int64_t>(cu.size())});
  Tensor out = fk::tasks::drop_sequence_ends(xv, cud, cu, first, last);
  std::vector<float> want;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t r = cu[s] + first; r < cu[s + 1] - last; ++r)
      for (int64_t c = 0; c < width; ++c) want.push_back(xh[static_cast<size_t>(r * stride + c)]);
  ASSERT_EQ(out.size(0), static_cast<int64_t>(want.size()) / width);
  ASSERT_EQ(out.size(0), fk::tasks::kept_offsets(cu, first, last).back());
  if (!want.empty()) EXPECT_EQ(to_host<float>(out), want);
}

TEST(Kernels, DropSequenceEnds_BosEos_ragged_short) {
  FK_REQUIRE_GPU();
  check_drop({512, 1, 2, 0, 37, 3, 100}, 1, 1, 1, 1);  // lexical weights: lengths 0, 1 and 2 keep nothing
}
TEST(Kernels, DropSequenceEnds_Bos_wide_strided) {
  FK_REQUIRE_GPU();
  check_drop({17, 1, 300, 40}, 1, 0, 128, 200);  // token vectors of a ColBERT-width head, strided rows
}
TEST(Kernels, DropSequenceEnds_nothing_dropped_b32) {
  FK_REQUIRE_GPU();
  check_drop(std::vector<int32_t>(32, 64), 0, 0, 8, 8);
}
TEST(Kernels, DropSequenceEnds_refuses_wrong_offsets) {
  FK_REQUIRE_GPU();
  Tensor x = empty({10, 4}, DType::kF32);
  Tensor cud = to_device(std::vector<int32_t>{0, 4, 9}, {3});
  EXPECT_THROW(fk::tasks::drop_sequence_ends(x, cud, {0, 4, 9}, 1, 1), std::exception);  // offsets end at 9, x has 10 rows
}

struct SparseCfg {
  static constexpr int64_t hidden_size = 1024;
  static constexpr int64_t num_labels = 1;
  static constexpr HeadAct act = HeadAct::kRelu;
  static constexpr bool has_bias = true;
  using scalar_t = bf16;
};
class TestSparse {  // shaped like templates/token_classifier.h.mustache
 public:
  Tensor forward(const Tensor& x) { return fk::tasks::token_classifier_forward<SparseCfg>(x, weight, bias); }
  Tensor weight = empty({1, 1024}, DType::kBF16);
  Tensor bias = empty({1}, DType::kBF16);
};

TEST(Tasks, TokenClassifier_ReluBias_bf16_h1024_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::TokenClassifierInstance<TestSparse, SparseCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

TEST(Tasks, TokenClassifier_refuses_a_missing_bias) {
  FK_REQUIRE_GPU();
  Tensor x = empty({4, 1024}, DType::kBF16);
  Tensor w = empty({1, 1024}, DType::kBF16);
  EXPECT_THROW(fk::tasks::token_classifier_forward<SparseCfg>(x, w, Tensor()), std::exception);
}

}  // namespace
}  // namespace fk::testing
