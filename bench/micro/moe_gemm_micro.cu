// Standalone check + micro-benchmark of moe_grouped_gemm (kernels/ only; no runtime, no torch).
//
//   nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -I kernels/include \
//        bench/micro/moe_gemm_micro.cu -o /tmp/moe_gemm_micro && /tmp/moe_gemm_micro [flags]
//
// Cases: {Mixtral-8x7B: E 8, top 2, H 4096, I 14336; Qwen3-30B-A3B: E 128, top 8, H 2048, I 768;
// gpt-oss-20b: E 32, top 4, H 2880, I 2880, per-expert bias on both GEMMs; DeepSeek-V3: E 256,
// top 8, H 7168, I 2048 (22.5 GB of expert weights)}
// x tokens {1, 8, 32, 64, 256, 1024, 4096, 8192} x {GEMM1: A = hidden [T, H], N = 2I, K = H,
// a_div_topk; GEMM2: A = activation [T*top, I], N = H, K = I, mul_routed_weight}. Routing: uniform
// random distinct experts per token (fixed seed), weights in [0.1, 1); the alignment is done on the
// host here (counts per expert, segments padded to block_m, sentinel num_valid, -1 past the end),
// with the slot order inside each segment shuffled. A and B uniform random, B scaled by 3 / sqrt(K)
// so outputs are ~N(0, 1). block_m = moe_gemm_block_m(T, top, E) unless --sweep-bm.
//
// Check: against reference::moe_gemm_ref (fp32, CUDA cores). C starts as NaN (0xFFFF) so rows the
// kernel misses show up; reported: relative L2 error (must be < 1e-2), max abs error (must be <=
// 2^-7 max|ref|), max|ref|. Timing: CUDA events around one call, L2 flushed before every call
// (256 MB memset, outside the events; --no-flush to disable), median and min of 20 calls after 3
// warm-ups. Reported: us, TFLOP/s (2 * num_valid * N * K) and GB/s of unique bytes (active
// experts' B + A rows read + C).
//
// Before the cases, robustness tests at small odd shapes (always run): N not a multiple of the
// tile width, padded lda/ldc (the pad columns must stay untouched), experts marked -1 in expert_ids
// (their rows must stay untouched), K shorter than the pipeline, and a CUDA-graph capture+replay.
//
// Flags: --quick (tokens 1, 64, 1024, 4096), --tokens a,b,c, --model Mixtral|Qwen3|gpt-oss|DeepSeek, --gemm 1|2,
//        --variants (also time the alternative mma.sync configs of the chosen block_m),
//        --wgmma (also check+time the sm_90a wgmma configs), --ws (implies --wgmma; also the
//        warp-specialised TMA configs Ws64 / Ws128 / Ws192), --ws-all (and their tuning alternatives),
//        --only a,b (time only these variant names), --interleave [--rounds N] (check all variants,
//        then time them round-robin, N rounds of iters / N calls: drifts in clock/temperature hit
//        all variants alike; reported: median of round medians, min), --bms 64,128 (block_m list), --sweep-bm (every block_m, not just
//        the heuristic's), --no-flush, --iters N, --skip-robust.
// Environment: FK_MICRO_SORTED=1 keeps the slots of a segment ascending (fk_bench's canonical
// alignment) instead of shuffled; FK_MICRO_NORMAL=1 fills A and B with N(0, (scale / 3)^2) instead
// of U(-scale, scale) (B then has fk_bench's 1 / sqrt(K) deviation).
// Exit status: 0 all checks passed, 1 a check failed, 2 usage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "fk/kernels/moe_gemm.cuh"
#include "fk/kernels/reference/moe_gemm_ref.cuh"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

using bf16 = __nv_bfloat16;
namespace fkk = fk::kernels;
namespace cfg = fk::kernels::moe_gemm_cfg;

// ---------------------------------------------------------------------------------------------
// Device helpers: random fills and the comparison.

__device__ __forceinline__ uint32_t mix32(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 32);
}
/// p[i] = scale * U(-1, 1), deterministic in (seed, i).
__global__ void fill_uniform_bf16(bf16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(scale * (mix32(seed * 0x2545F4914F6CDD1Dull + i) * (2.f / 4294967296.f) - 1.f));
}

