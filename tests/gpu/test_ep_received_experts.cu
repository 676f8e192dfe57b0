// The expert side of a data-parallel MoE block on one GPU (Note [Data-parallel expert MoE] in fk/tasks/moe.h): the rows
// an expert-parallel dispatch delivers (source q's live rows first in its region of `capacity`, stale rows after them),
// their global ids localized to this rank's experts (ep_localize_received_ids), and this rank's experts run on them
// (fused_experts_forward with other ranks' slots), against the unsharded experts' reference on the live rows. The
// stale rows hold NaN: no expert may read them. The dispatch / combine themselves need ranks (dist tests, fk_bench
// --world-size with the @ep layouts).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "L2/fused_experts_e64_top8_h2048_i768_bf16.h"  // Qwen3-30B-A3B's 64 local experts at EP 2
#include "fk/tasks/moe.h"
#include "gpu_test_util.h"

namespace fk::testing {
namespace {

namespace fe = fk::generated::fused_experts_e64_top8_h2048_i768_bf16;

TEST(Kernels, EpReceivedRowsRunOnTheRanksExpertsAndStaleRowsStayUnread) {
  FK_REQUIRE_GPU();
  constexpr int kWorld = 2, kRank = 1, kTopK = 8, kLocal = 64, kExperts = kWorld * kLocal;
  constexpr int64_t kCap = 24, kRows = kWorld * kCap, H = fe::Config::hidden_size, I = fe::Config::moe_intermediate_size;
  const std::vector<int32_t> counts = {17, 9};  // live rows of source 0 and 1
  std::mt19937 rng(20261207);
  std::vector<int32_t> ids(size_t(kRows * kTopK));
  std::vector<float> w(size_t(kRows * kTopK));
  std::uniform_real_distribution<float> uw(0.05f, 1.f);
  for (int64_t r = 0; r < kRows; ++r) {  // k distinct global experts per row
    std::vector<int32_t> all(kExperts);
    for (int e = 0; e < kExperts; ++e) all[size_t(e)] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int k = 0; k < kTopK; ++k) {
      ids[size_t(r * kTopK + k)] = all[size_t(k)];
      w[size_t(r * kTopK + k)] = uw(rng);
    }
  }
  auto live = [&](int64_t r) { return r % kCap < counts[size_t(r / kCap)]; };
  // Expected local ids; the reference's routing: masked slots on expert 0 with weight 0 (they add exactly 0).
  std::vector<int32_t> want(ids.size()), ref_ids(ids.size());
  std::vector<float> ref_w(w.size());
  int64_t local_slots = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int e = ids[i];
    const bool mine = live(int64_t(i) / kTopK) && e >= kRank * kLocal && e < (kRank + 1) * kLocal;
    want[i] = mine ? e - kRank * kLocal : -1;
    ref_ids[i] = mine ? want[i] : 0;
    ref_w[i] = mine ? w[i] : 0.f;
    local_slots += mine;
  }
  ASSERT_GT(local_slots, 20);
  Tensor d_ids = to_device(ids, {kRows, kTopK}), d_counts = to_device(counts, {kWorld});
  Tensor local = empty({kRows, kTopK}, DType::kI32);
  fk::kernels::ep_localize_received_ids(local.data<int32_t>(), d_ids.data<int32_t>(), d_counts.data<int32_t>(), kWorld, kCap, kTopK,
                                        kRank * kLocal, kLocal, current_stream());
  FK_CHECK_LAUNCH();
  EXPECT_EQ(to_host<int32_t>(local), want);

