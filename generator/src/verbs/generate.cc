// `fastkernels generate`: regenerate generated/ (or check it is current).
#include <filesystem>
#include <iostream>

#include "fk/gen/pipeline.h"
#include "fk/gen/write.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

int cmd_generate(const fs::path& root, bool check) {
  Diagnostics diag;
  auto configs = discover_configs(root, diag);
  Generation g = run_pipeline(root, configs, /*emit_outputs=*/true, diag);
  if (!diag.ok()) return report(diag);
  if (check) {
    CheckResult c = check_outputs(root, g.outputs);
    if (c.clean()) {
      std::cout << "generated/ is up to date (" << g.outputs.size() << " files)\n";
      return kOk;
    }
    for (const auto& f : c.stale) std::cout << "stale:   " << f << "\n";
    for (const auto& f : c.missing) std::cout << "missing: " << f << "\n";
    for (const auto& f : c.extra) std::cout << "extra:   " << f << "\n";
    std::cout << "generated/ is out of date; run `fastkernels generate`\n";
    return kStale;
  }
  WriteResult w = write_outputs(root, g.outputs, diag);
  if (!diag.ok()) return report(diag);
  for (const auto& f : w.written) std::cout << "wrote    " << f << "\n";
  for (const auto& f : w.removed) std::cout << "removed  " << f << "\n";
  std::cout << g.tasks.tasks.size() << " task(s) from " << configs.size() << " config(s): " << w.written.size()
            << " written, " << w.unchanged.size() << " unchanged, " << w.removed.size() << " removed\n";
  return kOk;
}

}  // namespace fk::gen::verbs
