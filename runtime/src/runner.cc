// The benchmark runner (see runner.h and Note [Task protocol] in task.h).
#include "fk/runtime/runner.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
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
  std::string status;  // PASSED, INCORRECT, RUNTIME_ERROR, SUSPECT, TIMEOUT, SKIPPED
  std::string reason;  // machine-readable cause when not PASSED (see runner.h)
  std::string message;
  json record;
};

std::string fmt(double v, int prec = 2) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

/// A failed check: `reason` is one of the categories listed in runner.h.
struct Failure {
  std::string status, reason, message;
  bool failed() const { return !status.empty(); }
};

// Note [Stream gate]
// A task must do all its GPU work on fk::current_stream(). To check that, one checked call runs
// with the stream held back: a gate kernel is put on the stream first, so nothing the call
// enqueues there can start until the runner opens the gate. Meanwhile every byte the call could
// write is watched: the tensors that existed before the call (fingerprinted beforehand) and the
// tensors it allocates (the allocator's poison and guard fills run synchronously on a private
// stream during the call, so they land before the gate opens). If any of that memory changes
// while the gate is still closed, the call did work elsewhere (another stream, the legacy
// default stream, a host copy): SUSPECT, reason foreign-stream. A call that waits for the GPU
// from the host (a synchronisation inside forward) would wait for the gate forever, so a host
// thread opens it after kGateHostWait; the check is then inconclusive and says so in the record.
// The gate kernel also gives up on its own after a few seconds, so nothing can hang on it. While
// the gate is closed the runner allocates nothing (ByteProbe): a stream-ordered allocation may
// wait for the whole device, and so for the gate (seen on H100: a 10 s stall and a false alarm);
// the gate and probe kernels are loaded before the gate closes (lazy module loading). Blocks
// freed during the gated call are held back from reuse, so the call holds every activation it
// allocates at once; where that runs out of memory (a whole model at a long prefill), the check
// is inconclusive, says so, and the call is repeated ungated for the output checks.
constexpr auto kGateHostWait = std::chrono::milliseconds(3000);
constexpr double kGateDeviceWait = 6.0;  // seconds; the gate kernel's own limit
constexpr auto kGateSettle = std::chrono::milliseconds(20);

Failure gated_run(TaskInstance& inst, int set, json& info) {
  cudaStream_t s = current_stream();
  cudaStream_t side;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  struct SideGuard {
    cudaStream_t side;
    ~SideGuard() { cudaStreamDestroy(side); }
  } side_guard{side};
  inst.prepare(set);
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  ByteProbe probe;  // allocates nothing once made (a stream-ordered allocation may wait for the gate)
  std::map<unsigned long long, uint64_t> before;
  for (const LiveAllocation& a : live_guarded_allocations()) before[a.serial] = probe.hash(a.data, a.bytes, side);
  StreamGate gate;
  gate.close(s, kGateDeviceWait);
  std::mutex mu;
  std::condition_variable cv;
  bool returned = false, forced_open = false;
  std::thread opener([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, kGateHostWait, [&] { return returned; })) {
      forced_open = true;
      gate.open();
    }
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      returned = true;
    }
    cv.notify_all();
    opener.join();
    set_allocator_side_fills(false);
  };
  set_allocator_side_fills(true);
  take_deferred_oom();
  try {
    inst.run(set);
  } catch (const std::exception& e) {
    finish();
    gate.open();
    if (!take_deferred_oom()) throw;
    // Held-back blocks made the call run out of memory (a whole model's activations at a long
    // prefill): the check cannot run here; the call is repeated ungated for the output checks.
    cudaGetLastError();
    FK_CUDA_CHECK(cudaStreamSynchronize(s));
    info = {{"result", "inconclusive"},
            {"detail", std::string("out of memory with freed blocks held back during the gated call (") + e.what() +
                           "); the call was repeated without the gate"}};
    inst.prepare(set);
    inst.run(set);
    return {};
  } catch (...) {
    finish();
    gate.open();
    throw;
  }
  finish();
  if (forced_open) {
    info = {{"result", "inconclusive"},
            {"detail", "forward did not return while its stream was held back (it waits for the GPU from the host)"}};
    FK_CUDA_CHECK(cudaStreamSynchronize(s));
    return {};
  }
  std::this_thread::sleep_for(kGateSettle);
  std::vector<std::string> changed;
  int64_t watched = 0;
  for (const LiveAllocation& a : live_guarded_allocations()) {
    ++watched;
    const auto it = before.find(a.serial);
    const bool moved = it == before.end() ? probe.count_not(a.data, a.bytes, 0xFF, side) != 0  // still poison?
                                          : probe.hash(a.data, a.bytes, side) != it->second;
    if (moved) changed.push_back(std::to_string(a.bytes) + "-byte tensor #" + std::to_string(a.serial) +
                                 (it == before.end() ? " (allocated by the call)" : ""));
  }
  gate.open();
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  info = {{"result", changed.empty() ? "ok" : "foreign-stream"}, {"watched_tensors", watched}};
  if (changed.empty()) return {};
  std::string what = changed.front();
  if (changed.size() > 1) what += " and " + std::to_string(changed.size() - 1) + " more";
  return {"SUSPECT", "foreign-stream",
          "forward changed memory while its stream (fk::current_stream()) was held back: work on another stream (" +
              what + ")"};
}

