// `fastkernels scaffold` (see fk/gen/scaffold.h and docs/candidates.md).
#include "fk/gen/scaffold.h"

#include <algorithm>
#include <tuple>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fk/gen/repo.h"

namespace fk::gen {

namespace fs = std::filesystem;

namespace {

std::string ident_of(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::optional<std::vector<ManifestTask>> read_manifest(const fs::path& root, std::string* error) {
  auto text = read_text(root / "generated" / "manifest.json");
  if (!text) {
    if (error) *error = "generated/manifest.json: cannot read (run `fastkernels generate`)";
    return std::nullopt;
  }
  std::vector<ManifestTask> out;
  try {
    auto j = nlohmann::json::parse(*text);
    for (const auto& t : j.at("tasks")) {
      ManifestTask m;
      m.name = t.at("name").get<std::string>();
      m.ident = ident_of(m.name);
      m.kind = t.at("kind").get<std::string>();
      m.level = t.at("level").get<int>();
      m.header = t.at("header").get<std::string>();
      m.source = t.at("source").get<std::string>();
      m.production = t.value("production", "");
      for (const auto& a : t.at("archs")) m.archs.push_back(a.get<std::string>());
      out.push_back(std::move(m));
    }
  } catch (const std::exception& e) {
    if (error) *error = std::string("generated/manifest.json: malformed: ") + e.what();
    return std::nullopt;
  }
  std::sort(out.begin(), out.end(), [](const ManifestTask& a, const ManifestTask& b) {
    return a.level != b.level ? a.level < b.level : a.name < b.name;
  });
  return out;
}

const ManifestTask* find_task(const std::vector<ManifestTask>& tasks, const std::string& q) {
  for (const auto& t : tasks)
    if (t.name == q || t.ident == q) return &t;
  return nullptr;
}

std::vector<std::string> close_task_names(const std::vector<ManifestTask>& tasks, const std::string& query, size_t n) {
  // Names containing the query first, then tasks of the kind the query names, then the rest;
  // each group by edit distance.
  std::vector<std::tuple<int, size_t, std::string>> scored;
  for (const auto& t : tasks) {
    const int group = t.name.find(query) != std::string::npos ? 0 : query.find(t.kind) != std::string::npos ? 1 : 2;
    scored.emplace_back(group, edit_distance(query, t.name), t.name);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && out.size() < n; ++i) out.push_back(std::get<2>(scored[i]));
  return out;
}

fs::path scaffold_path(const fs::path& out_dir, const ManifestTask& task) {
  return out_dir / ("L" + std::to_string(task.level)) / (task.name + ".cu");
}

std::string scaffold_source(const ManifestTask& task, const std::string& header_text) {
  // Everything after `#pragma once` (the banner says "do not edit"; a candidate is edited).
  std::istringstream in(header_text);
  std::vector<std::string> lines;
  std::string line;
  bool body = false;
  while (std::getline(in, line)) {
    if (!body) {
      if (line.rfind("#pragma once", 0) == 0) body = true;
      continue;
    }
    lines.push_back(line);
  }
  // A member function declaration named forward (not a call such as `layer.forward(x)`).
  static const std::regex forward_decl(R"(^(\s*)[A-Za-z_][A-Za-z0-9_:<>, ]*[ &*]forward\()");
  std::ostringstream o;
  o << "// Candidate for task `" << task.name << "` (level " << task.level << ", kind " << task.kind << ")";
  if (!task.production.empty()) o << ":\n//   mirrors " << task.production;
  o << ".\n"
    << "// Scaffolded by `fastkernels scaffold --task " << task.name << "` from " << task.header << ",\n"
    << "// the interface's source of truth. Keep the namespace, Config, class names, constructors,\n"
    << "// forward signatures and public members exactly as they are; change the bodies.\n"
    << "// Check it with `fastkernels check <this file>`: it compares the interface with the header and\n"
    << "// flags calls into the baseline (fk::kernels::, fk::tasks::*_forward), cuBLAS/cuDNN, extra\n"
    << "// streams, host timing/synchronisation and static caches. As scaffolded, every forward still\n"
    << "// calls the baseline glue, so `fastkernels check` reports SUSPECT (baseline-call) until you\n"
    << "// replace each one marked TODO with your own kernel (launched on fk::current_stream()).\n";
  for (const auto& l : lines) {
    std::smatch m;
    if (std::regex_search(l, m, forward_decl))
      o << m[1].str() << "// TODO: replace with your kernel (the body below calls the baseline; `fastkernels check` flags it).\n";
    o << l << "\n";
  }
  return o.str();
}

}  // namespace fk::gen
