// The collective tasks (issue 23): all-reduce and all-gather over the process's tensor-parallel group as L1 tasks,
// the children of the tasks that communicate at a layout.
//
// Note [Collective tasks]
// vLLM's RowParallelLinear ends in tensor_model_parallel_all_reduce, VocabParallelEmbedding's masked lookup too, the
// MoE block's experts in FusedMoE's reduce, and LogitsProcessor gathers the vocabulary shards with
// tensor_model_parallel_all_gather. The generator lowers each of those calls into an L1 task of kind all_reduce or
// all_gather, named by the last dimension of every rank's tensor and the group size (all_reduce_n4096_tp2_bf16), and
// makes it the communicating task's "collective" child (Note [Collective tasks] in generator/src/passes/dedupe.cc).
// So a collective is a task like any kernel:
//  - alone, fk_bench --world-size N (under fk_launch, torchrun or mpirun) checks and times it on every rank, the
//    slowest rank's time being the case's (Note [Lockstep ranks] in runtime/src/runner.cc), beside its peer;
//  - a candidate for it (candidates/L1/all_reduce_n4096_tp2_bf16.cu, docs/candidates.md) replaces its header, and
//    with it the collective of every row-parallel linear, attention block, decoder layer and model above it, which
//    fk_bench and fk_model of that build then judge at every level.
// The interface is vLLM's: forward(input) returns a new tensor and leaves the input as it was (GroupCoordinator's
// all_reduce / all_gather(dim=-1)). The callers build the class per call, so a candidate keeps what it needs across
// calls (registered buffers, like the group's own peer all-reduce) beside the group, not in the object.
//
// Checking. Every rank draws its own input from its rank's seed (seed_of_rank), so each rank redraws every other
// rank's input and computes the reference with no communication at all: the sum over the ranks in fp32 in rank order
// (all-reduce), or the ranks' blocks side by side (all-gather, which must be exact). The all-reduce's bound allows an
// NCCL ring's roundings: in bf16 each of the world's partial sums is rounded, and the partials (norm ~ sqrt(world)) can
// cancel, so the absolute part grows with the world size as the row-parallel linear's does. The peer of the all-reduce
// is NCCL alone (ncclAllReduce out of place, what torch.distributed.all_reduce runs); the all-gather's production path
// (NCCL's all-gather, then the interleave of the ranks' columns) is what the task itself runs, so it has no peer.
//
// Sequence parallelism (vLLM's SequenceParallelismPass, and the async-TP fusions built on it) splits the residual
// stream's tokens over the ranks: a row-parallel linear's all-reduce becomes a reduce-scatter over the token rows
// (tensor_model_parallel_reduce_scatter(dim=0): [T, n] summed, rank r keeps rows [r T/W, (r+1) T/W)) and the next
// column-parallel linear's input is the all-gather of the chunks (all_gather(dim=0)). Kinds reduce_scatter and
// all_gather_rows are those two, the collective children of the overlapped linears (Note [Overlapped linear tasks] in
// fk/tasks/overlapped_linear.h). Their case dim is rows_per_rank (the chunk: T / W), so that every case, the
// off-registry primes included, is a token count the ranks divide. Both run NCCL (what vLLM's device communicator
// calls for them), so they have no peer; their references are the redrawn sum (reduce-scatter, this rank's rows of it)
// and the redrawn chunks in rank order (all-gather, exact).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "fk/tasks/harness.h"
#include "fk/tasks/reference_ops.h"

namespace fk::tasks {

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllGatherRows };

/// The op's name in errors.
constexpr const char* collective_name(CollectiveOp op) {
  return op == CollectiveOp::kAllReduce ? "all_reduce" : op == CollectiveOp::kAllGather ? "all_gather" : op == CollectiveOp::kReduceScatter ? "reduce_scatter" : "all_gather_rows";
}

/// Whether the op splits or gathers token rows (sequence parallelism), so its cases count rows per rank.
constexpr bool collective_on_rows(CollectiveOp op) { return op == CollectiveOp::kReduceScatter || op == CollectiveOp::kAllGatherRows; }

