// GEMM for the linear task kinds: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]), 16-bit in/out,
// fp32 accumulation, W in torch layout ([out_features, in_features], row-major).
//
// Plain C++ (no fk runtime types, no CUDA device code): raw device pointers and a stream, so
// any task or benchmark can call it. Implemented in kernels/src/gemm_cublaslt.cu.
//
//   gemm_cublaslt        cuBLASLt with a plan cached per (device, dtype, M, N, K, ld, bias):
//                        matmul descriptor, layouts, the heuristic's first algorithm and a
//                        32 MiB workspace per device. Bias is fused (CUBLASLT_EPILOGUE_BIAS).
//   gemm_cublas_default  the production peer, what torch.nn.functional.linear runs: without
//                        bias cublasGemmEx (CUBLAS_GEMM_DEFAULT, fp32 compute); with bias
//                        cuBLASLt + bias epilogue (torch's addmm -> gemm_and_bias path).
//   choose_faster        one-time measured choice between two callables (see Note [GEMM dispatch]).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace fk::kernels {

enum class GemmDType { kBF16, kF16 };

/// y = x W^T (+ bias). Row strides ldx, ldy in elements (>= K, >= N). bias may be null.
void gemm_cublaslt(void* y, int64_t ldy, const void* x, int64_t ldx, const void* w, const void* bias, int64_t m,
                   int64_t n, int64_t k, GemmDType dtype, cudaStream_t stream);

/// The production peer (torch F.linear): cublasGemmEx without bias, cuBLASLt+bias epilogue with.
void gemm_cublas_default(void* y, int64_t ldy, const void* x, int64_t ldx, const void* w, const void* bias,
                         int64_t m, int64_t n, int64_t k, GemmDType dtype, cudaStream_t stream);

/// c (fp32, row stride ldc) = x W^T with fp32 accumulation and an fp32 result (cublasGemmEx,
/// CUDA_R_32F output): for references of composite tasks, which round to the model dtype
/// themselves. No bias (the reference adds it in fp32).
void gemm_f32_out(float* c, int64_t ldc, const void* x, int64_t ldx, const void* w, int64_t m, int64_t n, int64_t k,
                  GemmDType dtype, cudaStream_t stream);

/// Batched GEMM with torch.bmm's semantics, row-major: for b < batch,
///   c[b] [M, N] = a[b] [M, K] @ (trans_b ? w[b]^T, w[b] [N, K] : w[b] [K, N]),
/// fp32 accumulation (cublasGemmStridedBatchedEx, CUBLAS_GEMM_DEFAULT: what torch.bmm runs).
/// Leading dimensions (row strides) and batch strides in elements; a, w and c may be strided
/// views of larger tensors (MLA: per-head slices of q and of kv_b_proj's weight). out_f32: c is
/// fp32 (the composite references), else the 16-bit dtype.
void gemm_strided_batched(void* c, int64_t ldc, int64_t stride_c, const void* a, int64_t lda, int64_t stride_a,
                          const void* w, int64_t ldw, int64_t stride_w, bool trans_b, int64_t batch, int64_t m, int64_t n,
                          int64_t k, GemmDType dtype, bool out_f32, cudaStream_t stream);

// Note [GEMM dispatch]
// For small M the specialised GEMV (gemv.cuh) usually beats cuBLAS, but not at every shape.
// The linear forward glue therefore asks, once per (key, M), which of two launchers is faster:
// choose_faster times each (after one warm-up call) kReps times with CUDA events on `stream`,
// each call preceded by a 256 MiB L2-flushing memset, compares the medians and caches the
// answer under `key` for the life of the process. While `stream` is being captured into a
// CUDA graph nothing can be timed: it returns `fallback` without caching.
// Returns true when `a` is (or is assumed) faster.
bool choose_faster(const std::string& key, const std::function<void()>& a, const std::function<void()>& b,
                   cudaStream_t stream, bool fallback = true);

// Note [Forced GEMM dispatch]
// FK_GEMM_FORCE=gemv|cublaslt|cublas replaces every measured choice by a fixed one, so that a result can be
// reproduced with each GEMM path in turn (a test that fails only after other tests in the same process, where
// the one-time measurement may have chosen differently, is rerun under each value). A choice's key ends with
// its two options, "<shape> a|b"; "library" stands for either library path. The forced value picks the option
// it names (gemv: the GEMV over "library"; cublaslt / cublas: "library" over the GEMV, then that library);
// where it names neither, the first option. Unset or empty: measured (the default).

/// The forced outcome of choose_faster for `key` under FK_GEMM_FORCE = `force`: true picks the key's first option.
/// Throws std::invalid_argument naming the variable for any other value than gemv, cublaslt or cublas.
inline bool forced_choice(const std::string& key, const std::string& force) {
  if (force != "gemv" && force != "cublaslt" && force != "cublas") {
    throw std::invalid_argument("FK_GEMM_FORCE='" + force + "': expected gemv, cublaslt or cublas (or unset)");
  }
  const size_t sp = key.rfind(' '), bar = key.rfind('|');
  if (sp == std::string::npos || bar == std::string::npos || bar < sp) return true;
  auto names = [&](const std::string& option) { return option == force || (option == "library" && force != "gemv"); };
  const std::string a = key.substr(sp + 1, bar - sp - 1), b = key.substr(bar + 1);
  return names(a) || !names(b);
}

/// The cached choices so far, "key=a|b" lines (for logs).
std::string gemm_dispatch_log();

}  // namespace fk::kernels
