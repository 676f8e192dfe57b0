// VocabParallelEmbedding (tensor-parallel size 1): out[t, :] = weight[input_[t], :], specialised
// on the embedding dim. Token ids outside [0, num_embeddings) produce zero rows (vLLM masks ids
// outside the local shard the same way).
//
// scale != 0 (Gemma's scaled embedding): each element becomes x * scale computed in fp32 and
// rounded once; the caller passes the scale already rounded to T, as HF rounds embed_scale to
// the weight dtype (Gemma3TextScaledWordEmbedding, vLLM's normalizer buffer).
//
// Layout: one block per token; a thread copies kVecPerThread 16-byte vectors of the row, all
// loads issued before the stores (the id load is the only dependent step).
// Launch: H 4096 bf16 -> 128 threads x 4 vectors; 3584 -> 128 threads (112 busy) x 4; grid = T.
#pragma once

#include "fk/kernels/common.cuh"

namespace fk::kernels {

namespace detail {

template <int kHidden, class T> struct EmbeddingShape {
  static constexpr int kN = Vec16<T>::kN;
  static_assert(kHidden % kN == 0, "embedding dim must be a multiple of 16 bytes");
  static constexpr int kVecs = kHidden / kN;
  static constexpr int kVecPerThread = kVecs >= 4096 ? kVecs / 1024 + (kVecs % 1024 != 0) : (kVecs >= 128 ? 4 : 1);
  static constexpr int kThreads = ((kVecs + kVecPerThread - 1) / kVecPerThread + 31) / 32 * 32;
};

template <int kHidden, class T>
__global__ void __launch_bounds__(EmbeddingShape<kHidden, T>::kThreads)
embedding_kernel(T* __restrict__ out, int64_t out_stride, const int64_t* __restrict__ ids,
                 const T* __restrict__ weight, int64_t num_embeddings, float scale, int64_t vocab_start) {
  using S = EmbeddingShape<kHidden, T>;
  constexpr int kN = S::kN;
  const int64_t tok = blockIdx.x;
  const int64_t id = __ldg(ids + tok) - vocab_start;
  const bool valid = id >= 0 && id < num_embeddings;
  const T* src = weight + (valid ? id : 0) * static_cast<int64_t>(kHidden);
  Vec16<T> v[S::kVecPerThread];
#pragma unroll
  for (int i = 0; i < S::kVecPerThread; ++i) {
    const int vi = threadIdx.x + i * S::kThreads;
    if (vi < S::kVecs) {
      if (valid) {
        v[i] = load16(src + vi * kN);
        if (scale != 0.f) {
#pragma unroll
          for (int j = 0; j < kN; ++j) v[i].v[j] = from_float<T>(to_float(v[i].v[j]) * scale);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kN; ++j) v[i].v[j] = from_float<T>(0.f);
      }
    }
  }
  T* dst = out + tok * out_stride;
#pragma unroll
  for (int i = 0; i < S::kVecPerThread; ++i) {
    const int vi = threadIdx.x + i * S::kThreads;
    if (vi < S::kVecs) store16(dst + vi * kN, v[i]);
  }
}

}  // namespace detail

/// out [T, H] (row stride out_stride, elements) = weight[ids[t] - vocab_start] for weight
/// [num_embeddings, H], times `scale` when it is not 0; ids outside [vocab_start, vocab_start +
/// num_embeddings) give zero rows (a tensor-parallel rank's shard of the vocabulary, as vLLM masks).
template <int kHidden, class T>
void vocab_parallel_embedding(T* out, int64_t out_stride, const int64_t* ids, const T* weight, int64_t num_embeddings,
                              int64_t num_tokens, cudaStream_t stream, float scale = 0.f, int64_t vocab_start = 0) {
  if (num_tokens == 0) return;
  detail::embedding_kernel<kHidden, T>
      <<<static_cast<unsigned>(num_tokens), detail::EmbeddingShape<kHidden, T>::kThreads, 0, stream>>>(
          out, out_stride, ids, weight, num_embeddings, scale, vocab_start);
}

}  // namespace fk::kernels
