// The dedupe pass (see fk/gen/dedupe.h).
#include "fk/gen/dedupe.h"

#include <algorithm>

#include "fk/gen/format.h"

namespace fk::gen {

std::string task_source(int level, const std::string& name) {
  return "generated/L" + std::to_string(level) + "/" + name + ".cu";
}

namespace {

// The content two same-named tasks must agree on, as (key, value) lines for the message.
std::vector<std::pair<std::string, std::string>> content(const Task& t) {
  std::vector<std::pair<std::string, std::string>> c = {
      {"kind", t.kind}, {"template", t.template_name}, {"level", std::to_string(t.level)},
      {"production", t.production}, {"dtype", t.dtype}};
  c.insert(c.end(), t.placeholders.begin(), t.placeholders.end());
  return c;
}

}  // namespace

TaskSet dedupe(const std::vector<LoweredModel>& models, Diagnostics& diag) {
  TaskSet set;
  std::vector<const LoweredModel*> sorted;
  for (const auto& m : models) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(), [](const LoweredModel* a, const LoweredModel* b) { return a->id < b->id; });

  std::map<std::string, std::string> first_seen;  // task name -> "<config file> op <op>"
  std::set<std::string> conflicted;
  for (const LoweredModel* m : sorted) {
    ModelTasks mt{m->id, m->file, m->model_type, m->descriptor_file, {}, {}};
    for (const OpInstance& op : m->ops) {
      const KindSpec& k = *op.kind;
      Task t;
      std::vector<ShapeCase> cases;
      try {
        t.name = k.name(op.params, dtype_suffix(op.dtype));
        t.kind = k.kind;
        t.template_name = k.template_name;
        t.level = k.level;
        t.production = k.production(op.params);
        t.source = task_source(k.level, t.name);
        t.dtype = op.dtype;
        t.placeholders = k.placeholders(op.params);
        cases = k.cases(op.params);
      } catch (const GenError& e) {
        diag.error(m->file + ": " + op.name + ": " + e.message);
        continue;
      }
      std::string here = m->file + " (" + op.name + ")";
      auto it = set.tasks.find(t.name);
      if (it == set.tasks.end()) {
        it = set.tasks.emplace(t.name, t).first;
        first_seen[t.name] = here;
      } else {
        auto a = content(it->second), b = content(t);
        if (a != b && !conflicted.count(t.name)) {
          conflicted.insert(t.name);
          std::string diff;
          for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
            std::string ka = i < a.size() ? a[i].first + " = " + a[i].second : "(none)";
            std::string kb = i < b.size() ? b[i].first + " = " + b[i].second : "(none)";
            if (ka != kb) {
              diff = ka + " from " + first_seen[t.name] + " vs " + kb + " from " + here;
              break;
            }
          }
          diag.error("task " + t.name + ": same name, different content: " + diff +
                     "; a task name must spell every constant it inlines (Note [Task naming] in generator/include/fk/gen/kinds.h)");
        }
      }
      Task& task = it->second;
      // Union of input cases, canonical registry order (Note [Case registry]).
      for (const auto& c : cases) {
        auto same = std::find_if(task.cases.begin(), task.cases.end(), [&](const ShapeCase& x) { return x.name == c.name; });
        if (same == task.cases.end()) task.cases.push_back(c);
      }
      std::stable_sort(task.cases.begin(), task.cases.end(), [](const ShapeCase& x, const ShapeCase& y) { return x.order < y.order; });
      task.archs.insert(m->id);
      task.configs.insert(m->file);
      task.descriptors.insert(m->descriptor_file);
      mt.ops.emplace_back(op.name, t.name);
      mt.tasks.insert(t.name);
    }
    set.models.push_back(std::move(mt));
  }
  return set;
}

}  // namespace fk::gen
