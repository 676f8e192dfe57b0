// The fixed pass order, run over every config of a repository:
// parse -> resolve -> lower -> dedupe -> emit (write is separate: callers decide).
#pragma once

#include <filesystem>
#include <vector>

#include "fk/gen/dedupe.h"
#include "fk/gen/emit.h"
#include "fk/gen/repo.h"
#include "fk/gen/resolve.h"

namespace fk::gen {

/// Everything one run produced, pass by pass.
struct Generation {
  DescriptorSet descriptors;
  std::vector<ResolvedConfig> resolved;  ///< sorted by id
  std::vector<LoweredModel> lowered;
  TaskSet tasks;
  OutputTree outputs;  ///< empty unless emit ran without errors
};

/// Runs the passes for `configs` with the descriptors and templates of `root`. When `emit_outputs`
/// is false, stops after dedupe (validation, `list`). All problems go to `diag`.
Generation run_pipeline(const std::filesystem::path& root, const std::vector<ConfigFile>& configs, bool emit_outputs,
                        Diagnostics& diag);

}  // namespace fk::gen
