// `fastkernels`: the generator's command line (parse, list, add, generate, scaffold, check, compare, audit).
// All work happens in fk_generator_lib; this file maps verbs to passes and results to exit codes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <filesystem>
#include <iostream>
#include <regex>

#include <CLI/CLI.hpp>

#include "fk/gen/audit.h"
#include "fk/gen/compare.h"
#include "fk/gen/format.h"
#include "fk/gen/hf_audit.h"
#include "fk/gen/kinds.h"
#include "fk/gen/pipeline.h"
#include "fk/gen/scaffold.h"
#include "fk/gen/write.h"
#ifdef FK_HAVE_LIBTOOLING
#include "check.h"
#endif

namespace fs = std::filesystem;
using namespace fk::gen;

namespace {

enum Exit { kOk = 0, kInvalid = 1, kUsage = 2, kStale = 3, kIo = 4 };

const char* kExitCodes =
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

// Repository-relative spelling of `p` when it lies under `root`, else `p` as given.
std::string display_path(const fs::path& root, const std::string& p) {
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(p), ec);
  fs::path rel = abs.lexically_relative(fs::weakly_canonical(root, ec));
  if (!rel.empty() && rel.native().rfind("..", 0) != 0) return rel.generic_string();
  return p;
}

int cmd_parse(const fs::path& root, const std::string& path) {
  auto text = read_text(path);
  if (!text) {
    std::cerr << path << ": cannot read\n";
    return kIo;
  }
  std::string file = display_path(root, path);
  std::string id = "(unnamed)";
  std::smatch m;
  static const std::regex hub("hf_configs/([^/]+)/([^/]+)/config\\.json");
  if (std::regex_match(file, m, hub)) id = m[1].str() + "/" + m[2].str();
  Diagnostics diag;
  // The user's recorded choices beside the config (Note [User choices]) apply here as in generate.
  const UserChoices choices = read_user_choices(path, display_path(root, fs::path(path).parent_path()), diag);
  Generation g = run_pipeline(root, {ConfigFile{id, file, *text, choices}}, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  const ResolvedConfig& r = g.resolved.at(0);
  if (id == "(unnamed)") {
    auto p = parse_config(file, *text, diag);
    if (p && !p->name_or_path.empty()) id = p->name_or_path;
  }
  std::cout << "config      " << file << "\n"
            << "id          " << id << "\n"
            << "model_type  " << r.model_type << "\n"
            << "family      " << r.descriptor->family << " (" << r.descriptor->file << ")\n"
            << "dtype       " << r.dtype << "\n"
            << "values (name = value  [origin]):\n";
  for (const auto& [name, v] : r.values)
    std::cout << "  " << name << " = " << value_to_display(v) << "  [" << r.origin.at(name) << "]\n";
  const ModelTasks& mt = g.tasks.models.at(0);
  std::cout << "ops: " << mt.ops.size() << ", modules: " << mt.modules.size() << ", tasks: " << mt.tasks.size() << "\n";
  for (const auto& t : mt.tasks) std::cout << "  " << t << "\n";
  return kOk;
}

int cmd_list(const fs::path& root, bool tasks) {
  Diagnostics diag;
  auto configs = discover_configs(root, diag);
  Generation g = run_pipeline(root, configs, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  if (tasks) {
    for (const auto& [name, t] : g.tasks.tasks) {
      std::cout << name << "  kind=" << t.kind << " level=" << t.level << " archs=" << t.archs.size() << " (";
      bool first = true;
      for (const auto& a : t.archs) std::cout << (first ? "" : ", ") << a, first = false;
      std::cout << ")\n";
    }
    std::cout << g.tasks.tasks.size() << " task(s) from " << g.tasks.models.size() << " config(s)\n";
    return kOk;
  }
  for (const auto& m : g.tasks.models) {
    const ResolvedConfig* r = nullptr;
    for (const auto& x : g.resolved)
      if (x.id == m.id) r = &x;
    std::cout << m.id << "  " << m.file << "  family=" << r->descriptor->family << " model_type=" << m.model_type
              << " ops=" << m.ops.size() << " modules=" << m.modules.size() << " tasks=" << m.tasks.size() << "\n";
  }
  std::cout << g.tasks.models.size() << " config(s), " << g.tasks.tasks.size() << " distinct task(s)\n";
  return kOk;
}

int cmd_generate(const fs::path& root, bool check) {
  Diagnostics diag;
  auto configs = discover_configs(root, diag);
  Generation g = run_pipeline(root, configs, /*emit_outputs=*/true, diag);
  if (!diag.ok()) return report(diag);
  if (check) {
    CheckResult c = check_outputs(root, g.outputs);
    if (c.clean()) {
      std::cout << "generated/ is up to date (" << g.outputs.size() << " files)\n";
      return kOk;
    }
    for (const auto& f : c.stale) std::cout << "stale:   " << f << "\n";
    for (const auto& f : c.missing) std::cout << "missing: " << f << "\n";
    for (const auto& f : c.extra) std::cout << "extra:   " << f << "\n";
    std::cout << "generated/ is out of date; run `fastkernels generate`\n";
    return kStale;
  }
  WriteResult w = write_outputs(root, g.outputs, diag);
  if (!diag.ok()) return report(diag);
  for (const auto& f : w.written) std::cout << "wrote    " << f << "\n";
  for (const auto& f : w.removed) std::cout << "removed  " << f << "\n";
  std::cout << g.tasks.tasks.size() << " task(s) from " << configs.size() << " config(s): " << w.written.size()
            << " written, " << w.unchanged.size() << " unchanged, " << w.removed.size() << " removed\n";
  return kOk;
}

struct AuditArgs {
  std::string markdown, csv, json;  ///< output files, relative to the current directory
  bool write_docs = false, check = false;
};

int cmd_audit(const fs::path& root, const AuditArgs& a);

/// The <org>/<model> a config file's own name suggests: `org__model.json`, or the last two
/// folders of `.../org/model/config.json`; "" when neither.
std::string name_from_path(const fs::path& p) {
  const std::string stem = p.stem().string();
  const size_t sep = stem.find("__");
  if (p.filename() != "config.json" && sep != std::string::npos && sep > 0 && sep + 2 < stem.size())
    return stem.substr(0, sep) + "/" + stem.substr(sep + 2);
  const fs::path dir = fs::absolute(p).parent_path();
  if (p.filename() == "config.json" && dir.has_parent_path() && !dir.parent_path().filename().empty())
    return dir.parent_path().filename().string() + "/" + dir.filename().string();
  return "";
}

/// `<org>/<model>` as the hub spells ids: letters, digits, `.`, `_`, `-`, no `..`.
bool is_model_id(const std::string& s) {
  static const std::regex id_re("[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*");
  return std::regex_match(s, id_re) && s.find("..") == std::string::npos;
}

int cmd_add(const fs::path& root, const std::string& path, std::string name, const UserChoices& asked) {
  auto text = read_text(path);
  if (!text) {
    std::cerr << path << ": cannot read\n";
    return kIo;
  }
  // A model type no descriptor claims: say what the transformers audit knows (docs/hf-audit.md).
  if (auto unknown = hfaudit::unknown_model_type_report(root, display_path(root, path), *text)) {
    std::cerr << *unknown;
    return kInvalid;
  }
  Diagnostics diag;
  if (name.empty()) {
    auto parsed = parse_config(path, *text, diag);
    if (!diag.ok()) return report(diag);
    // A hub id in _name_or_path names it; a local path there (a checkpoint folder) does not.
    const std::string hub = parsed->name_or_path;
    if (is_model_id(hub)) {
      name = hub;
      std::cout << "name     " << name << " (from the config's _name_or_path)\n";
    } else {
      name = name_from_path(path);
      const std::string why = hub.empty() ? "no `_name_or_path` in the config"
                                          : "the config's `_name_or_path` " + json_quote(hub) + " is no <org>/<model>";
      if (name.empty()) {
        std::cerr << path << ": " << why << ", and its file name says no <org>/<model> "
                  << "(org__model.json or <org>/<model>/config.json); pass --name <org>/<model>\n";
        return kInvalid;
      }
      std::cout << "name     " << name << " (from the file name " << path << (hub.empty() ? "" : "; " + why) << ")\n";
    }
  }
  if (!is_model_id(name)) {
    std::cerr << path << ": expected <org>/<model> (letters, digits, . _ -), got " << json_quote(name)
              << "; pass --name <org>/<model>\n";
    return kInvalid;
  }
  std::string rel = "hf_configs/" + name + "/config.json";
  auto existing = read_text(root / rel);
  if (existing && *existing != *text) {
    std::cerr << rel << ": already exists with different content; refusing to overwrite (remove it first, or pick another --name)\n";
    return kInvalid;
  }
  // The user's choices (Note [User choices]): those asked for now, else the ones already recorded.
  const std::string side_rel = "hf_configs/" + name + "/fastkernels.json";
  UserChoices choices = asked;
  choices.file = side_rel;
  if (choices.empty()) choices = read_user_choices(root / rel, "hf_configs/" + name, diag);
  if (!diag.ok()) return report(diag);
  // Validate against every other config first (a name clash with an existing task is an error).
  auto configs = discover_configs(root, diag);
  configs.erase(std::remove_if(configs.begin(), configs.end(), [&](const ConfigFile& c) { return c.id == name; }), configs.end());
  configs.push_back({name, rel, *text, choices});
  run_pipeline(root, configs, /*emit_outputs=*/false, diag);
  if (!diag.ok()) return report(diag);
  if (!existing) {
    write_if_changed(root, rel, *text, diag);  // stored verbatim
    if (!diag.ok()) return report(diag);
    std::cout << "added    " << rel << "\n";
  } else {
    std::cout << rel << " is already present (identical)\n";
  }
  const std::optional<std::string> side_before = read_text(root / side_rel);
  if (!asked.empty()) {
    write_if_changed(root, side_rel, user_choices_text(choices), diag);
    if (!diag.ok()) return report(diag);
    std::cout << "recorded " << side_rel << (choices.dequantize ? " (dequantize)" : "");
    for (const auto& k : choices.allow_unknown) std::cout << " (allow " << k << ")";
    std::cout << "\n";
  }
  if (int rc = cmd_generate(root, /*check=*/false); rc != kOk) {
    // Nothing half-added: the config (and the choices recorded now) go again, so that the next
    // add or generate does not trip over a config that never generated.
    std::error_code ec;
    if (!existing) {
      fs::remove(root / rel, ec);
      for (fs::path dir = (root / rel).parent_path(); dir != root / "hf_configs" && fs::is_empty(dir, ec); dir = dir.parent_path())
        fs::remove(dir, ec);
    }
    if (side_before) write_if_changed(root, side_rel, *side_before, diag);
    else if (!asked.empty()) fs::remove(root / side_rel, ec);
    std::cerr << "fastkernels add: generation failed, so " << (existing ? "the choices recorded now were undone" : rel + " was removed again")
              << "; nothing was added\n";
    return rc;
  }
  // The new architecture changes the coverage audit; keep docs/coverage.md current (CI checks it).
  AuditArgs docs;
  docs.write_docs = true;
  return cmd_audit(root, docs);
}

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

struct CompareArgs {
  std::string dir, manifest, jsonl, markdown, scope = "all";
  std::string tie_gap = "auto";  ///< "auto" or a number >= 0 (validated by the option)
};

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

struct HfAuditArgs {
  std::string hf, explain, rules, json, markdown;
};

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fastkernels: generate production-aligned GPU kernel task sources from HF configs.\n"
      "Passes: parse -> resolve -> lower -> dedupe -> emit -> write. Configs: hf_configs/<org>/<model>/config.json;\n"
      "descriptors: generator/descriptors/*.json; templates: templates/<kind>.{h,cu}.mustache; output: generated/."};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.fallthrough();
  std::string root_opt;
  app.add_option("--root", root_opt,
                 "Repository root (default: nearest directory at or above the current one holding hf_configs/ and generator/descriptors/)");

  auto* parse = app.add_subcommand("parse", "Parse and resolve one config; print its typed values (with origins) and its tasks");
  std::string parse_path;
  parse->add_option("config", parse_path, "Path to a config.json")->required();
  parse->footer(kExitCodes);

  auto* list = app.add_subcommand("list", "List configs under hf_configs/ with family, op, module and task counts");
  bool list_tasks = false;
  list->add_flag("--tasks", list_tasks, "List the distinct tasks of every level instead (name, kind, level, architectures)");
  list->footer(kExitCodes);

  auto* add = app.add_subcommand("add", "Validate a config, store it verbatim as hf_configs/<org>/<model>/config.json, then generate and refresh docs/coverage.md");
  std::string add_path, add_name;
  add->add_option("config", add_path, "Path to the config.json to add")->required();
  add->add_option("--name", add_name,
                  "<org>/<model> (default: the config's `_name_or_path`, else the file name: org__model.json or <org>/<model>/config.json)");
  UserChoices add_choices;
  add->add_flag("--dequantize", add_choices.dequantize,
                "generate bf16 tasks for a quantised checkpoint (its quantization_config is refused otherwise); recorded in "
                "hf_configs/<org>/<model>/fastkernels.json and the manifest");
  add->add_option("--allow-unknown", add_choices.allow_unknown,
                  "config keys the family does not know, accepted knowingly (recorded likewise)")
      ->expected(1, -1);
  add->footer(kExitCodes);

  auto* gen = app.add_subcommand("generate", "Regenerate generated/ (task headers and sources + manifest); writes only changed files, removes stale ones");
  bool check = false;
  gen->add_flag("--check", check, "Write nothing; exit 3 listing stale, missing or extra files if generated/ is out of date");
  gen->footer(kExitCodes);

  auto* scaffold = app.add_subcommand("scaffold", "Write a candidate source (candidates/L<level>/<task>.cu) with the task's exact generated interface");
  std::string sc_task, sc_arch, sc_out;
  int sc_level = 0;
  bool sc_force = false;
  auto* sc_t = scaffold->add_option("--task", sc_task, "Task name (or its namespace ident), as `fastkernels list --tasks` shows");
  auto* sc_a = scaffold->add_option("--arch", sc_arch, "Every task of this config (org/model, or a unique part of it)");
  sc_t->excludes(sc_a);
  scaffold->add_option("--level", sc_level, "Only tasks of this level (1-4)")->check(CLI::Range(1, 4));
  scaffold->add_option("--out", sc_out, "Output directory (default: <root>/candidates)");
  scaffold->add_flag("--force", sc_force, "Overwrite existing candidates");
  scaffold->footer(kExitCodes);

  auto* check_cmd = app.add_subcommand("check", "Check a candidate source statically (Clang LibTooling): interface vs the generated header, "
                                                "and flags for baseline/vendor calls, extra streams, host timing, static caches");
  std::string ck_file, ck_task;
  bool ck_verbose = false;
  check_cmd->add_option("candidate", ck_file, "The candidate .cu file")->required();
  check_cmd->add_option("--task", ck_task, "Task name (default: from the candidate's namespace fk::generated::<ident>)");
  check_cmd->add_flag("--verbose", ck_verbose, "Also print the parse command and diagnostics from included files");
  check_cmd->footer(kExitCodes);

  auto* compare_cmd = app.add_subcommand("compare", "Judge a candidate benchmark session: per-candidate status, speedups, effect at "
                                                    "higher levels, greedy-token check, end-to-end speedup, and the score "
                                                    "(docs/candidates.md)");
  CompareArgs cmp;
  compare_cmd->add_option("results-dir", cmp.dir, "Session folder: baseline/ plus one <set>/status.json per candidate set")->required();
  compare_cmd->add_option("--manifest", cmp.manifest, "Task manifest (default: <root>/generated/manifest.json)");
  compare_cmd->add_option("--jsonl", cmp.jsonl, "Also write one JSON record per candidate, per family and for the score");
  compare_cmd->add_option("--markdown", cmp.markdown, "Also write the tables as markdown");
  compare_cmd->add_option("--scope", cmp.scope, "Levels the score counts (default: all)")->check(CLI::IsMember({"all", "L1", "L2", "L3", "L4"}));
  compare_cmd->add_option("--tie-gap", cmp.tie_gap,
                          "Greedy near-tie bound in logits, or `auto` (default): 2 x (E_base + E_cand), each run's largest "
                          "logits error in its L4 checks against fp32; 0.30 where a run has none (docs/candidates.md)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "auto") return "";
            size_t used = 0;
            double x = -1;
            try {
              x = std::stod(v, &used);
            } catch (const std::exception&) {
            }
            if (used == v.size() && std::isfinite(x) && x >= 0) return "";
            return "expected `auto` or a number >= 0, got " + v;
          },
          "auto|NUMBER>=0"));
  compare_cmd->footer(kExitCodes);

  auto* audit_cmd = app.add_subcommand("audit", "Operator coverage across architectures: kinds each config needs, the model x "
                                                "operator matrix, sharing, op instances -> tasks -> kinds, a greedy set "
                                                "cover (docs/coverage.md)");
  AuditArgs aud;
  audit_cmd->add_option("--markdown", aud.markdown, "Also write the report as markdown (what docs/coverage.md holds)");
  audit_cmd->add_option("--csv", aud.csv, "Also write the model x operator matrix as CSV (cell: tasks of that kind)");
  audit_cmd->add_option("--json", aud.json, "Also write everything as JSON");
  auto* aud_docs = audit_cmd->add_flag("--write-docs", aud.write_docs, "Write <root>/docs/coverage.md (only when it changes)");
  audit_cmd->add_flag("--check", aud.check, "Write nothing; exit 3 when docs/coverage.md is out of date")
      ->excludes(aud_docs);
  HfAuditArgs hfa;
  audit_cmd->add_option("--hf", hfa.hf, "HF transformers audit instead: the transformers package directory (or a pip --target "
                                        "folder holding it); operators per model folder and how our kinds cover them "
                                        "(docs/audit-rules.md, docs/hf-audit.md)");
  audit_cmd->add_option("--explain", hfa.explain, "With --hf: one model folder or model_type, every operator with its evidence");
  audit_cmd->add_option("--rules", hfa.rules, "With --hf: the rules file (default: <root>/generator/audit/hf_rules.json)");
  audit_cmd->add_option("--hf-json", hfa.json, "With --hf: also write the JSON summary (what generator/audit/hf_audit_summary.json holds)");
  audit_cmd->add_option("--hf-markdown", hfa.markdown, "With --hf: also write the markdown report (what docs/hf-audit.md holds)");
  audit_cmd->footer(kExitCodes);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsage;
  }

  try {  // the kind table is data (Note [Kinds as data]): a broken entry is said once, here
    kind_names(false);
  } catch (const std::invalid_argument& e) {
    std::cerr << "fastkernels: the task-kind table is broken: " << e.what() << "\n";
    return kInvalid;
  }
  if (*compare_cmd) return cmd_compare(root_opt, cmp);  // needs no repository with --manifest
  auto root = root_or_complain(root_opt);
  if (!root) return kInvalid;
  if (*parse) return cmd_parse(*root, parse_path);
  if (*list) return cmd_list(*root, list_tasks);
  if (*add) {
    std::sort(add_choices.allow_unknown.begin(), add_choices.allow_unknown.end());
    add_choices.allow_unknown.erase(std::unique(add_choices.allow_unknown.begin(), add_choices.allow_unknown.end()),
                                    add_choices.allow_unknown.end());
    return cmd_add(*root, add_path, add_name, add_choices);
  }
  if (*scaffold) {
    if (sc_task.empty() && sc_arch.empty()) {
      std::cerr << "fastkernels scaffold: pass --task <name> or --arch <config>\n";
      return kUsage;
    }
    return cmd_scaffold(*root, sc_task, sc_arch, sc_level, sc_out, sc_force);
  }
  if (*check_cmd) return cmd_check(*root, ck_file, ck_task, ck_verbose);
  if (*audit_cmd && !hfa.hf.empty()) {
    if (aud.check || aud.write_docs || !aud.markdown.empty() || !aud.csv.empty() || !aud.json.empty()) {
      std::cerr << "fastkernels audit: --hf runs the transformers audit; --check, --write-docs, --markdown, --csv and --json belong "
                   "to the descriptor audit (use --hf-markdown / --hf-json)\n";
      return kUsage;
    }
    return cmd_hf_audit(*root, hfa);
  }
  if (*audit_cmd && !(hfa.explain.empty() && hfa.rules.empty() && hfa.json.empty() && hfa.markdown.empty())) {
    std::cerr << "fastkernels audit: --explain, --rules, --hf-json and --hf-markdown need --hf <transformers dir>\n";
    return kUsage;
  }
  if (*audit_cmd) {
    if (aud.check && !(aud.markdown.empty() && aud.csv.empty() && aud.json.empty())) {
      std::cerr << "fastkernels audit: --check writes nothing; drop --markdown, --csv and --json\n";
      return kUsage;
    }
    return cmd_audit(*root, aud);
  }
  return cmd_generate(*root, check);
}
