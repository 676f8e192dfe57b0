// patch_embedding (issue 22): patchify + GEMM against the direct fp64 convolution at ViT-B/16
// (3 x 16 x 16 patches of 224 images, 16-byte copies), a patch-14 tower shape (4-byte copies,
// no bias) and fp16; ViT's class token + position embeddings against their reference; and the
// task harness under the runner's checks.
#include "fk/kernels/patch_embed.cuh"
#include "fk/kernels/reference/patch_embed_ref.cuh"
#include "fk/tasks/patch_embed.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kC, int kP, int kS, int kH, bool kBias> struct PatchCfg {
  static constexpr int64_t num_channels = kC, patch_size = kP, image_size = kS, hidden_size = kH;
  static constexpr bool bias = kBias;
  using scalar_t = T;
};

template <class Cfg> struct TestPatchEmbed {
  TestPatchEmbed(int64_t c, int64_t h, int64_t k, int64_t) : weight(empty({h, c, k, k}, dtype_of<typename Cfg::scalar_t>)) {
    if (Cfg::bias) bias = empty({h}, dtype_of<typename Cfg::scalar_t>);
  }
  Tensor forward(const Tensor& px) { return fk::tasks::patch_embed_forward<Cfg>(px, weight, bias); }
  Tensor weight, bias;
};

template <class Cfg> void check_patch_embed(int64_t batch) {
  using T = typename Cfg::scalar_t;
  constexpr int64_t C = Cfg::num_channels, P = Cfg::patch_size, S = Cfg::image_size, H = Cfg::hidden_size;
  TestPatchEmbed<Cfg> m(C, H, P, P);
  fill_normal(m.weight, 71, 0.f, 1.f / std::sqrt(float(C * P * P)));
  if (Cfg::bias) fill_normal(m.bias, 72);
  Tensor px = empty({batch, C, S, S}, dtype_of<T>);
  fill_normal(px, 73);
  Tensor out = m.forward(px);
  const int64_t rows = batch * (S / P) * (S / P);
  ASSERT_EQ(out.size(0), rows);
  ASSERT_EQ(out.size(1), H);
  Tensor ref = empty({rows, H}, DType::kF32);
  fk::kernels::reference::patch_embed_ref<T>(ref.data<float>(), px.data<T>(), m.weight.template data<T>(), Cfg::bias ? m.bias.template data<T>() : nullptr,
                                             batch, C, P, S, H, current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, fk::tasks::matmul_tolerance(dtype_of<T>, 0.8 * std::sqrt(Cfg::bias ? 2.0 : 1.0)));
}

TEST(Kernels, PatchEmbed_bf16_vit_b16_b3) { FK_REQUIRE_GPU(); check_patch_embed<PatchCfg<bf16, 3, 16, 224, 768, true>>(3); }
TEST(Kernels, PatchEmbed_bf16_p14_s56_nobias) { FK_REQUIRE_GPU(); check_patch_embed<PatchCfg<bf16, 3, 14, 56, 128, false>>(5); }
TEST(Kernels, PatchEmbed_f16_p8_c1_s40) { FK_REQUIRE_GPU(); check_patch_embed<PatchCfg<f16, 1, 8, 40, 64, true>>(2); }
// A remainder the valid convolution drops: SigLIP so400m's 384 px in patches of 14 (27 x 27, 6 pixels unused).
TEST(Kernels, PatchEmbed_bf16_so400m_p14_s384_remainder) { FK_REQUIRE_GPU(); check_patch_embed<PatchCfg<bf16, 3, 14, 384, 1152, true>>(2); }
TEST(Kernels, PatchEmbed_f16_p5_s23_remainder) { FK_REQUIRE_GPU(); check_patch_embed<PatchCfg<f16, 2, 5, 23, 32, false>>(3); }

// The patchify layout alone: row (b, py, px), column (c, ky, kx) holds img[b, c, py*P+ky, px*P+kx].
TEST(Kernels, Patchify_LayoutExact_p14) {
  FK_REQUIRE_GPU();
  constexpr int C = 3, P = 14, S = 28;
  const int64_t b = 2;
  std::vector<float> host(b * C * S * S);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 251);  // exact in fp32
  Tensor img = to_device(host, {b, C, S, S});
  Tensor out = empty({b * 4, C * P * P}, DType::kF32);
  fk::kernels::patchify<float, C, P, S>(out.data<float>(), img.data<float>(), b, current_stream());
  FK_CHECK_LAUNCH();
  std::vector<float> got = to_host<float>(out);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int py = 0; py < 2; ++py)
      for (int px = 0; px < 2; ++px)
        for (int c = 0; c < C; ++c)
          for (int ky = 0; ky < P; ++ky)
            for (int kx = 0; kx < P; ++kx) {
              const float want = host[((bi * C + c) * S + py * P + ky) * S + px * P + kx];
              const float have = got[(bi * 4 + py * 2 + px) * C * P * P + (c * P + ky) * P + kx];
              ASSERT_EQ(have, want) << "image " << bi << " patch " << py << "," << px << " c " << c << " ky " << ky << " kx " << kx;
            }
}

template <class T, int kH> void check_cls_positions(int64_t batch, int64_t n) {
  Tensor patches = empty({batch * n, kH}, dtype_of<T>), cls = empty({1, 1, kH}, dtype_of<T>), pos = empty({1, n + 1, kH}, dtype_of<T>);
  fill_normal(patches, 81);
  fill_normal(cls, 82, 5.f, 1.f);  // far from the patches: a row taken from the wrong source shows
  fill_normal(pos, 83);
  Tensor out = empty({batch * (n + 1), kH}, dtype_of<T>);
  poison(out);
  fk::kernels::add_cls_and_positions<T, kH>(out.data<T>(), patches.data<T>(), cls.data<T>(), pos.data<T>(), batch, n, current_stream());
  FK_CHECK_LAUNCH();
  Tensor ref = empty({batch * (n + 1), kH}, DType::kF32);
  fk::kernels::reference::cls_positions_ref<T>(ref.data<float>(), patches.data<T>(), cls.data<T>(), pos.data<T>(), batch, n, kH,
                                               current_stream());
  FK_CHECK_LAUNCH();
  FK_EXPECT_CLOSE(out, ref, default_tolerance(dtype_of<T>));
}
TEST(Kernels, ClsPositions_bf16_h768_b5) { FK_REQUIRE_GPU(); check_cls_positions<bf16, 768>(5, 196); }
TEST(Kernels, ClsPositions_f32_h64_b1) { FK_REQUIRE_GPU(); check_cls_positions<float, 64>(1, 9); }

TEST(Harness, PatchEmbed_bf16_vit_b16_b8) {
  FK_REQUIRE_GPU();
  using Cfg = PatchCfg<bf16, 3, 16, 224, 768, true>;
  fk::tasks::PatchEmbedInstance<TestPatchEmbed<Cfg>, Cfg> inst(ShapeCase{"b8", "prefill", {{"batch", 8}}});
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
