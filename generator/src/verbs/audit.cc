// `fastkernels audit`: operator coverage across our configs, or across HF transformers (--hf).
#include <filesystem>
#include <iostream>
#include <set>

#include "fk/gen/audit.h"
#include "fk/gen/format.h"
#include "fk/gen/hf_audit.h"
#include "fk/gen/pipeline.h"
#include "fk/gen/write.h"
#include "verbs/verbs.h"

namespace fk::gen::verbs {

// Operator coverage (fk/gen/audit.h). Every output path is checked before anything is written.
int cmd_audit(const fs::path& root, const AuditArgs& a) {
  namespace cov = fk::gen::coverage;
  Diagnostics diag;
  auto configs = discover_configs(root, diag);
  Generation g = run_pipeline(root, configs, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  const cov::Audit audit = cov::build(g);
  const std::string md = cov::render_markdown(audit);
  if (a.check) {
    auto have = read_text(root / cov::kDocsPath);
    if (have && *have == md) {
      std::cout << cov::kDocsPath << " is up to date\n";
      return kOk;
    }
    std::cout << (have ? "stale:   " : "missing: ") << cov::kDocsPath << "\n"
              << cov::kDocsPath << " is out of date; run `" << cov::kDocsCommand << "`\n";
    return kStale;
  }
  struct Out {
    fs::path base;
    std::string path, option, bytes;
  };
  const fs::path cwd = fs::current_path();
  std::vector<Out> outs;
  if (a.write_docs) outs.push_back({root, cov::kDocsPath, "--write-docs", md});
  if (!a.markdown.empty()) outs.push_back({cwd, a.markdown, "--markdown", md});
  if (!a.csv.empty()) outs.push_back({cwd, a.csv, "--csv", cov::render_csv(audit)});
  if (!a.json.empty()) outs.push_back({cwd, a.json, "--json", cov::render_json(audit)});
  std::set<fs::path> seen;
  int bad = 0;
  for (const auto& o : outs) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(o.base / o.path, ec);
    if (ec) p = (o.base / o.path).lexically_normal();
    fs::path blocker;  // the nearest existing ancestor, when it is not a directory
    for (fs::path d = p.parent_path(); !d.empty() && blocker.empty(); d = d.parent_path()) {
      if (fs::exists(d, ec)) {
        if (!fs::is_directory(d, ec)) blocker = d;
        break;
      }
      if (d == d.parent_path()) break;
    }
    if (fs::is_directory(p, ec)) {
      std::cerr << "fastkernels audit: " << o.option << " " << o.path << ": is a directory; expected a file path\n";
      ++bad;
    } else if (!blocker.empty()) {
      std::cerr << "fastkernels audit: " << o.option << " " << o.path << ": " << blocker.string()
                << " is not a directory\n";
      ++bad;
    } else if (!seen.insert(p).second) {
      std::cerr << "fastkernels audit: " << o.option << " " << o.path << ": named by another output option too\n";
      ++bad;
    }
  }
  if (bad) return kUsage;
  if (!a.write_docs) std::cout << cov::render_terminal(audit);
  for (const auto& o : outs) {
    bool wrote = write_if_changed(o.base, o.path, o.bytes, diag);
    if (diag.ok()) std::cout << (wrote ? "wrote    " : "unchanged ") << o.path << "\n";
  }
  return diag.ok() ? kOk : report(diag);
}

// The HF transformers audit (fk/gen/hf_audit.h, docs/audit-rules.md): operators per model folder.
int cmd_hf_audit(const fs::path& root, const HfAuditArgs& a) {
  namespace hfa = fk::gen::hfaudit;
  Diagnostics diag;
  const std::string rules_display = a.rules.empty() ? "generator/audit/hf_rules.json" : display_path(root, a.rules);
  auto rules = hfa::load_rules_file(a.rules.empty() ? root / "generator" / "audit" / "hf_rules.json" : fs::path(a.rules),
                                    rules_display, diag);
  auto package = hfa::package_dir(a.hf, diag);
  if (!diag.ok()) return report(diag);
  auto audit = hfa::audit_package(*package, *rules, diag);
  if (!diag.ok()) return report(diag);
  if (!a.explain.empty()) {
    std::string error;
    auto text = hfa::explain(*audit, *rules, a.explain, &error);
    if (!text) {
      std::cerr << "fastkernels audit --explain: " << error << "\n";
      return kInvalid;
    }
    std::cout << *text;
    return kOk;
  }
  hfa::DescribedTypes described;
  {
    Diagnostics ignored;  // descriptor problems are `generate`'s to report
    auto ds = load_descriptors(root, ignored);
    for (const auto& t : ds.model_types()) described.insert(t);
  }
  const fs::path cwd = fs::current_path();
  if (!a.json.empty()) write_if_changed(cwd, a.json, hfa::render_json(*audit, *rules), diag);
  if (!a.markdown.empty())
    write_if_changed(cwd, a.markdown,
                     hfa::render_markdown(*audit, *rules, described, "scripts/audit_hf.sh " + audit->version + " --update"), diag);
  if (!diag.ok()) return report(diag);
  std::cout << hfa::render_terminal(*audit, *rules, described);
  return kOk;
}

}  // namespace fk::gen::verbs
