// Standalone micro-benchmark of the memory-bound baseline kernels (kernels/ only; no runtime):
// CUDA events around one launch, L2 flushed before every call by writing a 256 MB buffer,
// median (and min) of 50 calls after 5 warm-ups. Bandwidth = the task's minimum bytes / median.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Ikernels/include \
//        bench/micro/mem_bench.cu -o build/mem_bench && build/mem_bench [filter]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fk/kernels/qk_norm.cuh"
#include "fk/kernels/rms_norm.cuh"
#include "fk/kernels/rotary_embedding.cuh"
#include "fk/kernels/silu_and_mul.cuh"
#include "fk/kernels/store_kvcache.cuh"
#include "fk/kernels/vocab_parallel_embedding.cuh"

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
__global__ void fill_bf16(bf16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(scale * (hash32(seed * 0x9E3779B97F4A7C15ull + i) * (2.f / 4294967296.f) - 1.f));
}
__global__ void fill_i64(int64_t* p, int64_t n, uint64_t seed, int64_t hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = hash32(seed * 0x9E3779B97F4A7C15ull + i) % static_cast<uint64_t>(hi);
}
__global__ void fill_slots(int64_t* p, int64_t n, int64_t pow2_slots) {  // a bijection onto distinct slots
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = (i * 40503) & (pow2_slots - 1);
}

template <class T> T* dalloc(int64_t n) {
  T* p;
  CK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  return p;
}
bf16* rand_bf16(int64_t n, uint64_t seed, float scale = 1.f) {
  bf16* p = dalloc<bf16>(n);
  fill_bf16<<<1024, 256>>>(p, n, seed, scale);
  return p;
}

struct Bench {
  void* flush = nullptr;
  size_t flush_bytes = 256u << 20;
  cudaStream_t s;
  cudaEvent_t e0, e1;
  int flush_val = 0;
  Bench() {
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  // Returns {median, min} in microseconds.
  std::pair<double, double> time(const std::function<void(cudaStream_t)>& f, int iters = 50) {
    for (int i = 0; i < 5; ++i) f(s);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      CK(cudaMemsetAsync(flush, ++flush_val & 0xff, flush_bytes, s));
      CK(cudaEventRecord(e0, s));
      f(s);
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms * 1e3);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return {t[t.size() / 2], t[0]};
  }
};

