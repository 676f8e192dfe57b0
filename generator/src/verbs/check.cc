// `fastkernels check`: a candidate checked statically (Clang LibTooling, generator/checker/).
#include <filesystem>
#include <iostream>

#include "verbs/verbs.h"
#ifdef FK_HAVE_LIBTOOLING
#include "check.h"
#endif

namespace fk::gen::verbs {

int cmd_check(const fs::path& root, const std::string& candidate, const std::string& task, bool verbose) {
#ifdef FK_HAVE_LIBTOOLING
  fk::check::Options o;
  o.root = root;
  o.candidate = candidate;
  o.task = task;
  o.verbose = verbose;
  return fk::check::run(o);
#else
  (void)root, (void)candidate, (void)task, (void)verbose;
  std::cerr << "fastkernels check: this fastkernels was built without Clang LibTooling, so it cannot check "
               "candidates.\n  Enable it: install llvm-14-dev libclang-14-dev clang-14 (scripts/setup.sh does, as root), "
               "then reconfigure with -DFK_WITH_LIBTOOLING=ON (e.g. `cmake --preset default -DFK_WITH_LIBTOOLING=ON`).\n";
  return kUsage;
#endif
}

}  // namespace fk::gen::verbs
