// Runtime tests: the checking machinery must catch what it is there to catch.
#include <cmath>
#include <vector>

#include "checking_modes.h"  // runtime/src: the runner's private modes
#include "fk/runtime/check.h"
#include "fk/runtime/random.h"
#include "fk/runtime/task.h"
#include "fk/runtime/tensor.h"
#include "gpu_test_util.h"

namespace {

TEST(Runtime, FillIsDeterministicAndSeedDependent) {
  FK_REQUIRE_GPU();
  fk::Tensor a = fk::empty({1000}, fk::DType::kF32), b = fk::empty({1000}, fk::DType::kF32);
  fk::Tensor c = fk::empty({1000}, fk::DType::kF32);
  fk::fill_normal(a, 7);
  fk::fill_normal(b, 7);
  fk::fill_normal(c, 8);
  const auto ha = fk::to_host<float>(a), hb = fk::to_host<float>(b), hc = fk::to_host<float>(c);
  EXPECT_EQ(ha, hb);
  EXPECT_NE(ha, hc);
  double mean = 0, var = 0;
  for (float v : ha) mean += v;
  mean /= ha.size();
  for (float v : ha) var += (v - mean) * (v - mean);
  var /= ha.size();
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(var, 1.0, 0.2);
}

TEST(Runtime, RandintStaysInRange) {
  FK_REQUIRE_GPU();
  fk::Tensor t = fk::empty({4096}, fk::DType::kI64);
  fk::fill_randint(t, 3, 5, 17);
  for (int64_t v : fk::to_host<int64_t>(t)) {
    EXPECT_GE(v, 5);
    EXPECT_LT(v, 17);
  }
}

TEST(Runtime, CompareCatchesNaNMismatchAndPassesEqual) {
  FK_REQUIRE_GPU();
  std::vector<float> ref(256);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::sin(0.1f * i) + 2.f;
  fk::Tensor e = fk::to_device(ref, {256});
  fk::Tensor same = fk::to_device(ref, {256});
  const fk::Tolerance tol = fk::default_tolerance(fk::DType::kF32);
  EXPECT_TRUE(fk::compare(same, e, tol).passed);

  std::vector<float> off = ref;
  off[17] += 0.5f;
  const fk::CompareResult r = fk::compare(fk::to_device(off, {256}), e, tol);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.first_bad, 17);

  std::vector<float> nan = ref;
  nan[3] = NAN;
  const fk::CompareResult rn = fk::compare(fk::to_device(nan, {256}), e, {1e9, 1e9, 1e9});
  EXPECT_FALSE(rn.passed) << "NaN must never pass, whatever the tolerance";
  EXPECT_EQ(rn.nonfinite, 1);
}

TEST(Runtime, PoisonedAllocationsReadAsNaN) {
  FK_REQUIRE_GPU();
  fk::detail::set_poison_allocations(true);
  fk::Tensor t = fk::empty({64}, fk::DType::kBF16);
  fk::detail::set_poison_allocations(false);
  fk::Tensor ref = fk::empty({64}, fk::DType::kF32);
  fk::fill_normal(ref, 1);
  const fk::CompareResult r = fk::compare(t, ref, {1e9, 1e9, 1e9});
  EXPECT_EQ(r.nonfinite, 64) << "an output left unwritten must fail the check";
}

TEST(Runtime, FingerprintDetectsOneChangedByte) {
  FK_REQUIRE_GPU();
  fk::Tensor t = fk::empty({1 << 16}, fk::DType::kBF16);
  fk::fill_normal(t, 11);
  const uint64_t before = fk::fingerprint(t);
  EXPECT_EQ(before, fk::fingerprint(t));
  unsigned char byte = 0x5A;
  FK_CUDA_CHECK(cudaMemcpy(static_cast<char*>(t.data_ptr()) + 12345, &byte, 1, cudaMemcpyHostToDevice));
  EXPECT_NE(before, fk::fingerprint(t));
}

TEST(Runtime, ViewsAndNarrow) {
  FK_REQUIRE_GPU();
  fk::Tensor t = fk::empty({4, 6}, fk::DType::kF32);
  fk::Tensor v = t.view({2, -1});
  EXPECT_EQ(v.size(1), 12);
  fk::Tensor n = t.narrow_last(2, 3);
  EXPECT_EQ(n.size(-1), 3);
  EXPECT_EQ(n.stride(0), 6);
  EXPECT_FALSE(n.is_contiguous());
  EXPECT_THROW(n.view({12}), fk::CudaError);
}

}  // namespace
