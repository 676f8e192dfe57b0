// Note [CUPTI cross-check]
// fk_bench --cupti records, with CUPTI's activity API, every kernel, memcpy and memset that task
// code puts on its stream, per call: the runner pushes an external correlation id around each
// checked and each timed call (TaskRun in runner.cc), and CUPTI ties every API call made inside
// to that id. Work of the runner itself (refreshes, fingerprints, flushes, the stream gate) is
// launched outside those scopes, and the allocator's fills and guard checks, launched inside a
// call, set the call's id aside while they are enqueued (KernelTrace::Untraced), so neither is
// counted (seen on H100 before they did: a guarded tensor freed in one timed call in five put the
// guard check into that call's kernel set, a false kernel-set alarm). After the timed calls of a case:
//  - kernel set: each timed call must have run exactly the operations (kernel names with their
//    counts, copies, memsets) of at least one checked call. A kernel that does less, or other
//    work, only when it is not watched shows up as a timed call no checked call looks like:
//    SUSPECT, reason kernel-set. (Checked calls may differ among themselves: a library that
//    tunes on its first call runs extra kernels then.)
//  - timing: the median over timed calls of the span from the first operation's start to the
//    last one's end (CUPTI's GPU timestamps) is compared with the event-timed median: events
//    bracket the call, so an event median below 0.8 x the span means the events did not time the
//    work: SUSPECT, reason event-time. Both medians and the sum of kernel time are recorded.
//  - nothing recorded: a timed call with no operation at all on its stream (every task launches
//    something) is SUSPECT, reason no-work; so that this cannot be a broken trace, the trace
//    proves itself when it starts (a probe memset in a traced call must come back attributed,
//    else fk_bench --cupti stops with an error).
// CUPTI writes an external-correlation record only beside a driver or runtime API record, so
// the API activity kinds are enabled too (their records are read for nothing else).
// What it does not see: a kernel that keeps its name and launch but does less inside (that is
// what the output checks of timed calls are for), and work outside CUDA streams. Off by default:
// CUPTI adds a few microseconds per launch, so it cross-checks rather than replaces event timing.
#include "kernel_trace.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#ifdef FK_HAVE_CUPTI
#include <cupti.h>
#endif

