// `fastkernels add`: validate a config, store it verbatim, generate, refresh docs/coverage.md.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>

#include "fk/gen/format.h"
#include "fk/gen/hf_audit.h"
#include "fk/gen/pipeline.h"
#include "fk/gen/repo.h"
#include "fk/gen/write.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

namespace {

/// The <org>/<model> a config file's own name suggests: `org__model.json`, or the last two
/// folders of `.../org/model/config.json`; "" when neither.
std::string name_from_path(const fs::path& p) {
  const std::string stem = p.stem().string();
  const size_t sep = stem.find("__");
  if (p.filename() != "config.json" && sep != std::string::npos && sep > 0 && sep + 2 < stem.size())
    return stem.substr(0, sep) + "/" + stem.substr(sep + 2);
  const fs::path dir = fs::absolute(p).parent_path();
  if (p.filename() == "config.json" && dir.has_parent_path() && !dir.parent_path().filename().empty())
    return dir.parent_path().filename().string() + "/" + dir.filename().string();
  return "";
}

/// `<org>/<model>` as the hub spells ids: letters, digits, `.`, `_`, `-`, no `..`.
bool is_model_id(const std::string& s) {
  static const std::regex id_re("[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*");
  return std::regex_match(s, id_re) && s.find("..") == std::string::npos;
}

}  // namespace

int cmd_add(const fs::path& root, const std::string& path, std::string name, const UserChoices& asked) {
  auto text = read_text(path);
  if (!text) {
    std::cerr << path << ": cannot read\n";
    return kIo;
  }
  // A model type no descriptor claims: say what the transformers audit knows (docs/hf-audit.md),
  // unless the user lowers it as a known one (--as).
  if (auto unknown = asked.served_as.empty()
                         ? hfaudit::unknown_model_type_report(root, display_path(root, path), *text, asked.component)
                         : std::nullopt) {
    std::cerr << *unknown;
    return kInvalid;
  }
  Diagnostics diag;
  if (name.empty()) {
    auto parsed = parse_config(path, *text, diag);
    if (!diag.ok()) return report(diag);
    // A hub id in _name_or_path names it; a local path there (a checkpoint folder) does not.
    const std::string hub = parsed->name_or_path;
    if (is_model_id(hub)) {
      name = hub;
      std::cout << "name     " << name << " (from the config's _name_or_path)\n";
    } else {
      name = name_from_path(path);
      const std::string why = hub.empty() ? "no `_name_or_path` in the config"
                                          : "the config's `_name_or_path` " + json_quote(hub) + " is no <org>/<model>";
      if (name.empty()) {
        std::cerr << path << ": " << why << ", and its file name says no <org>/<model> "
                  << "(org__model.json or <org>/<model>/config.json); pass --name <org>/<model>\n";
        return kInvalid;
      }
      std::cout << "name     " << name << " (from the file name " << path << (hub.empty() ? "" : "; " + why) << ")\n";
    }
  }
  if (!is_model_id(name)) {
    std::cerr << path << ": expected <org>/<model> (letters, digits, . _ -), got " << json_quote(name)
              << "; pass --name <org>/<model>\n";
    return kInvalid;
  }
  std::string rel = "hf_configs/" + name + "/config.json";
  auto existing = read_text(root / rel);
  if (existing && *existing != *text) {
    std::cerr << rel << ": already exists with different content; refusing to overwrite (remove it first, or pick another --name)\n";
    return kInvalid;
  }
  // The user's choices (Note [User choices]): those asked for now, else the ones already recorded.
  const std::string side_rel = "hf_configs/" + name + "/fastkernels.json";
  UserChoices choices = asked;
  choices.file = side_rel;
  if (choices.empty()) choices = read_user_choices(root / rel, "hf_configs/" + name, diag);
  if (!diag.ok()) return report(diag);
  // Validate against every other config first (a name clash with an existing task is an error).
  auto configs = discover_configs(root, diag);
  configs.erase(std::remove_if(configs.begin(), configs.end(), [&](const ConfigFile& c) { return c.id == name; }), configs.end());
  configs.push_back({name, rel, *text, choices});
  run_pipeline(root, configs, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  if (!existing) {
    write_if_changed(root, rel, *text, diag);  // stored verbatim
    if (!diag.ok()) return report(diag);
    std::cout << "added    " << rel << "\n";
  } else {
    std::cout << rel << " is already present (identical)\n";
  }
  const std::optional<std::string> side_before = read_text(root / side_rel);
  if (!asked.empty()) {
    write_if_changed(root, side_rel, user_choices_text(choices), diag);
    if (!diag.ok()) return report(diag);
    std::cout << "recorded " << side_rel << (choices.dequantize ? " (dequantize)" : "");
    for (const auto& k : choices.allow_unknown) std::cout << " (allow " << k << ")";
    if (!choices.dtype.empty()) std::cout << " (dtype " << choices.dtype << ")";
    if (!choices.served_as.empty()) std::cout << " (as " << choices.served_as << ")";
    if (!choices.pooling.empty()) std::cout << " (pooling " << choices.pooling << (choices.normalize ? ", normalized" : "") << ")";
    if (choices.image_size > 0) std::cout << " (image size " << choices.image_size << ")";
    for (const ParallelLayout& l : choices.parallel) std::cout << " (layout " << l.suffix() << ")";
    std::cout << "\n";
  }
  if (int rc = cmd_generate(root, /*check=*/false); rc != kOk) {
    // Nothing half-added: the config (and the choices recorded now) go again, so that the next
    // add or generate does not trip over a config that never generated.
    std::error_code ec;
    if (!existing) {
      fs::remove(root / rel, ec);
      for (fs::path dir = (root / rel).parent_path(); dir != root / "hf_configs" && fs::is_empty(dir, ec); dir = dir.parent_path())
        fs::remove(dir, ec);
    }
    if (side_before) write_if_changed(root, side_rel, *side_before, diag);
    else if (!asked.empty()) fs::remove(root / side_rel, ec);
    std::cerr << "fastkernels add: generation failed, so " << (existing ? "the choices recorded now were undone" : rel + " was removed again")
              << "; nothing was added\n";
    return rc;
  }
  // The new architecture changes the coverage audit; keep docs/coverage.md current (CI checks it).
  AuditArgs docs;
  docs.write_docs = true;
  return cmd_audit(root, docs);
}

}  // namespace fk::gen::verbs
