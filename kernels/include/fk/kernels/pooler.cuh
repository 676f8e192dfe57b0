// Embedding poolers and the row L2 normalisation of embedding models, specialised on the hidden
// size: vLLM's pooling layers (vllm/model_executor/layers/pooler.py: CLS, mean and last-token
// pooling over each sequence of a packed variable-length batch, then normalisation where the
// model asks for it) and torch.nn.functional.normalize(x, p=2, dim=-1) on token vectors
// (ColBERT's multi-vector output). Sums and norms in fp32, rounded once to the model dtype.
//
// Note [Pooler kernel]
// One block per sequence. Mean pooling splits the sequence's rows between kGroups row groups of
// kVecs threads (one 16-byte vector of columns each), every thread summing its column vector over
// its rows with kUnroll independent loads in flight; the groups' partial sums meet in shared
// memory. CLS and last-token pooling read one row. With normalisation the block then sums the
// squares of the pooled row (one block reduction) and scales it by 1 / max(||v||, 1e-12), as
// F.normalize. The row L2 normalisation is the same row-in-registers layout as RMSNorm's (one
// block per row, Note [LayerNorm kernel]).
//
// Note [Token heads]
// The per-token heads of multi-vector and sparse embedding models: vLLM's token_classify pooler
// with a classifier of a few labels (BGE-M3's sparse_linear: Linear(hidden, 1) then ReLU, the
// lexical weight of each token) is token_classify below: one warp per row, each lane a strided
// set of 16-byte column vectors of the row and of every label's weight row, fp32 dot products,
// a warp reduction per label, bias and activation in fp32, rounded once to the model dtype.
// The heads drop special tokens as vLLM's BOSEOSFilter does (BGE-M3's multi-vector output skips
// each sequence's first token, its sparse weights the first and the last):
// drop_sequence_ends packs the kept rows of a packed batch (a sequence shorter than first + last
// keeps nothing, as Python's h[1:-1] of it); the caller sizes the output from the lengths it
// holds on the host (vLLM's PoolingMetadata.prompt_lens).
#pragma once

#include "fk/kernels/common.cuh"
#include "fk/kernels/rms_norm.cuh"

namespace fk::kernels {

enum class Pool { kCls, kMean, kLast };
/// The activation of a token classifier head (vLLM's pooler act_fn): none, ReLU (BGE-M3's sparse
/// weights), sigmoid.
enum class HeadAct { kNone, kRelu, kSigmoid };

namespace detail {

template <int kHidden, class T> struct PoolShape {
  static constexpr int kN = Vec16<T>::kN;
  static_assert(kHidden % kN == 0, "hidden size must be a multiple of 16 bytes");
  static constexpr int kVecs = kHidden / kN;
  static constexpr int kThreads = 256;
  static constexpr int kVecPerThread = (kVecs + kThreads - 1) / kThreads;  ///< > 1 only for hidden > 2048 (bf16)
  static constexpr int kGroups = kVecs >= kThreads ? 1 : kThreads / kVecs;  ///< row groups (mean pooling)
};

template <int kHidden, class T, Pool kPool, bool kNormalize>
__global__ void __launch_bounds__(256)
pool_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t x_stride, const int32_t* __restrict__ cu_seqlens) {
  using S = PoolShape<kHidden, T>;
  constexpr int kN = S::kN, kV = S::kVecPerThread, kG = S::kGroups;
  __shared__ float partial[kG > 1 ? kG * kHidden : 1];
  __shared__ float scratch[32];
  const int seq = blockIdx.x;
  const int64_t begin = cu_seqlens[seq], end = cu_seqlens[seq + 1];
  float acc[kV][kN];
#pragma unroll
  for (int i = 0; i < kV; ++i)
#pragma unroll
    for (int j = 0; j < kN; ++j) acc[i][j] = 0.f;
  const int group = kG > 1 ? threadIdx.x / S::kVecs : 0;
  const int lane = kG > 1 ? threadIdx.x % S::kVecs : threadIdx.x;
  const bool active = kG > 1 ? group < kG : true;
  if constexpr (kPool == Pool::kMean) {
    if (active) {
      constexpr int kUnroll = 4;
      int64_t r = begin + group;
      for (; r + (kUnroll - 1) * kG < end; r += kUnroll * kG) {
        Vec16<T> v[kUnroll][kV];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int i = 0; i < kV; ++i) {
            const int vi = lane + i * S::kThreads;
            if (vi < S::kVecs) v[u][i] = load16_stream(x + (r + u * kG) * x_stride + vi * kN);
          }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int i = 0; i < kV; ++i)
            if (lane + i * S::kThreads < S::kVecs)
#pragma unroll
              for (int j = 0; j < kN; ++j) acc[i][j] += to_float(v[u][i].v[j]);
      }
      for (; r < end; r += kG)
#pragma unroll
        for (int i = 0; i < kV; ++i) {
          const int vi = lane + i * S::kThreads;
          if (vi < S::kVecs) {
            const Vec16<T> v = load16_stream(x + r * x_stride + vi * kN);
#pragma unroll
            for (int j = 0; j < kN; ++j) acc[i][j] += to_float(v.v[j]);
          }
        }
    }
    if constexpr (kG > 1) {  // the groups' partial sums meet in shared memory; group 0 finishes
      if (active)
#pragma unroll
        for (int j = 0; j < kN; ++j) partial[group * kHidden + lane * kN + j] = acc[0][j];
      __syncthreads();
      if (group == 0)
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          float s = 0.f;
          for (int g = 0; g < kG; ++g) s += partial[g * kHidden + lane * kN + j];
          acc[0][j] = s;
        }
    }
    const float inv = end > begin ? 1.f / static_cast<float>(end - begin) : 0.f;
