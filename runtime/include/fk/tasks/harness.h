// Helpers shared by the per-kind task harnesses (fk/tasks/<kind>.h). A harness implements
// fk::TaskInstance for one task kind, templated on the generated module class and its Config;
// generated sources only bind constants and instantiate it (see Note [Task protocol]).
#pragma once

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "fk/runtime/check.h"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/random.h"
#include "fk/runtime/task.h"
#include "fk/runtime/tensor.h"
#include "fk/runtime/tp_group.h"

namespace fk::tasks {

/// How many rotating input sets to allocate: enough that the sets together exceed the L2
/// several times over when they are small, never more than 8, at least 1, within a budget.
inline int rotating_sets(double bytes_per_set, double budget_bytes = 8.0 * (1ull << 30)) {
  int n = bytes_per_set < 32.0 * (1 << 20) ? 8 : (bytes_per_set < 512.0 * (1 << 20) ? 4 : 2);
  while (n > 1 && n * bytes_per_set > budget_bytes) --n;
  return n;
}

/// N(0, 1) fills of several tensors, tensor i from mix_seed(seed, i) (a set's q, k, v).
inline void fill_normal_each(std::initializer_list<std::reference_wrapper<Tensor>> ts, uint64_t seed) {
  uint64_t i = 0;
  for (Tensor& t : ts) fill_normal(t, mix_seed(seed, i++));
}

/// Note [Parallel layouts] (generator/include/fk/gen/config.h): Cfg::tp_size where the task's Config
/// declares it, else 1.
template <class C, class = void> struct TpSizeOf {
  static constexpr int value = 1;
};
template <class C> struct TpSizeOf<C, std::void_t<decltype(C::tp_size)>> {
  static constexpr int value = C::tp_size;
};
/// Note [Parallel layouts]: Cfg::ep_size (expert-parallel ranks) where the task's Config declares it, else 1.
template <class C, class = void> struct EpSizeOf {
  static constexpr int value = 1;
};
template <class C> struct EpSizeOf<C, std::void_t<decltype(C::ep_size)>> {
  static constexpr int value = C::ep_size;
};
/// Note [Data-parallel expert MoE] (fk/tasks/moe.h): a layout with ep_size > 1 and tp_size 1 is data-parallel attention
/// with expert parallelism: every rank runs its own tokens, the MoE blocks move them to the experts' ranks and back.
template <class C> struct DataParallelOf {
  static constexpr bool value = EpSizeOf<C>::value > 1 && TpSizeOf<C>::value == 1;
};
/// The tokens whose routing reaches one rank's experts in a step of `tokens` tokens per rank: its own, or at a
/// data-parallel layout every rank's (Note [Data-parallel expert MoE]); for the costs' expected expert counts.
template <class C> double tokens_routed_to_rank(double tokens) {
  return DataParallelOf<C>::value ? tokens * EpSizeOf<C>::value : tokens;
}
/// The share of its own tokens' routed slots a rank computes, in expectation: 1 / ep_size under expert parallelism
/// inside the tensor-parallel group (Note [Expert-parallel MoE]), 1 at a data-parallel layout (its experts get the same
/// number from every rank's tokens) and unsharded.
template <class C> constexpr double rank_slot_share() {
  return DataParallelOf<C>::value ? 1.0 : 1.0 / EpSizeOf<C>::value;
}
/// The ranks of the group a task runs in: its tp_size, or its ep_size at a data-parallel layout (1: unsharded).
template <class C> struct LayoutRanksOf {
  static constexpr int value = DataParallelOf<C>::value ? EpSizeOf<C>::value : TpSizeOf<C>::value;
};

/// The rows of a vocabulary of `vocab` entries that one of `tp` tensor-parallel ranks holds: the
/// vocabulary padded to a multiple of 64 and split evenly (vLLM's VocabParallelEmbedding /
/// ParallelLMHead, pad_vocab_size); `vocab` itself when tp is 1.
inline int64_t vocab_shard_rows(int64_t vocab, int tp) { return tp <= 1 ? vocab : (vocab + 63) / 64 * 64 / tp; }

/// Every rank's rows of a table sharded by rows (a vocabulary-parallel embedding), gathered in rank
/// order over the tensor-parallel group: [world x rows, width] (the references' whole table).
inline Tensor gather_rank_rows(const Tensor& shard) {
  const int64_t rows = shard.size(0), width = shard.size(1);
  return fk::dist::tp_all_gather_last_dim(shard.view({1, rows * width})).view({rows * fk::dist::tp_world_size(), width});
}

/// The seed rank `rank`'s draws use in a task sharded for tensor parallelism (rank_seed below); every rank can
/// redraw every other rank's inputs with it (the collective tasks' references: Note [Collective tasks]).
inline uint64_t seed_of_rank(uint64_t seed, int rank) { return mix_seed(seed, 1000 + uint64_t(rank)); }

/// The seed of a draw that differs by rank in a task sharded for tensor parallelism (each rank's own
/// columns or rows: Note [Sharded references] in fk/tasks/llama.h); `unsharded` where Cfg is not sharded.
template <class Cfg> uint64_t rank_seed(uint64_t seed, uint64_t unsharded) {
  return TpSizeOf<Cfg>::value > 1 ? seed_of_rank(seed, fk::dist::tp_rank()) : unsharded;
}

/// The seed of a draw of activations (hidden states, token ids, KV caches): its own on every rank at a data-parallel
/// layout (Note [Data-parallel expert MoE]: ranks hold different tokens, so a row that reached another rank's output
/// is caught), `seed` itself elsewhere (tensor-parallel ranks all hold the same tokens).
template <class Cfg> uint64_t dp_seed(uint64_t seed) {
  return DataParallelOf<Cfg>::value ? seed_of_rank(seed, fk::dist::tp_rank()) : seed;
}

/// Tag for the generated classes' config-only constructor (the harness builds modules from the
/// Config; the production constructor checks its arguments and delegates to it).
struct FromConfig {};
inline constexpr FromConfig from_config{};

/// The collective child of a task that communicates nowhere (unsharded: Note [Collective tasks] in
/// fk/tasks/collective.h). Never called: collective_call refuses it at compile time.
struct NoCollective {
  NoCollective() = default;
  explicit NoCollective(FromConfig) {}
};

/// Calls a task's collective child (its generated class, or a candidate's) on `t`.
template <class Coll> Tensor collective_call(const Tensor& t) {
  static_assert(!std::is_same_v<Coll, NoCollective>,
                "a task sharded for tensor parallelism calls its collective child task (Note [Collective tasks]); regenerate");
  return Coll(from_config).forward(t);
}

/// A task sharded for tensor parallelism runs only in a process whose tensor-parallel group has its
/// size; elsewhere its cases are skipped, saying so (the registrations call this first).
template <class Cfg> void require_layout() {
  constexpr int ranks = LayoutRanksOf<Cfg>::value;
  if constexpr (ranks > 1) {
    const int have = fk::dist::tp_world_size();
    if (have != ranks)
      throw SkipCase(std::string("sharded for ") + std::to_string(ranks) +
                     (DataParallelOf<Cfg>::value ? "-way data-parallel attention with expert parallelism" : "-way tensor parallelism") +
                     ": it runs in a group of " + std::to_string(ranks) +
                     " ranks (fk_launch --nproc N -- fk_bench --world-size N; docs/multi-gpu.md); this process has " +
                     (have == 1 ? std::string("none") : "one of " + std::to_string(have)));
  }
}

/// Throws SkipCase when `bytes` of new device memory would not fit (keeps 2 GiB spare).
void require_device_memory(double bytes, const std::string& what);

/// fp32 copy of a tensor (for references that need an fp32 view of a model-dtype tensor).
Tensor to_f32(const Tensor& t);

/// Elementwise tolerance for outputs that are sums over `k` products of bf16/f16 values:
/// atol scales with the typical magnitude of the output.
Tolerance matmul_tolerance(DType d, double typical_abs);

}  // namespace fk::tasks
