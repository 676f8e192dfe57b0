// The HuggingFace transformers audit (see fk/gen/hf_audit.h, docs/audit-rules.md).
#include "fk/gen/hf_audit.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fk/gen/config.h"
#include "fk/gen/descriptor.h"
#include "fk/gen/format.h"
#include "fk/gen/kinds.h"
#include "fk/gen/repo.h"

namespace fk::gen::hfaudit {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kEvidencePerOperator = 5;  // evidence kept per operator and model (all are counted)
constexpr size_t kShownText = 160;          // matched text is shortened to this many characters

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// ------------------------------------------------------------------------------------------------
// Python source as logical lines.
//
// Note [Logical lines]
// Rules match one *logical* line at a time: physical lines joined while a bracket is open (or after
// a backslash), so `nn.Conv2d(\n in, out,\n stride=patch_size)` is one line to the patterns. Comments
// and the contents of triple-quoted strings (docstrings, and the code examples inside them) are
// removed, and so are import lines (`from ...masking_utils import create_causal_mask` says nothing
// about the forward pass). Ordinary string literals are kept: configuration defaults are in them.
// Each logical line remembers its first physical line for the evidence.

struct LogicalLine {
  int line = 0;      // 1-based, first physical line
  int indent = 0;    // leading spaces of the first physical line
  std::string text;  // whitespace as written, newlines of joined lines become spaces
};

std::vector<LogicalLine> logical_lines(const std::string& src, std::vector<LogicalLine>* imports = nullptr) {
  std::vector<LogicalLine> out;
  LogicalLine cur;
  bool line_started = false;
  int depth = 0, phys = 1;
  auto finish = [&] {
    size_t a = cur.text.find_first_not_of(" \t");
    if (a != std::string::npos) {
      size_t b = cur.text.find_last_not_of(" \t\r");
      std::string body = cur.text.substr(a, b - a + 1);
      cur.indent = int(a);
      if (!starts_with(body, "import ") && !starts_with(body, "from ")) out.push_back(cur);
      else if (imports) imports->push_back(cur);
    }
    cur = LogicalLine{};
    line_started = false;
    depth = 0;
  };
  const size_t n = src.size();
  for (size_t i = 0; i < n;) {
    if (!line_started) {
      cur.line = phys;
      line_started = true;
    }
    const char c = src[i];
    // triple-quoted string: dropped (an empty literal stands in for it)
    if ((c == '"' || c == '\'') && i + 2 < n && src[i + 1] == c && src[i + 2] == c) {
      const std::string q(3, c);
      size_t end = src.find(q, i + 3);
      // a backslash before the closing quotes escapes them
      while (end != std::string::npos && end > 0 && src[end - 1] == '\\') end = src.find(q, end + 1);
      if (end == std::string::npos) end = n;
      for (size_t k = i; k < end && k < n; ++k)
        if (src[k] == '\n') ++phys;
      cur.text += "\"\"";
      i = std::min(n, end + 3);
      continue;
    }
    if (c == '"' || c == '\'') {  // ordinary string literal: kept
      size_t k = i + 1;
      cur.text += c;
      while (k < n && src[k] != c && src[k] != '\n') {
        if (src[k] == '\\' && k + 1 < n) {
          cur.text += src[k];
          ++k;
          if (src[k] == '\n') ++phys;
        }
        cur.text += src[k];
        ++k;
      }
      if (k < n && src[k] == c) cur.text += c, ++k;
      i = k;
      continue;
    }
    if (c == '#') {  // comment: to the end of the physical line
      while (i < n && src[i] != '\n') ++i;
      continue;
    }
    if (c == '\\' && i + 1 < n && src[i + 1] == '\n') {  // explicit continuation
      cur.text += ' ';
      ++phys;
      i += 2;
      continue;
    }
    if (c == '\n') {
      ++phys;
      ++i;
      if (depth > 0) {
        cur.text += ' ';
        continue;
      }
      finish();
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    cur.text += c;
    ++i;
  }
  finish();
  return out;
}

// The matched line as evidence: whitespace runs collapsed, shortened.
std::string shown(const std::string& text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  if (out.size() > kShownText) out = out.substr(0, kShownText - 3) + "...";
  return out;
}

// ------------------------------------------------------------------------------------------------
// Patterns.

// Note [Regex anchors]
// std::regex is slow (about a second per pattern over the 0.5 M lines of a transformers release),
// so every pattern gets an anchor: a literal that any match must contain. A line (and a file)
// without the anchor is skipped before the regex runs. The anchor is the longest run of literal
// characters that the regex requires: outside groups and character classes, not under a
// quantifier that allows zero repetitions, and only when there is no top-level alternation.
// A regex with top-level alternatives gets one anchor per alternative (a line needs any of them);
// when some alternative has none, the pattern has no anchors and runs on every line.
std::string required_literal(const std::string& re);

std::vector<std::string> required_literals(const std::string& re) {
  std::vector<std::string> branches(1);
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      branches.back() += re.substr(i, 2);
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      branches.emplace_back();
      continue;
    }
    branches.back() += c;
  }
  std::vector<std::string> out;
  for (const auto& b : branches) {
    std::string lit = required_literal(b);
    if (lit.empty()) return {};
    out.push_back(lit);
  }
  return out;
}

std::string required_literal(const std::string& re) {
  std::string best, cur;
  auto flush = [&] {
    if (cur.size() > best.size()) best = cur;
    cur.clear();
  };
  auto skip_quantifier = [&](size_t i) {  // index after a quantifier starting at i (or i)
    if (i < re.size() && (re[i] == '?' || re[i] == '*' || re[i] == '+')) ++i;
    else if (i < re.size() && re[i] == '{') {
      size_t e = re.find('}', i);
      i = e == std::string::npos ? re.size() : e + 1;
    } else return i;
    if (i < re.size() && re[i] == '?') ++i;  // lazy
    return i;
  };
  for (size_t i = 0; i < re.size();) {
    const char c = re[i];
    if (c == '[') {  // character class
      size_t k = i + 1;
      if (k < re.size() && re[k] == '^') ++k;
      if (k < re.size() && re[k] == ']') ++k;
      while (k < re.size() && re[k] != ']') k += re[k] == '\\' ? 2 : 1;
      flush();
      i = skip_quantifier(k + 1);
      continue;
    }
    if (c == '(') {  // group
      int d = 0;
      size_t k = i;
      bool in_class = false;
      for (; k < re.size(); ++k) {
        if (re[k] == '\\') {
          ++k;
          continue;
        }
        if (in_class) {
          if (re[k] == ']') in_class = false;
          continue;
        }
        if (re[k] == '[') in_class = true;
        else if (re[k] == '(') ++d;
        else if (re[k] == ')' && --d == 0) break;
      }
      flush();
      i = skip_quantifier(k + 1);
      continue;
    }
    if (c == '.' || c == '^' || c == '$' || c == '?' || c == '*' || c == '+' || c == '{' || c == ')' || c == '|') {
      flush();
      i = c == '{' || c == '?' || c == '*' || c == '+' ? skip_quantifier(i) : i + 1;
      continue;
    }
    char lit = c;
    size_t next = i + 1;
    if (c == '\\') {
      if (i + 1 >= re.size()) break;
      const char d = re[i + 1];
      if (std::isalnum(static_cast<unsigned char>(d))) {  // \w \s \d \b \n ...: not a literal
        flush();
        i = skip_quantifier(i + 2);
        continue;
      }
      lit = d;
      next = i + 2;
    }
    const char q = next < re.size() ? re[next] : '\0';
    if (q == '?' || q == '*' || q == '{') {  // may repeat zero times
      flush();
      i = skip_quantifier(next);
      continue;
    }
    cur += lit;
    if (q == '+') {
      flush();
      i = skip_quantifier(next);
      continue;
    }
    i = next;
  }
  flush();
  return best.size() >= 2 ? best : "";
}

