// The lower pass: walk the descriptor's forward pass for one resolved config, producing the
// ordered op instances with stable names (`embed_tokens`, `blk.<i>.<role>`, `norm`, `lm_head`)
// and fully bound, type-checked kind parameters; then the composite modules (`modules`), once
// per model, with every child resolved to an op instance or an earlier module.
//
// Note [Last-layer roles]
// A layer-scope module is instantiated once, not per layer, so each of its roles must pick one
// layer's op: the last layer's, `blk.<n-1>.<role>` with n the loop's repeat count. Layer 0 is
// the exception in the Llama family (input_layernorm is rms_norm there, fused_add_rms_norm
// after; both have the class RMSNorm), so the last layer is the representative one. A role
// whose op does not exist in the last layer (its `if` is false there) is absent: an optional
// role ("qk_norm?") then gets its slot's fallback type, a required one is an error.
// Models whose layers differ in kind (Gemma: sliding-window layers with a local rope base
// between full-attention layers) give each variant its own modules with `"at": <expr>`: their
// roles resolve to the last layer where the expression holds (`layer` is that layer in the
// module's `bind`), and a module whose `at` holds in no layer is absent, like a false `if`.
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

/// One composite module of one model (Note [Composite kinds] in fk/gen/kinds.h).
struct ModuleInstance {
  std::string name;  ///< the module's op, e.g. self_attn
  const KindSpec* kind = nullptr;
  std::string dtype;
  Params params;
  /// (slot, child): the child's op name (blk.31.qkv_proj, norm) or module name; empty when an
  /// optional role is absent. In the kind's slot order.
  std::vector<std::pair<std::string, std::string>> children;
};

/// One architecture, lowered.
struct LoweredModel {
  std::string id;
  std::string file;
  std::string model_type;
  std::string descriptor_file;
  std::vector<OpInstance> ops;  ///< forward-pass order
  std::vector<ModuleInstance> modules;  ///< declaration order (children before parents)
  std::string dequantized_from;            ///< Note [User choices]
  std::string dtype_from;                  ///< ditto: the checkpoint's torch_dtype when served in another
  std::string served_as;                   ///< ditto: the known model_type it is lowered as
  std::string pooling;                     ///< ditto: the pooling choice ("cls", "mean+normalize", ...)
  std::vector<std::string> allowed_unknown;
};

std::optional<LoweredModel> lower(const ResolvedConfig& cfg, Diagnostics& diag);

}  // namespace fk::gen
