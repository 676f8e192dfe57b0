// The dedupe pass (see fk/gen/dedupe.h).
#include "fk/gen/dedupe.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "fk/gen/format.h"

namespace fk::gen {

std::string task_source(int level, const std::string& name) {
  return "generated/L" + std::to_string(level) + "/" + name + ".cu";
}

std::string task_include(int level, const std::string& name) { return "L" + std::to_string(level) + "/" + name + ".h"; }

std::string task_header(int level, const std::string& name) { return "generated/" + task_include(level, name); }

// Note [Long task names]: a spelled name over kMaxTaskName (120) characters keeps its first
// kMaxTaskName - 32 characters and ends in `_x` + 16 hex digits of the FNV-1a hash of the whole
// spelling + the dtype suffix; the whole spelling is kept in the banner of its sources and as
// `spelled` in the manifest. File names derive from task names, and a composite of hybrid or
// multimodal families spells far more constants than a file name may hold (255 bytes, less the
// ~40 the CUDA toolchain's temporaries add); 120 keeps names readable in logs and tables.
// Two spellings cut to one name are a hard error, as any name clash (dedupe).
std::string bounded_task_name(const std::string& spelled, const std::string& dtype) {
  if (spelled.size() <= kMaxTaskName) return spelled;
  const uint64_t h = fnv1a64(spelled);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  std::string head = spelled.substr(0, kMaxTaskName - 32);
  while (!head.empty() && head.back() == '_') head.pop_back();
  return head + "_x" + hex + "_" + dtype;
}

namespace {

// The content two same-named tasks must agree on, as (key, value) lines for the message.
std::vector<std::pair<std::string, std::string>> content(const Task& t) {
  std::vector<std::pair<std::string, std::string>> c = {
      {"kind", t.kind}, {"template", t.template_name}, {"source template", t.source_template_name},
      {"level", std::to_string(t.level)},
      {"production", t.production}, {"dtype", t.dtype}};
  for (const auto& [slot, child] : t.children) c.emplace_back("child " + slot, child.empty() ? "none" : child);
  c.insert(c.end(), t.placeholders.begin(), t.placeholders.end());
  return c;
}

// The facts of a task that follow from its kind and parameters alone. Throws GenError.
Task make_task(const KindSpec& k, const Params& params, const std::string& dtype) {
  Task t;
  t.spelled = k.name(params, dtype_suffix(dtype));
  t.name = bounded_task_name(t.spelled, dtype_suffix(dtype));
  t.kind = k.kind;
  t.template_name = k.template_name;
  t.source_template_name = k.source_template_name;
  t.level = k.level;
  t.production = k.production(params);
  t.source = task_source(k.level, t.name);
  t.header = task_header(k.level, t.name);
  t.dtype = dtype;
  t.placeholders = k.placeholders(params);
  return t;
}

// Merges tasks by name across models (Note [Task naming], Note [Case registry]).
class Merger {
 public:
  Merger(TaskSet& set, Diagnostics& diag) : set_(set), diag_(diag) {}

