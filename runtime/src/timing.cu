// CUDA-event timing with cold L2, stopping rule, graph replay timing, copy bandwidth.
#include <algorithm>
#include <cmath>

#include "fk/runtime/cuda_check.h"
#include "fk/runtime/timing.h"

namespace fk {

L2Flusher::L2Flusher() {
  int dev = 0, l2 = 0;
  FK_CUDA_CHECK(cudaGetDevice(&dev));
  FK_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  bytes_ = std::max<size_t>(size_t(256) << 20, size_t(l2) * 4);
  FK_CUDA_CHECK(cudaMalloc(&buf_, bytes_));
}

L2Flusher::~L2Flusher() { cudaFree(buf_); }

// Note [Persisting L2]
// Hopper can set aside part of the L2 for "persisting" lines (cudaLimitPersistingL2CacheSize plus
// an access-policy window on a stream or a launch): lines marked so survive ordinary traffic, and
// so the flush. A task that marks its weights persisting would start every timed call with them
// in L2. Before every flush the runner therefore puts the lines marked persisting back to normal
// (cudaCtxResetPersistingL2Cache) and clears the access-policy window of the task's stream; the
// runner also reports a task that leaves a persisting limit set (SUSPECT persisting-l2).
void L2Flusher::flush(cudaStream_t s) {
  cudaStreamAttrValue none{};
  none.accessPolicyWindow.num_bytes = 0;
  FK_CUDA_CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &none));
  FK_CUDA_CHECK(cudaCtxResetPersistingL2Cache());
  FK_CUDA_CHECK(cudaMemsetAsync(buf_, 0, bytes_, s));
}

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

TimingResult summarise(const std::vector<double>& us) {
  TimingResult r;
  r.iters = static_cast<int>(us.size());
  if (us.empty()) return r;
  r.median_us = median_of(us);
  r.min_us = *std::min_element(us.begin(), us.end());
  r.max_us = *std::max_element(us.begin(), us.end());
  return r;
}
}  // namespace

TimingResult time_calls(const std::function<void(int)>& call, cudaStream_t stream, L2Flusher& flusher,
                        const TimingOptions& opt, const CallHooks& hooks) {
  for (int i = 0; i < opt.warmup; ++i) {
    if (hooks.before) hooks.before(i, -1);
    if (opt.flush_l2) flusher.flush(stream);
    call(i);
  }
  FK_CUDA_CHECK(cudaStreamSynchronize(stream));
  constexpr int kMaxBatch = CallHooks::kMaxBatch;
  std::vector<cudaEvent_t> ev(2 * kMaxBatch);
  for (auto& e : ev) FK_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<double> us;
  double total_ms = 0, last_median = -1;
  int it = 0;
  try {
    for (int batch = 0; it < opt.max_iters; ++batch) {
      const int want = hooks.batch_size ? std::clamp(hooks.batch_size(batch), 1, kMaxBatch) : 10;
      const int n = std::min(want, opt.max_iters - it);
      for (int b = 0; b < n; ++b) {
        if (hooks.before) hooks.before(it + b, b);
        if (opt.flush_l2) flusher.flush(stream);
        FK_CUDA_CHECK(cudaEventRecord(ev[2 * b], stream));
        call(it + b);
        FK_CUDA_CHECK(cudaEventRecord(ev[2 * b + 1], stream));
        if (hooks.after) hooks.after(it + b, b);
      }
      FK_CUDA_CHECK(cudaStreamSynchronize(stream));
      for (int b = 0; b < n; ++b) {
        float ms = 0;
        FK_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * b], ev[2 * b + 1]));
        us.push_back(ms * 1e3);
        total_ms += ms;
      }
      it += n;
      if (hooks.after_batch && hooks.after_batch(it - n, n)) break;
      if (it < opt.min_iters) continue;
      const double med = median_of(us);
      if (total_ms >= opt.target_ms) break;
      if (last_median > 0 && std::fabs(med - last_median) <= opt.stable_rel * last_median && it >= 30) break;
      last_median = med;
    }
  } catch (...) {
    for (auto& e : ev) cudaEventDestroy(e);
    throw;
  }
  for (auto& e : ev) FK_CUDA_CHECK(cudaEventDestroy(e));
  return summarise(us);
}

TimingResult time_graph(const std::function<void(int)>& call, cudaStream_t stream, int per_graph, int replays) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FK_CUDA_CHECK(cudaStreamSynchronize(stream));
  FK_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  try {
    for (int i = 0; i < per_graph; ++i) call(i);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  FK_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FK_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  FK_CUDA_CHECK(cudaEventCreate(&a));
  FK_CUDA_CHECK(cudaEventCreate(&b));
  FK_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<double> us;
  for (int r = 0; r < replays; ++r) {
    FK_CUDA_CHECK(cudaEventRecord(a, stream));
    FK_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FK_CUDA_CHECK(cudaEventRecord(b, stream));
    FK_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FK_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1e3 / per_graph);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return summarise(us);
}

double measure_copy_tbps(cudaStream_t stream, size_t bytes) {
  void *src = nullptr, *dst = nullptr;
  FK_CUDA_CHECK(cudaMalloc(&src, bytes));
  FK_CUDA_CHECK(cudaMalloc(&dst, bytes));
  FK_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, stream));
  cudaEvent_t a, b;
  FK_CUDA_CHECK(cudaEventCreate(&a));
  FK_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < 12; ++i) {
    FK_CUDA_CHECK(cudaEventRecord(a, stream));
    FK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    FK_CUDA_CHECK(cudaEventRecord(b, stream));
    FK_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FK_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) us.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(src);
  cudaFree(dst);
  const double med = median_of(us);
  return 2.0 * double(bytes) / (med * 1e-6) / 1e12;
}

}  // namespace fk
