// The benchmark runner (see runner.h and Note [Task protocol] in task.h).
#include "fk/runtime/runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checking_modes.h"
#include "kernel_trace.h"
#include "fk/runtime/check.h"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/env.h"
#include "fk/runtime/random.h"

extern char** environ;

namespace fk {

namespace {

using json = nlohmann::json;
using namespace fk::detail;

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

// Note [Lockstep ranks]
// Under fk_bench --world-size N every rank runs the same cases of the layout's tasks with the same
// seeds, each checking its own output against the unsharded reference (Note [Sharded references]).
// A sharded task's forward and its reference communicate, so every rank must make the same calls in
// the same order: wherever one rank's check can end a case early (an input changed, an output
// wrong, a timed call failed), the ranks first agree (agreed: every rank's failure goes through the
// store, and all adopt the first, naming its rank), so that all stop at the same point. Timing runs a
// fixed number of calls (the stopping rules read local times), and each rank's median goes into the
// record beside the slowest, which is the case's time. A case that throws on any rank ends the run
// there (exit 1; fk_launch then ends every rank): the others may be inside a collective.
std::function<std::vector<std::string>(const std::string&)> g_all_ranks;
int g_rank = 0;

/// The same failure on every rank: this rank's if it failed, else the first failing rank's.
Failure agreed(const Failure& f) {
  if (!g_all_ranks) return f;
  const std::vector<std::string> all = g_all_ranks(f.status + "\x1f" + f.reason + "\x1f" + f.message);
  for (size_t r = 0; r < all.size(); ++r) {
    const size_t a = all[r].find('\x1f'), b = all[r].find('\x1f', a + 1);
    if (a == 0 || a == std::string::npos || b == std::string::npos) continue;  // that rank passed
    if (static_cast<int>(r) == g_rank) return f;
    return {all[r].substr(0, a), all[r].substr(a + 1, b - a - 1), "rank " + std::to_string(r) + ": " + all[r].substr(b + 1)};
  }
  return f;
}
/// True when `local` holds on some rank.
bool any_rank(bool local) { return agreed(local ? Failure{"x", "", ""} : Failure{}).failed(); }
/// Every rank's value (rank order); {v} in a single process.
std::vector<double> rank_values(double v) {
  if (!g_all_ranks) return {v};
  std::ostringstream os;
  os << std::setprecision(17) << v;
  std::vector<double> out;
  for (const std::string& x : g_all_ranks(os.str())) out.push_back(std::stod(x));
  return out;
}

// Note [Infrastructure failures]
// An exception or CUDA error is the task's (RUNTIME_ERROR) only when it comes out of task code:
// the module's constructor (TaskInfo::make) or a call (TaskInstance::run). One raised by the
// runner, by a harness's fills or reference, or by a peer is INFRA_ERROR: the case has no result,
// and nothing counts it as a speedup (fastkernels compare never does). A lost context is
// RUNTIME_ERROR context-lost whoever noticed it: a sticky error comes from a kernel that faulted.
thread_local bool g_task_threw = false;

/// Marks task code: an exception leaving this scope is the task's (Note [Infrastructure failures]).
class TaskCode {
 public:
  TaskCode() : depth_(std::uncaught_exceptions()) {}
  ~TaskCode() {
    if (std::uncaught_exceptions() > depth_) g_task_threw = true;
  }
  TaskCode(const TaskCode&) = delete;
  TaskCode& operator=(const TaskCode&) = delete;

