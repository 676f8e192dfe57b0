// fk_bench: checks generated tasks against their references and times them on the GPU.
//
//   fk_bench --list                       tasks, levels, kinds, architectures (no GPU needed)
//   fk_bench --dry-run [filters]          the task × case plan that would run (no GPU needed)
//   fk_bench [filters] --jsonl r.jsonl --markdown r.md
//   fk_bench --export-cases cases.json    selected tasks and cases as JSON (for the torch peers)
//   fk_launch --nproc 2 -- fk_bench --world-size 2 [filters]   the tasks of the tp2 layouts, one rank per GPU
//                                         (Note [Lockstep ranks] in runtime/src/runner.cc)
//
// Exit codes: 0 all selected cases passed; 1 a case failed (INCORRECT, SUSPECT, RUNTIME_ERROR);
// 2 usage error; 3 no CUDA device (for a run; --list and --dry-run work without one);
// 4 a case ran past --case-timeout; 5 the CUDA context was lost (4 and 5 end the run after
// writing that case's record: continue with --resume).
#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <iostream>
#include <regex>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fk/runtime/dist.h"
#include "fk/runtime/parallel_state.h"
#include "fk/runtime/runner.h"
#include "collectives_tool.h"

int main(int argc, char** argv) {
  // `fk_bench collectives --op ...`: the nccl-tests-style sweep of the collectives (the fk_collectives tool).
  if (argc > 1 && std::string(argv[1]) == "collectives") return fk_collectives_main(argc - 1, argv + 1);
  CLI::App app{"fk_bench: check and time FastKernels generated tasks against references and production baselines"};
  app.footer(
      "Exit codes: 0 all passed; 1 some case failed (INCORRECT/SUSPECT/RUNTIME_ERROR); 2 usage error; 3 no CUDA device;\n"
      "4 a case timed out (--case-timeout); 5 CUDA context lost. After 4 or 5 rerun with --resume to continue.\n"
      "`fk_bench collectives --op OP ...` runs the nccl-tests-style sweep of the collectives instead (as fk_collectives; "
      "`fk_bench collectives --help`).");
  fk::RunnerOptions opt;
  bool list = false, dry_run = false, no_time = false;
  std::string export_path;
  app.add_option("--arch", opt.arch_regex, "regex over the architectures (config ids) that use a task");
  app.add_option("--task", opt.task_regex, "regex over task names");
  app.add_option("--case", opt.case_regex, "regex over case names (e.g. '^t(1|4096)$')");
  app.add_option("--regime", opt.regime, "decode or prefill")->check(CLI::IsMember({"decode", "prefill"}));
  app.add_option("--level", opt.level, "task level 1..4 (0 = all)")->check(CLI::Range(0, 4));
  app.add_option("--rounds", opt.rounds, "correctness rounds with fresh inputs")->check(CLI::Range(1, 100));
  auto* seed_opt = app.add_option("--seed", opt.seed,
                                  "base seed for inputs, weights and the off-registry shapes (default: a new one every run, "
                                  "printed and recorded; give it to reproduce a run)");
  app.add_option("--off-registry", opt.off_registry,
                 "off-registry cases added per task and regime (odd/prime token counts, ragged batches, off-grid "
                 "lengths; Note [Off-registry shapes]); 0 = registry shapes only")
      ->check(CLI::Range(0, 16));
  app.add_option("--smallest", opt.smallest, "only each task's N smallest selected registry cases (e.g. a sanitizer sweep)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--max-length", opt.max_length,
                 "cap the lengths (num_tokens, seq_len, kv_len) of every selected case here; a capped case is named "
                 "<case>_cap<N> and counts as off-registry (sanitizer sweeps: Note [Capped cases])")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--jsonl", opt.jsonl_path, "write results as JSON lines here");
  app.add_option("--markdown", opt.markdown_path, "write a markdown table here");
  app.add_option("--max-iters", opt.timing.max_iters, "timed calls per case at most")->check(CLI::Range(1, 100000));
  app.add_option("--target-ms", opt.timing.target_ms, "stop timing a case after this much measured time");
  app.add_flag("--graph", opt.graph, "also time CUDA-graph replays for launch-bound cases (< 50 us)");
  app.add_flag("--cupti", opt.cupti,
               "record with CUPTI the kernels, copies and memsets of every checked and timed call: a timed call that "
               "ran other GPU work than every checked call, or event times shorter than the work, is SUSPECT "
               "(kernel-set, event-time)");
  app.add_flag("--no-time", no_time, "check correctness only");
  app.add_option("--case-timeout", opt.case_timeout_s,
                 "seconds a case may take (check + timing); past it the case is TIMEOUT and the process ends "
                 "with exit code 4 (rerun with --resume); 0 = no limit")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", opt.resume, "append to --jsonl, skipping the cases it already holds");
  app.add_option("--world-size", opt.world_size,
                 "ranks of a tensor-parallel job (one process per GPU, started by fk_launch --nproc N, torchrun or mpirun): "
                 "runs the tasks sharded for N ranks, every rank checking its output against the unsharded reference; "
                 "times are the slowest rank's; rank 0 writes the files")
      ->check(CLI::Range(1, 64));
  bool no_stream_check = false;
  app.add_flag("--no-stream-check", no_stream_check, "skip the gated call that detects work on other streams");
  app.add_flag("--list", list, "list tasks and exit");
  app.add_flag("--dry-run", dry_run, "print the selected task × case plan and exit");
  app.add_option("--export-cases", export_path, "write the selected tasks and cases as JSON and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : fk::kExitUsage;
  }
  opt.time = !no_time;
  if (seed_opt->count() == 0) {
    // --resume continues the recorded run: same seed, so the same off-registry cases.
    bool from_file = false;
    if (opt.resume && !opt.jsonl_path.empty()) {
      std::ifstream in(opt.jsonl_path);
      std::string line;
      while (!from_file && std::getline(in, line)) {
        try {
          const nlohmann::json r = nlohmann::json::parse(line);
          if (r.value("type", "") == "env" && r.contains("method") && r["method"].contains("seed")) {
            opt.seed = r["method"]["seed"].get<uint64_t>();
            from_file = true;
          }
        } catch (const std::exception&) {
        }
      }
    }
    if (!from_file) opt.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  opt.stream_check = !no_stream_check;
  if (opt.resume && opt.jsonl_path.empty()) {
    std::cerr << "fk_bench: --resume needs --jsonl (the file to continue)\n";
    return fk::kExitUsage;
  }
#ifdef FK_CANDIDATE_TASKS
  opt.candidate_tasks = FK_CANDIDATE_TASKS;
#endif
  {
    std::ostringstream cmd;
    for (int i = 0; i < argc; ++i) cmd << (i ? " " : "") << (i ? argv[i] : "fk_bench");
    opt.command = cmd.str();
  }
  try {
    for (const std::string* re : {&opt.arch_regex, &opt.task_regex, &opt.case_regex}) std::regex check(*re);
  } catch (const std::regex_error& e) {
    std::cerr << "fk_bench: invalid regular expression: " << e.what() << "\n";
    return fk::kExitUsage;
  }

  if (opt.world_size > 1 && (opt.resume || opt.cupti)) {
    std::cerr << "fk_bench: --world-size runs without --resume and --cupti\n";
    return fk::kExitUsage;
  }
  if (list) {
    const auto tasks = fk::all_tasks();
    std::cout << "level  kind                           cases  task  [architectures]\n";
    for (const fk::TaskInfo* t : tasks) {
      if (opt.level && t->level != opt.level) continue;
      if (!opt.task_regex.empty() && !std::regex_search(t->name, std::regex(opt.task_regex))) continue;
      std::cout << "L" << t->level << "     " << t->kind << std::string(t->kind.size() < 31 ? 31 - t->kind.size() : 1, ' ')
                << t->cases.size() << (t->cases.size() < 10 ? "      " : "     ") << t->name << "  [";
      for (size_t i = 0; i < t->archs.size(); ++i) std::cout << (i ? ", " : "") << t->archs[i];
      std::cout << "]\n";
    }
    std::cout << tasks.size() << " tasks\n";
    return fk::kExitOk;
  }
  const auto sel = fk::select_cases(opt);
  if (!export_path.empty()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : sel) {
      nlohmann::json dims = nlohmann::json::object();
      for (const auto& [k, v] : s.shape->dims) dims[k] = v;
      out.push_back({{"task", s.task->name}, {"kind", s.task->kind}, {"level", s.task->level},
                     {"case", s.shape->name}, {"regime", s.shape->regime}, {"dims", dims}});
    }
    std::ofstream f(export_path);
    if (!f) {
      std::cerr << "fk_bench: cannot write " << export_path << "\n";
      return fk::kExitUsage;
    }
    f << out.dump(1) << "\n";
    std::cout << "wrote " << sel.size() << " cases to " << export_path << "\n";
    return fk::kExitOk;
  }
  if (dry_run) {
    for (const auto& s : sel) {
      std::cout << "L" << s.task->level << " " << s.task->name << " " << s.shape->name << " (" << s.shape->regime << ":";
      for (const auto& [k, v] : s.shape->dims) std::cout << " " << k << "=" << v;
      std::cout << ")\n";
    }
    int off = 0;
    for (const auto& x : sel) off += x.off_registry;
    std::cout << sel.size() << " cases selected, " << off << " of them off-registry (seed " << opt.seed
              << "; dry run: nothing executed)\n";
    return fk::kExitOk;
  }
  std::unique_ptr<fk::dist::TcpStore> store;  // a job of several ranks (Note [Lockstep ranks])
  std::unique_ptr<fk::dist::GroupCoordinator> group;
  try {
    if (opt.world_size > 1) {
      const fk::dist::DistEnv env = fk::dist::dist_env();
      if (env.world_size != opt.world_size) {
        std::cerr << "fk_bench: --world-size " << opt.world_size << " needs " << opt.world_size
                  << " processes, one per GPU; this one is rank " << env.rank << " of " << env.world_size << " (launcher: " << env.launcher
                  << "): start it with fk_launch --nproc " << opt.world_size << " -- fk_bench ... (or torchrun / mpirun)\n";
        return fk::kExitUsage;
      }
      store = std::make_unique<fk::dist::TcpStore>(env, std::chrono::seconds(300));
      group = std::make_unique<fk::dist::GroupCoordinator>(*store, std::chrono::seconds(120));
      fk::dist::set_tp_group(group.get());
      opt.rank = env.rank;
      // Every rank runs rank 0's seed (the same cases, weights and inputs).
      if (env.rank == 0) store->set("fk_bench/seed", std::to_string(opt.seed));
      opt.seed = std::stoull(store->get("fk_bench/seed"));
      auto round = std::make_shared<uint64_t>(0);
      fk::dist::TcpStore* st = store.get();
      opt.all_ranks = [st, round](const std::string& v) { return st->all_gather("fk_bench/r" + std::to_string((*round)++), v); };
    }
    return fk::run_benchmark(opt, std::cerr);  // the group's destructor uninstalls it
  } catch (const std::exception& e) {
    std::cerr << "fk_bench: " << e.what() << "\n";
    return fk::kExitFailed;
  }
}
