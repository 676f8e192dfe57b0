// The HuggingFace transformers audit (`fastkernels audit --hf`): which operators each model folder
// of an installed transformers package needs, read from its modeling and configuration source,
// and how our task kinds cover them. The rules are data (generator/audit/hf_rules.json,
// docs/audit-rules.md); this module loads them strictly, scans the source, decides a verdict per
// folder with its evidence, and renders reports. It also reads back the committed summary so that
// `fastkernels add` can say what the audit knows about a model type that has no descriptor.
//
// Note [Audit verdicts]
// Each operator of the rules is covered in one of four ways: `kinds` (one of our task kinds
// computes it), `composition` (built from our kinds, the rule says how), `missing` (no kind; a
// standard operator a vendor library or a small extension of one of our kernels provides) or
// `missing` with `new_kernel` (no library kernel exists: production ships a custom one). A folder's
// verdict is the worst over the operators detected in it: new-kernel > partial > composition >
// covered; a folder where no rule matched is `unclassified`. Every detected operator keeps its
// evidence (rule id, file, line, matched text), so a verdict can always be explained.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fk/gen/descriptor.h"
#include "fk/gen/diag.h"

namespace fk::gen::hfaudit {

/// How our task kinds cover an operator (Note [Audit verdicts]).
enum class Coverage { kKinds, kComposition, kMissing, kNewKernel };
/// "kinds", "composition", "missing", "new_kernel".
const char* coverage_name(Coverage c);

/// One operator of the rules file.
struct Operator {
  std::string id;        ///< e.g. rms_norm
  std::string category;  ///< norm, activation, attention, position, moe, conv, recurrence, pooling, embedding, other
  std::string doc;
  Coverage coverage = Coverage::kMissing;
  std::vector<std::string> kinds;  ///< kKinds / kComposition: our task kinds
  std::string how;                 ///< kComposition: how the kinds compose it
  std::string reason;              ///< kMissing / kNewKernel: why it is not covered
  std::vector<std::string> requires_ops;  ///< counted only when all of these are detected too
  std::vector<std::string> subsumed_by;   ///< dropped when any of these is detected
};

/// A literal substring or an ECMAScript regex, matched against one logical source line.
struct Pattern {
  std::string text;
  bool is_regex = false;
  std::shared_ptr<const std::regex> re;
  /// Literals of which every match contains one (the literal itself, or derived from the regex;
  /// empty: none proven), checked with a plain substring search before the regex runs (Note
  /// [Regex anchors] in hf_audit.cc).
  std::vector<std::string> anchors;
  /// False when `text` contains none of the anchors (then no line of it can match).
  bool may_match(const std::string& text) const {
    if (anchors.empty()) return true;
    for (const auto& a : anchors)
      if (text.find(a) != std::string::npos) return true;
    return false;
  }
};

/// One detection rule.
struct Rule {
  std::string id;
  std::string doc;
  bool in_configuration = false;  ///< false: modeling_*.py; true: configuration_*.py
  Pattern pattern;
  std::optional<Pattern> unless_line;  ///< a match on a line that also matches this does not count
  std::string op;                      ///< presence rule: the operator detected
  std::map<std::string, std::string> values;  ///< value rule: capture group 1 -> operator
  std::string other_values;                   ///< value rule: operator for unlisted values ("" : a note)
};

/// ACT2FN resolution (docs/audit-rules.md, "activations").
struct ActivationRules {
  std::string doc;
  Pattern reference;             ///< capture group 1: the expression inside ACT2FN[...]
  std::vector<Pattern> gated;    ///< tested on the enclosing top-level class
  /// name -> (plain operator, gated operator); nullopt: the name is the identity (no operator).
  std::map<std::string, std::optional<std::pair<std::string, std::string>>> names;
  /// configuration key -> the key whose default it follows when it has none of its own (T5's
  /// dense_act_fn is derived from feed_forward_proj in __post_init__).
  std::map<std::string, std::string> config_aliases;
};

/// The loaded rules file.
struct Rules {
  std::string file;  ///< as given (for messages and reports)
  /// folders under models/ that are no model (transformers' auto mappings)
  std::vector<std::string> skip_folders;
  std::vector<Operator> operators;
  std::vector<Rule> rules;
  ActivationRules activations;
  /// The operator `id`; nullptr when unknown.
  const Operator* op(const std::string& id) const;
};

/// The known categories, in report order.
const std::vector<std::string>& categories();

/// Parses and checks a rules file (strict: unknown keys, wrong types, unknown operators or task
/// kinds, bad regexes are errors naming `file`, the JSON path and what was expected).
std::optional<Rules> load_rules(const std::string& file, const std::string& text, Diagnostics& diag);
/// Reads and loads `path` (displayed as `display`); an unreadable file is an I/O error.
std::optional<Rules> load_rules_file(const std::filesystem::path& path, const std::string& display, Diagnostics& diag);

/// Why an operator was detected: one matched line.
struct Evidence {
  std::string rule;  ///< rule id, or "activations"
  std::string file;  ///< relative to the transformers package, e.g. models/llama/modeling_llama.py
  int line = 0;      ///< 1-based, first physical line of the logical line
  std::string text;  ///< the logical line, whitespace collapsed, shortened
  std::string note;  ///< how an activation was resolved, or a dropped operator's reason
};

struct Finding {
  std::vector<Evidence> evidence;  ///< the first few
  size_t count = 0;                ///< all matches
};

enum class Verdict { kCovered, kComposition, kPartial, kNewKernel, kUnclassified };
/// "covered", "composition", "partial", "new-kernel", "unclassified".
const char* verdict_name(Verdict v);
/// One line: what the verdict means.
const char* verdict_meaning(Verdict v);

/// The audit of one model folder.
struct ModelAudit {
  std::string folder;                    ///< models/<folder>
  std::vector<std::string> model_types;  ///< `model_type = "..."` of its configuration files
  std::vector<std::string> uses;         ///< sub-model types its configuration defaults reference
  std::vector<std::string> uses_folders;  ///< folders whose modeling code it imports
  std::vector<std::string> uses_unknown;  ///< `uses` that no audited folder declares
  /// AutoModel*.from_config in its modeling code (Note [Sub-models] in hf_audit.cc)
  bool runtime_submodels = false;
  std::vector<std::string> via;          ///< folders whose operators joined (breadth first)
  std::set<std::string> via_ops;         ///< operators that came only from those folders
  std::vector<std::string> files;        ///< scanned files, relative to the package
  /// detected operators (after requires / subsumed_by), its own and its sub-models'
  std::map<std::string, Finding> ops;
  std::map<std::string, Finding> dropped;  ///< detected, then dropped (evidence note says why)
  std::vector<Evidence> unresolved;        ///< ACT2FN references the rules could not resolve
  Verdict verdict = Verdict::kUnclassified;
};

/// The audit of one transformers package.
struct Audit {
  std::string version;         ///< transformers __version__, or "unknown"
  std::string version_source;  ///< where it was read
  std::string rules_file;
  std::vector<ModelAudit> models;   ///< sorted by folder
  std::vector<std::string> skipped;  ///< folders without modeling_*.py
  size_t count(Verdict v) const;
  /// The model whose folder or one of whose model types is `name`; nullptr when none.
  const ModelAudit* find(const std::string& name) const;
};

/// The transformers package directory for `path`: `path` itself when it holds models/ and
/// __init__.py, or `path`/transformers (a pip --target folder); errors name the path.
std::optional<std::filesystem::path> package_dir(const std::filesystem::path& path, Diagnostics& diag);

/// Audits every folder under `package`/models.
std::optional<Audit> audit_package(const std::filesystem::path& package, const Rules& rules, Diagnostics& diag);

/// Model types that have a descriptor, for the reports' cross-check (may be empty).
using DescribedTypes = std::set<std::string>;

/// Terminal report: version, counts, missing operators by models, the uncovered list.
std::string render_terminal(const Audit& a, const Rules& r, const DescribedTypes& described);
/// docs/hf-audit.md.
std::string render_markdown(const Audit& a, const Rules& r, const DescribedTypes& described, const std::string& command);
/// The JSON summary (generator/audit/hf_audit_summary.json): version, counts, the operators'
/// coverage, and per folder its model types, verdict and operators by coverage. One model per line.
std::string render_json(const Audit& a, const Rules& r);
/// `--explain`: every operator of one model with its evidence; nullopt (and `error`) when
/// `name` is neither a folder nor a model type of the audit.
std::optional<std::string> explain(const Audit& a, const Rules& r, const std::string& name, std::string* error);

// --- the committed summary, read back (part of `fastkernels add`) -------------------------------

/// Where the summary lives, relative to the repository root.
constexpr const char* kSummaryPath = "generator/audit/hf_audit_summary.json";

struct SummaryOperator {
  std::string category, coverage, detail;  ///< detail: kinds joined, the how, or the reason
  std::vector<std::string> kinds;           ///< our task kinds the operator maps to (covered / composition)
};
struct SummaryModel {
  std::string folder, verdict;
  std::vector<std::string> model_types;
  std::map<std::string, std::vector<std::string>> by_coverage;  ///< coverage name -> operator ids
};
struct Summary {
  std::string file, version;
  std::map<std::string, SummaryOperator> operators;
  std::vector<SummaryModel> models;
  const SummaryModel* find(const std::string& model_type) const;
};

/// Parses a summary written by render_json; errors name the file and JSON path.
std::optional<Summary> load_summary(const std::string& file, const std::string& text, Diagnostics& diag);

/// What `add` prints for a config whose model type has no descriptor: the audit's verdict, the
/// covered operators with their kinds, the missing ones with reasons, and the next steps.
/// `summary` null: none could be read (`summary_problem` says why).
std::string render_add_report(const std::string& model_type, const Summary* summary, const std::string& summary_problem);

/// Note [Nearest descriptor]
/// For a config whose model type no descriptor claims, the descriptors ranked by how near they are:
/// first by how many of the task kinds the audit maps the model's operators to (`model`, may be
/// null) the descriptor's forward pass uses, then by how few of the config's keys (top level and
/// text_config) it would not know, then by how many it reads. For the nearest (at most `top`),
/// the fields to map: every config key the family reads (as which field), the keys it would
/// refuse as unknown, the required fields the config lacks, and the kinds the audit found that the
/// family never binds. A ranking, not a claim: parity is what proves `--as`.
std::string nearest_descriptors_report(const DescriptorSet& descriptors, const nlohmann::json& config, const Summary* summary,
                                       const SummaryModel* model, size_t top = 3);

/// For `fastkernels add`: when the config's model_type is claimed by no descriptor under `root`,
/// the error line plus render_add_report; nullopt when a descriptor claims it (or the config
/// carries no readable model_type: the normal pipeline reports that).
std::optional<std::string> unknown_model_type_report(const std::filesystem::path& root, const std::string& config_file,
                                                     const std::string& config_text, const std::string& component = "");

}  // namespace fk::gen::hfaudit