 private:
  int depth_;
};

/// One call of task code; with fk_bench --cupti, its GPU work is attributed to it (Note [CUPTI
/// cross-check] in kernel_trace.cc).
void task_run(TaskInstance& inst, int set, CallKind kind = CallKind::kChecked) {
  struct TraceScope {
    KernelTrace* t;
    ~TraceScope() {
      if (t) t->end_call();
    }
  } trace{KernelTrace::active()};
  if (trace.t) trace.t->begin_call(kind, current_stream());
  // Note [Pending CUDA errors]
  // A failed CUDA call leaves its error pending until the next cudaGetLastError of the thread. A task
  // that ignores a failure (a refused cudaDeviceSetLimit or stream attribute, an unchecked launch)
  // would otherwise hand it to whoever checks next, the runner's fills (seen on H100: the persisting-L2
  // candidate reported as an infrastructure error). So the slate is clean before the call (an error
  // then is the runner's) and whatever is pending after it is the task's.
  if (const cudaError_t before = cudaGetLastError(); before != cudaSuccess)
    throw std::runtime_error(std::string("a CUDA error was pending before the task's call (not the task's): ") + cudaGetErrorString(before));
  TaskCode tc;
  inst.run(set);
  if (const cudaError_t after = cudaGetLastError(); after != cudaSuccess)
    throw std::runtime_error(std::string("the task's call left a CUDA error pending: ") + cudaGetErrorName(after) + " (" +
                             cudaGetErrorString(after) + "): a CUDA call or launch of forward failed unchecked");
}

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
  if (under_compute_sanitizer()) {
    // The sanitizer serialises kernels, so work on the task's stream would wait behind the gate
    // no matter which stream it was enqueued on, and the baseline itself would look foreign.
    info = {{"result", "inconclusive"},
            {"detail", "running under compute-sanitizer, which serialises kernels: the stream gate cannot tell streams apart"}};
    inst.prepare(set);
    task_run(inst, set);
    return {};
  }
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
    task_run(inst, set);
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
    task_run(inst, set);
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

// Note [Degenerate outputs]
// A tolerance with an absolute part lets through outputs that carry no information where the
// reference is small or nearly constant (an output of ~1 +- 0.01 is matched by its mean within a
// 2% tolerance). So every output is also probed, before the tolerance: it is INCORRECT
// (degenerate-output) when every element is the same (all zeros, one constant) while the
// reference's elements are not, or when its bytes are exactly those of an input (an echo or an
// identity) while the reference differs from that input; inside or outside the tolerance, the
// reason says what the output is. Outputs of one element are not probed.
Failure probe_degenerate(TaskInstance& inst, int set, const CheckedOutput& o, json& rec) {
  if (o.actual.numel() < 2) return {};
  if (count_unlike_first(o.actual) == 0 && count_unlike_first(o.expected) != 0) {
    rec["degenerate"] = "constant";
    return {"INCORRECT", "degenerate-output",
            "output '" + o.name + "' is one value repeated (" + o.actual.str() + ") where the reference varies"};
  }
  uint64_t out_hash = 0;
  bool hashed = false;
  const std::vector<Tensor> ins = inst.inputs(set);
  for (size_t i = 0; i < ins.size(); ++i) {
    const Tensor& in = ins[i];
    if (in.nbytes() != o.actual.nbytes() || in.dtype() != o.actual.dtype() || !in.is_contiguous()) continue;
    if (!hashed) {
      out_hash = fingerprint(o.actual);
      hashed = true;
    }
    if (fingerprint(in) != out_hash) continue;
    // Byte for byte an input: degenerate unless the reference is that input too.
    const bool is_int = in.dtype() == DType::kI32 || in.dtype() == DType::kI64;
    if (is_int ? in.dtype() != o.expected.dtype() : o.expected.dtype() != DType::kF32) continue;
    const CompareResult same = compare(in.view(o.expected.sizes()), o.expected, Tolerance{});
    if (same.mismatches == 0) continue;
    rec["degenerate"] = "echo of input " + std::to_string(i);
    return {"INCORRECT", "degenerate-output",
            "output '" + o.name + "' is byte for byte input " + std::to_string(i) + " (" + in.str() +
                ") where the reference differs from it in " + std::to_string(same.mismatches) + " elements"};
  }
  return {};
}

/// Compares the outputs of the last run(set) with the reference (and probes them, Note
/// [Degenerate outputs]); `fresh_after_pass`: an earlier check of this instance passed, so a
/// mismatch now means stale outputs. Records go to `outputs` (every output of the first check,
/// then only failures).
Failure compare_outputs(TaskInstance& inst, int set, int round, bool fresh_after_pass, json& outputs) {
  cudaStream_t s = current_stream();
  std::vector<CheckedOutput> outs = inst.reference(set);
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  Failure f;
  for (const CheckedOutput& o : outs) {
    // An output of another shape (or none, or a strided view) is the task's: INCORRECT, not a failure
    // of the comparison (seen on H100: a cached output of an earlier, larger case).
    if (!o.actual.defined() || o.actual.sizes() != o.expected.sizes() || !o.actual.is_contiguous()) {
      const std::string what = !o.actual.defined() ? std::string("undefined") : o.actual.str() + (o.actual.is_contiguous() ? "" : " (not contiguous)");
      outputs.push_back({{"name", o.name}, {"round", round}, {"set", set}, {"passed", false}, {"actual", what}, {"expected", o.expected.str()}});
      if (!f.failed())
        f = {"INCORRECT", "wrong-shape",
             "output '" + o.name + "' round " + std::to_string(round) + " set " + std::to_string(set) + " is " + what +
                 ", the reference's shape is " + o.expected.str() +
                 (fresh_after_pass ? " (it passed before: an output kept from another case or call?)" : "")};
      continue;
    }
    const CompareResult r = compare(o.actual, o.expected, o.tol);
    json rec = {{"name", o.name}, {"round", round}, {"set", set}, {"passed", r.passed},
                {"max_abs_err", r.max_abs_err}, {"rel_l2", r.rel_l2}, {"mismatches", r.mismatches},
                {"nonfinite", r.nonfinite}, {"numel", r.numel}};
    // Degenerate first: the reason names what the output is, whether or not the tolerance caught it.
    Failure g = probe_degenerate(inst, set, o, rec);
    if (g.failed()) {
      rec["passed"] = false;
    } else if (!r.passed) {
      std::string reason = r.nonfinite ? "nonfinite" : (fresh_after_pass ? "stale-output" : "mismatch");
      std::string msg = "output '" + o.name + "' round " + std::to_string(round) + " set " + std::to_string(set) + ": " +
                        r.summary();
      if (reason == "stale-output") msg += " (it passed before; on fresh inputs in the same buffers it does not: outputs cached across calls?)";
      g = {"INCORRECT", reason, msg};
    }
    if (outputs.empty() || g.failed()) outputs.push_back(rec);
    if (g.failed() && !f.failed()) f = g;
  }
  return f;
}

/// Checks set `set` after inst.run(set) (or a gated run): inputs unmutated (fingerprints
/// `before`), outputs against the reference, then the guards.
Failure check_outputs(TaskInstance& inst, int set, int round, const std::vector<uint64_t>& before, bool fresh_after_pass,
                      json& outputs) {
  cudaStream_t s = current_stream();
  FK_CUDA_CHECK(cudaStreamSynchronize(s));
  // Inputs first: the reference is computed from them, so a mutated input also spoils it.
  std::vector<Tensor> ins = inst.inputs(set);
  Failure mutated;
  for (size_t i = 0; i < ins.size() && !mutated.failed(); ++i) {
    if (fingerprint(ins[i]) != before[i])
      mutated = {"INCORRECT", "input-mutated", "input " + std::to_string(i) + " (" + ins[i].str() + ") was modified by forward"};
  }
  mutated = agreed(mutated);  // Note [Lockstep ranks]: the reference communicates
  if (mutated.failed()) return mutated;
  Failure f = compare_outputs(inst, set, round, fresh_after_pass, outputs);
  if (!f.failed()) {
    const std::string oob = check_guards();
    if (!oob.empty()) f = {"INCORRECT", "oob-write", oob};
  }
  return agreed(f);
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
      task_run(inst, set);
      f = check_outputs(inst, set, round, before, round > 0, outputs);
    }
    if (round == 0 && stream_check && !f.failed()) {
      const std::vector<uint64_t> before = snapshot(0);
      f = agreed(gated_run(inst, 0, gate_info));
      if (!f.failed()) f = check_outputs(inst, 0, round, before, false, outputs);
    }
  }
  check_json = {{"rounds", rounds}, {"outputs", outputs}, {"inputs_unmutated", f.reason != "input-mutated"},
                {"guards_intact", f.reason != "oob-write"}};
  if (!gate_info.is_null()) check_json["stream_check"] = gate_info;
  return f;
}

