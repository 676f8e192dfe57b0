// Qwen2-VL's vision tower (issue 22): the rope's position-table mode against its uniform-grid mode
// (bit-exact: the same rotation, the coordinates from a table), the two independent constructions of
// every patch's (row, column) over images of mixed sizes and videos (Note [Vision grids]), the
// per-frame attention sequences, bad grids, the patch_embedding_3d harness, and Qwen2.5-VL's window
// order (Note [Vision windows]).
#include "fk/kernels/reference/vision_rope_ref.cuh"
#include "fk/kernels/vision_rope.cuh"
#include "fk/tasks/qwen2_vl.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::tasks::VisionBatch;
using fk::tasks::VisionGrid;

// A 16 x 16 grid in 2 x 2 windows, three images: the table from the grids turns q and k exactly as
// the geometry does.
TEST(Kernels, VisionRopePositionTable_bf16_d80_matches_grid_mode) {
  FK_REQUIRE_GPU();
  constexpr int kD = 80, kHeads = 4;
  const int64_t images = 3, tokens = images * 256, w = 3 * int64_t(kHeads) * kD;
  Tensor x0 = empty({tokens, w}, DType::kBF16);
  fill_normal(x0, 17);
  Tensor a = empty({tokens, w}, DType::kBF16), b = empty({tokens, w}, DType::kBF16);
  copy_(a, x0);
  copy_(b, x0);
  fk::kernels::VisionRopeGeometry g{256, 0, 16, 16, 2, 10000.f, false};
  fk::kernels::vision_rope_2d<bf16, kD>(a.data<bf16>(), w, kHeads, a.data<bf16>() + kHeads * kD, w, kHeads, tokens, g, current_stream());
  const VisionBatch batch(std::vector<VisionGrid>(3, VisionGrid{1, 16, 16}), 2);
  g.positions = batch.positions.data<int32_t>();
  fk::kernels::vision_rope_2d<bf16, kD>(b.data<bf16>(), w, kHeads, b.data<bf16>() + kHeads * kD, w, kHeads, tokens, g, current_stream());
  FK_CHECK_LAUNCH();
  EXPECT_EQ(to_host<bf16>(a).size(), to_host<bf16>(b).size());
  const auto ha = to_host<bf16>(a), hb = to_host<bf16>(b);
  int64_t differ = 0;
  for (size_t i = 0; i < ha.size(); ++i) differ += __bfloat162float(ha[i]) != __bfloat162float(hb[i]);
  EXPECT_EQ(differ, 0);
  // And the table mode against the fp64 reference reading the HF-style table.
  Tensor ref = empty({tokens, w}, DType::kF32);
  fk::kernels::reference::copy_to_f32<bf16>(ref.data<float>(), w, x0.data<bf16>(), w, tokens, static_cast<int>(w), current_stream());
  Tensor hf_pos = fk::tasks::ref_vision_positions(batch.grids, 2);
  fk::kernels::VisionRopeGeometry rg{0, 0, 1, 1, 1, 10000.f, false, hf_pos.data<int32_t>()};
  for (int64_t off : {int64_t{0}, int64_t(kHeads) * kD})
    fk::kernels::reference::vision_rope_2d_ref<bf16>(ref.data<float>() + off, w, x0.data<bf16>() + off, w, tokens, kHeads, kD, rg,
                                                     current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(b, ref, default_tolerance(DType::kBF16));
}

// Mixed sizes and a two-frame video: the processor-order table equals HF's meshgrid-permute construction,
// one attention sequence per frame.
TEST(Harness, VisionGridPositionsAndSequences) {
  FK_REQUIRE_GPU();
  const std::vector<VisionGrid> grids{{1, 4, 6}, {2, 2, 2}, {1, 8, 4}};
  const VisionBatch batch(grids, 2);
  EXPECT_EQ(batch.tokens, 24 + 8 + 32);
  EXPECT_EQ(batch.host_cu, (std::vector<int32_t>{0, 24, 28, 32, 64}));
  EXPECT_EQ(batch.max_seqlen, 32);
  EXPECT_EQ(to_host<int32_t>(batch.positions), to_host<int32_t>(fk::tasks::ref_vision_positions(grids, 2)));
  // Token 5 of the 4 x 6 image: window 1 (row 0, column 1 of the windows), inside 1: patch (0, 3).
  const auto pos = to_host<int32_t>(batch.positions);
  EXPECT_EQ(pos[10], 0);
  EXPECT_EQ(pos[11], 3);
  EXPECT_THROW(VisionBatch({{1, 3, 4}}, 2), std::exception);  // rows not whole windows
  EXPECT_THROW(VisionBatch({}, 2), std::exception);
}

// Qwen2.5-VL's window order (Note [Vision windows]): the direct enumeration equals HF's padded-grid
// construction over images of mixed sizes (windows that divide the grid, that do not, one unit
// wide, videos), by hand on a small grid, and through VisionBatch (rows, positions, inverse).
TEST(Harness, VisionWindowOrderMatchesHfConstruction) {
  using fk::tasks::ref_vision_window_index;
  using fk::tasks::vision_window_order;
  // A 4 x 6 grid of merge units (8 x 12 patches, merge 2) in windows of 2 x 2 units: 2 x 3 windows.
  const std::vector<VisionGrid> small{{1, 8, 12}};
  const auto o = vision_window_order(small, 2, 2);
  EXPECT_EQ(o.cu, (std::vector<int32_t>{0, 16, 32, 48, 64, 80, 96}));
  EXPECT_EQ(std::vector<int32_t>(o.index.begin(), o.index.begin() + 8), (std::vector<int32_t>{0, 1, 6, 7, 2, 3, 8, 9}));
  // Windows of 4 units over 6 columns: the second column of windows is 2 units wide (cut short).
  const auto cut = vision_window_order(small, 2, 4);
  EXPECT_EQ(cut.cu, (std::vector<int32_t>{0, 64, 96}));
  EXPECT_EQ(std::vector<int32_t>(cut.index.begin() + 16, cut.index.end()), (std::vector<int32_t>{4, 5, 10, 11, 16, 17, 22, 23}));
  const std::vector<std::vector<VisionGrid>> batches{
      {{1, 32, 32}}, {{1, 8, 12}, {2, 6, 10}, {1, 34, 18}}, {{1, 2, 2}}, {{3, 16, 40}, {1, 4, 4}}, {{1, 64, 2}}};
  for (const auto& grids : batches)
    for (int64_t units : {1, 2, 3, 4, 8}) {
      const auto a = vision_window_order(grids, 2, units), b = ref_vision_window_index(grids, 2, units);
      EXPECT_EQ(a.index, b.index) << "units " << units;
      EXPECT_EQ(a.cu, b.cu) << "units " << units;
    }
  EXPECT_THROW(vision_window_order(small, 2, 0), std::exception);
}
TEST(Harness, VisionBatchWindowOrder) {
  FK_REQUIRE_GPU();
  const std::vector<VisionGrid> grids{{1, 8, 12}, {2, 4, 4}};
  const VisionBatch plain(grids, 2), windowed(grids, 2, 2);
  EXPECT_FALSE(plain.window_index.defined());
  EXPECT_EQ(windowed.host_cu, plain.host_cu);  // frames unchanged: one sequence each
  const auto order = fk::tasks::vision_window_order(grids, 2, 2);
  EXPECT_EQ(windowed.host_cu_window, order.cu);
  EXPECT_EQ(windowed.max_window_seqlen, 16);
  const auto idx = to_host<int32_t>(windowed.window_index), rev = to_host<int32_t>(windowed.reverse_index);
  EXPECT_EQ(idx, order.index);
  for (size_t u = 0; u < idx.size(); ++u) EXPECT_EQ(rev[idx[u]], static_cast<int32_t>(u));
  // Every row's (row, column) moved with its merge unit.
  const auto p0 = to_host<int32_t>(plain.positions), pw = to_host<int32_t>(windowed.positions);
  for (int64_t r = 0; r < windowed.tokens; ++r) {
    const int64_t from = int64_t(idx[r / 4]) * 4 + r % 4;
    EXPECT_EQ(pw[2 * r], p0[2 * from]);
    EXPECT_EQ(pw[2 * r + 1], p0[2 * from + 1]);
  }
}
TEST(Harness, VisionBlockListed) {
  static_assert(fk::tasks::vision_block_listed("7,15,23,31", 15));
  static_assert(!fk::tasks::vision_block_listed("7,15,23,31", 1));
  static_assert(!fk::tasks::vision_block_listed("7,15,23,31", 5));
  static_assert(fk::tasks::vision_block_listed("0", 0));
  static_assert(!fk::tasks::vision_block_listed("", 0));
  EXPECT_TRUE(fk::tasks::vision_block_listed("7,15,23,31", 31));
}

// Qwen3-VL's interpolated positions (Note [Interpolated vision positions]): the taps by hand, and the
// kernel's weighted sums against the separable reference over mixed sizes and a video.
TEST(Harness, VisionPosTaps) {
  using fk::tasks::vision_pos_taps;
  // A grid as large as the table: every patch reads its own row with weight 1.
  const auto same = vision_pos_taps({{1, 4, 4}}, 2, 4);
  const auto pos = fk::tasks::vision_patch_positions({{1, 4, 4}}, 2);
  for (size_t t = 0; t < 16; ++t) {
    EXPECT_EQ(same.idx[4 * t], pos[2 * t] * 4 + pos[2 * t + 1]);
    EXPECT_FLOAT_EQ(same.w[4 * t], 1.f);
    EXPECT_FLOAT_EQ(same.w[4 * t + 1] + same.w[4 * t + 2] + same.w[4 * t + 3], 0.f);
  }
  // 2 x 2 patches over a 3 x 3 table: corners only (aligned corners); 1 x 2 over 3 x 3: row 0.
  const auto small = vision_pos_taps({{1, 2, 2}}, 2, 3);
  EXPECT_EQ(small.idx[0], 0);       // (0, 0)
  EXPECT_EQ(small.idx[4 * 3], 8);   // (1, 1) -> table (2, 2)
  const auto rows = vision_pos_taps({{1, 4, 2}}, 2, 5);  // row 1 of 4 at 4/3 of the table: taps rows 1 and 2
  const auto rp = fk::tasks::vision_patch_positions({{1, 4, 2}}, 2);
  for (size_t t = 0; t < 8; ++t)
    if (rp[2 * t] == 1 && rp[2 * t + 1] == 0) {
      EXPECT_EQ(rows.idx[4 * t], 5);       // (1, 0)
      EXPECT_EQ(rows.idx[4 * t + 2], 10);  // (2, 0)
      EXPECT_NEAR(rows.w[4 * t + 2], 1.0 / 3.0, 1e-6);
    }
  EXPECT_EQ(same.ptr.size(), size_t(17));
  EXPECT_EQ(same.ptr.back(), 64);  // 4 taps a row
  static_assert(fk::tasks::vision_list_index("8,16,24", 16) == 1);
  static_assert(fk::tasks::vision_list_index("8,16,24", 9) == -1);
  static_assert(fk::tasks::vision_list_size("8,16,24") == 3 && fk::tasks::vision_list_size("") == 0);
}
TEST(Kernels, InterpolatedRows_bf16_matches_separable_reference) {
  FK_REQUIRE_GPU();
  constexpr int64_t kSide = 48, kE = 1152;
  const std::vector<VisionGrid> grids{{1, 28, 28}, {2, 6, 10}, {1, 64, 2}, {1, 48, 48}};
  const VisionBatch batch(grids, 2, 0, kSide);
  Tensor table = empty({kSide * kSide, kE}, DType::kBF16), h = empty({batch.tokens, kE}, DType::kBF16);
  fill_normal(table, 5);
  fill_normal(h, 6);
  Tensor h0 = empty(h.sizes(), DType::kBF16);
  copy_(h0, h);
  fk::tasks::add_weighted_rows_(h, table, batch.pos_ptr, batch.pos_idx, batch.pos_w);
  FK_CHECK_LAUNCH();
  const Tensor pos = fk::tasks::ref_interpolated_positions(table, grids, fk::tasks::ref_vision_positions(grids, 2), kSide);
  const Tensor want = fk::tasks::ref::round_to(fk::tasks::ref::add_f32(h0, fk::tasks::ref::round_to(pos, DType::kBF16)), DType::kBF16);
  FK_EXPECT_CLOSE(h, fk::tasks::to_f32(want), default_tolerance(DType::kBF16));
  EXPECT_THROW(VisionBatch(grids, 2, 2, kSide), std::exception);  // positions of a window-ordered tower: not one
}

// Note [DeepStack]: the features add into the chosen rows only, rounded once.
TEST(Kernels, ScatterAddRows_bf16) {
  FK_REQUIRE_GPU();
  Tensor dst = empty({9, 40}, DType::kBF16), src = empty({3, 40}, DType::kBF16);
  fill_normal(dst, 1);
  fill_normal(src, 2);
  const std::vector<bf16> d0 = to_host<bf16>(dst), sv = to_host<bf16>(src);
  const std::vector<int32_t> rows{7, 0, 4};
  fk::tasks::scatter_add_rows_(dst, to_device(rows, {3}), src);
  const std::vector<bf16> d1 = to_host<bf16>(dst);
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t c = 0; c < 40; ++c) {
      float want = __bfloat162float(d0[r * 40 + c]);
      for (int i = 0; i < 3; ++i)
        if (rows[i] == r) want = __bfloat162float(__float2bfloat16(want + __bfloat162float(sv[i * 40 + c])));
      EXPECT_EQ(__bfloat162float(d1[r * 40 + c]), want) << r << "," << c;
    }
  EXPECT_THROW(fk::tasks::scatter_add_rows_(dst, to_device(rows, {3}), empty({2, 40}, DType::kBF16)), std::exception);
}

