// `fastkernels compare`: judge a candidate benchmark session (docs/candidates.md).
#include <filesystem>
#include <iostream>

#include "fk/gen/compare.h"
#include "fk/gen/format.h"
#include "fk/gen/write.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

int cmd_compare(const std::string& root_opt, const CompareArgs& a) {
  namespace cmp = fk::gen::compare;
  fs::path manifest = a.manifest;
  if (manifest.empty()) {
    auto root = root_or_complain(root_opt);
    if (!root) return kUsage;
    manifest = *root / "generated" / "manifest.json";
  }
  auto fail = [](const Diagnostics& diag) {
    for (const auto& e : diag.errors()) std::cerr << e << "\n";
    std::cerr << "fastkernels compare: " << diag.errors().size() << " error(s); nothing written\n";
    return kUsage;
  };
  Diagnostics diag;
  auto graph = cmp::load_manifest(manifest, diag);
  auto session = cmp::load_session(a.dir, diag);
  if (!diag.ok()) return fail(diag);
  cmp::Options o;
  if (a.tie_gap != "auto") o.tie_gap = std::stod(a.tie_gap);
  o.scope_level = a.scope == "all" ? 0 : a.scope[1] - '0';
  const cmp::Report r = cmp::evaluate(*session, *graph, o, diag);
  if (!diag.ok()) return fail(diag);
  // Outputs only once every input was read and judged; each through a temporary file and a rename.
  const fs::path cwd = fs::current_path();
  if (!a.jsonl.empty()) write_if_changed(cwd, a.jsonl, cmp::render_jsonl(r), diag);
  if (!a.markdown.empty()) write_if_changed(cwd, a.markdown, cmp::render_markdown(r), diag);
  if (!diag.ok()) return fail(diag);
  std::cout << cmp::render_terminal(r);
  return r.all_passed() ? kOk : kInvalid;
}

}  // namespace fk::gen::verbs
