// Strict descriptor loader (see fk/gen/descriptor.h, docs/descriptors.md).
#include "fk/gen/descriptor.h"

#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

#include "fk/gen/config.h"
#include "fk/gen/format.h"
#include "fk/gen/kinds.h"

namespace fk::gen {

using nlohmann::json;

const std::vector<std::string>& rope_scaling_names() {
  static const std::vector<std::string> names = {
      "rope_scaling.beta_fast",        "rope_scaling.beta_slow", "rope_scaling.factor",
      "rope_scaling.high_freq_factor", "rope_scaling.low_freq_factor", "rope_scaling.mscale_all_dim",
      "rope_scaling.original_max_position", "rope_scaling.type", "rope_scaling.long_factor",
      "rope_scaling.short_factor", "rope_scaling.attention_factor", "rope_scaling.mrope_section",
      "rope_scaling.mrope_interleaved"};
  return names;
}

namespace {

std::string got(const json& j) { return short_json(j.dump()); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

class Loader {
 public:
  Loader(Descriptor& d, Diagnostics& diag) : d_(d), diag_(diag) {}

  void load(const json& root) {
    if (!root.is_object()) return err("$", "expected object, got " + got(root));
    static const std::set<std::string> top = {"checks", "constants",    "doc",         "family", "fields",
                                              "forward", "ignored_keys", "model_types", "modules"};
    for (const auto& [k, v] : root.items())
      if (!top.count(k))
        err("$." + k, "unknown key (known: checks, constants, doc, family, fields, forward, ignored_keys, model_types, modules)");
    d_.family = str(root, "family", "$", true);
    d_.doc = str(root, "doc", "$", false);
    model_types(root);
    fields(root);
    ignored(root);
    constants(root);
    checks(root);
    forward(root);
    modules(root);
    validate_names();
  }

 private:
  void err(const std::string& path, const std::string& what) { diag_.error(d_.file + ": " + path + ": " + what); }

  std::string str(const json& obj, const char* key, const std::string& path, bool required) {
    if (!obj.contains(key)) {
      if (required) err(path + "." + key, "expected string, got nothing");
      return "";
    }
    const json& v = obj[key];
    if (!v.is_string()) {
      err(path + "." + key, "expected string, got " + got(v));
      return "";
    }
    return v.get<std::string>();
  }

  std::optional<Expr> expr(const json& v, const std::string& path) {
    if (v.is_boolean()) return Expr::literal(v.get<bool>());
    if (v.is_null()) return Expr::literal(std::monostate{});
    if (v.is_number_integer()) return Expr::literal(v.get<int64_t>());
    if (v.is_number()) return Expr::literal(v.get<double>());
    if (!v.is_string()) {
      err(path, "expected expression (string), number, boolean or null, got " + got(v));
      return std::nullopt;
    }
    try {
      Expr e = Expr::parse(v.get<std::string>());
      exprs_.push_back({e, path, false});
      return e;
    } catch (const GenError& e) {
      err(path, e.message);
      return std::nullopt;
    }
  }

  std::map<std::string, Expr> expr_map(const json& v, const std::string& path) {
    std::map<std::string, Expr> out;
    if (!v.is_object()) {
      err(path, "expected object, got " + got(v));
      return out;
    }
    for (const auto& [k, x] : v.items())
      if (auto e = expr(x, path + "." + k)) out.emplace(k, *e);
    return out;
  }

  void model_types(const json& root) {
    if (!root.contains("model_types") || !root["model_types"].is_object() || root["model_types"].empty())
      return err("$.model_types", "expected non-empty object, got " + (root.contains("model_types") ? got(root["model_types"]) : "nothing"));
    for (const auto& [mt, v] : root["model_types"].items()) {
      std::string p = "$.model_types." + mt;
      ModelTypeEntry e;
      e.model_type = mt;
      if (!v.is_object()) {
        err(p, "expected object, got " + got(v));
        continue;
      }
      for (const auto& [k, x] : v.items()) {
        if (k == "architectures") {
          if (!x.is_array()) {
            err(p + ".architectures", "expected array of strings, got " + got(x));
            continue;
          }
          for (const auto& a : x) {
            if (a.is_string()) e.architectures.push_back(a.get<std::string>());
            else err(p + ".architectures", "expected array of strings, got " + got(x));
          }
        } else if (k == "constants") {
          e.constants = expr_map(x, p + ".constants");
        } else {
          err(p + "." + k, "unknown key (known: architectures, constants)");
        }
      }
      d_.model_types.emplace(mt, e);
    }
  }

  void fields(const json& root) {
    if (!root.contains("fields") || !root["fields"].is_object())
      return err("$.fields", "expected object, got " + (root.contains("fields") ? got(root["fields"]) : "nothing"));
    for (const auto& [name, v] : root["fields"].items()) {
      std::string p = "$.fields." + name;
      const FieldSpec* spec = find_field(name);
      if (!spec || spec->name != name) {
        err(p, spec ? "expected the canonical field name " + json_quote(spec->name) + ", got the alias " + json_quote(name)
                    : "unknown field (not in the field table, generator/src/core/fields.cc)");
        continue;
      }
      FieldUse use;
      use.field = name;
      if (!v.is_object()) {
        err(p, "expected object with \"required\": true or a \"default\", got " + got(v));
        continue;
      }
      for (const auto& [k, x] : v.items()) {
        if (k == "required") {
          if (!x.is_boolean()) err(p + ".required", "expected boolean, got " + got(x));
          else use.required = x.get<bool>();
        } else if (k == "default") {
          if (auto e = expr(x, p + ".default")) use.default_value = *e;
        } else if (k != "doc") {
          err(p + "." + k, "unknown key (known: default, doc, required)");
        }
      }
      if (use.required == v.contains("default"))
        err(p, "expected exactly one of \"required\": true and \"default\", got " + got(v));
      d_.fields.emplace(name, use);
    }
    if (!d_.fields.count("torch_dtype")) err("$.fields", "expected an entry for torch_dtype (every task needs its dtype), got nothing");
  }

  void ignored(const json& root) {
    if (!root.contains("ignored_keys")) return;
    const json& v = root["ignored_keys"];
    if (!v.is_array()) return err("$.ignored_keys", "expected array of strings, got " + got(v));
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = "$.ignored_keys[" + std::to_string(i) + "]";
      if (!v[i].is_string()) {
        err(p, "expected string, got " + got(v[i]));
        continue;
      }
      std::string k = v[i].get<std::string>();
      if (d_.fields.count(k)) err(p, "expected a key the family does not consume, got " + json_quote(k) + " (listed in $.fields)");
      d_.ignored_keys.insert(k);
    }
  }

  void constants(const json& root) {
    if (root.contains("constants")) d_.constants = expr_map(root["constants"], "$.constants");
    for (const auto& [mt, e] : d_.model_types)
      for (const auto& [name, _] : e.constants)
        if (!d_.constants.count(name))
          err("$.model_types." + mt + ".constants." + name, "expected the name of a family constant to override (declare it in $.constants), got " + json_quote(name));
  }

  void checks(const json& root) {
    if (!root.contains("checks")) return;
    const json& v = root["checks"];
    if (!v.is_array()) return err("$.checks", "expected array, got " + got(v));
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = "$.checks[" + std::to_string(i) + "]";
      if (!v[i].is_object()) {
        err(p, "expected object, got " + got(v[i]));
        continue;
      }
      Check c;
      for (const auto& [k, x] : v[i].items())
        if (k != "field" && k != "require" && k != "expected") err(p + "." + k, "unknown key (known: expected, field, require)");
      c.field = str(v[i], "field", p, true);
      c.expected = str(v[i], "expected", p, true);
      if (v[i].contains("require")) {
        if (auto e = expr(v[i]["require"], p + ".require")) c.require = *e;
      } else {
        err(p + ".require", "expected expression, got nothing");
      }
      d_.checks.push_back(c);
    }
  }

