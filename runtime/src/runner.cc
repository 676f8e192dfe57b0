// The benchmark runner (see runner.h and Note [Task protocol] in task.h).
#include "fk/runtime/runner.h"

#include <chrono>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fk/runtime/check.h"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/env.h"
#include "fk/runtime/random.h"

namespace fk {

namespace {

using json = nlohmann::json;

bool matches(const std::string& re, const std::string& s) {
  return re.empty() || std::regex_search(s, std::regex(re));
}

std::string today_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

struct CaseOutcome {
  std::string status;  // PASSED, INCORRECT, RUNTIME_ERROR, SKIPPED
  std::string message;
  json record;
};

std::string fmt(double v, int prec = 2) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

/// Runs the correctness protocol; returns "" when it passed, else the failure message.
std::string check_case(TaskInstance& inst, const RunnerOptions& opt, uint64_t case_seed, json& check_json) {
  cudaStream_t s = current_stream();
  json outputs = json::array();
  bool inputs_ok = true;
  std::string failure;
  set_poison_allocations(true);
  try {
    for (int round = 0; round < opt.rounds && failure.empty(); ++round) {
      inst.randomize(mix_seed(case_seed, round));
      // Every set is checked in the first round; later rounds check one set each (fresh inputs).
      const int first = round == 0 ? 0 : round % inst.num_sets();
      const int last = round == 0 ? inst.num_sets() : first + 1;
      for (int set = first; set < last && failure.empty(); ++set) {
        inst.prepare(set);
        std::vector<uint64_t> before;
        for (const Tensor& t : inst.inputs(set)) before.push_back(fingerprint(t));
        inst.run(set);
        FK_CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<CheckedOutput> outs = inst.reference(set);
        FK_CUDA_CHECK(cudaStreamSynchronize(s));
        for (const CheckedOutput& o : outs) {
          const CompareResult r = compare(o.actual, o.expected, o.tol);
          if (round == 0 && set == 0 || !r.passed) {
            outputs.push_back({{"name", o.name}, {"round", round}, {"set", set}, {"passed", r.passed},
                               {"max_abs_err", r.max_abs_err}, {"rel_l2", r.rel_l2}, {"mismatches", r.mismatches},
                               {"nonfinite", r.nonfinite}, {"numel", r.numel}});
          }
          if (!r.passed)
            failure = "output '" + o.name + "' round " + std::to_string(round) + " set " + std::to_string(set) + ": " +
                      r.summary();
        }
        std::vector<Tensor> ins = inst.inputs(set);
        for (size_t i = 0; i < ins.size() && failure.empty(); ++i) {
          if (fingerprint(ins[i]) != before[i]) {
            inputs_ok = false;
            failure = "input " + std::to_string(i) + " (" + ins[i].str() + ") was modified by forward";
          }
        }
      }
    }
  } catch (...) {
    set_poison_allocations(false);
    throw;
  }
  set_poison_allocations(false);
  check_json = {{"rounds", opt.rounds}, {"outputs", outputs}, {"inputs_unmutated", inputs_ok}};
  return failure;
}

CaseOutcome run_case(const TaskInfo& task, const ShapeCase& shape, const RunnerOptions& opt, L2Flusher& flusher,
                     double copy_tbps, double peak_tflops) {
  CaseOutcome out;
  json& rec = out.record;
  rec = {{"type", "case"}, {"task", task.name}, {"level", task.level}, {"kind", task.kind},
         {"production", task.production}, {"archs", task.archs}, {"case", shape.name}, {"regime", shape.regime}};
  json dims = json::object();
  for (const auto& [k, v] : shape.dims) dims[k] = v;
  rec["dims"] = dims;
  TaskScope scope(task.name + "/" + shape.name);
  cudaStream_t s = current_stream();
  try {
    std::unique_ptr<TaskInstance> inst;
    try {
      inst = task.make(shape);
    } catch (const SkipCase& e) {
      out.status = "SKIPPED";
      out.message = e.what();
      rec["status"] = out.status;
      rec["message"] = out.message;
      return out;
    }
    const uint64_t case_seed = mix_seed(opt.seed, std::hash<std::string>{}(task.name + "/" + shape.name));
    json check;
    const std::string failure = check_case(*inst, opt, case_seed, check);
    rec["check"] = check;
    if (!failure.empty()) {
      out.status = "INCORRECT";
      out.message = failure;
    } else {
      out.status = "PASSED";
    }
    const Cost cost = inst->cost();
    rec["flops"] = cost.flops;
    rec["bytes"] = cost.bytes;
    if (opt.time && out.status == "PASSED") {
      const int nsets = inst->num_sets();
      const TimingResult t = time_calls([&](int i) { inst->run(i % nsets); }, s, flusher, opt.timing);
      rec["time_us"] = {{"median", t.median_us}, {"min", t.min_us}, {"max", t.max_us}, {"iters", t.iters}};
      const double sec = t.median_us * 1e-6;
      const double tbps = cost.bytes / sec / 1e12, tflops = cost.flops / sec / 1e12;
      rec["tbps"] = tbps;
      rec["tflops"] = tflops;
      if (task.memory_bound) {
        rec["pct_copy_bw"] = 100.0 * tbps / copy_tbps;
      } else {
        rec["pct_matrix_peak"] = 100.0 * tflops / peak_tflops;
      }
      if (!inst->peer_name().empty()) {
        const TimingResult p = time_calls([&](int i) { inst->run_peer(i % nsets); }, s, flusher, opt.timing);
        rec["peer"] = {{"name", inst->peer_name()}, {"median_us", p.median_us}, {"min_us", p.min_us},
                       {"speedup", p.median_us / t.median_us}};
      }
      if (opt.graph && t.median_us < opt.graph_below_us) {
        try {
          const TimingResult g = time_graph([&](int i) { inst->run(i % nsets); }, s, 20, 10);
          rec["graph_us"] = {{"median", g.median_us}, {"min", g.min_us}, {"max", g.max_us}};
        } catch (const std::exception& e) {
          rec["graph_us"] = {{"error", e.what()}};
        }
      }
    }
    inst.reset();
    FK_CUDA_CHECK(cudaStreamSynchronize(s));
    release_cached_memory();
  } catch (const std::exception& e) {
    out.status = "RUNTIME_ERROR";
    out.message = e.what();
    cudaGetLastError();
    cudaStreamSynchronize(s);
    cudaGetLastError();
    release_cached_memory();
  }
  rec["status"] = out.status;
  if (!out.message.empty()) rec["message"] = out.message;
  return out;
}

std::string perf_cell(const json& r) {
  if (!r.contains("time_us")) return "";
  if (r.contains("pct_copy_bw")) return fmt(r["tbps"].get<double>(), 3) + " TB/s (" + fmt(r["pct_copy_bw"].get<double>(), 1) + "% copy)";
  return fmt(r["tflops"].get<double>(), 1) + " TFLOP/s (" + fmt(r["pct_matrix_peak"].get<double>(), 1) + "% peak)";
}

}  // namespace

CheckOutcome check_instance(TaskInstance& inst, int rounds, uint64_t seed) {
  RunnerOptions opt;
  opt.rounds = rounds;
  opt.time = false;
  try {
    json check;
    const std::string failure = check_case(inst, opt, seed, check);
    FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    if (!failure.empty()) return {"INCORRECT", failure};
    return {"PASSED", ""};
  } catch (const std::exception& e) {
    cudaGetLastError();
    return {"RUNTIME_ERROR", e.what()};
  }
}

CheckOutcome check_task_case(const TaskInfo& task, const ShapeCase& shape, int rounds, uint64_t seed) {
  TaskScope scope(task.name + "/" + shape.name);
  std::unique_ptr<TaskInstance> inst;
  try {
    inst = task.make(shape);
  } catch (const SkipCase& e) {
    return {"SKIPPED", e.what()};
  } catch (const std::exception& e) {
    cudaGetLastError();
    return {"RUNTIME_ERROR", e.what()};
  }
  CheckOutcome out = check_instance(*inst, rounds, mix_seed(seed, std::hash<std::string>{}(task.name + "/" + shape.name)));
  inst.reset();
  cudaStreamSynchronize(current_stream());
  release_cached_memory();
  return out;
}

std::vector<Selection> select_cases(const RunnerOptions& opt) {
  std::vector<Selection> out;
  for (const TaskInfo* t : all_tasks()) {
    if (opt.level && t->level != opt.level) continue;
    if (!matches(opt.task_regex, t->name)) continue;
    if (!opt.arch_regex.empty()) {
      bool any = false;
      for (const auto& a : t->archs) any = any || matches(opt.arch_regex, a);
      if (!any) continue;
    }
    for (const ShapeCase& c : t->cases) {
      if (!opt.regime.empty() && c.regime != opt.regime) continue;
      if (!matches(opt.case_regex, c.name)) continue;
      out.push_back({t, &c});
    }
  }
  return out;
}

int run_benchmark(const RunnerOptions& opt, std::ostream& log) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    log << "fk_bench: no CUDA device found; nothing was run (use --list or --dry-run on this machine)\n";
    return kExitNoGpu;
  }
  const std::vector<Selection> sel = select_cases(opt);
  cudaStream_t stream;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  StreamGuard guard(stream);

  std::ofstream jsonl;
  if (!opt.jsonl_path.empty()) {
    jsonl.open(opt.jsonl_path);
    if (!jsonl) {
      log << "fk_bench: cannot write " << opt.jsonl_path << "\n";
      return kExitUsage;
    }
  }
  L2Flusher flusher;
  const ClockReading clk0 = read_clocks(0);
  const double copy_tbps = measure_copy_tbps(stream);
  json env = environment_json(0);
  env["type"] = "env";
  env["date"] = today_utc();
  env["command"] = opt.command;
  env["copy_tbps"] = copy_tbps;
  // bf16 dense tensor peak used for % of matrix peak (H100/H200 SXM datasheet: 989 TFLOP/s).
  const double peak_tflops = 989.0;
  env["matrix_peak_tflops"] = peak_tflops;
  env["method"] = {{"rounds", opt.rounds},
                   {"seed", opt.seed},
                   {"l2_flush_bytes", flusher.bytes()},
                   {"warmup", opt.timing.warmup},
                   {"min_iters", opt.timing.min_iters},
                   {"max_iters", opt.timing.max_iters},
                   {"target_ms", opt.timing.target_ms},
                   {"statistic", "median of CUDA-event times, cold L2, rotating input sets"}};
  env["clocks_before"] = {{"sm_mhz", clk0.sm_mhz}, {"mem_mhz", clk0.mem_mhz}};
  if (jsonl) jsonl << env.dump() << "\n" << std::flush;
  log << "fk_bench: " << env["gpu"].get<std::string>() << ", copy bandwidth " << fmt(copy_tbps, 3) << " TB/s, "
      << sel.size() << " cases\n";

  int passed = 0, failed = 0, skipped = 0;
  std::vector<json> records;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < sel.size(); ++i) {
    const TaskInfo& task = *sel[i].task;
    const ShapeCase& shape = *sel[i].shape;
    CaseOutcome o = run_case(task, shape, opt, flusher, copy_tbps, peak_tflops);
    if (o.status == "PASSED") ++passed;
    else if (o.status == "SKIPPED") ++skipped;
    else ++failed;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log << "[" << (i + 1) << "/" << sel.size() << " " << fmt(elapsed, 0) << "s] " << task.name << " " << shape.name << " "
        << o.status;
    if (o.record.contains("time_us")) log << " " << fmt(o.record["time_us"]["median"].get<double>(), 2) << " us " << perf_cell(o.record);
    if (o.record.contains("peer")) log << " | " << o.record["peer"]["name"].get<std::string>() << " x" << fmt(o.record["peer"]["speedup"].get<double>(), 3);
    if (!o.message.empty()) log << " -- " << o.message;
    log << "\n" << std::flush;
    if (jsonl) jsonl << o.record.dump() << "\n" << std::flush;
    records.push_back(std::move(o.record));
  }
  const ClockReading clk1 = read_clocks(0);
  json summary = {{"type", "summary"}, {"passed", passed}, {"failed", failed}, {"skipped", skipped},
                  {"clocks_after", {{"sm_mhz", clk1.sm_mhz}, {"mem_mhz", clk1.mem_mhz}}}};
  if (jsonl) jsonl << summary.dump() << "\n";

  if (!opt.markdown_path.empty()) {
    std::ofstream md(opt.markdown_path);
    md << "# fk_bench results\n\n";
    md << "- device: " << env["gpu"].get<std::string>() << " (driver " << env.value("driver_version", std::string("?"))
       << ", CUDA runtime " << env["cuda_runtime"] << ")\n";
    md << "- date: " << env["date"].get<std::string>() << ", commit " << env["commit"].get<std::string>() << "\n";
    md << "- command: `" << opt.command << "`\n";
    md << "- device-to-device copy: " << fmt(copy_tbps, 3) << " TB/s (read + write)\n";
    md << "- method: " << env["method"]["statistic"].get<std::string>() << ", " << opt.rounds
       << " correctness rounds with fresh inputs\n\n";
    md << "| task | case | status | median us | min us | max us | throughput | peer |\n|---|---|---|---:|---:|---:|---|---|\n";
    for (const json& r : records) {
      md << "| " << r["task"].get<std::string>() << " | " << r["case"].get<std::string>() << " | "
         << r["status"].get<std::string>() << " | ";
      if (r.contains("time_us")) {
        md << fmt(r["time_us"]["median"].get<double>()) << " | " << fmt(r["time_us"]["min"].get<double>()) << " | "
           << fmt(r["time_us"]["max"].get<double>()) << " | " << perf_cell(r) << " | ";
      } else {
        md << " | | | " << r.value("message", std::string()) << " | ";
      }
      if (r.contains("peer"))
        md << r["peer"]["name"].get<std::string>() << " " << fmt(r["peer"]["median_us"].get<double>()) << " us (x"
           << fmt(r["peer"]["speedup"].get<double>(), 3) << ")";
      md << " |\n";
    }
    md << "\n" << passed << " passed, " << failed << " failed";
    if (skipped) md << ", " << skipped << " skipped";
    md << "\n";
  }
  log << passed << " passed, " << failed << " failed";
  if (skipped) log << ", " << skipped << " skipped";
  log << "\n";
  FK_CUDA_CHECK(cudaStreamSynchronize(stream));
  return failed ? kExitFailed : kExitOk;
}

}  // namespace fk