/// Checks set `set` after inst.run(set) (or a gated run): inputs unmutated (fingerprints
/// `before`), outputs against the reference, then the guards. `fresh_after_pass`: an earlier
/// check of this instance passed, so a mismatch now means stale outputs.
Failure check_outputs(TaskInstance& inst, int set, int round, const std::vector<uint64_t>& before, bool fresh_after_pass,
                      json& outputs) {
  cudaStream_t s = current_stream();
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  // Inputs first: the reference is computed from them, so a mutated input also spoils it.
  std::vector<Tensor> ins = inst.inputs(set);
  for (size_t i = 0; i < ins.size(); ++i) {
    if (fingerprint(ins[i]) != before[i])
      return {"INCORRECT", "input-mutated", "input " + std::to_string(i) + " (" + ins[i].str() + ") was modified by forward"};
  }
  std::vector<CheckedOutput> outs = inst.reference(set);
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  Failure f;
  for (const CheckedOutput& o : outs) {
    const CompareResult r = compare(o.actual, o.expected, o.tol);
    if (outputs.empty() || !r.passed) {
      outputs.push_back({{"name", o.name}, {"round", round}, {"set", set}, {"passed", r.passed},
                         {"max_abs_err", r.max_abs_err}, {"rel_l2", r.rel_l2}, {"mismatches", r.mismatches},
                         {"nonfinite", r.nonfinite}, {"numel", r.numel}});
    }
    if (!r.passed && !f.failed()) {
      std::string reason = r.nonfinite ? "nonfinite" : (fresh_after_pass ? "stale-output" : "mismatch");
      std::string msg = "output '" + o.name + "' round " + std::to_string(round) + " set " + std::to_string(set) + ": " +
                        r.summary();
      if (reason == "stale-output") msg += " (it passed before; on fresh inputs in the same buffers it does not: outputs cached across calls?)";
      f = {"INCORRECT", reason, msg};
    }
  }
  if (f.failed()) return f;
  const std::string oob = check_guards();
  if (!oob.empty()) return {"INCORRECT", "oob-write", oob};
  return {};
}

/// The correctness protocol (Note [Task protocol]) with the checks of candidates: poisoned fresh
/// allocations, fresh inputs every round, inputs unmutated, guard regions, and one gated call
/// (Note [Stream gate]). `first_round` > 0 re-checks after timing (one set, fresh inputs).
Failure check_case(TaskInstance& inst, int rounds, uint64_t case_seed, bool stream_check, int first_round,
                   json& check_json) {
  json outputs = json::array();
  json gate_info;
  Failure f;
  struct Modes {  // poisoned, guarded allocations while checking; off again on any exit
    Modes() {
      set_poison_allocations(true);
      set_guard_allocations(true);
    }
    ~Modes() {
      set_poison_allocations(false);
      set_guard_allocations(false);
      set_allocator_side_fills(false);
    }
  } modes;
  auto snapshot = [&](int set) {
    std::vector<uint64_t> v;
    for (const Tensor& t : inst.inputs(set)) v.push_back(fingerprint(t));
    return v;
  };
  for (int round = first_round; round < first_round + rounds && !f.failed(); ++round) {
    inst.randomize(mix_seed(case_seed, round));
    // Every set is checked in the first round; later rounds check one set each (fresh inputs).
    const int first = round == 0 ? 0 : round % inst.num_sets();
    const int last = round == 0 ? inst.num_sets() : first + 1;
    for (int set = first; set < last && !f.failed(); ++set) {
      inst.prepare(set);
      const std::vector<uint64_t> before = snapshot(set);
      inst.run(set);
      f = check_outputs(inst, set, round, before, round > 0, outputs);
    }
    if (round == 0 && stream_check && !f.failed()) {
      const std::vector<uint64_t> before = snapshot(0);
      f = gated_run(inst, 0, gate_info);
      if (!f.failed()) f = check_outputs(inst, 0, round, before, false, outputs);
    }
  }
  check_json = {{"rounds", rounds}, {"outputs", outputs}, {"inputs_unmutated", f.reason != "input-mutated"},
                {"guards_intact", f.reason != "oob-write"}};
  if (!gate_info.is_null()) check_json["stream_check"] = gate_info;
  return f;
}