static const char* g_filter = nullptr;
static void report(Bench& b, const std::string& name, int64_t tokens, double bytes,
                   const std::function<void(cudaStream_t)>& f) {
  if (g_filter && name.find(g_filter) == std::string::npos) return;
  auto [med, mn] = b.time(f);
  std::printf("%-44s t=%-6lld %9.2f us (min %8.2f)  %7.1f GB/s  %.1f MB\n", name.c_str(), (long long)tokens, med, mn,
              bytes / med * 1e-3, bytes / 1e6);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc > 1) g_filter = argv[1];
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  Bench b;
  const std::vector<int64_t> toks = {1, 32, 256, 4096, 16384};
  constexpr int64_t kMaxT = 16384;

  {  // device copy (calibration)
    const size_t n = 1ull << 30;
    void *a, *c;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&c, n));
    report(b, "device_copy_1GiB", 0, 2.0 * n, [&](cudaStream_t s) { CK(cudaMemcpyAsync(c, a, n, cudaMemcpyDeviceToDevice, s)); });
    report(b, "device_copy_32MiB", 0, 2.0 * (32 << 20),
           [&](cudaStream_t s) { CK(cudaMemcpyAsync(c, a, 32 << 20, cudaMemcpyDeviceToDevice, s)); });
    CK(cudaFree(a));
    CK(cudaFree(c));
  }
  {  // rms_norm / fused_add_rms_norm, hidden 4096 and 3584
    constexpr int H = 4096, H2 = 3584;
    bf16 *x = rand_bf16(kMaxT * H, 1), *r = rand_bf16(kMaxT * H, 2), *o = dalloc<bf16>(kMaxT * H), *w = rand_bf16(H, 3);
    for (int64_t t : toks) {
      report(b, "rms_norm_h4096_bf16", t, 2.0 * t * H * 2 + H * 2,
             [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16>(o, H, x, H, w, t, 1e-5f, s); });
    }
    for (int64_t t : toks) {
      report(b, "fused_add_rms_norm_h4096_bf16", t, 4.0 * t * H * 2 + H * 2,
             [&](cudaStream_t s) { fk::kernels::fused_add_rms_norm<H, bf16>(x, H, r, H, w, t, 1e-5f, s); });
    }
    for (int64_t t : {int64_t(1), int64_t(4096), int64_t(16384)}) {
      report(b, "rms_norm_h3584_bf16", t, 2.0 * t * H2 * 2 + H2 * 2,
             [&](cudaStream_t s) { fk::kernels::rms_norm<H2, bf16>(o, H2, x, H2, w, t, 1e-6f, s); });
      report(b, "fused_add_rms_norm_h3584_bf16", t, 4.0 * t * H2 * 2 + H2 * 2,
             [&](cudaStream_t s) { fk::kernels::fused_add_rms_norm<H2, bf16>(x, H2, r, H2, w, t, 1e-6f, s); });
    }
    // Tuning: grid (0: one block per row; k: k blocks per SM striding over rows, next row prefetched).
    for (int64_t t : {int64_t(256), int64_t(4096), int64_t(16384)}) {
      const double by = 2.0 * t * H * 2 + H * 2, byf = 4.0 * t * H * 2 + H * 2;
      report(b, "tune_rms_norm_h4096_bps0", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 0, 0>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_rms_norm_h4096_bps2", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 0, 2>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_rms_norm_h4096_bps4", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 0, 4>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_rms_norm_h4096_bps6", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 0, 6>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_rms_norm_h4096_bps8", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 0, 8>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_rms_norm_h4096_vpt4_bps4", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 4, 4>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_rms_norm_h4096_vpt4_bps8", t, by, [&](cudaStream_t s) { fk::kernels::rms_norm<H, bf16, 4, 8>(o, H, x, H, w, t, 1e-5f, s); });
      report(b, "tune_fused_add_rms_norm_h4096_bps0", t, byf, [&](cudaStream_t s) { fk::kernels::fused_add_rms_norm<H, bf16, 0, 0>(x, H, r, H, w, t, 1e-5f, s); });
      report(b, "tune_fused_add_rms_norm_h4096_bps2", t, byf, [&](cudaStream_t s) { fk::kernels::fused_add_rms_norm<H, bf16, 0, 2>(x, H, r, H, w, t, 1e-5f, s); });
      report(b, "tune_fused_add_rms_norm_h4096_bps4", t, byf, [&](cudaStream_t s) { fk::kernels::fused_add_rms_norm<H, bf16, 0, 4>(x, H, r, H, w, t, 1e-5f, s); });
      report(b, "tune_fused_add_rms_norm_h4096_bps8", t, byf, [&](cudaStream_t s) { fk::kernels::fused_add_rms_norm<H, bf16, 0, 8>(x, H, r, H, w, t, 1e-5f, s); });
    }
    CK(cudaFree(x)); CK(cudaFree(r)); CK(cudaFree(o)); CK(cudaFree(w));
  }
  {  // silu_and_mul
    constexpr int I = 14336, I2 = 18944;
    bf16 *x = rand_bf16(kMaxT * 2 * I2, 4, 3.f), *o = dalloc<bf16>(kMaxT * I2);
    for (int64_t t : toks)
      report(b, "silu_and_mul_i14336_bf16", t, 3.0 * t * I * 2,
             [&](cudaStream_t s) { fk::kernels::silu_and_mul<bf16, I>(o, I, x, 2 * I, t, s); });
    for (int64_t t : {int64_t(1), int64_t(4096), int64_t(16384)})
      report(b, "silu_and_mul_i18944_bf16", t, 3.0 * t * I2 * 2,
             [&](cudaStream_t s) { fk::kernels::silu_and_mul<bf16, I2>(o, I2, x, 2 * I2, t, s); });
    // Tuning: threads x vectors, grid (bps 0: exact; k: k blocks per SM striding), prefetch, streaming stores.
    for (int64_t t : {int64_t(256), int64_t(4096), int64_t(16384)}) {
      const double by = 3.0 * t * I * 2;
#define FK_SILU_TUNE(NAME, VPT, TH, PF, CS, BPS)                                                          \
  report(b, "tune_silu_i14336_" NAME, t, by, [&](cudaStream_t s) {                                          \
    fk::kernels::silu_and_mul_tune<bf16, I, VPT, TH, PF, CS>(o, I, x, 2 * I, t, BPS, s);                   \
  })
      FK_SILU_TUNE("128x1_exact", 1, 128, false, false, 0);
      FK_SILU_TUNE("128x1_exact_cs", 1, 128, false, true, 0);
      FK_SILU_TUNE("256x1_exact", 1, 256, false, false, 0);
      FK_SILU_TUNE("256x2_exact", 2, 256, false, false, 0);
      FK_SILU_TUNE("256x4_exact", 4, 256, false, false, 0);
      FK_SILU_TUNE("256x4_exact_cs", 4, 256, false, true, 0);
      FK_SILU_TUNE("256x4_bps4", 4, 256, false, false, 4);
      FK_SILU_TUNE("256x4_bps4_pf", 4, 256, true, false, 4);
      FK_SILU_TUNE("256x2_bps8_pf", 2, 256, true, false, 8);
      FK_SILU_TUNE("256x2_bps4_pf", 2, 256, true, false, 4);
      FK_SILU_TUNE("128x2_bps16_pf", 2, 128, true, false, 16);
      FK_SILU_TUNE("512x2_exact", 2, 512, false, false, 0);
#undef FK_SILU_TUNE
    }
    CK(cudaFree(x)); CK(cudaFree(o));
  }
  {  // qk_norm and rotary_embedding over q/k views of qkv (Llama/Qwen3: 32/8 heads, d128)
    constexpr int Hq = 32, Hkv = 8, D = 128, W = (Hq + 2 * Hkv) * D, MaxPos = 131072;
    bf16 *qkv = rand_bf16(kMaxT * W, 5), *qo = dalloc<bf16>(kMaxT * Hq * D), *ko = dalloc<bf16>(kMaxT * Hkv * D);
    bf16 *qw = rand_bf16(D, 6), *kw = rand_bf16(D, 7);
    for (int64_t t : toks)
      report(b, "qk_norm_hq32_hkv8_d128_bf16", t, 2.0 * t * (Hq + Hkv) * D * 2, [&](cudaStream_t s) {
        fk::kernels::qk_norm<bf16, Hq, Hkv, D>(qo, Hq * D, ko, Hkv * D, qkv, W, qkv + Hq * D, W, qw, kw, t, 1e-6f, s);
      });
    for (int64_t t : toks) {
      const double by = 2.0 * t * (Hq + Hkv) * D * 2;
      report(b, "tune_qk_norm_token_hpt1", t, by, [&](cudaStream_t s) {
        fk::kernels::qk_norm_per_token<bf16, Hq, Hkv, D, 1>(qo, Hq * D, ko, Hkv * D, qkv, W, qkv + Hq * D, W, qw, kw, t, 1e-6f, s);
      });
      report(b, "tune_qk_norm_token_hpt2", t, by, [&](cudaStream_t s) {
        fk::kernels::qk_norm_per_token<bf16, Hq, Hkv, D, 2>(qo, Hq * D, ko, Hkv * D, qkv, W, qkv + Hq * D, W, qw, kw, t, 1e-6f, s);
      });
      report(b, "tune_qk_norm_token_hpt4", t, by, [&](cudaStream_t s) {
        fk::kernels::qk_norm_per_token<bf16, Hq, Hkv, D, 4>(qo, Hq * D, ko, Hkv * D, qkv, W, qkv + Hq * D, W, qw, kw, t, 1e-6f, s);
      });
    }
    float* cache = dalloc<float>(int64_t(MaxPos) * D);
    CK(cudaMemset(cache, 0, int64_t(MaxPos) * D * 4));
    int64_t* pos = dalloc<int64_t>(kMaxT);
    fill_i64<<<64, 256>>>(pos, kMaxT, 8, MaxPos);
    for (int64_t t : toks)
      report(b, "rotary_embedding_neox_hq32_hkv8_d128_bf16", t, 2.0 * t * (Hq + Hkv) * D * 2 + t * 8.0 + t * D * 4.0,
             [&](cudaStream_t s) {
               fk::kernels::rotary_embedding<bf16, D, D, true, Hq, Hkv>(pos, qkv, W, qkv + Hq * D, W, cache, t, s);
             });
    for (int64_t t : toks)
      report(b, "tune_rope_hq32_hkv8_hpt1", t, 2.0 * t * (Hq + Hkv) * D * 2 + t * 8.0 + t * D * 4.0,
             [&](cudaStream_t s) {
               fk::kernels::rotary_embedding<bf16, D, D, true, Hq, Hkv, 1>(pos, qkv, W, qkv + Hq * D, W, cache, t, s);
             });
    for (int64_t t : {int64_t(1), int64_t(4096), int64_t(16384)})
      report(b, "rotary_embedding_neox_hq28_hkv4_d128_bf16", t, 2.0 * t * 32 * D * 2 + t * 8.0 + t * D * 4.0,
             [&](cudaStream_t s) {
               constexpr int W2 = (28 + 8) * D;
               fk::kernels::rotary_embedding<bf16, D, D, true, 28, 4>(pos, qkv, W2, qkv + 28 * D, W2, cache, t, s);
             });
    CK(cudaFree(qkv)); CK(cudaFree(qo)); CK(cudaFree(ko)); CK(cudaFree(cache)); CK(cudaFree(pos));
  }
  {  // vocab_parallel_embedding (Llama 3: 128256 x 4096)
    constexpr int64_t V = 128256;
    constexpr int H = 4096;
    bf16 *w = rand_bf16(V * H, 9), *o = dalloc<bf16>(kMaxT * H);
    int64_t* ids = dalloc<int64_t>(kMaxT);
    fill_i64<<<64, 256>>>(ids, kMaxT, 10, V);
    for (int64_t t : toks)
      report(b, "vocab_parallel_embedding_v128256_h4096_bf16", t, 2.0 * t * H * 2 + 8.0 * t,
             [&](cudaStream_t s) { fk::kernels::vocab_parallel_embedding<H, bf16>(o, H, ids, w, V, t, s); });
    CK(cudaFree(w)); CK(cudaFree(o)); CK(cudaFree(ids));
  }
  {  // store_kvcache (8 and 4 KV heads, d128), key/value as views of qkv
    constexpr int D = 128;
    constexpr int64_t Slots = 32768;
    bf16* qkv = rand_bf16(kMaxT * 48 * D, 11);
    bf16 *kc = dalloc<bf16>(Slots * 8 * D), *vc = dalloc<bf16>(Slots * 8 * D);
    int64_t* slots = dalloc<int64_t>(kMaxT);
    fill_slots<<<64, 256>>>(slots, kMaxT, Slots);
    for (int64_t t : toks)
      report(b, "store_kvcache_hkv8_d128_bf16", t, 4.0 * t * 8 * D * 2 + 8.0 * t, [&](cudaStream_t s) {
        fk::kernels::store_kvcache<bf16, 8, D>(qkv + 32 * D, 48 * D, D, qkv + 40 * D, 48 * D, D, kc, vc, slots, t, s);
      });
    for (int64_t t : {int64_t(1), int64_t(4096), int64_t(16384)})
      report(b, "store_kvcache_hkv4_d128_bf16", t, 4.0 * t * 4 * D * 2 + 8.0 * t, [&](cudaStream_t s) {
        fk::kernels::store_kvcache<bf16, 4, D>(qkv + 28 * D, 36 * D, D, qkv + 32 * D, 36 * D, D, kc, vc, slots, t, s);
      });
    CK(cudaFree(qkv)); CK(cudaFree(kc)); CK(cudaFree(vc)); CK(cudaFree(slots));
  }
  return 0;
}