/// The sum over the group's ranks (fp32, in rank order) of the tensors each rank draws with fill_normal from
/// seed_of_rank(seed, rank): every rank's input, redrawn here without communication (the references of Note
/// [Collective tasks]). `scratch` (the inputs' shape and dtype) is overwritten.
inline Tensor sum_of_rank_draws(Tensor& scratch, uint64_t seed, int world) {
  fill_normal(scratch, seed_of_rank(seed, 0));
  Tensor sum = to_f32(scratch);
  for (int q = 1; q < world; ++q) {
    fill_normal(scratch, seed_of_rank(seed, q));
    ref::accumulate_f32_(sum, scratch);
  }
  return sum;
}

/// The collective tasks' forward: input [..., Cfg::width] (contiguous), the group's all-reduce (its own choice of the
/// peer all-reduce or NCCL: Note [Group all-reduce choice]) or all-gather along the last dimension ([..., world x width]);
/// input [rows, Cfg::width], NCCL's reduce-scatter ([rows / world, width]; rows a multiple of the world) or all-gather
/// ([world x rows, width]) of the token rows.
template <class Cfg, CollectiveOp Op> Tensor collective_forward(const Tensor& input) {
  FK_CHECK(input.dim() >= 1 && input.size(-1) == Cfg::width && input.dtype() == dtype_of<typename Cfg::scalar_t> &&
               input.is_contiguous(),
           std::string(collective_name(Op)) + ": a contiguous [..., " + std::to_string(Cfg::width) + "] tensor of " +
               dtype_name(dtype_of<typename Cfg::scalar_t>) + ", got " + input.str());
  if constexpr (Op == CollectiveOp::kAllReduce) {
    return fk::dist::tp_all_reduce(input);
  } else if constexpr (Op == CollectiveOp::kReduceScatter) {
    FK_CHECK(input.dim() == 2 && input.size(0) % Cfg::tp_size == 0,
             "reduce_scatter: [rows, " + std::to_string(Cfg::width) + "] with rows a multiple of the " + std::to_string(Cfg::tp_size) +
                 " ranks (vLLM pads the tokens to one), got " + input.str());
    return fk::dist::tp_reduce_scatter_first_dim(input);
  } else if constexpr (Op == CollectiveOp::kAllGatherRows) {
    FK_CHECK(input.dim() == 2, "all_gather_rows: [rows, " + std::to_string(Cfg::width) + "], got " + input.str());
    return fk::dist::tp_all_gather_first_dim(input);
  } else {
    const int64_t rows = input.numel() / Cfg::width;
    Shape shape = input.sizes();
    shape.back() = Cfg::width * fk::dist::tp_world_size();
    return fk::dist::tp_all_gather_last_dim(input.view({rows, Cfg::width})).view(shape);
  }
}

