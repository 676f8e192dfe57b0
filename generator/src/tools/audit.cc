// `fastkernels audit` (see fk/gen/audit.h): build the coverage figures, render them.
#include "fk/gen/audit.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fk/gen/kinds.h"

namespace fk::gen::coverage {

namespace {

constexpr int kLevels = 4;

std::string level_name(int level) { return level == 0 ? "all" : "L" + std::to_string(level); }

// "12.3" (one decimal): instances per task, tasks per kind. Deterministic, locale-free.
std::string ratio(size_t num, size_t den) {
  if (den == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(num) / static_cast<double>(den));
  return buf;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string cell_text(size_t n) { return n ? std::to_string(n) : "."; }

// A table of text cells; numeric columns right-aligned. Renders as aligned text or markdown.
struct Table {
  std::vector<std::string> header;
  std::vector<bool> right;  // per column
  std::vector<std::vector<std::string>> rows;

  std::string text(const std::string& indent) const {
    std::vector<size_t> width(header.size(), 0);
    for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    auto line = [&](const std::vector<std::string>& r) {
      std::string s = indent;
      for (size_t i = 0; i < r.size(); ++i) {
        std::string pad(width[i] - r[i].size(), ' ');
        s += right[i] ? pad + r[i] : r[i] + pad;
        if (i + 1 < r.size()) s += "  ";
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s + "\n";
    };
    std::string out = line(header);
    for (const auto& r : rows) out += line(r);
    return out;
  }

  std::string markdown() const {
    auto line = [](const std::vector<std::string>& r) {
      std::string s = "|";
      for (const auto& c : r) s += " " + c + " |";
      return s + "\n";
    };
    std::string out = line(header) + "|";
    for (size_t i = 0; i < header.size(); ++i) out += right[i] ? "---:|" : "---|";
    out += "\n";
    for (const auto& r : rows) out += line(r);
    return out;
  }
};

Table consolidation_table(const Audit& a) {
  Table t{{"level", "op instances", "tasks", "kinds used", "kinds registered", "instances/task", "tasks/kind"},
          {false, true, true, true, true, true, true},
          {}};
  auto row = [&](const LevelFigures& f) {
    t.rows.push_back({level_name(f.level), std::to_string(f.op_instances), std::to_string(f.tasks), std::to_string(f.kinds),
                      std::to_string(f.registered_kinds), ratio(f.op_instances, f.tasks), ratio(f.tasks, f.kinds)});
  };
  for (const auto& f : a.levels) row(f);
  row(a.total);
  return t;
}

Table cover_table(const Audit& a, bool markdown) {
  Table t{{"pick", "config", "new kinds", "covered"}, {true, false, true, true}, {}};
  if (markdown) {
    t.header.push_back("kinds it adds");
    t.right.push_back(false);
  }
  for (size_t i = 0; i < a.cover.size(); ++i) {
    const CoverPick& p = a.cover[i];
    std::vector<std::string> r = {std::to_string(i + 1), p.arch, "+" + std::to_string(p.new_kinds.size()),
                                  std::to_string(p.covered) + "/" + std::to_string(a.needed_kinds)};
    if (markdown) {
      std::vector<std::string> ticked;
      for (const auto& k : p.new_kinds) ticked.push_back("`" + k + "`");
      r.push_back(join(ticked, ", "));
    }
    t.rows.push_back(r);
  }
  return t;
}

/// "64 all_reduce, 1 all_gather" (Note [Collectives per step]); "." unsharded.
std::string collectives_text(const ArchRow& r) {
  std::vector<std::string> parts;
  for (const auto& [c, n] : r.collectives) parts.push_back(std::to_string(n) + " " + c);
  return parts.empty() ? "." : join(parts, ", ");
}

Table arch_table(const Audit& a, bool markdown) {
  Table t{{"#", "config", "family", "model_type", "op instances", "tasks", "kinds", "collectives / step", "only here"},
          {true, false, false, false, true, true, true, false, markdown ? false : true},
          {}};
  for (size_t i = 0; i < a.archs.size(); ++i) {
    const ArchRow& r = a.archs[i];
    std::string only = std::to_string(r.exclusive.size());
    if (markdown && !r.exclusive.empty()) {
      std::vector<std::string> ticked;
      for (const auto& k : r.exclusive) ticked.push_back("`" + k + "`");
      only += ": " + join(ticked, ", ");
    }
    t.rows.push_back({std::to_string(i + 1), markdown ? "`" + r.id + "`" : r.id, r.family, r.model_type,
                      std::to_string(r.op_instances), std::to_string(r.tasks), std::to_string(r.kinds.size()), collectives_text(r), only});
  }
  return t;
}

// Kinds, most shared first, with the matrix cells as columns 1..N (the architectures' numbers).
Table operator_table(const Audit& a, bool markdown) {
  Table t{{"kind", "level", "class", "archs", "tasks", "op instances"}, {false, false, false, true, true, true}, {}};
  for (size_t i = 0; i < a.archs.size(); ++i) {
    t.header.push_back(std::to_string(i + 1));
    t.right.push_back(true);
  }
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < a.kinds.size(); ++k) index[a.kinds[k].kind] = k;
  for (const KindRow* k : by_sharing(a)) {
    std::vector<std::string> r = {markdown ? "`" + k->kind + "`" : k->kind, level_name(k->level), k->class_name,
                                  std::to_string(k->archs.size()), std::to_string(k->tasks), std::to_string(k->op_instances)};
    for (size_t i = 0; i < a.archs.size(); ++i) r.push_back(cell_text(a.matrix[i][index.at(k->kind)]));
    t.rows.push_back(r);
  }
  return t;
}

std::vector<std::string> unused_kinds(const Audit& a) {
  std::vector<std::string> out;
  for (const auto& k : a.kinds)
    if (k.archs.empty()) out.push_back(k.kind);
  return out;
}

}  // namespace

Audit build(const Generation& g) {
  Audit a;
  std::vector<std::string> names = kind_names(false);
  for (const auto& k : kind_names(true)) names.push_back(k);
  for (const auto& n : names) {
    const KindSpec* spec = find_kind(n);
    a.kinds.push_back({n, spec->level, spec->class_name, {}, 0, 0});
  }
  std::sort(a.kinds.begin(), a.kinds.end(),
            [](const KindRow& x, const KindRow& y) { return std::tie(x.level, x.kind) < std::tie(y.level, y.kind); });
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < a.kinds.size(); ++k) index[a.kinds[k].kind] = k;

