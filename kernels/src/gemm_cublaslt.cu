// cuBLASLt GEMM with cached plans, the cuBLAS peer, and the measured GEMV/cuBLAS choice.
// See fk/kernels/gemm.h.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "fk/kernels/gemm.h"

namespace fk::kernels {
namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("fk gemm: " + what); }

#define FK_LT(expr)                                                                                   \
  do {                                                                                                \
    cublasStatus_t st_ = (expr);                                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      fail(std::string(#expr) + " -> " + cublasGetStatusString(st_) + " (" + __FILE__ + ":" + std::to_string(__LINE__) + ")"); \
  } while (0)
#define FK_RT(expr)                                                                                   \
  do {                                                                                                \
    cudaError_t e_ = (expr);                                                                          \
    if (e_ != cudaSuccess) fail(std::string(#expr) + " -> " + cudaGetErrorString(e_));               \
  } while (0)

cudaDataType_t cuda_type(GemmDType d) { return d == GemmDType::kBF16 ? CUDA_R_16BF : CUDA_R_16F; }

int current_device() {
  int dev = 0;
  FK_RT(cudaGetDevice(&dev));
  return dev;
}

/// Per-device library state: handles and the Lt workspace (never freed: process lifetime).
struct DeviceState {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
};

std::mutex g_mu;

DeviceState& device_state() {
  static std::map<int, DeviceState> states;
  const int dev = current_device();
  auto& s = states[dev];
  if (!s.lt) {
    FK_LT(cublasLtCreate(&s.lt));
    FK_LT(cublasCreate(&s.blas));
    FK_RT(cudaMalloc(&s.workspace, kWorkspaceBytes));
    // cuBLASLt's split-K reduction reads workspace words that no kernel of the GEMM wrote
    // (compute-sanitizer initcheck: 4-byte reads in splitKreduce_kernel, results unaffected).
    // Zeroed once here so that an initcheck sweep reports only reads that matter.
    FK_RT(cudaMemset(s.workspace, 0, kWorkspaceBytes));
    FK_LT(cublasSetWorkspace(s.blas, s.workspace, kWorkspaceBytes));  // shared: calls are stream-ordered
    FK_LT(cublasSetMathMode(s.blas, CUBLAS_DEFAULT_MATH));
  }
  return s;
}

/// One cached cuBLASLt plan. Column-major view: D^T[N, M] = op_T(W)[N, K] · x^T[K, M].
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

/// The largest power of two up to 256 that divides the address. cuBLASLt's heuristic assumes 256-byte
/// aligned operands unless told otherwise, and an algorithm chosen so reads or writes wrongly at a
/// smaller alignment (rows [q c, (q + 1) c) of an output with c N 2 bytes not a multiple of 256: the
/// overlapped linears' chunks, Note [Overlapped linears], gave wrong rows on 2 x H100). The plan is
/// keyed by, and its heuristic told, each operand's alignment.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t r = 256;
  while (r > 1 && a % r != 0) r >>= 1;
  return r;
}

using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, bool, uint32_t, uint32_t, uint32_t>;

LtPlan& get_plan(DeviceState& st, GemmDType dtype, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
                 bool bias, const void* bias_ptr, uint32_t align_w, uint32_t align_x, uint32_t align_y) {
  static std::map<PlanKey, LtPlan> plans;
  const PlanKey key{current_device(), static_cast<int>(dtype), m, n, k, ldx, ldy, bias, align_w, align_x, align_y};
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  LtPlan p;
  const cudaDataType_t t = cuda_type(dtype);
  FK_LT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  FK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
  FK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    FK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    FK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t)));
    // The pointer itself is set per call; a placeholder lets the heuristic see a bias.
    FK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  FK_LT(cublasLtMatrixLayoutCreate(&p.a, t, k, n, k));      // W: col-major K x N (= row-major [N, K])
  FK_LT(cublasLtMatrixLayoutCreate(&p.b, t, k, m, ldx));    // x: col-major K x M
  FK_LT(cublasLtMatrixLayoutCreate(&p.c, t, n, m, ldy));    // y: col-major N x M
  cublasLtMatmulPreference_t pref = nullptr;
  FK_LT(cublasLtMatmulPreferenceCreate(&pref));
  FK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                             sizeof(kWorkspaceBytes)));
  FK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w, sizeof(align_w)));
  FK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_x, sizeof(align_x)));
  FK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_y, sizeof(align_y)));
  FK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_y, sizeof(align_y)));
  cublasLtMatmulHeuristicResult_t res[1];
  int found = 0;
  FK_LT(cublasLtMatmulAlgoGetHeuristic(st.lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, res, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) {
    fail("cuBLASLt found no algorithm for M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
  p.algo = res[0].algo;
  return plans.emplace(key, p).first->second;
}

void check_args(const void* y, const void* x, const void* w, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  if (!y || !x || !w) fail("null pointer");
  if (m < 0 || n <= 0 || k <= 0 || ldx < k || ldy < n) {
    fail("bad shape M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
}

}  // namespace

void gemm_cublaslt(void* y, int64_t ldy, const void* x, int64_t ldx, const void* w, const void* bias, int64_t m,
                   int64_t n, int64_t k, GemmDType dtype, cudaStream_t stream) {
  if (m == 0) return;
  check_args(y, x, w, m, n, k, ldx, ldy);
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceState& st = device_state();
  LtPlan& p = get_plan(st, dtype, m, n, k, ldx, ldy, bias != nullptr, bias, alignment_of(w), alignment_of(x), alignment_of(y));
  if (bias) {
    FK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.f, beta = 0.f;
  FK_LT(cublasLtMatmul(st.lt, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, st.workspace,
                       kWorkspaceBytes, stream));
}

void gemm_cublas_default(void* y, int64_t ldy, const void* x, int64_t ldx, const void* w, const void* bias,
                         int64_t m, int64_t n, int64_t k, GemmDType dtype, cudaStream_t stream) {
  if (m == 0) return;
  check_args(y, x, w, m, n, k, ldx, ldy);
  if (bias) {  // torch addmm with a 1-D bias: cuBLASLt with the bias epilogue
    gemm_cublaslt(y, ldy, x, ldx, w, bias, m, n, k, dtype, stream);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceState& st = device_state();
  FK_LT(cublasSetStream(st.blas, stream));
  const cudaDataType_t t = cuda_type(dtype);
  const float alpha = 1.f, beta = 0.f;
  FK_LT(cublasGemmEx(st.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                     &alpha, w, t, static_cast<int>(k), x, t, static_cast<int>(ldx), &beta, y, t,
                     static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_f32_out(float* c, int64_t ldc, const void* x, int64_t ldx, const void* w, int64_t m, int64_t n, int64_t k,
                  GemmDType dtype, cudaStream_t stream) {
  if (m == 0) return;
  check_args(c, x, w, m, n, k, ldx, ldc);
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceState& st = device_state();
  FK_LT(cublasSetStream(st.blas, stream));
  const cudaDataType_t t = cuda_type(dtype);
  const float alpha = 1.f, beta = 0.f;
  FK_LT(cublasGemmEx(st.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                     &alpha, w, t, static_cast<int>(k), x, t, static_cast<int>(ldx), &beta, c, CUDA_R_32F,
                     static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_strided_batched(void* c, int64_t ldc, int64_t stride_c, const void* a, int64_t lda, int64_t stride_a,
                          const void* w, int64_t ldw, int64_t stride_w, bool trans_b, int64_t batch, int64_t m, int64_t n,
                          int64_t k, GemmDType dtype, bool out_f32, cudaStream_t stream) {
  if (m == 0 || batch == 0) return;
  if (!c || !a || !w) fail("gemm_strided_batched: null pointer");
  if (n <= 0 || k <= 0 || lda < k || ldc < n || ldw < (trans_b ? k : n))
    fail("gemm_strided_batched: bad shape m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         " lda=" + std::to_string(lda) + " ldw=" + std::to_string(ldw) + " ldc=" + std::to_string(ldc));
  const int64_t kMax = std::numeric_limits<int>::max();
  if (m > kMax || n > kMax || k > kMax || lda > kMax || ldw > kMax || ldc > kMax || batch > kMax)
    fail("gemm_strided_batched: dimensions past the int range");
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceState& st = device_state();
  FK_LT(cublasSetStream(st.blas, stream));
  const cudaDataType_t t = cuda_type(dtype);
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: c^T [N, M] = op(w)^T [N, K] . a^T [K, M].
  FK_LT(cublasGemmStridedBatchedEx(st.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                                   static_cast<int>(m), static_cast<int>(k), &alpha, w, t, static_cast<int>(ldw), stride_w, a,
                                   t, static_cast<int>(lda), stride_a, &beta, c, out_f32 ? CUDA_R_32F : t,
                                   static_cast<int>(ldc), stride_c, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

namespace {
std::map<std::string, bool>& choices() {
  static std::map<std::string, bool> c;
  return c;
}
}  // namespace

bool choose_faster(const std::string& key, const std::function<void()>& a, const std::function<void()>& b,
                   cudaStream_t stream, bool fallback) {
  if (const char* force = std::getenv("FK_GEMM_FORCE"); force && *force) {  // Note [Forced GEMM dispatch]
    bool pick_a = true;
    try {
      pick_a = forced_choice(key, force);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    std::lock_guard<std::mutex> lock(g_mu);
    choices()[key] = pick_a;
    return pick_a;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = choices().find(key);
    if (it != choices().end()) return it->second;
  }
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  FK_RT(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone) return fallback;

  constexpr int kReps = 5;
  constexpr size_t kFlushBytes = 256ull << 20;
  void* flush = nullptr;
  FK_RT(cudaMallocAsync(&flush, kFlushBytes, stream));
  cudaEvent_t e0, e1;
  FK_RT(cudaEventCreate(&e0));
  FK_RT(cudaEventCreate(&e1));
  auto time_one = [&](const std::function<void()>& f) {
    f();  // warm-up (plan creation, module load)
    std::vector<float> ms;
    for (int r = 0; r < kReps; ++r) {
      FK_RT(cudaMemsetAsync(flush, r, kFlushBytes, stream));
      FK_RT(cudaEventRecord(e0, stream));
      f();
      FK_RT(cudaEventRecord(e1, stream));
      FK_RT(cudaEventSynchronize(e1));
      float t = 0;
      FK_RT(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[kReps / 2];
  };
  const float ta = time_one(a);
  const float tb = time_one(b);
  FK_RT(cudaEventDestroy(e0));
  FK_RT(cudaEventDestroy(e1));
  FK_RT(cudaFreeAsync(flush, stream));
  FK_RT(cudaStreamSynchronize(stream));
  const bool pick_a = ta <= tb;
  std::lock_guard<std::mutex> lock(g_mu);
  choices()[key] = pick_a;
  if (std::getenv("FK_GEMM_DISPATCH_VERBOSE")) {
    std::fprintf(stderr, "[fk gemm dispatch] %s: a %.4f ms, b %.4f ms -> %s\n", key.c_str(), ta, tb, pick_a ? "a" : "b");
  }
  return pick_a;
}

std::string gemm_dispatch_log() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::ostringstream os;
  for (const auto& [k, v] : choices()) os << k << "=" << (v ? "a" : "b") << "\n";
  return os.str();
}

}  // namespace fk::kernels
