// The collectives sweep (fk_collectives_main, collectives_tool.h): the body of `fk_collectives` and of
// `fk_bench collectives`, an nccl-tests-style sweep of the job's NCCL collectives (fk/runtime/comm.h), one
// process per GPU under fk_launch / torchrun / mpirun (issue 23; docs/multi-gpu.md):
//   fk_launch --nproc 2 -- build/gpu/fk_collectives --op all_reduce --min-bytes 8 --max-bytes 1G
//   fk_launch --nproc 2 -- build/gpu/fk_bench collectives --op all_reduce --min-bytes 8 --max-bytes 1G   (the same)
// For each message size: one checked call whose inputs make every result exactly representable
// (small integers), the wrong elements counted on every rank (#wrong, summed over the ranks); then
// --iters calls timed with CUDA events after --warmup (eager, or one CUDA graph of the iters with
// --graph), --runs times, each run started by a one-element NCCL all-reduce that lines the ranks'
// streams up; a rank's time per call is the median over its runs, the row reports the slowest rank's. Bandwidths as
// nccl-tests defines them: algbw = bytes / time, busbw = algbw x 2 (n - 1) / n for all_reduce and
// (n - 1) / n for all_gather / reduce_scatter (bytes: the larger buffer's), n the ranks.
// --op ep_dispatch_combine / ep_dispatch_combine_nccl time the expert-parallel dispatch + combine
// (fk/runtime/ep_all_to_all.h) of --tokens per rank (hidden --hidden, --topk of --experts), the own
// peer-memory kernels or the NCCL send / recv baseline, with the same seeded routing on both; a row
// per token count: the rows each rank sends (bytes), the slowest rank's time per dispatch + combine,
// and #wrong from one checked round trip (a stand-in expert scaling each row; see run_ep).
// --op all_gather_matmul / matmul_reduce_scatter time the overlapped linears (fk/runtime/overlapped_linear.h)
// and their _nccl forms the serial baseline (NCCL all_gather then one GEMM; one GEMM then NCCL
// reduce_scatter; the same cuBLASLt GEMM) over --tokens rows in all (T, each rank T / W), --k, --n; a
// row per T: the slowest rank's time, TFLOP/s of the rank's GEMM work and #wrong from one checked call
// against an fp32 reference every rank builds from every rank's seeded inputs (see run_linear).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collectives_tool.h"
#include "fk/runtime/comm.h"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/ep_all_to_all.h"
#include "fk/kernels/gemm.h"
#include "fk/runtime/overlapped_linear.h"
#include "fk/runtime/random.h"
#include "fk/kernels/ep_all_to_all.cuh"
#include "fk/runtime/peer_allreduce.h"
#include "fk/runtime/peer_allreduce_fused.cuh"
#include "fk/kernels/rms_norm.cuh"
#include "fk/runtime/tensor.h"

namespace {

using fk::Tensor;

/// Fills x[i] = (rank + 1) * (i % 8 + 1) in dtype d (integers below 2^8 x world: exact in bf16 for small worlds).
__global__ void fill_pattern_kernel(float* f32, __nv_bfloat16* b16, int64_t n, int rank) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = float(rank + 1) * float(i % 8 + 1);
  if (f32) f32[i] = v;
  else b16[i] = __float2bfloat16(v);
}
/// Counts the elements that differ from the expected result: all_gather (gather_mode) holds rank q's
/// pattern in block q of `block` elements; all_reduce / reduce_scatter hold scale x the pattern at input
/// index base + i (reduce_scatter's output is the slice at base = rank x count of the input).
__global__ void count_wrong_kernel(const float* f32, const __nv_bfloat16* b16, int64_t n, float scale, int64_t block, int64_t base,
                                   int gather_mode, unsigned long long* wrong) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float want;
  if (gather_mode == 1) want = float(i / block + 1) * float((i % block) % 8 + 1);
  else want = scale * float((base + i) % 8 + 1);
  const float got = f32 ? f32[i] : __bfloat162float(b16[i]);
  if (got != want) atomicAdd(wrong, 1ull);
}

/// Counts the elements where a and b differ bitwise (2-byte elements).
__global__ void count_unequal_kernel(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* wrong) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n && a[i] != b[i]) atomicAdd(wrong, 1ull);
}

/// The all-reduce + residual add + RMSNorm of a decode step for one hidden size: kFused, the own
/// all-reduce fused with them; kNccl, NCCL's all-reduce then fused_add_rms_norm (the unfused production
/// path); kNormOnly, fused_add_rms_norm alone (the tail of the fused op's reference).
enum class NormMode { kFused, kNccl, kNormOnly };
template <int kHidden> void add_rms_norm_call(NormMode mode, fk::dist::PeerAllReduce* par, fk::dist::Communicator& comm, Tensor& x, Tensor& res,
                                              const Tensor& weight, int64_t rows) {
  if (mode == NormMode::kFused) {
    fk::dist::all_reduce_add_rms_norm<kHidden, fk::bf16>(*par, x, res, weight, 1e-5f, x);
    return;
  }
  if (mode == NormMode::kNccl) comm.all_reduce_(x);
  fk::kernels::fused_add_rms_norm<kHidden, fk::bf16>(x.data<fk::bf16>(), kHidden, res.data<fk::bf16>(), kHidden, weight.data<fk::bf16>(), rows,
                                                     1e-5f, fk::current_stream());
  FK_CHECK_LAUNCH();
}
using AddRmsNormCall = void (*)(NormMode, fk::dist::PeerAllReduce*, fk::dist::Communicator&, Tensor&, Tensor&, const Tensor&, int64_t);
AddRmsNormCall add_rms_norm_for(int hidden) {
  switch (hidden) {
    case 2048: return &add_rms_norm_call<2048>;
    case 4096: return &add_rms_norm_call<4096>;
    case 5120: return &add_rms_norm_call<5120>;
    case 7168: return &add_rms_norm_call<7168>;
    case 8192: return &add_rms_norm_call<8192>;
    default: return nullptr;
  }
}

