// The resize of torch.nn.functional.interpolate (no antialiasing) as two interpolation matrices:
// out[y][x] = sum_{i, j} Wy[y][i] * in[i][j] * Wx[x][j]. Host code in double, built from PyTorch's
// definition (Note [Interpolation source index] in fk/kernels/interpolate.cuh) one output
// coordinate at a time: a matrix view that shares no code with the kernel's per-tap evaluation.
// The reference of the interpolate kind applies them (interpolate_ref.cuh); the CPU tests check
// them against values PyTorch's documentation prints.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace fk::kernels::reference {

enum class InterpRefMode { kNearest, kBilinear, kBicubic, kBilinearAA, kBicubicAA };

/// Row-major [out, in] weights of PyTorch's antialiased 1-D resize (half-pixel centres; Note
/// [Antialiased resize] in fk/kernels/interpolate.cuh), in double: for each output sample, the
/// filter stretched by the downscale factor over the input samples it covers, normalised.
inline std::vector<double> interp_matrix_aa(int in, int out, bool cubic) {
  std::vector<double> w(static_cast<size_t>(out) * in, 0.0);
  const double scale = double(in) / double(out), stretch = std::max(scale, 1.0), support = (cubic ? 2.0 : 1.0) * stretch;
  auto filter = [cubic](double x) {
    x = std::fabs(x);
    if (!cubic) return x < 1 ? 1 - x : 0.0;
    const double a = -0.5;
    if (x < 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
    if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
    return 0.0;
  };
  for (int o = 0; o < out; ++o) {
    const double center = scale * (o + 0.5);
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0), hi = std::min(static_cast<int>(center + support + 0.5), in);
    double total = 0;
    for (int i = lo; i < hi; ++i) total += filter((i - center + 0.5) / stretch);
    for (int i = lo; i < hi; ++i) w[static_cast<size_t>(o) * in + i] = total != 0 ? filter((i - center + 0.5) / stretch) / total : 0.0;
  }
  return w;
}

/// Row-major [out, in] weights of a 1-D resize from `in` to `out` samples.
inline std::vector<double> interp_matrix(int in, int out, InterpRefMode mode, bool align_corners) {
  if (in < 1 || out < 1) throw std::invalid_argument("interp_matrix: sizes must be >= 1");
  if (mode == InterpRefMode::kBilinearAA || mode == InterpRefMode::kBicubicAA) {
    if (align_corners) throw std::invalid_argument("interp_matrix: the antialiased resize is served with half-pixel centres only");
    return interp_matrix_aa(in, out, mode == InterpRefMode::kBicubicAA);
  }
  std::vector<double> w(static_cast<size_t>(out) * in, 0.0);
  auto add = [&](int o, int i, double v) { w[static_cast<size_t>(o) * in + std::clamp(i, 0, in - 1)] += v; };
  for (int o = 0; o < out; ++o) {
    if (mode == InterpRefMode::kNearest) {
      // PyTorch computes the legacy nearest index in fp32: floor(o * (in / out)).
      const float s = float(in) / float(out);
      add(o, std::min(int(std::floor(float(o) * s)), in - 1), 1.0);
      continue;
    }
    const bool cubic = mode == InterpRefMode::kBicubic;
    double src;
    if (align_corners) {
      src = out > 1 ? double(o) * double(in - 1) / double(out - 1) : 0.0;
    } else {
      src = (double(o) + 0.5) * double(in) / double(out) - 0.5;
      if (!cubic && src < 0) src = 0;
    }
    const int f = int(std::floor(src));
    const double t = src - f;
    if (!cubic) {
      add(o, f, 1 - t);
      add(o, std::min(f + 1, in - 1), t);
      continue;
    }
    // Keys' cubic convolution kernel with a = -0.75, evaluated at each tap's distance from src.
    const double a = -0.75;
    auto k = [a](double x) {
      x = std::fabs(x);
      if (x <= 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
      if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
      return 0.0;
    };
    for (int tap = f - 1; tap <= f + 2; ++tap) add(o, tap, k(src - tap));
  }
  return w;
}

}  // namespace fk::kernels::reference
