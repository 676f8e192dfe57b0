// The verbs of `fastkernels` (generator/src/main.cc wires them to the command line): each a thin
// file over fk_generator_lib that maps a pass or tool to printed results and an exit code.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "fk/gen/config.h"
#include "fk/gen/diag.h"

namespace fk::gen::verbs {

namespace fs = std::filesystem;

enum Exit { kOk = 0, kInvalid = 1, kUsage = 2, kStale = 3, kIo = 4 };
/// The exit-code footer of every verb's --help.
extern const char* const kExitCodes;

/// Prints every error and the count; kIo when a file could not be read or written, else kInvalid.
int report(const Diagnostics& diag);
/// The repository root: --root when given (checked), else the nearest directory at or above the
/// current one holding hf_configs/ and generator/descriptors/; nullopt (said) when none.
std::optional<fs::path> root_or_complain(const std::string& opt);
/// Repository-relative spelling of `p` when it lies under `root`, else `p` as given.
std::string display_path(const fs::path& root, const std::string& p);

struct AuditArgs {
  std::string markdown, csv, json;  ///< output files, relative to the current directory
  bool write_docs = false, check = false;
};
struct CompareArgs {
  std::string dir, manifest, jsonl, markdown, scope = "all";
  std::string tie_gap = "auto";  ///< "auto" or a number >= 0 (validated by the option)
};
struct HfAuditArgs {
  std::string hf, explain, rules, json, markdown;
};

int cmd_parse(const fs::path& root, const std::string& path);
int cmd_list(const fs::path& root, bool tasks);
int cmd_generate(const fs::path& root, bool check);
int cmd_add(const fs::path& root, const std::string& path, std::string name, const UserChoices& asked);
int cmd_scaffold(const fs::path& root, const std::string& task, const std::string& arch, int level,
                 const std::string& out_opt, bool force);
int cmd_check(const fs::path& root, const std::string& candidate, const std::string& task, bool verbose);
int cmd_compare(const std::string& root_opt, const CompareArgs& a);
int cmd_audit(const fs::path& root, const AuditArgs& a);
int cmd_hf_audit(const fs::path& root, const HfAuditArgs& a);

}  // namespace fk::gen::verbs
