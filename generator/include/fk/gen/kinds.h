// Task kinds: the C++ side of docs/task-kinds.md, in one place.
//
// Note [Task naming]
// A task's name spells every constant it inlines, in a fixed order per kind (docs/task-kinds.md,
// "Kinds"), so the name is the task's identity: equal names from different configs are one task
// (dedupe merges them), and a name that maps to different content is a hard error. Numbers in
// names are canonical (Note [Canonical numbers]); booleans become words (bias/nobias, neox/gptj);
// the dtype suffix is bf16/f16/f32. Only KindSpec::name builds names; nothing else may.
//
// Descriptors decide *which* kinds a forward pass uses and which config values feed each
// parameter; this table decides how a kind is named, what its template receives and which
// input cases (Note [Case registry]) it is benchmarked on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fk/gen/value.h"

namespace fk::gen {

enum class ParamType { kInt, kFloat, kBool, kString };
const char* param_type_name(ParamType t);

/// A kind parameter, bound by the descriptor's `bind` for each op.
struct ParamSpec {
  std::string name;
  ParamType type;
  /// false: the parameter only selects input cases (e.g. max_position for attention) and is
  /// neither in the name nor in the content that must agree between configs.
  bool is_constant = true;
};

/// Parameter values of one op instance, checked against the kind's ParamSpecs.
using Params = std::map<std::string, Value>;

/// Note [Case registry]
/// One entry of a task's input registry. `order` places it within the kind's registry (token
/// counts in listed order; attention decode by batch then kv_len) so the registries of configs
/// that share a task can be merged into one canonical list (a case is an input shape, not an
/// inlined constant: a shared task is benchmarked on the union of its configs' cases).
struct ShapeCase {
  std::string name;    ///< t256, b1_s1024, b8_kv8192
  std::string regime;  ///< decode | prefill
  std::vector<std::pair<std::string, int64_t>> dims;
  std::vector<int64_t> order;
};

/// The fixed facts of one task kind.
struct KindSpec {
  std::string kind;           ///< e.g. fused_add_rms_norm
  std::string template_name;  ///< templates/<template_name>.cu.mustache
  int level = 1;
  std::vector<ParamSpec> params;
  /// Task name from params and dtype suffix (Note [Task naming]).
  std::function<std::string(const Params&, const std::string& dtype_suffix)> name;
  std::function<std::string(const Params&)> production;
  /// Kind-specific placeholders (name -> C++ text), see docs/task-kinds.md.
  std::function<std::vector<std::pair<std::string, std::string>>(const Params&)> placeholders;
  std::function<std::vector<ShapeCase>(const Params&)> cases;
};

/// The kind named `kind`; nullptr when unknown.
const KindSpec* find_kind(const std::string& kind);
/// All kind names, sorted.
std::vector<std::string> kind_names();

/// dtype suffix for names: bfloat16 -> bf16, float16 -> f16, float32 -> f32.
std::string dtype_suffix(const std::string& torch_dtype);
/// C++ scalar type: bfloat16 -> fk::bf16, float16 -> fk::f16, float32 -> float.
std::string dtype_scalar_t(const std::string& torch_dtype);

/// A C++ initialiser of fk::ShapeCase, e.g. {"t1", "decode", {{"num_tokens", 1}}}.
std::string case_initializer(const ShapeCase& c);

}  // namespace fk::gen
