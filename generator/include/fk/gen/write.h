// The write pass: the only code that modifies the disk. Writes a file only when its bytes change
// (so mtimes and incremental builds stay quiet), removes stale task headers and sources listed in
// the previous manifest, and refuses to touch anything when an error was recorded earlier.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fk/gen/emit.h"

namespace fk::gen {

struct WriteResult {
  std::vector<std::string> written;    ///< created or changed
  std::vector<std::string> unchanged;
  std::vector<std::string> removed;    ///< stale, listed in the previous manifest
};

/// Where `root`/`tree` differ (repository-relative paths, sorted).
struct CheckResult {
  std::vector<std::string> stale;    ///< present with different bytes
  std::vector<std::string> missing;  ///< not present
  std::vector<std::string> extra;    ///< listed in the on-disk manifest but no longer generated
  bool clean() const { return stale.empty() && missing.empty() && extra.empty(); }
};

/// `header` and `source` entries of root/generated/manifest.json, sorted (empty when absent or unreadable).
std::vector<std::string> previous_outputs(const std::filesystem::path& root);

/// Writes `tree` under `root`. Does nothing when `diag` already holds errors.
WriteResult write_outputs(const std::filesystem::path& root, const OutputTree& tree, Diagnostics& diag);

/// Compares `tree` with the files under `root`; writes nothing.
CheckResult check_outputs(const std::filesystem::path& root, const OutputTree& tree);

/// Writes `bytes` to root/rel only if different (creating directories); used by `add` too.
/// Returns true when the file was written. Failures go to `diag` as I/O errors.
bool write_if_changed(const std::filesystem::path& root, const std::string& rel, const std::string& bytes, Diagnostics& diag);

}  // namespace fk::gen
