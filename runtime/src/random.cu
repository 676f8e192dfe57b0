// Counter-based random fills (a splitmix64 hash of (seed, element index)), poisoning, and
// input fingerprints. Same seed -> same values on any GPU and any launch configuration.
#include <cmath>

#include "fk/kernels/common.cuh"
#include "fk/runtime/random.h"

namespace fk {

namespace {

__device__ __forceinline__ uint64_t hash64(uint64_t seed, uint64_t i) {
  uint64_t z = seed ^ (i * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ float u01(uint64_t h) { return ((h >> 40) + 0.5f) * (1.0f / 16777216.0f); }

// Element i of a tensor with up to kMaxFillDims dims and arbitrary strides -> offset in elements
// (5-D: a Conv3d weight [out, C, T, P, P]).
constexpr int kMaxFillDims = 8;
struct IndexND {
  int64_t size[kMaxFillDims];
  int64_t stride[kMaxFillDims];
  int nd;
  __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      off += (i % size[d]) * stride[d];
      i /= size[d];
    }
    return off;
  }
};

IndexND make_index(const Tensor& t) {
  FK_CHECK(t.dim() <= kMaxFillDims, "random fills support up to " + std::to_string(kMaxFillDims) + " dims, got " + t.str());
  IndexND ix{};
  ix.nd = t.dim();
  for (int d = 0; d < t.dim(); ++d) {
    ix.size[d] = t.size(d);
    ix.stride[d] = t.stride(d);
  }
  return ix;
}

enum class Dist { kNormal, kUniform };

template <class T>
__global__ void fill_kernel(T* p, IndexND ix, int64_t n, uint64_t seed, Dist dist, float a, float b) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = hash64(seed, i);
    float v;
    if (dist == Dist::kNormal) {
      const float u1 = u01(h), u2 = u01(hash64(seed ^ 0x5851F42D4C957F2Dull, i));
      v = a + b * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    } else {
      v = a + (b - a) * u01(h);
    }
    p[ix.offset(i)] = fk::kernels::from_float<T>(v);
  }
}

template <class T>
__global__ void randint_kernel(T* p, IndexND ix, int64_t n, uint64_t seed, int64_t lo, uint64_t span) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[ix.offset(i)] = static_cast<T>(lo + static_cast<int64_t>(hash64(seed, i) % span));
}

// Sum over 8-byte words of hash(word, index) (bytes, where the start is not 8-byte aligned, and
// the tail): order-sensitive, and memory-bound, so the runner can afford it around every timed
// call (Note [Timed calls are checked] in runner.cc).
__global__ void fingerprint_kernel(const uint8_t* p, int64_t nbytes, unsigned long long* out) {
  unsigned long long acc = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0) {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
    const int64_t words = nbytes >> 3;
    for (int64_t i = tid; i < words; i += stride) acc += hash64(w[i] ^ 0x5851F42D4C957F2Dull, static_cast<uint64_t>(i));
    done = words << 3;
  }
  for (int64_t i = done + tid; i < nbytes; i += stride) acc += hash64(p[i] + 1, static_cast<uint64_t>(i) | (1ull << 63));
  acc += __shfl_xor_sync(0xffffffffu, acc, 16);
  acc += __shfl_xor_sync(0xffffffffu, acc, 8);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <class F> void dispatch_float(const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::kBF16: f(static_cast<bf16*>(t.data_ptr())); break;
    case DType::kF16: f(static_cast<f16*>(t.data_ptr())); break;
    case DType::kF32: f(static_cast<float*>(t.data_ptr())); break;
    default: FK_CHECK(false, std::string("float fill on ") + t.str());
  }
}

void fill(Tensor& t, uint64_t seed, Dist dist, float a, float b) {
  const int64_t n = t.numel();
  if (n == 0) return;
  IndexND ix = make_index(t);
  dispatch_float(t, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    fill_kernel<T><<<grid_for(n), 256, 0, current_stream()>>>(p, ix, n, seed, dist, a, b);
  });
  FK_CHECK_LAUNCH();
}

}  // namespace

void fill_normal(Tensor& t, uint64_t seed, float mean, float std) { fill(t, seed, Dist::kNormal, mean, std); }
void fill_uniform(Tensor& t, uint64_t seed, float lo, float hi) { fill(t, seed, Dist::kUniform, lo, hi); }

void fill_randint(Tensor& t, uint64_t seed, int64_t lo, int64_t hi) {
  FK_CHECK(hi > lo, "fill_randint: empty range");
  const int64_t n = t.numel();
  if (n == 0) return;
  IndexND ix = make_index(t);
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  if (t.dtype() == DType::kI32) {
    randint_kernel<int32_t><<<grid_for(n), 256, 0, current_stream()>>>(t.data<int32_t>(), ix, n, seed, lo, span);
  } else {
    randint_kernel<int64_t><<<grid_for(n), 256, 0, current_stream()>>>(t.data<int64_t>(), ix, n, seed, lo, span);
  }
  FK_CHECK_LAUNCH();
}

void poison(Tensor& t) {
  if (t.numel() == 0) return;
  FK_CHECK(t.is_contiguous(), "poison needs a contiguous tensor, got " + t.str());
  FK_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0xFF, t.nbytes(), current_stream()));
}

void fingerprint_bytes_async(const void* p, int64_t nbytes, unsigned long long* acc, cudaStream_t s) {
  if (nbytes <= 0) return;
  fingerprint_kernel<<<grid_for(nbytes), 256, 0, s>>>(static_cast<const uint8_t*>(p), nbytes, acc);
  FK_CHECK_LAUNCH();
}

uint64_t fingerprint(const Tensor& t) {
  FK_CHECK(t.is_contiguous(), "fingerprint needs a contiguous tensor, got " + t.str());
  const int64_t nbytes = static_cast<int64_t>(t.nbytes());
  unsigned long long* d = nullptr;
  cudaStream_t s = current_stream();
  d = static_cast<unsigned long long*>(malloc_async_scratch(sizeof(*d), s));
  FK_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(*d), s));
  fingerprint_bytes_async(t.data_ptr(), nbytes, d, s);
  unsigned long long h = 0;
  FK_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
  FK_CUDA_CHECK(cudaFreeAsync(d, s));
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  return h ^ static_cast<uint64_t>(nbytes);
}

}  // namespace fk
