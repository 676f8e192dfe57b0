// Error reporting, task scopes, shape cases, tolerances and the task registry.
#include <algorithm>
#include <map>
#include <sstream>

#include "fk/runtime/cuda_check.h"
#include "fk/runtime/task.h"

namespace fk {

namespace {
thread_local std::string g_task_name;

std::map<std::string, TaskInfo>& registry() {
  static std::map<std::string, TaskInfo> r;
  return r;
}

std::string where(const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line;
  if (!g_task_name.empty()) os << " (task " << g_task_name << ")";
  return os.str();
}
}  // namespace

const std::string& current_task_name() { return g_task_name; }

TaskScope::TaskScope(std::string name) : previous_(std::move(g_task_name)) { g_task_name = std::move(name); }
TaskScope::~TaskScope() { g_task_name = std::move(previous_); }

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw CudaError(where(file, line) + ": " + expr + " failed: " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ")");
}

void throw_runtime_error(const std::string& what, const char* file, int line) {
  throw CudaError(where(file, line) + ": " + what);
}

int64_t ShapeCase::get(const std::string& key) const {
  for (const auto& [k, v] : dims)
    if (k == key) return v;
  throw std::runtime_error("shape case '" + name + "' has no dimension '" + key + "'");
}

bool ShapeCase::has(const std::string& key) const {
  return std::any_of(dims.begin(), dims.end(), [&](const auto& kv) { return kv.first == key; });
}

Tolerance default_tolerance(DType d) {
  switch (d) {
    case DType::kBF16: return {1e-2, 1.6e-2, 8e-3};  // 8 mantissa bits: one ulp is 2^-8 relative
    // 11 bits: rtol two ulps (2^-9) as bf16's is about two of its own, since outputs that round twice
    // (x * inv_rms, then the weight) land two ulps away (fused_add_rms_norm, Llama-2 fp16: 1-2 in 4M
    // elements at 1.3 ulps with rtol 1e-3).
    case DType::kF16: return {1e-3, 2e-3, 1e-3};
    case DType::kF32: return {1e-5, 1.3e-6 * 100, 1e-5};
    default: return {0, 0, 0};  // integers: exact
  }
}

bool register_task(TaskInfo info) {
  auto& r = registry();
  if (r.count(info.name)) {
    // Note [Task naming]: a name is an identity; two sources claiming it is a generator bug.
    throw std::logic_error("task '" + info.name + "' registered twice (" + r[info.name].source + " and " +
                           info.source + ")");
  }
  std::string name = info.name;
  r.emplace(std::move(name), std::move(info));
  return true;
}

std::vector<const TaskInfo*> all_tasks() {
  std::vector<const TaskInfo*> out;
  for (const auto& [name, info] : registry()) out.push_back(&info);
  return out;
}

}  // namespace fk
