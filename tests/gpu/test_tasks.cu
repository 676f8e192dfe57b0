// Every registered (generated) task, checked against its reference on its smallest decode case
// and its smallest prefill case, through the runner's correctness protocol (fresh inputs each
// round, poisoned outputs, inputs checked unmutated). The full registry is exercised by fk_bench.
#include <string>
#include <vector>

#include "fk/runtime/runner.h"
#include "gpu_test_util.h"

namespace {

struct Param {
  const fk::TaskInfo* task;
  const fk::ShapeCase* shape;
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const fk::TaskInfo* t : fk::all_tasks()) {
    const fk::ShapeCase* first_decode = nullptr;
    const fk::ShapeCase* first_prefill = nullptr;
    for (const fk::ShapeCase& c : t->cases) {
      if (c.regime == "decode" && !first_decode) first_decode = &c;
      if (c.regime == "prefill" && !first_prefill) first_prefill = &c;
    }
    if (first_decode) out.push_back({t, first_decode});
    if (first_prefill) out.push_back({t, first_prefill});
  }
  return out;
}

class GeneratedTask : public ::testing::TestWithParam<Param> {};

TEST_P(GeneratedTask, MatchesReference) {
  FK_REQUIRE_GPU();
  const Param& p = GetParam();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  fk::CheckOutcome o;
  {
    fk::StreamGuard g(s);
    o = fk::check_task_case(*p.task, *p.shape, /*rounds=*/2, /*seed=*/1234);
  }
  cudaStreamDestroy(s);
  if (o.status == "SKIPPED") GTEST_SKIP() << o.message;
  EXPECT_EQ(o.status, "PASSED") << o.message;
}

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  std::string n = "L" + std::to_string(info.param.task->level) + "_" + info.param.task->name + "_" + info.param.shape->name;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(All, GeneratedTask, ::testing::ValuesIn(params()), name_of);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GeneratedTask);

}  // namespace