std::optional<Pattern> make_pattern(const std::string& text, bool is_regex, std::string* error) {
  Pattern p;
  p.text = text;
  p.is_regex = is_regex;
  if (!is_regex) {
    p.anchors = {text};
    return p;
  }
  try {
    p.re = std::make_shared<const std::regex>(text, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    *error = e.what();
    return std::nullopt;
  }
  p.anchors = required_literals(text);
  return p;
}

// Whether `p` matches `line`; the first capture group goes to `group` when asked for.
bool matches(const Pattern& p, const std::string& line, std::string* group = nullptr) {
  if (!p.may_match(line)) return false;
  if (!p.is_regex) return true;
  std::smatch m;
  if (!std::regex_search(line, m, *p.re)) return false;
  if (group) *group = m.size() > 1 && m[1].matched ? m[1].str() : "";
  return true;
}

// ------------------------------------------------------------------------------------------------
// The rules loader.

class RulesLoader {
 public:
  RulesLoader(std::string file, Diagnostics& diag) : file_(std::move(file)), diag_(diag) {}

  std::optional<Rules> load(const std::string& text) {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      diag_.error(file_ + ": malformed JSON: " + json_error_text(e.what()));
      return std::nullopt;
    }
    const size_t before = diag_.errors().size();
    Rules r;
    r.file = file_;
    if (!j.is_object()) {
      err("$", "expected an object with schema, operators, rules and activations", j);
      return std::nullopt;
    }
    keys(j, "$", {"schema", "skip_folders", "operators", "rules", "activations"});
    r.skip_folders = strings_at(j, "$", "skip_folders", true);
    if (auto* s = need(j, "$", "schema")) {
      if (!s->is_number_integer() || s->get<int64_t>() != 1) err("$.schema", "1", *s);
    }
    // Operators first: rules refer to them.
    if (auto* ops = need(j, "$", "operators")) {
      if (!ops->is_array() || ops->empty()) err("$.operators", "expected a non-empty array of operators", *ops);
      else
        for (size_t i = 0; i < ops->size(); ++i) load_operator((*ops)[i], "$.operators[" + std::to_string(i) + "]", r);
    }
    for (size_t i = 0; i < r.operators.size(); ++i) {  // requires / subsumed_by name known operators
      for (auto* list : {&r.operators[i].requires_ops, &r.operators[i].subsumed_by})
        for (size_t k = 0; k < list->size(); ++k)
          if (!index_.count((*list)[k]) || (*list)[k] == r.operators[i].id) {
            const char* key = list == &r.operators[i].requires_ops ? "requires" : "subsumed_by";
            err(op_paths_[i] + "." + key + "[" + std::to_string(k) + "]", "expected the id of another operator", json((*list)[k]));
          }
    }
    if (auto* rules = need(j, "$", "rules")) {
      if (!rules->is_array() || rules->empty()) err("$.rules", "expected a non-empty array of rules", *rules);
      else
        for (size_t i = 0; i < rules->size(); ++i) load_rule((*rules)[i], "$.rules[" + std::to_string(i) + "]", r);
    }
    if (auto* a = need(j, "$", "activations")) load_activations(*a, "$.activations", r);
    if (diag_.errors().size() != before) return std::nullopt;
    return r;
  }

 private:
  void err(const std::string& path, const std::string& expected, const json& got) {
    std::string g = got.dump();
    if (g.size() > 80) g = g.substr(0, 77) + "...";
    diag_.error(file_ + ": " + path + ": expected " + expected + ", got " + g);
  }
  void msg(const std::string& path, const std::string& what) { diag_.error(file_ + ": " + path + ": " + what); }

  // Unknown keys (other than `_comments`) are errors.
  void keys(const json& o, const std::string& path, std::initializer_list<const char*> allowed) {
    for (const auto& [k, v] : o.items()) {
      if (starts_with(k, "_")) continue;
      bool ok = false;
      for (const char* a : allowed) ok |= k == a;
      if (!ok) {
        std::vector<std::string> names(allowed.begin(), allowed.end());
        msg(path + "." + k, "unknown key " + json_quote(k) + " (expected one of " + join(names, ", ") + ")");
      }
    }
  }
  const json* need(const json& o, const std::string& path, const char* key) {
    auto it = o.find(key);
    if (it == o.end()) {
      msg(path + "." + key, "missing (required)");
      return nullptr;
    }
    return &*it;
  }
  const json* opt(const json& o, const char* key) {
    auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  }
  std::optional<std::string> string_at(const json& o, const std::string& path, const char* key, bool required) {
    const json* v = required ? need(o, path, key) : opt(o, key);
    if (!v) return std::nullopt;
    if (!v->is_string() || v->get<std::string>().empty()) {
      err(path + "." + key, "a non-empty string", *v);
      return std::nullopt;
    }
    return v->get<std::string>();
  }
  std::vector<std::string> strings_at(const json& o, const std::string& path, const char* key, bool allow_empty) {
    std::vector<std::string> out;
    const json* v = opt(o, key);
    if (!v) return out;
    if (!v->is_array() || (!allow_empty && v->empty())) {
      err(path + "." + key, allow_empty ? "an array of strings" : "a non-empty array of strings", *v);
      return out;
    }
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) err(path + "." + key + "[" + std::to_string(i) + "]", "a string", (*v)[i]);
      else out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }
  std::optional<Pattern> pattern_at(const json& o, const std::string& path, const char* key, bool is_regex, int min_groups = 0) {
    auto text = string_at(o, path, key, false);
    if (!text) return std::nullopt;
    std::string e;
    auto p = make_pattern(*text, is_regex, &e);
    if (!p) {
      err(path + "." + key, "an ECMAScript regular expression (" + e + ")", json(*text));
      return std::nullopt;
    }
    if (min_groups > 0 && p->re->mark_count() < unsigned(min_groups)) {
      err(path + "." + key, "a regular expression with a capture group (group 1 is the value)", json(*text));
      return std::nullopt;
    }
    return p;
  }
  void check_kind(const std::string& kind, const std::string& path) {
    if (find_kind(kind)) return;
    std::vector<std::string> all = kind_names(false), comp = kind_names(true);
    all.insert(all.end(), comp.begin(), comp.end());
    std::sort(all.begin(), all.end());
    err(path, "a task kind of generator/kinds/*.json (" + join(all, ", ") + ")", json(kind));
  }
  void check_op(const std::string& id, const std::string& path) {
    if (!index_.count(id)) err(path, "the id of an operator in $.operators", json(id));
  }

  void load_operator(const json& o, const std::string& path, Rules& r) {
    if (!o.is_object()) {
      err(path, "an operator object", o);
      return;
    }
    keys(o, path, {"id", "category", "doc", "kinds", "composition", "how", "missing", "new_kernel", "requires", "subsumed_by"});
    Operator op;
    static const std::regex id_re("[a-z][a-z0-9_]*");
    if (auto id = string_at(o, path, "id", true)) {
      if (!std::regex_match(*id, id_re)) err(path + ".id", "an identifier [a-z][a-z0-9_]*", json(*id));
      else if (index_.count(*id)) msg(path + ".id", "duplicate operator id " + json_quote(*id));
      else op.id = *id;
    }
    if (auto c = string_at(o, path, "category", true)) {
      if (std::find(categories().begin(), categories().end(), *c) == categories().end())
        err(path + ".category", "one of " + join(categories(), ", "), json(*c));
      op.category = *c;
    }
    if (auto d = string_at(o, path, "doc", true)) op.doc = *d;
    const bool has_kinds = o.contains("kinds"), has_comp = o.contains("composition"), has_missing = o.contains("missing");
    if (int(has_kinds) + int(has_comp) + int(has_missing) != 1) {
      msg(path, "expected exactly one of \"kinds\", \"composition\" or \"missing\" (how our task kinds cover the operator)");
    } else if (has_kinds || has_comp) {
      const char* key = has_kinds ? "kinds" : "composition";
      op.coverage = has_kinds ? Coverage::kKinds : Coverage::kComposition;
      op.kinds = strings_at(o, path, key, false);
      for (size_t i = 0; i < op.kinds.size(); ++i) check_kind(op.kinds[i], path + "." + key + "[" + std::to_string(i) + "]");
    } else if (auto m = string_at(o, path, "missing", true)) {
      op.reason = *m;
      op.coverage = Coverage::kMissing;
    }
    if (has_comp) {
      if (auto h = string_at(o, path, "how", true)) op.how = *h;
    } else if (o.contains("how")) {
      msg(path + ".how", "only allowed with \"composition\"");
    }
    if (auto* nk = opt(o, "new_kernel")) {
      if (!has_missing) msg(path + ".new_kernel", "only allowed with \"missing\"");
      else if (!nk->is_boolean()) err(path + ".new_kernel", "true or false", *nk);
      else if (nk->get<bool>()) op.coverage = Coverage::kNewKernel;
    }
    op.requires_ops = strings_at(o, path, "requires", false);
    op.subsumed_by = strings_at(o, path, "subsumed_by", false);
    if (op.id.empty()) return;
    index_[op.id] = r.operators.size();
    op_paths_.push_back(path);
    r.operators.push_back(std::move(op));
  }

  void load_rule(const json& o, const std::string& path, Rules& r) {
    if (!o.is_object()) {
      err(path, "a rule object", o);
      return;
    }
    keys(o, path, {"id", "doc", "in", "literal", "regex", "unless_line", "operator", "values", "other_values"});
    Rule rule;
    static const std::regex id_re("[a-z0-9][a-z0-9-]*");
    if (auto id = string_at(o, path, "id", true)) {
      if (!std::regex_match(*id, id_re)) err(path + ".id", "an identifier [a-z0-9][a-z0-9-]*", json(*id));
      else if (rule_ids_.count(*id)) msg(path + ".id", "duplicate rule id " + json_quote(*id));
      rule_ids_.insert(*id);
      rule.id = *id;
    }
    if (auto d = string_at(o, path, "doc", true)) rule.doc = *d;
    if (auto in = string_at(o, path, "in", true)) {
      if (*in != "modeling" && *in != "configuration") err(path + ".in", "\"modeling\" or \"configuration\"", json(*in));
      rule.in_configuration = *in == "configuration";
    }
    const bool has_values = o.contains("values");
    if (o.contains("literal") == o.contains("regex")) {
      msg(path, "expected exactly one of \"literal\" and \"regex\" (the pattern)");
    } else if (o.contains("literal")) {
      if (has_values) msg(path + ".values", "needs a \"regex\" with a capture group, not a \"literal\"");
      if (auto p = pattern_at(o, path, "literal", false)) rule.pattern = *p;
    } else if (auto p = pattern_at(o, path, "regex", true, has_values ? 1 : 0)) {
      rule.pattern = *p;
    }
    if (o.contains("unless_line"))
      if (auto p = pattern_at(o, path, "unless_line", true)) rule.unless_line = *p;
    if (o.contains("operator") == has_values) {
      msg(path, "expected exactly one of \"operator\" (a presence rule) and \"values\" (a value rule)");
    } else if (!has_values) {
      if (auto id = string_at(o, path, "operator", true)) {
        check_op(*id, path + ".operator");
        rule.op = *id;
      }
    } else {
      const json& v = o["values"];
      if (!v.is_object() || v.empty()) err(path + ".values", "a non-empty object: captured value -> operator id", v);
      else
        for (const auto& [value, id] : v.items()) {
          if (!id.is_string()) {
            err(path + ".values." + value, "an operator id", id);
            continue;
          }
          check_op(id.get<std::string>(), path + ".values." + value);
          rule.values[value] = id.get<std::string>();
        }
    }
    if (auto ov = string_at(o, path, "other_values", false)) {
      if (!has_values) msg(path + ".other_values", "only allowed with \"values\"");
      check_op(*ov, path + ".other_values");
      rule.other_values = *ov;
    }
    r.rules.push_back(std::move(rule));
  }

  void load_activations(const json& o, const std::string& path, Rules& r) {
    if (!o.is_object()) {
      err(path, "an object with doc, reference, gated and names", o);
      return;
    }
    keys(o, path, {"doc", "reference", "gated", "names", "config_aliases"});
    ActivationRules& a = r.activations;
    if (auto d = string_at(o, path, "doc", true)) a.doc = *d;
    if (!o.contains("reference")) msg(path + ".reference", "missing (required)");
    else if (auto p = pattern_at(o, path, "reference", true, 1)) a.reference = *p;
    if (const json* g = need(o, path, "gated")) {
      if (!g->is_array()) err(path + ".gated", "an array of regular expressions", *g);
      else
        for (size_t i = 0; i < g->size(); ++i) {
          const std::string p = path + ".gated[" + std::to_string(i) + "]";
          if (!(*g)[i].is_string()) {
            err(p, "a regular expression", (*g)[i]);
            continue;
          }
          std::string e;
          if (auto pat = make_pattern((*g)[i].get<std::string>(), true, &e)) a.gated.push_back(*pat);
          else err(p, "an ECMAScript regular expression (" + e + ")", (*g)[i]);
        }
    }
    if (const json* al = opt(o, "config_aliases")) {
      if (!al->is_object()) err(path + ".config_aliases", "an object: configuration key -> the key its default follows", *al);
      else
        for (const auto& [k, v] : al->items()) {
          static const std::regex ident("[A-Za-z_]\\w*");
          if (!std::regex_match(k, ident)) msg(path + ".config_aliases." + k, "expected a configuration key (an identifier) as the name");
          else if (!v.is_string() || !std::regex_match(v.get<std::string>(), ident))
            err(path + ".config_aliases." + k, "a configuration key (an identifier)", v);
          else a.config_aliases[k] = v.get<std::string>();
        }
    }
    if (const json* n = need(o, path, "names")) {
      if (!n->is_object() || n->empty()) {
        err(path + ".names", "a non-empty object: ACT2FN name -> [plain operator, gated operator] or null", *n);
        return;
      }
      for (const auto& [name, v] : n->items()) {
        const std::string p = path + ".names." + name;
        if (v.is_null()) {
          a.names[name] = std::nullopt;
          continue;
        }
        if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_string()) {
          err(p, "[plain operator id, gated operator id] or null (the identity)", v);
          continue;
        }
        check_op(v[0].get<std::string>(), p + "[0]");
        check_op(v[1].get<std::string>(), p + "[1]");
        a.names[name] = std::make_pair(v[0].get<std::string>(), v[1].get<std::string>());
      }
    }
  }

  std::string file_;
  Diagnostics& diag_;
  std::map<std::string, size_t> index_;
  std::vector<std::string> op_paths_;
  std::set<std::string> rule_ids_;
};

