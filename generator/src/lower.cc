// The lower pass (see fk/gen/lower.h).
#include "fk/gen/lower.h"

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
    }
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

  void step(const OpStep& s, const std::string& name, std::optional<int64_t> layer) {
    auto e = env(layer);
    if (s.when) {
      try {
        Value v = s.when->eval(e);
        if (v.index() != 1) throw GenError{"expected boolean, got " + value_to_display(v)};
        if (!std::get<bool>(v)) return;
      } catch (const GenError& ge) {
        return fail(s.json_path + ".if", name, ge.message);
      }
    }
    OpInstance op;
    op.name = name;
    op.kind = find_kind(s.kind);
    op.dtype = cfg_.dtype;
    bool ok = true;
    for (const auto& ps : op.kind->params) {
      std::string where = s.json_path + ".bind." + ps.name;
      try {
        Value v = s.bind.at(ps.name).eval(e);
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
                         s.kind + ", got " + value_to_display(v) + " from \"" + s.bind.at(ps.name).text() + "\""};
        op.params[ps.name] = v;
      } catch (const GenError& ge) {
        fail(where, name, ge.message);
        ok = false;
      }
    }
    if (!ok) return;
    if (!names_.insert(name).second)
      return fail(s.json_path + ".op", name, "expected a unique op name, got a second op named " + json_quote(name));
    out_.ops.push_back(std::move(op));
  }

  const ResolvedConfig& cfg_;
  Diagnostics& diag_;
  LoweredModel& out_;
  std::set<std::string> reported_;
  std::set<std::string> names_;
};

}  // namespace

std::optional<LoweredModel> lower(const ResolvedConfig& cfg, Diagnostics& diag) {
  LoweredModel m;
  m.id = cfg.id;
  m.file = cfg.file;
  m.model_type = cfg.model_type;
  m.descriptor_file = cfg.descriptor->file;
  size_t before = diag.errors().size();
  Lowerer(cfg, diag, m).run();
  if (diag.errors().size() != before) return std::nullopt;
  return m;
}

}  // namespace fk::gen
