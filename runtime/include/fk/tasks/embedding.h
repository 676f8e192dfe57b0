// Harness and forward glue for the `vocab_parallel_embedding` task kind: mirrors
// vllm.model_executor.layers.vocab_parallel_embedding.VocabParallelEmbedding at tensor-parallel
// size 1 (forward(input_ [T] i64) -> [T, H]).
// The `scaled_word_embedding` kind (Gemma) shares it with Cfg::embed_scale != 0: rows times
// embed_scale rounded to the model dtype (embed_scale_of).
// Cfg (generated): num_embeddings, embedding_dim, embed_scale, scalar_t.
#pragma once

#include <algorithm>

#include "fk/kernels/reference/vocab_parallel_embedding_ref.cuh"
#include "fk/kernels/vocab_parallel_embedding.cuh"
#include "fk/tasks/harness.h"

namespace fk::tasks {

/// Cfg::embed_scale rounded to the model dtype (0: none), as HF multiplies by
/// embed_scale.to(weight.dtype).
template <class Cfg> float embed_scale_of() {
  if constexpr (Cfg::embed_scale == 0.0) return 0.f;
  else return static_cast<float>(typename Cfg::scalar_t(static_cast<float>(Cfg::embed_scale)));  // round to nearest
}

/// VocabParallelEmbedding.forward(input_): weight[input_] (a new tensor [..., H]).
template <class Cfg> Tensor embedding_forward(const Tensor& input_, const Tensor& weight, int64_t vocab_start = 0) {
  using T = typename Cfg::scalar_t;
  FK_CHECK(input_.dtype() == DType::kI64 && input_.is_contiguous(), "VocabParallelEmbedding input_ " + input_.str());
  FK_CHECK(weight.dim() == 2 && weight.size(0) == Cfg::num_embeddings && weight.size(1) == Cfg::embedding_dim &&
               weight.is_contiguous(),
           "VocabParallelEmbedding weight " + weight.str());
  Shape out_shape = input_.sizes();
  out_shape.push_back(Cfg::embedding_dim);
  Tensor out = empty(out_shape, weight.dtype());
  fk::kernels::vocab_parallel_embedding<Cfg::embedding_dim, T>(out.data<T>(), Cfg::embedding_dim,
                                                              input_.data<int64_t>(), weight.data<T>(),
                                                              Cfg::num_embeddings, input_.numel(), current_stream(),
                                                              embed_scale_of<Cfg>(), vocab_start);
  FK_CHECK_LAUNCH();
  return out;
}

/// The forward of a task sharded for tensor parallelism (Note [Parallel layouts]): this rank's rows
/// [rank x num_embeddings, (rank + 1) x num_embeddings) of the padded vocabulary, zero rows for the
/// other ids, summed over the tensor-parallel group (vLLM's masked lookup + all-reduce).
/// Reduce: the task's all-reduce child (Note [Collective tasks] in fk/tasks/collective.h).
template <class Cfg, class Reduce = NoCollective> Tensor embedding_forward_tp(const Tensor& input_, const Tensor& weight) {
  if constexpr (TpSizeOf<Cfg>::value == 1) {
    return embedding_forward<Cfg>(input_, weight);
  } else {
    return collective_call<Reduce>(embedding_forward<Cfg>(input_, weight, int64_t(fk::dist::tp_rank()) * Cfg::num_embeddings));
  }
}

/// One case of a vocab_parallel_embedding task. Case dims: num_tokens. Token ids uniform in
/// [0, num_embeddings); one weight shared by all sets. Sharded for tensor parallelism (Note [Sharded
/// references] in fk/tasks/llama.h): each rank's own rows (its seed mixed with its rank), ids over the
/// whole vocabulary of every rank's rows, checked against a lookup in the whole table gathered from
/// the ranks.
template <class Module, class Cfg> class EmbeddingInstance final : public TaskInstance {
 public:
  explicit EmbeddingInstance(const ShapeCase& c)
      : tokens_(c.get("num_tokens")),
        module_(checked_num_embeddings() * kTp, Cfg::embedding_dim) {  // the production constructor takes the whole vocabulary
    const double set_bytes = double(tokens_) * (Cfg::embedding_dim * sizeof(T) + sizeof(int64_t));
    const int n = rotating_sets(set_bytes);
    require_device_memory(set_bytes * n, "embedding inputs");
    for (int s = 0; s < n; ++s) ids_.push_back(empty({tokens_}, DType::kI64));
    out_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(ids_.size()); }
  void randomize(uint64_t seed) override {
    fill_normal(module_.weight, rank_seed<Cfg>(seed, mix_seed(seed, 0)));
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 1 + s));
  }
  void refresh(int s, uint64_t seed) override { fill_randint(ids_[s], seed, 0, Cfg::num_embeddings * kTp); }
  void run(int s) override { out_[s] = module_.forward(ids_[s]); }
  std::vector<Tensor> inputs(int s) override { return {module_.weight, ids_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor ref = empty({tokens_, Cfg::embedding_dim}, DType::kF32);
    Tensor table = module_.weight;
    if constexpr (kTp > 1) table = gather_rank_rows(table);  // the whole table, every rank's rows in rank order
    fk::kernels::reference::vocab_parallel_embedding_ref<T>(ref.data<float>(), ids_[s].data<int64_t>(), table.template data<T>(),
                                                            Cfg::num_embeddings * kTp, tokens_, Cfg::embedding_dim,
                                                            current_stream(), embed_scale_of<Cfg>());
    FK_CHECK_LAUNCH();
    return {{"out", out_[s], ref, default_tolerance(dtype_of<T>)}};
  }
  Cost cost() const override {
    // Read each distinct weight row once (at most one per token, at most the table: a small table,
    // e.g. BERT's 2 token types or 512 positions, is read from DRAM once and then hits the L2) and
    // the ids; write one row per token.
    const double row = double(Cfg::embedding_dim) * sizeof(T);
    const double distinct = std::min<double>(double(tokens_), double(Cfg::num_embeddings));
    return {0.0, distinct * row + tokens_ * (row + sizeof(int64_t))};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int kTp = TpSizeOf<Cfg>::value;
  /// Checks that the weight fits before the module allocates it.
  static int64_t checked_num_embeddings() {
    require_device_memory(double(Cfg::num_embeddings) * Cfg::embedding_dim * sizeof(T), "embedding weight");
    return Cfg::num_embeddings;
  }
  int64_t tokens_;
  Module module_;
  std::vector<Tensor> ids_, out_;
};

}  // namespace fk::tasks
