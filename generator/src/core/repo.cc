// Repository discovery (see fk/gen/repo.h).
#include "fk/gen/repo.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace fk::gen {

namespace fs = std::filesystem;

std::optional<fs::path> find_root(const fs::path& start) {
  std::error_code ec;
  fs::path p = fs::absolute(start, ec);
  for (; !p.empty(); p = p.parent_path()) {
    if (fs::is_directory(p / "hf_configs", ec) && fs::is_directory(p / "generator" / "descriptors", ec)) return p;
    if (p == p.parent_path()) break;
  }
  return std::nullopt;
}

std::optional<std::string> read_text(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ConfigFile> discover_configs(const fs::path& root, Diagnostics& diag) {
  std::vector<ConfigFile> out;
  std::error_code ec;
  for (const auto& org : sorted_entries(root / "hf_configs")) {
    if (!fs::is_directory(org, ec)) continue;
    for (const auto& model : sorted_entries(org)) {
      fs::path cfg = model / "config.json";
      if (!fs::is_directory(model, ec) || !fs::exists(cfg, ec)) continue;
      std::string id = org.filename().string() + "/" + model.filename().string();
      std::string rel = "hf_configs/" + id + "/config.json";
      auto text = read_text(cfg);
      if (!text) {
        diag.io_error(rel + ": cannot read");
        continue;
      }
      out.push_back({id, rel, *text, read_user_choices(cfg, "hf_configs/" + id, diag)});
    }
  }
  std::sort(out.begin(), out.end(), [](const ConfigFile& a, const ConfigFile& b) { return a.id < b.id; });
  return out;
}

UserChoices read_user_choices(const fs::path& config_path, const std::string& display_dir, Diagnostics& diag) {
  const fs::path side = config_path.parent_path() / "fastkernels.json";
  std::error_code ec;
  if (!fs::exists(side, ec)) return {};
  const std::string shown = display_dir + "/fastkernels.json";
  auto text = read_text(side);
  if (!text) {
    diag.io_error(shown + ": cannot read");
    return {};
  }
  return parse_user_choices(shown, *text, diag);
}

DescriptorSet load_descriptors(const fs::path& root, Diagnostics& diag) {
  DescriptorSet set;
  for (const auto& p : sorted_entries(root / "generator" / "descriptors")) {
    if (p.extension() != ".json") continue;
    std::string rel = "generator/descriptors/" + p.filename().string();
    auto text = read_text(p);
    if (!text) {
      diag.io_error(rel + ": cannot read");
      continue;
    }
    if (auto d = load_descriptor(rel, *text, diag)) set.add(d, diag);
  }
  return set;
}

TemplateLoader disk_templates(const fs::path& root) {
  return [root](const std::string& rel) { return read_text(root / rel); };
}

}  // namespace fk::gen
