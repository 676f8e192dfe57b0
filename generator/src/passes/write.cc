// The write pass (see fk/gen/write.h).
#include "fk/gen/write.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace fk::gen {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Only paths under generated/ without '..' may be removed through the manifest.
bool removable(const std::string& rel) {
  return rel.rfind("generated/", 0) == 0 && rel.find("..") == std::string::npos && rel != "generated/manifest.json";
}

}  // namespace

std::vector<std::string> previous_outputs(const fs::path& root) {
  std::vector<std::string> out;
  auto text = slurp(root / "generated" / "manifest.json");
  if (!text) return out;
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tasks") || !j["tasks"].is_array()) return out;
  for (const auto& t : j["tasks"])
    for (const char* key : {"header", "source"})
      if (t.is_object() && t.contains(key) && t[key].is_string()) out.push_back(t[key].get<std::string>());
  std::sort(out.begin(), out.end());
  return out;
}

bool write_if_changed(const fs::path& root, const std::string& rel, const std::string& bytes, Diagnostics& diag) {
  fs::path p = root / rel;
  auto old = slurp(p);
  if (old && *old == bytes) return false;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) {
    diag.io_error(rel + ": cannot create directory: " + ec.message());
    return false;
  }
  fs::path tmp = p;
  tmp += ".fastkernels-tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (!out) {
      diag.io_error(rel + ": cannot write");
      return false;
    }
  }
  fs::rename(tmp, p, ec);  // atomic: readers never see half a file
  if (ec) {
    diag.io_error(rel + ": cannot replace: " + ec.message());
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

WriteResult write_outputs(const fs::path& root, const OutputTree& tree, Diagnostics& diag) {
  WriteResult r;
  if (!diag.ok()) return r;  // nothing is written when any error was reported
  std::vector<std::string> old = previous_outputs(root);
  // Task files first, the manifest last: an interrupted run leaves the old manifest in charge.
  for (const auto& [rel, bytes] : tree) {
    if (rel == "generated/manifest.json") continue;
    (write_if_changed(root, rel, bytes, diag) ? r.written : r.unchanged).push_back(rel);
  }
  for (const auto& rel : old) {
    if (tree.count(rel) || !removable(rel)) continue;
    std::error_code ec;
    if (fs::remove(root / rel, ec)) r.removed.push_back(rel);
    else if (ec) diag.io_error(rel + ": cannot remove stale file: " + ec.message());
  }
  auto m = tree.find("generated/manifest.json");
  if (m != tree.end()) (write_if_changed(root, m->first, m->second, diag) ? r.written : r.unchanged).push_back(m->first);
  return r;
}

CheckResult check_outputs(const fs::path& root, const OutputTree& tree) {
  CheckResult c;
  for (const auto& [rel, bytes] : tree) {
    auto have = slurp(root / rel);
    if (!have) c.missing.push_back(rel);
    else if (*have != bytes) c.stale.push_back(rel);
  }
  for (const auto& rel : previous_outputs(root))
    if (!tree.count(rel) && removable(rel) && fs::exists(root / rel)) c.extra.push_back(rel);
  return c;
}

}  // namespace fk::gen
