// `fastkernels scaffold`: candidate sources that start from a task's generated interface.
// The generated header is the source of truth: a scaffold copies its includes, its namespace
// `fk::generated::<ident>`, Config, class names, constructors and forward signatures verbatim;
// the bodies keep calling the baseline glue (correct as written) under a TODO marker that
// `fastkernels check` flags until it is replaced (docs/candidates.md).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fk::gen {

/// One task as generated/manifest.json lists it (the fields scaffold and check need).
struct ManifestTask {
  std::string name;        ///< rms_norm_h4096_eps1e-05_bf16
  std::string ident;       ///< rms_norm_h4096_eps1e_05_bf16 (the namespace)
  std::string kind;
  int level = 0;
  std::string header;      ///< repository-relative: generated/L1/<name>.h
  std::string source;      ///< repository-relative: generated/L1/<name>.cu
  std::string production;
  std::vector<std::string> archs;
};

/// Reads root/generated/manifest.json; nullopt (with `error` set) when missing or malformed.
std::optional<std::vector<ManifestTask>> read_manifest(const std::filesystem::path& root, std::string* error);

/// The task whose name or ident is `name_or_ident`; nullptr when none.
const ManifestTask* find_task(const std::vector<ManifestTask>& tasks, const std::string& name_or_ident);

/// Up to `n` task names closest to `query` (substring matches first, then edit distance).
std::vector<std::string> close_task_names(const std::vector<ManifestTask>& tasks, const std::string& query, size_t n = 5);

/// The candidate source for `task`, given the bytes of its generated header. Deterministic.
std::string scaffold_source(const ManifestTask& task, const std::string& header_text);

/// Repository-relative-style output path: <out>/L<level>/<name>.cu.
std::filesystem::path scaffold_path(const std::filesystem::path& out_dir, const ManifestTask& task);

}  // namespace fk::gen