  // Hidden states: the live rows random, the stale rows NaN (what a previous, longer call left there may be anything).
  std::normal_distribution<float> n01;
  std::vector<float> xs(size_t(kRows * H)), xclean(xs.size());
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < H; ++c) {
      const float v = n01(rng);
      xs[size_t(r * H + c)] = live(r) ? v : std::numeric_limits<float>::quiet_NaN();
      xclean[size_t(r * H + c)] = live(r) ? v : 0.f;
    }
  Tensor x = fk::tasks::ref::round_to(to_device(xs, {kRows, H}), DType::kBF16);
  Tensor x_ref = fk::tasks::ref::round_to(to_device(xclean, {kRows, H}), DType::kBF16);
  Tensor w13 = empty({kLocal, 2 * I, H}, DType::kBF16), w2 = empty({kLocal, H, I}, DType::kBF16);
  fill_normal(w13, 71, 0.f, 1.f / std::sqrt(float(H)));
  fill_normal(w2, 72, 0.f, 1.f / std::sqrt(float(I)));
  Tensor tw = to_device(w, {kRows, kTopK});
  fe::FusedExperts experts;
  Tensor out = fk::tasks::fused_experts_forward<fe::Config>(experts, x, w13, w2, tw, local, Tensor(), Tensor(), true);
  FK_CHECK_LAUNCH();
  Tensor ref = fk::tasks::ref_fused_experts(x_ref, w13, w2, to_device(ref_w, {kRows, kTopK}), to_device(ref_ids, {kRows, kTopK}));
  FK_EXPECT_CLOSE(out, fk::tasks::to_f32(ref), fk::tasks::composite_tolerance(DType::kBF16, 1.0, 0.01));
  // Rows with no slot of this rank (the stale ones included) are exactly zero, and nothing is NaN.
  const std::vector<float> o = to_host<float>(fk::tasks::to_f32(out));
  for (int64_t r = 0; r < kRows; ++r) {
    bool any = false;
    for (int k = 0; k < kTopK; ++k) any |= want[size_t(r * kTopK + k)] >= 0;
    for (int64_t c = 0; c < H; c += 97) {
      const float v = o[size_t(r * H + c)];
      ASSERT_TRUE(std::isfinite(v)) << "row " << r << " col " << c;
      if (!any) ASSERT_EQ(v, 0.f) << "row " << r << " (no slot of this rank) col " << c;
    }
  }
}

// The all-to-all task's stand-in experts (Note [Expert-parallel all-to-all task] in fk/tasks/ep_all_to_all.h): a live
// row times the sum of its weights on this rank's slots, one rounding; a stale row (NaN here) 0, read by no one.
TEST(Kernels, EpWeightedRowsScaleLiveRowsByTheirLocalWeightsAndZeroStaleRows) {
  FK_REQUIRE_GPU();
  constexpr int kWorld = 2, kRank = 0, kTopK = 4, kLocal = 8;
  constexpr int64_t kCap = 8, kRows = kWorld * kCap, H = 72;  // H not a multiple of the 256 threads
  const std::vector<int32_t> counts = {5, 8};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uw(0.05f, 1.f), ux(-2.f, 2.f);
  std::vector<int32_t> ids(size_t(kRows * kTopK));
  std::vector<float> w(ids.size()), x(size_t(kRows * H));
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int32_t(rng() % (kWorld * kLocal));
    w[i] = uw(rng);
  }
  auto live = [&](int64_t r) { return r % kCap < counts[size_t(r / kCap)]; };
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < H; ++c) x[size_t(r * H + c)] = live(r) ? ux(rng) : std::numeric_limits<float>::quiet_NaN();
  Tensor d_ids = to_device(ids, {kRows, kTopK}), d_counts = to_device(counts, {kWorld}), d_w = to_device(w, {kRows, kTopK});
  Tensor d_x = fk::tasks::ref::round_to(to_device(x, {kRows, H}), DType::kBF16);
  Tensor local = empty({kRows, kTopK}, DType::kI32), y = empty({kRows, H}, DType::kBF16);
  fk::kernels::ep_localize_received_ids(local.data<int32_t>(), d_ids.data<int32_t>(), d_counts.data<int32_t>(), kWorld, kCap, kTopK,
                                        kRank * kLocal, kLocal, current_stream());
  fk::kernels::ep_weighted_rows(y.data<bf16>(), d_x.data<bf16>(), d_w.data<float>(), local.data<int32_t>(), kRows, H, kTopK, current_stream());
  FK_CHECK_LAUNCH();
  const std::vector<float> got = to_host<float>(fk::tasks::to_f32(y)), xb = to_host<float>(fk::tasks::to_f32(d_x));
  for (int64_t r = 0; r < kRows; ++r) {
    float scale = 0.f;
    for (int k = 0; k < kTopK; ++k) {
      const int e = ids[size_t(r * kTopK + k)];
      if (live(r) && e >= kRank * kLocal && e < (kRank + 1) * kLocal) scale += w[size_t(r * kTopK + k)];
    }
    for (int64_t c = 0; c < H; ++c) {
      const float want = live(r) ? xb[size_t(r * H + c)] * scale : 0.f;
      ASSERT_NEAR(got[size_t(r * H + c)], want, std::abs(want) * 1e-2f + 1e-6f) << "row " << r << " col " << c;
    }
  }
}

}  // namespace
}  // namespace fk::testing
