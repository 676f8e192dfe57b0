// The pass driver (see fk/gen/pipeline.h).
#include "fk/gen/pipeline.h"

#include "fk/gen/lower.h"

namespace fk::gen {

Generation run_pipeline(const std::filesystem::path& root, const std::vector<ConfigFile>& configs, bool emit_outputs,
                        Diagnostics& diag) {
  Generation g;
  g.descriptors = load_descriptors(root, diag);
  if (!diag.ok()) return g;  // a broken descriptor would only produce follow-on noise
  for (const auto& c : configs) {
    auto parsed = parse_config(c.file, c.text, diag, true, c.choices.component);
    if (!parsed) continue;
    // Resolve even when parse reported errors, so unknown keys and missing fields are all listed.
    auto resolved = resolve(*parsed, c.id, g.descriptors, diag, c.choices);
    if (!resolved) continue;
    g.resolved.push_back(*resolved);
    // Note [Parallel layouts]: once more per recorded layout.
    for (const ParallelLayout& layout : c.choices.parallel)
      if (auto sharded = resolve(*parsed, c.id, g.descriptors, diag, c.choices, layout)) g.resolved.push_back(*sharded);
  }
  for (const auto& r : g.resolved)
    if (auto l = lower(r, diag)) g.lowered.push_back(*l);
  if (!diag.ok()) return g;
  g.tasks = dedupe(g.lowered, diag);
  if (!diag.ok() || !emit_outputs) return g;
  OutputTree out = emit(g.tasks, disk_templates(root), diag);
  if (diag.ok()) g.outputs = std::move(out);
  return g;
}

}  // namespace fk::gen