/// Counts out's elements farther from want than 1% (+ 1e-3): want[t] = f[t] x x[t], f from the routing.
__global__ void count_ep_wrong_kernel(const __nv_bfloat16* out, const __nv_bfloat16* x, const float* f, int64_t n, int hidden,
                                      unsigned long long* wrong) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float want = f[i / hidden] * __bfloat162float(x[i]), got = __bfloat162float(out[i]);
  if (!(fabsf(got - want) <= 1e-2f * fabsf(want) + 1e-3f)) atomicAdd(wrong, 1ull);
}

/// Every rank's `values` (the same count on each), in rank order, through the store (TcpStore::all_gather).
std::vector<std::vector<double>> gather_rank_values(fk::dist::TcpStore& store, const std::string& key, const std::vector<double>& values) {
  std::string mine;
  for (double v : values) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g ", v);
    mine += buf;
  }
  std::vector<std::vector<double>> out;
  for (const std::string& text : store.all_gather(key, mine)) {
    std::vector<double> row;
    for (const char* p = text.c_str(); *p;) {
      char* end = nullptr;
      row.push_back(std::strtod(p, &end));
      if (end == p) break;
      p = end;
      while (*p == ' ') ++p;
    }
    out.push_back(row);
  }
  return out;
}

/// A row's figures over the ranks (gather_rank_values' rows: the time in column 0, wrong elements in column
/// `wrong_col`): every rank's time, the slowest, the wrong elements summed.
struct RankTimes {
  std::vector<double> per_rank;
  double slowest = 0;
  int64_t wrong = 0;
};
RankTimes rank_times(const std::vector<std::vector<double>>& ranks, size_t wrong_col) {
  RankTimes t;
  for (const auto& v : ranks) {
    t.per_rank.push_back(v.at(0));
    t.slowest = std::max(t.slowest, v.at(0));
    t.wrong += static_cast<int64_t>(v.at(wrong_col));
  }
  return t;
}

/// A rank's time per call (us): `warmup` untimed calls, then `runs` repetitions of `iters` calls (eager,
/// or one CUDA graph of them), each lined up anew (a store barrier named `key`/start/rep, then a one-element
/// NCCL all-reduce of `align`); the median of the runs.
template <class Call>
double time_per_call(Call&& call, bool graph, int iters, int warmup, int runs, fk::dist::TcpStore& store, fk::dist::Communicator& comm,
                     Tensor& align, const std::string& key) {
  const cudaStream_t s = fk::current_stream();
  for (int i = 0; i < warmup; ++i) call();
  cudaEvent_t e0, e1;
  FK_CUDA_CHECK(cudaEventCreate(&e0));
  FK_CUDA_CHECK(cudaEventCreate(&e1));
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    FK_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; ++i) call();
    FK_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    FK_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    FK_CUDA_CHECK(cudaGraphDestroy(g));
    FK_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm the graph
  }
  comm.synchronize(s);
  std::vector<double> run_us;
  for (int rep = 0; rep < runs; ++rep) {
    store.barrier(key + "/start/" + std::to_string(rep));
    comm.all_reduce_(align);
    FK_CUDA_CHECK(cudaEventRecord(e0, s));
    if (graph) FK_CUDA_CHECK(cudaGraphLaunch(exec, s));
    else
      for (int i = 0; i < iters; ++i) call();
    FK_CUDA_CHECK(cudaEventRecord(e1, s));
    comm.synchronize(s);
    float ms = 0;
    FK_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    run_us.push_back(1000.0 * ms / iters);
  }
  if (exec) FK_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FK_CUDA_CHECK(cudaEventDestroy(e0));
  FK_CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(run_us.begin(), run_us.end());
  return run_us[run_us.size() / 2];
}

