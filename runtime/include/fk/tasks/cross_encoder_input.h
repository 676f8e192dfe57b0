// The encoder output a decoder's cross-attention reads (bert2bert's decoder, issue 22), as the
// harnesses (fk/tasks/bert.h) and fk_model's embedding runner build it, and as the composite
// references take it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fk/runtime/tensor.h"
#include "fk/tasks/forward_context.h"

namespace fk::tasks {

/// The encoder-side sequences of a cross-attention reference: host offsets and the encoder states.
struct RefEncoder {
  std::vector<int32_t> cu;
  Tensor states;  ///< [Tk, H], the model dtype
};

/// The encoder output a decoder's cross-attention attends to, as the harnesses and fk_model's
/// embedding runner make it: one sequence per decoder sequence with the decoder's lengths in
/// reverse order (query and key counts differ per sequence wherever the lengths do); the states
/// [Tk, hidden] are allocated here and filled by the caller (N(0, 1): a LayerNorm output's scale).
struct CrossEncoderInput {
  RefEncoder ref;
  int64_t max_len = 0;
  /// Builds the sequences for decoder offsets `cu` and names them in `meta`.
  void attach(const std::vector<int32_t>& cu, AttnMetadata& meta, int64_t hidden, DType dtype) {
    ref.cu = {0};
    for (size_t b = cu.size() - 1; b >= 1; --b) {
      const int32_t len = cu[b] - cu[b - 1];
      ref.cu.push_back(ref.cu.back() + len);
      max_len = std::max<int64_t>(max_len, len);
    }
    ref.states = empty({int64_t(ref.cu.back()), hidden}, dtype);
    meta.encoder_cu_seqlens = to_device(ref.cu, {static_cast<int64_t>(ref.cu.size())});
    meta.max_encoder_seqlen = max_len;
  }
  /// (query, key) pairs of the cross-attention: sum over sequences of len_q * len_k.
  double pairs(const std::vector<int32_t>& cu_q) const {
    double s = 0;
    for (size_t b = 0; b + 1 < cu_q.size(); ++b) s += double(cu_q[b + 1] - cu_q[b]) * double(ref.cu[b + 1] - ref.cu[b]);
    return s;
  }
};

}  // namespace fk::tasks
