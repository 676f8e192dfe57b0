// Logit soft-capping in place (Gemma 2's final_logit_softcapping; vLLM's LogitsProcessor
// soft_cap): x = cap * tanh(x / cap), in fp32, rounded once to the model dtype. And scaling in
// place (x = s * x: Granite's residual_multiplier and logits_scaling), the same way.
//
// Layout: elementwise over a contiguous buffer, 16-byte vectors, grid-stride; the tail that is
// not a whole vector is done element by element by the first threads.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

/// x[i] = op(x[i]) in fp32, rounded once; 16-byte vectors, grid-stride, the tail element by element.
template <class T, class Op> __global__ void __launch_bounds__(256) map_inplace_kernel(T* __restrict__ x, int64_t n, Op op) {
  constexpr int kN = Vec16<T>::kN;
  const int64_t vecs = n / kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < vecs; i += stride) {
    Vec16<T> v = load16(x + i * kN);
#pragma unroll
    for (int j = 0; j < kN; ++j) v.v[j] = from_float<T>(op(to_float(v.v[j])));
    store16(x + i * kN, v);
  }
  const int64_t tail = vecs * kN + first;
  if (tail < n) x[tail] = from_float<T>(op(to_float(x[tail])));
}

template <class T, class Op> void map_inplace(T* x, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kN = Vec16<T>::kN;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(n / kN, 256), 132 * 8));
  map_inplace_kernel<T, Op><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, n, op);
}

struct SoftcapOp {
  float cap, inv;
  __device__ float operator()(float v) const { return cap * tanhf(v * inv); }
};
struct ScaleOp {
  float s;
  __device__ float operator()(float v) const { return s * v; }
};

}  // namespace detail

/// x[i] = s * x[i] for i < n (fp32 product, rounded once); x contiguous and 16-byte aligned.
template <class T> void scale_inplace(T* x, int64_t n, float s, cudaStream_t stream) {
  detail::map_inplace<T>(x, n, detail::ScaleOp{s}, stream);
}

/// x[i] = cap * tanh(x[i] / cap) for i < n; x contiguous and 16-byte aligned; cap > 0.
template <class T> void logit_softcap(T* x, int64_t n, float cap, cudaStream_t stream) {
  detail::map_inplace<T>(x, n, detail::SoftcapOp{cap, 1.f / cap}, stream);
}

}  // namespace fk::kernels