/// One case of a collective task (Note [Collective tasks]). Case dims: num_tokens (the rows of every rank's tensor);
/// rows_per_rank for the ops on token rows (the reduce-scatter's input holds world x rows_per_rank rows, the
/// all-gather's rows_per_rank).
template <class Module, class Cfg, CollectiveOp Op> class CollectiveInstance final : public TaskInstance {
 public:
  explicit CollectiveInstance(const ShapeCase& c)
      : m_(collective_on_rows(Op) ? c.get("rows_per_rank") * (Op == CollectiveOp::kReduceScatter ? kTp : 1) : c.get("num_tokens")) {
    const double in_bytes = double(m_) * Cfg::width * sizeof(T);
    const double out_bytes = Op == CollectiveOp::kAllGather || Op == CollectiveOp::kAllGatherRows ? in_bytes * kTp
                             : Op == CollectiveOp::kReduceScatter                                 ? in_bytes / kTp
                                                                                                  : in_bytes;
    const int n = rotating_sets(in_bytes + out_bytes);
    // the sets, their outputs, the fp32 reference (at most the whole sum) and one redrawn rank's input while checking
    require_device_memory((in_bytes + out_bytes) * n + std::max(in_bytes, out_bytes) / sizeof(T) * 4 + in_bytes, "collective inputs");
    for (int s = 0; s < n; ++s) x_.push_back(empty({m_, Cfg::width}, dtype_of<T>));
    out_.resize(n);
    seeds_.resize(n);
  }
  int num_sets() const override { return static_cast<int>(x_.size()); }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < num_sets(); ++s) refresh(s, mix_seed(seed, 2 + s));
  }
  void refresh(int s, uint64_t seed) override {
    seeds_[s] = seed;
    fill_normal(x_[s], seed_of_rank(seed, fk::dist::tp_rank()));
  }
  void prepare(int s) override { out_[s] = Tensor(); }
  void run(int s) override { out_[s] = module_.forward(x_[s]); }
  std::vector<Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<CheckedOutput> reference(int s) override {
    Tensor other = empty({m_, Cfg::width}, dtype_of<T>);
    if constexpr (Op == CollectiveOp::kAllReduce || Op == CollectiveOp::kReduceScatter) {
      Tensor ref = sum_of_rank_draws(other, seeds_[s], kTp);
      if constexpr (Op == CollectiveOp::kReduceScatter) {  // this rank's chunk of the rows
        const int64_t c = m_ / kTp;
        Tensor mine = empty({c, Cfg::width}, DType::kF32);
        copy_(mine, ref.narrow_first(static_cast<int64_t>(fk::dist::tp_rank()) * c, c));
        ref = mine;
      }
      // |N(0, 1)| has mean 0.8; the sum's norm grows as sqrt(world), each of the world's roundings by the partials'.
      const double typical = 0.8 * std::sqrt(double(kTp)) * kTp;
      return {{"output", out_[s], ref, matmul_tolerance(dtype_of<T>, typical)}};
    } else if constexpr (Op == CollectiveOp::kAllGatherRows) {
      Tensor ref = empty({m_ * kTp, Cfg::width}, DType::kF32);
      for (int q = 0; q < kTp; ++q) {  // rank q's rows [q m, (q + 1) m)
        fill_normal(other, seed_of_rank(seeds_[s], q));
        Tensor rows = ref.narrow_first(q * m_, m_);
        copy_(rows, to_f32(other));
      }
      return {{"output", out_[s], ref, Tolerance{0, 0, 0}}};  // a copy: exact
    } else {
      Tensor ref = empty({m_, Cfg::width * kTp}, DType::kF32);
      for (int q = 0; q < kTp; ++q) {  // rank q's columns [q width, (q + 1) width)
        fill_normal(other, seed_of_rank(seeds_[s], q));
        copy_strided_(ref.narrow_last(q * Cfg::width, Cfg::width), to_f32(other));
      }
      return {{"output", out_[s], ref, Tolerance{0, 0, 0}}};  // a copy: exact
    }
  }
  std::string peer_name() const override { return Op == CollectiveOp::kAllReduce ? "nccl" : ""; }
  void run_peer(int s) override {
    if constexpr (Op == CollectiveOp::kAllReduce) peer_out_ = fk::dist::tp_nccl_all_reduce(x_[s]);
  }
  /// The fewest bytes this rank's HBM must move: its input read and its output written (what crosses NVLink is
  /// more: an all-reduce's bus traffic is 2 (world - 1) / world of the message each way). The adds of the
  /// all-reduce: (world - 1) per element.
  Cost cost() const override {
    const double elems = double(m_) * Cfg::width;
    if constexpr (Op == CollectiveOp::kAllReduce) return {elems * (kTp - 1), 2.0 * elems * sizeof(T)};
    if constexpr (Op == CollectiveOp::kReduceScatter) return {elems / kTp * (kTp - 1), elems * (1.0 + 1.0 / kTp) * sizeof(T)};
    return {0.0, elems * (1 + kTp) * sizeof(T)};
  }

 private:
  using T = typename Cfg::scalar_t;
  static constexpr int kTp = Cfg::tp_size;
  int64_t m_;
  Module module_{from_config};
  std::vector<Tensor> x_, out_;
  std::vector<uint64_t> seeds_;
  Tensor peer_out_;
};

}  // namespace fk::tasks
