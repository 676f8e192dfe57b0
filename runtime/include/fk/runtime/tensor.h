// The runtime's tensor view: what `torch.Tensor` is in the production signatures the tasks
// mirror. Device memory only; shape + strides (elements); storage shared by views.
// Allocation goes through a caching allocator bound to the current stream (like PyTorch's: in
// steady state it adds no GPU work), so `forward` may allocate its outputs as production does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace fk {

using bf16 = __nv_bfloat16;
using f16 = __half;

enum class DType : uint8_t { kBF16, kF16, kF32, kI32, kI64, kU8 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);  ///< "bf16", "f16", "f32", "i32", "i64", "u8"

template <class T> struct DTypeOf;
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;

using Shape = std::vector<int64_t>;

/// A strided view of device memory. Default-constructed = undefined (like `None`).
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<void> storage, void* data, DType dtype, Shape shape, Shape strides);

  /// Non-owning view over memory that outlives the tensor.
  static Tensor from_blob(void* data, DType dtype, Shape shape);

  bool defined() const { return data_ != nullptr || (!shape_.empty() && numel() == 0); }
  DType dtype() const { return dtype_; }
  const Shape& sizes() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;    ///< negative d counts from the back
  int64_t stride(int d) const;  ///< in elements
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* data_ptr() const { return data_; }
  template <class T> T* data() const;

  /// Same storage, new shape (contiguous tensors only; one -1 is inferred).
  Tensor view(Shape shape) const;
  /// Columns [start, start+len) of the last dimension (a strided view, like torch's split).
  Tensor narrow_last(int64_t start, int64_t len) const;
  /// Rows [start, start+len) of the first dimension (a contiguous tensor stays contiguous).
  Tensor narrow_first(int64_t start, int64_t len) const;
  /// A view with the given sizes and strides (elements; 0 broadcasts) starting `offset` elements
  /// past this view's first element, like torch.as_strided; it must stay inside the storage this
  /// view spans (checked against the furthest element this view reaches).
  Tensor as_strided(Shape shape, Shape strides, int64_t offset = 0) const;

  std::string str() const;  ///< e.g. "bf16[4096, 4096]"
  /// The owner of the memory (shared by views; empty for from_blob views).
  const std::shared_ptr<void>& storage() const { return storage_; }

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
};

/// Stream that tasks run on (the runner sets it; mirrors torch.cuda.current_stream()).
cudaStream_t current_stream();
void set_current_stream(cudaStream_t s);

/// RAII: make `s` the current stream for this scope.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t s) : prev_(current_stream()) { set_current_stream(s); }
  ~StreamGuard() { set_current_stream(prev_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t prev_;
};

/// Uninitialised device tensor for use on the current stream (caching allocator, Note [Caching allocator]).
Tensor empty(Shape shape, DType dtype);
/// Frees every cached block (synchronises the device); the runner calls it between cases.
void release_cached_memory();
/// cudaMallocAsync of a small scratch buffer (the checks' counters); when the device is full, the
/// caching allocator's unused blocks are released and the allocation tried once more (the caching
/// allocator may hold nearly all memory after a whole model: session 22's 64-layer case failed on an
/// 8-byte counter with 78.5 of 79.2 GiB reserved). Free it with cudaFreeAsync.
void* malloc_async_scratch(size_t bytes, cudaStream_t s);
/// Bytes the caching allocator holds from cudaMalloc now, and the most it has held.
size_t allocator_reserved_bytes();
size_t allocator_peak_reserved_bytes();
inline Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.dtype()); }

/// Copies (device to device, current stream); shapes and dtypes must match, both contiguous.
void copy_(Tensor& dst, const Tensor& src);
/// dst[i] = src[i] for views of up to 4 dimensions with any strides (src strides may be 0:
/// broadcast), same sizes and dtype; one kernel on the current stream. dst must not overlap src.
void copy_strided_(const Tensor& dst, const Tensor& src);

/// Host <-> device helpers (synchronous with respect to the current stream).
template <class T> Tensor to_device(const std::vector<T>& host, Shape shape);
template <class T> std::vector<T> to_host(const Tensor& t);

}  // namespace fk

#include "fk/runtime/tensor_inl.h"
