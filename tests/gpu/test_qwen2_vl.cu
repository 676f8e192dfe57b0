// Qwen2-VL's vision tower (issue 22): the rope's position-table mode against its uniform-grid mode
// (bit-exact: the same rotation, the coordinates from a table), the two independent constructions of
// every patch's (row, column) over images of mixed sizes and videos (Note [Vision grids]), the
// per-frame attention sequences, bad grids, and the patch_embedding_3d harness.
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
