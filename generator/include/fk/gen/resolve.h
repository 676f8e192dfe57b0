// The resolve pass: ParsedConfig + descriptors -> ResolvedConfig (family chosen, unknown keys
// rejected against the family, defaults applied, derived constants computed, checks enforced).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fk/gen/config.h"
#include "fk/gen/descriptor.h"

namespace fk::gen {

/// Everything lowering needs about one architecture; immutable once built.
struct ResolvedConfig {
  std::string id;          ///< org/model, e.g. meta-llama/Llama-3.1-8B-Instruct
  std::string file;        ///< display path of the config
  std::string model_type;
  const Descriptor* descriptor = nullptr;  ///< owned by the DescriptorSet, which outlives this
  std::string dtype;       ///< the tasks' dtype: bfloat16 | float16 (torch_dtype, or the user's `dtype` choice)
  /// Every name expressions may use: the family's fields (value or default), rope_scaling.*,
  /// and its constants (model-type overrides applied).
  std::map<std::string, Value> values;
  /// Where each value came from: a JSON path ($.text_config.n_head), "default" or "constant".
  std::map<std::string, std::string> origin;
  UserChoices choices;           ///< Note [User choices]
  std::string dequantized_from;  ///< the quant_method of a checkpoint generated as bf16 ("" otherwise)
  std::string dtype_from;        ///< the checkpoint's torch_dtype when the user chose another dtype ("" otherwise)
  std::string served_as;         ///< the known model_type it is lowered as (Note [User choices]; "" : its own)
  ParallelLayout layout;         ///< Note [Parallel layouts]: the layout lowered (id then ends in "@<layout>")
};

/// Resolves `cfg` (whose id is `id`); appends problems to `diag`; nullopt when unusable.
std::optional<ResolvedConfig> resolve(const ParsedConfig& cfg, const std::string& id, const DescriptorSet& descriptors,
                                      Diagnostics& diag, const UserChoices& choices = {}, const ParallelLayout& layout = {});

}  // namespace fk::gen
