// `fastkernels audit`: operator coverage across architectures (docs/coverage.md is its output).
// Two steps, one job each:
//   build   from one pipeline run (parse -> resolve -> lower -> dedupe, every config of the
//           repository): which task kinds ("operators") each architecture needs, how many
//           architectures share each kind, how op instances consolidate into tasks and kinds, and
//           a greedy set cover of the kinds; pure (reads no file)
//   render  terminal text, markdown, CSV (the matrix) and JSON (everything); strings only, the
//           caller writes them through the write pass
//
// Note [Coverage figures]
// An *op instance* is one op of one model's forward pass (blk.<i>.<role>, one per layer: L1) or
// one composite module of one model (L2-L4, once per model). Dedupe merges instances with equal
// names into *tasks* (Note [Task naming]); the *kind* (task family) is the task's KindSpec.
// So per level: op instances >= tasks >= kinds used. Every registered kind is listed, used or
// not; an unused one is a kernel family no configuration under hf_configs/ needs yet.
// The set cover is greedy: repeatedly pick the architecture that needs the most kinds not yet
// covered (ties: the smaller config id), until every kind some architecture needs is covered.
// Greedy is not always minimal, but it is deterministic and shows what each pick adds.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "fk/gen/pipeline.h"

namespace fk::gen::coverage {

/// One architecture (one config under hf_configs/): a row of the matrix.
struct ArchRow {
  std::string id;  ///< org/model
  std::string file;
  std::string family;
  std::string model_type;
  size_t op_instances = 0;  ///< L1 ops of the forward pass + composite modules
  size_t tasks = 0;         ///< distinct tasks
  std::vector<std::string> kinds;      ///< kinds it needs, in kind order (level, then name)
  std::vector<std::string> exclusive;  ///< of those, the ones no other architecture needs
  /// Note [Collectives per step]: collective -> calls per forward step (sharded layouts; empty unsharded).
  std::map<std::string, int64_t> collectives;
};

/// One registered task kind: a column of the matrix.
struct KindRow {
  std::string kind;
  int level = 1;
  std::string class_name;          ///< the production module class the kind mirrors
  std::vector<std::string> archs;  ///< architectures that need it, sorted by id
  size_t op_instances = 0;         ///< over all architectures
  size_t tasks = 0;                ///< distinct tasks of this kind
};

/// Consolidation at one level (level 0: all levels together), Note [Coverage figures].
struct LevelFigures {
  int level = 0;
  size_t op_instances = 0;
  size_t tasks = 0;
  size_t kinds = 0;             ///< kinds used by some architecture
  size_t registered_kinds = 0;  ///< kinds of the registry (generator/kinds/*.json)
};

/// One greedy set-cover pick.
struct CoverPick {
  std::string arch;
  std::vector<std::string> new_kinds;  ///< kinds this pick covers first, in kind order
  size_t covered = 0;                  ///< kinds covered after this pick
};

struct Audit {
  std::vector<ArchRow> archs;          ///< sorted by id
  std::vector<KindRow> kinds;          ///< every registered kind, by level then name
  std::vector<LevelFigures> levels;    ///< levels 1..4
  LevelFigures total;                  ///< level 0
  size_t needed_kinds = 0;             ///< kinds some architecture needs (the set-cover universe)
  std::vector<CoverPick> cover;        ///< greedy order
  /// The matrix cell: how many distinct tasks of kinds[k] architecture archs[a] needs (0: none).
  std::vector<std::vector<size_t>> matrix;  ///< [arch][kind], same orders as archs and kinds
};

/// Builds the audit from a pipeline run that finished without errors.
Audit build(const Generation& g);

/// Kinds that `n` architectures share, most shared first (ties: level, then name); unused last.
std::vector<const KindRow*> by_sharing(const Audit& a);

/// The regeneration command written into docs/coverage.md's banner.
inline constexpr const char* kDocsCommand = "fastkernels audit --write-docs";
/// Where `--write-docs` writes (repository-relative).
inline constexpr const char* kDocsPath = "docs/coverage.md";

std::string render_terminal(const Audit& a);
/// docs/coverage.md: banner, figures, set cover, sharing, the matrix, per-architecture kinds.
std::string render_markdown(const Audit& a);
/// The model x operator matrix: header `config,family,model_type,<kind>...`, cells as in Audit::matrix.
std::string render_csv(const Audit& a);
/// Everything, as one JSON document (2-space indent, keys in a fixed order, trailing newline).
std::string render_json(const Audit& a);

}  // namespace fk::gen::coverage