// ------------------------------------------------------------------------------------------------
// Scanning one model folder.

struct SourceFile {
  std::string rel;  // relative to the package
  std::string text;
  std::vector<LogicalLine> lines;
  std::vector<LogicalLine> imports;
};

class FolderScan {
 public:
  FolderScan(const Rules& rules, ModelAudit& m, std::vector<SourceFile>& modeling, std::vector<SourceFile>& configuration)
      : rules_(rules), m_(m), modeling_(modeling), configuration_(configuration) {}

  void run() {
    for (const Rule& rule : rules_.rules)
      for (const SourceFile& f : rule.in_configuration ? configuration_ : modeling_) apply(rule, f);
    for (const SourceFile& f : modeling_) activations(f);
    model_types_and_uses();
    settle();
  }

 private:
  void add(const std::string& op, Evidence e) {
    Finding& f = found_[op];
    ++f.count;
    if (f.evidence.size() < kEvidencePerOperator) f.evidence.push_back(std::move(e));
  }

  void apply(const Rule& rule, const SourceFile& f) {
    if (!rule.pattern.may_match(f.text)) return;
    for (const LogicalLine& l : f.lines) {
      std::string value;
      if (!matches(rule.pattern, l.text, &value)) continue;
      if (rule.unless_line && matches(*rule.unless_line, l.text)) continue;
      Evidence e{rule.id, f.rel, l.line, shown(l.text), ""};
      if (!rule.op.empty()) {
        add(rule.op, std::move(e));
        continue;
      }
      auto it = rule.values.find(value);
      if (it != rule.values.end()) {
        e.note = "value " + json_quote(value);
        add(it->second, std::move(e));
      } else if (!rule.other_values.empty()) {
        e.note = "value " + json_quote(value) + " (not listed: other_values)";
        add(rule.other_values, std::move(e));
      } else {
        e.note = "value " + json_quote(value) + " is not in the rule's values; not counted";
        m_.unresolved.push_back(std::move(e));
      }
    }
  }

  // --- ACT2FN -------------------------------------------------------------------------------------

  // The default of configuration key `key`: `key: type = "v"` or `key="v"` in configuration_*.py.
  std::optional<std::pair<std::string, Evidence>> config_default(const std::string& key) {
    auto cached = config_cache_.find(key);
    if (cached != config_cache_.end()) return cached->second;
    std::optional<std::pair<std::string, Evidence>> out;
    // `key: str = "v"`, `key="v"`, and a wrapped default: `key: str = activation_fn_key(default="v")`
    const std::regex re("(?:^|[\\s,(])" + key + "\\s*(?::[^=\\n]*)?=(?!=)\\s*(?:[\\w.]+\\(\\s*(?:default\\s*=\\s*)?)?[\"']([^\"']*)[\"']");
    for (const SourceFile& f : configuration_) {
      if (f.text.find(key) == std::string::npos) continue;
      for (const LogicalLine& l : f.lines) {
        std::smatch m;
        if (l.text.find(key) == std::string::npos || !std::regex_search(l.text, m, re)) continue;
        out = std::make_pair(m[1].str(), Evidence{"", f.rel, l.line, shown(l.text), ""});
        break;
      }
      if (out) break;
    }
    config_cache_[key] = out;
    return out;
  }

  // Resolves the expression inside ACT2FN[...] to an activation name; `how` collects the chain.
  std::optional<std::string> resolve(const std::string& expr_in, const SourceFile& f, size_t at, int depth, std::string* how) {
    std::string expr = expr_in;
    expr.erase(0, expr.find_first_not_of(" \t"));
    expr.erase(expr.find_last_not_of(" \t") + 1);
    static const std::regex literal("^[\"']([\\w.-]+)[\"']$");
    static const std::regex config_attr("^(?:self\\.)?\\w*config(?:\\.\\w+)*\\.(\\w+)$");
    static const std::regex getter("^(?:getattr\\(\\s*[\\w.]+\\s*,|[\\w.]+\\.get\\()\\s*[\"'](\\w+)[\"']\\s*(?:,\\s*[\"']([\\w.-]+)[\"']\\s*)?\\)$");
    static const std::regex name("^(self\\.)?(\\w+)$");
    static const std::regex not_a_name("^(True|False|[0-9.]+)$");
    std::smatch m;
    if (expr == "None") {  // an optional activation whose default is none
      *how += "None: no activation";
      return std::string();
    }
    if (std::regex_match(expr, not_a_name)) {
      *how += "`" + expr + "` is not an activation name";
      return std::nullopt;
    }
    auto from_config = [&](const std::string& key, const std::string& fallback) -> std::optional<std::string> {
      if (auto d = config_default(key)) {
        *how += key + " = " + json_quote(d->first) + " (" + d->second.file + ":" + std::to_string(d->second.line) + ")";
        return d->first;
      }
      auto alias = rules_.activations.config_aliases.find(key);
      if (alias != rules_.activations.config_aliases.end())
        if (auto d = config_default(alias->second)) {
          *how += key + " follows " + alias->second + " = " + json_quote(d->first) + " (" + d->second.file + ":" +
                  std::to_string(d->second.line) + ", $.activations.config_aliases)";
          return d->first;
        }
      if (!fallback.empty()) {
        *how += key + " has no default in the configuration; the getter's default " + json_quote(fallback);
        return fallback;
      }
      *how += "no default for `" + key + "` in the configuration";
      return std::nullopt;
    };
    if (std::regex_match(expr, m, literal)) {
      *how += "literal " + json_quote(m[1].str());
      return m[1].str();
    }
    if (std::regex_match(expr, m, config_attr)) return from_config(m[1].str(), "");
    if (std::regex_match(expr, m, getter)) return from_config(m[1].str(), m[2].matched ? m[2].str() : "");
    if (depth < 3 && std::regex_match(expr, m, name)) {
      // The nearest assignment or parameter default before the reference, in this file.
      const std::string id = m[2].str();
      const std::regex assign("(?:^|[\\s,(])(?:self\\.)?" + id + "\\s*(?::[^=\\n,)]*)?=(?!=)\\s*([^,)\\n]+)");
      for (size_t k = at + 1; k-- > 0;) {
        const LogicalLine& l = f.lines[k];
        std::smatch a;
        if (l.text.find(id) == std::string::npos || !std::regex_search(l.text, a, assign)) continue;
        std::string rhs = a[1].str();
        rhs.erase(rhs.find_last_not_of(" \t:") + 1);
        if (rhs.find("ACT2FN") != std::string::npos) continue;
        *how += id + " = " + shown(rhs) + " (" + f.rel + ":" + std::to_string(l.line) + "); ";
        return resolve(rhs, f, k, depth + 1, how);
      }
      return from_config(id, "");
    }
    *how += "cannot resolve `" + shown(expr) + "` statically";
    return std::nullopt;
  }