namespace fk::detail {

namespace {

KernelTrace* g_active = nullptr;

/// "name x2, other" of a sorted multiset.
std::string describe(const std::map<std::string, int>& sig) {
  if (sig.empty()) return "nothing";
  std::string out;
  for (const auto& [name, n] : sig) {
    if (!out.empty()) out += ", ";
    out += name + (n > 1 ? " x" + std::to_string(n) : "");
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

nlohmann::json cross_check(const std::vector<TracedCall>& calls, double event_median_us, std::string* suspect) {
  std::vector<std::map<std::string, int>> checked;
  std::vector<double> spans, sums;
  int timed = 0, mismatches = 0, first_mismatch = -1;
  std::map<std::string, int> first_sig;
  size_t ops = 0;
  for (const TracedCall& c : calls)
    if (c.kind == CallKind::kChecked) {
      std::map<std::string, int> sig;
      for (const TracedOp& o : c.ops) ++sig[o.name];
      if (std::find(checked.begin(), checked.end(), sig) == checked.end()) checked.push_back(sig);
    }
  for (const TracedCall& c : calls) {
    if (c.kind != CallKind::kTimed) continue;
    std::map<std::string, int> sig;
    uint64_t lo = UINT64_MAX, hi = 0;
    double sum = 0;
    for (const TracedOp& o : c.ops) {
      ++sig[o.name];
      lo = std::min(lo, o.start);
      hi = std::max(hi, o.end);
      sum += double(o.end - o.start) / 1e3;
    }
    ops += c.ops.size();
    spans.push_back(c.ops.empty() ? 0.0 : double(hi - lo) / 1e3);
    sums.push_back(sum);
    if (std::find(checked.begin(), checked.end(), sig) == checked.end()) {
      if (first_mismatch < 0) {
        first_mismatch = timed;
        first_sig = sig;
      }
      ++mismatches;
    }
    ++timed;
  }
  const double span = median(spans);
  nlohmann::json rec = {{"checked_calls", static_cast<int>(calls.size()) - timed}, {"timed_calls", timed},
                        {"distinct_checked_sets", checked.size()}, {"timed_mismatches", mismatches},
                        {"median_span_us", span}, {"median_kernel_us", median(sums)}, {"event_median_us", event_median_us},
                        {"ops_per_timed_call", timed ? double(ops) / timed : 0.0}};
  if (suspect) suspect->clear();
  if (timed > 0 && ops == 0 && suspect) {
    *suspect = "CUPTI recorded no GPU work on the task's stream in any of " + std::to_string(timed) +
               " timed calls (Note [CUPTI cross-check])";
    rec["verdict"] = "no-work";
  } else if (mismatches > 0 && suspect) {
    *suspect = std::to_string(mismatches) + " of " + std::to_string(timed) + " timed calls ran other GPU work than any checked call (timed call " +
               std::to_string(first_mismatch) + ": " + describe(first_sig) + "; the last checked call: " +
               (checked.empty() ? std::string("none recorded") : describe(checked.back())) + ") (Note [CUPTI cross-check])";
    rec["verdict"] = "kernel-set";
  } else if (timed > 0 && span > 0 && event_median_us < 0.8 * span && suspect) {
    *suspect = "the event-timed median " + std::to_string(event_median_us) + " us is below 0.8 x the median span of the timed calls' own "
               "GPU work, " + std::to_string(span) + " us (CUPTI): the events did not time the work (Note [CUPTI cross-check])";
    rec["verdict"] = "event-time";
  } else {
    rec["verdict"] = "consistent";
  }
  return rec;
}

#ifdef FK_HAVE_CUPTI

namespace {

void cupti_ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  throw std::runtime_error(std::string("CUPTI: ") + what + ": " + (s ? s : "unknown error"));
}

constexpr size_t kBufferBytes = 8u << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

struct KernelTrace::Impl {
  struct Raw {
    uint32_t correlation = 0, stream = 0;
    TracedOp op;
  };
  std::mutex mu;                                    // CUPTI delivers buffers on its own thread
  std::map<uint32_t, uint64_t> external;           // correlation id -> call id
  std::vector<Raw> raw;
  uint64_t dropped = 0;
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, TracedCall>> calls;  // call id -> call, in order
  std::map<uint64_t, uint32_t> call_stream;            // call id -> CUPTI stream id

  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }
  static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    Impl* self = g_active ? g_active->impl_.get() : nullptr;
    CUpti_Activity* rec = nullptr;
    if (self) {
      std::lock_guard<std::mutex> lock(self->mu);
      while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) self->parse(rec);
      size_t lost = 0;
      if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS) self->dropped += lost;
    }
    free(buffer);
  }
  void parse(const CUpti_Activity* rec) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        raw.push_back({k->correlationId, k->streamId, {k->name ? k->name : "?", k->start, k->end}});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        raw.push_back({m->correlationId, m->streamId, {"[memcpy]", m->start, m->end}});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        raw.push_back({m->correlationId, m->streamId, {"[memset]", m->start, m->end}});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) external[e->correlationId] = e->externalId;
        break;
      }
      default:
        break;
    }
  }
};

bool KernelTrace::built_with_cupti() { return true; }

KernelTrace::KernelTrace() : impl_(std::make_unique<Impl>()) {
  if (g_active) throw std::logic_error("KernelTrace: one trace at a time");
  cupti_ok(cuptiActivityRegisterCallbacks(Impl::requested, Impl::completed), "register buffer callbacks");
  for (CUpti_ActivityKind k : kKinds) cupti_ok(cuptiActivityEnable(k), "enable an activity kind (is another profiler attached?)");
  g_active = this;
  probe();
}

