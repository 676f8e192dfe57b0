// A whole model (an L4 task) behind one interface, so that tools that drive models (fk_model:
// generation, parity dumps, end-to-end benchmarks) work with every generated L4 task.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "fk/runtime/tensor.h"

namespace fk {

/// A parameter with its stable (HF transformers) name and its seeded-initialisation scale
/// (Note [Seeded weights] in fk/tasks/llama.h). `tensor` views the module's storage. In a model
/// sharded for tensor parallelism (Note [Sharded parameters] in fk/tasks/llama.h) `tensor` may be
/// this rank's slice of the HF tensor: indices [shard_start, shard_start + tensor.size(shard_dim))
/// of its dimension shard_dim, whose whole extent is shard_full; indices past shard_full are padding
/// (zero: a vocabulary padded to split evenly). shard_dim -1: the whole tensor. shard_parts > 1: the
/// dimension is that many equal blocks side by side (a fused gate | up), each sliced the same way:
/// the rank holds [shard_start, shard_start + n / parts) of every block of shard_full / parts.
struct NamedParam {
  std::string name;
  Tensor tensor;
  float init_mean = 0.f;
  float init_std = 1.f;
  int shard_dim = -1;
  int64_t shard_full = 0;
  int64_t shard_start = 0;
  int64_t shard_parts = 1;
  bool sharded() const { return shard_dim >= 0; }
  /// The HF tensor's shape (tensor's, with shard_full at shard_dim when sharded).
  Shape full_shape() const {
    Shape s = tensor.sizes();
    if (sharded()) s[static_cast<size_t>(shard_dim)] = shard_full;
    return s;
  }
};
using ParamList = std::vector<NamedParam>;
/// Copies this rank's slice of `whole` (a tensor of p.full_shape()) into p.tensor; padding past the
/// whole extent becomes zero (Note [Sharded parameters]).
void copy_shard(const NamedParam& p, const Tensor& whole);

/// A causal language model as vLLM's model runner sees it: forward(input_ids, positions) under
/// a forward context (fk/tasks/forward_context.h) -> hidden states; compute_logits(hidden).
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual std::string task_name() const = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual int64_t max_position() const = 0;
  virtual DType dtype() const = 0;
  /// Every parameter once, HF names, in a fixed order.
  virtual ParamList named_parameters() = 0;
  /// (Re)allocates every layer's KV cache for up to max_seqs sequences of max_len tokens.
  virtual void allocate_kv_cache(int64_t max_seqs, int64_t max_len) = 0;
  virtual Tensor forward(const Tensor& input_ids, const Tensor& positions) = 0;
  /// A VLM's text model (vLLM's get_input_embeddings / forward(inputs_embeds=...)): the token
  /// embeddings of input_ids [T, H], and the decoder over given embeddings (positions [T], or [3, T]
  /// for multimodal rope). Models that take no input embeddings say so.
  virtual bool takes_input_embeddings() const { return false; }
  virtual Tensor embed(const Tensor& input_ids) {
    (void)input_ids;
    throw std::runtime_error(task_name() + " takes no input embeddings");
  }
  /// deepstack (Qwen3-VL): features added to the hidden states at the rows deepstack_rows after the first
  /// deepstack.size() layers (Note [DeepStack] in fk/runtime/engine.h); empty for other models.
  virtual Tensor forward_embeds(const Tensor& inputs_embeds, const Tensor& positions, const Tensor& deepstack_rows = Tensor(),
                                const std::vector<Tensor>& deepstack = {}) {
    (void)inputs_embeds, (void)positions, (void)deepstack_rows, (void)deepstack;
    throw std::runtime_error(task_name() + " takes no input embeddings");
  }
  virtual Tensor compute_logits(const Tensor& hidden_states) = 0;
  /// The composite fp32 reference of the whole model (runtime reference operators only, no task
  /// kernel; Note [Composite references] in fk/tasks/llama.h) over a prefill of whole sequences:
  /// call it under the forward context of that prefill (cu_seqlens, slot_mapping as for forward;
  /// it overwrites the KV cache at those slots). Returns fp32 logits [rows.numel(), V] of the
  /// token rows `rows` (i32). cu_seqlens is the host copy of the context's offsets.
  virtual Tensor reference_logits(const Tensor& input_ids, const Tensor& positions, const std::vector<int32_t>& cu_seqlens,
                                  const Tensor& rows) = 0;
};

