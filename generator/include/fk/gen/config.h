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
  std::string type = "none";  ///< none | llama3 | linear | yarn | yarn_notrunc (truncate: false) | deepseek_yarn
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  int64_t original_max_position = 0;
  double beta_fast = 0;
  double beta_slow = 0;
  double mscale_all_dim = 0;  ///< deepseek_yarn: the softmax scale's YaRN mscale key (0: none)
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

/// The typed, immutable result of parsing one config file.
struct ParsedConfig {
  std::string file;  ///< display path, e.g. hf_configs/meta-llama/Llama-3.1-8B-Instruct/config.json
  std::map<std::string, FieldValue> fields;  ///< canonical name -> value (rope_scaling excluded)
  std::vector<std::string> architectures;
  std::string architectures_path;            ///< empty when absent
  RopeScaling rope_scaling;
  std::string rope_scaling_path;             ///< empty when absent
  std::string name_or_path;                  ///< `_name_or_path` if present (used by `add`)
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
std::optional<ParsedConfig> parse_config(const std::string& file, const std::string& text, Diagnostics& diag);

/// Short JSON text of a value for messages ("4096", "\"4096\"", null; long values cut with "...").
std::string short_json(const std::string& dumped);

}  // namespace fk::gen