// Note [Timed calls are checked]
// Checked calls and timed calls must be indistinguishable to the task, and what is timed must be
// what is checked; otherwise a kernel can compute honestly while watched and skip the work while
// timed (remembering earlier results in device memory, keyed by input content), or wait out the
// roofline check. So around the timed calls (all outside the timed events, none of it visible to
// the task: no poison, no guards, the same allocator, the same stream):
// - before every call (warm-ups included) refresh(set, a fresh seed) gives the set new random
//   activations, so nothing computed by an earlier call is valid for this one;
// - the inputs of every timed call are fingerprinted just before and just after it (a
//   memory-bound device hash, no synchronisation): a timed call that changes an input is
//   INCORRECT (timed-output);
// - the calls run in batches of random length (4..12), and after a batch, with probability 1/2
//   until it has happened once, the latest output of one set called in that batch (chosen at
//   random) is compared with the reference (no re-poisoning); the call it checks cannot know
//   beforehand that it will be checked;
// - after the last batch, the last output of every set (of the last call only, where the sets
//   share written state: sets_independent() false) is compared with the reference.
// A failure of any of these is INCORRECT with reason timed-output, naming the call. The peer is
// timed with the same refreshes (so both see fresh inputs), unchecked. CUDA-graph replay times
// (--graph) replay captured calls on unchanged inputs: they are reported beside the median and
// never used as the case's time.
class TimedCalls {
 public:
  TimedCalls(TaskInstance& inst, uint64_t seed) : inst_(inst), nsets_(inst.num_sets()), seed_(seed), rng_(seed) {
    FK_CUDA_CHECK(cudaMalloc(&acc_, kSlots * sizeof(unsigned long long)));
    last_of_set_.assign(nsets_, -1);
  }
  ~TimedCalls() { cudaFree(acc_); }
  TimedCalls(const TimedCalls&) = delete;
  TimedCalls& operator=(const TimedCalls&) = delete;

  /// Hooks for the task's timed calls (checked), or for the peer's (refresh only).
  CallHooks hooks(bool check) {
    CallHooks h;
    h.before = [this, check](int i, int slot) { before(i, slot, check); };
    h.batch_size = [this](int) { return std::uniform_int_distribution<int>(4, 12)(rng_); };
    if (check) {
      h.after = [this](int i, int slot) { after(i, slot); };
      h.after_batch = [this](int first, int n) { return after_batch(first, n); };
    }
    return h;
  }
  /// The checks after the last batch; then the record of what was checked.
  Failure finish() {
    Clock c{final_ms_};
    if (failure_.failed() || last_call_ < 0) return failure_;
    std::vector<int> sets;
    if (inst_.sets_independent()) {
      for (int st = 0; st < nsets_; ++st)
        if (last_of_set_[st] >= 0) sets.push_back(st);
    } else {
      sets.push_back(last_call_ % nsets_);
    }
    for (int st : sets) {
      failure_ = agreed(check_set(st, last_of_set_[st], "last call of its set"));
      if (failure_.failed()) break;
    }
    return failure_;
  }
  json record() const {
    return {{"timed_calls", last_call_ + 1}, {"checked_calls", checked_}, {"outputs", outputs_},
            {"inputs_fingerprinted_calls", fingerprinted_}, {"hook_ms", hook_ms_}, {"final_check_ms", final_ms_}};
  }

 private:
  static constexpr int kSlots = 2 * CallHooks::kMaxBatch;
  struct Clock {
    double& total;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Clock() { total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); }
  };
  void fingerprint_inputs(int set, unsigned long long* acc) {
    for (const Tensor& t : inst_.inputs(set))
      fingerprint_bytes_async(t.data_ptr(), static_cast<int64_t>(t.nbytes()), acc, current_stream());
  }
  void before(int i, int slot, bool check) {
    Clock c{hook_ms_};
    const int set = i % nsets_;
    inst_.refresh(set, mix_seed(seed_, slot < 0 ? (uint64_t(1) << 40) + i : uint64_t(i)));
    if (!check || slot < 0) return;
    if (slot == 0) FK_CUDA_CHECK(cudaMemsetAsync(acc_, 0, kSlots * sizeof(unsigned long long), current_stream()));
    fingerprint_inputs(set, acc_ + 2 * slot);
  }
  void after(int i, int slot) {
    Clock c{hook_ms_};
    fingerprint_inputs(i % nsets_, acc_ + 2 * slot + 1);
  }
  bool after_batch(int first, int n) {
    Clock c{hook_ms_};
    unsigned long long h[kSlots];
    FK_CUDA_CHECK(cudaMemcpy(h, acc_, sizeof(h), cudaMemcpyDeviceToHost));
    for (int b = 0; b < n && !failure_.failed(); ++b) {
      ++fingerprinted_;
      if (h[2 * b] != h[2 * b + 1]) {
        failure_ = {"INCORRECT", "timed-output",
                    "timed call " + std::to_string(first + b) + " (set " + std::to_string((first + b) % nsets_) +
                        ") modified an input: the fingerprints of its inputs before and after the call differ"};
      }
    }
    failure_ = agreed(failure_);  // Note [Lockstep ranks]
    if (failure_.failed()) return true;
    std::vector<int> called;  // sets whose latest call is in this batch
    for (int j = first; j < first + n; ++j) last_of_set_[j % nsets_] = j;
    last_call_ = first + n - 1;
    if (inst_.sets_independent()) {
      for (int st = 0; st < nsets_; ++st)
        if (last_of_set_[st] >= first) called.push_back(st);
    } else {
      called.push_back(last_call_ % nsets_);
    }
    if (spot_done_ || std::uniform_int_distribution<int>(0, 1)(rng_) == 0) return false;
    spot_done_ = true;
    const int st = called[std::uniform_int_distribution<size_t>(0, called.size() - 1)(rng_)];
    failure_ = agreed(check_set(st, last_of_set_[st], "chosen at random after its batch"));
    return failure_.failed();
  }
  Failure check_set(int set, int call, const std::string& why) {
    ++checked_;
    json outs = json::array();
    Failure f = compare_outputs(inst_, set, -1, false, outs);
    for (json& o : outs) {
      o["timed_call"] = call;
      outputs_.push_back(o);
    }
    if (!f.failed()) return f;
    return {"INCORRECT", "timed-output",
            "timed call " + std::to_string(call) + " (set " + std::to_string(set) + ", " + why + ") failed the check made after it: [" +
                f.reason + "] " + f.message};
  }

  TaskInstance& inst_;
  int nsets_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  unsigned long long* acc_ = nullptr;
  std::vector<int> last_of_set_;
  int last_call_ = -1, checked_ = 0, fingerprinted_ = 0;
  bool spot_done_ = false;
  double hook_ms_ = 0, final_ms_ = 0;
  Failure failure_;
  json outputs_ = json::array();
};