  // The enclosing top-level block (class or function) of logical line `at`.
  std::pair<size_t, size_t> block_of(const SourceFile& f, size_t at) {
    size_t b = at;
    while (b > 0 && f.lines[b].indent > 0) --b;
    size_t e = at + 1;
    while (e < f.lines.size() && f.lines[e].indent > 0) ++e;
    return {b, e};
  }

  void activations(const SourceFile& f) {
    const ActivationRules& a = rules_.activations;
    if (!a.reference.may_match(f.text)) return;
    for (size_t i = 0; i < f.lines.size(); ++i) {
      const LogicalLine& l = f.lines[i];
      if (!a.reference.may_match(l.text)) continue;
      // every ACT2FN[...] on the line
      std::string rest = l.text;
      std::smatch m;
      while (std::regex_search(rest, m, *a.reference.re)) {
        if (m.length(0) == 0) break;  // a reference pattern that matches nothing would loop forever
        const std::string expr = m[1].str();
        rest = m.suffix().str();
        std::string how;
        Evidence e{"activations", f.rel, l.line, shown(l.text), ""};
        auto value = resolve(expr, f, i, 0, &how);
        if (!value) {
          e.note = "ACT2FN[" + shown(expr) + "]: " + how;
          m_.unresolved.push_back(std::move(e));
          continue;
        }
        if (value->empty()) continue;  // None: no activation
        auto it = a.names.find(*value);
        if (it == a.names.end()) {
          e.note = "ACT2FN[" + shown(expr) + "]: " + how + "; " + json_quote(*value) + " is not in $.activations.names";
          m_.unresolved.push_back(std::move(e));
          continue;
        }
        if (!it->second) continue;  // the identity
        auto [b, end] = block_of(f, i);
        std::string gate;
        for (size_t k = b; k < end && gate.empty(); ++k)
          for (const Pattern& g : a.gated)
            if (matches(g, f.lines[k].text)) {
              gate = "gated: line " + std::to_string(f.lines[k].line) + " `" + shown(f.lines[k].text) + "`";
              break;
            }
        const std::string& op = gate.empty() ? it->second->first : it->second->second;
        e.note = "ACT2FN[" + shown(expr) + "]: " + how + "; " + (gate.empty() ? "not gated in its block" : gate);
        add(op, std::move(e));
      }
    }
  }

  // --- model types, sub-models ---------------------------------------------------------------------

  // Note [Sub-models]
  // A model folder may build its forward pass from other folders' models: by importing them
  // (`from ..bert.modeling_bert import BertModel`) or through AutoModel.from_config on a
  // sub-configuration whose default model type its configuration names
  // (`SubConfigSpec(..., model_type="clip_vision_model")`, `CONFIG_MAPPING["llama"]`). Those
  // are its `uses`; after every folder is scanned, the operators of the folders it uses (and
  // theirs) join its own, with evidence "via models/<folder>", and the verdict covers them. A
  // folder that calls AutoModel*.from_config but names no default sub-model delegates to models
  // the checkpoint picks: it cannot be `covered` (its verdict is `unclassified` unless its own
  // code is already uncovered).
  void model_types_and_uses() {
    static const std::regex import_re("^from \\.\\.(\\w+)\\.modeling_\\w+ import");
    for (const SourceFile& f : modeling_) {
      for (const LogicalLine& l : f.imports) {
        std::smatch m;
        if (std::regex_search(l.text, m, import_re) && m[1].str() != m_.folder &&
            !std::count(rules_.skip_folders.begin(), rules_.skip_folders.end(), m[1].str()))
          m_.uses_folders.push_back(m[1].str());
      }
      if (f.text.find(".from_config(") != std::string::npos && f.text.find("AutoModel") != std::string::npos)
        m_.runtime_submodels = true;
    }
    std::sort(m_.uses_folders.begin(), m_.uses_folders.end());
    m_.uses_folders.erase(std::unique(m_.uses_folders.begin(), m_.uses_folders.end()), m_.uses_folders.end());
    static const std::regex mt("^\\s*model_type\\s*(?::[^=]*)?=\\s*[\"']([\\w.-]+)[\"']");
    static const std::regex uses("SubConfigSpec\\([^\\n]*?model_type\\s*=\\s*[\"']([\\w.-]+)[\"']|CONFIG_MAPPING\\[\\s*[\"']([\\w.-]+)[\"']\\s*\\]");
    std::set<std::string> types, used;
    for (const SourceFile& f : configuration_)
      for (const LogicalLine& l : f.lines) {
        std::smatch m;
        if (l.text.find("model_type") != std::string::npos && std::regex_search(l.text, m, mt)) {
          if (types.insert(m[1].str()).second) m_.model_types.push_back(m[1].str());
        }
        if (l.text.find("SubConfigSpec") == std::string::npos && l.text.find("CONFIG_MAPPING") == std::string::npos) continue;
        std::string rest = l.text;
        while (std::regex_search(rest, m, uses)) {
          used.insert(m[1].matched ? m[1].str() : m[2].str());
          rest = m.suffix().str();
        }
      }
    for (const auto& u : used)
      if (!types.count(u)) m_.uses.push_back(u);
  }

  // --- requires / subsumed_by, then the verdict ----------------------------------------------------

  void settle() {
    std::map<std::string, Finding> kept;
    for (auto& [id, f] : found_) {
      const Operator* op = rules_.op(id);
      std::vector<std::string> absent;
      for (const auto& r : op->requires_ops)
        if (!found_.count(r)) absent.push_back(r);
      if (!absent.empty()) {
        for (auto& e : f.evidence) e.note = "dropped: requires " + join(absent, ", ") + ", not detected";
        m_.dropped[id] = f;
      } else {
        kept[id] = f;
      }
    }
    for (auto& [id, f] : kept) {
      const Operator* op = rules_.op(id);
      std::vector<std::string> by;
      for (const auto& s : op->subsumed_by)
        if (kept.count(s)) by.push_back(s);
      if (!by.empty()) {
        for (auto& e : f.evidence) e.note = "dropped: subsumed by " + join(by, ", ");
        m_.dropped[id] = f;
      } else {
        m_.ops[id] = f;
      }
    }
  }

  const Rules& rules_;
  ModelAudit& m_;
  std::vector<SourceFile>& modeling_;
  std::vector<SourceFile>& configuration_;
  std::map<std::string, Finding> found_;
  std::map<std::string, std::optional<std::pair<std::string, Evidence>>> config_cache_;
};

// Note [Audit verdicts], and Note [Sub-models] for runtime sub-models.
Verdict verdict_of(const ModelAudit& m, const Rules& rules) {
  bool any_comp = false, any_missing = false, any_new = false;
  for (const auto& [id, f] : m.ops) {
    Coverage c = rules.op(id)->coverage;
    any_comp |= c == Coverage::kComposition;
    any_missing |= c == Coverage::kMissing;
    any_new |= c == Coverage::kNewKernel;
  }
  if (any_new) return Verdict::kNewKernel;
  if (any_missing) return Verdict::kPartial;
  if (m.ops.empty() || (m.runtime_submodels && m.uses.empty() && m.uses_folders.empty())) return Verdict::kUnclassified;
  return any_comp ? Verdict::kComposition : Verdict::kCovered;
}

