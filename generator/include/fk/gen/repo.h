// Reading the repository: root discovery, config and descriptor discovery, template loading.
// Read-only; writing is the write pass's job.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fk/gen/descriptor.h"
#include "fk/gen/emit.h"

namespace fk::gen {

/// The nearest directory at or above `start` holding both hf_configs/ and generator/descriptors/.
std::optional<std::filesystem::path> find_root(const std::filesystem::path& start);

/// The bytes of a file; nullopt when it cannot be read.
std::optional<std::string> read_text(const std::filesystem::path& p);

/// The entries of a directory, sorted by path (deterministic order); empty when it cannot be read.
std::vector<std::filesystem::path> sorted_entries(const std::filesystem::path& dir);

/// One config file of the repository.
struct ConfigFile {
  std::string id;    ///< org/model
  std::string file;  ///< repository-relative: hf_configs/<org>/<model>/config.json
  std::string text;
  UserChoices choices = {};  ///< hf_configs/<org>/<model>/fastkernels.json (Note [User choices])
};

/// The sidecar of the config at `config_path` (its folder's fastkernels.json), if any; parse
/// problems go to `diag`. `display_dir` is how the folder is shown in messages.
UserChoices read_user_choices(const std::filesystem::path& config_path, const std::string& display_dir, Diagnostics& diag);

/// hf_configs/*/*/config.json under `root`, sorted by id. Unreadable files are I/O errors.
std::vector<ConfigFile> discover_configs(const std::filesystem::path& root, Diagnostics& diag);

/// generator/descriptors/*.json under `root`, loaded in name order.
DescriptorSet load_descriptors(const std::filesystem::path& root, Diagnostics& diag);

/// Loads templates from root/<path>.
TemplateLoader disk_templates(const std::filesystem::path& root);

}  // namespace fk::gen