/// Hardware limits for the SUSPECT check: DRAM bandwidth from the memory clock and bus width
/// (H100 SXM: 2619 MHz x 5120 bit x 2 = 3.35 TB/s) and the dense bf16 tensor peak.
struct Limits {
  double tbps = 0, tflops = 0;
};

Limits hardware_limits(double peak_tflops) {
  int mem_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return {2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e12, peak_tflops};
}

// Note [Case watchdog]
// A kernel that never finishes cannot be stopped inside the process, so the runner arms a
// watchdog around every case: past the time limit it appends a TIMEOUT record for the case to
// the JSON lines (the line the main thread would have written) and ends the process with
// kExitTimeout. The GPU context dies with the process, which stops the kernel. A driver
// (scripts/bench_candidates.py) reruns fk_bench with --resume to go on after that case.
class Watchdog {
 public:
  Watchdog(double seconds, std::ofstream* jsonl, std::mutex* io_mu) : seconds_(seconds), jsonl_(jsonl), io_mu_(io_mu) {
    if (seconds_ > 0) thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void arm(json record) {
    std::lock_guard<std::mutex> lock(mu_);
    record_ = std::move(record);
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(seconds_));
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        record_["status"] = "TIMEOUT";
        record_["reason"] = "timeout";
        record_["message"] = "the case ran past the time limit of " + fmt(seconds_, 0) + " s (--case-timeout); the process was ended";
        std::lock_guard<std::mutex> io(*io_mu_);
        if (jsonl_ && *jsonl_) *jsonl_ << record_.dump() << "\n" << std::flush;
        std::cerr << record_["task"].get<std::string>() << " " << record_["case"].get<std::string>() << " TIMEOUT -- "
                  << record_["message"].get<std::string>() << std::endl;
        std::_Exit(kExitTimeout);
      }
    }
  }
  double seconds_;
  std::ofstream* jsonl_;
  std::mutex* io_mu_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  json record_;
  std::chrono::steady_clock::time_point deadline_;
};

json case_header(const TaskInfo& task, const ShapeCase& shape) {
  json rec = {{"type", "case"}, {"task", task.name}, {"level", task.level}, {"kind", task.kind},
              {"production", task.production}, {"archs", task.archs}, {"case", shape.name}, {"regime", shape.regime}};
  json dims = json::object();
  for (const auto& [k, v] : shape.dims) dims[k] = v;
  rec["dims"] = dims;
  return rec;
}

/// True when the CUDA context is unusable (a sticky error such as an illegal address).
bool context_lost() {
  cudaGetLastError();
  if (cudaDeviceSynchronize() == cudaSuccess) return false;
  cudaGetLastError();
  return cudaDeviceSynchronize() != cudaSuccess;
}

