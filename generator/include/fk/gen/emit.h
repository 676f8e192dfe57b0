// The emit pass: tasks -> file contents (per task a header and a source from the kind's two
// templates, plus the manifest). Templates bind constants only; the engine (kainjow mustache,
// HTML escaping off) is wrapped so that a placeholder a template uses but the generator does not
// provide is an error naming that template, and a provided placeholder that neither template of
// the kind uses is an error naming both (the pair is one contract).
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

/// A template's repository-relative path and text.
struct TemplateText {
  std::string path;
  std::string text;
};

/// Renders each of `files` with `values`, in order; appends problems (invalid template, a
/// placeholder unknown to one file, a placeholder no file uses) to `diag` and returns nullopt on any.
std::optional<std::vector<std::string>> render_templates(const std::vector<TemplateText>& files, const Bindings& values,
                                                         Diagnostics& diag);

/// The kind's templates, header first: templates/<name>.h.mustache, templates/<name>.cu.mustache
/// (templates/<source_name>.cu.mustache when source_name is given).
std::vector<std::string> template_paths(const std::string& template_name, const std::string& source_name = "");
/// A task's two templates (template_paths of its kind's names).
std::vector<std::string> template_paths(const Task& t);

/// Every placeholder a task's templates receive (common ones first, then the kind's).
Bindings task_bindings(const Task& t);

/// The `@generated` banner for a task (several `//` lines, no trailing newline).
std::string banner(const Task& t);

/// generated/manifest.json for `set` (deterministic: sorted keys, sorted names, trailing newline).
std::string manifest_json(const TaskSet& set);

/// Renders every task and the manifest. Problems go to `diag`; the tree is complete only if none.
OutputTree emit(const TaskSet& set, const TemplateLoader& load, Diagnostics& diag);

}  // namespace fk::gen