/// N(0, (scale / 3)^2) by Box-Muller (FK_MICRO_NORMAL=1: the distribution fk_bench fills with).
__global__ void fill_normal_bf16(bf16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u1 = (mix32(seed * 0x2545F4914F6CDD1Dull + 2 * i) + 0.5f) * (1.f / 4294967296.f);
    const float u2 = mix32(seed * 0x2545F4914F6CDD1Dull + 2 * i + 1) * (1.f / 4294967296.f);
    p[i] = __float2bfloat16(scale / 3.f * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

struct CmpStats {
  double sum_sq_err, sum_sq_ref;
  unsigned max_err_bits, max_ref_bits;       // non-negative floats compare as unsigned
  unsigned long long nonfinite, touched;     // compared non-finite outputs; written cells that must not be
};

/// row_mode[r] = 1: compare columns [0, n) with ref, columns [n, ldc) must still hold the 0xFFFF
/// sentinel; 0: the whole row [0, ldc) must hold the sentinel.
__global__ void __launch_bounds__(256) compare_kernel(const bf16* c, int64_t ldc, const float* ref, int64_t rows, int n,
                                                      const uint8_t* row_mode, CmpStats* out) {
  double se = 0, sr = 0;
  float me = 0, mr = 0;
  unsigned long long nf = 0, tc = 0;
  const int64_t total = rows * ldc;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ldc;
    const int col = static_cast<int>(i - r * ldc);
    const unsigned short bits = reinterpret_cast<const unsigned short*>(c)[i];
    if (row_mode[r] && col < n) {
      const float v = __bfloat162float(c[i]);
      const float x = ref[r * n + col];
      if (!isfinite(v)) {
        ++nf;
        continue;
      }
      const double d = double(v) - double(x);
      se += d * d;
      sr += double(x) * double(x);
      me = fmaxf(me, fabsf(v - x));
      mr = fmaxf(mr, fabsf(x));
    } else if (bits != 0xFFFFu) {
      ++tc;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    se += __shfl_xor_sync(0xffffffffu, se, o);
    sr += __shfl_xor_sync(0xffffffffu, sr, o);
    me = fmaxf(me, __shfl_xor_sync(0xffffffffu, me, o));
    mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, o));
    nf += __shfl_xor_sync(0xffffffffu, nf, o);
    tc += __shfl_xor_sync(0xffffffffu, tc, o);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&out->sum_sq_err, se);
    atomicAdd(&out->sum_sq_ref, sr);
    atomicMax(&out->max_err_bits, __float_as_uint(me));
    atomicMax(&out->max_ref_bits, __float_as_uint(mr));
    atomicAdd(&out->nonfinite, nf);
    atomicAdd(&out->touched, tc);
  }
}

__global__ void count_diff_kernel(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* out) {
  unsigned long long d = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d += a[i] != b[i];
  if (d) atomicAdd(out, d);
}

// ---------------------------------------------------------------------------------------------
// Host helpers.

template <class T> T* dalloc(int64_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  return p;
}
template <class T> T* upload(const std::vector<T>& v) {
  T* p = dalloc<T>(static_cast<int64_t>(v.size()));
  if (!v.empty()) CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
/// Whether environment variable `name` is set to "1".
bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == "1";
}
bf16* rand_bf16(int64_t n, uint64_t seed, float scale) {
  bf16* p = dalloc<bf16>(n);
  static const bool normal = env_is_1("FK_MICRO_NORMAL");
  if (normal) {
    fill_normal_bf16<<<2048, 256>>>(p, n, seed, scale);
  } else {
    fill_uniform_bf16<<<2048, 256>>>(p, n, seed, scale);
  }
  CK(cudaGetLastError());
  return p;
}

struct Routing {
  std::vector<int32_t> ids;  // [T * top] flat
  std::vector<float> w;
  int active = 0;  // experts with at least one slot
};
Routing make_routing(int64_t tokens, int E, int top, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Routing r;
  r.ids.resize(tokens * top);
  r.w.resize(tokens * top);
  std::vector<int32_t> perm(E);
  std::uniform_real_distribution<float> uw(0.1f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int k = 0; k < top; ++k) {  // partial Fisher-Yates: top distinct experts
      std::uniform_int_distribution<int> pick(k, E - 1);
      std::swap(perm[k], perm[pick(rng)]);
      r.ids[t * top + k] = perm[k];
      r.w[t * top + k] = uw(rng);
    }
  }
  std::vector<char> hit(E, 0);
  for (int32_t e : r.ids) hit[e] = 1;
  r.active = static_cast<int>(std::count(hit.begin(), hit.end(), 1));
  return r;
}

