// The parse pass (see fk/gen/config.h): strict JSON -> ParsedConfig. Messages follow
// `<file>: <json path>: expected <what>, got <value>`.
#include <cctype>
#include <optional>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "fk/gen/config.h"
#include "fk/gen/format.h"

namespace fk::gen {

using nlohmann::json;

std::string short_json(const std::string& dumped) {
  if (dumped.size() <= 48) return dumped;
  return dumped.substr(0, 45) + "...";
}

namespace {

// Note [Python JSON literals]
// Python's json module writes NaN, Infinity and -Infinity as bare literals, which are not JSON.
// Configs saved by HF tools carry them (in keys no forward pass reads, usually), so before
// parsing, each such literal outside a string becomes a marked string; a marked string is shown
// as the literal it was, and a field that needs a number reports it as a non-finite number.
constexpr const char* kNonFiniteMark = "\x01" "fk-nonfinite:";  // the decoded value of the mark

std::string mark_nonfinite_literals(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false, escaped = false;
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool done = false;
    for (const char* lit : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(lit);
      if (text.compare(i, n, lit) == 0 && (i == 0 || !ident_char(text[i - 1])) &&
          (i + n == text.size() || !ident_char(text[i + n]))) {
        out += "\"\\u0001fk-nonfinite:";  // a JSON escape: the string starts with U+0001
        out += lit;
        out += "\"";
        i += n - 1;
        done = true;
        break;
      }
    }
    if (!done) out += c;
  }
  return out;
}

/// The literal a marked string stands for (NaN, Infinity, -Infinity), or nullopt.
std::optional<std::string> nonfinite_literal(const json& j) {
  if (!j.is_string()) return std::nullopt;
  const std::string& v = j.get_ref<const std::string&>();
  const std::string mark = kNonFiniteMark;
  if (v.rfind(mark, 0) != 0) return std::nullopt;
  return v.substr(mark.size());
}

std::string got(const json& j) {
  if (auto lit = nonfinite_literal(j)) return *lit;
  std::string d = j.dump();
  // Marked literals nested in objects and arrays print as the literals they were.
  const std::string mark = "\"\\u0001fk-nonfinite:";
  for (size_t p; (p = d.find(mark)) != std::string::npos;) {
    const size_t end = d.find('"', p + mark.size());
    d = d.substr(0, p) + d.substr(p + mark.size(), end - p - mark.size()) + d.substr(end + 1);
  }
  return short_json(d);
}

class ConfigParser {
 public:
  ConfigParser(ParsedConfig& out, Diagnostics& diag) : out_(out), diag_(diag) {}

  void object(const json& obj, const std::string& prefix, bool nested) {
    for (const auto& [key, val] : obj.items()) {
      std::string path = prefix + "." + key;
      if (key == "text_config" && !nested) {
        if (val.is_null()) continue;
        if (!val.is_object()) {
          err(path, "expected object or null, got " + got(val));
          continue;
        }
        continue;  // handled after the top level, so nested fields take precedence
      }
      if (key == "_name_or_path") {
        if (val.is_string()) out_.name_or_path = val.get<std::string>();
        out_.unrecognised.push_back({key, path, got(val)});
        continue;
      }
      if (key == "quantization_config") {  // never dropped silently (resolve decides)
        if (val.is_null()) continue;
        Quantization q;
        q.path = path;
        if (val.is_object()) {
          if (val.contains("quant_method") && val["quant_method"].is_string()) q.method = val["quant_method"].get<std::string>();
          std::vector<std::string> parts;
          for (const auto& [k, x] : val.items()) parts.push_back(k + " " + got(x));
          std::string d;
          for (const auto& p : parts) d += (d.empty() ? "" : ", ") + p;
          q.detail = d;
        } else {
          q.detail = got(val);
        }
        out_.quantization = q;
        continue;
      }
      const FieldSpec* spec = find_field(key);
      if (!spec) {
        out_.unrecognised.push_back({key, path, got(val)});
        continue;
      }
      // Two spellings of one field at the same level are ambiguous unless they agree (Gemma 2's
      // configs carry both hidden_act and hidden_activation, with one value).
      std::string level_key = prefix + "|" + spec->name;
      auto seen = seen_.find(level_key);
      if (seen != seen_.end()) {
        if (seen_values_.at(level_key) == val) continue;
        out_.invalid.insert(spec->name);
        err(path, "expected one spelling of " + spec->name + " (or two that agree), got both " + seen->second + " = " +
                      got(seen_values_.at(level_key)) + " and " + path + " = " + got(val));
        continue;
      }
      seen_[level_key] = path;
      seen_values_[level_key] = val;
      field(*spec, val, path);
    }
    if (!nested && obj.contains("text_config") && obj["text_config"].is_object())
      object(obj["text_config"], prefix + ".text_config", true);
  }

