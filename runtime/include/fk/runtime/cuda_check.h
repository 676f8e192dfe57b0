// Error checking for CUDA runtime and library calls. Every CUDA call in the runtime, the
// kernels' host code and the generated tasks goes through FK_CUDA_CHECK / FK_CHECK_LAUNCH so
// that a failure names the call, the file and line, and (through fk::TaskScope) the task.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fk {

/// Thrown for every CUDA/runtime failure; the runner turns it into RUNTIME_ERROR for the task.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Name of the task currently being set up, checked or timed (thread-local; "" outside tasks).
const std::string& current_task_name();

/// RAII: marks which task the calls below belong to, so errors can name it.
class TaskScope {
 public:
  explicit TaskScope(std::string name);
  ~TaskScope();
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

 private:
  std::string previous_;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_runtime_error(const std::string& what, const char* file, int line);

}  // namespace fk

#define FK_CUDA_CHECK(expr)                                                     \
  do {                                                                          \
    cudaError_t fk_err_ = (expr);                                               \
    if (fk_err_ != cudaSuccess) ::fk::throw_cuda_error(fk_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch that just happened (configuration errors surface here).
#define FK_CHECK_LAUNCH() FK_CUDA_CHECK(cudaGetLastError())

/// Precondition check with a message; throws fk::CudaError naming the task.
#define FK_CHECK(cond, msg)                                                     \
  do {                                                                          \
    if (!(cond)) ::fk::throw_runtime_error(std::string("check failed: ") + #cond + ": " + (msg), __FILE__, __LINE__); \
  } while (0)