#pragma unroll
    for (int i = 0; i < kV; ++i)
#pragma unroll
      for (int j = 0; j < kN; ++j) acc[i][j] *= inv;
  } else if (group == 0) {  // CLS: the first row; last: the last row
    const int64_t r = kPool == Pool::kCls ? begin : end - 1;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int vi = lane + i * S::kThreads;
      if (vi < S::kVecs && end > begin) {
        const Vec16<T> v = load16_stream(x + r * x_stride + vi * kN);
#pragma unroll
        for (int j = 0; j < kN; ++j) acc[i][j] = to_float(v.v[j]);
      }
    }
  }
  const bool owner = group == 0 && (kG > 1 ? lane < S::kVecs : true);
  float scale = 1.f;
  if constexpr (kNormalize) {
    float sq = 0.f;
    if (owner)
#pragma unroll
      for (int i = 0; i < kV; ++i)
        if (lane + i * S::kThreads < S::kVecs)
#pragma unroll
          for (int j = 0; j < kN; ++j) sq += acc[i][j] * acc[i][j];
    scale = 1.f / fmaxf(sqrtf(block_sum<S::kThreads>(sq, scratch)), 1e-12f);
  }
  if (!owner) return;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = lane + i * S::kThreads;
    if (vi < S::kVecs) {
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) o.v[j] = from_float<T>(acc[i][j] * scale);
      store16(out + static_cast<int64_t>(seq) * kHidden + vi * kN, o);
    }
  }
}

template <int kHidden, class T>
__global__ void __launch_bounds__(RmsNormShape<kHidden, T>::kThreads)
l2_normalize_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t x_stride) {
  using S = RmsNormShape<kHidden, T>;
  constexpr int kN = S::kVecElems, kV = S::kVecPerThread;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  Vec16<T> v[kV];
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = threadIdx.x + i * S::kThreads;
    if (vi < S::kVecs) {
      v[i] = load16_stream(x + row * x_stride + vi * kN);
#pragma unroll
      for (int j = 0; j < kN; ++j) sq += to_float(v[i].v[j]) * to_float(v[i].v[j]);
    }
  }
  const float scale = 1.f / fmaxf(sqrtf(block_sum<S::kThreads>(sq, scratch)), 1e-12f);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int vi = threadIdx.x + i * S::kThreads;
    if (vi < S::kVecs) {
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) o.v[j] = from_float<T>(to_float(v[i].v[j]) * scale);
      store16(out + row * kHidden + vi * kN, o);
    }
  }
}

template <int kHidden, int kLabels, class T, HeadAct kAct, bool kBias>
__global__ void __launch_bounds__(256)
token_classify_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w,
                      const T* __restrict__ bias, int64_t rows) {
  constexpr int kN = Vec16<T>::kN;
  static_assert(kHidden % kN == 0, "hidden size must be a multiple of 16 bytes");
  constexpr int kVecs = kHidden / kN, kPerLane = (kVecs + 31) / 32;
  const int64_t row = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  Vec16<T> v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int vi = lane + 32 * i;
    if (vi < kVecs) v[i] = load16_stream(x + row * x_stride + vi * kN);
  }
  float acc[kLabels];
#pragma unroll
  for (int l = 0; l < kLabels; ++l) {
    float a = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int vi = lane + 32 * i;
      if (vi < kVecs) {
        const Vec16<T> wv = load16(w + static_cast<int64_t>(l) * kHidden + vi * kN);
#pragma unroll
        for (int j = 0; j < kN; ++j) a += to_float(v[i].v[j]) * to_float(wv.v[j]);
      }
    }
    acc[l] = warp_sum(a);
  }
  if (lane != 0) return;
