// The lower pass (see fk/gen/lower.h).
#include "fk/gen/lower.h"

#include <algorithm>
#include <map>
#include <set>

#include "fk/gen/format.h"

namespace fk::gen {

namespace {

class Lowerer {
 public:
  Lowerer(const ResolvedConfig& cfg, Diagnostics& diag, LoweredModel& out) : cfg_(cfg), diag_(diag), out_(out) {}

  void run() {
    const Descriptor& d = *cfg_.descriptor;
    for (size_t i = 0; i < d.forward.size(); ++i) {
      const ForwardItem& item = d.forward[i];
      if (item.op) {
        step(*item.op, item.op->op, std::nullopt);
        continue;
      }
      std::string where = "$.forward[" + std::to_string(i) + "].repeat";
      int64_t n = 0;
      try {
        Value v = item.repeat->eval(env(std::nullopt));
        if (v.index() != 2 || std::get<int64_t>(v) < 0) throw GenError{"expected non-negative integer, got " + value_to_display(v)};
        n = std::get<int64_t>(v);
      } catch (const GenError& e) {
        fail(where, "", e.message);
        continue;
      }
      for (int64_t layer = 0; layer < n; ++layer)
        for (const auto& s : item.layer_ops) step(s, "blk." + std::to_string(layer) + "." + s.op, layer);
      if (n > 0)
        for (const auto& s : item.layer_ops) last_layer_[s.op] = n - 1;
      loop_layers_ = std::max(loop_layers_, n);
    }
    for (const auto& m : d.modules) module(m);
  }

 private:
  Expr::Env env(std::optional<int64_t> layer) const {
    return [this, layer](const std::string& name) -> std::optional<Value> {
      if (layer && name == "layer") return Value(*layer);
      auto it = cfg_.values.find(name);
      if (it == cfg_.values.end()) return std::nullopt;
      return it->second;
    };
  }

  // Errors name the descriptor location; each location is reported once (not once per layer).
  void fail(const std::string& descriptor_path, const std::string& op, const std::string& what) {
    if (!reported_.insert(descriptor_path).second) return;
    diag_.error(cfg_.file + ": " + (op.empty() ? "" : op + ": ") + cfg_.descriptor->file + " " + descriptor_path + ": " + what);
  }

  // Whether an op or module with this `if` exists; nullopt after reporting an error.
  std::optional<bool> exists(const std::optional<Expr>& when, const std::string& json_path, const std::string& name,
                             const Expr::Env& e) {
    if (!when) return true;
    try {
      Value v = when->eval(e);
      if (v.index() != 1) throw GenError{"expected boolean, got " + value_to_display(v)};
      return std::get<bool>(v);
    } catch (const GenError& ge) {
      fail(json_path + ".if", name, ge.message);
      return std::nullopt;
    }
  }

  void step(const OpStep& s, const std::string& name, std::optional<int64_t> layer) {
    auto e = env(layer);
    auto on = exists(s.when, s.json_path, name, e);
    if (!on || !*on) return;
    OpInstance op;
    op.name = name;
    op.kind = find_kind(s.kind);
    op.dtype = cfg_.dtype;
    if (!bind(*op.kind, s.bind, s.json_path, name, e, op.params)) return;
    // Note [Served constants]: refused here, naming what is served, not at compile or run time.
    if (op.kind->served) {
      const std::string why = op.kind->served(op.params, cfg_.dtype);
      if (!why.empty() && reported_.insert("served:" + op.kind->kind).second)
        diag_.error(cfg_.file + ": " + name + " (" + op.kind->kind + "): " + why + "; no task can be generated for this config");
      // The op stays, so the modules that use it report nothing more (the error stops generation).
    }
    if (!names_.insert(name).second)
      return fail(s.json_path + ".op", name, "expected a unique op name, got a second op named " + json_quote(name));
    out_.ops.push_back(std::move(op));
  }

