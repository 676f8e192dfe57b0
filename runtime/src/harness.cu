// Helpers shared by the task harnesses (fk/tasks/harness.h).
#include <cmath>

#include "fk/kernels/common.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

namespace {
template <class T> __global__ void to_f32_kernel(const T* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = fk::kernels::to_float(in[i]);
}
}  // namespace

void require_device_memory(double bytes, const std::string& what) {
  size_t free_b = 0, total_b = 0;
  FK_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const double spare = 2.0 * (1ull << 30);
  if (bytes + spare > static_cast<double>(free_b)) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s need %.2f GiB, %.2f GiB free", what.c_str(), bytes / double(1ull << 30),
             free_b / double(1ull << 30));
    throw SkipCase(buf);
  }
}

Tensor to_f32(const Tensor& t) {
  FK_CHECK(t.is_contiguous(), "to_f32 needs a contiguous tensor, got " + t.str());
  Tensor out = empty(t.sizes(), DType::kF32);
  const int64_t n = t.numel();
  if (n == 0) return out;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  switch (t.dtype()) {
    case DType::kBF16: to_f32_kernel<<<grid, 256, 0, current_stream()>>>(t.data<bf16>(), out.data<float>(), n); break;
    case DType::kF16: to_f32_kernel<<<grid, 256, 0, current_stream()>>>(t.data<f16>(), out.data<float>(), n); break;
    case DType::kF32: copy_(out, t); return out;
    default: FK_CHECK(false, "to_f32: unsupported dtype " + t.str());
  }
  FK_CHECK_LAUNCH();
  return out;
}

Tolerance matmul_tolerance(DType d, double typical_abs) {
  // Products accumulated in fp32 and rounded once to the model dtype: each output carries at most
  // ~1 ulp of rounding plus accumulation-order differences; near-zero outputs are judged against
  // the typical output magnitude, not their own.
  switch (d) {
    case DType::kBF16: return {2e-2 * typical_abs, 2e-2, 1e-2};
    case DType::kF16: return {2e-3 * typical_abs, 2e-3, 2e-3};
    default: return {1e-4 * typical_abs, 1e-4, 1e-4};
  }
}

}  // namespace fk::tasks
