// The CUPTI activity cross-check of fk_bench --cupti (Note [CUPTI cross-check]). Internal to the
// runtime: task code cannot see whether a trace is active (no public header declares it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fk::detail {

enum class CallKind : uint8_t { kChecked = 1, kTimed = 2 };

/// One GPU operation of a call on the call's stream: a kernel (its name), "[memcpy]" or "[memset]".
struct TracedOp {
  std::string name;
  uint64_t start = 0, end = 0;  ///< ns, the GPU's clock
};

struct TracedCall {
  CallKind kind = CallKind::kChecked;
  std::vector<TracedOp> ops;
};

/// Kernel, memcpy and memset activity of task calls (CUPTI), attributed to each call by an
/// external correlation id pushed around it; only operations on the call's stream count.
class KernelTrace {
 public:
  /// True when the runtime was built with CUPTI (FK_HAVE_CUPTI).
  static bool built_with_cupti();
  /// The trace task calls report to, or nullptr.
  static KernelTrace* active();
  /// Enables the activity kinds, makes this the active trace and proves it with a probe; throws
  /// when CUPTI is missing, refuses (another profiler attached, say) or attributes nothing, naming why.
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  void begin_call(CallKind kind, cudaStream_t stream);
  void end_call();
  /// Waits for the device, flushes CUPTI's buffers and returns the calls begun since the last
  /// take, in order; `dropped` receives the records CUPTI reported lost.
  std::vector<TracedCall> take(uint64_t* dropped = nullptr);

  /// Runtime work launched inside a call (the allocator's poison and guard fills, the guard check
  /// of a guarded tensor freed there) is not the call's: it runs with the call's id set aside.
  class Untraced {
   public:
    Untraced();
    ~Untraced();
    Untraced(const Untraced&) = delete;
    Untraced& operator=(const Untraced&) = delete;

   private:
    KernelTrace* t_ = nullptr;
  };

  struct Impl;

 private:
  void probe();
  uint64_t open_ = 0;   ///< the id of the call begun and not ended, or 0
  bool aside_ = false;  ///< an Untraced scope has set open_ aside
  std::unique_ptr<Impl> impl_;
};

/// The verdict on one case's calls (host-only): timed calls must have run something, every timed call a multiset of
/// operations that some checked call ran, and the event-timed median must not be shorter than the
/// kernels' own median span. Returns the record for "cupti"; `suspect` gets a message when not.
nlohmann::json cross_check(const std::vector<TracedCall>& calls, double event_median_us, std::string* suspect);

}  // namespace fk::detail