  std::optional<OpStep> op(const json& v, const std::string& p, bool in_layer) {
    OpStep s;
    s.json_path = p;
    for (const auto& [k, x] : v.items())
      if (k != "op" && k != "kind" && k != "if" && k != "bind" && k != "doc") err(p + "." + k, "unknown key (known: bind, doc, if, kind, op)");
    s.op = str(v, "op", p, true);
    static const std::regex op_re("[a-z][a-z0-9_]*");
    if (!s.op.empty() && !std::regex_match(s.op, op_re)) err(p + ".op", "expected a name matching [a-z][a-z0-9_]*, got " + json_quote(s.op));
    s.kind = str(v, "kind", p, true);
    const KindSpec* kind = find_kind(s.kind);
    if (kind && kind->level > 1) kind = nullptr;
    if (!s.kind.empty() && !kind)
      err(p + ".kind", "expected one of " + join(kind_names(false)) + ", got " + json_quote(s.kind) +
                           (find_kind(s.kind) ? " (a composite kind: declare it in $.modules)" : ""));
    if (v.contains("if")) {
      size_t before = exprs_.size();
      s.when = expr(v["if"], p + ".if");
      if (exprs_.size() > before) exprs_.back().in_layer = in_layer;
    }
    if (v.contains("bind")) {
      size_t before = exprs_.size();
      s.bind = expr_map(v["bind"], p + ".bind");
      for (size_t i = before; i < exprs_.size(); ++i) exprs_[i].in_layer = in_layer;
    }
    if (kind) check_bind(*kind, s.bind, p);
    return s;
  }

