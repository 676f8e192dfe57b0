// Note [Kinds as data]
// A kind entry of generator/kinds/*.json says, as data, everything the C++ table used to say in
// lambdas (docs/HOWTO-add-task-kind.md, "The entry"):
//   kind, template, class, production       strings; production may use the template language
//   level, slots, source_template           composite kinds (Note [Composite kinds] in fk/gen/kinds.h):
//                 slots [[name, class(, fallback)]]; source_template: another kind's .cu template
//   params        [[name, "int"|"float"|"bool"|"string"(, "cases" | {"default": v})]], in binding
//                 order; "cases" marks a parameter that only selects input cases (not a constant,
//                 not named); {"default": v} is its value where a descriptor's bind omits it;
//                 "@set" splices a list of the file's top-level "param_sets"
// A file's top-level "maps" are shared by its entries.
//   name          the task name in the template language below (Note [Task naming])
//   placeholders  {placeholder: template}: extra ones, or overrides of derived ones
//   omit          constant parameters that are not placeholders
//   maps          {map: {value: text}} for `{param:map}`
//   checks, cases, served   keys of KindHooks
//   collective    {"kind": "all_reduce" | "all_gather", "width": template}: the collective the forward
//                 calls at tp_size > 1, lowered as the task's collective child (Note [Collective tasks]
//                 in generator/src/passes/dedupe.cc); the kind needs an int parameter tp_size; a bool
//                 parameter reduce_results, where false, means no collective (the parent reduces)
// Placeholders are derived: every constant parameter not in `omit` is one, spelled as C++
// (integers in decimal, numbers canonical, booleans true/false, strings as C++ literals), unless
// `placeholders` overrides it. The template language: `{param}` (numbers canonical; in names
// without '+'), `{param?yes|no}` and `{param?yes}` for booleans, `{param:map}`, `{@hook}`,
// `{dtype}` (names only: bf16, f16, f32), `{{` and `}}` for braces. Entries are checked when the
// table is built: an unknown parameter, map or hook is an error naming the file and the entry.
#include "kinds/kind_data.h"

#include <algorithm>
#include <memory>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fk/gen/diag.h"
#include "fk/gen/format.h"

namespace fk::gen {

namespace {

using ojson = nlohmann::ordered_json;

struct Entry {
  std::string where;  // "<file>: kinds[i] (<kind>)"
  std::map<std::string, ParamType> types;
  std::map<std::string, std::map<std::string, std::string>> maps;
};

std::string value_text(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  return canonical_double(std::get<double>(v));
}

/// Renders `tmpl`; with `p` null, only checks it (unknown parameters, maps, hooks).
std::string render(const std::string& tmpl, const Params* p, const std::string& dtype, bool in_name, const Entry& e,
                   const KindHooks& hooks) {
  auto bad = [&](const std::string& what) {
    throw std::invalid_argument(e.where + ": " + what + " in " + json_quote(tmpl) + " (Note [Kinds as data])");
  };
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') bad("a lone '}'");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t end = tmpl.find('}', i);
    if (end == std::string::npos) bad("an unclosed '{'");
    const std::string tok = tmpl.substr(i + 1, end - i - 1);
    i = end;
    if (tok == "dtype") {
      if (!in_name) bad("{dtype} outside a name");
      out += dtype;
      continue;
    }
    if (!tok.empty() && tok[0] == '@') {
      auto h = hooks.spell.find(tok.substr(1));
      if (h == hooks.spell.end()) bad("unknown hook " + json_quote(tok));
      if (p) out += h->second(*p);
      continue;
    }
    const size_t q = tok.find('?'), colon = tok.find(':');
    const std::string param = tok.substr(0, std::min(q, colon));
    auto type = e.types.find(param);
    if (type == e.types.end()) bad("unknown parameter " + json_quote(param));
    if (q != std::string::npos) {  // {flag?yes|no}
      if (type->second != ParamType::kBool) bad("{" + tok + "} on a parameter that is not a boolean");
      const std::string alts = tok.substr(q + 1);
      const size_t bar = alts.find('|');
      if (p) {
        const bool on = std::get<bool>(p->at(param));
        out += on ? alts.substr(0, bar) : (bar == std::string::npos ? "" : alts.substr(bar + 1));
      }
      continue;
    }
    if (colon != std::string::npos) {  // {param:map}
      auto m = e.maps.find(tok.substr(colon + 1));
      if (m == e.maps.end()) bad("unknown map " + json_quote(tok.substr(colon + 1)));
      if (p) {
        const std::string v = value_text(p->at(param));
        auto hit = m->second.find(v);
        if (hit == m->second.end()) {
          std::string known;
          for (const auto& [k, _] : m->second) known += (known.empty() ? "" : ", ") + k;
          throw GenError{param + " " + json_quote(v) + " is not one of the values kind entry " + e.where + " knows (" + known + ")"};
        }
        out += hit->second;
      }
      continue;
    }
    if (p) {
      const Value& v = p->at(param);
      out += type->second == ParamType::kFloat && in_name ? name_double(std::get<double>(v)) : value_text(v);
    }
  }
  return out;
}