void KernelTrace::probe() {
  void* scratch = nullptr;
  cudaStream_t s = nullptr;
  if (cudaMalloc(&scratch, 16) != cudaSuccess || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    throw std::runtime_error("fk_bench --cupti: no memory or stream for the trace's probe");
  begin_call(CallKind::kChecked, s);
  const cudaError_t e = cudaMemsetAsync(scratch, 0, 16, s);
  end_call();
  const std::vector<TracedCall> calls = take();
  cudaStreamDestroy(s);
  cudaFree(scratch);
  if (e != cudaSuccess || calls.size() != 1 || calls[0].ops.size() != 1 || calls[0].ops[0].name != "[memset]")
    throw std::runtime_error("fk_bench --cupti: CUPTI did not attribute a probe memset to its traced call (" +
                             std::to_string(calls.empty() ? 0 : calls[0].ops.size()) +
                             " operations came back): the trace cannot judge this machine (Note [CUPTI cross-check])");
}

KernelTrace::~KernelTrace() {
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  g_active = nullptr;
}

void KernelTrace::begin_call(CallKind kind, cudaStream_t stream) {
  uint32_t sid = 0;
  cupti_ok(cuptiGetStreamIdEx(nullptr, reinterpret_cast<CUstream>(stream), 0, &sid), "stream id");
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    id = impl_->next_id++;
    TracedCall c;
    c.kind = kind;
    impl_->calls.push_back({id, std::move(c)});
    impl_->call_stream[id] = sid;
  }
  cupti_ok(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id), "push correlation id");
  open_ = id;
}

void KernelTrace::end_call() {
  uint64_t last = 0;
  cupti_ok(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), "pop correlation id");
  open_ = 0;
}

KernelTrace::Untraced::Untraced() {
  KernelTrace* t = active();
  if (!t || !t->open_ || t->aside_) return;
  uint64_t last = 0;
  if (cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last) != CUPTI_SUCCESS) return;
  t->aside_ = true;
  t_ = t;
}

KernelTrace::Untraced::~Untraced() {
  if (!t_) return;
  cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, t_->open_);
  t_->aside_ = false;
}

std::vector<TracedCall> KernelTrace::take(uint64_t* dropped) {
  cudaDeviceSynchronize();
  cupti_ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < impl_->calls.size(); ++i) index[impl_->calls[i].first] = i;
  for (auto& r : impl_->raw) {
    auto e = impl_->external.find(r.correlation);
    if (e == impl_->external.end()) continue;  // the runner's own work
    auto c = index.find(e->second);
    if (c == index.end() || impl_->call_stream[e->second] != r.stream) continue;  // another take, or a private stream
    impl_->calls[c->second].second.ops.push_back(std::move(r.op));
  }
  std::vector<TracedCall> out;
  for (auto& [id, c] : impl_->calls) {
    std::sort(c.ops.begin(), c.ops.end(), [](const TracedOp& a, const TracedOp& b) { return a.start < b.start; });
    out.push_back(std::move(c));
  }
  if (dropped) *dropped = impl_->dropped;
  impl_->calls.clear();
  impl_->call_stream.clear();
  impl_->raw.clear();
  impl_->external.clear();
  impl_->dropped = 0;
  return out;
}

#else  // no CUPTI in this build

struct KernelTrace::Impl {};
bool KernelTrace::built_with_cupti() { return false; }
KernelTrace::KernelTrace() {
  throw std::runtime_error("fk_bench --cupti: this build has no CUPTI (CMake found no CUDA::cupti); rebuild with the CUDA "
                           "toolkit's CUPTI installed");
}
KernelTrace::~KernelTrace() = default;
void KernelTrace::probe() {}
KernelTrace::Untraced::Untraced() {}
KernelTrace::Untraced::~Untraced() {}
void KernelTrace::begin_call(CallKind, cudaStream_t) {}
void KernelTrace::end_call() {}
std::vector<TracedCall> KernelTrace::take(uint64_t* dropped) {
  if (dropped) *dropped = 0;
  return {};
}

#endif

KernelTrace* KernelTrace::active() { return g_active; }

}  // namespace fk::detail