  // `bind` must name every parameter of the kind that has no default, and nothing else.
  void check_bind(const KindSpec& kind, const std::map<std::string, Expr>& bind, const std::string& p) {
    for (const auto& ps : kind.params)
      if (!bind.count(ps.name) && !ps.dflt)
        err(p + ".bind." + ps.name, std::string("expected ") + param_type_name(ps.type) + " expression for parameter " +
                                        ps.name + " of kind " + kind.kind + ", got nothing");
    for (const auto& [name, _] : bind) {
      bool known = false;
      std::string list;
      for (const auto& ps : kind.params) {
        known |= ps.name == name;
        list += (list.empty() ? "" : ", ") + ps.name;
      }
      if (!known) err(p + ".bind." + name, "unknown parameter of kind " + kind.kind + " (parameters: " + list + ")");
    }
  }

  void forward(const json& root) {
    if (!root.contains("forward") || !root["forward"].is_array())
      return err("$.forward", "expected array, got " + (root.contains("forward") ? got(root["forward"]) : "nothing"));
    const json& f = root["forward"];
    for (size_t i = 0; i < f.size(); ++i) {
      std::string p = "$.forward[" + std::to_string(i) + "]";
      const json& v = f[i];
      if (!v.is_object()) {
        err(p, "expected object, got " + got(v));
        continue;
      }
      ForwardItem item;
      if (v.contains("repeat")) {
        for (const auto& [k, x] : v.items())
          if (k != "repeat" && k != "ops" && k != "doc") err(p + "." + k, "unknown key in a layer loop (known: doc, ops, repeat)");
        item.repeat = expr(v["repeat"], p + ".repeat");
        if (!v.contains("ops") || !v["ops"].is_array()) {
          err(p + ".ops", "expected array, got " + (v.contains("ops") ? got(v["ops"]) : "nothing"));
          continue;
        }
        for (size_t j = 0; j < v["ops"].size(); ++j) {
          std::string pj = p + ".ops[" + std::to_string(j) + "]";
          if (!v["ops"][j].is_object()) {
            err(pj, "expected object, got " + got(v["ops"][j]));
            continue;
          }
          if (auto s = op(v["ops"][j], pj, true)) item.layer_ops.push_back(*s);
        }
      } else {
        item.op = op(v, p, false);
      }
      d_.forward.push_back(item);
    }
  }

  // The roles a module of each scope may name besides earlier modules, with the kinds behind
  // them: [0] ops outside the layer loop (scope "model"), [1] ops of the layer loop ("layer").
  using Roles = std::map<std::string, std::set<std::string>>;

