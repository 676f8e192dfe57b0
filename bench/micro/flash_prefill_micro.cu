// Standalone micro-benchmark for fk::kernels::flash_prefill (fk/kernels/flash_prefill.cuh), the
// soft-capping causal prefill kernel, against cuDNN SDPA (fk::kernels::varlen_attention_cudnn,
// which cannot soft-cap: Note [Prefill soft-capping]). Gemma 2 9B shapes (Hq 16, Hkv 8, D 256,
// scale 256^-0.5) and a Llama shape (32/8, D 128) for comparison; tile-shape alternatives of
// the kernel (prefill_detail::PrefillCfg) are timed too, for choosing the defaults.
// Method: CUDA events, a 256 MiB memset (L2 flush) before every timed call, median of 30.
// FLOPs: 4 * D * Hq * (query, key) pairs inside the causal/window mask.
// A sanity line compares our softcap-0 output with cuDNN's (max |diff|).
// Build and run: bench/micro/run_flash_prefill_micro.sh <build dir> (needs libfk_kernels.a).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "fk/kernels/attention.h"
#include "fk/kernels/flash_prefill.cuh"

using bf16 = __nv_bfloat16;
namespace pd = fk::kernels::prefill_detail;

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e = (x);                                                                       \
    if (e != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

static void* g_flush = nullptr;
constexpr size_t kFlush = 256ull << 20;

static double time_us(const std::function<void()>& f, int reps = 30) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  f();
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CK(cudaMemsetAsync(g_flush, r & 0xff, kFlush, 0));
    CK(cudaEventRecord(a, 0));
    f();
    CK(cudaEventRecord(b, 0));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1e3;
}

__global__ void fill_kernel(bf16* p, size_t n, float scale, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xffff) / 65535.f - 0.5f) * 3.46f * scale);
  }
}
static bf16* alloc_fill(size_t n, float scale, uint32_t seed) {
  bf16* p;
  CK(cudaMalloc(&p, n * sizeof(bf16)));
  fill_kernel<<<1024, 256>>>(p, n, scale, seed);
  CK(cudaGetLastError());
  return p;
}

__global__ void max_abs_diff_kernel(const bf16* a, const bf16* b, size_t n, float* out) {
  float m = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i])));
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));  // non-negative floats order as ints
}

struct Problem {
  int64_t batch, seqlen;
  int window;
  int64_t total() const { return batch * seqlen; }
  double pairs() const {
    double p = 0;
    for (int64_t i = 0; i < seqlen; ++i) p += double(window > 0 ? std::min<int64_t>(i + 1, window) : i + 1);
    return p * double(batch);
  }
};

