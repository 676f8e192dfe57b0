// Family descriptors: data files under generator/descriptors/ (format: docs/descriptors.md).
// Loaded once into an immutable Descriptor by a strict loader that rejects unknown keys, unknown
// kinds, kind parameters left unbound and names no expression can resolve.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fk/gen/diag.h"
#include "fk/gen/expr.h"

namespace fk::gen {

/// How a family uses one config field (`fields` in the descriptor).
struct FieldUse {
  std::string field;     ///< canonical name from the field table
  bool required = false;
  Expr default_value;    ///< used when absent (ignored when required)
};

/// A value the family derives (`constants`), or a check it imposes (`checks`).
struct Check {
  std::string field;     ///< the config field the message points at
  Expr require;          ///< must evaluate to true
  std::string expected;  ///< what the message says was expected
};

/// One op of the forward pass: `blk.<i>.<op>` inside the layer loop, `<op>` outside.
struct OpStep {
  std::string op;
  std::string kind;
  std::optional<Expr> when;          ///< `if`: the op exists only where true
  std::map<std::string, Expr> bind;  ///< kind parameter -> expression
  std::string json_path;             ///< for messages, e.g. $.forward[1].ops[3]
};

/// Either a single op or the per-layer loop (`repeat`), in forward-pass order.
struct ForwardItem {
  std::optional<OpStep> op;
  std::optional<Expr> repeat;        ///< number of layers
  std::vector<OpStep> layer_ops;     ///< with the variable `layer` bound to 0..repeat-1
};

/// One child of a composite module: a slot of its kind bound to a role (docs/descriptors.md).
struct ChildRef {
  std::string slot;
  std::string role;       ///< an op role of the forward pass, or an earlier module's op ("?" stripped)
  bool optional = false;  ///< the role was written with a trailing "?"
  bool module = false;    ///< `role` names an earlier module
};

/// One composite module (`modules`): instantiated once per model from the L1 ops and earlier
/// modules (Note [Composite kinds] in fk/gen/kinds.h).
struct ModuleStep {
  std::string op;                    ///< the module's name, e.g. self_attn
  std::string kind;                  ///< a composite kind
  bool layer_scope = false;          ///< `scope`: "layer" (roles of the layer loop) or "model"
  std::vector<ChildRef> children;    ///< in the kind's slot order
  std::optional<Expr> when;          ///< `if`: the module exists only where true
  /// `at` (layer scope only): the representative layer is the last one where this is true
  /// (Note [Last-layer roles]); `layer` is that layer in `bind`. Absent: the last layer.
  std::optional<Expr> at;
  std::map<std::string, Expr> bind;  ///< kind parameter -> expression
  std::string json_path;             ///< for messages, e.g. $.modules[2]
};

/// One model_type the family covers.
struct ModelTypeEntry {
  std::string model_type;
  std::vector<std::string> architectures;
  std::map<std::string, Expr> constants;  ///< overrides of the family's constants
};

/// An immutable family descriptor.
struct Descriptor {
  std::string file;    ///< repository-relative, e.g. generator/descriptors/llama.json
  std::string family;
  std::string doc;
  std::map<std::string, ModelTypeEntry> model_types;
  std::map<std::string, FieldUse> fields;
  std::set<std::string> ignored_keys;
  std::map<std::string, Expr> constants;
  std::vector<Check> checks;
  std::vector<ForwardItem> forward;
  std::vector<ModuleStep> modules;  ///< declaration order: children before parents
  std::set<std::string> identifiers;  ///< every name an expression of the descriptor reads
};

/// Names that `rope_scaling` exposes to expressions when a family consumes it:
/// rope_scaling.type ("none"|"llama3"|"linear"|"yarn"|"yarn_notrunc"), rope_scaling.factor, ... (0 when unused).
const std::vector<std::string>& rope_scaling_names();

/// Loads one descriptor; appends problems to `diag`; nullptr when it cannot be used.
std::shared_ptr<const Descriptor> load_descriptor(const std::string& file, const std::string& text, Diagnostics& diag);

/// All loaded descriptors, indexed by model_type and architecture.
class DescriptorSet {
 public:
  /// Adds `d`; a model_type claimed by two descriptors is an error.
  void add(std::shared_ptr<const Descriptor> d, Diagnostics& diag);
  const Descriptor* by_model_type(const std::string& model_type) const;
  const Descriptor* by_architecture(const std::string& arch, std::string* model_type) const;
  /// Sorted model types, for messages.
  std::vector<std::string> model_types() const;
  const std::vector<std::shared_ptr<const Descriptor>>& all() const { return all_; }

 private:
  std::vector<std::shared_ptr<const Descriptor>> all_;
  std::map<std::string, const Descriptor*> by_type_;
};

}  // namespace fk::gen
