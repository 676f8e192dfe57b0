// SigLIP-2 NaFlex's vision tower (issue 22): the antialiased resize's taps of the position table
// against the reference weights (interp_matrix, double), the weighted-row kernel against the
// separable reference over grids that shrink, stretch and keep the table (Note [NaFlex positions]),
// the identity of the table's own grid, and the batch's refusals.
#include <cmath>

#include "fk/kernels/reference/interpolate_weights.h"
#include "fk/tasks/siglip2.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::tasks::VisionGrid;

// Every output row's fp32 taps equal the double reference's row (zeros elsewhere) to fp32 rounding, and sum to 1.
TEST(Harness, NaflexAxisTapsMatchAntialiasedWeights) {
  for (int in : {16, 7}) {
    for (int out : {1, 2, 3, 5, 8, 11, 16, 17, 23, 32, 40, 64}) {
      const std::vector<fk::tasks::AaAxisTaps> taps = fk::tasks::aa_bilinear_axis_taps(in, out);
      const std::vector<double> ref = fk::kernels::reference::interp_matrix(in, out, fk::kernels::reference::InterpRefMode::kBilinearAA, false);
      ASSERT_EQ(taps.size(), size_t(out));
      for (int o = 0; o < out; ++o) {
        std::vector<double> dense(size_t(in), 0.0);
        double sum = 0;
        for (size_t j = 0; j < taps[o].w.size(); ++j) {
          ASSERT_LT(taps[o].first + int(j), in) << in << "->" << out << " row " << o;
          dense[size_t(taps[o].first) + j] = taps[o].w[j];
          sum += taps[o].w[j];
        }
        EXPECT_NEAR(sum, 1.0, 1e-6) << in << "->" << out << " row " << o;
        // fp32 taps (as PyTorch computes them) against double: a few ulps of fp32 apart.
        for (int i = 0; i < in; ++i) EXPECT_NEAR(dense[size_t(i)], ref[size_t(o) * in + i], 2e-6) << in << "->" << out << " (" << o << ", " << i << ")";
      }
    }
  }
  // Shrinking 16 -> 4: output 1 (centre 6) spans rows 2..9 with the triangle widened 4 times, weights
  // 1, 3, 5, 7, 7, 5, 3, 1 (/ 32); output 0 is cut at the table's edge (rows 0..5) and renormalised.
  const auto t = fk::tasks::aa_bilinear_axis_taps(16, 4);
  ASSERT_EQ(t[1].first, 2);
  ASSERT_EQ(t[1].w.size(), size_t(8));
  const float want[8] = {1, 3, 5, 7, 7, 5, 3, 1};
  for (int j = 0; j < 8; ++j) EXPECT_FLOAT_EQ(t[1].w[j], want[j] / 32.f) << j;
  EXPECT_EQ(t[0].first, 0);
  EXPECT_EQ(t[0].w.size(), size_t(6));
}

// The table's own grid: one tap of weight 1 per patch, so the rows add exactly.
TEST(Kernels, WeightedRows_identity_grid_is_exact) {
  FK_REQUIRE_GPU();
  constexpr int64_t kSide = 16, kE = 96;
  const fk::tasks::NaflexBatch batch({{1, kSide, kSide}}, kSide);
  EXPECT_EQ(batch.pos_idx.size(0), kSide * kSide);
  Tensor table = empty({kSide * kSide, kE}, DType::kBF16), h = empty({kSide * kSide, kE}, DType::kBF16);
  fill_normal(table, 3);
  fill_normal(h, 4);
  const std::vector<bf16> h0 = to_host<bf16>(h), tv = to_host<bf16>(table);
  fk::tasks::add_weighted_rows_(h, table, batch.pos_ptr, batch.pos_idx, batch.pos_w);
  const std::vector<bf16> h1 = to_host<bf16>(h);
  for (size_t i = 0; i < h1.size(); ++i)
    ASSERT_EQ(__bfloat162float(h1[i]), __bfloat162float(__float2bfloat16(__bfloat162float(h0[i]) + __bfloat162float(tv[i])))) << i;
}

// Grids that shrink the table along one axis and stretch it along the other, a single patch, and
// the table's own size: the kernel over the fp32 taps against the double separable reference.
TEST(Kernels, WeightedRows_bf16_matches_separable_reference) {
  FK_REQUIRE_GPU();
  constexpr int64_t kSide = 16, kE = 1152;
  const std::vector<VisionGrid> grids{{1, 16, 16}, {1, 8, 32}, {1, 3, 40}, {1, 23, 11}, {1, 1, 1}, {1, 64, 4}};
  const fk::tasks::NaflexBatch batch(grids, kSide);
  Tensor table = empty({kSide * kSide, kE}, DType::kBF16), h = empty({batch.tokens, kE}, DType::kBF16);
  fill_normal(table, 5);
  fill_normal(h, 6);
  Tensor h0 = empty(h.sizes(), DType::kBF16);
  copy_(h0, h);
  fk::tasks::add_weighted_rows_(h, table, batch.pos_ptr, batch.pos_idx, batch.pos_w);
  FK_CHECK_LAUNCH();
  const Tensor pos = fk::tasks::ref_naflex_positions(table, grids, kSide);
  const Tensor want = fk::tasks::ref::round_to(fk::tasks::ref::add_f32(h0, fk::tasks::ref::round_to(pos, DType::kBF16)), DType::kBF16);
  FK_EXPECT_CLOSE(h, fk::tasks::to_f32(want), default_tolerance(DType::kBF16));
  // The shrunk axis averages: image 1's row 0 (rows 0-1 of the table, 8 of 16) is no table row.
  EXPECT_EQ(batch.meta.num_seqs, 6);
  EXPECT_EQ(batch.meta.max_seqlen, 256);
}

TEST(Harness, NaflexBatchRefusesVideoAndEmptyGrids) {
  FK_REQUIRE_GPU();
  EXPECT_THROW(fk::tasks::NaflexBatch({{2, 4, 4}}, 16), std::exception);
  EXPECT_THROW(fk::tasks::NaflexBatch({{1, 0, 4}}, 16), std::exception);
  EXPECT_THROW(fk::tasks::NaflexBatch({}, 16), std::exception);
  Tensor h = empty({4, 8}, DType::kBF16), table = empty({16, 8}, DType::kBF16);
  const fk::tasks::NaflexBatch batch({{1, 2, 3}}, 4);  // 6 rows: the taps do not fit 4
  EXPECT_THROW(fk::tasks::add_weighted_rows_(h, table, batch.pos_ptr, batch.pos_idx, batch.pos_w), std::exception);
}

}  // namespace
}  // namespace fk::testing