/// The expert-parallel rows of fk_collectives (--op ep_dispatch_combine[_nccl]); returns the exit code.
/// Routing, per rank and token count: top-k distinct experts drawn uniformly (std::mt19937 seeded by
/// rank and token count, the same on every run), weights uniform in [0.5, 1) normalised to sum 1 (a
/// renormalised top-k). The checked round trip: dispatch, the stand-in experts
/// (fk::kernels::ep::scale_by_experts_kernel: each row times sum_j w_j (1 + id_j % 3) over this rank's
/// ids), combine; every token's output must be x times sum_j w_j (1 + id_j % 3) over all its ids.
/// The timed calls are dispatch then combine of the received rows as they are (no expert work).
int run_ep(const std::string& op, fk::dist::TcpStore& store, fk::dist::Communicator& comm, const std::vector<int>& token_counts, int hidden,
           int topk, int experts, int iters, int warmup, int runs, bool graph, const std::string& jsonl, const std::string& launcher) {
  using fk::dist::EpAllToAll;
  const int w = comm.world_size(), r = comm.rank();
  const EpAllToAll::Backend backend = op == "ep_dispatch_combine" ? EpAllToAll::Backend::kPeer : EpAllToAll::Backend::kNccl;
  if (graph && backend == EpAllToAll::Backend::kNccl)
    throw std::runtime_error("--op " + op + ": the NCCL baseline brings the counts to the host between its steps and cannot be captured (drop --graph)");
  if (experts % w != 0 || topk > experts) throw std::runtime_error("--experts " + std::to_string(experts) + ": a multiple of the " + std::to_string(w) + " ranks, at least --topk");
  const int max_t = *std::max_element(token_counts.begin(), token_counts.end());
  EpAllToAll ep(store, comm, {experts, hidden, topk, max_t}, backend);
  const cudaStream_t s = fk::current_stream();
  Tensor align = fk::empty({1}, fk::DType::kF32);
  FK_CUDA_CHECK(cudaMemsetAsync(align.data_ptr(), 0, 4, s));
  unsigned long long* wrong_d = nullptr;
  FK_CUDA_CHECK(cudaMalloc(&wrong_d, sizeof(unsigned long long)));
  if (r == 0)
    std::printf("# fk_collectives %s bf16, %d ranks (%s), hidden %d, top-%d of %d experts, %s\n#%8s %12s %10s %8s\n", op.c_str(), w,
                launcher.c_str(), hidden, topk, experts, graph ? "CUDA graph" : "eager", "tokens", "sent (B)", "time (us)", "#wrong");
  for (size_t step = 0; step < token_counts.size(); ++step) {
    const int T = token_counts[step];
    std::mt19937 rng(static_cast<uint32_t>(1000003u * uint32_t(r + 1) + uint32_t(T)));
    std::vector<int32_t> ids(size_t(T) * topk);
    std::vector<float> wts(size_t(T) * topk), f(size_t(T), 0.f);
    std::vector<int> perm(static_cast<size_t>(experts));
    for (int t = 0; t < T; ++t) {
      for (int e = 0; e < experts; ++e) perm[size_t(e)] = e;
      float sum = 0;
      for (int j = 0; j < topk; ++j) {  // a partial Fisher-Yates shuffle: k distinct experts
        const int pick = j + static_cast<int>(rng() % uint32_t(experts - j));
        std::swap(perm[size_t(j)], perm[size_t(pick)]);
        ids[size_t(t) * topk + j] = perm[size_t(j)];
        wts[size_t(t) * topk + j] = 0.5f + 0.5f * float(rng() % 1024) / 1024.f;
        sum += wts[size_t(t) * topk + j];
      }
      for (int j = 0; j < topk; ++j) {
        wts[size_t(t) * topk + j] /= sum;
        f[size_t(t)] += wts[size_t(t) * topk + j] * float(1 + ids[size_t(t) * topk + j] % 3);
      }
    }
    Tensor x = fk::empty({T, hidden}, fk::DType::kBF16), idt = fk::empty({T, topk}, fk::DType::kI32), wt = fk::empty({T, topk}, fk::DType::kF32);
    Tensor fd = fk::empty({T}, fk::DType::kF32), out = fk::empty({T, hidden}, fk::DType::kBF16);
    Tensor y = fk::empty({int64_t(w) * max_t, hidden}, fk::DType::kBF16);
    const int64_t n = int64_t(T) * hidden;
    if (n > 0) {
      fill_pattern_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(nullptr, x.data<fk::bf16>(), n, r);
      FK_CHECK_LAUNCH();
      FK_CUDA_CHECK(cudaMemcpyAsync(idt.data_ptr(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice, s));
      FK_CUDA_CHECK(cudaMemcpyAsync(wt.data_ptr(), wts.data(), wts.size() * 4, cudaMemcpyHostToDevice, s));
      FK_CUDA_CHECK(cudaMemcpyAsync(fd.data_ptr(), f.data(), f.size() * 4, cudaMemcpyHostToDevice, s));
    }
    // Checked round trip.
    const EpAllToAll::Dispatched& d = ep.dispatch(x, idt, wt);
    fk::kernels::ep::scale_by_experts_kernel<<<dim3(32, unsigned(w)), 256, 0, s>>>(
        d.x.data<__nv_bfloat16>(), d.topk_ids.data<int32_t>(), d.topk_weights.data<float>(), d.counts, d.capacity, hidden, topk,
        ep.first_expert(), ep.experts_per_rank(), y.data<__nv_bfloat16>());
    FK_CHECK_LAUNCH();
    ep.combine(y, out);
    FK_CUDA_CHECK(cudaMemsetAsync(wrong_d, 0, sizeof(unsigned long long), s));
    if (n > 0) {
      count_ep_wrong_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(out.data<__nv_bfloat16>(), x.data<__nv_bfloat16>(), fd.data<float>(), n,
                                                                     hidden, wrong_d);
      FK_CHECK_LAUNCH();
    }
    // The rows this rank sends: one per (token, rank holding one of its experts).
    int64_t sent_rows = 0;
    for (int t = 0; t < T; ++t) {
      uint32_t mask = 0;
      for (int j = 0; j < topk; ++j) mask |= 1u << (ids[size_t(t) * topk + j] / (experts / w));
      sent_rows += __builtin_popcount(mask);
    }
    comm.synchronize(s);
    unsigned long long wrong = 0;
    FK_CUDA_CHECK(cudaMemcpy(&wrong, wrong_d, sizeof wrong, cudaMemcpyDeviceToHost));
    auto call = [&] {
      const EpAllToAll::Dispatched& dd = ep.dispatch(x, idt, wt);
      ep.combine(dd.x, out);
    };
    const double us = time_per_call(call, graph, iters, std::max(warmup, step == 0 ? 50 : 0), runs, store, comm, align,
                                    "ep/" + std::to_string(step));
    // The slowest rank, the most rows any rank sent and the wrong elements of every rank.
    const auto ranks = gather_rank_values(store, "ep/" + std::to_string(step) + "/done", {us, double(sent_rows), double(wrong)});
    if (r == 0) {
      const RankTimes rt = rank_times(ranks, 2);
      const double slowest = rt.slowest;
      const int64_t total_wrong = rt.wrong;
      const std::vector<double>& per_rank = rt.per_rank;
      int64_t most_rows = 0;
      for (const auto& v : ranks) most_rows = std::max<int64_t>(most_rows, static_cast<int64_t>(v.at(1)));
      const double bytes = double(most_rows) * hidden * 2;
      std::printf(" %8d %12.0f %10.2f %8lld\n", T, bytes, slowest, (long long)total_wrong);
      if (!jsonl.empty()) {
        nlohmann::json j{{"tool", "fk_collectives"}, {"op", op}, {"backend", EpAllToAll::backend_name(backend)}, {"dtype", "bf16"},
                         {"ranks", w}, {"launcher", launcher}, {"graph", graph}, {"tokens", T}, {"hidden", hidden}, {"topk", topk},
                         {"experts", experts}, {"max_sent_bytes", bytes}, {"us", slowest}, {"us_per_rank", per_rank},
                         {"wrong", total_wrong}, {"iters", iters}, {"runs", runs}};
        std::ofstream(jsonl, std::ios::app) << j.dump() << "\n";
      }
    }
  }
  cudaFree(wrong_d);
  store.barrier("ep/end");
  return 0;
}

/// |got - sum of the parts| above 1% of it plus abs_tol: wrong.
__global__ void count_linear_wrong_kernel(const __nv_bfloat16* got, const float* parts, int nparts, int64_t n, float abs_tol,
                                          unsigned long long* wrong) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float want = 0;
  for (int q = 0; q < nparts; ++q) want += parts[q * n + i];
  const float g = __bfloat162float(got[i]);
  if (!(fabsf(g - want) <= 1e-2f * fabsf(want) + abs_tol)) atomicAdd(wrong, 1ull);
}

