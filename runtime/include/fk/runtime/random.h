// Seeded, counter-based random fills on the device (same seed -> same bytes, any GPU).
#pragma once

#include <cstdint>

#include "fk/runtime/tensor.h"

namespace fk {

/// Normal(mean, std) in any float dtype (contiguous or strided 2-D views).
void fill_normal(Tensor& t, uint64_t seed, float mean = 0.f, float std = 1.f);
/// Uniform[lo, hi) in any float dtype.
void fill_uniform(Tensor& t, uint64_t seed, float lo, float hi);
/// Uniform integers in [lo, hi) for i32/i64 tensors.
void fill_randint(Tensor& t, uint64_t seed, int64_t lo, int64_t hi);
/// 0xFF in every byte: NaN for float dtypes, -1 for integers.
void poison(Tensor& t);
/// Order-sensitive 64-bit fingerprint of the bytes (detects mutation of inputs).
uint64_t fingerprint(const Tensor& t);
/// The same sum for raw bytes, added on `s` into a device counter the caller zeroed (no
/// allocation); the fingerprint is the counter's value ^ nbytes.
void fingerprint_bytes_async(const void* p, int64_t nbytes, unsigned long long* acc, cudaStream_t s);

/// Host-side helper: derive independent seeds for (seed, stream index).
inline uint64_t mix_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace fk
