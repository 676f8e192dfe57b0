// `fastkernels check`: a candidate source checked statically with Clang LibTooling
// (Note [Checker parsing] in check.cc; docs/candidates.md). Built only with FK_WITH_LIBTOOLING.
// This header is plain C++ so the CLI (built with RTTI and exceptions) can include it.
#pragma once

#include <filesystem>
#include <string>

namespace fk::check {

struct Options {
  std::filesystem::path root;  ///< repository root (generated/, runtime/include, kernels/include)
  std::string candidate;       ///< path of the candidate .cu
  std::string task;            ///< task name or ident; empty: from the namespace fk::generated::<ident>
  bool verbose = false;
};

/// Exit codes: 0 PASSED (static part), 1 INTERFACE_MISMATCH, 2 usage (unknown task, header does not
/// parse), 3 COMPILE_ERROR, 4 I/O error, 5 SUSPECT. Diagnostics go to stderr, the verdict to stdout.
int run(const Options& options);

}  // namespace fk::check
