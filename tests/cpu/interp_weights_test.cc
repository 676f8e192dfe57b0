// The interpolation matrices behind the interpolate kind's reference
// (fk/kernels/reference/interpolate_weights.h) against values PyTorch's own documentation and
// definition give: F.interpolate of [[1, 2], [3, 4]] to 4 x 4 (bilinear and bicubic, half-pixel
// centres), align_corners endpoints, legacy nearest indices, and rows that sum to 1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fk/kernels/reference/interpolate_weights.h"

namespace {

using fk::kernels::reference::interp_matrix;
using fk::kernels::reference::InterpRefMode;

/// out = Wy . X . Wx^T for a 2-D input.
std::vector<double> resize(const std::vector<double>& x, int ih, int iw, int oh, int ow, InterpRefMode m, bool ac) {
  const auto wy = interp_matrix(ih, oh, m, ac), wx = interp_matrix(iw, ow, m, ac);
  std::vector<double> out(size_t(oh) * ow, 0.0);
  for (int y = 0; y < oh; ++y)
    for (int xo = 0; xo < ow; ++xo)
      for (int i = 0; i < ih; ++i)
        for (int j = 0; j < iw; ++j) out[size_t(y) * ow + xo] += wy[size_t(y) * ih + i] * x[size_t(i) * iw + j] * wx[size_t(xo) * iw + j];
  return out;
}

TEST(InterpolateWeights, BilinearMatchesPyTorch) {
  // torch.nn.functional.interpolate(torch.tensor([[[[1., 2.], [3., 4.]]]]), size=(4, 4), mode="bilinear",
  // align_corners=False)
  const std::vector<double> want = {1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0};
  const auto got = resize({1, 2, 3, 4}, 2, 2, 4, 4, InterpRefMode::kBilinear, false);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  // align_corners=True: the corner samples are the input's corners, the rest evenly spaced.
  const auto ac = resize({1, 2, 3, 4}, 2, 2, 3, 3, InterpRefMode::kBilinear, true);
  const std::vector<double> want_ac = {1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0};
  for (size_t i = 0; i < want_ac.size(); ++i) EXPECT_NEAR(ac[i], want_ac[i], 1e-12) << i;
}

TEST(InterpolateWeights, BicubicMatchesPyTorch) {
  // The same input, mode="bicubic", align_corners=False (Keys' kernel, a = -0.75, border taps clamped).
  const std::vector<double> want = {0.68359375, 1.015625, 1.5625, 1.89453125, 1.34765625, 1.6796875, 2.2265625, 2.55859375,
                                    2.44140625, 2.7734375, 3.3203125, 3.65234375, 3.10546875, 3.4375, 3.984375, 4.31640625};
  const auto got = resize({1, 2, 3, 4}, 2, 2, 4, 4, InterpRefMode::kBicubic, false);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

TEST(InterpolateWeights, NearestAndRowSums) {
  // Legacy nearest: source index floor(dst * in / out), e.g. 5 -> 3 samples take 0, 1, 3.
  const auto n = interp_matrix(5, 3, InterpRefMode::kNearest, false);
  EXPECT_EQ(n[0 * 5 + 0], 1.0);
  EXPECT_EQ(n[1 * 5 + 1], 1.0);
  EXPECT_EQ(n[2 * 5 + 3], 1.0);
  // Every row of every mode sums to 1 (a constant image stays constant), up- and downsampling,
  // the ViT position grid's 14 -> 24 among them.
  for (auto m : {InterpRefMode::kNearest, InterpRefMode::kBilinear, InterpRefMode::kBicubic})
    for (bool ac : {false, true})
      for (auto [in, out] : std::vector<std::pair<int, int>>{{14, 24}, {24, 14}, {1, 5}, {7, 7}, {3, 1}}) {
        if (m == InterpRefMode::kNearest && ac) continue;
        const auto w = interp_matrix(in, out, m, ac);
        for (int o = 0; o < out; ++o) {
          double s = 0;
          for (int i = 0; i < in; ++i) s += w[size_t(o) * in + i];
          EXPECT_NEAR(s, 1.0, 1e-12) << int(m) << " " << ac << " " << in << "->" << out << " row " << o;
        }
      }
  EXPECT_THROW(interp_matrix(0, 3, InterpRefMode::kBilinear, false), std::invalid_argument);
}

// antialias=True (Note [Antialiased resize]): halving 4 samples with the bilinear (triangle) filter stretched to
// support 2 weighs samples 0, 1, 2 as (0.75, 0.75, 0.25) / 1.75 for output 0 and 1, 2, 3 as (0.25, 0.75, 0.75) / 1.75 for
// output 1 (PIL's and PyTorch's definition, worked by hand); upsampling keeps plain bilinear's weights (the triangle of
// support 1, taps outside the image dropped where bilinear clamps them onto the border sample: the same weights);
// every row sums to 1; align_corners is refused.
TEST(InterpolateWeights, AntialiasedResize) {
  const auto w = interp_matrix(4, 2, InterpRefMode::kBilinearAA, false);
  const std::vector<double> want = {0.75 / 1.75, 0.75 / 1.75, 0.25 / 1.75, 0, 0, 0.25 / 1.75, 0.75 / 1.75, 0.75 / 1.75};
  ASSERT_EQ(w.size(), want.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], want[i], 1e-15) << i;
  for (auto [in, out] : std::vector<std::pair<int, int>>{{2, 4}, {14, 24}, {16, 33}}) {
    const auto aa = interp_matrix(in, out, InterpRefMode::kBilinearAA, false), plain = interp_matrix(in, out, InterpRefMode::kBilinear, false);
    for (size_t i = 0; i < aa.size(); ++i) EXPECT_NEAR(aa[i], plain[i], 1e-12) << in << "->" << out << " " << i;
  }
  for (auto m : {InterpRefMode::kBilinearAA, InterpRefMode::kBicubicAA})
    for (auto [in, out] : std::vector<std::pair<int, int>>{{16, 7}, {24, 14}, {64, 16}, {5, 9}, {3, 1}}) {
      const auto a = interp_matrix(in, out, m, false);
      for (int o = 0; o < out; ++o) {
        double s = 0;
        for (int i = 0; i < in; ++i) s += a[size_t(o) * in + i];
        EXPECT_NEAR(s, 1.0, 1e-12) << int(m) << " " << in << "->" << out << " row " << o;
      }
    }
  // The bicubic filter (a = -0.5, support 2 stretched to 4) at an exact 2x downscale, output 1 of 8 -> 4: center 3,
  // taps int(3 - 4 + 0.5) = 0 .. int(3 + 4 + 0.5) - 1 = 6 (PyTorch truncates toward zero: the window is not symmetric),
  // at halved distances -1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 1.75: k = -0.0703125, 0.2265625, 0.8671875, 0.8671875,
  // 0.2265625, -0.0703125, -0.0234375 (worked by hand), divided by their sum 2.0234375.
  const auto c = interp_matrix(8, 4, InterpRefMode::kBicubicAA, false);
  const std::vector<double> k = {-0.0703125, 0.2265625, 0.8671875, 0.8671875, 0.2265625, -0.0703125, -0.0234375, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(c[size_t(1) * 8 + i], k[i] / 2.0234375, 1e-12) << i;
  EXPECT_THROW(interp_matrix(4, 2, InterpRefMode::kBilinearAA, true), std::invalid_argument);
}

}  // namespace