ParamType param_type(const std::string& s, const std::string& where) {
  if (s == "int") return ParamType::kInt;
  if (s == "float") return ParamType::kFloat;
  if (s == "bool") return ParamType::kBool;
  if (s == "string") return ParamType::kString;
  throw std::invalid_argument(where + ": params: type " + json_quote(s) + ", expected int, float, bool or string");
}

std::string str(const ojson& j, const char* key, const std::string& where, bool required = true) {
  if (!j.contains(key)) {
    if (required) throw std::invalid_argument(where + ": missing \"" + key + "\"");
    return "";
  }
  if (!j[key].is_string()) throw std::invalid_argument(where + ": \"" + key + "\" must be a string");
  return j[key].get<std::string>();
}

struct DocContext {
  std::map<std::string, std::map<std::string, std::string>> maps;  // shared by every entry
  std::map<std::string, ojson> param_sets;
};

/// `params` with every "@set" replaced by the set's parameters (sets may use sets).
void expand_params(const ojson& params, const DocContext& doc, const std::string& where, ojson& out, int depth = 0) {
  if (depth > 8) throw std::invalid_argument(where + ": params: param_sets nest too deep (a cycle?)");
  for (const auto& p : params) {
    if (p.is_string() && p.get<std::string>().rfind('@', 0) == 0) {
      auto set = doc.param_sets.find(p.get<std::string>().substr(1));
      if (set == doc.param_sets.end()) throw std::invalid_argument(where + ": params: unknown param set " + p.dump());
      expand_params(set->second, doc, where, out, depth + 1);
    } else {
      out.push_back(p);
    }
  }
}

/// `given` with every parameter it leaves out that has a default set to that default.
Params with_defaults(const std::vector<ParamSpec>& specs, const Params& given) {
  Params p = given;
  for (const ParamSpec& ps : specs)
    if (ps.dflt && !p.count(ps.name)) p.emplace(ps.name, *ps.dflt);
  return p;
}