/// vLLM moe_align_block_size on the host. `local[e] == false` marks expert e as not on this rank
/// (its blocks get expert id -1, as with expert parallelism).
struct Aligned {
  std::vector<int32_t> sorted, eids;
  int32_t ntpp = 0;
  int64_t max_blocks = 0;
};
Aligned host_align(const std::vector<int32_t>& ids, int E, int bm, const std::vector<char>* local, uint64_t seed) {
  const int64_t numel = static_cast<int64_t>(ids.size());
  std::vector<int64_t> cnt(E, 0), off(E + 1, 0);
  for (int32_t e : ids) ++cnt[e];
  for (int e = 0; e < E; ++e) off[e + 1] = off[e] + (cnt[e] + bm - 1) / bm * bm;
  Aligned a;
  a.ntpp = static_cast<int32_t>(off[E]);
  const int64_t max_padded = numel + int64_t(E) * (bm - 1);
  a.max_blocks = (max_padded + bm - 1) / bm;
  a.sorted.assign(max_padded, static_cast<int32_t>(numel));
  a.eids.assign(a.max_blocks, -1);
  for (int e = 0; e < E; ++e)
    for (int64_t b = off[e] / bm; b < off[e + 1] / bm; ++b) a.eids[b] = (local && !(*local)[e]) ? -1 : e;
  std::vector<int64_t> pos(off.begin(), off.end() - 1);
  for (int64_t s = 0; s < numel; ++s) a.sorted[pos[ids[s]]++] = static_cast<int32_t>(s);
  // The order inside a segment is unspecified (vLLM uses atomics): shuffled, or ascending (fk_bench's
  // canonical alignment) with FK_MICRO_SORTED=1.
  static const bool sorted = env_is_1("FK_MICRO_SORTED");
  std::mt19937_64 rng(seed);
  if (!sorted)
    for (int e = 0; e < E; ++e) std::shuffle(a.sorted.begin() + off[e], a.sorted.begin() + off[e] + cnt[e], rng);
  return a;
}

struct DevAligned {
  int32_t *sorted = nullptr, *eids = nullptr, *ntpp = nullptr;
  int64_t max_blocks = 0;
  void upload_from(const Aligned& a) {
    sorted = upload(a.sorted);
    eids = upload(a.eids);
    ntpp = upload(std::vector<int32_t>{a.ntpp});
    max_blocks = a.max_blocks;
  }
  void release() {
    CK(cudaFree(sorted));
    CK(cudaFree(eids));
    CK(cudaFree(ntpp));
  }
};

/// One GEMM problem on the device (everything the launchers need).
struct Problem {
  bf16* c = nullptr;
  int64_t ldc = 0;
  const bf16* a = nullptr;
  int64_t lda = 0;
  const bf16* b = nullptr;
  const float* w = nullptr;
  int64_t num_valid = 0;
  int top = 1;
  bool a_div = false, mul = false;
  int n = 0, k = 0;
  const bf16* bias = nullptr;  // [E, n] or nullptr
};

using Launcher = std::function<void(const Problem&, const DevAligned&, int bm, cudaStream_t)>;
struct Variant {
  std::string name;
  int bm;
  Launcher run;
};

template <class Cfg> Launcher cfg_launcher() {
  return [](const Problem& p, const DevAligned& al, int bm, cudaStream_t s) {
    fkk::moe_grouped_gemm_cfg<Cfg, bf16>(p.c, p.ldc, p.a, p.lda, p.b, p.w, al.sorted, al.eids, al.ntpp, p.num_valid,
                                         p.top, p.a_div, p.mul, p.n, p.k, al.max_blocks, bm, s, p.bias);
  };
}
Launcher default_launcher() {
  return [](const Problem& p, const DevAligned& al, int bm, cudaStream_t s) {
    fkk::moe_grouped_gemm<bf16>(p.c, p.ldc, p.a, p.lda, p.b, p.w, al.sorted, al.eids, al.ntpp, p.num_valid, p.top,
                                p.a_div, p.mul, p.n, p.k, al.max_blocks, bm, s, p.bias);
  };
}
/// The default dispatch (moe_grouped_gemm<bf16>), named after its mma.sync config (on an sm_90
/// device built for sm_90a it runs the Ws* config of the same block_m).
const char* default_name(int bm) {
  return bm == 16 ? "Decode16" : bm == 64 ? "Mma64" : bm == 128 ? "Mma128" : "Mma192";
}