/// An encoder (an embedding model's backbone) as vLLM's pooling runner sees it: forward over a
/// batch of whole sequences under a prefill forward context (cu_seqlens) -> hidden states [T, H];
/// pool(hidden) -> one vector per sequence [B, H] (BERT's pooler on each first token).
class EncoderModel {
 public:
  virtual ~EncoderModel() = default;
  virtual std::string task_name() const = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual int64_t max_position() const = 0;  ///< longest sequence
  virtual int64_t type_vocab_size() const = 0;  ///< 0: the model takes no token types
  /// Row of position 0 in the position table: 0 (BERT) or padding_idx + 1 (RoBERTa-style; HF
  /// derives positions from the ids there, so inputs must not contain padding_idx).
  virtual int64_t position_offset() const = 0;
  /// What pool() returns: "pooler" (the checkpoint's BertPooler: tanh(dense(first token))), or the
  /// pooling choice "cls" / "mean" / "last", with "+normalize" when L2-normalised.
  virtual std::string pooling() const = 0;
  virtual DType dtype() const = 0;
  /// Every parameter once, HF names, in a fixed order.
  virtual ParamList named_parameters() = 0;
  /// Whether forward takes encoder_hidden_states: a decoder whose layers cross-attend to an
  /// encoder's output (BERT as bert2bert's decoder); the forward context then names the encoder's
  /// sequences (AttnMetadata::encoder_cu_seqlens).
  virtual bool cross_attention() const { return false; }
  /// token_type_ids may be undefined (all 0). layer_outputs (optional) gets each layer's output.
  /// encoder_hidden_states [Tk, hidden]: required with cross_attention(), else undefined.
  virtual Tensor forward(const Tensor& input_ids, const Tensor& positions, const Tensor& token_type_ids,
                         std::vector<Tensor>* layer_outputs = nullptr, const Tensor& encoder_hidden_states = Tensor()) = 0;
  virtual Tensor pool(const Tensor& hidden_states) = 0;
  /// The per-token heads (Note [Embedding heads]; `add --multi-vector`, `--sparse`): the width of
  /// the token vectors (0: none), whether there are lexical weights, and whether both drop special
  /// tokens (the vectors each sequence's first token, the weights its first and last).
  virtual int64_t multi_vector_dim() const { return 0; }
  virtual bool sparse() const { return false; }
  virtual bool drop_special_tokens() const { return false; }
  /// normalize(colbert_linear(h)) per kept token [T', multi_vector_dim] (the model dtype).
  virtual Tensor token_embed(const Tensor& hidden_states) = 0;
  /// relu(sparse_linear(h)) per kept token [T''] (the model dtype).
  virtual Tensor token_weights(const Tensor& hidden_states) = 0;
};

/// An image encoder (a vision transformer's backbone: ViT) as a vision tower is called: forward
/// over a batch of whole images [B, C, S, S] (NCHW, the model dtype) -> hidden states
/// [B * tokens_per_image, H] after the final norm, one sequence per image; pool(hidden) -> one
/// vector per image [B, pooled_size]. The forward context is set by the callee.
class ImageEncoderModel {
 public:
  virtual ~ImageEncoderModel() = default;
  virtual std::string task_name() const = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual int64_t pooled_size() const = 0;
  virtual int64_t num_channels() const = 0;
  virtual int64_t image_size() const = 0;        ///< square images of image_size x image_size pixels
  virtual int64_t tokens_per_image() const = 0;  ///< patches + class token
  virtual DType dtype() const = 0;
  /// Every parameter once, HF names, in a fixed order.
  virtual ParamList named_parameters() = 0;
  /// layer_outputs (optional) gets each layer's output (before the final norm).
  virtual Tensor forward(const Tensor& pixel_values, std::vector<Tensor>* layer_outputs = nullptr) = 0;
  virtual Tensor pool(const Tensor& hidden_states) = 0;
};

