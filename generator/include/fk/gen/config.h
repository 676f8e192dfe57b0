// The parse pass: one HF config.json -> an immutable typed ParsedConfig (strict).
//
// Note [Field table]
// Every config field any family consumes is declared once in the field table (src/fields.cc):
// its canonical (HF Llama) name, its type, and its aliases (`n_head` -> `num_attention_heads`,
// `num_local_experts` -> `num_experts`, `dtype` -> `torch_dtype`, ...). Parse type-checks every
// known field wherever it appears (top level or nested `text_config`, which takes precedence)
// and records every other key as unrecognised. Whether a key may be present at all depends on
// the family, so that check happens in resolve against the descriptor's `fields` and
// `ignored_keys`. A genuinely new field (a new family) adds one line to the table.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fk/gen/diag.h"
#include "fk/gen/value.h"

namespace fk::gen {

enum class FieldType {
  kPosInt,      ///< integer > 0
  kNonNegInt,   ///< integer >= 0
  kIntOrNull,   ///< integer > 0, or null (absent optional)
  kAnyIntOrNull,  ///< any integer, or null (token ids: the family's checks say which it accepts)
  kPosNumber,   ///< number > 0
  kNumberOrNull,  ///< number > 0, or null (absent optional)
  kBool,
  kString,
  kStringList,  ///< array of strings
  kIntList,     ///< array of non-negative integers; expressions see it as "0,3" ("" when empty)
  kDType,       ///< "bfloat16" | "float16" | "float32"
  kRopeScaling, ///< object (see RopeScaling) or null
};

/// One row of the field table (Note [Field table]).
struct FieldSpec {
  std::string name;                  ///< canonical name
  FieldType type;
  std::vector<std::string> aliases;  ///< other spellings, e.g. n_head
  std::string doc;
};

/// The field table, sorted by canonical name.
const std::vector<FieldSpec>& field_table();
/// The row whose canonical name or alias is `key`; nullptr when none.
const FieldSpec* find_field(const std::string& key);
/// "positive integer", "boolean", ... (used in messages).
std::string expected_text(FieldType t);

/// Parsed `rope_scaling` (absent or null: type "none"); unused members are 0.
struct RopeScaling {
  std::string type = "none";  ///< none | llama3 | linear | yarn | yarn_notrunc (truncate: false) | deepseek_yarn | longrope
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  int64_t original_max_position = 0;
  double beta_fast = 0;
  double beta_slow = 0;
  double mscale_all_dim = 0;  ///< deepseek_yarn: the softmax scale's YaRN mscale key (0: none)
  /// longrope (Phi-3/Phi-4 LongRoPE): the per-frequency rescale factors, comma-joined canonical
  /// numbers (lists are held joined, as layer_types), and attention_factor (0: derived).
  std::string long_factor, short_factor;
  double attention_factor = 0;
  /// Multimodal rope (Qwen2-VL and successors; vLLM MRotaryEmbedding): the rotary frequencies split
  /// into sections taken from the temporal, height and width positions, comma-joined ("" without
  /// mrope), and whether the sections interleave (Qwen3-VL) instead of following each other.
  std::string mrope_section;
  bool mrope_interleaved = false;
};

/// The rope scaling types and the keys each one reads (besides rope_type/type).
const std::map<std::string, std::vector<std::string>>& rope_scaling_keys();

/// A known field as found in the file.
struct FieldValue {
  Value value;       ///< scalars; for kStringList the entries joined by ',' (see ParsedConfig::architectures)
  std::string path;  ///< JSON key path where it was found, e.g. $.text_config.n_head
};

/// A key the field table does not know (resolve decides whether the family ignores it).
struct UnrecognisedKey {
  std::string key;
  std::string path;
  std::string value;  ///< JSON text, shortened
};

/// Note [Tool-only keys]
/// Keys that only tools read (training, tokenizers, generation defaults, hub and library
/// bookkeeping, task-head label maps): none changes the forward pass of the model we generate,
/// so every family ignores them through this one list rather than per descriptor. A key that can
/// change the forward pass is never here; an unknown key stays an error unless the user names it
/// with `add --allow-unknown` (recorded, Note [User choices]).
const std::set<std::string>& tool_only_keys();

/// `quantization_config` as found: the method (`quant_method`) and a one-line description.
struct Quantization {
  std::string method;  ///< e.g. "fp8", "mxfp4"; "" when the object names none
  std::string detail;  ///< e.g. "quant_method \"fp8\", weight_block_size [128, 128]"
  std::string path;    ///< $.quantization_config (or nested)
};

/// Note [User choices]
/// What a user decided about one config, knowingly, kept beside it as
/// hf_configs/<org>/<model>/fastkernels.json (the config itself stays verbatim) and recorded in
/// the manifest: `dequantize` generates bf16 tasks for a quantised checkpoint (its
/// quantization_config is otherwise refused, naming the method), `allow_unknown` lets named keys
/// the family does not know pass, `dtype` serves the checkpoint in another dtype than its
/// torch_dtype (a float32 checkpoint is otherwise refused: no kernel serves fp32 weights, and
/// vLLM's dtype="auto" serves such checkpoints in 16 bits), `served_as` lowers a config whose
/// model_type no descriptor claims as a known model_type (the user's claim that the forward pass
/// is that type's; HF parity, which runs HF's own class for the config, is what checks it).
/// `pooling` / `normalize` choose an embedding model's pooled output as vLLM's PoolerConfig
/// (pooling_type, normalize) does: "cls", "mean" or "last" over each sequence's final hidden
/// states, L2-normalised when `normalize`, instead of the checkpoint's own pooler (BERT's dense +
/// tanh); for families whose descriptor declares the pooling_type field (HF configs do not say
/// how a sentence-transformers model pools: its 1_Pooling/config.json does).
/// `add --dequantize --allow-unknown KEY... --dtype D --as MODEL_TYPE --pooling P --normalize` writes it.
/// Note [Parallel layouts]
/// A tensor- / expert-parallel layout a config is served in (docs/multi-gpu.md, "Sharded tasks"):
/// the generator lowers the config once unsharded and once per recorded layout, each a model of its
/// own (id "<org>/<model>@tp2", "@tp2_ep2", "@ep2") whose tasks inline the per-rank constants. The
/// descriptor computes them from tp_size and ep_size (1 unsharded); a family whose descriptor never
/// reads them does not shard and refuses a layout.
struct ParallelLayout {
  int64_t tp = 1, ep = 1;
  bool sharded() const { return tp > 1 || ep > 1; }
  /// "tp2", "tp2_ep2", "ep2"; "" unsharded.
  std::string suffix() const;
  bool operator==(const ParallelLayout& o) const { return tp == o.tp && ep == o.ep; }
  bool operator<(const ParallelLayout& o) const { return tp != o.tp ? tp < o.tp : ep < o.ep; }
};

struct UserChoices {
  std::string file;                     ///< the sidecar's display path ("" when there is none)
  bool dequantize = false;
  std::vector<std::string> allow_unknown;  ///< sorted, unique
  std::string dtype;                       ///< "bfloat16" or "float16" ("" : the config's torch_dtype)
  std::string served_as;                   ///< a known model_type ("" : the config's own)
  std::string pooling;                     ///< "cls", "mean" or "last" ("" : the model's own pooler)
  bool normalize = false;                  ///< L2-normalise the pooled vectors (only with pooling)
  int64_t image_size = 0;                  ///< vision encoders: the served resolution (0: the config's image_size)
  /// Per-token heads of multi-vector / sparse embedding models (Note [Embedding heads] in resolve.cc):
  int64_t multi_vector = 0;                ///< ColBERT-style token vectors of this width (0: none)
  bool sparse = false;                     ///< BGE-M3's sparse lexical weights relu(linear(hidden, 1))
  bool head_bias = false;                  ///< the heads' linears carry a bias (BGE-M3's; ColBERT's have none)
  bool drop_special_tokens = false;        ///< the heads drop BOS (and the sparse weights EOS), as vLLM's BgeM3EmbeddingModel
  /// A component of a composite config to lower instead of the whole (Note [Config components] in
  /// parse.cc): "vision_config" serves a vision-language checkpoint's vision tower ("": the config).
  std::string component;
  /// Note [Parallel layouts]: the sharded layouts it is also served in (sorted, unique, each sharded).
  std::vector<ParallelLayout> parallel;
  bool empty() const {
    return !dequantize && allow_unknown.empty() && dtype.empty() && served_as.empty() && pooling.empty() && !normalize &&
           image_size == 0 && multi_vector == 0 && !sparse && !head_bias && !drop_special_tokens && component.empty() && parallel.empty();
  }
};

/// Parses a fastkernels.json sidecar (strict: keys dequantize (boolean), allow_unknown (array
/// of strings), dtype ("bfloat16" or "float16"), served_as (a model_type string), pooling ("cls",
/// "mean" or "last"), normalize (boolean, only with pooling), image_size (a positive integer), multi_vector (a positive
/// integer), sparse, head_bias and drop_special_tokens (booleans; the last two only with a head), parallel (an array of
/// {"tp": n, "ep": m} layouts, Note [Parallel layouts]), nothing else); problems go to
/// `diag` naming `file` and the key.
UserChoices parse_user_choices(const std::string& file, const std::string& text, Diagnostics& diag);
/// Whether `key` names a nested component config (`add --component`: "vision_config", "text_config", ...).
bool is_component_key(const std::string& key);
/// The model type of component `key` of a composite config of type `composite_type` (Note [Config
/// components] in generator/src/passes/parse.cc): `own_type` (the component's model_type, "" when it
/// has none) unless it is missing or repeats the composite's, else the composite's type joined to the
/// key without "_config" (qwen2_vl + vision_config -> qwen2_vl_vision).
std::string component_model_type(const std::string& composite_type, const std::string& key, const std::string& own_type);
/// The sidecar's text for `c` (deterministic: sorted keys, two-space indent, final newline).
std::string user_choices_text(const UserChoices& c);
/// Parses a layout as `add --parallel` spells it ("tp2", "ep2", "tp2_ep2"); nullopt when malformed.
std::optional<ParallelLayout> parse_layout(const std::string& text);

/// The typed, immutable result of parsing one config file.
struct ParsedConfig {
  std::string file;  ///< display path, e.g. hf_configs/meta-llama/Llama-3.1-8B-Instruct/config.json
  std::map<std::string, FieldValue> fields;  ///< canonical name -> value (rope_scaling excluded)
  std::vector<std::string> architectures;
  std::string architectures_path;            ///< empty when absent
  RopeScaling rope_scaling;
  std::string rope_scaling_path;             ///< empty when absent
  std::string name_or_path;                  ///< `_name_or_path` if present (used by `add`)
  std::optional<Quantization> quantization;  ///< `quantization_config`, when present and not null
  std::vector<UnrecognisedKey> unrecognised; ///< in key order
  std::set<std::string> invalid;             ///< canonical names whose value was rejected (already reported)

  const FieldValue* get(const std::string& canonical) const {
    auto it = fields.find(canonical);
    return it == fields.end() ? nullptr : &it->second;
  }
};

/// Parses `text` (the bytes of `file`); appends every problem to `diag`.
/// Returns nullopt when the file is not a JSON object at all; otherwise a config holding every
/// field that did parse (the caller checks diag.ok()).
/// `whole_config`: a config file, which must name its family (model_type or architectures); false
/// for a fragment (tests of single fields).
/// `component` (Note [Config components]): parse that nested object (e.g. "vision_config") as the
/// config, keeping the top level's dtype where the component names none; "" parses the whole.
std::optional<ParsedConfig> parse_config(const std::string& file, const std::string& text, Diagnostics& diag,
                                         bool whole_config = true, const std::string& component = "");
/// `text` with Python's NaN, Infinity and -Infinity literals made into (marked) strings, so that
/// any JSON parser reads it (Note [Python JSON literals] in parse.cc).
std::string python_json_text(const std::string& text);

/// Short JSON text of a value for messages ("4096", "\"4096\"", null; long values cut with "...").
std::string short_json(const std::string& dumped);

}  // namespace fk::gen
