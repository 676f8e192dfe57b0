// The emit pass: tasks -> file contents (task sources from templates, plus the manifest).
// Templates bind constants only; the engine (kainjow mustache, HTML escaping off) is wrapped so
// that a placeholder the template uses but the generator does not provide, and a provided
// placeholder the template never uses, are both errors naming the template and the placeholder.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fk/gen/dedupe.h"

namespace fk::gen {

/// Repository-relative path -> bytes.
using OutputTree = std::map<std::string, std::string>;

/// Returns the text of a template given its repository-relative path; nullopt when absent.
using TemplateLoader = std::function<std::optional<std::string>(const std::string& path)>;

/// Placeholder -> value, in the order documented.
using Bindings = std::vector<std::pair<std::string, std::string>>;

/// Renders `text` (the template at `template_path`) with `values`; appends problems (invalid
/// template, unknown placeholder, unused placeholder) to `diag` and returns nullopt on any.
std::optional<std::string> render_template(const std::string& template_path, const std::string& text,
                                           const Bindings& values, Diagnostics& diag);

/// templates/<name>.cu.mustache
std::string template_path(const std::string& template_name);

/// Every placeholder a task's template receives (common ones first, then the kind's).
Bindings task_bindings(const Task& t);

/// The `@generated` banner for a task (several `//` lines, no trailing newline).
std::string banner(const Task& t);

/// generated/manifest.json for `set` (deterministic: sorted keys, sorted names, trailing newline).
std::string manifest_json(const TaskSet& set);

/// Renders every task and the manifest. Problems go to `diag`; the tree is complete only if none.
OutputTree emit(const TaskSet& set, const TemplateLoader& load, Diagnostics& diag);

}  // namespace fk::gen
