// The forward context (fk/tasks/forward_context.h).
#include "fk/tasks/forward_context.h"

#include <cuda_runtime.h>

#include <utility>

namespace fk::tasks {

namespace {
thread_local const AttnMetadata* g_context = nullptr;
LayerHook& layer_hook() {
  static LayerHook h;
  return h;
}
}  // namespace

const AttnMetadata& forward_context() {
  FK_CHECK(g_context != nullptr, "no forward context: attention layers need attention metadata "
                                 "(set it with fk::tasks::ForwardContextGuard, as vLLM's set_forward_context)");
  return *g_context;
}

bool has_forward_context() { return g_context != nullptr; }

ForwardContextGuard::ForwardContextGuard(const AttnMetadata* m) : prev_(g_context) { g_context = m; }
ForwardContextGuard::~ForwardContextGuard() { g_context = prev_; }

void set_layer_hook(LayerHook hook) { layer_hook() = std::move(hook); }

void call_layer_hook(int layer, const Tensor& hidden_states, const Tensor& residual) {
  if (layer_hook()) layer_hook()(layer, hidden_states, residual);
}

Tensor contiguous_rows(const Tensor& t) {
  FK_CHECK(t.dim() == 2 && t.stride(1) == 1 && t.stride(0) >= t.size(1), "contiguous_rows: 2-D rows expected, got " + t.str());
  if (t.is_contiguous()) return t;
  Tensor out = empty(t.sizes(), t.dtype());
  const size_t es = dtype_size(t.dtype());
  FK_CUDA_CHECK(cudaMemcpy2DAsync(out.data_ptr(), t.size(1) * es, t.data_ptr(), t.stride(0) * es, t.size(1) * es,
                                  t.size(0), cudaMemcpyDeviceToDevice, current_stream()));
  return out;
}

}  // namespace fk::tasks