struct Patch3dCfg {
  static constexpr int64_t num_channels = 3, temporal_patch_size = 2, patch_size = 14, hidden_size = 1280;
  static constexpr bool bias = false;
  using scalar_t = bf16;
};
struct TestPatchEmbed3D {
  TestPatchEmbed3D(int64_t p, int64_t t, int64_t c, int64_t e)
      : weight(empty({e, c, t, p, p}, DType::kBF16)) {}
  Tensor forward(const Tensor& x) { return fk::tasks::patch_embed_3d_forward<Patch3dCfg>(x, weight, bias); }
  Tensor weight, bias;
};
TEST(Harness, PatchEmbedding3D_bf16_qwen2vl_rows1000) {
  FK_REQUIRE_GPU();
  fk::tasks::PatchEmbed3DInstance<TestPatchEmbed3D, Patch3dCfg> inst(ShapeCase{"t1000", "prefill", {{"num_tokens", 1000}}});
  check_task_instance(inst);
}
TEST(Harness, PatchEmbedding3D_rejects_rows_of_another_width) {
  FK_REQUIRE_GPU();
  TestPatchEmbed3D m(14, 2, 3, 1280);
  EXPECT_THROW(m.forward(empty({4, 3 * 14 * 14}, DType::kBF16)), std::exception);  // 2-D patches, not 3-D
}

}  // namespace
}  // namespace fk::testing