  // A composite module, once per model: its children are the last layer's ops (Note
  // [Last-layer roles]), ops outside the loop, or earlier modules.
  void module(const ModuleStep& s) {
    auto e = env(std::nullopt);
    auto on = exists(s.when, s.json_path, s.op, e);
    std::optional<int64_t> at_layer;
    if (on && *on && s.at) {
      at_layer = representative_layer(s);
      if (!at_layer) on = std::nullopt;  // reported
      else if (*at_layer < 0) {  // no layer qualifies: the module is absent
        on = false;
        absent_why_[s.op] = "its \"at\" holds in no layer of this config";
      }
      else e = env(at_layer);
    }
    if (!on) broken_.insert(s.op);
    if (!on || !*on) return;
    ModuleInstance m;
    m.name = s.op;
    m.kind = find_kind(s.kind);
    m.dtype = cfg_.dtype;
    bool ok = bind(*m.kind, s.bind, s.json_path, s.op, e, m.params);
    for (const auto& c : s.children) {
      std::string child = c.role, target = (c.module ? "module " : "op ") + c.role;
      std::string why = "its \"if\" is false for this config";
      if (c.module && absent_why_.count(c.role)) why = absent_why_.at(c.role);
      if (s.layer_scope && !c.module) {
        auto last = last_layer_.find(c.role);
        if (last == last_layer_.end()) {
          child.clear();
          target = "an op of role " + json_quote(c.role);
          why = "the layer loop has no layer";
        } else if (at_layer) {
          child = "blk." + std::to_string(*at_layer) + "." + c.role;
          target = "op " + child + " (role " + json_quote(c.role) + " in the last layer where \"at\" holds)";
          why = "its \"if\" is false in that layer";
        } else {
          child = "blk." + std::to_string(last->second) + "." + c.role;
          target = "op " + child + " (role " + json_quote(c.role) + " in the last layer)";
        }
      }
      if (!names_.count(child)) child.clear();
      if (c.module && broken_.count(c.role)) {
        ok = false;  // already reported
      } else if (child.empty() && !c.optional) {
        fail(s.json_path + ".children." + c.slot, s.op,
             "expected " + target + ", got nothing: " + why + " (an optional role is written " + json_quote(c.role + "?") + ")");
        ok = false;
      }
      m.children.emplace_back(c.slot, child);
    }
    if (!ok) {
      broken_.insert(s.op);
      return;
    }
    if (!names_.insert(s.op).second)
      return fail(s.json_path + ".op", s.op, "expected a unique op name, got a second op named " + json_quote(s.op));
    out_.modules.push_back(std::move(m));
  }

  // The last layer where the module's `at` holds; -1 when none does, nullopt after reporting.
  std::optional<int64_t> representative_layer(const ModuleStep& s) {
    for (int64_t layer = loop_layers_ - 1; layer >= 0; --layer) {
      try {
        Value v = s.at->eval(env(layer));
        if (v.index() != 1) throw GenError{"expected boolean, got " + value_to_display(v)};
        if (std::get<bool>(v)) return layer;
      } catch (const GenError& ge) {
        fail(s.json_path + ".at", s.op, ge.message);
        return std::nullopt;
      }
    }
    return -1;
  }

  // Evaluates and type-checks every parameter of `kind` into `out`; false after reporting.
  bool bind(const KindSpec& kind, const std::map<std::string, Expr>& exprs, const std::string& json_path,
            const std::string& name, const Expr::Env& e, Params& out) {
    bool ok = true;
    for (const auto& ps : kind.params) {
      std::string where = json_path + ".bind." + ps.name;
      if (!exprs.count(ps.name) && ps.dflt) {  // the kind's default (a parameter the descriptor leaves out)
        out[ps.name] = *ps.dflt;
        continue;
      }
      try {
        Value v = exprs.at(ps.name).eval(e);
        bool fits = false;
        switch (ps.type) {
          case ParamType::kInt: fits = v.index() == 2; break;
          case ParamType::kFloat:
            fits = is_numeric(v);
            if (fits) v = as_double(v);
            break;
          case ParamType::kBool: fits = v.index() == 1; break;
          case ParamType::kString: fits = v.index() == 4; break;
        }
        if (!fits)
          throw GenError{std::string("expected ") + param_type_name(ps.type) + " for parameter " + ps.name + " of kind " +
                         kind.kind + ", got " + value_to_display(v) + " from \"" + exprs.at(ps.name).text() + "\""};
        out[ps.name] = v;
      } catch (const GenError& ge) {
        fail(where, name, ge.message);
        ok = false;
      }
    }
    return ok;
  }

  const ResolvedConfig& cfg_;
  Diagnostics& diag_;
  LoweredModel& out_;
  std::set<std::string> reported_;
  std::set<std::string> names_;                     // ops and modules lowered so far
  std::map<std::string, int64_t> last_layer_;       // layer-loop role -> its loop's last layer
  int64_t loop_layers_ = 0;                         // the layer loop's repeat count
  std::map<std::string, std::string> absent_why_;   // modules absent for a reason other than "if"
  std::set<std::string> broken_;                    // modules not lowered because of an error
};

}  // namespace

std::optional<LoweredModel> lower(const ResolvedConfig& cfg, Diagnostics& diag) {
  LoweredModel m;
  m.id = cfg.id;
  m.file = cfg.file;
  m.model_type = cfg.model_type;
  m.descriptor_file = cfg.descriptor->file;
  m.dequantized_from = cfg.dequantized_from;
  m.allowed_unknown = cfg.choices.allow_unknown;
  m.dtype_from = cfg.dtype_from;
  m.served_as = cfg.served_as;
  if (!cfg.choices.pooling.empty()) m.pooling = cfg.choices.pooling + (cfg.choices.normalize ? "+normalize" : "");
  size_t before = diag.errors().size();
  Lowerer(cfg, diag, m).run();
  if (diag.errors().size() != before) return std::nullopt;
  return m;
}

}  // namespace fk::gen