/// The overlapped linears' rows of fk_collectives (--op all_gather_matmul[_nccl], matmul_reduce_scatter[_nccl]); returns
/// the exit code. Rank q's inputs: x_q ~ N(0, 1) (seed 1000 + q; all_gather_matmul: its shard [T/W, K]; matmul_reduce_scatter:
/// [T, K]), its weight w_q [N, K] ~ N(0, 1/sqrt(K)) (seed 2000 + q); every rank rebuilds the others' from the seeds for
/// its fp32 reference (cuBLAS, fp32 out): all_gather_matmul y = concat_q(x_q) w_r^T, matmul_reduce_scatter y = rows r of
/// sum_q x_q w_q^T. Tolerance: 1% of the value plus 0.01 x (W + 1) (W + 1 roundings of O(1) partials in bf16).
int run_linear(const std::string& op, fk::dist::TcpStore& store, fk::dist::Communicator& comm, const std::vector<int>& totals, int64_t K,
               int64_t N, int iters, int warmup, int runs, const std::string& jsonl, const std::string& launcher) {
  const int w = comm.world_size(), r = comm.rank();
  const bool gather = op.rfind("all_gather_matmul", 0) == 0, nccl = op.size() > 5 && op.compare(op.size() - 5, 5, "_nccl") == 0;
  int64_t max_t = 0;
  for (int t : totals) {
    if (t <= 0 || t % w != 0) throw std::runtime_error("--tokens " + std::to_string(t) + ": the rows over all ranks, a positive multiple of the " + std::to_string(w) + " ranks");
    max_t = std::max<int64_t>(max_t, t);
  }
  if (K % 8 != 0 || N % 8 != 0) throw std::runtime_error("--k " + std::to_string(K) + " / --n " + std::to_string(N) + ": multiples of 8");
  std::unique_ptr<fk::dist::OverlappedLinear> ol;
  if (!nccl) ol = std::make_unique<fk::dist::OverlappedLinear>(store, comm, fk::dist::OverlappedLinear::Config{max_t, gather ? K : 0, gather ? 0 : N});
  const cudaStream_t s = fk::current_stream();
  const auto bf = fk::DType::kBF16;
  Tensor align = fk::empty({1}, fk::DType::kF32);
  FK_CUDA_CHECK(cudaMemsetAsync(align.data_ptr(), 0, 4, s));
  unsigned long long* wrong_d = nullptr;
  FK_CUDA_CHECK(cudaMalloc(&wrong_d, sizeof(unsigned long long)));
  if (r == 0)
    std::printf("# fk_collectives %s bf16, %d ranks (%s), K %lld, N %lld, eager\n#%8s %10s %12s %8s\n", op.c_str(), w, launcher.c_str(),
                (long long)K, (long long)N, "tokens", "time (us)", "TFLOP/s/rank", "#wrong");
  for (size_t step = 0; step < totals.size(); ++step) {
    const int64_t T = totals[step], c = T / w;
    auto gemm = [&](void* y, int64_t ldy, const void* x, const void* wt, int64_t m) {
      fk::kernels::gemm_cublaslt(y, ldy, x, K, wt, nullptr, m, N, K, fk::kernels::GemmDType::kBF16, s);
    };
    Tensor x = fk::empty({gather ? c : T, K}, bf), wt = fk::empty({N, K}, bf), y = fk::empty({gather ? T : c, N}, bf);
    fk::fill_normal(x, 1000 + uint64_t(r));
    fk::fill_normal(wt, 2000 + uint64_t(r), 0.f, 1.f / std::sqrt(float(K)));
    Tensor full, partial;  // the serial baseline's gathered input / partial product
    if (nccl) full = gather ? fk::empty({T, K}, bf) : fk::empty({T, N}, bf);
    auto call = [&] {
      if (!nccl && gather) ol->all_gather_matmul(x, wt, y);
      else if (!nccl) ol->matmul_reduce_scatter(x, wt, y);
      else if (gather) {
        comm.all_gather(x, full);
        gemm(y.data_ptr(), N, full.data_ptr(), wt.data_ptr(), T);
      } else {
        gemm(full.data_ptr(), N, x.data_ptr(), wt.data_ptr(), T);
        comm.reduce_scatter(full, y);
      }
    };
    // Checked call against the fp32 reference.
    call();
    {
      const int parts = gather ? 1 : w;
      const int64_t out_rows = gather ? T : c;
      Tensor ref = fk::empty({parts, out_rows, N}, fk::DType::kF32);
      if (gather) {
        Tensor xf = fk::empty({T, K}, bf);
        for (int q = 0; q < w; ++q) {
          Tensor view = Tensor::from_blob(static_cast<char*>(xf.data_ptr()) + int64_t(q) * c * K * 2, bf, {c, K});
          fk::fill_normal(view, 1000 + uint64_t(q));
        }
        fk::kernels::gemm_f32_out(ref.data<float>(), N, xf.data_ptr(), K, wt.data_ptr(), T, N, K, fk::kernels::GemmDType::kBF16, s);
      } else {
        Tensor xq = fk::empty({T, K}, bf), wq = fk::empty({N, K}, bf);
        for (int q = 0; q < w; ++q) {
          fk::fill_normal(xq, 1000 + uint64_t(q));
          fk::fill_normal(wq, 2000 + uint64_t(q), 0.f, 1.f / std::sqrt(float(K)));
          fk::kernels::gemm_f32_out(ref.data<float>() + int64_t(q) * c * N, N, static_cast<char*>(xq.data_ptr()) + int64_t(r) * c * K * 2, K,
                                    wq.data_ptr(), c, N, K, fk::kernels::GemmDType::kBF16, s);
        }
      }
      const int64_t n = out_rows * N;
      FK_CUDA_CHECK(cudaMemsetAsync(wrong_d, 0, sizeof(unsigned long long), s));
      count_linear_wrong_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(y.data<__nv_bfloat16>(), ref.data<float>(), parts, n,
                                                                         0.01f * float(w + 1), wrong_d);
      FK_CHECK_LAUNCH();
      comm.synchronize(s);
    }
    unsigned long long wrong = 0;
    FK_CUDA_CHECK(cudaMemcpy(&wrong, wrong_d, sizeof wrong, cudaMemcpyDeviceToHost));
    const double us = time_per_call(call, false, iters, std::max(warmup, step == 0 ? 10 : 2), runs, store, comm, align,
                                    "linear/" + std::to_string(step));
    const auto ranks = gather_rank_values(store, "linear/" + std::to_string(step) + "/done", {us, double(wrong)});
    if (r == 0) {
      const RankTimes rt = rank_times(ranks, 1);
      const double slowest = rt.slowest;
      const int64_t total_wrong = rt.wrong;
      const std::vector<double>& per_rank = rt.per_rank;
      const double tflops = 2.0 * double(T) * double(K) * double(N) / (slowest * 1e6);
      std::printf(" %8lld %10.1f %12.1f %8lld\n", (long long)T, slowest, tflops, (long long)total_wrong);
      if (!jsonl.empty()) {
        nlohmann::json j{{"tool", "fk_collectives"}, {"op", op}, {"backend", nccl ? "nccl_serial" : "overlapped_peer"}, {"dtype", "bf16"},
                         {"ranks", w}, {"launcher", launcher}, {"graph", false}, {"tokens", T}, {"k", K}, {"n", N}, {"us", slowest},
                         {"us_per_rank", per_rank}, {"tflops_per_rank", tflops}, {"wrong", total_wrong}, {"iters", iters}, {"runs", runs}};
        std::ofstream(jsonl, std::ios::app) << j.dump() << "\n";
      }
    }
  }
  cudaFree(wrong_d);
  store.barrier("linear/end");
  return 0;
}

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  const double mult = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (end == s.c_str() || mult < 0 || v <= 0) throw CLI::ValidationError("size", "\"" + s + "\": expected bytes, optionally with K, M or G");
  return static_cast<int64_t>(v * mult);
}

}  // namespace

