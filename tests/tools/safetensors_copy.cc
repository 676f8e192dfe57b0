// Test tool for the safetensors cross-check (tests/tools/safetensors_crosscheck.py): reads IN with
// fk::SafetensorsFile (full validation) and writes every tensor and the metadata to OUT with
// fk::SafetensorsWriter. Prints one line per tensor: name dtype shape nbytes.
// Exit codes: 0 copied, 1 a SafetensorsError (message on stderr), 2 usage.
#include <cstdio>
#include <string>

#include "fk/runtime/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
    return 2;
  }
  try {
    const fk::SafetensorsFile in = fk::SafetensorsFile::open(argv[1]);
    fk::SafetensorsWriter out;
    for (const auto& [k, v] : in.metadata()) out.set_metadata(k, v);
    for (const fk::StTensorInfo& t : in.tensors()) {
      const std::vector<uint8_t> bytes = in.read(t.name);
      out.add(t.name, t.dtype, t.shape, bytes.data(), bytes.size());
      std::string shape;
      for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      std::printf("%s %s [%s] %zu\n", t.name.c_str(), t.dtype.c_str(), shape.c_str(), bytes.size());
    }
    out.write(argv[2]);
  } catch (const fk::SafetensorsError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
