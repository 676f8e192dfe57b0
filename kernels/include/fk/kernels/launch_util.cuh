// Host helpers for sizing grids of the memory-bound kernels: the SM count of the current
// device and how many blocks of a kernel fit on the whole GPU at once (both cached).
#pragma once

#include <cuda_runtime.h>

namespace fk::kernels {

/// Streaming multiprocessors of the current device (132 on H100 SXM); queried once.
inline int sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return sms > 0 ? sms : 132;
  }();
  return n;
}

/// Blocks of kKernel (launched with `threads` threads, no dynamic shared memory) resident on
/// the whole GPU at once; queried once per kernel instantiation.
template <auto kKernel> int resident_blocks(int threads) {
  static const int n = [threads] {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, 0) != cudaSuccess || per_sm < 1)
      per_sm = 1;
    return per_sm * sm_count();
  }();
  return n;
}

}  // namespace fk::kernels
