// `fastkernels list`: configs with family, op, module and task counts, or every distinct task.
#include <filesystem>
#include <iostream>

#include "fk/gen/format.h"
#include "fk/gen/pipeline.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

int cmd_list(const fs::path& root, bool tasks) {
  Diagnostics diag;
  auto configs = discover_configs(root, diag);
  Generation g = run_pipeline(root, configs, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  if (tasks) {
    for (const auto& [name, t] : g.tasks.tasks) {
      std::cout << name << "  kind=" << t.kind << " level=" << t.level << " archs=" << t.archs.size() << " (";
      bool first = true;
      for (const auto& a : t.archs) std::cout << (first ? "" : ", ") << a, first = false;
      std::cout << ")\n";
    }
    std::cout << g.tasks.tasks.size() << " task(s) from " << g.tasks.models.size() << " config(s)\n";
    return kOk;
  }
  for (const auto& m : g.tasks.models) {
    const ResolvedConfig* r = nullptr;
    for (const auto& x : g.resolved)
      if (x.id == m.id) r = &x;
    std::cout << m.id << "  " << m.file << "  family=" << r->descriptor->family << " model_type=" << m.model_type
              << " ops=" << m.ops.size() << " modules=" << m.modules.size() << " tasks=" << m.tasks.size() << "\n";
  }
  std::cout << g.tasks.models.size() << " config(s), " << g.tasks.tasks.size() << " distinct task(s)\n";
  return kOk;
}

}  // namespace fk::gen::verbs
