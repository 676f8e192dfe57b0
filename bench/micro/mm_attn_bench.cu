// Standalone tuning benchmark for the linear and attention baselines (not part of fk_bench):
//   GEMV variants vs cuBLASLt (cached plan) vs cuBLAS default (cublasGemmEx) at M in {1, 8, 16},
//   flash-decode variants (% of HBM bandwidth), cuDNN varlen prefill (TFLOP/s).
// Method: CUDA events, a 256 MiB memset (L2 flush) before every timed call, median of 30.
// Build and run: bench/micro/run_mm_attn_bench.sh <build dir> (needs the fk_kernels library).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fk/kernels/attention.h"
#include "fk/kernels/flash_decode.cuh"
#include "fk/kernels/gemm.h"
#include "fk/kernels/gemv.cuh"

using bf16 = __nv_bfloat16;

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                   \
    }                                                                                 \
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

template <int K, int W, int U, int Mode, int L2>
double time_gemv(bf16* y, const bf16* x, const bf16* w, int64_t m, int64_t n) {
  return time_us([&] { fk::kernels::gemv<K, bf16, W, U, Mode, L2>(y, n, x, K, w, nullptr, m, n, 0); });
}

template <int K> void bench_gemm(int64_t n) {
  const int64_t kMaxM = 16;
  bf16* w = alloc_fill(size_t(n) * K, 1.f / std::sqrt(float(K)), 1);
  bf16* x = alloc_fill(size_t(kMaxM) * K, 1.f, 2);
  bf16* y;
  CK(cudaMalloc(&y, size_t(kMaxM) * n * sizeof(bf16)));
  for (int64_t m : {1, 8, 16}) {
    const double bytes = double(n) * K * 2 + double(m) * K * 2 + double(m) * n * 2;
    auto tbs = [&](double us) { return bytes / us / 1e6; };
    const double t_lt = time_us([&] { fk::kernels::gemm_cublaslt(y, n, x, K, w, nullptr, m, n, K, fk::kernels::GemmDType::kBF16, 0); });
    const double t_def = time_us([&] { fk::kernels::gemm_cublas_default(y, n, x, K, w, nullptr, m, n, K, fk::kernels::GemmDType::kBF16, 0); });
    struct V { const char* name; double us; };
    std::vector<V> vs = {
        {"w4u4m0p0", time_gemv<K, 4, 4, 0, 0>(y, x, w, m, n)}, {"w8u2m0p0", time_gemv<K, 8, 2, 0, 0>(y, x, w, m, n)},
        {"w4u4m1p0", time_gemv<K, 4, 4, 1, 0>(y, x, w, m, n)}, {"w8u2m1p0", time_gemv<K, 8, 2, 1, 0>(y, x, w, m, n)},
        {"w4u8m1p0", time_gemv<K, 4, 8, 1, 0>(y, x, w, m, n)}, {"w4u4m0p2", time_gemv<K, 4, 4, 0, 2>(y, x, w, m, n)},
        {"w8u2m0p2", time_gemv<K, 8, 2, 0, 2>(y, x, w, m, n)}, {"w4u4m1p2", time_gemv<K, 4, 4, 1, 2>(y, x, w, m, n)},
        {"w8u2m1p2", time_gemv<K, 8, 2, 1, 2>(y, x, w, m, n)}, {"w8u4m1p2", time_gemv<K, 8, 4, 1, 2>(y, x, w, m, n)},
        {"w4u4m1p1", time_gemv<K, 4, 4, 1, 1>(y, x, w, m, n)}};
    double best = 1e30;
    const char* best_name = "";
    std::printf("GEMM M=%-3lld N=%-6lld K=%-5d | cublasGemmEx %7.2f us %4.2f TB/s | cublasLt %7.2f us %4.2f TB/s |",
                (long long)m, (long long)n, K, t_def, tbs(t_def), t_lt, tbs(t_lt));
    for (const V& v : vs) {
      std::printf(" %s %.2f", v.name, tbs(v.us));
      if (v.us < best) best = v.us, best_name = v.name;
    }
    std::printf(" | best %s %.2f us %.2f TB/s = %.2fx cublasGemmEx\n", best_name, best, tbs(best), t_def / best);
  }
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}

template <int Hq, int Hkv, int D, int TI> double time_decode(bf16* out, const bf16* q, const bf16* k, const bf16* v,
                                                             const int32_t* lens, int64_t b, int64_t L, int bps, void* ws) {
  return time_us([&] { fk::kernels::flash_decode<Hq, Hkv, D, bf16, TI>(out, q, k, v, lens, b, L, 0.0883883f, ws, 0, bps); });
}