/// Hardware limits for the SUSPECT check: DRAM bandwidth from the memory clock and bus width
/// (H100 SXM: 2619 MHz x 5120 bit x 2 = 3.35 TB/s) and the dense bf16 tensor peak.
struct Limits {
  double tbps = 0, tflops = 0;
};

// Note [Device peaks]
// "% of matrix peak" is reported against the datasheet's dense bf16 figure of the SKU present
// (found by name); the SUSPECT check's limit is an upper bound computed from what the device
// reports: SMs x its highest SM clock x the dense bf16 FLOP per clock and SM of its architecture
// (Hopper 4096, Ampere A100 2048, other Ampere and Ada 1024, Blackwell and anything newer 8192),
// and never below the datasheet figure. A device the table does not know reports against the
// computed bound and says so (env.matrix_peak_source).
struct DevicePeak {
  double datasheet_tflops = 0;  ///< for % of peak
  double bound_tflops = 0;      ///< for beyond-hardware-limit
  std::string source;           ///< the SKU matched, or "computed"
};

DevicePeak device_peak() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const int per_sm = prop.major == 9 ? 4096 : prop.major == 8 ? (prop.minor == 0 ? 2048 : 1024) : prop.major >= 10 ? 8192 : 1024;
  DevicePeak d;
  d.bound_tflops = double(prop.multiProcessorCount) * clock_khz * 1e3 * per_sm / 1e12;
  static const std::pair<const char*, double> kTable[] = {
      {"H100 NVL", 835.0}, {"H100 PCIe", 756.0}, {"GH200", 989.4}, {"H200", 989.4}, {"H100", 989.4}, {"H800", 989.4},
      {"A100", 312.0},     {"L40S", 362.0},      {"B200", 2250.0}, {"B100", 1750.0}};
  const std::string name = prop.name;
  for (const auto& [sku, tflops] : kTable)
    if (name.find(sku) != std::string::npos) {
      d.datasheet_tflops = tflops;
      d.source = std::string("datasheet, ") + sku;
      break;
    }
  if (d.datasheet_tflops <= 0) {
    d.datasheet_tflops = d.bound_tflops;
    d.source = "computed: " + std::to_string(prop.multiProcessorCount) + " SMs x " + std::to_string(clock_khz / 1000) +
               " MHz x " + std::to_string(per_sm) + " FLOP/clock";
  }
  d.bound_tflops = std::max(d.bound_tflops, d.datasheet_tflops);
  return d;
}

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

/// The persisting-L2 set-aside the process started with (nonzero on some machines: 11.25 MiB was
/// seen on H200): what a task must leave as it found it (Note [Persisting L2] in timing.cu).
size_t initial_persisting_l2() {
  static const size_t v = [] {
    size_t x = 0;
    if (cudaDeviceGetLimit(&x, cudaLimitPersistingL2CacheSize) != cudaSuccess) {
      cudaGetLastError();
      x = 0;
    }
    return x;
  }();
  return v;
}

