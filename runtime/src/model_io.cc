// Weights of a whole model as safetensors, by HF name (fk/runtime/model.h).
#include <cuda_runtime.h>

#include <set>
#include <stdexcept>

#include "fk/runtime/cuda_check.h"
#include "fk/runtime/model.h"
#include "fk/runtime/safetensors.h"

namespace fk {

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "U8";
}

void add_device_tensor(SafetensorsWriter& w, const std::string& name, const Tensor& t) {
  FK_CHECK(t.is_contiguous(), "add_device_tensor: " + name + " is not contiguous: " + t.str());
  std::vector<uint8_t> b(t.nbytes());
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  FK_CUDA_CHECK(cudaMemcpy(b.data(), t.data_ptr(), b.size(), cudaMemcpyDeviceToHost));
  w.add(name, safetensors_dtype(t.dtype()), t.sizes(), b.data(), b.size());
}

namespace {
void save_params(const ParamList& params, const std::string& task, int64_t layers, const std::string& path,
                 const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  for (const auto& p : params) add_device_tensor(w, p.name, p.tensor);
  w.set_metadata("task", task);
  w.set_metadata("layers", std::to_string(layers));
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

void load_params(const ParamList& params, const std::string& task, const std::string& path) {
  auto f = SafetensorsFile::open(path);
  std::set<std::string> expected;
  for (const auto& p : params) {
    expected.insert(p.name);
    if (!f.contains(p.name)) throw std::runtime_error(path + ": missing tensor " + p.name);
    const auto& info = f.info(p.name);
    if (info.dtype != safetensors_dtype(p.tensor.dtype()) || info.shape != p.tensor.sizes())
      throw std::runtime_error(path + ": tensor " + p.name + " is " + info.dtype + " with another shape; expected " +
                               safetensors_dtype(p.tensor.dtype()) + " " + p.tensor.str());
    std::vector<uint8_t> b(info.nbytes());
    f.read_into(p.name, b.data(), b.size());
    FK_CUDA_CHECK(cudaMemcpy(p.tensor.data_ptr(), b.data(), b.size(), cudaMemcpyHostToDevice));
  }
  for (const auto& t : f.tensors())
    if (!expected.count(t.name)) throw std::runtime_error(path + ": unexpected tensor " + t.name + " (not a parameter of " + task + ")");
}
}  // namespace

void save_weights(CausalLM& m, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_params(m.named_parameters(), m.task_name(), m.num_layers(), path, metadata);
}
void save_weights(EncoderModel& m, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_params(m.named_parameters(), m.task_name(), m.num_layers(), path, metadata);
}
void save_weights(ImageEncoderModel& m, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_params(m.named_parameters(), m.task_name(), m.num_layers(), path, metadata);
}
void save_weights(VisionTowerModel& m, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_params(m.named_parameters(), m.task_name(), m.num_layers(), path, metadata);
}
void load_weights(VisionTowerModel& m, const std::string& path) { load_params(m.named_parameters(), m.task_name(), path); }
void load_weights(ImageEncoderModel& m, const std::string& path) { load_params(m.named_parameters(), m.task_name(), path); }
void load_weights(CausalLM& m, const std::string& path) { load_params(m.named_parameters(), m.task_name(), path); }
void load_weights(EncoderModel& m, const std::string& path) { load_params(m.named_parameters(), m.task_name(), path); }

}  // namespace fk
