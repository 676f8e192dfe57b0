// The greedy-generation engine (fk/runtime/engine.h, Note [Decode graphs]).
#include "fk/runtime/engine.h"

#include <cfloat>
#include <functional>
#include <string>

#include "fk/runtime/cuda_check.h"

namespace fk {

namespace {

constexpr int kArgmaxThreads = 1024;

// One block per sequence: the greedy token of logits row b (lowest index on ties), recorded at
// column `step` of the history; then the sequence's step buffers advance by one token, and the
// token fed next is the pick, or forced[b][step] when teacher forcing.
template <class T>
__global__ void __launch_bounds__(kArgmaxThreads)
pick_and_advance_kernel(const T* __restrict__ logits, int64_t vocab, const int32_t* __restrict__ step, int64_t hist_cols,
                        int64_t* __restrict__ hist_tok, float* __restrict__ hist_logit, int64_t* __restrict__ ids,
                        int64_t* __restrict__ pos, int64_t* __restrict__ slot, int32_t* __restrict__ seqlens, int advance,
                        const int64_t* __restrict__ forced) {
  const int b = blockIdx.x;
  const T* row = logits + b * vocab;
  float best = -FLT_MAX;
  int64_t arg = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = static_cast<float>(row[i]);
    if (v > best) {  // strict: the first (lowest) index of this thread's stride wins ties
      best = v;
      arg = i;
    }
  }
  __shared__ float s_val[kArgmaxThreads / 32];
  __shared__ int64_t s_arg[kArgmaxThreads / 32];
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_down_sync(0xffffffffu, best, off);
    const int64_t oa = __shfl_down_sync(0xffffffffu, arg, off);
    if (ov > best || (ov == best && oa < arg)) {
      best = ov;
      arg = oa;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_val[warp] = best;
    s_arg[warp] = arg;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < blockDim.x / 32; ++w)
      if (s_val[w] > best || (s_val[w] == best && s_arg[w] < arg)) {
        best = s_val[w];
        arg = s_arg[w];
      }
    const int64_t col = *step;
    hist_tok[b * hist_cols + col] = arg;
    hist_logit[b * hist_cols + col] = best;
    ids[b] = forced ? forced[b * hist_cols + col] : arg;
    if (advance) {  // the new token sits at the next position of the sequence
      pos[b] += 1;
      slot[b] += 1;
      seqlens[b] += 1;
    }
  }
}

__global__ void increment_kernel(int32_t* step) { *step += 1; }

}  // namespace

