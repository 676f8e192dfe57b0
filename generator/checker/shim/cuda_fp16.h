// fastkernels check shim for <cuda_fp16.h>: __half as an opaque 16-bit struct with the
// conversions fk's headers use (see fk_checker_cuda_shim.h).
#pragma once
#include "fk_checker_cuda_shim.h"
struct __half {
  unsigned short __x;
  __half() = default;
  __host__ __device__ __half(float);
  __host__ __device__ operator float() const;
};
struct __half2 { __half x, y; };
typedef __half half;
__host__ __device__ float __half2float(__half);
__host__ __device__ __half __float2half(float);
__host__ __device__ __half __float2half_rn(float);
__host__ __device__ __half2 __floats2half2_rn(float, float);
__host__ __device__ float2 __half22float2(__half2);
__host__ __device__ __half __ushort_as_half(unsigned short);
__host__ __device__ unsigned short __half_as_ushort(__half);