  a.levels.resize(kLevels);
  for (int l = 1; l <= kLevels; ++l) a.levels[l - 1].level = l;
  for (const auto& k : a.kinds) a.levels.at(k.level - 1).registered_kinds++;

  std::map<std::string, std::string> family;
  for (const auto& r : g.resolved) family[r.id] = r.descriptor->family;

  std::vector<const ModelTasks*> models;
  for (const auto& m : g.tasks.models) models.push_back(&m);
  std::sort(models.begin(), models.end(), [](const ModelTasks* x, const ModelTasks* y) { return x->id < y->id; });

  for (const ModelTasks* m : models) {
    ArchRow row{m->id, m->file, family[m->id], m->model_type, m->ops.size() + m->modules.size(), m->tasks.size(), {}, {}, {}};
    std::vector<size_t> cells(a.kinds.size(), 0);
    for (const auto* list : {&m->ops, &m->modules})
      for (const auto& [op, task] : *list) {
        const Task& t = g.tasks.tasks.at(task);
        a.kinds[index.at(t.kind)].op_instances++;
        a.levels.at(t.level - 1).op_instances++;
      }
    for (const auto& task : m->tasks) cells[index.at(g.tasks.tasks.at(task).kind)]++;
    // Note [Collectives per step]
    // A kind whose forward communicates (KindSpec::collective) does so once per call where its tp_size is above 1.
    // L1 ops are listed once per layer, composite modules once per model: a layer-scope module (L2, L3) runs
    // num_hidden_layers times per step (the model task's), the model (L4) once. So Llama-3.1-8B at TP 2 makes 2 x 32
    // row-parallel reduces, the embedding's reduce and the logits' gather per step.
    auto placeholder = [&](const Task& t, const std::string& name) -> int64_t {
      for (const auto& [k, v] : t.placeholders)
        if (k == name) return std::stoll(v);
      return 0;
    };
    int64_t layers = 1;
    // Modules the model's forward does not reach (the fused all-reduce + norm, the overlapped sequence-parallel linears:
    // alternatives timed at the layers' shapes) make no collective of a step: only the model task's children closure counts.
    std::set<std::string> reached;
    std::vector<std::string> todo;
    for (const auto& [op, task] : m->modules)
      if (g.tasks.tasks.at(task).level == 4) {
        layers = std::max<int64_t>(1, placeholder(g.tasks.tasks.at(task), "num_hidden_layers"));
        todo.push_back(task);
      }
    const bool has_model = !todo.empty();
    while (!todo.empty()) {
      const std::string name = todo.back();
      todo.pop_back();
      if (!reached.insert(name).second) continue;
      const auto it = g.tasks.tasks.find(name);
      if (it == g.tasks.tasks.end()) continue;  // an optional child that is absent (empty name)
      for (const auto& [role, child] : it->second.children) todo.push_back(child);
    }
    for (const auto* list : {&m->ops, &m->modules})
      for (const auto& [op, task] : *list) {
        const Task& t = g.tasks.tasks.at(task);
        const KindSpec* spec = find_kind(t.kind);
        if (list == &m->modules && has_model && !reached.count(task)) continue;
        if (spec && !spec->collective.empty() && placeholder(t, "tp_size") > 1)
          row.collectives[spec->collective] += list == &m->ops || t.level == 4 ? 1 : layers;
        // At a data-parallel layout (tp 1, ep > 1: Note [Data-parallel expert MoE] in runtime/include/fk/tasks/moe.h) each
        // MoE block moves its tokens to the experts' ranks and back: one dispatch and one combine per MoE layer, counted
        // by their routers (DeepSeek-V3's first dense layers have none).
        if ((t.kind == "sparse_moe_block" || t.kind == "deepseek_moe") && placeholder(t, "tp_size") == 1 && placeholder(t, "ep_size") > 1) {
          int64_t moe_layers = 0;
          for (const auto& [name, unused] : m->ops) moe_layers += name.size() > 7 && name.compare(name.size() - 7, 7, ".router") == 0;
          row.collectives["ep_dispatch"] += moe_layers;
          row.collectives["ep_combine"] += moe_layers;
        }
      }
    for (size_t k = 0; k < cells.size(); ++k)
      if (cells[k]) {
        row.kinds.push_back(a.kinds[k].kind);
        a.kinds[k].archs.push_back(m->id);
      }
    a.archs.push_back(std::move(row));
    a.matrix.push_back(std::move(cells));
  }
  for (const auto& [name, t] : g.tasks.tasks) {
    a.kinds[index.at(t.kind)].tasks++;
    a.levels.at(t.level - 1).tasks++;
  }
  for (auto& r : a.archs)
    for (const auto& k : r.kinds)
      if (a.kinds[index.at(k)].archs.size() == 1) r.exclusive.push_back(k);

