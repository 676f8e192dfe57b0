// Task kinds: the kind table (generator/kinds/*.json; Note [Kinds as data] in
// generator/src/kinds/kind_data.cc) as the generator holds it.
//
// Note [Task naming]
// A task's name spells every constant it inlines, in a fixed order per kind (docs/task-kinds.md,
// "Kinds"), so the name is the task's identity: equal names from different configs are one task
// (dedupe merges them), and a name that maps to different content is a hard error. Numbers in
// names are canonical (Note [Canonical numbers]); booleans become words (bias/nobias, neox/gptj);
// the dtype suffix is bf16/f16/f32. Only KindSpec::name (a kind entry's `name`) builds names;
// nothing else may. A spelling longer than kMaxTaskName is cut and ends in a hash of the whole
// spelling (Note [Long task names] in generator/src/passes/dedupe.cc).
//
// Descriptors decide *which* kinds a forward pass uses and which config values feed each
// parameter; this table decides how a kind is named, what its templates receive and which
// input cases (Note [Case registry]) it is benchmarked on.
//
// Note [Composite kinds]
// A kind of level >= 2 composes other tasks: its slots (KindSpec::slots) hold child modules,
// which a descriptor's `modules` entry binds to ops of the L1 forward pass or to earlier
// modules (docs/descriptors.md, "modules"). Its own parameters are constants like an L1 kind's;
// its children are part of its content (dedupe: the same name with other children is an error)
// but not of its name, which spells the constants the children are built from. Its template
// receives, per slot, the child's C++ type and task name, and the child headers to include.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
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
  /// The value when a descriptor's `bind` omits the parameter (kind data: [name, type,
  /// {"default": v}]); none: the bind must give it. Lets a kind gain a constant that only new
  /// families set (Granite's residual_multiplier) without touching every descriptor.
  std::optional<Value> dflt;
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

/// A slot of a composite kind (Note [Composite kinds]).
struct SlotSpec {
  std::string name;        ///< e.g. qkv_proj; placeholders <name>_t and <name>_task
  /// The module class a child must have, e.g. QKVParallelLinear; "A|B": either (classes with
  /// the same interface, e.g. SiluAndMul|GeluAndMul; slot_accepts).
  std::string class_name;
  /// C++ type used when an optional role is absent (e.g. fk::tasks::NoQKNorm); empty: the
  /// slot must always have a child.
  std::string fallback;
};

/// The fixed facts of one task kind.
// Note [Served constants]
// A constant the baseline kernels cannot serve (a head dim no attention kernel supports) would
// otherwise surface as a static_assert when the generated source compiles, or as an error at
// run time. A kind's `served` says, from its bound parameters, whether its kernels serve them;
// lower refuses the config at generate time with the supported range, once per kind.
struct KindSpec {
  std::string kind;           ///< e.g. fused_add_rms_norm
  std::string template_name;  ///< templates/<template_name>.h.mustache + .cu.mustache
  /// The source (.cu) template when it is another kind's (the registration is the same: a
  /// gemma_decoder_layer registers like a llama_decoder_layer); empty: template_name's.
  std::string source_template_name;
  int level = 1;
  std::string class_name;     ///< the task's module class, e.g. RMSNorm
  std::vector<SlotSpec> slots;  ///< composite kinds only, in placeholder order
  std::vector<ParamSpec> params;
  /// Task name from params and dtype suffix (Note [Task naming]).
  std::function<std::string(const Params&, const std::string& dtype_suffix)> name;
  std::function<std::string(const Params&)> production;
  /// Kind-specific placeholders (name -> C++ text), see docs/task-kinds.md.
  std::function<std::vector<std::pair<std::string, std::string>>(const Params&)> placeholders;
  std::function<std::vector<ShapeCase>(const Params&)> cases;
  /// Note [Served constants]: "" when the baseline kernels serve these constants (and dtype:
  /// bfloat16, float16, float32), else what they serve; empty function: every value.
  std::function<std::string(const Params&, const std::string& dtype)> served;
  /// The collective its forward issues once per call where its tp_size is above 1 ("all_reduce",
  /// "all_gather"; "" none): what the coverage audit counts per layout (Note [Collectives per step]).
  std::string collective;
  /// Note [Collective tasks]: the parameters of that collective's L1 task (width, tp_size) from this
  /// kind's; empty function where `collective` is "".
  std::function<Params(const Params&)> collective_params;
  /// Note [Expert-parallel all-to-all task]: the kind of the all-to-all its forward calls at a data-parallel layout
  /// (tp_size 1, ep_size > 1: "ep_all_to_all"; "" none), and that task's parameters (num_experts, top_k, hidden_size,
  /// ep_size) from this kind's: empty Params where the layout is not data-parallel.
  std::string ep_collective;
  std::function<Params(const Params&)> ep_collective_params;
};

/// Longest task name (Note [Long task names]).
constexpr size_t kMaxTaskName = 120;
/// `spelled` when it fits kMaxTaskName, else its bounded form (Note [Long task names]).
std::string bounded_task_name(const std::string& spelled, const std::string& dtype_suffix);

/// The kind named `kind`; nullptr when unknown.
const KindSpec* find_kind(const std::string& kind);
/// Whether a child of class `cls` fits `slot` (one of its "|"-separated classes).
bool slot_accepts(const SlotSpec& slot, const std::string& cls);
/// The slot's classes for messages: "A" or "A or B".
std::string slot_classes_text(const SlotSpec& slot);
/// Names of the L1 kinds (composite = false) or of the composite kinds (true), sorted.
std::vector<std::string> kind_names(bool composite);

/// dtype suffix for names: bfloat16 -> bf16, float16 -> f16, float32 -> f32.
std::string dtype_suffix(const std::string& torch_dtype);
/// C++ scalar type: bfloat16 -> fk::bf16, float16 -> fk::f16, float32 -> float.
std::string dtype_scalar_t(const std::string& torch_dtype);

/// A C++ initialiser of fk::ShapeCase, e.g. {"t1", "decode", {{"num_tokens", 1}}}.
std::string case_initializer(const ShapeCase& c);

}  // namespace fk::gen