 private:
  void err(const std::string& path, const std::string& what) { diag_.error(out_.file + ": " + path + ": " + what); }

  void field(const FieldSpec& spec, const json& v, const std::string& path) {
    auto bad = [&] {
      out_.invalid.insert(spec.name);
      if (auto lit = nonfinite_literal(v))
        return err(path, "expected " + expected_text(spec.type) + ", got " + *lit +
                             " (a non-finite number, as Python's json writes it; this field needs a finite value)");
      err(path, "expected " + expected_text(spec.type) + ", got " + got(v)); };
    Value value;
    switch (spec.type) {
      case FieldType::kPosInt:
      case FieldType::kNonNegInt:
      case FieldType::kIntOrNull:
      case FieldType::kAnyIntOrNull: {
        if (v.is_null() && (spec.type == FieldType::kIntOrNull || spec.type == FieldType::kAnyIntOrNull)) {
          value = std::monostate{};
          break;
        }
        if (!v.is_number_integer()) return bad();
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return bad();
        int64_t x = v.get<int64_t>();
        if (spec.type != FieldType::kAnyIntOrNull && (x < 0 || (x == 0 && spec.type != FieldType::kNonNegInt))) return bad();
        value = x;
        break;
      }
      case FieldType::kNumberOrNull:
      case FieldType::kPosNumber: {
        if (v.is_null() && spec.type == FieldType::kNumberOrNull) {
          value = std::monostate{};
          break;
        }
        if (!v.is_number()) return bad();
        double x = v.get<double>();
        if (!(x > 0)) return bad();
        value = x;
        break;
      }
      case FieldType::kBool:
        if (!v.is_boolean()) return bad();
        value = v.get<bool>();
        break;
      case FieldType::kString:
        if (!v.is_string()) return bad();
        value = v.get<std::string>();
        break;
      case FieldType::kDType: {
        static const std::set<std::string> ok = {"bfloat16", "float16", "float32"};
        if (!v.is_string() || !ok.count(v.get<std::string>())) return bad();
        value = v.get<std::string>();
        break;
      }
      case FieldType::kStringList: {
        if (!v.is_array()) return bad();
        std::vector<std::string> items;
        for (size_t i = 0; i < v.size(); ++i) {
          if (!v[i].is_string()) {
            out_.invalid.insert(spec.name);
            err(path + "[" + std::to_string(i) + "]", "expected string, got " + got(v[i]));
            return;
          }
          items.push_back(v[i].get<std::string>());
        }
        if (spec.name == "architectures") {
          out_.architectures = items;
          out_.architectures_path = path;
        }
        std::string joined;
        for (const auto& s : items) joined += (joined.empty() ? "" : ",") + s;
        value = joined;
        break;
      }
      case FieldType::kIntList: {
        if (!v.is_array()) return bad();
        std::string joined;
        for (size_t i = 0; i < v.size(); ++i) {
          if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0) {
            out_.invalid.insert(spec.name);
            err(path + "[" + std::to_string(i) + "]", "expected non-negative integer, got " + got(v[i]));
            return;
          }
          joined += (i ? "," : "") + std::to_string(v[i].get<int64_t>());
        }
        value = joined;
        break;
      }
      case FieldType::kRopeScaling:
        rope(v, path);
        return;
    }
    out_.fields[spec.name] = FieldValue{value, path};
  }

  void rope(const json& v, const std::string& path) {
    size_t before = diag_.errors().size();
    rope_body(v, path);
    if (diag_.errors().size() != before) out_.invalid.insert("rope_scaling");
  }

