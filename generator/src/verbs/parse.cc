// `fastkernels parse`: one config, parsed and resolved, its typed values and tasks.
#include <filesystem>
#include <iostream>
#include <regex>

#include "fk/gen/format.h"
#include "fk/gen/pipeline.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

int cmd_parse(const fs::path& root, const std::string& path) {
  auto text = read_text(path);
  if (!text) {
    std::cerr << path << ": cannot read\n";
    return kIo;
  }
  std::string file = display_path(root, path);
  std::string id = "(unnamed)";
  std::smatch m;
  static const std::regex hub("hf_configs/([^/]+)/([^/]+)/config\\.json");
  if (std::regex_match(file, m, hub)) id = m[1].str() + "/" + m[2].str();
  Diagnostics diag;
  // The user's recorded choices beside the config (Note [User choices]) apply here as in generate.
  const UserChoices choices = read_user_choices(path, display_path(root, fs::path(path).parent_path()), diag);
  Generation g = run_pipeline(root, {ConfigFile{id, file, *text, choices}}, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  const ResolvedConfig& r = g.resolved.at(0);
  if (id == "(unnamed)") {
    auto p = parse_config(file, *text, diag);
    if (p && !p->name_or_path.empty()) id = p->name_or_path;
  }
  std::cout << "config      " << file << "\n"
            << "id          " << id << "\n"
            << "model_type  " << r.model_type << "\n"
            << "family      " << r.descriptor->family << " (" << r.descriptor->file << ")\n"
            << "dtype       " << r.dtype << "\n"
            << "values (name = value  [origin]):\n";
  for (const auto& [name, v] : r.values)
    std::cout << "  " << name << " = " << value_to_display(v) << "  [" << r.origin.at(name) << "]\n";
  const ModelTasks& mt = g.tasks.models.at(0);
  std::cout << "ops: " << mt.ops.size() << ", modules: " << mt.modules.size() << ", tasks: " << mt.tasks.size() << "\n";
  for (const auto& t : mt.tasks) std::cout << "  " << t << "\n";
  return kOk;
}

}  // namespace fk::gen::verbs
