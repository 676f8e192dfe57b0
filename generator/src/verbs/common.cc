// What the verbs share: exit codes, error reports, the repository root.
#include <iostream>

#include "fk/gen/repo.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

const char* const kExitCodes =
    "Exit codes:\n"
    "  0  success\n"
    "  1  invalid input (config, descriptor, template, or a name clash); every problem is listed\n"
    "  2  usage error (bad command line)\n"
    "  3  `generate --check`: generated/ is out of date (stale, missing or extra files listed)\n"
    "  4  I/O error (a file could not be read, written or removed)\n"
    "`scaffold`: 1 also when a candidate exists (pass --force) or no task matches.\n"
    "`audit --check`: 3 when docs/coverage.md is out of date (run `fastkernels audit --write-docs`).\n"
    "`check` (docs/candidates.md): 0 interface matches and nothing suspicious; 1 INTERFACE_MISMATCH;\n"
    "  2 usage error, task unknown, or built without Clang LibTooling; 3 COMPILE_ERROR (the candidate\n"
    "  does not parse); 4 I/O error; 5 SUSPECT (interface matches, static flags raised)\n"
    "`compare`: 0 every candidate PASSED; 1 some candidate is not PASSED; 2 usage error, unreadable or\n"
    "  malformed input (every problem listed, nothing written), or an output that cannot be written";

int report(const Diagnostics& diag) {
  for (const auto& e : diag.errors()) std::cerr << e << "\n";
  std::cerr << "fastkernels: " << diag.errors().size() << " error(s)\n";
  return diag.io_failed() ? kIo : kInvalid;
}

std::optional<fs::path> root_or_complain(const std::string& opt) {
  if (!opt.empty()) {
    fs::path r = fs::absolute(opt);
    if (!fs::is_directory(r / "hf_configs") || !fs::is_directory(r / "generator" / "descriptors")) {
      std::cerr << "fastkernels: --root " << opt << ": expected a directory holding hf_configs/ and generator/descriptors/\n";
      return std::nullopt;
    }
    return r;
  }
  auto r = find_root(fs::current_path());
  if (!r) std::cerr << "fastkernels: no directory holding hf_configs/ and generator/descriptors/ at or above the current directory; pass --root\n";
  return r;
}

std::string display_path(const fs::path& root, const std::string& p) {
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(p), ec);
  fs::path rel = abs.lexically_relative(fs::weakly_canonical(root, ec));
  if (!rel.empty() && rel.native().rfind("..", 0) != 0) return rel.generic_string();
  return p;
}

}  // namespace fk::gen::verbs
