// Comparing an output with its fp32 reference (see Tolerance in task.h).
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "fk/runtime/task.h"

namespace fk {

struct CompareResult {
  bool passed = false;
  int64_t numel = 0;
  int64_t mismatches = 0;  ///< elements outside atol + rtol*|expected|
  int64_t nonfinite = 0;   ///< NaN/Inf in actual (never pass)
  double max_abs_err = 0;
  double rel_l2 = 0;        ///< ||a - e|| / ||e||
  int64_t first_bad = -1;   ///< flat index of the first failing element
  std::string summary() const;
};

/// Inspects device memory without allocating (so it can run while another stream is held
/// back: a stream-ordered allocation may wait for the whole device). Each call runs on `s`
/// and synchronises it.
class ByteProbe {
 public:
  ByteProbe();
  ~ByteProbe();
  ByteProbe(const ByteProbe&) = delete;
  ByteProbe& operator=(const ByteProbe&) = delete;
  /// Order-sensitive 64-bit hash of the bytes [p, p + n).
  uint64_t hash(const void* p, size_t n, cudaStream_t s);
  /// Number of bytes in [p, p + n) that differ from `value`.
  int64_t count_not(const void* p, size_t n, uint8_t value, cudaStream_t s);

 private:
  uint64_t read(cudaStream_t s);
  unsigned long long* dev_ = nullptr;
  unsigned long long* host_ = nullptr;
};

/// A gate that holds back a stream (Note [Stream gate] in runner.cc): close(s) puts a kernel on
/// `s` that waits until open() is called from the host (or, so nothing can hang, until
/// `max_seconds` of GPU time have passed); work enqueued on `s` after close() waits behind it.
class StreamGate {
 public:
  StreamGate();
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void close(cudaStream_t s, double max_seconds = 10.0);
  void open();

 private:
  volatile int* host_flag_ = nullptr;
  int* dev_flag_ = nullptr;
};

/// Compares on the device; `actual` may be bf16/f16/f32/i32/i64, `expected` f32 (or the same
/// integer dtype), same shape. Synchronises the current stream.
CompareResult compare(const Tensor& actual, const Tensor& expected, const Tolerance& tol);

/// Number of elements of `t` (contiguous) whose bytes differ from those of its first element:
/// 0 for a constant tensor (all zeros, all one value). Synchronises the current stream.
int64_t count_unlike_first(const Tensor& t);

}  // namespace fk
