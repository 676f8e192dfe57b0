// interpolate (issue 22): the kernel on values PyTorch's documentation prints (fp32), then the task
// harness against the separable-matrix reference: ViT's position-grid resize (bicubic, half-pixel,
// NHWC, 768 channels, 14 x 14 -> 24 x 24), bilinear with align_corners (NCHW, f16), nearest and
// bicubic downsampling.
#include <string>
#include <vector>

#include "fk/tasks/interpolate.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int64_t C, int64_t IH, int64_t IW, int64_t OH, int64_t OW, bool kAC, bool kNHWC> struct ICfg {
  static constexpr bool align_corners = kAC, channels_last = kNHWC;
  static constexpr int64_t channels = C, in_h = IH, in_w = IW, out_h = OH, out_w = OW;
  using scalar_t = T;
};
template <class Base, const char* kMode> struct WithMode : Base {
  static constexpr const char* mode = kMode;
};
constexpr char kNearest[] = "nearest", kBilinear[] = "bilinear", kBicubic[] = "bicubic", kBilinearAA[] = "bilinear_aa",
               kBicubicAA[] = "bicubic_aa";

/// The generated module's behaviour (templates/interpolate.h.mustache).
template <class Cfg> struct TestInterpolate {
  TestInterpolate(std::vector<int64_t>, const std::string&, bool) {}
  Tensor forward(const Tensor& x) { return fk::tasks::interpolate_forward<Cfg>(x); }
};

TEST(Kernels, InterpolateMatchesPyTorchDocValues) {
  FK_REQUIRE_GPU();
  Tensor x = to_device(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  using Bil = WithMode<ICfg<float, 1, 2, 2, 4, 4, false, false>, kBilinear>;
  using Bic = WithMode<ICfg<float, 1, 2, 2, 4, 4, false, false>, kBicubic>;
  const std::vector<float> bil = to_host<float>(fk::tasks::interpolate_forward<Bil>(x));
  const std::vector<float> bic = to_host<float>(fk::tasks::interpolate_forward<Bic>(x));
  const std::vector<float> want_bil = {1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0};
  const std::vector<float> want_bic = {0.68359375, 1.015625, 1.5625, 1.89453125, 1.34765625, 1.6796875, 2.2265625, 2.55859375,
                                       2.44140625, 2.7734375, 3.3203125, 3.65234375, 3.10546875, 3.4375, 3.984375, 4.31640625};
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(bil[i], want_bil[i], 1e-6) << i;
    EXPECT_NEAR(bic[i], want_bic[i], 1e-6) << i;
  }
  // A wrongly shaped input is refused, naming the expected shape.
  Tensor bad = empty({1, 2, 2, 2}, DType::kF32);
  EXPECT_THROW(fk::tasks::interpolate_forward<Bil>(bad), std::exception);
}

template <class Cfg> void check_case(int64_t batch) {
  fk::tasks::InterpolateInstance<TestInterpolate<Cfg>, Cfg> inst(ShapeCase{"b" + std::to_string(batch), "prefill", {{"batch", batch}}});
  check_task_instance(inst);
}

TEST(Harness, Interpolate_bf16_vit_pos_grid_bicubic_nhwc_14_to_24) {
  FK_REQUIRE_GPU();
  check_case<WithMode<ICfg<bf16, 768, 14, 14, 24, 24, false, true>, kBicubic>>(1);
}
TEST(Harness, Interpolate_f16_bilinear_align_corners_nchw_7x9_to_13x5) {
  FK_REQUIRE_GPU();
  check_case<WithMode<ICfg<f16, 64, 7, 9, 13, 5, true, false>, kBilinear>>(4);
}
TEST(Harness, Interpolate_bf16_nearest_nchw_10_to_4) {
  FK_REQUIRE_GPU();
  check_case<WithMode<ICfg<bf16, 32, 10, 10, 4, 4, false, false>, kNearest>>(8);
}
TEST(Harness, Interpolate_bf16_bicubic_downsample_nhwc_24_to_14) {
  FK_REQUIRE_GPU();
  check_case<WithMode<ICfg<bf16, 384, 24, 24, 14, 14, false, true>, kBicubic>>(2);
}
// antialias=True (Note [Antialiased resize]): SigLIP-2 naflex's 16 x 16 position grid to a non-square grid, down in
// one axis and up in the other (bilinear); a 3x downscale (bicubic, a = -0.5), NCHW.
TEST(Harness, Interpolate_bf16_bilinear_aa_nhwc_16x16_to_7x29) {
  FK_REQUIRE_GPU();
  check_case<WithMode<ICfg<bf16, 768, 16, 16, 7, 29, false, true>, kBilinearAA>>(2);
}
TEST(Harness, Interpolate_f32_bicubic_aa_nchw_27_to_9) {
  FK_REQUIRE_GPU();
  check_case<WithMode<ICfg<float, 3, 27, 27, 9, 9, false, false>, kBicubicAA>>(4);
}

}  // namespace
}  // namespace fk::testing