Engine::Engine(CausalLM& model, int64_t max_seqs, int64_t max_len, int64_t max_steps)
    : model_(model), max_seqs_(max_seqs), max_len_(max_len), max_steps_(max_steps) {
  FK_CHECK(max_seqs > 0 && max_len > 0 && max_steps >= 0, "Engine: bad sizes");
  FK_CHECK(max_len <= model.max_position(), "Engine: max_len " + std::to_string(max_len) + " exceeds the model's " +
                                                std::to_string(model.max_position()) + " positions");
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  StreamGuard g(stream_);
  model_.allocate_kv_cache(max_seqs, max_len);
  ids_ = empty({max_seqs}, DType::kI64);
  pos_ = empty({max_seqs}, DType::kI64);
  slot_ = empty({max_seqs}, DType::kI64);
  seqlens_ = empty({max_seqs}, DType::kI32);
  step_ = empty({1}, DType::kI32);
  hist_tok_ = empty({max_seqs, max_steps + 1}, DType::kI64);
  hist_logit_ = empty({max_seqs, max_steps + 1}, DType::kF32);
  FK_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// Note [Engine stream and the weights]
// The engine runs on a stream of its own, created non-blocking: it does not wait for the legacy default stream, where
// the weights were written (init_params, a checkpoint's copies: current_stream() outside a StreamGuard). A prefill
// enqueued right after them could read weights not yet written: seen as a first engine's greedy tokens differing from
// a second engine's on the same model, only once every cache was warm (the second run of a test in one process; cold,
// the first call's host work gave the fills time to finish). Every prefill and reference pass therefore makes the
// engine's stream wait for everything queued on the legacy stream so far (an event; no host synchronisation); the
// decode steps follow their prefill on the engine's stream.
void Engine::follow_default_stream() {
  cudaEvent_t ev = nullptr;
  FK_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  FK_CUDA_CHECK(cudaEventRecord(ev, cudaStreamLegacy));
  FK_CUDA_CHECK(cudaStreamWaitEvent(stream_, ev, 0));
  FK_CUDA_CHECK(cudaEventDestroy(ev));
}

Engine::~Engine() {
  for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g.exec);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

namespace {
template <class F> void with_model_dtype(DType d, F&& f) {
  if (d == DType::kBF16) f(bf16{});
  else if (d == DType::kF16) f(f16{});
  else FK_CHECK(false, std::string("Engine: unsupported model dtype ") + dtype_name(d));
}
}  // namespace

Engine::Packed Engine::pack(const std::vector<std::vector<int64_t>>& seqs, int64_t limit, const std::string& what,
                           const std::function<std::string(int64_t, int64_t)>& too_long) const {
  Packed out;
  std::vector<int64_t> ids, pos, slot;
  out.cu = {0};
  int64_t max_seqlen = 0;
  const int64_t batch = static_cast<int64_t>(seqs.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = static_cast<int64_t>(seqs[b].size());
    FK_CHECK(n > 0 && n <= limit, too_long(b, n));
    for (int64_t p = 0; p < n; ++p) {
      FK_CHECK(seqs[b][p] >= 0 && seqs[b][p] < model_.vocab_size(), what + " token id out of range");
      ids.push_back(seqs[b][p]);
      pos.push_back(p);
      slot.push_back(b * max_len_ + p);
    }
    out.cu.push_back(static_cast<int32_t>(out.cu.back() + n));
    max_seqlen = std::max(max_seqlen, n);
  }
  const int64_t tokens = static_cast<int64_t>(ids.size());
  out.meta.is_prefill = true;
  out.meta.num_seqs = batch;
  out.meta.num_tokens = tokens;
  out.meta.cu_seqlens = to_device(out.cu, {batch + 1});
  out.meta.max_seqlen = max_seqlen;
  out.meta.slot_mapping = to_device(slot, {tokens});
  out.ids = to_device(ids, {tokens});
  out.positions = to_device(pos, {tokens});
  return out;
}

Tensor Engine::prefill(const std::vector<std::vector<int64_t>>& prompts) { return prefill_impl(prompts, nullptr); }

Tensor Engine::prefill_multimodal(const std::vector<std::vector<int64_t>>& prompts, const Tensor& image_rows,
                                  const Tensor& features, const Tensor& positions, const std::vector<int64_t>& next_positions,
                                  const std::vector<Tensor>& deepstack) {
  FK_CHECK(model_.takes_input_embeddings(), "prefill_multimodal: " + model_.task_name() + " takes no input embeddings");
  FK_CHECK(next_positions.size() == prompts.size(), "prefill_multimodal: one next position per prompt");
  for (const Tensor& d : deepstack)  // Note [DeepStack]
    FK_CHECK(d.sizes() == features.sizes() && d.dtype() == features.dtype(),
             "prefill_multimodal: a deepstack feature " + d.str() + " is not shaped like the image features " + features.str());
  const Multimodal mm{&image_rows, &features, &positions, &next_positions, &deepstack};
  return prefill_impl(prompts, &mm);
}

Tensor Engine::prefill_impl(const std::vector<std::vector<int64_t>>& prompts, const Multimodal* mm) {
  const int64_t batch = static_cast<int64_t>(prompts.size());
  FK_CHECK(batch > 0 && batch <= max_seqs_, "prefill of " + std::to_string(batch) + " sequences; the engine holds " +
                                                std::to_string(max_seqs_));
  StreamGuard g(stream_);
  follow_default_stream();  // Note [Engine stream and the weights]
  Packed in = pack(prompts, max_len_ - max_steps_, "prompt", [&](int64_t b, int64_t n) {
    return "prompt " + std::to_string(b) + " has " + std::to_string(n) + " tokens; with " + std::to_string(max_steps_) +
           " decode steps the engine holds " + std::to_string(max_len_);
  });
  std::vector<int64_t> next_pos, next_slot;
  std::vector<int32_t> last, next_len;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = in.cu[b + 1] - in.cu[b];
    last.push_back(in.cu[b + 1] - 1);
    next_pos.push_back(mm ? (*mm->next_positions)[b] : n);  // Note [Multimodal prefill]
    next_slot.push_back(b * max_len_ + n);
    next_len.push_back(static_cast<int32_t>(n + 1));
  }
  Tensor hidden;
  {
    tasks::ForwardContextGuard ctx(&in.meta);
    if (!mm) {
      hidden = model_.forward(in.ids, in.positions);
    } else {  // Note [Multimodal prefill]
      const Tensor& pos = *mm->positions;
      FK_CHECK(pos.dtype() == DType::kI64 && pos.dim() == 2 && pos.size(0) == 3 && pos.size(1) == in.meta.num_tokens,
               "prefill_multimodal: positions must be i64 [3, " + std::to_string(in.meta.num_tokens) + "], got " + pos.str());
      Tensor embeds = model_.embed(in.ids);
      tasks::scatter_rows_(embeds, *mm->image_rows, *mm->features);
      hidden = model_.forward_embeds(embeds, pos, *mm->image_rows, *mm->deepstack);
    }
  }
  Tensor last_hidden = tasks::gather_rows(hidden, to_device(last, {batch}));
  Tensor logits = model_.compute_logits(last_hidden);
  // Decode state: token 0 comes from these logits; the next step feeds it at position n.
  Tensor np = to_device(next_pos, {batch}), ns = to_device(next_slot, {batch}), nl = to_device(next_len, {batch});
  FK_CUDA_CHECK(cudaMemcpyAsync(pos_.data_ptr(), np.data_ptr(), np.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  FK_CUDA_CHECK(cudaMemcpyAsync(slot_.data_ptr(), ns.data_ptr(), ns.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  FK_CUDA_CHECK(cudaMemcpyAsync(seqlens_.data_ptr(), nl.data_ptr(), nl.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  FK_CUDA_CHECK(cudaMemsetAsync(step_.data_ptr(), 0, sizeof(int32_t), stream_));
  with_model_dtype(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pick_and_advance_kernel<T><<<batch, kArgmaxThreads, 0, stream_>>>(
        logits.data<T>(), model_.vocab_size(), step_.data<int32_t>(), max_steps_ + 1, hist_tok_.data<int64_t>(),
        hist_logit_.data<float>(), ids_.data<int64_t>(), pos_.data<int64_t>(), slot_.data<int64_t>(),
        seqlens_.data<int32_t>(), /*advance=*/0, forced_.defined() ? forced_.data<int64_t>() : nullptr);
  });
  FK_CHECK_LAUNCH();
  increment_kernel<<<1, 1, 0, stream_>>>(step_.data<int32_t>());
  FK_CHECK_LAUNCH();
  batch_ = batch;
  steps_ = 0;
  cache_overwritten_ = false;
  decode_meta_ = tasks::AttnMetadata();
  decode_meta_.is_prefill = false;
  decode_meta_.num_seqs = batch;
  decode_meta_.num_tokens = batch;
  decode_meta_.cache_seqlens = seqlens_.narrow_first(0, batch);
  decode_meta_.slot_mapping = slot_.narrow_first(0, batch);
  last_logits_ = logits;
  return logits;
}

void Engine::run_decode_body() {
  Tensor hidden;
  {
    tasks::ForwardContextGuard ctx(&decode_meta_);
    hidden = model_.forward(ids_.narrow_first(0, batch_), pos_.narrow_first(0, batch_));
  }
  Tensor logits = model_.compute_logits(hidden);
  with_model_dtype(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pick_and_advance_kernel<T><<<batch_, kArgmaxThreads, 0, stream_>>>(
        logits.data<T>(), model_.vocab_size(), step_.data<int32_t>(), max_steps_ + 1, hist_tok_.data<int64_t>(),
        hist_logit_.data<float>(), ids_.data<int64_t>(), pos_.data<int64_t>(), slot_.data<int64_t>(),
        seqlens_.data<int32_t>(), /*advance=*/1, forced_.defined() ? forced_.data<int64_t>() : nullptr);
  });
  FK_CHECK_LAUNCH();
  increment_kernel<<<1, 1, 0, stream_>>>(step_.data<int32_t>());
  FK_CHECK_LAUNCH();
  last_logits_ = logits;
}

void Engine::decode_step(bool use_graph) {
  FK_CHECK(batch_ > 0, "decode_step before prefill");
  FK_CHECK(!cache_overwritten_, "decode_step after reference_logits: prefill again first");
  FK_CHECK(steps_ < max_steps_, "decode_step: the engine was sized for " + std::to_string(max_steps_) + " steps");
  StreamGuard g(stream_);
  auto it = graphs_.find(batch_);
  if (!use_graph || (it == graphs_.end() && steps_ == 0)) {
    run_decode_body();  // eager; with graphs, the first step also settles GEMM choices and caches
    ++steps_;
    return;
  }
  if (it == graphs_.end()) {
    cudaGraph_t graph = nullptr;
    FK_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    try {
      run_decode_body();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    FK_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    Captured c;
    FK_CUDA_CHECK(cudaGraphInstantiate(&c.exec, graph, 0));
    FK_CUDA_CHECK(cudaGraphDestroy(graph));
    c.logits = last_logits_;
    it = graphs_.emplace(batch_, c).first;
  }
  FK_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
  last_logits_ = it->second.logits;
  ++steps_;
}

void Engine::force_tokens(const std::vector<std::vector<int64_t>>& tokens) {
  StreamGuard g(stream_);
  for (auto& [b, c] : graphs_) FK_CUDA_CHECK(cudaGraphExecDestroy(c.exec));
  graphs_.clear();
  batch_ = 0;  // a prefill must come first
  if (tokens.empty()) {
    forced_ = Tensor();
    return;
  }
  FK_CHECK(static_cast<int64_t>(tokens.size()) <= max_seqs_, "force_tokens: " + std::to_string(tokens.size()) +
                                                                 " sequences; the engine holds " + std::to_string(max_seqs_));
  std::vector<int64_t> flat(static_cast<size_t>(max_seqs_ * (max_steps_ + 1)), 0);
  for (size_t b = 0; b < tokens.size(); ++b) {
    FK_CHECK(static_cast<int64_t>(tokens[b].size()) == max_steps_ + 1,
             "force_tokens: sequence " + std::to_string(b) + " has " + std::to_string(tokens[b].size()) +
                 " token ids; expected max_steps + 1 = " + std::to_string(max_steps_ + 1));
    for (size_t s = 0; s < tokens[b].size(); ++s) {
      FK_CHECK(tokens[b][s] >= 0 && tokens[b][s] < model_.vocab_size(),
               "force_tokens: token id " + std::to_string(tokens[b][s]) + " of sequence " + std::to_string(b) +
                   " is outside the vocabulary of " + std::to_string(model_.vocab_size()));
      flat[b * (max_steps_ + 1) + s] = tokens[b][s];
    }
  }
  forced_ = to_device(flat, {max_seqs_, max_steps_ + 1});
  FK_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Tensor Engine::reference_logits(const std::vector<std::vector<int64_t>>& seqs, const std::vector<std::vector<int64_t>>& rows) {
  const int64_t batch = static_cast<int64_t>(seqs.size());
  FK_CHECK(batch > 0 && batch <= max_seqs_ && rows.size() == seqs.size(),
           "reference_logits: " + std::to_string(batch) + " sequences with " + std::to_string(rows.size()) +
               " row lists; the engine holds " + std::to_string(max_seqs_));
  StreamGuard g(stream_);
  follow_default_stream();  // Note [Engine stream and the weights]
  Packed in = pack(seqs, max_len_, "reference_logits:", [&](int64_t b, int64_t n) {
    return "reference_logits: sequence " + std::to_string(b) + " has " + std::to_string(n) + " tokens; the engine holds " +
           std::to_string(max_len_);
  });
  std::vector<int32_t> picked;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r : rows[b]) {
      FK_CHECK(r >= 0 && r < in.cu[b + 1] - in.cu[b],
               "reference_logits: row " + std::to_string(r) + " outside sequence " + std::to_string(b));
      picked.push_back(static_cast<int32_t>(in.cu[b] + r));
    }
  Tensor picked_rows = to_device(picked, {static_cast<int64_t>(picked.size())});
  Tensor out;
  {
    tasks::ForwardContextGuard ctx(&in.meta);
    out = model_.reference_logits(in.ids, in.positions, in.cu, picked_rows);
  }
  cache_overwritten_ = true;  // the KV cache no longer holds the decoded sequences
  return out;
}

std::vector<int64_t> Engine::tokens() const {
  FK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<int64_t> all = to_host<int64_t>(hist_tok_);
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t s = 0; s <= steps_; ++s) out.push_back(all[b * (max_steps_ + 1) + s]);
  return out;
}

std::vector<float> Engine::token_logits() const {
  FK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> all = to_host<float>(hist_logit_);
  std::vector<float> out;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t s = 0; s <= steps_; ++s) out.push_back(all[b * (max_steps_ + 1) + s]);
  return out;
}

}  // namespace fk