  void rope_body(const json& v, const std::string& path) {
    out_.rope_scaling = RopeScaling{};
    out_.rope_scaling_path = path;
    if (v.is_null()) return;
    if (!v.is_object()) return err(path, "expected object or null, got " + got(v));
    const auto& known = rope_scaling_keys();
    std::string known_list;
    for (const auto& [k, _] : known) known_list += (known_list.empty() ? "" : ", ") + json_quote(k);
    // `rope_type` (current) or `type` (legacy); both must agree when both are present.
    std::string type;
    std::string type_path;
    for (const char* k : {"rope_type", "type"}) {
      if (!v.contains(k)) continue;
      const json& t = v[k];
      std::string p = path + "." + k;
      if (!t.is_string()) return err(p, "expected one of " + known_list + ", got " + got(t));
      if (!type.empty() && t.get<std::string>() != type)
        return err(p, "expected the same value as " + type_path + " (" + json_quote(type) + "), got " + got(t));
      type = t.get<std::string>();
      type_path = p;
    }
    if (type.empty()) return err(path + ".rope_type", "expected one of " + known_list + ", got nothing");
    if (type == "su") type = "longrope";  // Phi-3's first name for LongRoPE (transformers renames it)
    auto it = known.find(type);
    if (it == known.end()) return err(type_path, "expected one of " + known_list + ", got " + json_quote(type));
    RopeScaling r;
    r.type = type == "default" || type == "mrope" ? "none" : type;
    const auto& keys = it->second;
    for (const auto& [k, val] : v.items()) {
      if (k == "rope_type" || k == "type") continue;
      bool ok = false;
      for (const auto& want : keys) ok |= (want == k);
      if (!ok) {
        std::string list;
        for (const auto& want : keys) list += (list.empty() ? "" : ", ") + want;
        err(path + "." + k, "unknown key (rope type " + json_quote(type) + " reads " + (list.empty() ? "no keys" : list) +
                                "; other scaling parameters would change the forward pass)");
      }
    }
    auto number = [&](const char* k, double* dst, bool required, double dflt) {
      std::string p = path + "." + k;
      if (!v.contains(k)) {
        if (required) err(p, "expected positive number, got nothing");
        *dst = dflt;
        return;
      }
      const json& x = v[k];
      if (!x.is_number() || !(x.get<double>() > 0)) return err(p, "expected positive number, got " + got(x));
      *dst = x.get<double>();
    };
    auto integer = [&](const char* k, int64_t* dst) {
      std::string p = path + "." + k;
      if (!v.contains(k)) return err(p, "expected positive integer, got nothing");
      const json& x = v[k];
      if (!x.is_number_integer() || x.get<int64_t>() <= 0) return err(p, "expected positive integer, got " + got(x));
      *dst = x.get<int64_t>();
    };
    // A list of positive numbers, held comma-joined in canonical spelling.
    auto factors = [&](const char* k, std::string* dst) {
      std::string p = path + "." + k;
      if (!v.contains(k)) return err(p, "expected a non-empty list of positive numbers, got nothing");
      const json& x = v[k];
      if (!x.is_array() || x.empty()) return err(p, "expected a non-empty list of positive numbers, got " + got(x));
      std::string joined;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!x[i].is_number() || !(x[i].get<double>() > 0))
          return err(p + "[" + std::to_string(i) + "]", "expected positive number, got " + got(x[i]));
        joined += (i ? "," : "") + canonical_double(x[i].get<double>());
      }
      *dst = joined;
    };
    // Note [mrope sections]
    // Qwen2-VL's multimodal rope (vLLM MRotaryEmbedding, HF apply_multimodal_rotary_pos_emb): each token
    // has a temporal, a height and a width position (text tokens: three equal ones); rotary frequency j
    // takes its angle from the temporal position for j < s0, the height one for j < s0 + s1, the width
    // one after, with mrope_section = [s0, s1, s2] summing to rotary_dim / 2. mrope_interleaved (Qwen3-VL,
    // HF apply_interleaved_mrope): frequency j takes the height position when j % 3 == 1 and j < 3 s1,
    // the width one when j % 3 == 2 and j < 3 s2, else the temporal one. The sum is checked where
    // rotary_dim is known (kind check "mrope").
    if (v.contains("mrope_section")) {
      const std::string p = path + ".mrope_section";
      const json& x = v["mrope_section"];
      if (!x.is_array() || x.size() != 3)
        return err(p, "expected a list of three non-negative integers (the temporal, height and width sections), got " + got(x));
      std::string joined;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!x[i].is_number_integer() || x[i].get<int64_t>() < 0)
          return err(p + "[" + std::to_string(i) + "]", "expected non-negative integer, got " + got(x[i]));
        joined += (i ? "," : "") + std::to_string(x[i].get<int64_t>());
      }
      r.mrope_section = joined;
    } else if (type == "mrope") {
      return err(path + ".mrope_section", "expected a list of three non-negative integers (rope type \"mrope\"), got nothing");
    }
    if (v.contains("mrope_interleaved")) {
      const json& x = v["mrope_interleaved"];
      if (!x.is_boolean()) return err(path + ".mrope_interleaved", "expected boolean, got " + got(x));
      if (x.get<bool>() && r.mrope_section.empty())
        return err(path + ".mrope_interleaved", "expected false or nothing without mrope_section, got true");
      r.mrope_interleaved = x.get<bool>();
    }
    if (type == "longrope") {
      // Phi-3/Phi-4 LongRoPE (vLLM Phi3LongRoPEScaledRotaryEmbedding, HF _compute_longrope_parameters):
      // original_max_position_embeddings sits at the top level in Phi-3 configs, so here it is
      // optional (0: the descriptor takes the top-level one); factor is read by HF only when no
      // original length is known, and attention_factor overrides the derived cos/sin scale.
      factors("long_factor", &r.long_factor);
      factors("short_factor", &r.short_factor);
      number("attention_factor", &r.attention_factor, false, 0);
      number("factor", &r.factor, false, 0);
      if (v.contains("original_max_position_embeddings")) integer("original_max_position_embeddings", &r.original_max_position);
    } else if (type == "linear") {
      number("factor", &r.factor, true, 0);
    } else if (type == "llama3") {
      number("factor", &r.factor, true, 0);
      number("low_freq_factor", &r.low_freq_factor, true, 0);
      number("high_freq_factor", &r.high_freq_factor, true, 0);
      integer("original_max_position_embeddings", &r.original_max_position);
    } else if (type == "yarn") {
      number("factor", &r.factor, true, 0);
      integer("original_max_position_embeddings", &r.original_max_position);
      number("beta_fast", &r.beta_fast, false, 32);
      number("beta_slow", &r.beta_slow, false, 1);
      // truncate (HF, vLLM; default true) rounds the correction range to whole dimensions;
      // gpt-oss ships false. The untruncated form is its own scaling type (kinds: yarn_notrunc).
      if (v.contains("truncate")) {
        const json& t = v["truncate"];
        if (!t.is_boolean()) return err(path + ".truncate", "expected boolean, got " + got(t));
        if (!t.get<bool>()) r.type = "yarn_notrunc";
      }
      // DeepSeek's YaRN (vLLM DeepseekScalingRotaryEmbedding; HF: attention_factor from the two
      // keys) multiplies cos/sin by yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
      // and the softmax scale by yarn_mscale(factor, mscale_all_dim)^2 (the descriptor's business,
      // through rope_scaling.mscale_all_dim). Only equal keys are lowered: the cos/sin factor is
      // then 1 (type deepseek_yarn), as in every released DeepSeek-V2/V3/R1 and Kimi-K2 config.
      if (v.contains("mscale") || v.contains("mscale_all_dim")) {
        double ms = 0, msa = 0;
        number("mscale", &ms, true, 0);
        number("mscale_all_dim", &msa, true, 0);
        if (ms > 0 && msa > 0 && ms != msa)
          return err(path + ".mscale", "expected the same value as " + path + ".mscale_all_dim (" + canonical_double(msa) +
                                           "; other ratios scale cos/sin and are not lowered), got " + canonical_double(ms));
        if (r.type == "yarn_notrunc")
          return err(path + ".truncate", "expected true or nothing with mscale/mscale_all_dim (DeepSeek YaRN), got false");
        if (ms > 0 && msa > 0) {
          r.type = "deepseek_yarn";
          r.mscale_all_dim = msa;
        }
      }
    }
    out_.rope_scaling = r;
  }

  ParsedConfig& out_;
  Diagnostics& diag_;
  std::map<std::string, std::string> seen_;
  std::map<std::string, json> seen_values_;  // the value under each seen_ key
};

}  // namespace

