// layer_scale (DINOv3's LayerScale + the residual add) against its reference, with strided rows, and
// the reference at known values (both rounding points of the eager module); DINOv3's token assembly
// (prepend_tokens: class and register tokens before each image's patches) and SigLIP's (add_positions);
// the layer_scale harness.
#include "fk/kernels/patch_embed.cuh"
#include "fk/kernels/reference/layer_scale_ref.cuh"
#include "fk/tasks/layer_scale.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kH> void check_layer_scale(int64_t rows, int64_t x_stride = kH, int64_t r_stride = kH) {
  Tensor x = empty({rows, x_stride}, dtype_of<T>), r = empty({rows, r_stride}, dtype_of<T>), g = empty({kH}, dtype_of<T>);
  fill_normal(x, 81, 0.f, 3.f);
  fill_normal(r, 82, 0.f, 1.f);
  fill_normal(g, 83, 0.5f, 0.3f);
  Tensor out = empty({rows, kH}, dtype_of<T>);
  poison(out);
  fk::kernels::layer_scale<T, kH>(out.data<T>(), x.data<T>(), x_stride, r.data<T>(), r_stride, g.data<T>(), rows, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({rows, kH}, DType::kF32);
  fk::kernels::reference::layer_scale_ref<T>(ref.data<float>(), x.data<T>(), x_stride, r.data<T>(), r_stride, g.data<T>(), rows, kH,
                                             current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}

TEST(Kernels, LayerScale_bf16_h4096_t1005) { FK_REQUIRE_GPU(); check_layer_scale<bf16, 4096>(1005); }  // ViT-7B: 5 images of 201 tokens
TEST(Kernels, LayerScale_bf16_h1024_strided) { FK_REQUIRE_GPU(); check_layer_scale<bf16, 1024>(77, 3 * 1024, 2048); }
TEST(Kernels, LayerScale_f16_h384_t1) { FK_REQUIRE_GPU(); check_layer_scale<f16, 384>(1); }
TEST(Kernels, LayerScale_f32_h192_t33) { FK_REQUIRE_GPU(); check_layer_scale<float, 192>(33); }

// bf16: x * gamma = 1.0078125 * 1.0078125 = 1.01568603... (1 + 2^-7 squared) rounds to 1.015625 (the eager module's
// rounding of the product); 256 + 2 * 0.5 = 257 stays 257 because the reference adds in double (a bf16 sum could not
// hold it). (1 + 2^-8 is not a bf16 value: the inputs must be.)
TEST(Kernels, LayerScaleReferenceKnownValues) {
  FK_REQUIRE_GPU();
  auto b16 = [](std::vector<float> v, Shape shape) {
    std::vector<bf16> h;
    for (float f : v) h.push_back(__float2bfloat16(f));
    return to_device(h, shape);
  };
  Tensor x = b16({1.0078125f, 2.f}, {1, 2}), g = b16({1.0078125f, 0.5f}, {2}), r = b16({0.f, 256.f}, {1, 2});
  Tensor out = empty({1, 2}, DType::kF32);
  fk::kernels::reference::layer_scale_ref<bf16>(out.data<float>(), x.data<bf16>(), 2, r.data<bf16>(), 2, g.data<bf16>(), 1, 2,
                                                current_stream());
  FK_CHECK_LAUNCH();
  EXPECT_EQ(to_host<float>(out), (std::vector<float>{1.015625f, 257.f}));
}

// prepend_tokens: per image the prefix rows (class, registers), then that image's patches, bit-exact.
TEST(Kernels, PrependTokens_two_images_four_prefix) {
  FK_REQUIRE_GPU();
  constexpr int kH = 64;
  const int64_t b = 2, p = 5, n = 9;
  std::vector<float> patches_h(b * n * kH), prefix_h(p * kH);
  for (size_t i = 0; i < patches_h.size(); ++i) patches_h[i] = static_cast<float>(i);
  for (size_t i = 0; i < prefix_h.size(); ++i) prefix_h[i] = -1.f - static_cast<float>(i);
  Tensor patches = to_device(patches_h, {b * n, kH}), prefix = to_device(prefix_h, {p, kH});
  Tensor out = empty({b * (p + n), kH}, DType::kF32);
  fk::kernels::prepend_tokens<float, kH>(out.data<float>(), patches.data<float>(), prefix.data<float>(), b, p, n, current_stream());
  FK_CHECK_LAUNCH();
  std::vector<float> want;
  for (int64_t i = 0; i < b; ++i) {
    want.insert(want.end(), prefix_h.begin(), prefix_h.end());
    want.insert(want.end(), patches_h.begin() + i * n * kH, patches_h.begin() + (i + 1) * n * kH);
  }
  EXPECT_EQ(to_host<float>(out), want);
}

// add_positions (SigLIP: no class token): each image's patch p plus position row p, the sum rounded once.
TEST(Kernels, AddPositions_three_images) {
  FK_REQUIRE_GPU();
  constexpr int kH = 32;
  const int64_t b = 3, n = 5;
  std::vector<float> patches_h(b * n * kH), pos_h(n * kH);
  for (size_t i = 0; i < patches_h.size(); ++i) patches_h[i] = static_cast<float>(i % 97) * 0.5f;
  for (size_t i = 0; i < pos_h.size(); ++i) pos_h[i] = -static_cast<float>(i);
  Tensor patches = to_device(patches_h, {b * n, kH}), pos = to_device(pos_h, {n, kH});
  Tensor out = empty({b * n, kH}, DType::kF32);
  fk::kernels::add_positions<float, kH>(out.data<float>(), patches.data<float>(), pos.data<float>(), b, n, current_stream());
  FK_CHECK_LAUNCH();
  std::vector<float> want(patches_h.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = patches_h[i] + pos_h[i % (n * kH)];
  EXPECT_EQ(to_host<float>(out), want);
}

struct ScaleCfg {
  static constexpr int64_t hidden_size = 4096;
  using scalar_t = bf16;
};
class TestScale {  // shaped like templates/layer_scale.h.mustache
 public:
  Tensor forward(const Tensor& x, const Tensor& r) { return fk::tasks::layer_scale_forward<ScaleCfg>(x, r, lambda1); }
  Tensor lambda1 = empty({4096}, DType::kBF16);
};

TEST(Tasks, LayerScale_bf16_h4096_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::LayerScaleInstance<TestScale, ScaleCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