void bench_decode(int64_t b, int64_t L) {
  constexpr int Hq = 32, Hkv = 8, D = 128;
  bf16* k = alloc_fill(size_t(b) * L * Hkv * D, 1.f, 3);
  bf16* v = alloc_fill(size_t(b) * L * Hkv * D, 1.f, 4);
  bf16* q = alloc_fill(size_t(b) * Hq * D, 1.f, 5);
  bf16* out;
  CK(cudaMalloc(&out, size_t(b) * Hq * D * 2));
  std::vector<int32_t> lens(b, int32_t(L));
  int32_t* dl;
  CK(cudaMalloc(&dl, b * 4));
  CK(cudaMemcpy(dl, lens.data(), b * 4, cudaMemcpyHostToDevice));
  void* ws;
  CK(cudaMalloc(&ws, 64ull << 20));
  const double bytes = 2.0 * b * L * Hkv * D * 2;
  std::printf("DECODE hq32 hkv8 d128 B=%-3lld L=%-6lld |", (long long)b, (long long)L);
  for (int bps : {0, 2, 4, 8}) {  // 0: the default (auto)
    const double t4 = time_decode<Hq, Hkv, D, 4>(out, q, k, v, dl, b, L, bps, ws);
    const double t2 = time_decode<Hq, Hkv, D, 2>(out, q, k, v, dl, b, L, bps, ws);
    const auto sp = fk::kernels::flash_decode_split<Hq, Hkv, D, 4>(b, L, bps);
    std::printf(" bps%d(splits %d) ti4 %7.2f us %4.2f TB/s ti2 %7.2f us %4.2f TB/s |", bps, sp.splits, t4,
                bytes / t4 / 1e6, t2, bytes / t2 / 1e6);
  }
  std::printf("\n");
  cudaFree(k);
  cudaFree(v);
  cudaFree(q);
  cudaFree(out);
  cudaFree(dl);
  cudaFree(ws);
}

void bench_prefill(const std::vector<int64_t>& lens, const char* label, bool allow_dense = true) {
  constexpr int Hq = 32, Hkv = 8, D = 128;
  std::vector<int32_t> cu{0};
  int64_t mx = 0;
  double pairs = 0;
  for (int64_t l : lens) {
    cu.push_back(int32_t(cu.back() + l));
    mx = std::max(mx, l);
    pairs += double(l) * (l + 1) / 2;
  }
  const int64_t T = cu.back();
  bf16* q = alloc_fill(size_t(T) * Hq * D, 1.f, 6);
  bf16* k = alloc_fill(size_t(T) * Hkv * D, 1.f, 7);
  bf16* v = alloc_fill(size_t(T) * Hkv * D, 1.f, 8);
  bf16* o;
  CK(cudaMalloc(&o, size_t(T) * Hq * D * 2));
  int32_t* dcu;
  CK(cudaMalloc(&dcu, cu.size() * 4));
  CK(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  fk::kernels::VarlenAttentionArgs a;
  a.out = o;
  a.q = q;
  a.k = k;
  a.v = v;
  a.cu_seqlens_q = a.cu_seqlens_k = dcu;
  a.batch = int64_t(lens.size());
  a.max_seqlen_q = a.max_seqlen_k = mx;
  a.total_q = a.total_k = T;
  a.num_heads = Hq;
  a.num_kv_heads = Hkv;
  a.head_dim = D;
  a.softmax_scale = 1.f / std::sqrt(float(D));
  a.allow_dense = allow_dense;
  const double us = time_us([&] { fk::kernels::varlen_attention_cudnn(a, 0); });
  const double flops = 4.0 * pairs * D * Hq;
  std::printf("PREFILL cudnn %-6s hq32 hkv8 d128 %-12s T=%-6lld %9.1f us %6.1f TFLOP/s (causal flops)\n",
              allow_dense && T == int64_t(lens.size()) * mx ? "dense" : "ragged", label,
              (long long)T, us, flops / us / 1e6);
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  cudaFree(dcu);
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  CK(cudaMalloc(&g_flush, kFlush));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("device %s, %d SMs\n", p.name, p.multiProcessorCount);
  if (what == "all" || what == "gemm") {
    bench_gemm<4096>(6144);
    bench_gemm<4096>(4096);
    bench_gemm<4096>(28672);
    bench_gemm<14336>(4096);
    bench_gemm<4096>(128256);
    bench_gemm<3584>(4608);
    bench_gemm<3584>(3584);
  }
  if (what == "all" || what == "decode") {
    for (auto [b, L] : std::vector<std::pair<int64_t, int64_t>>{{1, 1024}, {1, 8192}, {1, 32768}, {1, 131072}, {8, 8192},
                                                                {8, 32768}, {32, 8192}, {64, 1024}, {64, 16384}})
      bench_decode(b, L);
  }
  if (what == "all" || what == "prefill") {
    bench_prefill({4096}, "b1_s4096");
    bench_prefill({8192}, "b1_s8192");
    bench_prefill({16384}, "b1_s16384");
    std::vector<int64_t> l4, l16;
    for (int i = 0; i < 4; ++i) l4.push_back(2048 - i * 2048 / 8);
    for (int i = 0; i < 16; ++i) l16.push_back(1024 - i * 1024 / 32);
    bench_prefill(l4, "b4_s2048");
    bench_prefill(l16, "b16_s1024");
    bench_prefill({2048, 2048}, "b2_s2048eq");
    bench_prefill({4096}, "b1_s4096", false);
    bench_prefill({8192}, "b1_s8192", false);
    bench_prefill({2048, 2048}, "b2_s2048eq", false);
  }
  return 0;
}