UserChoices parse_user_choices(const std::string& file, const std::string& text, Diagnostics& diag) {
  UserChoices c;
  c.file = file;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    diag.error(file + ": invalid JSON: " + json_error_text(e.what()));
    return c;
  }
  if (!root.is_object()) {
    diag.error(file + ": $: expected object with dequantize, allow_unknown, dtype, served_as, pooling, normalize, image_size, multi_vector, sparse, "
               "head_bias, drop_special_tokens, component and/or parallel, got " +
               got(root));
    return c;
  }
  for (const auto& [k, v] : root.items()) {
    const std::string path = "$." + k;
    if (k == "dequantize") {
      if (!v.is_boolean()) diag.error(file + ": " + path + ": expected boolean, got " + got(v));
      else c.dequantize = v.get<bool>();
    } else if (k == "allow_unknown") {
      if (!v.is_array()) {
        diag.error(file + ": " + path + ": expected array of config keys, got " + got(v));
        continue;
      }
      std::set<std::string> keys;
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string() || v[i].get<std::string>().empty())
          diag.error(file + ": " + path + "[" + std::to_string(i) + "]: expected a config key, got " + got(v[i]));
        else keys.insert(v[i].get<std::string>());
      }
      c.allow_unknown.assign(keys.begin(), keys.end());
    } else if (k == "dtype") {
      if (!v.is_string() || (v.get<std::string>() != "bfloat16" && v.get<std::string>() != "float16"))
        diag.error(file + ": " + path + ": expected \"bfloat16\" or \"float16\", got " + got(v));
      else c.dtype = v.get<std::string>();
    } else if (k == "served_as") {
      if (!v.is_string() || v.get<std::string>().empty()) diag.error(file + ": " + path + ": expected a model_type, got " + got(v));
      else c.served_as = v.get<std::string>();
    } else if (k == "pooling") {
      if (!v.is_string() || (v.get<std::string>() != "cls" && v.get<std::string>() != "mean" && v.get<std::string>() != "last"))
        diag.error(file + ": " + path + ": expected \"cls\", \"mean\" or \"last\", got " + got(v));
      else c.pooling = v.get<std::string>();
    } else if (k == "normalize") {
      if (!v.is_boolean()) diag.error(file + ": " + path + ": expected boolean, got " + got(v));
      else c.normalize = v.get<bool>();
    } else if (k == "image_size") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 8192)
        diag.error(file + ": " + path + ": expected an image size in pixels (1 to 8192), got " + got(v));
      else c.image_size = v.get<int64_t>();
    } else if (k == "component") {
      if (!v.is_string() || !is_component_key(v.get<std::string>()))
        diag.error(file + ": " + path + ": expected the key of a nested component config (e.g. \"vision_config\"), got " + got(v));
      else c.component = v.get<std::string>();
    } else if (k == "multi_vector") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65536)
        diag.error(file + ": " + path + ": expected the width of the token vectors (1 to 65536), got " + got(v));
      else c.multi_vector = v.get<int64_t>();
    } else if (k == "parallel") {
      std::set<ParallelLayout> seen;
      if (!v.is_array()) diag.error(file + ": " + path + ": expected an array of {\"tp\": n, \"ep\": m} layouts, got " + got(v));
      for (size_t i = 0; v.is_array() && i < v.size(); ++i) {
        const std::string at = path + "[" + std::to_string(i) + "]";
        const json& l = v[i];
        ParallelLayout layout;
        bool ok = l.is_object() && !l.empty();
        if (ok)
          for (auto it = l.begin(); it != l.end(); ++it) {
            const std::string& lk = it.key();
            const json& lv = it.value();
            const int64_t n = lv.is_number_integer() ? lv.template get<int64_t>() : 0;
            if ((lk != "tp" && lk != "ep") || n < 1 || n > 64) ok = false;
            else (lk == "tp" ? layout.tp : layout.ep) = n;
          }
        if (!ok) {
          diag.error(file + ": " + at + ": expected {\"tp\": n} and/or {\"ep\": m} with integers 1 to 64, got " + got(l));
          continue;
        }
        if (!layout.sharded()) diag.error(file + ": " + at + ": a layout with tp and ep 1 is the unsharded model, always generated (remove it)");
        else if (layout.tp > 1 && layout.ep > 1 && layout.tp != layout.ep)
          diag.error(file + ": " + at + ": tp " + std::to_string(layout.tp) + " and ep " + std::to_string(layout.ep) +
                     " on one job: expected equal sizes (the experts spread over the tensor-parallel ranks) or one of them 1");
        else if (!seen.insert(layout).second) diag.error(file + ": " + at + ": layout " + layout.suffix() + " twice");
      }
      c.parallel.assign(seen.begin(), seen.end());
    } else if (k == "sparse" || k == "head_bias" || k == "drop_special_tokens") {
      if (!v.is_boolean()) diag.error(file + ": " + path + ": expected boolean, got " + got(v));
      else (k == "sparse" ? c.sparse : k == "head_bias" ? c.head_bias : c.drop_special_tokens) = v.get<bool>();
    } else {
      diag.error(file + ": " + path + ": unknown key " + json_quote(k) +
                  " (expected dequantize, allow_unknown, dtype, served_as, pooling, normalize, image_size, multi_vector, sparse, head_bias, "
                 "drop_special_tokens, component, parallel)");
    }
  }
  if (c.normalize && c.pooling.empty() && root.contains("normalize"))
    diag.error(file + ": $.normalize: normalize applies to a pooling choice; add pooling (\"cls\", \"mean\" or \"last\")");
  for (const char* k : {"head_bias", "drop_special_tokens"})
    if (root.contains(k) && root[k] == true && c.multi_vector == 0 && !c.sparse)
      diag.error(file + ": $." + std::string(k) + ": " + k + " applies to the token heads; add multi_vector and/or sparse");
  return c;
}