CaseOutcome run_case(const TaskInfo& task, const ShapeCase& shape, const RunnerOptions& opt, L2Flusher& flusher,
                     double copy_tbps, double peak_tflops, const Limits& limits) {
  CaseOutcome out;
  json& rec = out.record;
  rec = case_header(task, shape);
  TaskScope scope(task.name + "/" + shape.name);
  cudaStream_t s = current_stream();
  auto fail = [&](const Failure& f) {
    out.status = f.status;
    out.reason = f.reason;
    out.message = f.message;
  };
  try {
    std::unique_ptr<TaskInstance> inst;
    try {
      set_guard_allocations(true);  // the instance's own tensors are guarded too
      inst = task.make(shape);
      set_guard_allocations(false);
    } catch (const SkipCase& e) {
      set_guard_allocations(false);
      out.status = "SKIPPED";
      out.message = e.what();
      rec["status"] = out.status;
      rec["message"] = out.message;
      return out;
    }
    const uint64_t case_seed = mix_seed(opt.seed, std::hash<std::string>{}(task.name + "/" + shape.name));
    json check;
    const Failure failure = check_case(*inst, opt.rounds, case_seed, opt.stream_check, 0, check);
    rec["check"] = check;
    if (failure.failed()) fail(failure);
    else out.status = "PASSED";
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
      // A result faster than the hardware allows (the task's own minimum bytes and FLOPs over
      // DRAM bandwidth and tensor peak; L2 is flushed before every timed call) was not computed
      // by the timed work on this stream.
      if (tbps > limits.tbps || tflops > limits.tflops) {
        fail({"SUSPECT", "beyond-hardware-limit",
              "median " + fmt(t.median_us, 2) + " us means " + fmt(tbps, 2) + " TB/s and " + fmt(tflops, 1) +
                  " TFLOP/s from the task's minimum bytes/FLOPs, beyond this GPU's " + fmt(limits.tbps, 2) + " TB/s DRAM / " +
                  fmt(limits.tflops, 0) + " TFLOP/s peak"});
      }
      // Re-check once after timing, on fresh inputs: outputs must still be computed, not replayed.
      if (out.status == "PASSED") {
        json recheck;
        const Failure again = check_case(*inst, 1, case_seed, false, std::max(opt.rounds, 1), recheck);
        rec["recheck_after_timing"] = recheck;
        if (again.failed()) {
          fail(again);
          out.message = "after timing: " + out.message;
        }
      }
    }
    inst.reset();
    FK_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::string late = check_guards();  // tensors freed with the instance
    if (!late.empty() && out.status == "PASSED") fail({"INCORRECT", "oob-write", late});
    release_cached_memory();
  } catch (const std::exception& e) {
    set_guard_allocations(false);
    out.status = "RUNTIME_ERROR";
    out.reason = "error";
    out.message = e.what();
    if (context_lost()) {
      out.reason = "context-lost";
      out.message += " (the CUDA context is unusable; the process ends after this case)";
    } else {
      cudaStreamSynchronize(s);
      cudaGetLastError();
      release_cached_memory();
    }
  }
  rec["status"] = out.status;
  if (!out.reason.empty()) rec["reason"] = out.reason;
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
  try {
    json check;
    const Failure failure = check_case(inst, rounds, seed, /*stream_check=*/true, 0, check);
    FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    if (failure.failed()) return {failure.status, failure.message, failure.reason};
    return {"PASSED", "", ""};
  } catch (const std::exception& e) {
    cudaGetLastError();
    return {"RUNTIME_ERROR", e.what(), "error"};
  }
}