KindSpec kind_from_entry(const ojson& j, const std::string& where0, const KindHooks& hooks, const DocContext& doc) {
  static const std::set<std::string> known = {"kind", "level", "template", "source_template", "class", "production", "slots",
                                              "params", "name", "placeholders", "omit", "maps", "checks", "cases", "served",
                                              "collective", "ep_collective"};
  if (!j.is_object()) throw std::invalid_argument(where0 + ": expected an object");
  KindSpec k;
  k.kind = str(j, "kind", where0);
  auto e = std::make_shared<Entry>();
  e->where = where0 + " (" + k.kind + ")";
  const std::string& where = e->where;
  for (const auto& [key, _] : j.items())
    if (!known.count(key)) throw std::invalid_argument(where + ": unknown field " + json_quote(key));
  k.template_name = str(j, "template", where);
  k.source_template_name = str(j, "source_template", where, false);
  k.class_name = str(j, "class", where);
  // Note [Collective tasks]: "collective": {"kind": "all_reduce" | "all_gather" | "reduce_scatter" | "all_gather_rows",
  // "width": "<template>"}; the width (the
  // collective's last dimension per rank) is rendered from the kind's parameters like a placeholder.
  std::string collective_width;
  if (j.contains("collective")) {
    const ojson& c = j["collective"];
    if (!c.is_object() || c.size() != 2 || !c.contains("kind") || !c.contains("width") || !c["kind"].is_string() ||
        !c["width"].is_string())
      throw std::invalid_argument(where + ": \"collective\" must be {\"kind\": \"all_reduce\", \"all_gather\", \"reduce_scatter\" or "
                                  "\"all_gather_rows\", \"width\": \"<template of the last dimension>\"}, got " + c.dump());
    k.collective = c["kind"].get<std::string>();
    collective_width = c["width"].get<std::string>();
    if (k.collective != "all_reduce" && k.collective != "all_gather" && k.collective != "reduce_scatter" && k.collective != "all_gather_rows")
      throw std::invalid_argument(where + ": collective.kind must be \"all_reduce\", \"all_gather\", \"reduce_scatter\" or \"all_gather_rows\", got " +
                                  json_quote(k.collective));
  }
  k.level = 1;
  if (j.contains("level")) {
    if (!j["level"].is_number_integer() || j["level"].get<int>() < 1 || j["level"] > 4)
      throw std::invalid_argument(where + ": \"level\" must be 1, 2, 3 or 4");
    k.level = j["level"].get<int>();
  }
  if (j.contains("slots") != (k.level > 1)) throw std::invalid_argument(where + ": composite kinds (level > 1), and only they, have \"slots\"");
  if (j.contains("slots"))
    for (const auto& sl : j["slots"]) {
      if (!sl.is_array() || sl.size() < 2 || sl.size() > 3)
        throw std::invalid_argument(where + ": slots: expected [name, class] or [name, class, fallback], got " + sl.dump());
      k.slots.push_back({sl[0].get<std::string>(), sl[1].get<std::string>(), sl.size() == 3 ? sl[2].get<std::string>() : ""});
    }
  if (!j.contains("params") || !j["params"].is_array()) throw std::invalid_argument(where + ": \"params\" must be an array");
  ojson params = ojson::array();
  expand_params(j["params"], doc, where, params);
  for (const auto& p : params) {
    const bool with_default = p.is_array() && p.size() == 3 && p[2].is_object();
    if (!p.is_array() || p.size() < 2 || p.size() > 3 || !p[0].is_string() || !p[1].is_string() ||
        (p.size() == 3 && p[2] != "cases" && !with_default) ||
        (with_default && (p[2].size() != 1 || !p[2].contains("default") || !p[2]["default"].is_primitive() ||
                          p[2]["default"].is_null())))
      throw std::invalid_argument(where + ": params: expected [name, type], [name, type, \"cases\"] or [name, type, "
                                  "{\"default\": value}], got " + p.dump());
    ParamSpec ps{p[0].get<std::string>(), param_type(p[1].get<std::string>(), where), p.size() == 2 || with_default};
    if (with_default) {
      const ojson& d = p[2]["default"];
      if (d.is_boolean()) ps.dflt = d.get<bool>();
      else if (d.is_number_integer()) ps.dflt = d.get<int64_t>();
      else if (d.is_number()) ps.dflt = d.get<double>();
      else ps.dflt = d.get<std::string>();
      const bool fits = ps.type == ParamType::kFloat ? is_numeric(*ps.dflt)
                        : ps.type == ParamType::kInt ? ps.dflt->index() == 2
                        : ps.type == ParamType::kBool ? ps.dflt->index() == 1 : ps.dflt->index() == 4;
      if (!fits) throw std::invalid_argument(where + ": params: the default of " + ps.name + " does not fit its type: " + p.dump());
      if (ps.type == ParamType::kFloat) ps.dflt = as_double(*ps.dflt);
    }
    if (!e->types.emplace(ps.name, ps.type).second) throw std::invalid_argument(where + ": params: " + ps.name + " twice");
    k.params.push_back(ps);
  }
  e->maps = doc.maps;
  if (j.contains("maps"))
    for (const auto& [m, vals] : j["maps"].items())
      for (const auto& [v, text] : vals.items()) e->maps[m][v] = text.get<std::string>();
  std::set<std::string> omit;
  if (j.contains("omit"))
    for (const auto& o : j["omit"]) {
      if (!e->types.count(o.get<std::string>())) throw std::invalid_argument(where + ": omit: unknown parameter " + o.dump());
      omit.insert(o.get<std::string>());
    }
  std::vector<std::pair<std::string, std::string>> extra;  // placeholder -> template
  if (j.contains("placeholders"))
    for (const auto& [ph, t] : j["placeholders"].items()) {
      if (!t.is_string()) throw std::invalid_argument(where + ": placeholders." + ph + " must be a string");
      extra.emplace_back(ph, t.get<std::string>());
    }
  std::vector<std::string> checks;
  if (j.contains("checks"))
    for (const auto& c : j["checks"]) {
      if (!hooks.checks.count(c.get<std::string>())) throw std::invalid_argument(where + ": checks: unknown hook " + c.dump());
      checks.push_back(c.get<std::string>());
    }
  const std::string name = str(j, "name", where), production = str(j, "production", where);
  // Check every template now, so that a broken entry fails when the table is built.
  render(name, nullptr, "", true, *e, hooks);
  render(production, nullptr, "", false, *e, hooks);
  for (const auto& [ph, t] : extra) render(t, nullptr, "", false, *e, hooks);
  if (!collective_width.empty()) render(collective_width, nullptr, "", false, *e, hooks);

  // A caller may leave out a parameter with a default (as a descriptor's bind may): it is the default.
  const std::vector<ParamSpec> specs = k.params;
  k.name = [e, name, checks, specs, &hooks](const Params& given, const std::string& dt) {
    Params p = with_defaults(specs, given);
    for (const auto& c : checks) hooks.checks.at(c)(p);
    return render(name, &p, dt, true, *e, hooks);
  };
  k.production = [e, production, &hooks](const Params& p) { return render(production, &p, "", false, *e, hooks); };
  std::vector<std::string> derived;
  for (const ParamSpec& ps : k.params)
    if (ps.is_constant && !omit.count(ps.name)) derived.push_back(ps.name);
  k.placeholders = [e, derived, extra, specs, &hooks](const Params& given) {
    Params p = with_defaults(specs, given);  // a parameter with a default may be left out here too
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& n : derived) {
      auto over = std::find_if(extra.begin(), extra.end(), [&](const auto& x) { return x.first == n; });
      const Value& v = p.at(n);
      out.emplace_back(n, over != extra.end()                ? render(over->second, &p, "", false, *e, hooks)
                          : std::holds_alternative<std::string>(v) ? cpp_string_literal(std::get<std::string>(v))
                                                                   : value_text(v));
    }
    for (const auto& [ph, t] : extra)
      if (std::find(derived.begin(), derived.end(), ph) == derived.end()) out.emplace_back(ph, render(t, &p, "", false, *e, hooks));
    return out;
  };
  if (!k.collective.empty()) {
    if (!e->types.count("tp_size") || e->types.at("tp_size") != ParamType::kInt)
      throw std::invalid_argument(where + ": a kind with a \"collective\" needs an int parameter tp_size");
    k.collective_params = [e, collective_width, specs, &hooks](const Params& given) {
      Params p = with_defaults(specs, given);
      // A task that leaves its partial sums to its parent (reduce_results false: Note [Partial row-parallel results]
      // in fk/tasks/linear.h) calls no collective: no child.
      if (auto r = p.find("reduce_results"); r != p.end() && !std::get<bool>(r->second)) return Params{};
      const std::string w = render(collective_width, &p, "", false, *e, hooks);
      int64_t width = 0;
      try {
        size_t used = 0;
        width = std::stoll(w, &used);
        if (used != w.size()) throw std::invalid_argument(w);
      } catch (const std::exception&) {
        throw GenError{e->where + ": collective.width " + json_quote(collective_width) + " gave " + json_quote(w) + ", expected an integer"};
      }
      return Params{{"width", Value(width)}, {"tp_size", p.at("tp_size")}};
    };
  }
  // Note [Expert-parallel all-to-all task]: "ep_collective": "ep_all_to_all", the child at a data-parallel layout.
  k.ep_collective = str(j, "ep_collective", where, false);
  if (!k.ep_collective.empty()) {
    if (k.ep_collective != "ep_all_to_all")
      throw std::invalid_argument(where + ": ep_collective must be \"ep_all_to_all\", got " + json_quote(k.ep_collective));
    for (const char* n : {"num_experts", "top_k", "hidden_size", "tp_size", "ep_size"})
      if (!e->types.count(n) || e->types.at(n) != ParamType::kInt)
        throw std::invalid_argument(where + ": a kind with an \"ep_collective\" needs an int parameter " + n);
    k.ep_collective_params = [specs](const Params& given) {
      Params p = with_defaults(specs, given);
      if (std::get<int64_t>(p.at("tp_size")) != 1 || std::get<int64_t>(p.at("ep_size")) < 2) return Params{};
      return Params{{"num_experts", p.at("num_experts")}, {"top_k", p.at("top_k")}, {"hidden_size", p.at("hidden_size")},
                    {"ep_size", p.at("ep_size")}};
    };
  }
  const std::string cases = str(j, "cases", where);
  auto c = hooks.cases.find(cases);
  if (c == hooks.cases.end()) throw std::invalid_argument(where + ": cases: unknown registry " + json_quote(cases));
  k.cases = c->second;
  const std::string served = str(j, "served", where, false);
  if (!served.empty()) {
    auto s = hooks.served.find(served);
    if (s == hooks.served.end()) throw std::invalid_argument(where + ": served: unknown hook " + json_quote(served));
    k.served = s->second;
  }
  return k;
}

}  // namespace

