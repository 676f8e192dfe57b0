// Out-of-line pieces of the vision towers' glue (fk/tasks/qwen2_vl.h).
#include "fk/kernels/common.cuh"
#include "fk/tasks/forward_context.h"

namespace fk::tasks {

namespace {
// One block per row: p = sum over the row's taps of w * table[idx] in fp32, in order, rounded to the
// model dtype, then h[r] = round(h[r] + p) (HF: the weighted sum of embedding rows cast to the hidden
// dtype, then added).
template <class T>
__global__ void add_weighted_rows_kernel(T* h, int64_t h_stride, const T* table, const int32_t* ptr, const int32_t* idx, const float* w,
                                         int64_t cols) {
  const int64_t r = blockIdx.x;
  const int32_t k0 = ptr[r], k1 = ptr[r + 1];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float p = 0.f;
    for (int32_t k = k0; k < k1; ++k) p += w[k] * fk::kernels::to_float(table[int64_t(idx[k]) * cols + c]);
    const float pr = fk::kernels::to_float(fk::kernels::from_float<T>(p));
    T* dst = h + r * h_stride + c;
    *dst = fk::kernels::from_float<T>(fk::kernels::to_float(*dst) + pr);
  }
}
}  // namespace

void add_weighted_rows_(Tensor& h, const Tensor& table, const Tensor& ptr, const Tensor& idx, const Tensor& w) {
  FK_CHECK(h.dim() == 2 && h.stride(1) == 1 && table.dim() == 2 && table.is_contiguous() && table.size(1) == h.size(1) &&
               table.dtype() == h.dtype(),
           "add_weighted_rows_: rows " + h.str() + " and table " + table.str() + " (same width and dtype)");
  FK_CHECK(ptr.dtype() == DType::kI32 && idx.dtype() == DType::kI32 && w.dtype() == DType::kF32 && ptr.dim() == 1 &&
               ptr.size(0) == h.size(0) + 1 && idx.dim() == 1 && idx.sizes() == w.sizes() && ptr.is_contiguous() && idx.is_contiguous() &&
               w.is_contiguous(),
           "add_weighted_rows_: taps " + ptr.str() + " / " + idx.str() + " / " + w.str() + " (i32 [rows + 1], i32 / f32 [nnz])");
  const int64_t n = h.size(0), cols = h.size(1);
  if (n == 0) return;
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(256, ((cols + 31) / 32) * 32));
  switch (h.dtype()) {
    case DType::kBF16:
      add_weighted_rows_kernel<bf16><<<n, threads, 0, current_stream()>>>(h.data<bf16>(), h.stride(0), table.data<bf16>(), ptr.data<int32_t>(),
                                                                          idx.data<int32_t>(), w.data<float>(), cols);
      break;
    case DType::kF16:
      add_weighted_rows_kernel<f16><<<n, threads, 0, current_stream()>>>(h.data<f16>(), h.stride(0), table.data<f16>(), ptr.data<int32_t>(),
                                                                         idx.data<int32_t>(), w.data<float>(), cols);
      break;
    case DType::kF32:
      add_weighted_rows_kernel<float><<<n, threads, 0, current_stream()>>>(h.data<float>(), h.stride(0), table.data<float>(),
                                                                           ptr.data<int32_t>(), idx.data<int32_t>(), w.data<float>(), cols);
      break;
    default: FK_CHECK(false, "add_weighted_rows_: unsupported dtype " + h.str());
  }
  FK_CHECK_LAUNCH();
}

}  // namespace fk::tasks
