// The lower pass: walk the descriptor's forward pass for one resolved config, producing the
// ordered op instances with stable names (`embed_tokens`, `blk.<i>.<role>`, `norm`, `lm_head`)
// and fully bound, type-checked kind parameters.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fk/gen/kinds.h"
#include "fk/gen/resolve.h"

namespace fk::gen {

/// One op of one model's forward pass.
struct OpInstance {
  std::string name;  ///< stable intermediate name, e.g. blk.0.qkv_proj
  const KindSpec* kind = nullptr;
  std::string dtype;  ///< torch_dtype
  Params params;      ///< every parameter of the kind, typed (kFloat always double)
};

/// One architecture, lowered.
struct LoweredModel {
  std::string id;
  std::string file;
  std::string model_type;
  std::string descriptor_file;
  std::vector<OpInstance> ops;  ///< forward-pass order
};

std::optional<LoweredModel> lower(const ResolvedConfig& cfg, Diagnostics& diag);

}  // namespace fk::gen