std::vector<KindSpec> kinds_from_data(const std::string& text, const std::string& file, const KindHooks& hooks) {
  ojson doc;
  try {
    doc = ojson::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const ojson::parse_error& err) {
    throw std::invalid_argument(file + ": invalid JSON: " + err.what());
  }
  if (!doc.is_object() || !doc.contains("kinds") || !doc["kinds"].is_array())
    throw std::invalid_argument(file + ": expected an object with an array \"kinds\"");
  DocContext ctx;
  try {
    if (doc.contains("maps"))
      for (const auto& [m, vals] : doc["maps"].items())
        for (const auto& [v, text] : vals.items()) ctx.maps[m][v] = text.get<std::string>();
    if (doc.contains("param_sets"))
      for (const auto& [name, set] : doc["param_sets"].items()) ctx.param_sets[name] = set;
  } catch (const ojson::exception& err) {
    throw std::invalid_argument(file + ": maps and param_sets: " + err.what());
  }
  std::vector<KindSpec> out;
  for (size_t i = 0; i < doc["kinds"].size(); ++i) {
    const std::string where = file + ": kinds[" + std::to_string(i) + "]";
    try {
      out.push_back(kind_from_entry(doc["kinds"][i], where, hooks, ctx));
    } catch (const ojson::exception& err) {  // a value of the wrong JSON type (a map entry that is no string, say)
      throw std::invalid_argument(where + ": " + err.what());
    }
  }
  return out;
}

}  // namespace fk::gen
