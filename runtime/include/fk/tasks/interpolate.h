// Harness and forward glue for the `interpolate` task kind (issue 22): torch.nn.functional.interpolate
// (size=(out_h, out_w), mode nearest / bilinear / bicubic, align_corners, no antialiasing) on NCHW or
// NHWC images (fk/kernels/interpolate.cuh). Vision transformers resize their position-embedding grid
// with it (HF ViT interpolate_pos_encoding: bicubic, align_corners False, NHWC with C = hidden).
// Cfg (generated): mode ("nearest" | "bilinear" | "bicubic"), align_corners, channels_last, channels,
// in_h, in_w, out_h, out_w, scalar_t.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fk/kernels/interpolate.cuh"
#include "fk/kernels/reference/interpolate_ref.cuh"
#include "fk/kernels/reference/interpolate_weights.h"
#include "fk/tasks/harness.h"

namespace fk::tasks {

template <class Cfg> constexpr fk::kernels::InterpMode interp_mode() {
  constexpr std::string_view m = Cfg::mode;
  static_assert(m == "nearest" || m == "bilinear" || m == "bicubic" || m == "bilinear_aa" || m == "bicubic_aa",
                "interpolate: mode nearest, bilinear, bicubic, bilinear_aa or bicubic_aa");
  using M = fk::kernels::InterpMode;
  return m == "nearest" ? M::kNearest
         : m == "bilinear" ? M::kBilinear
         : m == "bicubic" ? M::kBicubic
         : m == "bilinear_aa" ? M::kBilinearAA
                              : M::kBicubicAA;
}

/// The image shape [N, C, H, W] (NCHW) or [N, H, W, C] (channels last) of n images of Cfg's size.
template <class Cfg> Shape interp_shape(int64_t n, int64_t h, int64_t w) {
  return Cfg::channels_last ? Shape{n, h, w, Cfg::channels} : Shape{n, Cfg::channels, h, w};
}

/// Interpolate.forward(x): x [N, C, in_h, in_w] (NHWC: [N, in_h, in_w, C]), contiguous -> a new
/// tensor of out_h x out_w.
template <class Cfg> Tensor interpolate_forward(const Tensor& x) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(x.dim() == 4 && x.is_contiguous() && x.dtype() == dtype_of<T> && x.size(0) >= 1 &&
               x.sizes() == interp_shape<Cfg>(x.size(0), Cfg::in_h, Cfg::in_w),
           "Interpolate input " + x.str() + ": expected contiguous " +
               std::string(Cfg::channels_last ? "[N, " + std::to_string(Cfg::in_h) + ", " + std::to_string(Cfg::in_w) + ", " +
                                                    std::to_string(Cfg::channels) + "]"
                                              : "[N, " + std::to_string(Cfg::channels) + ", " + std::to_string(Cfg::in_h) + ", " +
                                                    std::to_string(Cfg::in_w) + "]") +
               " " + dtype_name(dtype_of<T>));
  Tensor out = empty(interp_shape<Cfg>(x.size(0), Cfg::out_h, Cfg::out_w), x.dtype());
  fk::kernels::interpolate<T, interp_mode<Cfg>(), Cfg::align_corners, Cfg::channels_last, static_cast<int>(Cfg::channels),
                           static_cast<int>(Cfg::in_h), static_cast<int>(Cfg::in_w), static_cast<int>(Cfg::out_h),
                           static_cast<int>(Cfg::out_w)>(out.data<T>(), x.data<T>(), x.size(0), current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

/// The reference: interp_matrix's separable weights (built in double on the host) applied in double.
template <class Cfg> Tensor interpolate_reference(const Tensor& x) {
  using fk::kernels::reference::InterpRefMode;
  constexpr auto mode = interp_mode<Cfg>();
  using M = fk::kernels::InterpMode;
  const InterpRefMode m = mode == M::kNearest      ? InterpRefMode::kNearest
                          : mode == M::kBilinear   ? InterpRefMode::kBilinear
                          : mode == M::kBicubic    ? InterpRefMode::kBicubic
                          : mode == M::kBilinearAA ? InterpRefMode::kBilinearAA
                                                   : InterpRefMode::kBicubicAA;
  auto to_dev = [](const std::vector<double>& w) {
    Tensor t = empty({static_cast<int64_t>(w.size() * 2)}, DType::kF32);  // doubles, 2 floats each
    FK_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), w.data(), w.size() * sizeof(double), cudaMemcpyHostToDevice, current_stream()));
    FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));  // w is a temporary
    return t;
  };
  Tensor wy = to_dev(fk::kernels::reference::interp_matrix(int(Cfg::in_h), int(Cfg::out_h), m, Cfg::align_corners));
  Tensor wx = to_dev(fk::kernels::reference::interp_matrix(int(Cfg::in_w), int(Cfg::out_w), m, Cfg::align_corners));
  Tensor ref = empty(interp_shape<Cfg>(x.size(0), Cfg::out_h, Cfg::out_w), DType::kF32);
  fk::kernels::reference::interpolate_ref<typename Cfg::scalar_t>(
      ref.data<float>(), x.data<typename Cfg::scalar_t>(), static_cast<const double*>(wy.data_ptr()),
      static_cast<const double*>(wx.data_ptr()), x.size(0), int(Cfg::channels), int(Cfg::in_h), int(Cfg::in_w), int(Cfg::out_h),
      int(Cfg::out_w), Cfg::channels_last, current_stream());
  FK_CHECK_LAUNCH();
  FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));  // wy/wx die here
  return ref;
}

/// One case of an interpolate task. Case dims: batch (images). x ~ N(0, 1); the sets rotate x.
template <class Module, class Cfg> class InterpolateInstance final : public TaskInstance {
 public:
  explicit InterpolateInstance(const ShapeCase& c)
      : n_(c.get("batch")), module_({Cfg::out_h, Cfg::out_w}, Cfg::mode, Cfg::align_corners) {
    const double set_bytes = double(n_) * Cfg::channels * (Cfg::in_h * Cfg::in_w + Cfg::out_h * Cfg::out_w) * sizeof(T);
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n + 4.0 * n_ * Cfg::channels * Cfg::out_h * Cfg::out_w, "interpolate inputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty(interp_shape<Cfg>(n_, Cfg::in_h, Cfg::in_w), dtype_of<T>));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fill_normal(x_[s], seed); }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    // Up to 16 taps of N(0, 1) values with weights summing to 1 (bicubic's negative lobes included):
    // outputs ~ 1, rounded once to the model dtype.
    return {{"out", out_[s], interpolate_reference<Cfg>(x_[s]), matmul_tolerance(dtype_of<T>, 1.0)}};
  }
  Cost cost() const override {
    using M = fk::kernels::InterpMode;
    constexpr M mode = interp_mode<Cfg>();
    constexpr double sy = std::max(1.0, double(Cfg::in_h) / Cfg::out_h), sx = std::max(1.0, double(Cfg::in_w) / Cfg::out_w);
    constexpr double taps = mode == M::kBicubic     ? 16
                            : mode == M::kBilinear   ? 4
                            : mode == M::kBilinearAA ? (2 * sy + 1) * (2 * sx + 1)
                            : mode == M::kBicubicAA  ? (4 * sy + 1) * (4 * sx + 1)
                                                     : 1;
    const double outs = double(n_) * Cfg::channels * Cfg::out_h * Cfg::out_w;
    return {2 * taps * outs, (double(n_) * Cfg::channels * Cfg::in_h * Cfg::in_w + outs) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  int64_t n_;
  Module module_;
  std::vector<Tensor> x_, out_;
};

}  // namespace fk::tasks
