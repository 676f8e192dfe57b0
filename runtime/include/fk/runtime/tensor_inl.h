// Inline and template parts of tensor.h (kept apart so the declarations read cleanly).
#pragma once

#include "fk/runtime/cuda_check.h"

namespace fk {

template <class T> T* Tensor::data() const {
  FK_CHECK(dtype_of<T> == dtype_, "tensor " + str() + " accessed as " + dtype_name(dtype_of<T>));
  return static_cast<T*>(data_);
}

template <class T> Tensor to_device(const std::vector<T>& host, Shape shape) {
  Tensor t = empty(std::move(shape), dtype_of<T>);
  FK_CHECK(static_cast<size_t>(t.numel()) == host.size(), "to_device: host size does not match shape " + t.str());
  FK_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), host.data(), t.nbytes(), cudaMemcpyHostToDevice, current_stream()));
  FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  return t;
}

template <class T> std::vector<T> to_host(const Tensor& t) {
  FK_CHECK(t.is_contiguous(), "to_host needs a contiguous tensor, got " + t.str());
  std::vector<T> host(static_cast<size_t>(t.numel()));
  (void)t.data<T>();
  FK_CUDA_CHECK(cudaMemcpyAsync(host.data(), t.data_ptr(), t.nbytes(), cudaMemcpyDeviceToHost, current_stream()));
  FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  return host;
}

}  // namespace fk
