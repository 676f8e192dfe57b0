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
  FK_CHECK(whole.is_contiguous(), "copy_shard: " + p.name + ": the whole tensor must be contiguous");
  if (!p.sharded()) {
    Tensor dst = p.tensor;
    copy_(dst, whole);
    return;
  }
  const int dim = p.shard_dim;
  const int64_t n = p.tensor.size(dim), parts = p.shard_parts;
  if (dim == 0 && parts == 1) {  // rows, the last ones possibly padding
    const int64_t valid = std::clamp<int64_t>(p.shard_full - p.shard_start, 0, n);
    if (valid > 0) copy_strided_(p.tensor.narrow_first(0, valid), whole.narrow_first(p.shard_start, valid));
    if (valid < n) {
      Tensor pad = p.tensor.narrow_first(valid, n - valid);
      FK_CUDA_CHECK(cudaMemsetAsync(pad.data_ptr(), 0, pad.nbytes(), current_stream()));
    }
    return;
  }
  // Any dimension, `parts` blocks: both viewed as [outer, parts, block, inner]; no padding here.
  FK_CHECK(parts >= 1 && n % parts == 0 && p.shard_full % parts == 0 && p.shard_start + n / parts <= p.shard_full / parts,
           "copy_shard: " + p.name + ": a slice of " + std::to_string(n) + " in " + std::to_string(parts) + " blocks from " +
               std::to_string(p.shard_start) + " does not fit " + std::to_string(p.shard_full));
  FK_CHECK(p.tensor.is_contiguous(), "copy_shard: " + p.name + ": this rank's tensor must be contiguous");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= p.tensor.size(d);
  for (int d = dim + 1; d < p.tensor.dim(); ++d) inner *= p.tensor.size(d);
  const int64_t block = n / parts, whole_block = p.shard_full / parts;
  copy_strided_(p.tensor.view({outer, parts, block, inner}),
                whole.as_strided({outer, parts, block, inner}, {p.shard_full * inner, whole_block * inner, inner, 1}, p.shard_start * inner));
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