CaseOutcome run_case(const TaskInfo& task, const ShapeCase& shape, const RunnerOptions& opt, L2Flusher& flusher,
                     double copy_tbps, double peak_tflops, const Limits& limits) {
  CaseOutcome out;
  json& rec = out.record;
  rec = case_header(task, shape);
  TaskScope scope(task.name + "/" + shape.name);
  cudaStream_t s = current_stream();
  const auto wall0 = std::chrono::steady_clock::now();
  g_task_threw = false;
  if (KernelTrace* trace = KernelTrace::active()) trace->take();  // calls of earlier cases
  auto fail = [&](const Failure& f) {
    out.status = f.status;
    out.reason = f.reason;
    out.message = f.message;
  };
  try {
    std::unique_ptr<TaskInstance> inst;
    std::string skip_why;
    try {
      set_guard_allocations(true);  // the instance's own tensors are guarded too
      TaskCode tc;                  // the module's constructor is task code
      inst = task.make(shape);
      set_guard_allocations(false);
    } catch (const SkipCase& e) {
      set_guard_allocations(false);
      skip_why = e.what();
    }
    if (any_rank(!skip_why.empty())) {  // every rank skips where one must (Note [Lockstep ranks])
      out.status = "SKIPPED";
      out.message = skip_why.empty() ? std::string("skipped on another rank of the job") : skip_why;
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
    if (opt.time && !any_rank(out.status != "PASSED")) {
      const int nsets = inst->num_sets();
      // Timed calls on fresh inputs, checked (Note [Timed calls are checked]).
      TimedCalls timed(*inst, mix_seed(case_seed, 0x71D3));
      const TimingResult t =
          time_calls([&](int i) { task_run(*inst, i % nsets, CallKind::kTimed); }, s, flusher, opt.timing, timed.hooks(true));
      const Failure timed_failure = timed.finish();
      rec["timed_check"] = timed.record();
      if (timed_failure.failed()) fail(timed_failure);
      auto fail_if_passed = [&](const Failure& f) {
        if (out.status == "PASSED") fail(f);
      };
      if (KernelTrace* trace = KernelTrace::active()) {  // Note [CUPTI cross-check]
        uint64_t dropped = 0;
        std::string suspect;
        json cupti = cross_check(trace->take(&dropped), t.median_us, &suspect);
        cupti["dropped_records"] = dropped;
        if (dropped > 0) cupti["verdict"] = "inconclusive";
        else if (!suspect.empty()) fail_if_passed({"SUSPECT", cupti["verdict"].get<std::string>(), suspect});
        rec["cupti"] = cupti;
      }
      size_t persisting = 0;
      cudaDeviceGetLimit(&persisting, cudaLimitPersistingL2CacheSize);
      if (persisting != initial_persisting_l2()) {
        cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, initial_persisting_l2());
        fail_if_passed({"SUSPECT", "persisting-l2",
                        "the task changed the L2 set aside for persisting lines (cudaLimitPersistingL2CacheSize) from " +
                            std::to_string(initial_persisting_l2()) + " to " + std::to_string(persisting) +
                            " bytes; persisting lines would survive the flush before timed calls (Note [Persisting L2]); "
                            "restored"});
      }
      rec["time_us"] = {{"median", t.median_us}, {"min", t.min_us}, {"max", t.max_us}, {"iters", t.iters}};
      double median_us = t.median_us;
      if (g_all_ranks) {  // Note [Lockstep ranks]: each rank's median; the case's time is the slowest rank's
        const std::vector<double> medians = rank_values(t.median_us), mins = rank_values(t.min_us), maxs = rank_values(t.max_us);
        median_us = *std::max_element(medians.begin(), medians.end());
        rec["time_us"] = {{"median", median_us},
                          {"min", *std::max_element(mins.begin(), mins.end())},
                          {"max", *std::max_element(maxs.begin(), maxs.end())},
                          {"iters", t.iters},
                          {"rank_median", medians},
                          {"statistic", "the slowest rank's"}};
      }
      const double sec = median_us * 1e-6;
      const double tbps = cost.bytes / sec / 1e12, tflops = cost.flops / sec / 1e12;
      rec["tbps"] = tbps;
      rec["tflops"] = tflops;
      if (task.memory_bound) {
        rec["pct_copy_bw"] = 100.0 * tbps / copy_tbps;
      } else {
        rec["pct_matrix_peak"] = 100.0 * tflops / peak_tflops;
      }
      if (!inst->peer_name().empty()) {
        const TimingResult p = time_calls([&](int i) { inst->run_peer(i % nsets); }, s, flusher, opt.timing, timed.hooks(false));
        rec["peer"] = {{"name", inst->peer_name()}, {"median_us", p.median_us}, {"min_us", p.min_us},
                       {"speedup", p.median_us / median_us}};
      }
      if (opt.graph && t.median_us < opt.graph_below_us) {
        try {
          const TimingResult g = time_graph([&](int i) { task_run(*inst, i % nsets); }, s, 20, 10);
          rec["graph_us"] = {{"median", g.median_us}, {"min", g.min_us}, {"max", g.max_us}};
        } catch (const std::exception& e) {
          cudaGetLastError();
          g_task_threw = false;
          rec["graph_us"] = {{"error", e.what()}};
        }
      }
      // A result faster than the hardware allows (the task's own minimum bytes and FLOPs over
      // DRAM bandwidth and tensor peak; L2 is flushed before every timed call) was not computed
      // by the timed work on this stream.
      if (tbps > limits.tbps || tflops > limits.tflops) {
        fail_if_passed({"SUSPECT", "beyond-hardware-limit",
              "median " + fmt(median_us, 2) + " us means " + fmt(tbps, 2) + " TB/s and " + fmt(tflops, 1) +
                  " TFLOP/s from the task's minimum bytes/FLOPs, beyond this GPU's " + fmt(limits.tbps, 2) + " TB/s DRAM / " +
                  fmt(limits.tflops, 0) + " TFLOP/s peak"});
      }
      // Re-check once after timing, on fresh inputs: outputs must still be computed, not replayed.
      if (!any_rank(out.status != "PASSED")) {
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
    // Note [Infrastructure failures]
    out.status = g_task_threw ? "RUNTIME_ERROR" : "INFRA_ERROR";
    out.reason = g_task_threw ? "error" : "infra";
    out.message = e.what();
    if (!g_task_threw) out.message += " (raised outside task code: the runner, a reference or a peer; the case has no result)";
    if (context_lost()) {
      out.status = "RUNTIME_ERROR";
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
  rec["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return out;
}

std::string perf_cell(const json& r) {
  if (!r.contains("time_us")) return "";
  if (r.contains("pct_copy_bw")) return fmt(r["tbps"].get<double>(), 3) + " TB/s (" + fmt(r["pct_copy_bw"].get<double>(), 1) + "% copy)";
  return fmt(r["tflops"].get<double>(), 1) + " TFLOP/s (" + fmt(r["pct_matrix_peak"].get<double>(), 1) + "% peak)";
}

}  // namespace

namespace {
/// Runs `body` and maps its failure or exception to a CheckOutcome (Note [Infrastructure failures]).
/// An out-of-memory error's message plus the device's memory then (free / total, this process's
/// allocator peak), so that a case the memory estimate let through says by how much it missed.
std::string with_memory_state(const std::string& what) {
  if (what.find("cudaErrorMemoryAllocation") == std::string::npos && what.find("out of memory") == std::string::npos) return what;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return what;
  }
  char buf[200];
  const double gib = double(1ull << 30);
  snprintf(buf, sizeof buf, " [device memory at the failure: %.2f GiB free of %.2f GiB; allocator peak reserved %.2f GiB]", free_b / gib,
           total_b / gib, double(allocator_peak_reserved_bytes()) / gib);
  return what + buf;
}

CheckOutcome outcome_of(const std::function<Failure()>& body) {
  g_task_threw = false;
  try {
    const Failure f = body();
    if (f.failed()) return {f.status, f.message, f.reason};
    return {"PASSED", "", ""};
  } catch (const std::exception& e) {
    cudaGetLastError();
    if (g_task_threw) return {"RUNTIME_ERROR", with_memory_state(e.what()), "error"};
    return {"INFRA_ERROR", with_memory_state(e.what()), "infra"};
  }
}
}  // namespace

CheckOutcome check_instance(TaskInstance& inst, int rounds, uint64_t seed) {
  return outcome_of([&] {
    json check;
    const Failure failure = check_case(inst, rounds, seed, /*stream_check=*/true, 0, check);
    FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    return failure;
  });
}

CheckOutcome check_and_time_instance(TaskInstance& inst, int rounds, uint64_t seed, const TimingOptions& timing) {
  CheckOutcome out = check_instance(inst, rounds, seed);
  if (out.status != "PASSED") return out;
  return outcome_of([&] {
    L2Flusher flusher;
    TimedCalls timed(inst, mix_seed(seed, 0x71D3));
    const int nsets = inst.num_sets();
    time_calls([&](int i) { task_run(inst, i % nsets); }, current_stream(), flusher, timing, timed.hooks(true));
    return timed.finish();
  });
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

// Note [Off-registry shapes]
// A kernel exact only at the token counts of the shape registries would pass every check if only
// registry shapes ran (every level draws its counts from the same few values). So every run adds,
// for every selected task and each regime of its selected cases, `off_registry` cases that no
// registry lists, drawn from the run's seed: token counts are primes, batch sizes and sequence /
// KV lengths odd and off the power-of-two grid (a patch merger's window counts are drawn as token
// counts: primes; so are a sequence-parallel task's rows per rank, name xr37), and a batch of several sequences is ragged (each
// length drawn from [1, max], dim `ragged` holding the draw's seed: case_seq_lens in
// fk/tasks/attention.h). Each dimension is drawn between the smallest and largest value of the
// task's selected cases of that regime, so what fits in memory there fits here, widened where that
// range holds no value off the registry; a batch is then cut so that batch x length stays within
// the largest selected case. The seed is printed and recorded (env.method.seed); by
// default it is new every run, and --seed reproduces a run. Off-registry case names start with x
// (xt37, xb3_kv1021r); cases with dims other than num_tokens, num_windows, rows_per_rank, batch,
// seq_len and kv_len get none, and the run says so.
namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

/// A value in [lo, hi] that `ok` accepts and the registry (`avoid`) does not hold: the first such
/// value at or above a uniformly drawn start (else below it). Where [lo, hi] holds none, the range
/// is widened, downwards first (lo / 2: smaller cases fit wherever the registry's do), then up.
template <class Ok> int64_t draw_value(std::mt19937_64& rng, int64_t lo, int64_t hi, const std::set<int64_t>& avoid, Ok ok) {
  lo = std::max<int64_t>(lo, 1);
  hi = std::max(hi, lo);
  for (int widen = 0; widen < 12; ++widen) {
    if (widen > 0) {
      if (lo > 1) lo = std::max<int64_t>(1, lo / 2);
      else hi = 2 * hi + 5;
    }
    const int64_t start = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    for (int64_t v = start; v <= hi; ++v)
      if (ok(v) && !avoid.count(v)) return v;
    for (int64_t v = start - 1; v >= lo; --v)
      if (ok(v) && !avoid.count(v)) return v;
  }
  return -1;
}

const std::set<std::string> kOffRegistryDims = {"num_tokens", "num_windows", "rows_per_rank", "batch", "seq_len", "kv_len"};

}  // namespace

std::vector<ShapeCase> off_registry_cases(const TaskInfo& task, const std::vector<const ShapeCase*>& selected, uint64_t seed,
                                          int per_regime, std::string* note) {
  std::vector<ShapeCase> out;
  if (per_regime <= 0) return out;
  std::mt19937_64 rng(mix_seed(seed, std::hash<std::string>{}(task.name)));
  for (const std::string regime : {"decode", "prefill"}) {
    std::map<std::string, std::pair<int64_t, int64_t>> range;  // dim -> [min, max] over the selected cases
    std::map<std::string, std::set<int64_t>> seen;             // dim -> every registry value
    double volume = 0;                                         // the largest product of dims
    bool any = false;
    for (const ShapeCase* c : selected) {
      if (c->regime != regime) continue;
      double p = 1;
      for (const auto& [k, v] : c->dims) p *= double(v);
      volume = std::max(volume, p);
      for (const auto& [k, v] : c->dims) {
        if (!kOffRegistryDims.count(k)) {
          if (note) *note = "case " + c->name + " has dim '" + k + "', which the off-registry rule does not know";
          return {};
        }
        auto it = range.find(k);
        if (it == range.end()) range[k] = {v, v};
        else it->second = {std::min(it->second.first, v), std::max(it->second.second, v)};
      }
      any = true;
    }
    if (!any) continue;
    for (const ShapeCase& c : task.cases)
      for (const auto& [k, v] : c.dims) seen[k].insert(v);
    for (int n = 0; n < per_regime; ++n) {
      ShapeCase x;
      x.regime = regime;
      std::string name = "x";
      for (const char* dim : {"num_tokens", "num_windows", "rows_per_rank"}) {
        if (!range.count(dim)) continue;
        const auto [lo, hi] = range[dim];
        const int64_t t = draw_value(rng, lo, hi, seen[dim], is_prime);
        if (t < 0) continue;
        x.dims.push_back({dim, t});
        const std::string d = dim;
        name += (d == "num_tokens" ? "t" : d == "num_windows" ? "w" : "r") + std::to_string(t);
      }
      if (range.count("batch")) {
        const std::string len_key = range.count("seq_len") ? "seq_len" : "kv_len";
        if (!range.count(len_key)) continue;
        const auto [blo, bhi] = range["batch"];
        // An odd batch where the range has one (b1 only: batch 1, with an off-grid length).
        int64_t b = draw_value(rng, blo, bhi, {}, [](int64_t v) { return v % 2 == 1; });
        if (b < 0 || b > std::max<int64_t>(bhi, 1)) b = blo;
        const auto [llo, lhi] = range[len_key];
        const int64_t l = draw_value(rng, llo, lhi, seen[len_key], [](int64_t v) { return v % 2 == 1 && !power_of_two(v); });
        if (l < 0) continue;
        // No more tokens than the largest selected case: the ranges of batch and length are drawn
        // apart, and their product must still fit wherever the registry's cases fit.
        if (double(b) * double(l) > volume) {
          b = std::max<int64_t>(1, static_cast<int64_t>(volume / double(l)));
          if (b > 1 && b % 2 == 0) --b;
        }
        x.dims.push_back({"batch", b});
        x.dims.push_back({len_key, l});
        name += "b" + std::to_string(b) + (len_key == "seq_len" ? "_s" : "_kv") + std::to_string(l);
        if (b > 1) {
          x.dims.push_back({"ragged", static_cast<int64_t>(rng() >> 33) | 1});
          name += "r";
        }
      }
      if (x.dims.empty()) continue;
      x.name = name;
      bool dup = false;
      for (const ShapeCase& c : task.cases) dup = dup || c.name == x.name;
      for (const ShapeCase& c : out) dup = dup || c.name == x.name;
      if (!dup) out.push_back(std::move(x));
    }
  }
  return out;
}

// Note [Capped cases]
// A sanitizer sweep wants every task at a small size: racecheck instruments each shared-memory
// access, and the registry's smallest prefill case (1024 tokens of attention) takes minutes under
// it. --max-length N caps the lengths of every selected case (num_tokens, seq_len and kv_len; batch
// is left alone) at N. A case that changes is renamed `<name>_cap<N>` and counts as off-registry
// (its record says so); a case already within N runs as it is. A capped case that would repeat a
// registry case or another capped case of the task is dropped. The kernels take any length (the
// off-registry rule already draws odd and prime ones), so a capped case is checked like any other.
std::optional<ShapeCase> capped_case(const ShapeCase& c, int64_t max_length) {
  static const std::set<std::string> kLengths = {"num_tokens", "seq_len", "kv_len"};
  ShapeCase x = c;
  bool changed = false;
  for (auto& [k, v] : x.dims)
    if (kLengths.count(k) && v > max_length) {
      v = max_length;
      changed = true;
    }
  if (!changed) return std::nullopt;
  x.name = c.name + "_cap" + std::to_string(max_length);
  return x;
}

bool under_compute_sanitizer() {
  // FK_UNDER_SANITIZER=1 says so explicitly (scripts/gpu_protocol.sh sets it); otherwise any
  // variable the sanitizer's launcher sets (its name or value mentions the sanitizer).
  if (const char* v = std::getenv("FK_UNDER_SANITIZER")) return std::strcmp(v, "0") != 0;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    std::transform(kv.begin(), kv.end(), kv.begin(), [](unsigned char c) { return std::tolower(c); });
    if (kv.find("sanitizer") != std::string::npos &&
        (kv.rfind("cuda_injection", 0) == 0 || kv.rfind("nv_sanitizer", 0) == 0 || kv.rfind("ld_preload", 0) == 0 ||
         kv.rfind("compute_sanitizer", 0) == 0 || kv.rfind("nv_compute", 0) == 0))
      return true;
  }
  return false;
}

std::vector<Selection> select_cases(const RunnerOptions& opt) {
  std::vector<Selection> out;
  for (const TaskInfo* t : all_tasks()) {
    if (opt.level && t->level != opt.level) continue;
    // Several ranks run the tasks of their layout (Note [Lockstep ranks]); the others run alone.
    if (opt.world_size > 1 && t->tp_size != opt.world_size) continue;
    if (!matches(opt.task_regex, t->name)) continue;
    if (!opt.arch_regex.empty()) {
      bool any = false;
      for (const auto& a : t->archs) any = any || matches(opt.arch_regex, a);
      if (!any) continue;
    }
    std::vector<const ShapeCase*> picked;
    for (const ShapeCase& c : t->cases) {
      if (!opt.regime.empty() && c.regime != opt.regime) continue;
      if (!matches(opt.case_regex, c.name)) continue;
      picked.push_back(&c);
    }
    if (opt.smallest > 0 && static_cast<int>(picked.size()) > opt.smallest) {
      auto size_of = [](const ShapeCase* c) {
        double p = 1;
        for (const auto& [k, v] : c->dims) p *= double(v);
        return p;
      };
      std::vector<const ShapeCase*> by_size = picked;
      std::stable_sort(by_size.begin(), by_size.end(), [&](const ShapeCase* a, const ShapeCase* b) { return size_of(a) < size_of(b); });
      by_size.resize(opt.smallest);
      std::vector<const ShapeCase*> kept;  // registry order
      for (const ShapeCase* c : picked)
        if (std::find(by_size.begin(), by_size.end(), c) != by_size.end()) kept.push_back(c);
      picked = kept;
    }
    std::vector<std::shared_ptr<const ShapeCase>> capped;  // Note [Capped cases]
    if (opt.max_length > 0) {
      std::vector<const ShapeCase*> kept;
      for (const ShapeCase* c : picked) {
        std::optional<ShapeCase> x = capped_case(*c, opt.max_length);
        if (!x) {
          kept.push_back(c);
          continue;
        }
        bool dup = false;
        for (const ShapeCase& r : t->cases) dup = dup || r.name == x->name;
        for (const auto& o : capped) dup = dup || o->name == x->name;
        if (dup) continue;
        capped.push_back(std::make_shared<const ShapeCase>(std::move(*x)));
        kept.push_back(capped.back().get());
      }
      picked = kept;
    }
    for (const ShapeCase* c : picked) {
      std::shared_ptr<const ShapeCase> owned;
      for (const auto& o : capped)
        if (o.get() == c) owned = o;
      out.push_back({t, c, owned, owned != nullptr});
    }
    for (ShapeCase& x : off_registry_cases(*t, picked, opt.seed, opt.off_registry)) {
      auto owned = std::make_shared<const ShapeCase>(std::move(x));
      out.push_back({t, owned.get(), owned, true});
    }
  }
  return out;
}

int run_benchmark(const RunnerOptions& opt_in, std::ostream& log) {
  RunnerOptions opt = opt_in;
  if (opt.world_size > 1) {  // Note [Lockstep ranks]
    if (!opt.all_ranks) {
      log << "fk_bench: a job of " << opt.world_size << " ranks without a way to reach them\n";
      return kExitUsage;
    }
    g_all_ranks = opt.all_ranks;
    g_rank = opt.rank;
    opt.timing.min_iters = opt.timing.max_iters;  // a fixed number of timed calls on every rank
    opt.timing.target_ms = 1e300;
    opt.timing.stable_rel = -1;
    if (opt.rank != 0) opt.jsonl_path.clear(), opt.markdown_path.clear();  // rank 0 writes the files
  }
  struct ResetRanks {
    ~ResetRanks() { g_all_ranks = nullptr, g_rank = 0; }
  } reset_ranks;
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
  initial_persisting_l2();  // before any task runs
  std::unique_ptr<KernelTrace> trace;  // Note [CUPTI cross-check]
  if (opt.cupti) {
    try {
      trace = std::make_unique<KernelTrace>();
    } catch (const std::exception& e) {
      log << "fk_bench: --cupti: " << e.what() << "\n";
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
  env["cupti"] = opt.cupti;
  // Note [Device peaks]: the datasheet's dense bf16 peak for % of peak, a computed bound for the limit.
  const DevicePeak peak = device_peak();
  const double peak_tflops = peak.datasheet_tflops;
  const Limits limits = hardware_limits(peak.bound_tflops);
  env["matrix_peak_tflops"] = peak_tflops;
  env["matrix_peak_source"] = peak.source;
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
                   {"off_registry_per_regime", opt.off_registry},
                   {"timed_calls_checked", "every set's last timed output, one random timed call, inputs refreshed and fingerprinted around every timed call"},
                   {"under_compute_sanitizer", under_compute_sanitizer()},
                   {"persisting_l2_bytes_at_start", initial_persisting_l2()},
                   {"l2_flush_bytes", flusher.bytes()},
                   {"warmup", opt.timing.warmup},
                   {"min_iters", opt.timing.min_iters},
                   {"max_iters", opt.timing.max_iters},
                   {"target_ms", opt.timing.target_ms},
                   {"stream_check", opt.stream_check},
                   {"world_size", opt.world_size},
                   {"case_timeout_s", opt.case_timeout_s},
                   {"statistic", "median of CUDA-event times, cold L2, rotating input sets"}};
  env["clocks_before"] = {{"sm_mhz", clk0.sm_mhz}, {"mem_mhz", clk0.mem_mhz}};
  if (jsonl && !have_env) jsonl << env.dump() << "\n" << std::flush;
  int n_off = 0;
  for (const Selection& x : sel) n_off += x.off_registry;
  // Under --world-size, rank 0 logs the run; the other ranks log only the cases that did not pass, as
  // they saw them (the launcher interleaves every rank's output).
  const bool quiet = opt.world_size > 1 && opt.rank != 0;
  std::ostringstream dropped;
  std::ostream& progress = quiet ? static_cast<std::ostream&>(dropped) : log;
  progress << "fk_bench: " << env["gpu"].get<std::string>() << ", copy bandwidth " << fmt(copy_tbps, 3) << " TB/s, "
           << sel.size() << " cases (" << n_off << " off-registry), seed " << opt.seed;
  if (!records.empty()) progress << " (resuming after " << records.size() << ")";
  progress << "\n";

  Watchdog watchdog(opt.case_timeout_s, jsonl.is_open() ? &jsonl : nullptr, &io_mu);
  const auto t0 = std::chrono::steady_clock::now();
  int exit_early = 0;
  for (size_t i = records.size(); i < sel.size(); ++i) {
    const TaskInfo& task = *sel[i].task;
    const ShapeCase& shape = *sel[i].shape;
    watchdog.arm(case_header(task, shape));
    CaseOutcome o = run_case(task, shape, opt, flusher, copy_tbps, peak_tflops, limits);
    watchdog.disarm();
    if (sel[i].off_registry) o.record["off_registry"] = true;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!quiet || o.status != "PASSED") {
      std::ostream& line = quiet ? log << "rank " << opt.rank << ": " : log;
      line << "[" << (i + 1) << "/" << sel.size() << " " << fmt(elapsed, 0) << "s] " << task.name << " " << shape.name << " "
           << o.status;
      if (o.record.contains("time_us")) line << " " << fmt(o.record["time_us"]["median"].get<double>(), 2) << " us " << perf_cell(o.record);
      if (o.record.contains("peer")) line << " | " << o.record["peer"]["name"].get<std::string>() << " x" << fmt(o.record["peer"]["speedup"].get<double>(), 3);
      if (!o.message.empty()) line << " -- " << (o.reason.empty() ? "" : "[" + o.reason + "] ") << o.message;
      line << "\n" << std::flush;
    }
    {
      std::lock_guard<std::mutex> io(io_mu);
      if (jsonl) jsonl << o.record.dump() << "\n" << std::flush;
    }
    const bool threw = o.status == "RUNTIME_ERROR" || o.status == "INFRA_ERROR";
    records.push_back(std::move(o.record));
    if (o.reason == "context-lost") {
      exit_early = kExitContextLost;
      break;
    }
    if (g_all_ranks && threw) {  // the other ranks may be inside a collective: end the job (Note [Lockstep ranks])
      log << "fk_bench: rank " << opt.rank << ": a case threw in a job of " << opt.world_size
          << " ranks; ending here (the launcher ends the others)\n";
      return kExitFailed;
    }
  }
  int passed = 0, failed = 0, skipped = 0, infra = 0;
  for (const json& r : records) {
    const std::string st = r.value("status", "");
    if (st == "PASSED") ++passed;
    else if (st == "SKIPPED") ++skipped;
    else ++failed;
    if (st == "INFRA_ERROR") ++infra;
  }
  if (exit_early) {
    log << "fk_bench: the CUDA context was lost; rerun with --resume to continue after case " << records.size() << "\n";
    return exit_early;
  }
  const ClockReading clk1 = read_clocks(0);
  json summary = {{"type", "summary"}, {"passed", passed}, {"failed", failed}, {"skipped", skipped}, {"infra_errors", infra},
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
  if (infra) log << "fk_bench: " << infra << " case(s) ended in INFRA_ERROR (no result; counted as failed)\n";
  progress << passed << " passed, " << failed << " failed";
  if (skipped) progress << ", " << skipped << " skipped";
  progress << "\n";
  FK_CUDA_CHECK(cudaStreamSynchronize(stream));
  return failed ? kExitFailed : kExitOk;
}

}  // namespace fk
