// The resolve pass (see fk/gen/resolve.h).
#include "fk/gen/resolve.h"

#include <functional>
#include <set>
#include <tuple>

#include "fk/gen/format.h"

namespace fk::gen {

namespace {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

bool value_fits(FieldType t, const Value& v) {
  switch (t) {
    case FieldType::kPosInt:
    case FieldType::kNonNegInt: return v.index() == 2;
    case FieldType::kIntOrNull:
    case FieldType::kAnyIntOrNull: return v.index() == 2 || v.index() == 0;
    case FieldType::kPosNumber: return is_numeric(v);
    case FieldType::kNumberOrNull: return is_numeric(v) || v.index() == 0;
    case FieldType::kBool: return v.index() == 1;
    case FieldType::kString:
    case FieldType::kDType:
    case FieldType::kStringList:
    case FieldType::kIntList: return v.index() == 4;
    case FieldType::kRopeScaling: return v.index() == 0;
  }
  return false;
}

}  // namespace

std::optional<ResolvedConfig> resolve(const ParsedConfig& cfg, const std::string& id, const DescriptorSet& descriptors,
                                      Diagnostics& diag, const UserChoices& choices, const ParallelLayout& layout) {
  const size_t errors_before = diag.errors().size();
  auto err = [&](const std::string& path, const std::string& what) { diag.error(cfg.file + ": " + path + ": " + what); };

  // --- family ---------------------------------------------------------------------------------
  ResolvedConfig r;
  r.id = id;
  r.file = cfg.file;
  r.choices = choices;
  const FieldValue* mt = cfg.get("model_type");
  const Descriptor* d = nullptr;
  std::string known = join(descriptors.model_types(), ", ");
  if (!choices.served_as.empty()) {
    // Note [User choices]: lowered as a known model_type, knowingly; only for a config whose own
    // model_type no descriptor claims (a claimed one would be lowered as itself).
    r.model_type = mt ? std::get<std::string>(mt->value) : std::string();
    if (r.model_type.empty()) {
      diag.error(choices.file + ": $.served_as: " + cfg.file + " has no model_type (remove served_as: the architecture decides)");
      return std::nullopt;
    }
    if (descriptors.by_model_type(r.model_type)) {
      diag.error(choices.file + ": $.served_as: model_type " + json_quote(r.model_type) + " of " + cfg.file + " is known (" +
                 descriptors.by_model_type(r.model_type)->file + "); remove served_as");
      return std::nullopt;
    }
    d = descriptors.by_model_type(choices.served_as);
    if (!d) {
      diag.error(choices.file + ": $.served_as: unknown model_type " + json_quote(choices.served_as) + "; known: " + known);
      return std::nullopt;
    }
    r.served_as = choices.served_as;
  } else if (mt) {
    r.model_type = std::get<std::string>(mt->value);
    d = descriptors.by_model_type(r.model_type);
    if (!d) {
      err(mt->path, "unknown model_type " + json_quote(r.model_type) + "; known: " + known +
                        "; add a descriptor under generator/descriptors/, or, if its forward pass is one of those "
                        "model types', pass `add --as <model_type>` to lower it as that one knowingly");
      return std::nullopt;
    }
  } else if (!cfg.architectures.empty()) {
    d = descriptors.by_architecture(cfg.architectures[0], &r.model_type);
    if (!d) {
      err("$.model_type", "expected one of " + known + ", got nothing (and architecture " + json_quote(cfg.architectures[0]) +
                              " is in no descriptor; add a descriptor under generator/descriptors/)");
      return std::nullopt;
    }
  } else {
    err("$.model_type", "expected one of " + known + ", got nothing");
    return std::nullopt;
  }
  r.descriptor = d;
  // Note [Parallel layouts]: the layout's sizes are names the descriptor's expressions may read.
  r.layout = layout;
  if (layout.sharded()) {
    for (const auto& [size, name, what] : {std::tuple<int64_t, const char*, const char*>{layout.tp, "tp_size", "tensor"},
                                           {layout.ep, "ep_size", "expert"}})
      if (size > 1 && !d->identifiers.count(name)) {
        diag.error(choices.file + ": $.parallel: layout " + layout.suffix() + ": family " + d->family + " has no " + what +
                   "-parallel forward (its descriptor " + d->file + " never reads " + name + "); remove the layout");
        return std::nullopt;
      }
    r.id = id + "@" + layout.suffix();
  }
  const std::string layout_origin = layout.sharded() ? choices.file + " $.parallel (" + layout.suffix() + ")" : "unsharded";
  r.values["tp_size"] = Value(layout.tp);
  r.origin["tp_size"] = layout_origin;
  r.values["ep_size"] = Value(layout.ep);
  r.origin["ep_size"] = layout_origin;
  const std::string& lowered_type = r.served_as.empty() ? r.model_type : r.served_as;
  const ModelTypeEntry& entry = d->model_types.at(lowered_type);
  // A config served as another model type keeps its own architectures (they name HF's class for it).
  for (size_t i = 0; r.served_as.empty() && i < cfg.architectures.size(); ++i) {
    bool ok = false;
    for (const auto& a : entry.architectures) ok |= a == cfg.architectures[i];
    if (!ok) {
      std::vector<std::string> q;
      for (const auto& a : entry.architectures) q.push_back(json_quote(a));
      err(cfg.architectures_path + "[" + std::to_string(i) + "]",
          "expected " + (q.size() == 1 ? q[0] : "one of " + join(q, ", ")) + " (model_type " + r.model_type + " in " + d->file +
              "), got " + json_quote(cfg.architectures[i]));
    }
  }

  // --- keys the family neither consumes nor ignores ----------------------------------------------
  // Ignored: the family's ignored_keys, the shared tool-only keys (Note [Tool-only keys]) and the
  // keys the user allowed by name (Note [User choices]); every allowed key must be in the config.
  std::set<std::string> allowed(choices.allow_unknown.begin(), choices.allow_unknown.end()), allowed_used;
  auto ignored = [&](const std::string& key) {
    if (d->ignored_keys.count(key) || tool_only_keys().count(key)) return true;
    if (allowed.count(key)) return allowed_used.insert(key), true;
    return false;
  };
  auto unknown_key = [&](const std::string& path, const std::string& key) {
    // A nested component (a VLM's vision_config) is a model of its own: say how to lower each part.
    if (is_component_key(key) && path.find('.', 2) == std::string::npos) {
      err(path, "unknown key " + json_quote(key) + " (a component of a composite config, not used by family " + d->family +
                    "; `add --component " + key + "` lowers that component, `add --component text_config` the text model alone)");
      return;
    }
    err(path, "unknown key " + json_quote(key) + " (not used by family " + d->family +
                  "; if it does not change the forward pass, add it to the descriptor's ignored_keys, or pass "
                  "`add --allow-unknown " + key + "` to accept it for this config knowingly)");
  };
  for (const auto& u : cfg.unrecognised) {
    // pruned_heads: HF drops the listed heads of the listed layers (fewer heads per layer than the
    // config says); an empty map prunes nothing.
    if (u.key == "pruned_heads") {
      if (u.value != "{}")
        err(u.path, "pruned attention heads (" + u.value + ") change the forward pass (some layers have fewer heads); no family "
                    "serves them: expected {}");
      continue;
    }
    if (!ignored(u.key)) unknown_key(u.path, u.key);
  }
  for (const auto& [name, fv] : cfg.fields) {
    if (name == "model_type" || name == "architectures") continue;
    if (!d->fields.count(name)) {
      std::string key = fv.path.substr(fv.path.rfind('.') + 1);
      if (!ignored(name) && !ignored(key)) unknown_key(fv.path, key);
    }
  }
  for (const auto& k : choices.allow_unknown)
    if (!allowed_used.count(k))
      diag.error(choices.file + ": $.allow_unknown: " + json_quote(k) + " is not an unknown key of " + cfg.file +
                 " (remove it: only keys the config has and the family does not know can be allowed)");
  // --- quantised checkpoints: never silently generated as bf16 ------------------------------------
  if (cfg.quantization) {
    const Quantization& q = *cfg.quantization;
    if (!choices.dequantize) {
      err(q.path, "quantised checkpoint (" + (q.method.empty() ? std::string("no quant_method") : "quant_method " + json_quote(q.method)) +
                      "): no kind serves " + (q.method.empty() ? std::string("it") : q.method) +
                      " weights yet; pass `add --dequantize` to generate bf16 tasks for this config knowingly "
                      "(recorded beside it and in the manifest)");
    } else {
      r.dequantized_from = q.method.empty() ? "unnamed" : q.method;
    }
  } else if (choices.dequantize) {
    diag.error(choices.file + ": $.dequantize: " + cfg.file + " has no quantization_config (remove dequantize)");
  }
  if (!cfg.rope_scaling_path.empty() && !d->fields.count("rope_scaling") && !d->ignored_keys.count("rope_scaling"))
    unknown_key(cfg.rope_scaling_path, "rope_scaling");
  // Multimodal rope sections change every rotary angle: a family whose descriptor does not read them
  // (Note [mrope sections] in parse.cc) must refuse them, not rotate by the temporal position alone.
  if (!cfg.rope_scaling.mrope_section.empty() && d->fields.count("rope_scaling") &&
      !d->identifiers.count("rope_scaling.mrope_section"))
    err(cfg.rope_scaling_path + ".mrope_section", "family " + d->family + " does not lower multimodal rope (its descriptor " + d->file + " never reads rope_scaling.mrope_section); " +
               "expected no mrope sections");

  // --- fields, defaults, constants (evaluated on demand, each once) ---------------------------------
  std::set<std::string> in_progress;
  std::function<std::optional<Value>(const std::string&)> lookup;
  auto eval_into = [&](const std::string& name, const Expr& e, const std::string& origin, const std::string& where) -> std::optional<Value> {
    if (in_progress.count(name)) throw GenError{"'" + name + "' depends on itself"};
    in_progress.insert(name);
    try {
      Value v = e.eval(lookup);
      in_progress.erase(name);
      r.values[name] = v;
      r.origin[name] = origin;
      return v;
    } catch (const GenError& ge) {
      in_progress.erase(name);
      if (!in_progress.empty()) throw;  // report once, at the outermost name
      if (!ge.message.empty()) err(where, ge.message);  // empty: the cause was already reported
      r.values[name] = std::monostate{};  // poison: do not report again
      r.origin[name] = "error";
      return std::nullopt;
    }
  };
  lookup = [&](const std::string& name) -> std::optional<Value> {
    auto done = r.values.find(name);
    if (done != r.values.end()) {
      if (r.origin[name] == "error") {
        if (in_progress.empty()) return std::nullopt;
        throw GenError{""};  // already reported; abandon the dependent value silently
      }
      return done->second;
    }
    auto fu = d->fields.find(name);
    if (fu != d->fields.end() && cfg.invalid.count(name)) {  // parse already reported it
      r.values[name] = std::monostate{};
      r.origin[name] = "error";
      if (!in_progress.empty()) throw GenError{""};
      return std::nullopt;
    }
    if (fu != d->fields.end() && name == "rope_scaling" && !cfg.rope_scaling_path.empty()) {
      // The object itself is parsed into cfg.rope_scaling (rope_scaling.* values); show its type here.
      r.values[name] = Value(cfg.rope_scaling.type);
      r.origin[name] = cfg.rope_scaling_path;
      return r.values[name];
    }
    if (fu != d->fields.end()) {
      const FieldValue* fv = cfg.get(name);
      if (fv && fv->value.index() != 0) {
        r.values[name] = fv->value;
        r.origin[name] = fv->path;
        return fv->value;
      }
      if (fu->second.required) {
        const FieldSpec* spec = find_field(name);
        err(fv ? fv->path : "$." + name, "expected " + expected_text(spec->type) + ", got " + (fv ? "null" : "nothing") +
                                             " (required by family " + d->family + ")");
        r.values[name] = std::monostate{};
        r.origin[name] = "error";
        if (!in_progress.empty()) throw GenError{""};
        return std::nullopt;
      }
      auto v = eval_into(name, fu->second.default_value, "default",
                         "$." + name + " (default \"" + fu->second.default_value.text() + "\" in " + d->file + ")");
      if (v && !value_fits(find_field(name)->type, *v)) {
        err("$." + name, "default \"" + fu->second.default_value.text() + "\" in " + d->file + " gives " + value_to_display(*v) +
                             ", expected " + expected_text(find_field(name)->type));
      }
      return v;
    }
    if (name.rfind("rope_scaling.", 0) == 0 && d->fields.count("rope_scaling")) {
      const RopeScaling& rs = cfg.rope_scaling;
      std::string k = name.substr(13);
      Value v;
      if (k == "type") v = rs.type;
      else if (k == "factor") v = rs.factor;
      else if (k == "low_freq_factor") v = rs.low_freq_factor;
      else if (k == "high_freq_factor") v = rs.high_freq_factor;
      else if (k == "original_max_position") v = rs.original_max_position;
      else if (k == "beta_fast") v = rs.beta_fast;
      else if (k == "beta_slow") v = rs.beta_slow;
      else if (k == "mscale_all_dim") v = rs.mscale_all_dim;
      else if (k == "long_factor") v = rs.long_factor;
      else if (k == "short_factor") v = rs.short_factor;
      else if (k == "attention_factor") v = rs.attention_factor;
      else if (k == "mrope_section") v = rs.mrope_section;
      else if (k == "mrope_interleaved") v = rs.mrope_interleaved;
      else return std::nullopt;
      r.values[name] = v;
      r.origin[name] = cfg.rope_scaling_path.empty() ? "default" : cfg.rope_scaling_path;
      return v;
    }
    auto over = entry.constants.find(name);
    if (over != entry.constants.end())
      return eval_into(name, over->second, "constant",
                       "constant " + name + " (\"" + over->second.text() + "\", model_type " + lowered_type + " in " + d->file + ")");
    auto c = d->constants.find(name);
    if (c != d->constants.end())
      return eval_into(name, c->second, "constant", "constant " + name + " (\"" + c->second.text() + "\" in " + d->file + ")");
    return std::nullopt;
  };

  // The pooling choice (Note [User choices]) sets the pooling fields of families that declare them;
  // the config itself cannot (HF configs do not say how a sentence-transformers model pools).
  for (const char* f : {"pooling_type", "pooling_normalize"})
    if (const FieldValue* fv = cfg.get(f)) err(fv->path, std::string(f) + " is a choice recorded beside the config, not a config key: use `add --pooling`");
  if (!choices.pooling.empty()) {
    if (!d->fields.count("pooling_type")) {
      diag.error(choices.file + ": $.pooling: family " + d->family + " has no pooled output to choose (remove pooling)");
    } else {
      r.values["pooling_type"] = Value(choices.pooling);
      r.origin["pooling_type"] = choices.file + " $.pooling";
      r.values["pooling_normalize"] = Value(choices.normalize);
      r.origin["pooling_normalize"] = choices.file + " $.normalize";
    }
  }
  // Note [Embedding heads]
  // The per-token heads of multi-vector and sparse embedding models are serving choices as well:
  // HF configs do not describe them (ColBERT's 128-d projection, BGE-M3's colbert_linear and
  // sparse_linear live outside config.json; vLLM asks for them by architecture or hf_overrides).
  // `add --multi-vector N --sparse --head-bias --drop-special-tokens` records them; they set the
  // fields multi_vector_dim, sparse_head, head_bias and drop_special_tokens of families that
  // declare them.
  for (const char* f : {"multi_vector_dim", "sparse_head", "head_bias", "drop_special_tokens"})
    if (const FieldValue* fv = cfg.get(f))
      err(fv->path, std::string(f) + " is a choice recorded beside the config, not a config key: use `add --multi-vector`, `--sparse`, "
                                     "`--head-bias`, `--drop-special-tokens`");
  if (choices.multi_vector > 0 || choices.sparse) {
    if (!d->fields.count("multi_vector_dim")) {
      diag.error(choices.file + ": $." + (choices.multi_vector > 0 ? "multi_vector" : "sparse") + ": family " + d->family +
                 " has no per-token heads to choose (remove multi_vector, sparse, head_bias, drop_special_tokens)");
    } else {
      r.values["multi_vector_dim"] = Value(choices.multi_vector);
      r.origin["multi_vector_dim"] = choices.file + " $.multi_vector";
      r.values["sparse_head"] = Value(choices.sparse);
      r.origin["sparse_head"] = choices.file + " $.sparse";
      r.values["head_bias"] = Value(choices.head_bias);
      r.origin["head_bias"] = choices.file + " $.head_bias";
      r.values["drop_special_tokens"] = Value(choices.drop_special_tokens);
      r.origin["drop_special_tokens"] = choices.file + " $.drop_special_tokens";
    }
  }
  // The served resolution (Note [User choices]) of vision encoders that declare serve_image_size.
  if (const FieldValue* fv = cfg.get("serve_image_size"))
    err(fv->path, "serve_image_size is a choice recorded beside the config, not a config key: use `add --image-size`");
  if (choices.image_size > 0) {
    if (!d->fields.count("serve_image_size")) {
      diag.error(choices.file + ": $.image_size: family " + d->family + " has no image resolution to choose (remove image_size)");
    } else {
      r.values["serve_image_size"] = Value(choices.image_size);
      r.origin["serve_image_size"] = choices.file + " $.image_size";
    }
  }
  for (const auto& [name, _] : d->fields) lookup(name);
  if (d->fields.count("rope_scaling"))
    for (const auto& n : rope_scaling_names()) lookup(n);
  for (const auto& [name, _] : d->constants) lookup(name);
  // The JSON path a field's value came from (its default or a constant: where the config would set it).
  auto path_of = [&](const std::string& field) {
    auto o = r.origin.find(field);
    return o != r.origin.end() && o->second.rfind("$", 0) == 0 ? o->second : "$." + field;
  };
  for (const auto& c : d->checks) {
    if (diag.errors().size() != errors_before || !cfg.invalid.empty()) break;  // checks would read values that failed
    try {
      Value ok = c.require.eval(lookup);
      if (ok != Value(true)) {
        auto it = r.values.find(c.field);
        err(path_of(c.field), "expected " + c.expected + ", got " + (it == r.values.end() ? "nothing" : value_to_display(it->second)) +
                                  (layout.sharded() ? " (layout " + layout.suffix() + " recorded in " + choices.file + ")" : ""));
      }
    } catch (const GenError& ge) {
      err("$." + c.field, ge.message + " (check \"" + c.require.text() + "\" in " + d->file + ")");
    }
  }
  if (diag.errors().size() != errors_before || !cfg.invalid.empty()) return std::nullopt;
  // The dtype the tasks serve (Note [User choices]): the checkpoint's, or the user's choice.
  const std::string declared = std::get<std::string>(r.values.at("torch_dtype"));
  const std::string dtype_path = path_of("torch_dtype");
  if (!choices.dtype.empty()) {
    if (choices.dtype == declared) {
      diag.error(choices.file + ": $.dtype: " + cfg.file + " already has torch_dtype " + json_quote(declared) + " (remove dtype)");
      return std::nullopt;
    }
    r.dtype = choices.dtype;
    r.dtype_from = declared;
  } else if (declared == "float32") {
    const bool defaulted = r.origin.count("torch_dtype") && r.origin["torch_dtype"] == "default";
    err(dtype_path, std::string("float32 checkpoint") + (defaulted ? " (the config names no dtype; " + d->file + "'s default)" : "") +
                        ": no kind serves fp32 weights (the kernels serve \"bfloat16\" and \"float16\"); "
                    "pass `add --dtype bfloat16` (or float16) to generate 16-bit tasks for it knowingly, as vLLM's "
                    "dtype=\"auto\" serves fp32 checkpoints (recorded beside it and in the manifest)");
    return std::nullopt;
  } else {
    r.dtype = declared;
  }
  return r;
}

}  // namespace fk::gen
