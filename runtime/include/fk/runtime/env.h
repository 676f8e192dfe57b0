// The environment block written at the head of every results file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fk {

struct ClockReading {
  int sm_mhz = -1;   ///< -1 when NVML is unavailable
  int mem_mhz = -1;
};

/// SM and memory clocks as NVML reports them now (NVML loaded with dlopen; optional).
ClockReading read_clocks(int device);

/// GPU name, SM count, L2, memory, driver and runtime versions, cuBLAS/cuDNN versions, commit.
nlohmann::json environment_json(int device);

/// The commit the binary was built from (FK_GIT_COMMIT at build time, else $FK_COMMIT, else "unknown").
std::string build_commit();

}  // namespace fk