  // Adds `t`, seen in model `m` at `op`, merging it into a same-named task; returns the task.
  const Task& add(const Task& t, const std::vector<ShapeCase>& cases, const LoweredModel& m, const std::string& op) {
    std::string here = m.file + " (" + op + ")";
    auto it = set_.tasks.find(t.name);
    if (it == set_.tasks.end()) {
      it = set_.tasks.emplace(t.name, t).first;
      first_seen_[t.name] = here;
    } else {
      auto a = content(it->second), b = content(t);
      if (a != b && !conflicted_.count(t.name)) {
        conflicted_.insert(t.name);
        std::string diff;
        for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
          std::string ka = i < a.size() ? a[i].first + " = " + a[i].second : "(none)";
          std::string kb = i < b.size() ? b[i].first + " = " + b[i].second : "(none)";
          if (ka != kb) {
            diff = ka + " from " + first_seen_[t.name] + " vs " + kb + " from " + here;
            break;
          }
        }
        diag_.error("task " + t.name + ": same name, different content: " + diff +
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
    task.archs.insert(m.id);
    task.configs.insert(m.file);
    task.descriptors.insert(m.descriptor_file);
    return task;
  }

 private:
  TaskSet& set_;
  Diagnostics& diag_;
  std::map<std::string, std::string> first_seen_;  // task name -> "<config file> (<op>)"
  std::set<std::string> conflicted_;
};

// A composite's children as tasks, and its child placeholders (docs/task-kinds.md, "Composite
// kinds"): includes, then <slot>_t and <slot>_task per slot. False when a child's task is
// missing (its error was already reported).
bool add_children(Task& t, const KindSpec& k, const ModuleInstance& mod, const std::map<std::string, std::string>& task_of,
                  const TaskSet& set) {
  std::vector<std::pair<std::string, std::string>> slots;
  std::vector<std::string> included;
  std::string includes;
  for (const auto& [slot_name, op] : mod.children) {
    const SlotSpec& slot =
        *std::find_if(k.slots.begin(), k.slots.end(), [&](const SlotSpec& s) { return s.name == slot_name; });
    std::string child;
    if (!op.empty()) {
      auto it = task_of.find(op);
      if (it == task_of.end()) return false;
      child = it->second;
    }
    t.children.emplace_back(slot.name, child);
    if (child.empty()) {
      slots.emplace_back(slot.name + "_t", slot.fallback);
      slots.emplace_back(slot.name + "_task", "none");
      continue;
    }
    const Task& c = set.tasks.at(child);
    slots.emplace_back(slot.name + "_t", "fk::generated::" + to_ident(child) + "::" + find_kind(c.kind)->class_name);
    slots.emplace_back(slot.name + "_task", child);
    if (std::find(included.begin(), included.end(), child) != included.end()) continue;
    included.push_back(child);
    includes += (includes.empty() ? "" : "\n") + ("#include \"" + task_include(c.level, child) + "\"");
  }
  std::vector<std::pair<std::string, std::string>> ph = {{"includes", includes}};
  ph.insert(ph.end(), slots.begin(), slots.end());
  ph.insert(ph.end(), t.placeholders.begin(), t.placeholders.end());
  t.placeholders = std::move(ph);
  return true;
}

// Note [Collective tasks]
// A kind whose forward communicates at a layout (KindSpec::collective: RowParallelLinear's and the MoE block's
// all-reduce, the embedding's masked-lookup all-reduce, the models' logits gather) calls that collective as a child
// task, an L1 task of kind all_reduce or all_gather (`all_reduce_n4096_tp2_bf16`: the last dimension per rank and the
// group size), as vLLM's RowParallelLinear calls tensor_model_parallel_all_reduce. So the collective is a task like any
// kernel: fk_bench --world-size N checks and times it alone, and a candidate that replaces its header
// (docs/candidates.md) is what the linear, the attention block, the layer and the model above it call. The child is
// recorded as the parent's "collective" child (the manifest's children: the candidate closure follows it) and reaches
// the templates as {{collective_t}} (its class; fk::tasks::NoCollective unsharded) and {{collective_include}} (a
// newline and its #include, written at the end of an #include line; empty unsharded). Every
// task whose header template a communicating kind uses gets both, so kinds sharing that template (a ColumnParallelLinear
// renders linear.h like a RowParallelLinear) render them as the unsharded fallback.
bool add_collective(Task& t, const KindSpec& k, const Params& params, const LoweredModel& m, const std::string& op, Merger& merger,
                    ModelTasks& mt, Diagnostics& diag) {
  static const std::set<std::string> templates = [] {
    std::set<std::string> out;
    for (bool composite : {false, true})
      for (const auto& name : kind_names(composite))
        if (const KindSpec* s = find_kind(name); s && !s->collective.empty()) out.insert(s->template_name);
    return out;
  }();
  if (!templates.count(t.template_name)) return true;
  // The child's kind and parameters: the all-reduce / all-gather where the layout shards the task over tp_size > 1
  // ranks; at a data-parallel layout the MoE blocks' expert-parallel all-to-all (Note [Expert-parallel all-to-all
  // task] in fk/tasks/ep_all_to_all.h), the same "collective" child. Empty parameters: no child.
  std::string type = "fk::tasks::NoCollective", include;
  try {
    std::string kind;
    Params cp;
    if (k.collective_params) {
      cp = k.collective_params(params);  // empty: the task leaves the reduction to its parent
      if (!cp.empty() && std::get<int64_t>(cp.at("tp_size")) > 1) kind = k.collective;
    }
    if (kind.empty() && k.ep_collective_params) {
      cp = k.ep_collective_params(params);
      if (!cp.empty()) kind = k.ep_collective;
    }
    if (!kind.empty()) {
      const KindSpec* ck = find_kind(kind);
      if (!ck) throw GenError{"kind " + k.kind + " names collective kind " + json_quote(kind) + ", which is not in the kind table"};
      const Task& c = merger.add(make_task(*ck, cp, t.dtype), ck->cases(cp), m, op + "." + kind);
      mt.tasks.insert(c.name);
      t.children.emplace_back("collective", c.name);
      type = "fk::generated::" + to_ident(c.name) + "::" + ck->class_name;
      include = "\n#include \"" + task_include(c.level, c.name) + "\"";  // after the line the templates end it on
    }
  } catch (const GenError& e) {
    diag.error(m.file + ": " + op + ": " + e.message);
    return false;
  }
  t.placeholders.emplace_back("collective_t", type);
  t.placeholders.emplace_back("collective_include", include);
  return true;
}

}  // namespace

TaskSet dedupe(const std::vector<LoweredModel>& models, Diagnostics& diag) {
  TaskSet set;
  std::vector<const LoweredModel*> sorted;
  for (const auto& m : models) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(), [](const LoweredModel* a, const LoweredModel* b) { return a->id < b->id; });