template <int Hq, int Hkv, int D> struct Buffers {
  bf16 *q, *k, *v, *o, *o_ref;
  int32_t* cu;
  explicit Buffers(const Problem& p) {
    const size_t T = size_t(p.total());
    q = alloc_fill(T * Hq * D, 1.f, 1);
    k = alloc_fill(T * Hkv * D, 1.f, 2);
    v = alloc_fill(T * Hkv * D, 1.f, 3);
    CK(cudaMalloc(&o, T * Hq * D * sizeof(bf16)));
    CK(cudaMalloc(&o_ref, T * Hq * D * sizeof(bf16)));
    std::vector<int32_t> h(p.batch + 1);
    for (int64_t b = 0; b <= p.batch; ++b) h[b] = int32_t(b * p.seqlen);
    CK(cudaMalloc(&cu, h.size() * 4));
    CK(cudaMemcpy(cu, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  ~Buffers() {
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(o_ref);
    cudaFree(cu);
  }
};

static std::string label(const Problem& p) {
  return std::to_string(p.batch) + "x" + std::to_string(p.seqlen) + " w" + std::to_string(p.window);
}

template <class Cfg, int Hq, int Hkv>
double time_ours(Buffers<Hq, Hkv, Cfg::kD>& buf, const Problem& p, float softcap) {
  const float scale = 1.f / std::sqrt(float(Cfg::kD));
  return time_us([&] {
    fk::kernels::flash_prefill_cfg<Cfg, Hq, Hkv>(buf.o, buf.q, buf.k, buf.v, buf.cu, p.batch, p.seqlen, p.total(), scale,
                                                 p.window, softcap, 0);
  });
}

// flash_prefill itself (the default shape for D, with its small-grid dispatch).
template <int Hq, int Hkv, int D>
double time_default(Buffers<Hq, Hkv, D>& buf, const Problem& p, float softcap) {
  const float scale = 1.f / std::sqrt(float(D));
  return time_us([&] {
    fk::kernels::flash_prefill<Hq, Hkv, D>(buf.o, buf.q, buf.k, buf.v, buf.cu, p.batch, p.seqlen, p.total(), scale, p.window,
                                           softcap, 0);
  });
}

template <int Hq, int Hkv, int D>
double time_cudnn(Buffers<Hq, Hkv, D>& buf, const Problem& p, bool dense) {
  fk::kernels::VarlenAttentionArgs a;
  a.out = buf.o_ref;
  a.q = buf.q;
  a.k = buf.k;
  a.v = buf.v;
  a.cu_seqlens_q = a.cu_seqlens_k = buf.cu;
  a.batch = p.batch;
  a.max_seqlen_q = a.max_seqlen_k = p.seqlen;
  a.total_q = a.total_k = p.total();
  a.num_heads = Hq;
  a.num_kv_heads = Hkv;
  a.head_dim = D;
  a.softmax_scale = 1.f / std::sqrt(float(D));
  a.window = p.window;
  a.allow_dense = dense;
  try {
    return time_us([&] { fk::kernels::varlen_attention_cudnn(a, 0); });
  } catch (const std::exception& e) {
    std::printf("  cudnn %s unavailable: %s\n", dense ? "dense" : "ragged", e.what());
    return -1;
  }
}

// Default kernel with softcap 50 and 0, cuDNN dense and ragged, then the alternatives (softcap 50).
template <int Hq, int Hkv, int D, class... Alts>
void bench_shape(const char* model, const Problem& p) {
  Buffers<Hq, Hkv, D> buf(p);
  using Def = typename pd::PrefillDefault<D>::type;
  const double tflop = 4.0 * p.pairs() * D * Hq / 1e12;
  auto tf = [&](double us) { return us > 0 ? tflop / (us * 1e-6) : 0.0; };
  const double sc = time_default<Hq, Hkv, D>(buf, p, 50.f);
  const double nosc = time_default<Hq, Hkv, D>(buf, p, 0.f);
  const double cd = time_cudnn<Hq, Hkv, D>(buf, p, true);
  const double cr = time_cudnn<Hq, Hkv, D>(buf, p, false);
  // Sanity: our softcap-0 output against cuDNN's dense output (both bf16).
  float diff = -1.f;
  if (cd > 0) {
    time_default<Hq, Hkv, D>(buf, p, 0.f);
    time_cudnn<Hq, Hkv, D>(buf, p, true);
    float* d;
    CK(cudaMalloc(&d, 4));
    CK(cudaMemset(d, 0, 4));
    max_abs_diff_kernel<<<1024, 256>>>(buf.o, buf.o_ref, size_t(p.total()) * Hq * D, d);
    CK(cudaMemcpy(&diff, d, 4, cudaMemcpyDeviceToHost));
    cudaFree(d);
  }
  std::printf("%-8s hq%-2d hkv%d d%-3d %-12s | sc50 %8.1f us %6.1f TF | sc0 %8.1f us %6.1f TF | cudnn dense %8.1f us %6.1f TF"
              " | ragged %8.1f us %6.1f TF | cudnn/sc50 %.2f cudnn/sc0 %.2f | max|ours-cudnn| %.4f\n",
              model, Hq, Hkv, D, label(p).c_str(), sc, tf(sc), nosc, tf(nosc), cd, tf(cd), cr, tf(cr),
              cd > 0 ? cd / sc : 0.0, cd > 0 ? cd / nosc : 0.0, diff);
  auto alt = [&](auto tag) {
    using Cfg = decltype(tag);
    const double us = time_ours<Cfg, Hq, Hkv>(buf, p, 50.f);
    const double us0 = time_ours<Cfg, Hq, Hkv>(buf, p, 0.f);
    std::printf("    alt BM%-3d BN%-3d warps%d fast_tanh%d wgmma%d smem %6zu: sc50 %8.1f us %6.1f TF (cudnn/alt %.2f) | sc0 %8.1f us %6.1f TF\n",
                Cfg::kBM, Cfg::kBN, Cfg::kWarps, int(Cfg::kFastTanh), int(Cfg::kWgmma), Cfg::kSmemBytes, us, tf(us),
                cd > 0 ? cd / us : 0.0, us0, tf(us0));
  };
  alt(Def{});
  (alt(Alts{}), ...);
}

int main() {
  CK(cudaMalloc(&g_flush, kFlush));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const std::vector<Problem> problems = {{1, 1024, 0}, {1, 4096, 0}, {8, 2048, 0},
                                         {1, 1024, 4096}, {1, 4096, 4096}, {8, 2048, 4096}};
  for (const Problem& p : problems) {
    bench_shape<16, 8, 256, pd::PrefillCfg<256, 128, 64, 8, 1, true, true>, pd::PrefillCfg<256, 64, 32, 4, 1, false, true>,
                pd::PrefillCfg<256, 64, 64, 4, 1, false, true>, pd::PrefillCfg<256, 128, 32, 8, 1, false, true>,
                pd::PrefillCfg<256, 64, 32, 4>>("gemma2", p);
  }
  for (const Problem& p : {Problem{1, 4096, 0}, Problem{8, 2048, 0}}) {
    bench_shape<32, 8, 128, pd::PrefillCfg<128, 64, 64, 4, 1, true, true>, pd::PrefillCfg<128, 128, 32, 4>>("llama", p);
  }
  CK(cudaFree(g_flush));
  return 0;
}
