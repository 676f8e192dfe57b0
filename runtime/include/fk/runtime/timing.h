// Timing method (DESIGN.md "The runtime's method"): CUDA events on the task's own stream, the
// L2 flushed before every timed call, rotating input sets, warm-up, median with min/max and a
// stopping rule; optional CUDA-graph timing for launch-bound calls.
#pragma once

#include <functional>
#include <vector>

#include <cuda_runtime.h>

namespace fk {

struct TimingOptions {
  int warmup = 3;
  int min_iters = 10;
  int max_iters = 200;
  double target_ms = 60.0;   ///< stop once this much kernel time was measured (after min_iters)
  double stable_rel = 0.01;  ///< or once the running median moved less than this over the last 10
  bool flush_l2 = true;
};

/// What the runner does around timed calls (Note [Timed calls are checked] in runner.cc). Every
/// hook runs outside the timed events; any may be empty.
struct CallHooks {
  /// Before call `i` (and before the L2 flush); `slot` is its index in the batch, -1 for warm-ups.
  std::function<void(int i, int slot)> before;
  /// After call `i`'s end event.
  std::function<void(int i, int slot)> after;
  /// After a batch of calls [first, first + n) has finished (the stream was synchronised);
  /// returns true to stop timing.
  std::function<bool(int first, int n)> after_batch;
  /// The number of calls in batch `b` (1..kMaxBatch); default 10.
  std::function<int(int b)> batch_size;
  static constexpr int kMaxBatch = 16;
};

struct TimingResult {
  double median_us = 0, min_us = 0, max_us = 0;
  int iters = 0;
};

/// Writes a buffer larger than the L2 before timed calls so every call starts cold.
class L2Flusher {
 public:
  L2Flusher();
  ~L2Flusher();
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  /// Resets persisting L2 lines and the stream's access-policy window, then overwrites the L2
  /// (Note [Persisting L2] in timing.cu).
  void flush(cudaStream_t s);
  size_t bytes() const { return bytes_; }

 private:
  void* buf_ = nullptr;
  size_t bytes_ = 0;
};

/// Times `call(i)` (i = iteration index, for rotating sets) on `stream`, with `hooks` around
/// the calls.
TimingResult time_calls(const std::function<void(int)>& call, cudaStream_t stream, L2Flusher& flusher,
                        const TimingOptions& opt, const CallHooks& hooks = {});

/// Captures `per_graph` consecutive calls into a CUDA graph and times its replays (warm L2,
/// no launch gaps); returns microseconds per call. Throws if the call cannot be captured.
TimingResult time_graph(const std::function<void(int)>& call, cudaStream_t stream, int per_graph, int replays);

/// Device-to-device copy bandwidth (bytes read + written per second, TB/s) for `bytes` bytes.
double measure_copy_tbps(cudaStream_t stream, size_t bytes = size_t(1) << 30);

}  // namespace fk
