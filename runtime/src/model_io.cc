// Weights of a whole model as safetensors, by HF name (fk/runtime/model.h).
#include <cuda_runtime.h>

#include <algorithm>
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
std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
}  // namespace

void copy_shard(const NamedParam& p, const Tensor& whole) {
  FK_CHECK(whole.sizes() == p.full_shape(), "copy_shard: " + p.name + ": " + whole.str() + " is not the whole parameter");
  if (!p.sharded()) {
    Tensor dst = p.tensor;
    copy_(dst, whole);
    return;
  }
  const int dim = p.shard_dim, last = p.tensor.dim() - 1;
  const int64_t n = p.tensor.size(dim), valid = std::clamp<int64_t>(p.shard_full - p.shard_start, 0, n);
  FK_CHECK(dim == 0 || dim == last, "copy_shard: " + p.name + ": shards split the first or the last dimension, not " + std::to_string(dim));
  FK_CHECK(dim == 0 || valid == n, "copy_shard: " + p.name + ": only the first dimension may be padded");
  if (dim == 0) {
    if (valid > 0) copy_strided_(p.tensor.narrow_first(0, valid), whole.narrow_first(p.shard_start, valid));
    if (valid < n) {
      Tensor pad = p.tensor.narrow_first(valid, n - valid);
      FK_CUDA_CHECK(cudaMemsetAsync(pad.data_ptr(), 0, pad.nbytes(), current_stream()));
    }
  } else {
    copy_strided_(p.tensor, whole.narrow_last(p.shard_start, n));
  }
}

namespace {
void save_params(const ParamList& params, const std::string& task, int64_t layers, const std::string& path,
                 const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  for (const auto& p : params) {
    if (p.sharded())
      throw std::runtime_error("save_weights: " + task + " is sharded for tensor parallelism (" + p.name +
                               " is this rank's slice); save the unsharded model's weights and load them into every rank");
    add_device_tensor(w, p.name, p.tensor);
  }
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
    const Shape full = p.full_shape();
    if (info.dtype != safetensors_dtype(p.tensor.dtype()) || info.shape != full)
      throw std::runtime_error(path + ": tensor " + p.name + " is " + info.dtype + " with another shape; expected " +
                               safetensors_dtype(p.tensor.dtype()) + " " + shape_text(full) +
                               (p.sharded() ? " (the whole tensor; this rank keeps its slice)" : ""));
    std::vector<uint8_t> b(info.nbytes());
    f.read_into(p.name, b.data(), b.size());
    if (!p.sharded()) {
      FK_CUDA_CHECK(cudaMemcpy(p.tensor.data_ptr(), b.data(), b.size(), cudaMemcpyHostToDevice));
      continue;
    }
    Tensor whole = empty(full, p.tensor.dtype());  // the whole tensor on the device, then this rank's slice
    FK_CUDA_CHECK(cudaMemcpy(whole.data_ptr(), b.data(), b.size(), cudaMemcpyHostToDevice));
    copy_shard(p, whole);
    FK_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
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
