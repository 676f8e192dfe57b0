// Out-of-line pieces of the composite-kind glue (fk/tasks/llama.h).
#include "fk/tasks/llama.h"

namespace fk::tasks {

namespace {
template <class T> __global__ void gather_rows_kernel(T* out, const T* in, int64_t in_stride, const int32_t* rows, int64_t cols) {
  const int64_t r = rows[blockIdx.x];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[blockIdx.x * cols + c] = in[r * in_stride + c];
}
template <class T, bool kAdd = false>
__global__ void scatter_rows_kernel(T* dst, int64_t dst_stride, const T* src, const int32_t* rows, int64_t cols) {
  const int64_t r = rows[blockIdx.x];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    if constexpr (kAdd) {
      T& d = dst[r * dst_stride + c];
      d = static_cast<T>(static_cast<float>(d) + static_cast<float>(src[blockIdx.x * cols + c]));
    } else {
      dst[r * dst_stride + c] = src[blockIdx.x * cols + c];
    }
  }
}
}  // namespace

namespace {
template <class T> __global__ void add_kernel(T* x, const T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = static_cast<T>(static_cast<float>(x[i]) + static_cast<float>(y[i]));
}
}  // namespace

void add_(Tensor& x, const Tensor& y) {
  FK_CHECK(x.sizes() == y.sizes() && x.dtype() == y.dtype() && x.is_contiguous() && y.is_contiguous(),
           "add_: " + x.str() + " += " + y.str() + " (same shape and dtype, contiguous)");
  const int64_t n = x.numel();
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
  switch (x.dtype()) {
    case DType::kBF16: add_kernel<bf16><<<blocks, 256, 0, current_stream()>>>(x.data<bf16>(), y.data<bf16>(), n); break;
    case DType::kF16: add_kernel<f16><<<blocks, 256, 0, current_stream()>>>(x.data<f16>(), y.data<f16>(), n); break;
    default: FK_CHECK(false, "add_: unsupported dtype " + x.str());
  }
  FK_CHECK_LAUNCH();
}

namespace {
__global__ void offset_kernel(int64_t* out, const int64_t* in, int64_t n, int64_t offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) out[i] = in[i] + offset;
}
}  // namespace

Tensor offset_positions(const Tensor& positions, int64_t offset) {
  if (offset == 0) return positions;
  FK_CHECK(positions.dtype() == DType::kI64 && positions.is_contiguous(), "offset_positions: contiguous i64 expected, got " + positions.str());
  Tensor out = empty(positions.sizes(), DType::kI64);
  const int64_t n = positions.numel();
  if (n == 0) return out;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
  offset_kernel<<<blocks, 256, 0, current_stream()>>>(out.data<int64_t>(), positions.data<int64_t>(), n, offset);
  FK_CHECK_LAUNCH();
  return out;
}

Tensor gather_rows(const Tensor& x, const Tensor& rows) {
  FK_CHECK(x.dim() == 2 && x.stride(1) == 1, "gather_rows: 2-D rows expected, got " + x.str());
  FK_CHECK(rows.dtype() == DType::kI32 && rows.dim() == 1, "gather_rows: i32 row indices expected, got " + rows.str());
  const int64_t n = rows.numel(), cols = x.size(1);
  Tensor out = empty({n, cols}, x.dtype());
  if (n == 0) return out;
  switch (x.dtype()) {
    case DType::kBF16:
      gather_rows_kernel<bf16><<<n, 256, 0, current_stream()>>>(out.data<bf16>(), x.data<bf16>(), x.stride(0), rows.data<int32_t>(), cols);
      break;
    case DType::kF16:
      gather_rows_kernel<f16><<<n, 256, 0, current_stream()>>>(out.data<f16>(), x.data<f16>(), x.stride(0), rows.data<int32_t>(), cols);
      break;
    case DType::kF32:
      gather_rows_kernel<float><<<n, 256, 0, current_stream()>>>(out.data<float>(), x.data<float>(), x.stride(0), rows.data<int32_t>(), cols);
      break;
    default: FK_CHECK(false, "gather_rows: unsupported dtype " + x.str());
  }
  FK_CHECK_LAUNCH();
  return out;
}

namespace {
template <bool kAdd> void scatter_rows_impl(Tensor& dst, const Tensor& rows, const Tensor& src, const char* what) {
  FK_CHECK(dst.dim() == 2 && dst.stride(1) == 1, std::string(what) + ": 2-D rows expected, got " + dst.str());
  FK_CHECK(rows.dtype() == DType::kI32 && rows.dim() == 1, std::string(what) + ": i32 row indices expected, got " + rows.str());
  FK_CHECK(src.dim() == 2 && src.is_contiguous() && src.size(0) == rows.numel() && src.size(1) == dst.size(1) &&
               src.dtype() == dst.dtype(),
           std::string(what) + ": " + src.str() + " into rows " + rows.str() + " of " + dst.str());
  const int64_t n = rows.numel(), cols = dst.size(1);
  if (n == 0) return;
  switch (dst.dtype()) {
    case DType::kBF16:
      scatter_rows_kernel<bf16, kAdd><<<n, 256, 0, current_stream()>>>(dst.data<bf16>(), dst.stride(0), src.data<bf16>(), rows.data<int32_t>(), cols);
      break;
    case DType::kF16:
      scatter_rows_kernel<f16, kAdd><<<n, 256, 0, current_stream()>>>(dst.data<f16>(), dst.stride(0), src.data<f16>(), rows.data<int32_t>(), cols);
      break;
    case DType::kF32:
      scatter_rows_kernel<float, kAdd><<<n, 256, 0, current_stream()>>>(dst.data<float>(), dst.stride(0), src.data<float>(), rows.data<int32_t>(),
                                                                         cols);
      break;
    default: FK_CHECK(false, std::string(what) + ": unsupported dtype " + dst.str());
  }
  FK_CHECK_LAUNCH();
}
}  // namespace

void scatter_rows_(Tensor& dst, const Tensor& rows, const Tensor& src) { scatter_rows_impl<false>(dst, rows, src, "scatter_rows_"); }
void scatter_add_rows_(Tensor& dst, const Tensor& rows, const Tensor& src) { scatter_rows_impl<true>(dst, rows, src, "scatter_add_rows_"); }

}  // namespace fk::tasks