// Merges the operators of the folders each model uses (Note [Sub-models]), then decides verdicts.
void merge_submodels(Audit& a, const Rules& rules) {
  std::map<std::string, size_t> by_folder, by_type;
  for (size_t i = 0; i < a.models.size(); ++i) {
    by_folder[a.models[i].folder] = i;
    for (const auto& t : a.models[i].model_types) by_type.emplace(t, i);
  }
  std::vector<std::map<std::string, Finding>> own(a.models.size());
  std::vector<std::vector<size_t>> edges(a.models.size());
  for (size_t i = 0; i < a.models.size(); ++i) {
    ModelAudit& m = a.models[i];
    own[i] = m.ops;
    std::vector<std::string> unknown;
    for (const auto& t : m.uses) {
      auto it = by_type.find(t);
      if (it != by_type.end() && it->second != i) edges[i].push_back(it->second);
      else if (it == by_type.end()) unknown.push_back(t);
    }
    for (const auto& f : m.uses_folders) {
      auto it = by_folder.find(f);
      if (it != by_folder.end() && it->second != i) edges[i].push_back(it->second);
    }
    m.uses_unknown = unknown;
  }
  for (size_t i = 0; i < a.models.size(); ++i) {
    ModelAudit& m = a.models[i];
    std::vector<size_t> order;  // breadth first: nearer sub-models give the evidence
    std::set<size_t> seen = {i};
    std::vector<size_t> queue = edges[i];
    for (size_t q = 0; q < queue.size(); ++q) {
      if (!seen.insert(queue[q]).second) continue;
      order.push_back(queue[q]);
      for (size_t n : edges[queue[q]]) queue.push_back(n);
    }
    for (size_t u : order) {
      m.via.push_back(a.models[u].folder);
      for (const auto& [id, f] : own[u]) {
        if (m.ops.count(id)) continue;
        Finding g;
        for (const auto& e : f.evidence) {
          Evidence x = e;
          x.note = "via models/" + a.models[u].folder + (e.note.empty() ? "" : "; " + e.note);
          g.evidence.push_back(std::move(x));
          break;  // one line of the sub-model's evidence is enough; --explain <it> shows the rest
        }
        g.count = g.evidence.size();
        m.ops[id] = std::move(g);
        m.via_ops.insert(id);
      }
    }
    m.verdict = verdict_of(m, rules);
  }
}

// transformers' version: __init__.py's __version__, else the dist-info METADATA beside the package.
std::pair<std::string, std::string> read_version(const fs::path& package) {
  static const std::regex v("__version__\\s*=\\s*[\"']([^\"']+)[\"']");
  if (auto init = read_text(package / "__init__.py")) {
    std::smatch m;
    if (std::regex_search(*init, m, v)) return {m[1].str(), "transformers/__init__.py"};
  }
  for (const auto& p : sorted_entries(package.parent_path())) {
    const std::string n = p.filename().string();
    if (!starts_with(n, "transformers-") || p.extension() != ".dist-info") continue;
    if (auto meta = read_text(p / "METADATA")) {
      static const std::regex ver("(^|\\n)Version:\\s*(\\S+)");
      std::smatch m;
      if (std::regex_search(*meta, m, ver)) return {m[2].str(), n + "/METADATA"};
    }
  }
  return {"unknown", "not found (no __version__ in transformers/__init__.py, no transformers-*.dist-info/METADATA)"};
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Public API.

const char* coverage_name(Coverage c) {
  switch (c) {
    case Coverage::kKinds: return "kinds";
    case Coverage::kComposition: return "composition";
    case Coverage::kMissing: return "missing";
    case Coverage::kNewKernel: return "new_kernel";
  }
  return "?";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kCovered: return "covered";
    case Verdict::kComposition: return "composition";
    case Verdict::kPartial: return "partial";
    case Verdict::kNewKernel: return "new-kernel";
    case Verdict::kUnclassified: return "unclassified";
  }
  return "?";
}

const char* verdict_meaning(Verdict v) {
  switch (v) {
    case Verdict::kCovered: return "every operator detected is computed by one of our task kinds";
    case Verdict::kComposition: return "every operator is covered, some by a composition of our kinds";
    case Verdict::kPartial: return "some operators have no task kind (standard operators: a library kernel or an extension of ours)";
    case Verdict::kNewKernel: return "some operator needs a genuinely new kernel (production ships a custom one)";
    case Verdict::kUnclassified: return "no rule matched its source, or the checkpoint picks its sub-models (AutoModel)";
  }
  return "?";
}

const std::vector<std::string>& categories() {
  static const std::vector<std::string> c = {"norm", "activation", "attention", "position", "moe",
                                             "conv", "recurrence", "pooling", "embedding", "other"};
  return c;
}

const Operator* Rules::op(const std::string& id) const {
  for (const auto& o : operators)
    if (o.id == id) return &o;
  return nullptr;
}

std::optional<Rules> load_rules(const std::string& file, const std::string& text, Diagnostics& diag) {
  return RulesLoader(file, diag).load(text);
}

std::optional<Rules> load_rules_file(const fs::path& path, const std::string& display, Diagnostics& diag) {
  auto text = read_text(path);
  if (!text) {
    diag.io_error(display + ": cannot read the audit rules file (pass --rules FILE)");
    return std::nullopt;
  }
  return load_rules(display, *text, diag);
}

size_t Audit::count(Verdict v) const {
  return size_t(std::count_if(models.begin(), models.end(), [v](const ModelAudit& m) { return m.verdict == v; }));
}

const ModelAudit* Audit::find(const std::string& name) const {
  for (const auto& m : models)
    if (m.folder == name) return &m;
  for (const auto& m : models)
    if (std::count(m.model_types.begin(), m.model_types.end(), name)) return &m;
  return nullptr;
}

std::optional<fs::path> package_dir(const fs::path& path, Diagnostics& diag) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    diag.io_error(path.string() + ": no such directory (--hf expects the transformers package directory, e.g. "
                                  "<site-packages>/transformers)");
    return std::nullopt;
  }
  if (fs::is_directory(path / "models", ec) && fs::exists(path / "__init__.py", ec)) return path;
  if (fs::is_directory(path / "transformers" / "models", ec)) return path / "transformers";
  diag.error(path.string() + ": not a transformers package (expected models/ and __init__.py in it, or a transformers/ "
                             "folder holding them)");
  return std::nullopt;
}

std::optional<Audit> audit_package(const fs::path& package, const Rules& rules, Diagnostics& diag) {
  Audit a;
  std::tie(a.version, a.version_source) = read_version(package);
  a.rules_file = rules.file;
  std::error_code ec;
  const fs::path models = package / "models";
  for (const auto& dir : sorted_entries(models)) {
    if (!fs::is_directory(dir, ec)) continue;
    const std::string folder = dir.filename().string();
    if (starts_with(folder, "__")) continue;
    if (std::count(rules.skip_folders.begin(), rules.skip_folders.end(), folder)) {
      a.skipped.push_back(folder);
      continue;
    }
    std::vector<SourceFile> modeling, configuration;
    for (const auto& p : sorted_entries(dir)) {
      const std::string n = p.filename().string();
      if (p.extension() != ".py" || !fs::is_regular_file(p, ec)) continue;
      const bool is_modeling = starts_with(n, "modeling_"), is_config = starts_with(n, "configuration_");
      if (!is_modeling && !is_config) continue;
      auto text = read_text(p);
      const std::string rel = "models/" + folder + "/" + n;
      if (!text) {
        diag.io_error(rel + ": cannot read");
        continue;
      }
      SourceFile sf{rel, *text, {}, {}};
      sf.lines = logical_lines(*text, &sf.imports);
      (is_modeling ? modeling : configuration).push_back(std::move(sf));
    }
    if (modeling.empty()) {
      a.skipped.push_back(folder);
      continue;
    }
    ModelAudit m;
    m.folder = folder;
    for (const auto& f : configuration) m.files.push_back(f.rel);
    for (const auto& f : modeling) m.files.push_back(f.rel);
    std::sort(m.files.begin(), m.files.end());
    FolderScan(rules, m, modeling, configuration).run();
    a.models.push_back(std::move(m));
  }
  if (!diag.ok()) return std::nullopt;
  merge_submodels(a, rules);
  if (a.models.empty()) {
    diag.error(models.string() + ": no model folder with a modeling_*.py file");
    return std::nullopt;
  }
  return a;
}

// ------------------------------------------------------------------------------------------------
// Reports.