int fk_collectives_main(int argc, char** argv) {
  CLI::App app{"fk_collectives (also `fk_bench collectives`): an nccl-tests-style sweep of all_reduce / all_gather / reduce_scatter "
               "over the job's ranks, the own all-reduce and its fused RMSNorm, the EP dispatch + combine, the overlapped linears"};
  std::string op = "all_reduce", dtype = "bf16", min_s = "8", max_s = "1G", jsonl;
  int iters = 20, warmup = 5;
  double factor = 2.0;
  bool graph = false;
  app.add_option("--op", op,
                 "all_reduce (NCCL), all_gather, reduce_scatter, or the own all-reduce over peer memory: all_reduce_peer (its own "
                 "choice), all_reduce_one_shot, all_reduce_two_shot, all_reduce_lamport; all_reduce_add_rms_norm (the own all-reduce fused with the residual "
                 "add and RMSNorm, rows of --hidden) and nccl_add_rms_norm (NCCL's all-reduce, then fused_add_rms_norm)")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "all_reduce_peer", "all_reduce_one_shot", "all_reduce_two_shot", "all_reduce_lamport",
                             "all_reduce_add_rms_norm", "nccl_add_rms_norm", "ep_dispatch_combine", "ep_dispatch_combine_nccl",
                             "all_gather_matmul", "all_gather_matmul_nccl", "matmul_reduce_scatter", "matmul_reduce_scatter_nccl"}));
  std::vector<int> ep_tokens{1, 16, 64, 128, 256, 512};
  int ep_topk = 8, ep_experts = 256;
  int64_t lin_k = 4096, lin_n = 3072;
  app.add_option("--tokens", ep_tokens,
                 "ep_*: the tokens per rank, one row each (default 1 16 64 128 256 512); *matmul*: the rows over all ranks "
                 "(default 1024 2048 4096 8192)")
      ->check(CLI::Range(0, 65536));
  app.add_option("--k", lin_k, "*matmul*: the GEMM's inner size on one rank (all_gather_matmul: the hidden size)")->check(CLI::Range(int64_t{8}, int64_t{1} << 20));
  app.add_option("--n", lin_n, "*matmul*: the GEMM's output columns on one rank")->check(CLI::Range(int64_t{8}, int64_t{1} << 20));
  app.add_option("--topk", ep_topk, "ep_*: experts per token")->check(CLI::Range(1, 32));
  app.add_option("--experts", ep_experts, "ep_*: experts over all ranks (a multiple of the ranks)")->check(CLI::Range(1, 1 << 16));
  int hidden = 4096;
  app.add_option("--hidden", hidden, "the row size of the *_add_rms_norm and ep_* ops (2048, 4096, 5120, 7168, 8192)")
      ->check(CLI::IsMember({2048, 4096, 5120, 7168, 8192}));
  std::string peer_max_s = "8M";
  app.add_option("--peer-max-bytes", peer_max_s, "the own all-reduce's buffer (its largest message; larger sizes end its sweep)");
  app.add_option("--dtype", dtype, "bf16 or f32")->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--min-bytes", min_s, "smallest message (bytes; K, M, G suffixes)");
  app.add_option("--max-bytes", max_s, "largest message");
  app.add_option("--factor", factor, "size step")->check(CLI::Range(1.01, 1024.0));
  app.add_option("--iters", iters, "timed calls per size")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed calls first")->check(CLI::Range(0, 100000));
  int runs = 5;
  app.add_option("--runs", runs, "timed repetitions of the iters calls per size; a rank's time is their median")->check(CLI::Range(1, 1000));
  app.add_flag("--graph", graph, "time one CUDA graph of the iters calls (production decode captures collectives)");
  app.add_option("--jsonl", jsonl, "append one JSON line per size (rank 0)");
  CLI11_PARSE(app, argc, argv);
  try {
    const fk::dist::DistEnv env = fk::dist::dist_env();
    fk::dist::TcpStore store(env, std::chrono::seconds(120));
    fk::dist::Communicator comm(store, std::chrono::seconds(120));
    const int w = comm.world_size(), r = comm.rank();
    cudaStream_t s = nullptr;
    FK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fk::StreamGuard guard(s);
    if (op.find("matmul") != std::string::npos) {
      if (dtype != "bf16" || graph) throw std::runtime_error("--op " + op + ": bf16 and eager only (drop --dtype / --graph)");
      if (app.count("--tokens") == 0) ep_tokens = {1024, 2048, 4096, 8192};
      return run_linear(op, store, comm, ep_tokens, lin_k, lin_n, iters, warmup, runs, jsonl, env.launcher);
    }
    if (op.rfind("ep_", 0) == 0) {
      if (dtype != "bf16") throw std::runtime_error("--op " + op + ": bf16 only");
      if (ep_tokens.empty()) throw std::runtime_error("--tokens: at least one token count");
      return run_ep(op, store, comm, ep_tokens, hidden, ep_topk, ep_experts, iters, warmup, runs, graph, jsonl, env.launcher);
    }
    const fk::DType dt = dtype == "f32" ? fk::DType::kF32 : fk::DType::kBF16;
    const int64_t esize = dt == fk::DType::kF32 ? 4 : 2;
    const bool norm = op.find("add_rms_norm") != std::string::npos, fused = op == "all_reduce_add_rms_norm";
    if (norm && dtype != "bf16") throw std::runtime_error("--op " + op + ": bf16 only");
    const bool peer = op.rfind("all_reduce_", 0) == 0 && !norm, reduce = op == "all_reduce" || peer || norm;
    const double bus = reduce ? 2.0 * (w - 1) / w : double(w - 1) / w;
    std::unique_ptr<fk::dist::PeerAllReduce> par;
    const fk::dist::PeerAllReduce::Algo algo = op == "all_reduce_one_shot"   ? fk::dist::PeerAllReduce::Algo::kOneShot
                                               : op == "all_reduce_two_shot" ? fk::dist::PeerAllReduce::Algo::kTwoShot
                                               : op == "all_reduce_lamport"  ? fk::dist::PeerAllReduce::Algo::kLamport
                                                                             : fk::dist::PeerAllReduce::Algo::kAuto;
    if (peer || norm) par = std::make_unique<fk::dist::PeerAllReduce>(store, parse_bytes(peer_max_s), std::chrono::seconds(60));
    const AddRmsNormCall add_rms_norm = add_rms_norm_for(hidden);
    // One element all-reduced right before the first timed call lines the ranks' streams up (a host
    // barrier alone leaves them as far apart as the store's round trips, which a short sweep row shows).
    Tensor align = fk::empty({1}, fk::DType::kF32);
    FK_CUDA_CHECK(cudaMemsetAsync(align.data_ptr(), 0, 4, s));
    comm.all_reduce_(align);  // NCCL's first call sets up its connections: not inside the first row
    comm.synchronize(s);
    unsigned long long* wrong_d = nullptr;
    FK_CUDA_CHECK(cudaMalloc(&wrong_d, sizeof(unsigned long long)));
    if (r == 0)
      std::printf("# fk_collectives %s %s, %d ranks (%s), %s\n#%12s %12s %10s %10s %10s %8s\n", op.c_str(), dtype.c_str(), w, env.launcher.c_str(),
                  graph ? "CUDA graph" : "eager", "size (B)", "count", "time (us)", "algbw GB/s", "busbw GB/s", "#wrong");
    int64_t step = 0;
    for (double bytes_d = double(parse_bytes(min_s)); bytes_d <= double(parse_bytes(max_s)) * 1.0000001; bytes_d *= factor, ++step) {
      // count: elements of the per-rank buffer that all_reduce reduces / all_gather sends / reduce_scatter receives, a multiple of w
      int64_t count = std::max<int64_t>(1, static_cast<int64_t>(bytes_d) / esize);
      if (!reduce) count = std::max<int64_t>(1, count / w);
      if (norm) count = std::max<int64_t>(1, count / hidden) * hidden;
      if ((peer || norm) && count * esize > (algo == fk::dist::PeerAllReduce::Algo::kLamport ? par->lamport_bytes() : par->max_bytes())) break;
      const int64_t in_n = op == "reduce_scatter" ? count * w : count, out_n = op == "all_gather" ? count * w : count;
      Tensor in = fk::empty({in_n}, dt), out = reduce ? in : fk::empty({out_n}, dt);
      auto fill = [&] {
        fill_pattern_kernel<<<unsigned((in_n + 255) / 256), 256, 0, s>>>(dt == fk::DType::kF32 ? in.data<float>() : nullptr,
                                                                          dt == fk::DType::kF32 ? nullptr : in.data<fk::bf16>(), in_n, r);
        FK_CHECK_LAUNCH();
      };
      Tensor res, weight;
      if (norm) {
        res = fk::empty({in_n}, dt);
        weight = fk::empty({hidden}, dt);
        fill_pattern_kernel<<<unsigned((in_n + 255) / 256), 256, 0, s>>>(nullptr, res.data<fk::bf16>(), in_n, 3);
        fill_pattern_kernel<<<unsigned((hidden + 255) / 256), 256, 0, s>>>(nullptr, weight.data<fk::bf16>(), hidden, 0);
        FK_CHECK_LAUNCH();
      }
      auto call = [&] {
        if (norm) add_rms_norm(fused ? NormMode::kFused : NormMode::kNccl, par.get(), comm, in, res, weight, count / hidden);
        else if (peer) par->all_reduce_(in, algo);
        else if (op == "all_reduce") comm.all_reduce_(in);
        else if (op == "all_gather") comm.all_gather(in, out);
        else comm.reduce_scatter(in, out);
      };
      // Checked call.
      fill();
      if (!norm) call();
      FK_CUDA_CHECK(cudaMemsetAsync(wrong_d, 0, sizeof(unsigned long long), s));
      const float ranks = float(w) * float(w + 1) / 2.f;
      bool checked = true;
      if (norm) {
        // The fused op against the peer all-reduce followed by fused_add_rms_norm on the same inputs, bitwise (x and the
        // residual); the NCCL path is what such references are made of and is not checked (#wrong -1).
        checked = fused;
        if (fused) {
          Tensor x2 = fk::empty({in_n}, dt), r2 = fk::empty({in_n}, dt);
          FK_CUDA_CHECK(cudaMemcpyAsync(x2.data_ptr(), in.data_ptr(), in.nbytes(), cudaMemcpyDeviceToDevice, s));
          FK_CUDA_CHECK(cudaMemcpyAsync(r2.data_ptr(), res.data_ptr(), res.nbytes(), cudaMemcpyDeviceToDevice, s));
          call();
          par->all_reduce_(x2, fk::dist::PeerAllReduce::Algo::kOneShot);
          add_rms_norm(NormMode::kNormOnly, nullptr, comm, x2, r2, weight, count / hidden);
          FK_CUDA_CHECK(cudaMemsetAsync(wrong_d, 0, sizeof(unsigned long long), s));
          count_unequal_kernel<<<unsigned((in_n + 255) / 256), 256, 0, s>>>(reinterpret_cast<const uint16_t*>(in.data_ptr()),
                                                                             reinterpret_cast<const uint16_t*>(x2.data_ptr()), in_n, wrong_d);
          count_unequal_kernel<<<unsigned((in_n + 255) / 256), 256, 0, s>>>(reinterpret_cast<const uint16_t*>(res.data_ptr()),
                                                                             reinterpret_cast<const uint16_t*>(r2.data_ptr()), in_n, wrong_d);
          FK_CHECK_LAUNCH();
          comm.synchronize(s);
        }
      } else {
        count_wrong_kernel<<<unsigned((out_n + 255) / 256), 256, 0, s>>>(dt == fk::DType::kF32 ? out.data<float>() : nullptr,
                                                                          dt == fk::DType::kF32 ? nullptr : out.data<fk::bf16>(), out_n,
                                                                          ranks, count, op == "reduce_scatter" ? int64_t(r) * count : 0,
                                                                          op == "all_gather" ? 1 : 0, wrong_d);
        FK_CHECK_LAUNCH();
      }
      comm.synchronize(s);
      unsigned long long wrong = 0;
      FK_CUDA_CHECK(cudaMemcpy(&wrong, wrong_d, sizeof wrong, cudaMemcpyDeviceToHost));
      // Timed calls (all_reduce keeps summing in place: the values grow, the time does not depend on them).
      // The first size warms longer: the first calls over freshly mapped peer memory ran slow for a while (the first
      // row of every peer sweep on 2 and 4 H100s, session 24: 22-39 us against 8-12 us at the next sizes).
      const double us = time_per_call(call, graph, iters, step == 0 ? std::max(warmup, 200) : warmup, runs, store, comm, align,
                                      "sweep/" + std::to_string(step));
      // The slowest rank and the wrong elements of every rank, through the store.
      const auto per_rank_values = gather_rank_values(store, "sweep/" + std::to_string(step) + "/done", {us, double(wrong)});
      if (r == 0) {
        const RankTimes rt = rank_times(per_rank_values, 1);
        const double slowest = rt.slowest;
        const std::vector<double>& per_rank = rt.per_rank;
        const int64_t total_wrong = checked ? rt.wrong : -1;
        const double bytes = double(std::max(in_n, out_n)) * esize, algbw = bytes / (slowest * 1e3);
        std::printf(" %12lld %12lld %10.2f %10.2f %10.2f %8lld\n", (long long)bytes, (long long)count, slowest, algbw, algbw * bus,
                    (long long)total_wrong);
        if (!jsonl.empty()) {
          nlohmann::json j{{"tool", "fk_collectives"}, {"op", op}, {"dtype", dtype}, {"ranks", w}, {"launcher", env.launcher},
                           {"algo", peer ? fk::dist::algo_name(algo == fk::dist::PeerAllReduce::Algo::kAuto ? par->choose(count * esize) : algo) : fused ? "one_shot" : "nccl"},
                           {"graph", graph}, {"bytes", bytes}, {"count", count}, {"us", slowest}, {"us_per_rank", per_rank},
                           {"algbw_gbps", algbw}, {"busbw_gbps", algbw * bus}, {"wrong", total_wrong}, {"iters", iters}, {"runs", runs}};
          if (norm) j["hidden"] = hidden, j["rows"] = count / hidden;
          std::ofstream(jsonl, std::ios::app) << j.dump() << "\n";
        }
      }
    }
    cudaFree(wrong_d);
    store.barrier("sweep/end");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fk_collectives: %s\n", e.what());
    return 1;
  }
}
