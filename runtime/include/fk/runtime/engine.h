// A small greedy-generation engine over any CausalLM (an L4 task): variable-length prefill,
// decode steps over the KV cache, optionally replayed from a CUDA graph per batch size.
//
// Note [Decode graphs]
// A decode step reads only persistent device buffers (token ids, positions, slots, KV lengths)
// and ends with a kernel that picks each sequence's greedy token and advances those buffers,
// so step after step is the same GPU work: the step is captured once per batch size (after one
// eager step, which also settles every measured GEMM choice) and replayed with no host work.
// Graph memory: the step runs on the engine's own stream; the caching allocator keys free
// blocks by stream, so blocks the captured step used (and freed) are only handed out again to
// work on this stream, which is stream-ordered with the replays. Every persistent buffer is
// allocated before capture; nothing allocated on this stream after a capture may outlive a
// replay (the engine allocates nothing after capture).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <map>
#include <vector>

#include "fk/runtime/model.h"
#include "fk/tasks/forward_context.h"

namespace fk {

class Engine {
 public:
  /// Allocates the model's KV cache and the step buffers for up to max_seqs x max_len tokens.
  Engine(CausalLM& model, int64_t max_seqs, int64_t max_len, int64_t max_steps);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Prefill of one prompt per sequence (token ids); picks token 0 of every sequence.
  /// Returns the last-token logits [B, V] (model dtype).
  Tensor prefill(const std::vector<std::vector<int64_t>>& prompts);
  /// Note [Multimodal prefill]
  /// A VLM's prefill (vLLM's get_input_embeddings + forward(inputs_embeds), HF's
  /// Qwen2VLForConditionalGeneration): the prompts' token embeddings with the image features
  /// written over the rows of the image tokens, at multimodal-rope positions [3, T] (the prompts
  /// packed in order; get_rope_index), then decode at next_positions[b] + s for step s (the text
  /// position after the prompt: its largest position + 1, which the image grid makes less than the
  /// prompt's length; the KV slots still count tokens). image_rows: the packed rows of the image
  /// tokens (i32, device), features: [len(image_rows), H] in the model dtype, in that order.
  ///
  /// Note [DeepStack]
  /// Qwen3-VL's tower also hands the text model one [len(image_rows), H] feature per block of its
  /// deepstack_visual_indexes (its deepstack mergers' tokens, in the merged tokens' order); the text
  /// model adds feature i to its hidden states at the image tokens after decoder layer i (HF
  /// Qwen3VLTextModel._deepstack_process on the residual stream; vLLM adds them to hidden_states, the
  /// layer's output beside the residual, which is the same sum). Prefill only: decode steps are text.
  /// deepstack: those features, or none.
  Tensor prefill_multimodal(const std::vector<std::vector<int64_t>>& prompts, const Tensor& image_rows, const Tensor& features,
                            const Tensor& positions, const std::vector<int64_t>& next_positions,
                            const std::vector<Tensor>& deepstack = {});
  /// One greedy decode step for the batch of the last prefill (eager, or replay of the
  /// captured step when use_graph; the first graph step runs eagerly and captures).
  void decode_step(bool use_graph);
  /// Logits [B, V] of the last step (the captured step's output tensor while graphs are used).
  const Tensor& last_logits() const { return last_logits_; }
  int64_t batch() const { return batch_; }
  int64_t steps_done() const { return steps_; }
  /// Teacher forcing (Note [Teacher-forced check] in runtime/runner/model_main.cu): from the
  /// next prefill on, the token fed to sequence b after pick s is tokens[b][s] instead of its own
  /// greedy pick (tokens() still records the picks). Every row holds max_steps + 1 token ids;
  /// an empty list turns forcing off. Drops captured decode graphs (they hold the old choice).
  void force_tokens(const std::vector<std::vector<int64_t>>& tokens);
  /// fp32 reference logits (CausalLM::reference_logits) of whole sequences `seqs` (one prefill
  /// of them, on the engine's stream) at rows[b]: positions within sequence b, concatenated in
  /// order. Overwrites the KV cache; a later decode step needs a new prefill first.
  Tensor reference_logits(const std::vector<std::vector<int64_t>>& seqs, const std::vector<std::vector<int64_t>>& rows);
  /// Greedy tokens [B, steps_done + 1] and the logit of each when chosen (host copies).
  std::vector<int64_t> tokens() const;
  std::vector<float> token_logits() const;
  cudaStream_t stream() const { return stream_; }

 private:
  /// The engine's stream waits for the work queued so far on the legacy default stream (Note [Engine stream and the
  /// weights] in engine.cu).
  void follow_default_stream();
  void run_decode_body();
  struct Multimodal {
    const Tensor* image_rows;
    const Tensor* features;
    const Tensor* positions;
    const std::vector<int64_t>* next_positions;
    const std::vector<Tensor>* deepstack;
  };
  Tensor prefill_impl(const std::vector<std::vector<int64_t>>& prompts, const Multimodal* mm);
  /// One prefill of whole sequences: token ids, positions, slots (sequence b at row b of the
  /// cache) and the forward context; each sequence holds 1..limit tokens (too_long(b, n) says why
  /// not), every id in the vocabulary (`what` names the caller in that message).
  struct Packed {
    tasks::AttnMetadata meta;
    Tensor ids, positions;
    std::vector<int32_t> cu;  ///< host copy of meta.cu_seqlens
  };
  Packed pack(const std::vector<std::vector<int64_t>>& seqs, int64_t limit, const std::string& what,
              const std::function<std::string(int64_t, int64_t)>& too_long) const;

  CausalLM& model_;
  int64_t max_seqs_, max_len_, max_steps_;
  cudaStream_t stream_ = nullptr;
  Tensor ids_, pos_, slot_, seqlens_, step_, hist_tok_, hist_logit_;
  Tensor forced_;  ///< [max_seqs, max_steps + 1] i64 while forcing, else undefined
  Tensor last_logits_;
  tasks::AttnMetadata decode_meta_;
  int64_t batch_ = 0, steps_ = 0;
  bool cache_overwritten_ = false;  ///< by reference_logits, until the next prefill
  struct Captured {
    cudaGraphExec_t exec = nullptr;
    Tensor logits;  ///< the captured step's output, kept alive with the graph
  };
  std::map<int64_t, Captured> graphs_;
};

}  // namespace fk