bool is_component_key(const std::string& key) { return std::regex_match(key, std::regex("[a-z][a-z0-9_]*_config")); }

std::string component_model_type(const std::string& composite_type, const std::string& key, const std::string& own_type) {
  if (!own_type.empty() && own_type != composite_type) return own_type;
  std::string k = key;
  if (k.size() > 7 && k.compare(k.size() - 7, 7, "_config") == 0) k.resize(k.size() - 7);
  return composite_type + "_" + k;
}

std::string user_choices_text(const UserChoices& c) {
  json j = json::object();
  if (!c.allow_unknown.empty()) j["allow_unknown"] = c.allow_unknown;
  if (c.dequantize) j["dequantize"] = true;
  if (!c.dtype.empty()) j["dtype"] = c.dtype;
  if (!c.served_as.empty()) j["served_as"] = c.served_as;
  if (!c.pooling.empty()) j["pooling"] = c.pooling;
  if (c.normalize) j["normalize"] = true;
  if (c.image_size > 0) j["image_size"] = c.image_size;
  if (c.multi_vector > 0) j["multi_vector"] = c.multi_vector;
  if (c.sparse) j["sparse"] = true;
  if (c.head_bias) j["head_bias"] = true;
  if (c.drop_special_tokens) j["drop_special_tokens"] = true;
  if (!c.component.empty()) j["component"] = c.component;
  if (!c.parallel.empty()) {
    json layouts = json::array();
    for (const ParallelLayout& l : c.parallel) {
      json o = json::object();
      if (l.tp > 1) o["tp"] = l.tp;
      if (l.ep > 1) o["ep"] = l.ep;
      layouts.push_back(o);
    }
    j["parallel"] = layouts;
  }
  return j.dump(2) + "\n";
}

