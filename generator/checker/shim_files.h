// The CUDA shim headers (generator/checker/shim/*.h), embedded at configure time.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fk::check {
/// (file name, contents) of every shim header.
const std::vector<std::pair<std::string, std::string>>& shim_files();
}  // namespace fk::check