/// --ws: 0 off, 1 the warp-specialised configs, 2 also their tuning alternatives.
static int g_ws = 0;
static std::string g_only;  // --only a,b: time just these variant names
static bool g_interleave = false;
static int g_rounds = 4;

/// The variants to run for block_m bm.
std::vector<Variant> variants_for(int bm, bool alt, bool wgmma) {
  std::vector<Variant> v{{default_name(bm), bm, default_launcher()}};
  if (alt) {
    if (bm == 16) v.push_back({"Decode16x128", bm, cfg_launcher<cfg::Decode16x128>()});
    if (bm == 64) v.push_back({"Mma64x8w", bm, cfg_launcher<cfg::Mma64x8w>()});
    if (bm == 128) v.push_back({"Mma128x256", bm, cfg_launcher<cfg::Mma128x256>()});
  }
  if (wgmma) {
    if (bm == 64) {
      v.push_back({"Wgmma64", bm, cfg_launcher<cfg::Wgmma64>()});
      v.push_back({"Wgmma64x256", bm, cfg_launcher<cfg::Wgmma64x256>()});
      v.push_back({"Wgmma64n256", bm, cfg_launcher<cfg::Wgmma64n256>()});
    }
    if (bm == 128) {
      v.push_back({"Wgmma128", bm, cfg_launcher<cfg::Wgmma128>()});
      v.push_back({"Wgmma128x128", bm, cfg_launcher<cfg::Wgmma128x128>()});
    }
  }
  if (wgmma && g_ws) {
    if (bm == 64) {
      v.push_back({"Ws64", bm, cfg_launcher<cfg::Ws64>()});
      if (g_ws > 1) {
        v.push_back({"Ws64g32", bm, cfg_launcher<cfg::Ws64g32>()});
        v.push_back({"Ws64s5", bm, cfg_launcher<cfg::Ws64s5>()});
      }
    }
    if (bm == 128) {
      v.push_back({"Ws128", bm, cfg_launcher<cfg::Ws128>()});
      if (g_ws > 1) {
        v.push_back({"Ws128g8", bm, cfg_launcher<cfg::Ws128g8>()});
        v.push_back({"Ws128g32", bm, cfg_launcher<cfg::Ws128g32>()});
      }
    }
    if (bm == 192) {
      v.push_back({"Ws192", bm, cfg_launcher<cfg::Ws192>()});
      if (g_ws > 1) {
        v.push_back({"Ws192s4", bm, cfg_launcher<cfg::Ws192s4>()});
        v.push_back({"Ws192g1", bm, cfg_launcher<cfg::Ws192g1>()});
      }
    }
  }
  return v;
}

struct Checker {
  CmpStats* d_stats = dalloc<CmpStats>(1);
  /// Compares p.c (rows x ldc) with ref ([rows, n] fp32) under row_mode; prints and returns pass.
  bool check(const Problem& p, const float* ref, const uint8_t* d_row_mode, std::string* msg) {
    CK(cudaMemset(d_stats, 0, sizeof(CmpStats)));
    compare_kernel<<<1024, 256>>>(p.c, p.ldc, ref, p.num_valid, p.n, d_row_mode, d_stats);
    CK(cudaGetLastError());
    CmpStats h;
    CK(cudaMemcpy(&h, d_stats, sizeof(h), cudaMemcpyDeviceToHost));
    float me, mr;
    std::memcpy(&me, &h.max_err_bits, 4);
    std::memcpy(&mr, &h.max_ref_bits, 4);
    const double rel = h.sum_sq_ref > 0 ? std::sqrt(h.sum_sq_err / h.sum_sq_ref) : (h.sum_sq_err > 0 ? 1.0 : 0.0);
    const bool ok = h.nonfinite == 0 && h.touched == 0 && rel < 1e-2 && me <= std::ldexp(mr, -7) + 1e-6f;
    char buf[256];
    std::snprintf(buf, sizeof buf, "rel_l2 %.2e max_abs %.2e (max|ref| %.2f)%s%s", rel, me, mr,
                  h.nonfinite ? (" NONFINITE=" + std::to_string(h.nonfinite)).c_str() : "",
                  h.touched ? (" TOUCHED=" + std::to_string(h.touched)).c_str() : "");
    *msg = buf;
    return ok;
  }
};