CheckOutcome check_task_case(const TaskInfo& task, const ShapeCase& shape, int rounds, uint64_t seed) {
  TaskScope scope(task.name + "/" + shape.name);
  std::unique_ptr<TaskInstance> inst;
  try {
    set_guard_allocations(true);
    inst = task.make(shape);
    set_guard_allocations(false);
  } catch (const SkipCase& e) {
    set_guard_allocations(false);
    return {"SKIPPED", e.what(), ""};
  } catch (const std::exception& e) {
    set_guard_allocations(false);
    cudaGetLastError();
    return {"RUNTIME_ERROR", e.what(), "error"};
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

  // --resume: the records already written (an earlier process ended at a TIMEOUT or a lost
  // context) are kept; the run goes on after them.
  std::vector<json> records;
  bool have_env = false;
  if (opt.resume && !opt.jsonl_path.empty()) {
    std::ifstream in(opt.jsonl_path);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      json r;
      try {
        r = json::parse(line);
      } catch (const json::parse_error& e) {
        log << "fk_bench: --resume: " << opt.jsonl_path << ":" << lineno << ": not a JSON line (" << e.what() << ")\n";
        return kExitUsage;
      }
      const std::string type = r.value("type", "");
      if (type == "env") have_env = true;
      if (type == "case") records.push_back(std::move(r));
    }
    if (records.size() > sel.size()) {
      log << "fk_bench: --resume: " << opt.jsonl_path << " holds " << records.size() << " cases but only " << sel.size()
          << " are selected (different filters?)\n";
      return kExitUsage;
    }
    for (size_t i = 0; i < records.size(); ++i) {
      if (records[i].value("task", "") != sel[i].task->name || records[i].value("case", "") != sel[i].shape->name) {
        log << "fk_bench: --resume: case " << (i + 1) << " of " << opt.jsonl_path << " is " << records[i].value("task", "?")
            << " " << records[i].value("case", "?") << ", but the selection has " << sel[i].task->name << " "
            << sel[i].shape->name << " there (different filters?)\n";
        return kExitUsage;
      }
    }
  }
  cudaStream_t stream;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  StreamGuard guard(stream);

  std::ofstream jsonl;
  if (!opt.jsonl_path.empty()) {
    jsonl.open(opt.jsonl_path, opt.resume ? std::ios::app : std::ios::trunc);
    if (!jsonl) {
      log << "fk_bench: cannot write " << opt.jsonl_path << "\n";
      return kExitUsage;
    }
  }
  std::mutex io_mu;
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
  const Limits limits = hardware_limits(peak_tflops);
  env["matrix_peak_tflops"] = peak_tflops;
  env["limits"] = {{"dram_tbps", limits.tbps}, {"tensor_tflops", limits.tflops}};
  json cands = json::array();
  {
    std::stringstream ss(opt.candidate_tasks);
    std::string t;
    while (std::getline(ss, t, ',')) if (!t.empty()) cands.push_back(t);
  }
  env["candidate_tasks"] = cands;
  env["method"] = {{"rounds", opt.rounds},
                   {"seed", opt.seed},
                   {"l2_flush_bytes", flusher.bytes()},
                   {"warmup", opt.timing.warmup},
                   {"min_iters", opt.timing.min_iters},
                   {"max_iters", opt.timing.max_iters},
                   {"target_ms", opt.timing.target_ms},
                   {"stream_check", opt.stream_check},
                   {"case_timeout_s", opt.case_timeout_s},
                   {"statistic", "median of CUDA-event times, cold L2, rotating input sets"}};
  env["clocks_before"] = {{"sm_mhz", clk0.sm_mhz}, {"mem_mhz", clk0.mem_mhz}};
  if (jsonl && !have_env) jsonl << env.dump() << "\n" << std::flush;
  log << "fk_bench: " << env["gpu"].get<std::string>() << ", copy bandwidth " << fmt(copy_tbps, 3) << " TB/s, "
      << sel.size() << " cases";
  if (!records.empty()) log << " (resuming after " << records.size() << ")";
  log << "\n";

  Watchdog watchdog(opt.case_timeout_s, jsonl.is_open() ? &jsonl : nullptr, &io_mu);
  const auto t0 = std::chrono::steady_clock::now();
  int exit_early = 0;
  for (size_t i = records.size(); i < sel.size(); ++i) {
    const TaskInfo& task = *sel[i].task;
    const ShapeCase& shape = *sel[i].shape;
    watchdog.arm(case_header(task, shape));
    CaseOutcome o = run_case(task, shape, opt, flusher, copy_tbps, peak_tflops, limits);
    watchdog.disarm();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log << "[" << (i + 1) << "/" << sel.size() << " " << fmt(elapsed, 0) << "s] " << task.name << " " << shape.name << " "
        << o.status;
    if (o.record.contains("time_us")) log << " " << fmt(o.record["time_us"]["median"].get<double>(), 2) << " us " << perf_cell(o.record);
    if (o.record.contains("peer")) log << " | " << o.record["peer"]["name"].get<std::string>() << " x" << fmt(o.record["peer"]["speedup"].get<double>(), 3);
    if (!o.message.empty()) log << " -- " << (o.reason.empty() ? "" : "[" + o.reason + "] ") << o.message;
    log << "\n" << std::flush;
    {
      std::lock_guard<std::mutex> io(io_mu);
      if (jsonl) jsonl << o.record.dump() << "\n" << std::flush;
    }
    records.push_back(std::move(o.record));
    if (o.reason == "context-lost") {
      exit_early = kExitContextLost;
      break;
    }
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const json& r : records) {
    const std::string st = r.value("status", "");
    if (st == "PASSED") ++passed;
    else if (st == "SKIPPED") ++skipped;
    else ++failed;
  }
  if (exit_early) {
    log << "fk_bench: the CUDA context was lost; rerun with --resume to continue after case " << records.size() << "\n";
    return exit_early;
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
    if (!cands.empty()) md << "- candidate build: " << opt.candidate_tasks << "\n";
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
