// `fastkernels scaffold`: a candidate source with the task's exact generated interface.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "fk/gen/format.h"
#include "fk/gen/repo.h"
#include "fk/gen/scaffold.h"
#include "fk/gen/write.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

int cmd_scaffold(const fs::path& root, const std::string& task, const std::string& arch, int level,
                 const std::string& out_opt, bool force) {
  std::string err;
  auto tasks = read_manifest(root, &err);
  if (!tasks) {
    std::cerr << "fastkernels scaffold: " << err << "\n";
    return kIo;
  }
  std::vector<const ManifestTask*> picked;
  if (!task.empty()) {
    const ManifestTask* t = find_task(*tasks, task);
    if (!t) {
      std::cerr << "fastkernels scaffold: unknown task " << json_quote(task) << "; close names:\n";
      for (const auto& n : close_task_names(*tasks, task)) std::cerr << "  " << n << "\n";
      return kInvalid;
    }
    if (level > 0 && t->level != level) {
      std::cerr << "fastkernels scaffold: task " << t->name << " is level " << t->level << ", not " << level << "\n";
      return kInvalid;
    }
    picked.push_back(t);
  } else {
    std::set<std::string> ids;
    for (const auto& t : *tasks) ids.insert(t.archs.begin(), t.archs.end());
    std::set<std::string> match;
    if (ids.count(arch)) match.insert(arch);
    else
      for (const auto& id : ids)
        if (id.find(arch) != std::string::npos) match.insert(id);
    if (match.empty()) {
      std::cerr << "fastkernels scaffold: no config matches --arch " << json_quote(arch) << "; configs:\n";
      for (const auto& id : ids) std::cerr << "  " << id << "\n";
      return kInvalid;
    }
    if (match.size() > 1) {
      std::cerr << "fastkernels scaffold: --arch " << json_quote(arch) << " matches several configs (give the full id):\n";
      for (const auto& id : match) std::cerr << "  " << id << "\n";
      return kInvalid;
    }
    for (const auto& t : *tasks)
      if (std::count(t.archs.begin(), t.archs.end(), *match.begin()) && (level <= 0 || t.level == level)) picked.push_back(&t);
    if (picked.empty()) {
      std::cerr << "fastkernels scaffold: config " << *match.begin() << " has no level " << level << " task\n";
      return kInvalid;
    }
  }
  const fs::path out_dir = out_opt.empty() ? root / "candidates" : fs::absolute(out_opt);
  // Refuse before writing anything: a candidate is someone's work.
  int existing = 0;
  for (const auto* t : picked) {
    fs::path p = scaffold_path(out_dir, *t);
    if (fs::exists(p) && !force) {
      std::cerr << display_path(root, p.string()) << ": candidate for task " << t->name
                << " already exists; refusing to overwrite it (pass --force to replace it)\n";
      ++existing;
    }
  }
  if (existing) return kInvalid;
  for (const auto* t : picked) {
    auto header = read_text(root / t->header);
    if (!header) {
      std::cerr << t->header << ": cannot read (task " << t->name << ")\n";
      return kIo;
    }
    fs::path p = scaffold_path(out_dir, *t);
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    std::ofstream o(p, std::ios::binary | std::ios::trunc);
    o << scaffold_source(*t, *header);
    if (!o.good()) {
      std::cerr << p.string() << ": cannot write (task " << t->name << ")\n";
      return kIo;
    }
    std::cout << "wrote    " << display_path(root, p.string()) << "\n";
  }
  std::cout << picked.size() << " candidate(s) scaffolded; next: edit them, then `fastkernels check <file>`\n";
  return kOk;
}

}  // namespace fk::gen::verbs
