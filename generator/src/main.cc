// `fastkernels`: the generator's command line (parse, list, add, generate, scaffold, check, compare, audit).
// This file only wires options to the verbs (generator/src/verbs/, one thin file each over
// fk_generator_lib, whose passes sit in generator/src/passes/ and tools in generator/src/tools/).
#include <algorithm>
#include <iostream>
#include <set>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "fk/gen/kinds.h"
#include "verbs/verbs.h"

namespace fs = std::filesystem;
using namespace fk::gen;
using namespace fk::gen::verbs;

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
  add->add_option("--dtype", add_choices.dtype,
                  "serve the checkpoint in this dtype instead of its torch_dtype (a float32 checkpoint is refused "
                  "without it); recorded likewise")
      ->check(CLI::IsMember({"bfloat16", "float16"}));
  add->add_option("--as", add_choices.served_as,
                  "lower a config whose model_type no descriptor claims as this known model_type (its forward pass "
                  "must be that type's: check it with bench/parity/hf_parity.py); recorded likewise");
  add->add_option("--pooling", add_choices.pooling,
                  "embedding models: pool each sequence's final hidden states this way (vLLM's PoolerConfig "
                  "pooling_type) instead of the checkpoint's own pooler; recorded likewise")
      ->check(CLI::IsMember({"cls", "mean", "last"}));
  add->add_flag("--normalize", add_choices.normalize, "with --pooling: L2-normalise the pooled vectors (vLLM's normalize)");
  add->add_option("--image-size", add_choices.image_size,
                  "vision encoders: serve images of this many pixels square instead of the config's image_size; the "
                  "position embeddings are interpolated (bicubic) from the checkpoint's grid, as HF's "
                  "interpolate_pos_encoding; recorded likewise")
      ->check(CLI::Range(int64_t{1}, int64_t{8192}));
  add->add_option("--multi-vector", add_choices.multi_vector,
                  "embedding models: also return one L2-normalised vector of this width per token (ColBERT's and BGE-M3's "
                  "multi-vector output: a linear projection, vLLM's token_embed pooler); recorded likewise")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  add->add_flag("--sparse", add_choices.sparse,
                "embedding models: also return each token's lexical weight relu(linear(hidden, 1)) (BGE-M3's sparse output, "
                "vLLM's token_classify pooler); recorded likewise");
  add->add_flag("--head-bias", add_choices.head_bias,
                "with --multi-vector / --sparse: the heads' linears carry a bias (BGE-M3's; ColBERT's projection has none)");
  add->add_option("--component", add_choices.component,
                  "lower a nested component of a composite config instead of the whole (e.g. vision_config: a vision-language "
                  "checkpoint's vision tower, as transformers builds SiglipVisionModel from SiglipConfig.vision_config); "
                  "recorded likewise")
      ->check(CLI::Validator(
          [](std::string& s) { return is_component_key(s) ? std::string() : "expected the key of a nested config, e.g. vision_config"; },
          "KEY_config"));
  add->add_flag("--drop-special-tokens", add_choices.drop_special_tokens,
                "with --multi-vector / --sparse: the token vectors skip each sequence's first token and the sparse weights its "
                "first and last (BOS/EOS), as vLLM's BgeM3EmbeddingModel and FlagEmbedding do");
  std::vector<std::string> add_layouts;
  add->add_option("--parallel", add_layouts,
                  "decoder LLMs: also generate the tasks of these tensor- / expert-parallel layouts (tp2, tp4, ep2, tp2_ep2, ...; "
                  "Note [Parallel layouts]): per-rank constants inlined, one model per layout (<org>/<model>@tp2); recorded likewise")
      ->expected(1, -1)
      ->delimiter(',');
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
    if (add_choices.normalize && add_choices.pooling.empty()) {
      std::cerr << "fastkernels add: --normalize applies to a pooling choice: pass --pooling cls|mean|last\n";
      return kUsage;
    }
    if ((add_choices.head_bias || add_choices.drop_special_tokens) && add_choices.multi_vector == 0 && !add_choices.sparse) {
      std::cerr << "fastkernels add: --head-bias and --drop-special-tokens apply to the token heads: pass --multi-vector N and/or --sparse\n";
      return kUsage;
    }
    std::set<ParallelLayout> layouts;
    for (const std::string& l : add_layouts) {
      const auto layout = parse_layout(l);
      if (!layout || !layout->sharded() || (layout->tp > 1 && layout->ep > 1 && layout->tp != layout->ep)) {
        std::cerr << "fastkernels add: --parallel " << l
                  << ": expected a layout such as tp2, tp8, ep2 or tp2_ep2 (sizes 2 to 64; tp and ep equal when both are given)\n";
        return kUsage;
      }
      layouts.insert(*layout);
    }
    add_choices.parallel.assign(layouts.begin(), layouts.end());
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