namespace {

std::vector<std::string> ops_with(const ModelAudit& m, const Rules& r, Coverage c) {
  std::vector<std::string> out;
  for (const auto& [id, f] : m.ops)
    if (r.op(id)->coverage == c) out.push_back(id);
  return out;
}

std::string uncovered_ops(const ModelAudit& m, const Rules& r) {
  std::vector<std::string> out;
  for (const auto& id : ops_with(m, r, Coverage::kNewKernel)) out.push_back(id + " (new kernel)");
  for (const auto& id : ops_with(m, r, Coverage::kMissing)) out.push_back(id);
  return join(out, ", ");
}

// Missing / new-kernel operators with the number of folders that need them, most needed first.
std::vector<std::pair<std::string, size_t>> missing_by_models(const Audit& a, const Rules& r) {
  std::map<std::string, size_t> n;
  for (const auto& m : a.models)
    for (const auto& [id, f] : m.ops) {
      Coverage c = r.op(id)->coverage;
      if (c == Coverage::kMissing || c == Coverage::kNewKernel) ++n[id];
    }
  std::vector<std::pair<std::string, size_t>> out(n.begin(), n.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  return out;
}

std::string coverage_text(const Operator& op) {
  switch (op.coverage) {
    case Coverage::kKinds: return "covered by " + join(op.kinds, ", ");
    case Coverage::kComposition: return "composition of " + join(op.kinds, ", ") + ": " + op.how;
    case Coverage::kMissing: return "missing: " + op.reason;
    case Coverage::kNewKernel: return "new kernel: " + op.reason;
  }
  return "";
}

const std::vector<Verdict>& all_verdicts() {
  static const std::vector<Verdict> v = {Verdict::kCovered, Verdict::kComposition, Verdict::kPartial, Verdict::kNewKernel,
                                         Verdict::kUnclassified};
  return v;
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

// "llama" or "llava (llava)"... : the folder, and its model types when they differ from it.
std::string model_label(const ModelAudit& m) {
  if (m.model_types.size() == 1 && m.model_types[0] == m.folder) return m.folder;
  if (m.model_types.empty()) return m.folder + " (no model_type)";
  return m.folder + " (" + join(m.model_types, ", ") + ")";
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::string render_terminal(const Audit& a, const Rules& r, const DescribedTypes& described) {
  std::ostringstream o;
  o << "HF transformers audit: transformers " << a.version << " (" << a.version_source << "), rules " << a.rules_file << "\n";
  o << a.models.size() << " model folders audited, " << a.skipped.size() << " without modeling code skipped\n";
  for (Verdict v : all_verdicts()) o << "  " << pad(verdict_name(v), 13) << pad(std::to_string(a.count(v)), 5) << verdict_meaning(v) << "\n";
  if (!described.empty()) {
    o << "model types with a descriptor:\n";
    for (const auto& t : described) {
      const ModelAudit* m = a.find(t);
      o << "  " << pad(t, 14) << (m ? std::string(verdict_name(m->verdict)) + " (models/" + m->folder + ")" : "not in this transformers")
        << "\n";
    }
  }
  o << "missing operators, by number of model folders that need them:\n";
  for (const auto& [id, n] : missing_by_models(a, r)) {
    const Operator* op = r.op(id);
    o << "  " << pad(std::to_string(n), 5) << pad(id, 26) << pad(op->category, 11)
      << (op->coverage == Coverage::kNewKernel ? "new kernel: " : "") << op->reason << "\n";
  }
  o << "uncovered model folders (operators without a task kind; reasons above):\n";
  for (const auto& m : a.models)
    if (m.verdict == Verdict::kPartial || m.verdict == Verdict::kNewKernel)
      o << "  " << pad(m.folder, 28) << pad(verdict_name(m.verdict), 11) << uncovered_ops(m, r) << "\n";
  size_t unresolved = 0;
  for (const auto& m : a.models) unresolved += m.unresolved.size();
  if (a.count(Verdict::kUnclassified)) {
    o << "unclassified (no rule matched, or the checkpoint picks the sub-models):";
    for (const auto& m : a.models)
      if (m.verdict == Verdict::kUnclassified) o << " " << m.folder;
    o << "\n";
  }
  o << "summary: transformers " << a.version << ": " << a.count(Verdict::kCovered) << " covered, " << a.count(Verdict::kComposition)
    << " composition, " << a.count(Verdict::kPartial) << " partial, " << a.count(Verdict::kNewKernel) << " new-kernel, "
    << a.count(Verdict::kUnclassified) << " unclassified; " << unresolved
    << " activation reference(s) not resolved (see --explain <model>)\n";
  return o.str();
}

std::string render_markdown(const Audit& a, const Rules& r, const DescribedTypes& described, const std::string& command) {
  std::ostringstream o;
  o << "# HF transformers operator audit\n\n"
    << "<!-- @generated by `" << command << "`; do not edit by hand. -->\n\n"
    << "Which operators each model folder of HF transformers **" << a.version << "** needs, read from its\n"
    << "`modeling_*.py` and `configuration_*.py` source by the rules in `" << a.rules_file << "`\n"
    << "(docs/audit-rules.md), and how our task kinds cover them. Regenerate: `" << command << "`;\n"
    << "one model with its evidence (rule, file, line, matched text): `fastkernels audit --hf <transformers dir> --explain <model>`.\n\n"
    << "How to read it. The audit reads source, not checkpoints: configuration *defaults* pick activations and\n"
    << "rope types, so a checkpoint that overrides them may need other operators. Code paths a default config\n"
    << "does not take (cross-attention behind `add_cross_attention`, task heads) count too: the lists err on\n"
    << "the side of showing an operator. A verdict is per folder, so a folder holding a text model and its\n"
    << "multimodal wrapper (gemma3: gemma3_text and gemma3) gets the wrapper's verdict. Sub-models a folder\n"
    << "imports or names as configuration defaults (a vision tower loaded with AutoModel) add their operators\n"
    << "to its verdict and are listed under *uses*.\n\n"
    << "## Counts\n\n| verdict | folders | meaning |\n|---|---:|---|\n";
  for (Verdict v : all_verdicts()) o << "| " << verdict_name(v) << " | " << a.count(v) << " | " << verdict_meaning(v) << " |\n";
  o << "\n" << a.models.size() << " model folders audited; " << a.skipped.size()
    << " folders without modeling code skipped (tokenizer-only or aliases).\n\n";
  if (!described.empty()) {
    o << "## Model types with a descriptor\n\nCross-check of the audit against `generator/descriptors/`:\n\n"
      << "| model type | folder | verdict | not covered |\n|---|---|---|---|\n";
    for (const auto& t : described) {
      const ModelAudit* m = a.find(t);
      if (!m) o << "| " << t << " | — | not in transformers " << a.version << " | |\n";
      else o << "| " << t << " | " << m->folder << " | " << verdict_name(m->verdict) << " | " << md_escape(uncovered_ops(*m, r)) << " |\n";
    }
    o << "\n";
  }
  o << "## Missing operators\n\nBy the number of model folders that need them.\n\n| operator | category | folders | why it is not covered |\n|---|---|---:|---|\n";
  for (const auto& [id, n] : missing_by_models(a, r)) {
    const Operator* op = r.op(id);
    o << "| " << id << " | " << op->category << " | " << n << " | "
      << (op->coverage == Coverage::kNewKernel ? "**new kernel**: " : "") << md_escape(op->reason) << " |\n";
  }
  o << "\n## Covered\n\n";
  for (Verdict v : {Verdict::kCovered, Verdict::kComposition}) {
    o << "**" << verdict_name(v) << "** (" << a.count(v) << "):";
    bool first = true;
    for (const auto& m : a.models)
      if (m.verdict == v) o << (first ? " " : ", ") << model_label(m), first = false;
    o << (first ? " none" : "") << "\n\n";
  }
  const std::vector<std::string> comp_ops = [&] {
    std::set<std::string> s;
    for (const auto& m : a.models)
      for (const auto& id : ops_with(m, r, Coverage::kComposition)) s.insert(id);
    return std::vector<std::string>(s.begin(), s.end());
  }();
  if (!comp_ops.empty()) {
    o << "Compositions used:\n\n";
    for (const auto& id : comp_ops) o << "- `" << id << "`: " << join(r.op(id)->kinds, " + ") << "; " << r.op(id)->how << "\n";
    o << "\n";
  }
  o << "## Not covered\n\n| folder | model types | verdict | operators without a task kind | uses |\n|---|---|---|---|---|\n";
  for (const auto& m : a.models)
    if (m.verdict == Verdict::kPartial || m.verdict == Verdict::kNewKernel)
      o << "| " << m.folder << " | " << join(m.model_types, ", ") << " | " << verdict_name(m.verdict) << " | " << md_escape(uncovered_ops(m, r))
        << " | " << join(m.via, ", ") << " |\n";
  o << "\n## Unclassified\n\n";
  bool any = false;
  for (const auto& m : a.models)
    if (m.verdict == Verdict::kUnclassified) o << (any ? ", " : "") << m.folder, any = true;
  o << (any ? "\n" : "none\n");
  size_t unresolved = 0;
  for (const auto& m : a.models) unresolved += m.unresolved.size();
  o << "\n" << unresolved << " ACT2FN reference(s) could not be resolved statically and are not counted (`--explain` lists them).\n";
  return o.str();
}

std::string render_json(const Audit& a, const Rules& r) {
  std::ostringstream o;
  o << "{\n  \"_doc\": "
    << json("Generated by `fastkernels audit --hf` (scripts/audit_hf.sh); do not edit. Per HF transformers model folder: its "
            "model types, the verdict, and the operators it needs by how our task kinds cover them (operators: the catalogue "
            "below, from the rules file). Read by `fastkernels add` for model types without a descriptor.")
           .dump()
    << ",\n  \"transformers_version\": " << json(a.version).dump() << ",\n  \"rules\": " << json(a.rules_file).dump()
    << ",\n  \"counts\": {";
  bool first = true;
  for (Verdict v : all_verdicts()) o << (first ? "" : ", ") << json(verdict_name(v)).dump() << ": " << a.count(v), first = false;
  o << "},\n  \"operators\": {\n";
  first = true;
  for (const auto& op : r.operators) {
    json j = {{"category", op.category}, {"coverage", coverage_name(op.coverage)}};
    if (!op.kinds.empty()) j["kinds"] = op.kinds;
    if (!op.how.empty()) j["how"] = op.how;
    if (!op.reason.empty()) j["reason"] = op.reason;
    o << (first ? "" : ",\n") << "    " << json(op.id).dump() << ": " << j.dump();
    first = false;
  }
  o << "\n  },\n  \"models\": [\n";
  first = true;
  for (const auto& m : a.models) {
    json j = json::object();
    j["folder"] = m.folder;
    j["model_types"] = m.model_types;
    j["verdict"] = verdict_name(m.verdict);
    for (Coverage c : {Coverage::kKinds, Coverage::kComposition, Coverage::kMissing, Coverage::kNewKernel}) {
      auto ids = ops_with(m, r, c);
      if (!ids.empty()) j[coverage_name(c)] = ids;
    }
    if (!m.via.empty()) j["uses"] = m.via;
    if (!m.unresolved.empty()) j["unresolved"] = m.unresolved.size();
    o << (first ? "" : ",\n") << "    " << j.dump();
    first = false;
  }
  o << "\n  ]\n}\n";
  return o.str();
}

std::optional<std::string> explain(const Audit& a, const Rules& r, const std::string& name, std::string* error) {
  const ModelAudit* m = a.find(name);
  if (!m) {
    std::vector<std::string> close;
    for (const auto& x : a.models) {
      bool near = x.folder.find(name) != std::string::npos || (!x.folder.empty() && name.find(x.folder) != std::string::npos);
      for (const auto& t : x.model_types) near |= t.find(name) != std::string::npos;
      if (near) close.push_back(x.folder);
    }
    if (close.size() > 12) close.resize(12);
    *error = "unknown model " + json_quote(name) + ": neither a folder under models/ nor a model_type of transformers " + a.version +
             (close.empty() ? "" : "; close: " + join(close, ", "));
    return std::nullopt;
  }
  std::ostringstream o;
  o << "models/" << m->folder << ": " << verdict_name(m->verdict) << " (" << verdict_meaning(m->verdict) << ")\n"
    << "  transformers " << a.version << ", rules " << a.rules_file << "\n"
    << "  model types: " << (m->model_types.empty() ? "none declared" : join(m->model_types, ", ")) << "\n";
  if (!m->uses.empty()) o << "  sub-model types named by its configuration defaults: " << join(m->uses, ", ") << "\n";
  if (!m->uses_folders.empty()) o << "  imports the modeling code of: " << join(m->uses_folders, ", ") << "\n";
  if (!m->uses_unknown.empty()) o << "  sub-model types no audited folder declares (not merged): " << join(m->uses_unknown, ", ") << "\n";
  if (!m->via.empty())
    o << "  operators merged from (Note [Sub-models]; `--explain <folder>` for their evidence): " << join(m->via, ", ") << "\n";
  if (m->runtime_submodels && m->uses.empty() && m->uses_folders.empty())
    o << "  builds sub-models with AutoModel*.from_config but names no default: the checkpoint picks them, so this\n"
         "  folder cannot be `covered`\n";
  o << "  files: " << join(m->files, ", ") << "\n";
  auto evidence = [&](const Evidence& e) {
    o << "      " << e.rule << ": " << e.file << ":" << e.line << ": " << e.text << "\n";
    if (!e.note.empty()) o << "        " << e.note << "\n";
  };
  o << "operators (" << m->ops.size() << "):\n";
  for (const auto& cat : categories())
    for (const auto& [id, f] : m->ops) {
      const Operator* op = r.op(id);
      if (op->category != cat) continue;
      o << "  " << pad(cat, 11) << pad(id, 26) << (m->via_ops.count(id) ? "[sub-model] " : "") << coverage_text(*op) << "\n";
      for (const auto& e : f.evidence) evidence(e);
      if (f.count > f.evidence.size()) o << "      ... " << f.count - f.evidence.size() << " more match(es)\n";
    }
  if (!m->dropped.empty()) {
    o << "dropped (detected, then not counted):\n";
    for (const auto& [id, f] : m->dropped) {
      o << "  " << id << "\n";
      for (const auto& e : f.evidence) evidence(e);
    }
  }
  if (!m->unresolved.empty()) {
    o << "not counted (could not be resolved):\n";
    for (const auto& e : m->unresolved) evidence(e);
  }
  o << "verdict: " << verdict_name(m->verdict);
  const std::string unc = uncovered_ops(*m, r);
  if (!unc.empty()) o << "; not covered: " << unc;
  o << "\n";
  return o.str();
}

// ------------------------------------------------------------------------------------------------
// The summary, read back.

const SummaryModel* Summary::find(const std::string& model_type) const {
  for (const auto& m : models)
    if (std::count(m.model_types.begin(), m.model_types.end(), model_type)) return &m;
  for (const auto& m : models)
    if (m.folder == model_type) return &m;
  return nullptr;
}

std::optional<Summary> load_summary(const std::string& file, const std::string& text, Diagnostics& diag) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    diag.error(file + ": malformed JSON: " + std::string(e.what()));
    return std::nullopt;
  }
  auto bad = [&](const std::string& path, const std::string& expected) {
    diag.error(file + ": " + path + ": expected " + expected);
    return std::nullopt;
  };
  if (!j.is_object()) return bad("$", "an object (a summary written by `fastkernels audit --hf --hf-json`)");
  Summary s;
  s.file = file;
  if (!j.contains("transformers_version") || !j["transformers_version"].is_string()) return bad("$.transformers_version", "a string");
  s.version = j["transformers_version"];
  if (!j.contains("operators") || !j["operators"].is_object()) return bad("$.operators", "an object");
  for (const auto& [id, op] : j["operators"].items()) {
    if (!op.is_object() || !op.contains("category") || !op.contains("coverage"))
      return bad("$.operators." + id, "an object with category and coverage");
    SummaryOperator so;
    so.category = op.value("category", "");
    so.coverage = op.value("coverage", "");
    if (op.contains("kinds")) {
      std::vector<std::string> k;
      for (const auto& x : op["kinds"]) k.push_back(x.is_string() ? x.get<std::string>() : x.dump());
      so.detail = join(k, ", ");
      so.kinds = k;
    }
    if (op.contains("how")) so.detail += ": " + op.value("how", "");
    if (op.contains("reason")) so.detail = op.value("reason", "");
    s.operators[id] = so;
  }
  if (!j.contains("models") || !j["models"].is_array()) return bad("$.models", "an array");
  for (size_t i = 0; i < j["models"].size(); ++i) {
    const json& m = j["models"][i];
    const std::string path = "$.models[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("folder") || !m.contains("verdict") || !m.contains("model_types"))
      return bad(path, "an object with folder, model_types and verdict");
    SummaryModel sm;
    sm.folder = m.value("folder", "");
    sm.verdict = m.value("verdict", "");
    for (const auto& t : m["model_types"])
      if (t.is_string()) sm.model_types.push_back(t);
    for (const char* c : {"kinds", "composition", "missing", "new_kernel"})
      if (m.contains(c))
        for (const auto& id : m[c]) {
          if (!id.is_string() || !s.operators.count(id.get<std::string>()))
            return bad(path + "." + c, "operator ids of $.operators");
          sm.by_coverage[c].push_back(id);
        }
    s.models.push_back(std::move(sm));
  }
  return s;
}

std::string render_add_report(const std::string& model_type, const Summary* s, const std::string& summary_problem) {
  std::ostringstream o;
  const std::string howto = "docs/HOWTO-add-architecture.md";
  if (!s) {
    o << "The transformers audit cannot say more about model_type " << json_quote(model_type) << ": " << summary_problem
      << ".\nNext: run scripts/audit_hf.sh --update to (re)create " << kSummaryPath << ", or write a descriptor (" << howto << ").\n";
    return o.str();
  }
  const SummaryModel* m = s->find(model_type);
  if (!m) {
    o << "model_type " << json_quote(model_type) << " is unknown to the transformers audit too (" << s->file << ", transformers "
      << s->version << "): it is no model folder or model_type of that release (remote code? a newer release? a typo?).\n"
      << "Next: check the config's model_type; rerun scripts/audit_hf.sh with a newer transformers version; or read the\n"
      << "model's modeling code by hand and write a descriptor (" << howto << ", \"A new family\").\n";
    return o.str();
  }
  o << "What the transformers audit knows about model_type " << json_quote(model_type) << " (models/" << m->folder << ", transformers "
    << s->version << ", " << s->file << "):\n"
    << "  verdict: " << m->verdict << "\n";
  auto list = [&](const char* coverage, const char* title) {
    auto it = m->by_coverage.find(coverage);
    if (it == m->by_coverage.end() || it->second.empty()) return;
    o << "  " << title << ":\n";
    for (const auto& id : it->second) {
      const SummaryOperator& op = s->operators.at(id);
      o << "    " << pad(id, 26) << pad(op.category, 11) << op.detail << "\n";
    }
  };
  list("kinds", "covered by our task kinds");
  list("composition", "covered by composition");
  list("missing", "missing (no task kind)");
  list("new_kernel", "needs a new kernel");
  o << "Next steps:\n";
  if (m->verdict == "covered" || m->verdict == "composition") {
    o << "  every operator the audit found maps to existing kinds. That does not make the forward pass a known\n"
      << "  model type's (the same operators can be wired differently): read its modeling code. If it is one's,\n"
      << "  `fastkernels add --as <that model_type>` lowers this config as it, knowingly (recorded; then check the claim\n"
      << "  with bench/parity/hf_parity.py, which runs transformers' own class for " << json_quote(model_type) << "), or add\n"
      << "  " << json_quote(model_type) << " to that descriptor's model_types (generator/descriptors/*.json); otherwise write a\n"
      << "  descriptor for the new family (docs/descriptors.md). See " << howto << ".\n";
  } else if (m->verdict == "unclassified") {
    o << "  no audit rule matched this model's source: read its modeling code, then write a descriptor (" << howto << ").\n";
  } else {
    o << "  1. add task kinds for the missing operators (" << howto << ", \"A new family\": an entry in generator/kinds/*.json,\n"
      << "     templates, a harness and kernels)" << (m->verdict == "new-kernel" ? "; the new-kernel ones need kernels of their own" : "")
      << ";\n  2. write the family's descriptor (docs/descriptors.md);\n  3. rerun `fastkernels add`.\n"
      << "  `scripts/audit_hf.sh --explain " << m->folder << "` (or `fastkernels audit --hf <transformers dir> --explain " << m->folder
      << "`) shows the evidence for each operator.\n";
  }
  return o.str();
}

namespace {
std::vector<std::string> model_type_names(const Descriptor& d) {
  std::vector<std::string> out;
  for (const auto& [t, _] : d.model_types) out.push_back(t);
  return out;
}
}  // namespace

std::string nearest_descriptors_report(const DescriptorSet& descriptors, const json& config, const Summary* summary,
                                       const SummaryModel* model, size_t top) {
  // The config's keys as the parser sees them: top level, then text_config's (which take precedence).
  std::map<std::string, std::string> keys;  // key -> JSON path
  for (const auto& [k, v] : config.items())
    if (k != "text_config") keys[k] = "$." + k;
  if (config.contains("text_config") && config["text_config"].is_object())
    for (const auto& [k, v] : config["text_config"].items()) keys[k] = "$.text_config." + k;
  std::set<std::string> audit_kinds;
  if (summary && model)
    for (const char* c : {"kinds", "composition"})
      if (auto it = model->by_coverage.find(c); it != model->by_coverage.end())
        for (const auto& id : it->second)
          for (const auto& k : summary->operators.at(id).kinds) audit_kinds.insert(k);
  struct Rank {
    const Descriptor* d;
    std::vector<std::string> shared_kinds, unbound_kinds, reads, unknown, lacking;
  };
  std::vector<Rank> ranks;
  for (const auto& dp : descriptors.all()) {
    const Descriptor& d = *dp;
    Rank r{&d, {}, {}, {}, {}, {}};
    std::set<std::string> kinds;
    for (const auto& item : d.forward) {
      if (item.op) kinds.insert(item.op->kind);
      for (const auto& s : item.layer_ops) kinds.insert(s.kind);
    }
    for (const auto& k : audit_kinds) (kinds.count(k) ? r.shared_kinds : r.unbound_kinds).push_back(k);
    std::set<std::string> present;  // canonical fields the config sets
    for (const auto& [key, path] : keys) {
      if (key == "model_type" || key == "architectures" || d.ignored_keys.count(key) || tool_only_keys().count(key)) continue;
      const FieldSpec* spec = find_field(key);
      if (spec && d.fields.count(spec->name)) {
        present.insert(spec->name);
        r.reads.push_back(spec->name == key ? key : key + " -> " + spec->name);
      } else {
        r.unknown.push_back(key);
      }
    }
    for (const auto& [name, use] : d.fields)
      if (use.required && !present.count(name)) r.lacking.push_back(name);
    ranks.push_back(std::move(r));
  }
  std::stable_sort(ranks.begin(), ranks.end(), [](const Rank& a, const Rank& b) {
    if (a.shared_kinds.size() != b.shared_kinds.size()) return a.shared_kinds.size() > b.shared_kinds.size();
    if (a.lacking.size() != b.lacking.size()) return a.lacking.size() < b.lacking.size();
    if (a.unknown.size() != b.unknown.size()) return a.unknown.size() < b.unknown.size();
    return a.reads.size() > b.reads.size();
  });
  std::ostringstream o;
  o << "Nearest descriptors (Note [Nearest descriptor]: by the task kinds the audit maps this model's operators to";
  o << (audit_kinds.empty() ? " (none known)" : " (" + std::to_string(audit_kinds.size()) + ")") << ", then by the config keys):\n";
  for (size_t i = 0; i < ranks.size() && i < top; ++i) {
    const Rank& r = ranks[i];
    o << "  " << i + 1 << ". family " << r.d->family << " (" << r.d->file << "; model types " << join(model_type_names(*r.d), ", ")
      << "): " << r.shared_kinds.size() << " of " << audit_kinds.size() << " kinds, " << r.reads.size() << " config keys read, "
      << r.unknown.size() << " it does not know, " << r.lacking.size() << " required fields missing\n";
    o << "       fields it reads: " << (r.reads.empty() ? "none" : join(r.reads, ", ")) << "\n";
    if (!r.unknown.empty())
      o << "       keys it does not know (each must be mapped to a field, added to its ignored_keys if it leaves the forward pass "
           "alone, or accepted with `add --allow-unknown`): " << join(r.unknown, ", ") << "\n";
    if (!r.lacking.empty()) o << "       required fields the config lacks: " << join(r.lacking, ", ") << "\n";
    if (!r.unbound_kinds.empty()) o << "       kinds the audit found that it never binds: " << join(r.unbound_kinds, ", ") << "\n";
    if (i == 0 && r.lacking.empty()) {
      const std::vector<std::string> types = model_type_names(*r.d);
      o << "       try: fastkernels add <config> --as " << (types.size() == 1 ? types[0] : "<" + join(types, " | ") + ">")
        << (r.unknown.empty() ? "" : " --allow-unknown " + join(r.unknown, " "))
        << (types.size() == 1 ? "" : "  (the model types differ in their constants: see " + r.d->file + ")")
        << "; then bench/parity/hf_parity.py proves it or not\n";
    }
  }
  return o.str();
}

std::optional<std::string> unknown_model_type_report(const fs::path& root, const std::string& config_file, const std::string& config_text,
                                                     const std::string& component) {
  json j = json::parse(python_json_text(config_text), nullptr, /*allow_exceptions=*/false);
  if (!component.empty()) j = j.is_object() && j.contains(component) ? j[component] : json();  // Note [Config components]
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return std::nullopt;
  const std::string model_type = j["model_type"];
  Diagnostics descriptor_diag;
  DescriptorSet descriptors = load_descriptors(root, descriptor_diag);
  // Broken descriptors are the pipeline's to report; a claimed model type goes the usual way.
  if (!descriptor_diag.ok() || descriptors.by_model_type(model_type)) return std::nullopt;
  std::ostringstream o;
  o << config_file << ": $.model_type: unknown model_type " << json_quote(model_type) << "; known: " << join(descriptors.model_types(), ", ")
    << "; no descriptor under generator/descriptors/ claims it, so nothing was added (if its forward pass is one of "
       "those model types', `add --as <model_type>` lowers it as that one knowingly)\n";
  // A composite config (a VLM's): its components are models of their own (Note [Config components]
  // in generator/src/passes/parse.cc). Say which of them a descriptor claims, under the model type the
  // parser derives (the component's own, else the composite's + "_" + the key without "_config"), with
  // the legacy layout's text model (the text keys at the top level) as text_config.
  if (component.empty()) {
    std::vector<std::pair<std::string, std::string>> parts;  // key, derived model type
    // A model component, not a setting object (quantization_config): it names a model type or its size.
    auto model_like = [](const json& v) {
      for (const char* key : {"model_type", "hidden_size", "num_hidden_layers", "depth", "embed_dim"})
        if (v.contains(key)) return true;
      return false;
    };
    for (const auto& [k, v] : j.items())
      if (is_component_key(k) && k != "quantization_config" && v.is_object() && model_like(v)) {
        parts.push_back({k, component_model_type(model_type, k, v.contains("model_type") && v["model_type"].is_string()
                                                                    ? v["model_type"].get<std::string>() : "")});
      }
    if (!j.contains("text_config") && j.contains("hidden_size") && j.contains("num_hidden_layers") && !parts.empty())
      parts.push_back({"text_config", component_model_type(model_type, "text_config", "")});
    std::sort(parts.begin(), parts.end());
    if (!parts.empty()) {
      o << "It is a composite config: each component is a model of its own, lowered by `add --component <key>`:\n";
      for (const auto& [k, mt] : parts) {
        const Descriptor* d = descriptors.by_model_type(mt);
        o << "  " << k << (k == "text_config" && !j.contains("text_config") ? " (the top-level text keys)" : "") << ": model_type "
          << json_quote(mt) << (d ? ", family " + d->family + " (" + d->file + ")" : std::string(", claimed by no descriptor")) << "\n";
      }
    }
  }
  const fs::path summary_path = root / kSummaryPath;
  auto text = read_text(summary_path);
  if (!text) {
    o << render_add_report(model_type, nullptr, std::string("no audit summary at ") + kSummaryPath);
    return o.str();
  }
  Diagnostics diag;
  auto s = load_summary(kSummaryPath, *text, diag);
  std::string problem = diag.text();
  while (!problem.empty() && problem.back() == '\n') problem.pop_back();
  o << render_add_report(model_type, s ? &*s : nullptr, problem);
  const SummaryModel* m = s ? s->find(model_type) : nullptr;
  if (!m || m->verdict == "covered" || m->verdict == "composition") o << nearest_descriptors_report(descriptors, j, s ? &*s : nullptr, m);
  return o.str();
}

}  // namespace fk::gen::hfaudit
