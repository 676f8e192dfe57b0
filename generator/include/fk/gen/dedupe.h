// The dedupe pass: op instances and composite modules of every model -> tasks named by their
// constants (Note [Task naming]). Equal names merge (archs, configs and input cases are unioned);
// the same name with different content (composites: including different children) is a hard
// error. A composite's child placeholders (Note [Composite kinds]) are built here, from the
// tasks its children became.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fk/gen/lower.h"

namespace fk::gen {

/// One task: one generated header (Config + module class) and one source (registration).
struct Task {
  std::string name;
  std::string spelled;  ///< the full spelling of the constants (== name unless cut: Note [Long task names])
  std::string kind;
  std::string template_name;
  std::string source_template_name;  ///< KindSpec's (empty: template_name)
  int level = 1;
  std::string production;
  std::string source;  ///< generated/L<level>/<name>.cu
  std::string header;  ///< generated/L<level>/<name>.h
  std::string dtype;   ///< torch_dtype
  /// Composite kinds: (slot, child task name), in slot order; empty name for an absent optional. Then, for a kind
  /// that communicates at its layout, ("collective", its collective task) (Note [Collective tasks]), at any level.
  std::vector<std::pair<std::string, std::string>> children;
  /// Kind-specific placeholders (name -> C++ text), the task's content besides its identity.
  std::vector<std::pair<std::string, std::string>> placeholders;
  std::vector<ShapeCase> cases;  ///< union over configs, in registry order (Note [Case registry])
  std::set<std::string> archs;        ///< config ids
  std::set<std::string> configs;      ///< config files
  std::set<std::string> descriptors;  ///< descriptor files
};

/// Which task each op of one model became.
struct ModelTasks {
  std::string id;
  std::string file;
  std::string model_type;
  std::string descriptor_file;
  std::vector<std::pair<std::string, std::string>> ops;  ///< (op name, task name), forward order
  std::vector<std::pair<std::string, std::string>> modules;  ///< (module name, task name), declaration order
  std::set<std::string> tasks;  ///< of ops and modules
  std::string dequantized_from;  ///< Note [User choices]: recorded in the manifest when set
  std::vector<std::string> allowed_unknown;
  std::string dtype_from;  ///< the checkpoint's torch_dtype when the tasks serve another (Note [User choices])
  std::string served_as;   ///< the known model_type it is lowered as (ditto)
  std::string pooling;     ///< the pooling choice, e.g. "cls+normalize" (ditto)
};

struct TaskSet {
  std::map<std::string, Task> tasks;  ///< by name
  std::vector<ModelTasks> models;     ///< sorted by id
};

/// The repository-relative source path of a task: generated/L<level>/<name>.cu
std::string task_source(int level, const std::string& name);
/// A task's header as generated sources include it (relative to generated/): L<level>/<name>.h
std::string task_include(int level, const std::string& name);
/// The repository-relative header path of a task: generated/ + task_include(level, name)
std::string task_header(int level, const std::string& name);

/// Builds the task set; a name clash with different content is reported to `diag`.
TaskSet dedupe(const std::vector<LoweredModel>& models, Diagnostics& diag);

}  // namespace fk::gen