  Merger merger(set, diag);
  for (const LoweredModel* m : sorted) {
    ModelTasks mt{m->id, m->file, m->model_type, m->descriptor_file, {}, {}, {}, m->dequantized_from, m->allowed_unknown,
                  m->dtype_from, m->served_as, m->pooling};
    std::map<std::string, std::string> task_of;  // op or module name -> task name
    for (const OpInstance& op : m->ops) {
      Task t;
      std::vector<ShapeCase> cases;
      try {
        t = make_task(*op.kind, op.params, op.dtype);
        cases = op.kind->cases(op.params);
      } catch (const GenError& e) {
        diag.error(m->file + ": " + op.name + ": " + e.message);
        continue;
      }
      if (!add_collective(t, *op.kind, op.params, *m, op.name, merger, mt, diag)) continue;
      const Task& task = merger.add(t, cases, *m, op.name);
      mt.ops.emplace_back(op.name, task.name);
      mt.tasks.insert(task.name);
      task_of[op.name] = task.name;
    }
    for (const ModuleInstance& mod : m->modules) {
      Task t;
      std::vector<ShapeCase> cases;
      try {
        t = make_task(*mod.kind, mod.params, mod.dtype);
        cases = mod.kind->cases(mod.params);
      } catch (const GenError& e) {
        diag.error(m->file + ": " + mod.name + ": " + e.message);
        continue;
      }
      if (!add_children(t, *mod.kind, mod, task_of, set)) continue;
      if (!add_collective(t, *mod.kind, mod.params, *m, mod.name, merger, mt, diag)) continue;
      const Task& task = merger.add(t, cases, *m, mod.name);
      mt.modules.emplace_back(mod.name, task.name);
      mt.tasks.insert(task.name);
      task_of[mod.name] = task.name;
    }
    set.models.push_back(std::move(mt));
  }
  return set;
}

}  // namespace fk::gen