  void modules(const json& root) {
    if (!root.contains("modules")) return;
    const json& v = root["modules"];
    if (!v.is_array()) return err("$.modules", "expected array, got " + got(v));
    Roles roles[2];
    for (const auto& item : d_.forward) {
      if (item.op) roles[0][item.op->op].insert(item.op->kind);
      for (const auto& s : item.layer_ops) roles[1][s.op].insert(s.kind);
    }
    std::map<std::string, size_t> declared;  // module name -> first index, to name forward references
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].is_object() && v[i].contains("op") && v[i]["op"].is_string()) declared.emplace(v[i]["op"].get<std::string>(), i);
    for (size_t i = 0; i < v.size(); ++i) {
      std::string p = "$.modules[" + std::to_string(i) + "]";
      if (!v[i].is_object()) {
        err(p, "expected object, got " + got(v[i]));
        continue;
      }
      d_.modules.push_back(module(v[i], p, i, roles, declared));
    }
  }

  ModuleStep module(const json& v, const std::string& p, size_t index, const Roles (&roles)[2],
                    const std::map<std::string, size_t>& declared) {
    ModuleStep m;
    m.json_path = p;
    static const std::set<std::string> keys = {"at", "bind", "children", "doc", "if", "kind", "op", "scope"};
    for (const auto& [k, x] : v.items())
      if (!keys.count(k)) err(p + "." + k, "unknown key (known: at, bind, children, doc, if, kind, op, scope)");
    m.op = str(v, "op", p, true);
    static const std::regex name_re("[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*");
    if (!m.op.empty() && !std::regex_match(m.op, name_re))
      err(p + ".op", "expected a name matching [a-z][a-z0-9_]*(.[a-z][a-z0-9_]*)*, got " + json_quote(m.op));
    if (roles[0].count(m.op) || roles[1].count(m.op))
      err(p + ".op", "expected a name no op of $.forward has, got " + json_quote(m.op));
    else if (!m.op.empty() && declared.at(m.op) != index)
      err(p + ".op", "expected a unique module name, got " + json_quote(m.op) + " (also $.modules[" +
                         std::to_string(declared.at(m.op)) + "])");
    m.kind = str(v, "kind", p, true);
    const KindSpec* kind = find_kind(m.kind);
    if (kind && kind->level == 1) kind = nullptr;
    if (!m.kind.empty() && !kind)
      err(p + ".kind", "expected one of " + join(kind_names(true)) + ", got " + json_quote(m.kind) +
                           (find_kind(m.kind) ? " (an L1 kind: declare it in $.forward)" : ""));
    std::string scope = str(v, "scope", p, true);
    if (v.contains("scope") && v["scope"].is_string() && scope != "layer" && scope != "model")
      err(p + ".scope", "expected \"layer\" or \"model\", got " + got(v["scope"]));
    m.layer_scope = scope == "layer";
    if (v.contains("if")) m.when = expr(v["if"], p + ".if");
    if (v.contains("at")) {
      if (!m.layer_scope) err(p + ".at", "expected no \"at\" on a model-scope module (it picks a layer of the layer loop)");
      size_t before = exprs_.size();
      m.at = expr(v["at"], p + ".at");
      for (size_t i = before; i < exprs_.size(); ++i) exprs_[i].in_layer = true;
    }
    size_t bind_before = exprs_.size();
    if (v.contains("bind")) m.bind = expr_map(v["bind"], p + ".bind");
    if (m.at)  // `layer` is the representative layer there
      for (size_t i = bind_before; i < exprs_.size(); ++i) exprs_[i].in_layer = true;
    if (kind) check_bind(*kind, m.bind, p);
    if (!v.contains("children") || !v["children"].is_object()) {
      err(p + ".children", "expected object, got " + (v.contains("children") ? got(v["children"]) : "nothing"));
      return m;
    }
    if (!kind) return m;
    const json& children = v["children"];
    std::string slots;
    for (const auto& slot : kind->slots) slots += (slots.empty() ? "" : ", ") + slot.name;
    for (const auto& slot : kind->slots) {
      std::string ps = p + ".children." + slot.name;
      if (!children.contains(slot.name)) {
        err(ps, "expected a role for slot " + slot.name + " of kind " + m.kind + ", got nothing");
        continue;
      }
      if (auto c = child(children[slot.name], ps, slot, m, index, roles, declared)) m.children.push_back(*c);
    }
    for (const auto& [k, _] : children.items())
      if (std::none_of(kind->slots.begin(), kind->slots.end(), [&](const SlotSpec& s) { return s.name == k; }))
        err(p + ".children." + k, "unknown slot of kind " + m.kind + " (slots: " + slots + ")");
    return m;
  }

  // One role of `children` (docs/descriptors.md, "modules"): an op of the module's scope or an
  // earlier module, of the slot's class; a trailing "?" makes it optional.
  std::optional<ChildRef> child(const json& v, const std::string& p, const SlotSpec& slot, const ModuleStep& m,
                                size_t index, const Roles (&roles)[2], const std::map<std::string, size_t>& declared) {
    if (!v.is_string()) {
      err(p, "expected a role (string), got " + got(v));
      return std::nullopt;
    }
    ChildRef c;
    c.slot = slot.name;
    c.role = v.get<std::string>();
    if (!c.role.empty() && c.role.back() == '?') {
      c.optional = true;
      c.role.pop_back();
      if (slot.fallback.empty()) {
        err(p, "expected a required role (slot " + slot.name + " of kind " + m.kind + " has no fallback type), got " +
                   json_quote(v.get<std::string>()));
        return std::nullopt;
      }
    }
    const Roles& scope_roles = roles[m.layer_scope];
    std::string expected = m.layer_scope ? "an op of the layer loop or an earlier layer-scope module"
                                         : "an op outside the layer loop or an earlier module";
    std::set<std::string> kinds;
    auto mod = declared.find(c.role);
    if (mod != declared.end()) {
      if (mod->second >= index) {
        err(p, "expected " + expected + ", got " + json_quote(c.role) + ", " +
                   (mod->second == index ? std::string("this module itself")
                                         : "declared later at $.modules[" + std::to_string(mod->second) + "]") +
                   " (children are declared before their parents, so modules cannot form a cycle)");
        return std::nullopt;
      }
      const ModuleStep& earlier =
          *std::find_if(d_.modules.begin(), d_.modules.end(), [&](const ModuleStep& e) { return e.op == c.role; });
      if (m.layer_scope && !earlier.layer_scope) {
        err(p, "expected " + expected + ", got " + json_quote(c.role) + " (a model-scope module)");
        return std::nullopt;
      }
      c.module = true;
      kinds.insert(earlier.kind);
    } else {
      auto r = scope_roles.find(c.role);
      if (r == scope_roles.end()) {
        std::string known;
        for (const auto& [role, _] : scope_roles) known += (known.empty() ? "" : ", ") + role;
        for (const auto& e : d_.modules)
          if (e.layer_scope || !m.layer_scope) known += (known.empty() ? "" : ", ") + e.op;
        err(p, "expected " + expected + " (" + known + "), got unknown role " + json_quote(c.role));
        return std::nullopt;
      }
      kinds = r->second;
    }
    for (const auto& k : kinds) {
      const KindSpec* ks = find_kind(k);
      if (ks && !slot_accepts(slot, ks->class_name)) {
        err(p, "expected a role of class " + slot_classes_text(slot) + " for slot " + slot.name + " of kind " + m.kind +
                   ", got " + json_quote(c.role) + " (kind " + k + ", class " + ks->class_name + ")");
        return std::nullopt;
      }
    }
    return c;
  }

  // Every identifier must name a field, a constant, a rope_scaling.* value or (in a layer) `layer`.
  void validate_names() {
    std::set<std::string> known;
    for (const auto& [k, _] : d_.fields) known.insert(k);
    for (const auto& [k, _] : d_.constants) known.insert(k);
    if (d_.fields.count("rope_scaling"))
      for (const auto& n : rope_scaling_names()) known.insert(n);
    // The parallel layout's sizes (Note [Parallel layouts] in fk/gen/config.h): 1 unsharded.
    for (const char* n : {"tp_size", "ep_size"}) {
      if (d_.fields.count(n) || d_.constants.count(n)) err("$", std::string("\"") + n + "\" is the parallel layout's, not a field or constant name");
      known.insert(n);
    }
    for (const auto& e : exprs_)
      for (const auto& id : e.expr.identifiers()) {
        d_.identifiers.insert(id);
        if (!known.count(id) && !(e.in_layer && id == "layer"))
          err(e.path, "unknown name '" + id + "' in expression \"" + e.expr.text() + "\" (names: the family's fields and constants, tp_size, ep_size" +
                          std::string(d_.fields.count("rope_scaling") ? ", rope_scaling.*" : "") + (e.in_layer ? ", layer" : "") + ")");
      }
  }

  struct SeenExpr {
    Expr expr;
    std::string path;
    bool in_layer;
  };
  Descriptor& d_;
  Diagnostics& diag_;
  std::vector<SeenExpr> exprs_;
};

}  // namespace

