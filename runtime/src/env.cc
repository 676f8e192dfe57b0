// Environment block: device properties, versions, clocks (NVML through dlopen, optional), commit.
#include <dlfcn.h>

#include <cstdlib>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "fk/runtime/cuda_check.h"
#include "fk/runtime/env.h"

namespace fk {

namespace {
// The few NVML entry points we use, declared here so no NVML header or library is needed to build.
using nvmlDevice_t = void*;
struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  int (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  int (*driver)(char*, unsigned) = nullptr;
  bool ok = false;
};

Nvml& nvml() {
  static Nvml n = [] {
    Nvml m;
    m.lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!m.lib) return m;
    m.init = reinterpret_cast<int (*)()>(dlsym(m.lib, "nvmlInit_v2"));
    m.handle = reinterpret_cast<int (*)(unsigned, nvmlDevice_t*)>(dlsym(m.lib, "nvmlDeviceGetHandleByIndex_v2"));
    m.clock = reinterpret_cast<int (*)(nvmlDevice_t, int, unsigned*)>(dlsym(m.lib, "nvmlDeviceGetClockInfo"));
    m.driver = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(m.lib, "nvmlSystemGetDriverVersion"));
    m.ok = m.init && m.handle && m.clock && m.init() == 0;
    return m;
  }();
  return n;
}
}  // namespace

ClockReading read_clocks(int device) {
  ClockReading r;
  Nvml& n = nvml();
  if (!n.ok) return r;
  nvmlDevice_t h = nullptr;
  if (n.handle(static_cast<unsigned>(device), &h) != 0) return r;
  unsigned mhz = 0;
  if (n.clock(h, /*NVML_CLOCK_SM*/ 1, &mhz) == 0) r.sm_mhz = static_cast<int>(mhz);
  if (n.clock(h, /*NVML_CLOCK_MEM*/ 2, &mhz) == 0) r.mem_mhz = static_cast<int>(mhz);
  return r;
}

std::string build_commit() {
#ifdef FK_GIT_COMMIT
  if (std::string(FK_GIT_COMMIT) != "") return FK_GIT_COMMIT;
#endif
  if (const char* c = std::getenv("FK_COMMIT")) return c;
  return "unknown";
}

nlohmann::json environment_json(int device) {
  cudaDeviceProp p{};
  FK_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  int driver = 0, runtime = 0, sm_clock_khz = 0, mem_clock_khz = 0;
  FK_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FK_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device);
  nlohmann::json j;
  j["gpu"] = p.name;
  j["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
  j["sm_count"] = p.multiProcessorCount;
  j["l2_bytes"] = p.l2CacheSize;
  j["memory_bytes"] = p.totalGlobalMem;
  j["cuda_driver"] = driver;
  j["cuda_runtime"] = runtime;
  j["cublaslt"] = cublasLtGetVersion();
  j["max_sm_clock_mhz"] = sm_clock_khz / 1000;
  j["max_mem_clock_mhz"] = mem_clock_khz / 1000;
  Nvml& n = nvml();
  if (n.ok && n.driver) {
    char buf[96] = {0};
    if (n.driver(buf, sizeof buf) == 0) j["driver_version"] = buf;
  }
  j["commit"] = build_commit();
  return j;
}

}  // namespace fk