std::string ParallelLayout::suffix() const {
  std::string s;
  if (tp > 1) s = "tp" + std::to_string(tp);
  if (ep > 1) s += (s.empty() ? "" : "_") + std::string("ep") + std::to_string(ep);
  return s;
}

std::optional<ParallelLayout> parse_layout(const std::string& text) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex("(?:tp([1-9][0-9]?))?(?:_?ep([1-9][0-9]?))?")) || text.empty()) return std::nullopt;
  ParallelLayout l;
  if (m[1].matched) l.tp = std::stoll(m[1].str());
  if (m[2].matched) l.ep = std::stoll(m[2].str());
  if (l.tp > 64 || l.ep > 64) return std::nullopt;
  return l;
}

std::string python_json_text(const std::string& text) { return mark_nonfinite_literals(text); }

std::optional<ParsedConfig> parse_config(const std::string& file, const std::string& text, Diagnostics& diag, bool whole_config,
                                         const std::string& component) {
  json root;
  try {
    root = json::parse(mark_nonfinite_literals(text));
  } catch (const json::parse_error& e) {
    diag.error(file + ": invalid JSON: " + json_error_text(e.what()));
    return std::nullopt;
  }
  if (!root.is_object()) {
    diag.error(file + ": $: expected object, got " + got(root));
    return std::nullopt;
  }
  // Neither a model type nor an architecture anywhere: not a transformers model config (a
  // diffusers component, a timm model). Say that once, not every field that then looks wrong.
  auto names_family = [](const json& o) { return o.is_object() && (o.contains("model_type") || o.contains("architectures")); };
  if (whole_config && !names_family(root) && !(root.contains("text_config") && names_family(root["text_config"]))) {
    diag.error(file + ": $.model_type: expected a model type, got nothing, and no architectures to tell the family by " +
               "(diffusers component and timm configs name neither; no descriptor reads those yet)");
    return std::nullopt;
  }
  ParsedConfig out;
  out.file = file;
  if (!component.empty()) {
    // Note [Config components]
    // A composite config (SiglipConfig, a VLM's) nests each component's config under a key
    // (vision_config, text_config); `add --component vision_config` lowers that component alone, as
    // transformers builds SiglipVisionModel from SiglipConfig.vision_config. The component's keys
    // are the config's; the top level's other keys describe other components and are not read,
    // except the dtype, which a composite names once for all its parts.
    //
    // The component's model type is its own `model_type`, as transformers' sub-config classes
    // name themselves: where a component leaves it out (Qwen2.5-VL's vision_config) or repeats
    // the composite's (Qwen2-VL's and Qwen3-VL's vision_config say "qwen2_vl" / "qwen3_vl", which
    // transformers ignores in favour of the sub-config class), it is the composite's type joined
    // to the key without "_config", the name transformers gives those classes (qwen2_vl +
    // vision_config -> qwen2_vl_vision).
    //
    // Legacy layout (Qwen2-VL's and Qwen2.5-VL's configs as transformers 4.4x wrote them): no
    // text_config, the text model's keys at the top level. transformers builds the text sub-config
    // from those keys; so does `--component text_config` here: every top-level key except the other
    // components (objects under *_config keys), `architectures` (which names the composite) and the
    // token ids only the composite reads (image_token_id, video_token_id, vision_start_token_id,
    // vision_end_token_id, vision_token_id: where image tokens go, not how text is computed).
    const bool legacy_text = component == "text_config" && !root.contains(component) && root.contains("hidden_size") &&
                             root.contains("num_hidden_layers") && root.contains("model_type") && root["model_type"].is_string();
    if (!legacy_text && (!root.contains(component) || !root[component].is_object())) {
      diag.error(file + ": $." + component + ": expected an object (the component that `add --component " + component +
                 "` lowers), got " + (root.contains(component) ? got(root[component]) : "nothing"));
      return std::nullopt;
    }
    json part = legacy_text ? json::object() : root[component];
    if (legacy_text) {
      static const std::set<std::string> composite_only = {"architectures", "image_token_id", "video_token_id",
                                                           "vision_start_token_id", "vision_end_token_id", "vision_token_id",
                                                           "model_type"};
      for (const auto& [k, v] : root.items())
        if (!composite_only.count(k) && !(is_component_key(k) && v.is_object())) part[k] = v;
    }
    for (const char* k : {"torch_dtype", "dtype"})
      if (root.contains(k) && !part.contains("torch_dtype") && !part.contains("dtype")) part["torch_dtype"] = root[k];
    // The composite's tie_word_embeddings says whether the text model's LM head is its embedding
    // (Qwen3-VL's small checkpoints set it at the top level only): the text component inherits it.
    if (component == "text_config" && root.contains("tie_word_embeddings") && !part.contains("tie_word_embeddings"))
      part["tie_word_embeddings"] = root["tie_word_embeddings"];
    const bool root_typed = root.contains("model_type") && root["model_type"].is_string();
    if (root_typed && (!part.contains("model_type") || part["model_type"].is_string()))  // a non-string one is refused below
      part["model_type"] = component_model_type(
          root["model_type"].get<std::string>(), component,
          part.contains("model_type") && part["model_type"].is_string() ? part["model_type"].get<std::string>() : "");
    if (!names_family(part)) {
      diag.error(file + ": $." + component + ".model_type: expected the component's model type, got nothing (and no top-level " +
                 "model_type to derive it from)");
      return std::nullopt;
    }
    ConfigParser(out, diag).object(part, legacy_text ? "$" : "$." + component, false);  // paths as in the file
    return out;
  }
  ConfigParser(out, diag).object(root, "$", false);
  return out;
}

}  // namespace fk::gen