std::shared_ptr<const Descriptor> load_descriptor(const std::string& file, const std::string& text, Diagnostics& diag) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    diag.error(file + ": invalid JSON: " + json_error_text(e.what()));
    return nullptr;
  }
  auto d = std::make_shared<Descriptor>();
  d->file = file;
  size_t before = diag.errors().size();
  Loader(*d, diag).load(root);
  if (diag.errors().size() != before) return nullptr;
  return d;
}

void DescriptorSet::add(std::shared_ptr<const Descriptor> d, Diagnostics& diag) {
  for (const auto& [mt, _] : d->model_types) {
    auto it = by_type_.find(mt);
    if (it != by_type_.end()) {
      diag.error(d->file + ": $.model_types." + mt + ": expected a model_type no other descriptor claims, got " +
                 json_quote(mt) + " (also in " + it->second->file + ")");
      continue;
    }
    by_type_[mt] = d.get();
  }
  all_.push_back(std::move(d));
}

const Descriptor* DescriptorSet::by_model_type(const std::string& mt) const {
  auto it = by_type_.find(mt);
  return it == by_type_.end() ? nullptr : it->second;
}

const Descriptor* DescriptorSet::by_architecture(const std::string& arch, std::string* model_type) const {
  for (const auto& [mt, d] : by_type_)
    for (const auto& a : d->model_types.at(mt).architectures)
      if (a == arch) {
        *model_type = mt;
        return d;
      }
  return nullptr;
}

std::vector<std::string> DescriptorSet::model_types() const {
  std::vector<std::string> out;
  for (const auto& [mt, _] : by_type_) out.push_back(mt);
  return out;
}

}  // namespace fk::gen