/// A dynamic-resolution vision tower (Qwen2-VL's) as a VLM calls it: forward over the image
/// processor's patch rows [L, patch_dim] (the model dtype) of images with grids (t, h, w) in
/// patches (Note [Vision grids] in fk/tasks/qwen2_vl.h) -> the blocks' output [L, hidden_size];
/// merge(hidden) -> the tokens the language model reads [L / merge_size^2, out_hidden_size].
class VisionTowerModel {
 public:
  virtual ~VisionTowerModel() = default;
  virtual std::string task_name() const = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t hidden_size() const = 0;      ///< the tower's width
  virtual int64_t out_hidden_size() const = 0;  ///< the merged tokens' width
  virtual int64_t patch_dim() const = 0;        ///< C * temporal_patch_size * patch_size^2
  virtual int64_t patch_size() const = 0;
  virtual int64_t merge_size() const = 0;
  virtual int64_t bench_grid() const = 0;  ///< patches per side of the served image size (the benchmark images)
  virtual DType dtype() const = 0;
  /// Every parameter once, HF names, in a fixed order.
  virtual ParamList named_parameters() = 0;
  /// grid_thw: one (t, h, w) per image; layer_outputs (optional) gets each block's output.
  virtual Tensor forward(const Tensor& pixel_values, const std::vector<std::array<int64_t, 3>>& grid_thw,
                         std::vector<Tensor>* layer_outputs = nullptr) = 0;
  virtual Tensor merge(const Tensor& hidden_states) = 0;
  /// Qwen3-VL's deepstack features of the last forward: one [L / merge_size^2, out_hidden_size] per block of
  /// deepstack_visual_indexes the tower has (processor order); none for the other towers.
  virtual std::vector<Tensor> deepstack_features() { return {}; }
  /// The deepstack_visual_indexes of the config (0: no deepstack; the text model must add the features).
  virtual int64_t deepstack_layers() const { return 0; }
  /// Whether the tower pools each image into one vector (SigLIP-2's attention-pooling head); pool(hidden)
  /// of the last forward -> [images, out_hidden_size] where it does.
  virtual bool has_pool() const { return false; }
  virtual Tensor pool(const Tensor&) { throw std::runtime_error(task_name() + ": this vision tower has no pooled output"); }
  /// The grids (t, h, w) a parity dump takes when none are given: the served size, two smaller images and
  /// a two-frame video of one merge window a side.
  virtual std::vector<std::array<int64_t, 3>> default_grids() const {
    const int64_t g = bench_grid(), k = merge_size();
    return {{1, g, g}, {1, std::max<int64_t>(k, g / 2 / k * k), std::max<int64_t>(k, (3 * g / 4) / k * k)}, {2, 2 * k, 2 * k}};
  }
};

class SafetensorsWriter;

/// The safetensors dtype string of a runtime dtype ("BF16", "F32", ...).
const char* safetensors_dtype(DType d);
/// Adds a (contiguous) device tensor to a safetensors writer; copies it to the host.
void add_device_tensor(SafetensorsWriter& w, const std::string& name, const Tensor& t);
/// Writes every parameter of `m` by its HF name, with "task" and "layers" and `metadata` in
/// "__metadata__" (the weights file of docs/parity.md).
void save_weights(CausalLM& m, const std::string& path, const std::map<std::string, std::string>& metadata = {});
void save_weights(EncoderModel& m, const std::string& path, const std::map<std::string, std::string>& metadata = {});
void save_weights(ImageEncoderModel& m, const std::string& path, const std::map<std::string, std::string>& metadata = {});
void save_weights(VisionTowerModel& m, const std::string& path, const std::map<std::string, std::string>& metadata = {});
/// Loads every parameter of `m` from a safetensors file: each name must be there with the
/// parameter's dtype and shape, and the file may hold nothing else; errors name the file and tensor.
void load_weights(CausalLM& m, const std::string& path);
void load_weights(EncoderModel& m, const std::string& path);
void load_weights(ImageEncoderModel& m, const std::string& path);
void load_weights(VisionTowerModel& m, const std::string& path);

}  // namespace fk