#pragma unroll
  for (int l = 0; l < kLabels; ++l) {
    float y = acc[l];
    if constexpr (kBias) y += to_float(bias[l]);
    if constexpr (kAct == HeadAct::kRelu) y = fmaxf(y, 0.f);
    if constexpr (kAct == HeadAct::kSigmoid) y = 1.f / (1.f + __expf(-y));
    out[row * kLabels + l] = from_float<T>(y);
  }
}

/// Block (s, y): rows [16 y, 16 y + 16) of sequence s's kept rows; its output offset is the sum of
/// the kept rows of the sequences before it (O(B) reads of cu_seqlens per block).
template <class T>
__global__ void __launch_bounds__(256)
drop_sequence_ends_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t x_stride, int64_t width, const int32_t* __restrict__ cu,
                          int first, int last) {
  constexpr int kRows = 16;
  __shared__ int64_t base;
  const int s = blockIdx.x, d = first + last;
  if (threadIdx.x == 0) {
    int64_t b = 0;
    for (int j = 0; j < s; ++j) b += max(0, cu[j + 1] - cu[j] - d);
    base = b;
  }
  __syncthreads();
  const int64_t keep = max(0, cu[s + 1] - cu[s] - d), r0 = static_cast<int64_t>(blockIdx.y) * kRows;
  if (r0 >= keep) return;
  const int64_t rows = keep - r0 < kRows ? keep - r0 : kRows;
  for (int64_t i = threadIdx.x; i < rows * width; i += blockDim.x) {
    const int64_t r = r0 + i / width, c = i % width;
    out[(base + r) * width + c] = x[(cu[s] + first + r) * x_stride + c];
  }
}

}  // namespace detail

/// out[b, :] = pool(x[cu_seqlens[b] : cu_seqlens[b + 1], :]) for b < num_seqs (normalised when
/// kNormalize); out contiguous [num_seqs, kHidden]; x rows x_stride apart (16-byte aligned);
/// cu_seqlens i32 on the device. An empty sequence pools to zeros.
template <int kHidden, class T, Pool kPool, bool kNormalize>
void embedding_pool(T* out, const T* x, int64_t x_stride, const int32_t* cu_seqlens, int64_t num_seqs, cudaStream_t stream) {
  if (num_seqs == 0) return;
  detail::pool_kernel<kHidden, T, kPool, kNormalize><<<static_cast<unsigned>(num_seqs), 256, 0, stream>>>(out, x, x_stride, cu_seqlens);
}

/// out[r, :] = x[r, :] / max(||x[r, :]||_2, 1e-12) for r < rows; out contiguous [rows, kHidden].
template <int kHidden, class T> void l2_normalize(T* out, const T* x, int64_t x_stride, int64_t rows, cudaStream_t stream) {
  if (rows == 0) return;
  detail::l2_normalize_kernel<kHidden, T>
      <<<static_cast<unsigned>(rows), detail::RmsNormShape<kHidden, T>::kThreads, 0, stream>>>(out, x, x_stride);
}

/// out[r, l] = act(x[r, :] . w[l, :] (+ bias[l])) for r < rows, l < kLabels (Note [Token heads]):
/// w [kLabels, kHidden] and bias [kLabels] in the model dtype, out contiguous [rows, kLabels].
template <int kHidden, int kLabels, class T, HeadAct kAct, bool kBias>
void token_classify(T* out, const T* x, int64_t x_stride, const T* w, const T* bias, int64_t rows, cudaStream_t stream) {
  if (rows == 0) return;
  detail::token_classify_kernel<kHidden, kLabels, T, kAct, kBias>
      <<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(out, x, x_stride, w, bias, rows);
}

/// Packs the rows of each sequence of a packed batch without its first `first` and last `last`
/// rows (Note [Token heads]): out contiguous [sum over sequences of max(0, len - first - last),
/// width] (a sequence shorter than first + last keeps nothing); x rows x_stride apart;
/// max_seqlen bounds every sequence's length.
template <class T>
void drop_sequence_ends(T* out, const T* x, int64_t x_stride, int64_t width, const int32_t* cu_seqlens, int64_t num_seqs, int first,
                        int last, int64_t max_seqlen, cudaStream_t stream) {
  const int64_t chunks = (max_seqlen + 15) / 16;
  if (num_seqs == 0 || width == 0 || chunks == 0) return;
  detail::drop_sequence_ends_kernel<T>
      <<<dim3(static_cast<unsigned>(num_seqs), static_cast<unsigned>(chunks)), 256, 0, stream>>>(out, x, x_stride, width, cu_seqlens, first, last);
}

}  // namespace fk::kernels