  for (const auto& k : a.kinds)
    if (!k.archs.empty()) a.levels.at(k.level - 1).kinds++;
  a.total.level = 0;
  for (const auto& f : a.levels) {
    a.total.op_instances += f.op_instances;
    a.total.tasks += f.tasks;
    a.total.kinds += f.kinds;
    a.total.registered_kinds += f.registered_kinds;
  }
  a.needed_kinds = a.total.kinds;

  // Greedy set cover (Note [Coverage figures]): archs are in id order, so `>` keeps the smaller id on ties.
  std::set<std::string> covered;
  std::vector<bool> picked(a.archs.size(), false);
  while (covered.size() < a.needed_kinds) {
    size_t best = a.archs.size(), best_new = 0;
    for (size_t i = 0; i < a.archs.size(); ++i) {
      if (picked[i]) continue;
      size_t n = 0;
      for (const auto& k : a.archs[i].kinds) n += covered.count(k) ? 0 : 1;
      if (n > best_new) best = i, best_new = n;
    }
    if (best == a.archs.size()) break;  // unreachable: every needed kind is some arch's
    picked[best] = true;
    CoverPick p{a.archs[best].id, {}, 0};
    for (const auto& k : a.archs[best].kinds)
      if (covered.insert(k).second) p.new_kinds.push_back(k);
    p.covered = covered.size();
    a.cover.push_back(std::move(p));
  }
  return a;
}

std::vector<const KindRow*> by_sharing(const Audit& a) {
  std::vector<const KindRow*> out;
  for (const auto& k : a.kinds) out.push_back(&k);
  std::stable_sort(out.begin(), out.end(),
                   [](const KindRow* x, const KindRow* y) { return x->archs.size() > y->archs.size(); });
  return out;  // a.kinds is by level then name, so ties keep that order
}

std::string render_terminal(const Audit& a) {
  std::ostringstream out;
  out << "fastkernels audit: " << a.archs.size() << " architecture(s); " << a.needed_kinds << " of " << a.total.registered_kinds
      << " registered kind(s) needed\n\n";
  out << "consolidation: op instances -> tasks (after dedupe) -> kinds (task families)\n"
      << consolidation_table(a).text("  ") << "\n";
  out << "set cover (greedy: most kinds not yet covered, ties by config id): " << a.cover.size() << " of " << a.archs.size()
      << " architecture(s) cover all " << a.needed_kinds << " kind(s)\n"
      << cover_table(a, false).text("  ") << "\n";
  out << "architectures (\"only here\": kinds no other architecture needs)\n" << arch_table(a, false).text("  ") << "\n";
  out << "operators, most shared first; columns 1-" << a.archs.size()
      << ": the architectures above, cell = tasks of that kind ('.': not needed)\n"
      << operator_table(a, false).text("  ");
  auto unused = unused_kinds(a);
  if (!unused.empty()) out << "\nregistered but needed by no architecture: " << join(unused, ", ") << "\n";
  return out.str();
}

std::string render_markdown(const Audit& a) {
  std::ostringstream out;
  out << "<!-- @generated by fastkernels from hf_configs/ and generator/descriptors/.\n"
      << "     Do not edit: regenerate with `" << kDocsCommand << "`. -->\n"
      << "# Operator coverage across architectures\n\n"
      << "Which task kinds (operators) each architecture under `hf_configs/` needs, which are shared, and a\n"
      << "small set of architectures whose operators cover all the others. Written by `fastkernels audit`\n"
      << "(docs/task-kinds.md, \"Coverage audit\", says how the figures are counted); CI fails when this file\n"
      << "is stale (`fastkernels audit --check`).\n\n"
      << a.archs.size() << " architectures need " << a.needed_kinds << " of the " << a.total.registered_kinds
      << " registered kinds; " << a.total.op_instances << " op instances consolidate into " << a.total.tasks
      << " tasks.\n\n";
  out << "## Consolidation\n\n"
      << "Op instances (one per op per layer at L1, one per composite module per model at L2-L4) -> tasks\n"
      << "(dedupe merges equal names) -> kinds (task families).\n\n"
      << consolidation_table(a).markdown() << "\n";
  out << "## Representative set (greedy set cover)\n\n"
      << "Each pick is the architecture needing the most kinds not yet covered (ties: the smaller config id).\n"
      << a.cover.size() << " of " << a.archs.size() << " architectures cover all " << a.needed_kinds << " kinds.\n\n"
      << cover_table(a, true).markdown() << "\n";
  out << "## Architectures\n\n"
      << "\"only here\": kinds no other architecture needs. \"collectives / step\": the collectives a sharded layout's forward\n"
      << "step issues (all-reduces of row-parallel linears, the vocabulary-parallel embedding and the MoE blocks; the\n"
      << "logits' all-gather), as counted from its tasks (Note [Collectives per step]); `.` unsharded.\n\n"
      << arch_table(a, true).markdown() << "\n";
  out << "## Operators, most shared first\n\n"
      << "Columns 1-" << a.archs.size() << " are the architectures above; a cell is the number of distinct tasks of that\n"
      << "kind the architecture needs (`.`: not needed).\n\n"
      << operator_table(a, true).markdown();
  auto unused = unused_kinds(a);
  if (!unused.empty()) {
    std::vector<std::string> ticked;
    for (const auto& k : unused) ticked.push_back("`" + k + "`");
    out << "\nRegistered but needed by no architecture: " << join(ticked, ", ") << ".\n";
  }
  return out.str();
}

std::string render_csv(const Audit& a) {
  // Config ids, families, model types and kind names hold no comma, quote or newline.
  std::string out = "config,family,model_type";
  for (const auto& k : a.kinds) out += "," + k.kind;
  out += "\n";
  for (size_t i = 0; i < a.archs.size(); ++i) {
    out += a.archs[i].id + "," + a.archs[i].family + "," + a.archs[i].model_type;
    for (size_t n : a.matrix[i]) out += "," + std::to_string(n);
    out += "\n";
  }
  return out;
}

std::string render_json(const Audit& a) {
  using J = nlohmann::ordered_json;
  auto figures = [](const LevelFigures& f) {
    J j;
    j["level"] = f.level;
    j["op_instances"] = f.op_instances;
    j["tasks"] = f.tasks;
    j["kinds"] = f.kinds;
    j["registered_kinds"] = f.registered_kinds;
    return j;
  };
  J root;
  root["generated_by"] = "fastkernels audit";
  root["architectures"] = J::array();
  for (const auto& r : a.archs) {
    J j;
    j["id"] = r.id;
    j["file"] = r.file;
    j["family"] = r.family;
    j["model_type"] = r.model_type;
    j["op_instances"] = r.op_instances;
    j["tasks"] = r.tasks;
    j["kinds"] = r.kinds;
    j["exclusive_kinds"] = r.exclusive;
    j["collectives_per_step"] = r.collectives;
    root["architectures"].push_back(j);
  }
  root["kinds"] = J::array();
  for (const KindRow* k : by_sharing(a)) {
    J j;
    j["kind"] = k->kind;
    j["level"] = k->level;
    j["class"] = k->class_name;
    j["architectures"] = k->archs;
    j["op_instances"] = k->op_instances;
    j["tasks"] = k->tasks;
    root["kinds"].push_back(j);
  }
  root["unused_kinds"] = unused_kinds(a);
  J levels = J::array();
  for (const auto& f : a.levels) levels.push_back(figures(f));
  root["consolidation"]["levels"] = levels;
  root["consolidation"]["total"] = figures(a.total);
  root["set_cover"]["universe"] = a.needed_kinds;
  root["set_cover"]["picks"] = J::array();
  for (const auto& p : a.cover) {
    J j;
    j["arch"] = p.arch;
    j["new_kinds"] = p.new_kinds;
    j["covered"] = p.covered;
    root["set_cover"]["picks"].push_back(j);
  }
  J columns = J::array();
  for (const auto& k : a.kinds) columns.push_back(k.kind);
  root["matrix"]["columns"] = columns;
  root["matrix"]["rows"] = J::array();
  for (size_t i = 0; i < a.archs.size(); ++i) {
    J j;
    j["config"] = a.archs[i].id;
    j["cells"] = a.matrix[i];
    root["matrix"]["rows"].push_back(j);
  }
  return root.dump(2) + "\n";
}

}  // namespace fk::gen::coverage