struct Timer {
  void* flush = nullptr;
  size_t flush_bytes = size_t(256) << 20;
  bool do_flush = true;
  int iters = 20;
  cudaStream_t s;
  cudaEvent_t e0, e1;
  int flush_val = 0;
  Timer() {
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  /// {median, min} in microseconds.
  std::pair<double, double> time(const std::function<void(cudaStream_t)>& f) {
    for (int i = 0; i < 3; ++i) f(s);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      if (do_flush) CK(cudaMemsetAsync(flush, ++flush_val & 0xff, flush_bytes, s));
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

static int g_failures = 0;

/// Runs variant v on problem p (C reset to the sentinel first), checks it; returns pass.
bool run_and_check(const Variant& v, const Problem& p, const DevAligned& al, const float* ref, const uint8_t* row_mode,
                   Checker& chk, cudaStream_t s, std::string* msg) {
  CK(cudaMemsetAsync(p.c, 0xFF, size_t(p.num_valid) * p.ldc * sizeof(bf16), s));
  try {
    v.run(p, al, v.bm, s);
  } catch (const std::exception& ex) {
    *msg = std::string("EXCEPTION: ") + ex.what();
    return false;
  }
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s));
  return chk.check(p, ref, row_mode, msg);
}

// ---------------------------------------------------------------------------------------------
// Robustness tests: small odd shapes, padded strides, expert-parallel masking, graph capture.

bool robustness(bool wgmma, Checker& chk, Timer& tm) {
  bool all_ok = true;
  struct Shape {
    int E, top;
    int64_t T;
    int n, k;
  };
  const Shape shapes[] = {{16, 4, 77, 320, 256}, {16, 4, 3, 192, 1024}, {8, 2, 300, 448, 128}, {4, 1, 700, 64, 64}};
  int idx = 0;
  for (const Shape& sh : shapes) {
    ++idx;
    const Routing rt = make_routing(sh.T, sh.E, sh.top, 1000 + idx);
    const int64_t nv = sh.T * sh.top;
    std::vector<char> local(sh.E, 1);
    for (int e = 0; e < sh.E; e += 3) local[e] = (e % 2 == 1) ? 0 : 1;  // experts 3, 9, 15, ... off this rank
    if (sh.E > 3) local[3] = 0;
    std::vector<uint8_t> row_mode(nv);
    for (int64_t s = 0; s < nv; ++s) row_mode[s] = local[rt.ids[s]] ? 1 : 0;
    int32_t* d_ids = upload(rt.ids);
    float* d_w = upload(rt.w);
    uint8_t* d_mode = upload(row_mode);
    for (int gemm = 1; gemm <= 2; ++gemm) {
      const bool a_div = gemm == 1;
      const int64_t a_rows = a_div ? sh.T : nv;
      const int64_t lda = sh.k + 64, ldc = sh.n + 64;
      bf16* a = rand_bf16(a_rows * lda, 11 + idx * 7 + gemm, 1.f);
      bf16* b = rand_bf16(int64_t(sh.E) * sh.n * sh.k, 23 + idx * 7 + gemm, 3.f / std::sqrt(float(sh.k)));
      bf16* c = dalloc<bf16>(nv * ldc);
      float* ref = dalloc<float>(nv * sh.n);
      // Shapes 2 and 4 carry a per-expert bias (gpt-oss epilogue).
      bf16* bias = (idx % 2 == 0) ? rand_bf16(int64_t(sh.E) * sh.n, 41 + idx * 7 + gemm, 0.5f) : nullptr;
      if (idx == 1) {  // also exercise the overload that finds the expert count itself
        fkk::reference::moe_gemm_ref<bf16>(ref, a, lda, b, d_w, d_ids, nv, sh.top, a_div, !a_div, sh.n, sh.k, 0);
      } else {
        fkk::reference::moe_gemm_ref<bf16>(ref, a, lda, b, d_w, d_ids, nv, sh.top, a_div, !a_div, sh.n, sh.k, sh.E, 0,
                                           bias);
      }
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      Problem p{c, ldc, a, lda, b, d_w, nv, sh.top, a_div, !a_div, sh.n, sh.k, bias};
      for (int bm : {16, 64, 128, 192}) {
        const Aligned h = host_align(rt.ids, sh.E, bm, &local, 77 + bm);
        DevAligned al;
        al.upload_from(h);
        for (const Variant& v : variants_for(bm, true, wgmma)) {
          std::string msg;
          const bool ok = run_and_check(v, p, al, ref, d_mode, chk, tm.s, &msg);
          if (!ok || idx == 1 || v.name.rfind("Ws", 0) == 0)
            std::printf("robust E%d top%d T%lld n%d k%d gemm%d bm%-3d %-13s%s %s  %s\n", sh.E, sh.top, (long long)sh.T,
                        sh.n, sh.k, gemm, bm, v.name.c_str(), bias ? " bias" : "", msg.c_str(), ok ? "OK" : "FAIL");
          all_ok &= ok;
        }
        // CUDA graph: capture the default launcher (and the warp-specialised configs; all already used
        // above, so their one-time setup is done), replay, and compare bitwise with a direct run.
        std::vector<Variant> graph_vs{variants_for(bm, false, false)[0]};
        for (const Variant& v : variants_for(bm, false, wgmma))
          if (v.name.rfind("Ws", 0) == 0) graph_vs.push_back(v);
        for (const Variant& v : graph_vs) {
          bf16* c2 = dalloc<bf16>(nv * ldc);
          Problem p2 = p;
          p2.c = c2;
          CK(cudaMemsetAsync(c, 0xFF, nv * ldc * sizeof(bf16), tm.s));
          CK(cudaMemsetAsync(c2, 0xFF, nv * ldc * sizeof(bf16), tm.s));
          v.run(p, al, bm, tm.s);
          cudaGraph_t g;
          cudaGraphExec_t ge;
          CK(cudaStreamBeginCapture(tm.s, cudaStreamCaptureModeGlobal));
          v.run(p2, al, bm, tm.s);
          CK(cudaStreamEndCapture(tm.s, &g));
          CK(cudaGraphInstantiate(&ge, g, 0));
          CK(cudaGraphLaunch(ge, tm.s));
          CK(cudaGraphLaunch(ge, tm.s));
          CK(cudaStreamSynchronize(tm.s));
          unsigned long long* d_diff = dalloc<unsigned long long>(1);
          CK(cudaMemset(d_diff, 0, sizeof(unsigned long long)));
          count_diff_kernel<<<256, 256>>>(reinterpret_cast<const uint16_t*>(c), reinterpret_cast<const uint16_t*>(c2),
                                          nv * ldc, d_diff);
          unsigned long long diff = 0;
          CK(cudaMemcpy(&diff, d_diff, sizeof diff, cudaMemcpyDeviceToHost));
          if (diff != 0 || idx == 1)
            std::printf("robust E%d top%d T%lld n%d k%d gemm%d bm%-3d %s graph replay: %llu differing elements  %s\n",
                        sh.E, sh.top, (long long)sh.T, sh.n, sh.k, gemm, bm, v.name.c_str(), diff,
                        diff == 0 ? "OK" : "FAIL");
          all_ok &= diff == 0;
          CK(cudaGraphExecDestroy(ge));
          CK(cudaGraphDestroy(g));
          CK(cudaFree(d_diff));
          CK(cudaFree(c2));
        }
        al.release();
      }
      CK(cudaFree(a));
      CK(cudaFree(b));
      CK(cudaFree(c));
      CK(cudaFree(ref));
      if (bias) CK(cudaFree(bias));
    }
    CK(cudaFree(d_ids));
    CK(cudaFree(d_w));
    CK(cudaFree(d_mode));
  }
  // The host-side argument checks must reject bad shapes with a message naming the argument.
  {
    const Variant v = variants_for(16, false, false)[0];
    DevAligned al;
    al.max_blocks = 1;
    Problem p;
    p.n = 100;
    p.k = 64;
    p.ldc = 128;
    p.lda = 64;
    p.num_valid = 1;
    auto expect = [&](const char* what, const char* needle, int bm) {
      std::string m;
      try {
        v.run(p, al, bm, 0);
        m = "(no exception)";
      } catch (const std::invalid_argument& ex) {
        m = ex.what();
      }
      const bool ok = m.find(needle) != std::string::npos;
      std::printf("robust argument check %-16s -> \"%s\"  %s\n", what, m.c_str(), ok ? "OK" : "FAIL");
      all_ok &= ok;
    };
    expect("N=100", "N (=100)", 16);
    p.n = 128;
    p.k = 96;
    expect("K=96", "K (=96)", 16);
    p.k = 64;
    expect("block_m=32", "block_m (=32)", 32);
  }
  return all_ok;
}

// ---------------------------------------------------------------------------------------------

struct Model {
  const char* name;
  int E, top, H, I;
  bool bias;  // per-expert bias on both GEMMs (gpt-oss)
};

int main(int argc, char** argv) {
  bool quick = false, alt = false, wgmma = false, sweep = false, robust = true;
  std::string model_filter;
  int gemm_filter = 0;
  std::vector<int64_t> tokens = {1, 8, 32, 64, 256, 1024, 4096, 8192};
  std::vector<int> bms_flag;  // --bms: these block_m values instead of the heuristic's
  Timer tm;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") {
      quick = true;
    } else if (a == "--variants") {
      alt = true;
    } else if (a == "--wgmma") {
      wgmma = true;
    } else if (a == "--sweep-bm") {
      sweep = true;
    } else if (a == "--no-flush") {
      tm.do_flush = false;
    } else if (a == "--ws") {
      g_ws = std::max(g_ws, 1);
      wgmma = true;
    } else if (a == "--ws-all") {
      g_ws = 2;
      wgmma = true;
    } else if (a == "--only") {
      g_only = next();
    } else if (a == "--interleave") {
      g_interleave = true;
    } else if (a == "--rounds") {
      g_rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--bms") {
      bms_flag.clear();
      std::string s = next();
      for (size_t q0 = 0; q0 < s.size();) {
        size_t q = s.find(',', q0);
        if (q == std::string::npos) q = s.size();
        bms_flag.push_back(std::atoi(s.substr(q0, q - q0).c_str()));
        q0 = q + 1;
      }
    } else if (a == "--skip-robust") {
      robust = false;
    } else if (a == "--iters") {
      tm.iters = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--model") {
      model_filter = next();
    } else if (a == "--gemm") {
      gemm_filter = std::atoi(next().c_str());
    } else if (a == "--tokens") {
      tokens.clear();
      std::string s = next();
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        tokens.push_back(std::atoll(s.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--tokens a,b] [--model Mixtral|Qwen3] [--gemm 1|2] [--variants] [--wgmma] "
                   "[--ws] [--ws-all] [--only a,b] [--interleave] [--rounds N] [--bms 64,128] [--sweep-bm] [--no-flush] [--iters N] [--skip-robust]\n",
                   argv[0]);
      return 2;
    }
  }
  if (quick) tokens = {1, 64, 1024, 4096};

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB, sm_%d%d; L2 flush %s; median of %d\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.major, prop.minor, tm.do_flush ? "on" : "off",
              tm.iters);
  if (wgmma && !(prop.major == 9 && prop.minor == 0)) {
    std::printf("--wgmma ignored: needs an sm_90 device\n");
    wgmma = false;
  }
  Checker chk;

  if (robust) {
    const bool ok = robustness(wgmma, chk, tm);
    std::printf("robustness tests: %s\n", ok ? "all passed" : "FAILED");
    if (!ok) ++g_failures;
  }

  const Model models[] = {{"Mixtral", 8, 2, 4096, 14336, false},
                          {"Qwen3", 128, 8, 2048, 768, false},
                          {"gpt-oss", 32, 4, 2880, 2880, true},
                          {"DeepSeek", 256, 8, 7168, 2048, false}};
  for (const Model& m : models) {
    if (!model_filter.empty() && model_filter != m.name) continue;
    // Weights: w13 [E, 2I, H] and w2 [E, H, I]; scale 3 / sqrt(K) -> outputs ~N(0, 1).
    bf16* w13 = rand_bf16(int64_t(m.E) * 2 * m.I * m.H, 101, 3.f / std::sqrt(float(m.H)));
    bf16* w2 = rand_bf16(int64_t(m.E) * m.H * m.I, 202, 3.f / std::sqrt(float(m.I)));
    for (int64_t T : tokens) {
      const Routing rt = make_routing(T, m.E, m.top, 7 + T);
      const int64_t nv = T * m.top;
      int32_t* d_ids = upload(rt.ids);
      float* d_w = upload(rt.w);
      uint8_t* d_mode = upload(std::vector<uint8_t>(nv, 1));
      const int bm0 = fkk::moe_gemm_block_m(T, m.top, m.E);
      std::vector<int> bms = !bms_flag.empty() ? bms_flag : sweep ? std::vector<int>{16, 64, 128, 192} : std::vector<int>{bm0};
      for (int gemm = 1; gemm <= 2; ++gemm) {
        if (gemm_filter && gemm != gemm_filter) continue;
        const bool g1 = gemm == 1;
        const int n = g1 ? 2 * m.I : m.H, k = g1 ? m.H : m.I;
        const int64_t a_rows = g1 ? T : nv;
        bf16* a = rand_bf16(a_rows * k, 303 + gemm + 16 * T, 1.f);
        bf16* c = dalloc<bf16>(nv * n);
        float* ref = dalloc<float>(nv * n);
        bf16* bias = m.bias ? rand_bf16(int64_t(m.E) * n, 404 + gemm, 0.5f) : nullptr;
        fkk::reference::moe_gemm_ref<bf16>(ref, a, k, g1 ? w13 : w2, d_w, d_ids, nv, m.top, g1, !g1, n, k, m.E, 0,
                                           bias);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        Problem p{c, n, a, k, g1 ? w13 : w2, d_w, nv, m.top, g1, !g1, n, k, bias};
        const double flops = 2.0 * nv * n * k;
        const double bytes = (double(rt.active) * n * k + double(a_rows) * k + double(nv) * n) * sizeof(bf16);
        for (int bm : bms) {
          const Aligned h = host_align(rt.ids, m.E, bm, nullptr, 5 + bm);
          DevAligned al;
          al.upload_from(h);
          std::vector<Variant> vs;
          for (const Variant& v : variants_for(bm, alt, wgmma))
            if (g_only.empty() || ("," + g_only + ",").find("," + v.name + ",") != std::string::npos) vs.push_back(v);
          // Check all first; then time. --interleave: g_rounds rounds over all variants (each round a
          // median of iters / rounds calls), so slow drifts (clocks, temperature) hit every variant alike.
          std::vector<std::string> msgs(vs.size());
          std::vector<char> oks(vs.size());
          std::vector<std::vector<double>> meds(vs.size()), mins(vs.size());
          for (size_t i = 0; i < vs.size(); ++i) {
            oks[i] = run_and_check(vs[i], p, al, ref, d_mode, chk, tm.s, &msgs[i]);
            if (!oks[i]) ++g_failures;
          }
          const int rounds = g_interleave ? g_rounds : 1;
          const int iters0 = tm.iters;
          if (g_interleave) tm.iters = std::max(3, iters0 / rounds);
          for (int r = 0; r < rounds; ++r)
            for (size_t i = 0; i < vs.size(); ++i) {
              if (!oks[i]) continue;
              const Variant& v = vs[i];
              const auto t = tm.time([&](cudaStream_t s) { v.run(p, al, v.bm, s); });
              meds[i].push_back(t.first);
              mins[i].push_back(t.second);
            }
          tm.iters = iters0;
          for (size_t i = 0; i < vs.size(); ++i) {
            const Variant& v = vs[i];
            const bool ok = oks[i];
            const std::string& msg = msgs[i];
            double med = 0, mn = 0;
            if (ok) {
              std::vector<double> mm = meds[i];
              std::sort(mm.begin(), mm.end());
              med = mm[mm.size() / 2];
              mn = *std::min_element(mins[i].begin(), mins[i].end());
            }
            std::printf("%-7s gemm%d T=%-5lld n%-5d k%-5d experts %3d/%-3d bm=%-3d %-13s %10.2f us (min %9.2f) %7.1f TFLOP/s "
                        "%7.1f GB/s  %s  %s\n",
                        m.name, gemm, (long long)T, n, k, rt.active, m.E, bm, v.name.c_str(), med, mn,
                        ok ? flops / med * 1e-6 : 0.0, ok ? bytes / med * 1e-3 : 0.0, msg.c_str(), ok ? "OK" : "FAIL");
            std::fflush(stdout);
          }
          al.release();
        }
        CK(cudaFree(a));
        CK(cudaFree(c));
        CK(cudaFree(ref));
        if (bias) CK(cudaFree(bias));
      }
      CK(cudaFree(d_ids));
      CK(cudaFree(d_w));
      CK(cudaFree(d_mode));
    }
    CK(cudaFree(w13));
    CK(cudaFree(w2));
  }
  std::printf("%s\n", g_failures ? "SOME CHECKS FAILED" : "all checks passed");
  return g_failures ? 1 : 0;
}
