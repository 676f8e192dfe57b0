// vision_rope_2d (issue 22): the 2-D rotary embedding of vision towers against its fp64
// reference at DINOv3's geometry (normalised patch centres, a class token and register tokens
// unrotated, theta 100) and Qwen2-VL's (integer positions in 2 x 2 merge windows, head dim 80,
// theta 10000), strided q/k views, bf16 and fp16; the reference against values worked out on the
// host; and the task harness.
#include <cmath>

#include "fk/kernels/reference/vision_rope_ref.cuh"
#include "fk/kernels/vision_rope.cuh"
#include "fk/tasks/vision_rope.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

using fk::kernels::VisionRopeGeometry;

template <class T, int kD>
void check_vision_rope(int heads, const VisionRopeGeometry& g, int images) {
  const int64_t tokens = int64_t(images) * g.tokens_per_image, w = 3 * int64_t(heads) * kD;  // q, k, v columns
  Tensor x0 = empty({tokens, w}, dtype_of<T>);
  fill_normal(x0, 91);
  Tensor x = empty({tokens, w}, dtype_of<T>);
  copy_(x, x0);
  fk::kernels::vision_rope_2d<T, kD>(x.data<T>(), w, heads, x.data<T>() + int64_t(heads) * kD, w, heads, tokens, g, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({tokens, w}, DType::kF32);
  fk::kernels::reference::copy_to_f32<T>(ref.data<float>(), w, x0.data<T>(), w, tokens, static_cast<int>(w), current_stream());
  for (int64_t off : {int64_t{0}, int64_t(heads) * kD})
    fk::kernels::reference::vision_rope_2d_ref<T>(ref.data<float>() + off, w, x0.data<T>() + off, w, tokens, heads, kD, g,
                                                  current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(x, ref, default_tolerance(dtype_of<T>));
}

// DINOv3 ViT-S/16 at 224: 1 class + 4 register tokens, 14 x 14 patches, head dim 64.
TEST(Kernels, VisionRope_bf16_dinov3_d64_g14_p5) {
  FK_REQUIRE_GPU();
  check_vision_rope<bf16, 64>(6, {5 + 196, 5, 14, 14, 1, 100.f, true}, 3);
}
// DINOv3-7B-like: head dim 128, one class token, non-square grid.
TEST(Kernels, VisionRope_f16_dinov3_d128_g12x20_p1) {
  FK_REQUIRE_GPU();
  check_vision_rope<f16, 128>(4, {1 + 240, 1, 12, 20, 1, 100.f, true}, 2);
}
// Qwen2-VL's tower: head dim 80, 2 x 2 merge windows, integer positions, no prefix.
TEST(Kernels, VisionRope_bf16_qwen2vl_d80_g16_m2) {
  FK_REQUIRE_GPU();
  check_vision_rope<bf16, 80>(16, {256, 0, 16, 16, 2, 10000.f, false}, 2);
}

// The reference itself on values worked out here: the patch order (window by window) and the angle.
TEST(Kernels, VisionRopeReference_ClosedForm) {
  FK_REQUIRE_GPU();
  constexpr int D = 8;
  const VisionRopeGeometry g{1 + 16, 1, 4, 4, 2, 100.f, false};  // prefix 1, 4 x 4 grid in 2 x 2 windows
  std::vector<float> host(17 * D, 0.f);
  for (int t = 0; t < 17; ++t)
    for (int i = 0; i < D / 2; ++i) host[t * D + i] = 1.f;  // x1 = 1, x2 = 0: out = (cos, sin)
  Tensor x = to_device(host, {17, D});
  Tensor out = empty({17, D}, DType::kF32);
  fk::kernels::reference::vision_rope_2d_ref<float>(out.data<float>(), D, x.data<float>(), D, 17, 1, D, g, current_stream());
  FK_CHECK_LAUNCH();
  std::vector<float> got = to_host<float>(out);
  EXPECT_EQ(got[0], 1.f);  // the prefix token is untouched
  EXPECT_EQ(got[4], 0.f);
  // Token 1 + 6: window 1 (row 0, column 1 of the 2 x 2 windows), inside 2 (row 1, column 0): patch (1, 2).
  const int t = 7, py = 1, px = 2;
  for (int i = 0; i < D / 2; ++i) {
    const int j = i % (D / 4);
    const double angle = (i < D / 4 ? py : px) * std::pow(100.0, -4.0 * j / D);
    EXPECT_NEAR(got[t * D + i], std::cos(angle), 1e-6) << i;
    EXPECT_NEAR(got[t * D + i + D / 2], std::sin(angle), 1e-6) << i;
  }
}

struct RopeCfg {
  static constexpr int64_t head_dim = 64, num_heads = 6, grid_h = 14, grid_w = 14, prefix_tokens = 5, merge_size = 1;
  static constexpr double rope_theta = 100.0;
  static constexpr bool centered = true;
  using scalar_t = bf16;
};
struct TestVisionRope {
  TestVisionRope(int64_t, double) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& q, const Tensor& k) { return fk::tasks::vision_rope_2d_forward<RopeCfg>(q, k); }
};
TEST(Harness, VisionRope_bf16_dinov3_b8) {
  FK_REQUIRE_GPU();
  fk::tasks::VisionRopeInstance<TestVisionRope, RopeCfg> inst(
      ShapeCase{"b8_s201", "prefill", {{"batch", 8}, {"seq_len", 201}, {"uniform", 1}}});
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
