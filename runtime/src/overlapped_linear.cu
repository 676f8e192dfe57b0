// Overlapped linears (fk/runtime/overlapped_linear.h; Note [Overlapped linears] in
// fk/kernels/async_tp.cuh).
#include "fk/runtime/overlapped_linear.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "fk/kernels/async_tp.cuh"
#include "fk/kernels/gemm.h"
#include "fk/runtime/cuda_check.h"

namespace fk::dist {
namespace {

namespace at = fk::kernels::async_tp;

/// OverlappedLinear objects made by this process so far (the n-th one's store keys; the same order on every rank).
int g_generation = 0;

static_assert(at::kMaxRanks == PeerMemory::kMaxRanks, "the flags hold every rank");

at::Flags* flags_of(char* base) { return reinterpret_cast<at::Flags*>(base); }

void gemm(void* y, int64_t ldy, const void* x, const void* w, int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  if (m > 0) fk::kernels::gemm_cublaslt(y, ldy, x, k, w, nullptr, m, n, k, fk::kernels::GemmDType::kBF16, s);
}

}  // namespace

OverlappedLinear::OverlappedLinear(TcpStore& store, Communicator& comm, const Config& cfg, std::chrono::milliseconds timeout)
    : comm_(comm), cfg_(cfg), rank_(comm.rank()), world_(comm.world_size()),
      timeout_ns_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count())) {
  const std::string who = "overlapped linear (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")";
  if (world_ < 2 || world_ > at::kMaxRanks) throw std::runtime_error(who + ": serves 2 to " + std::to_string(at::kMaxRanks) + " ranks");
  if (cfg.max_tokens <= 0 || cfg.max_tokens % world_ != 0)
    throw std::runtime_error(who + ": max_tokens " + std::to_string(cfg.max_tokens) + " must be a positive multiple of the " +
                             std::to_string(world_) + " ranks");
  if (cfg.gather_k < 0 || cfg.gather_k % 8 != 0 || cfg.scatter_n < 0 || cfg.scatter_n % 8 != 0 || cfg.gather_k + cfg.scatter_n == 0)
    throw std::runtime_error(who + ": gather_k " + std::to_string(cfg.gather_k) + " and scatter_n " + std::to_string(cfg.scatter_n) +
                             " must be multiples of 8 (16-byte rows), not both 0");
  // Two halves of W slots, each holding up to T/W rows and starting 256-byte aligned (the GEMMs read them).
  const int64_t rows = cfg.max_tokens / world_;
  ag_slot_ = align_up(rows * cfg.gather_k * 2, 256);
  rs_slot_ = align_up(rows * cfg.scatter_n * 2, 256);
  off_ag_ = at::kFlagBytes;
  off_rs_ = off_ag_ + 2 * world_ * ag_slot_;
  const int64_t total = off_rs_ + 2 * world_ * rs_slot_;
  mem_ = std::make_unique<PeerMemory>(store, "fk/overlapped_linear/" + std::to_string(g_generation++) + "/", who, total, at::kFlagBytes);
  if (cfg.scatter_n > 0) stage_ = empty({world_ * rs_slot_}, DType::kU8);
  for (int p = 0; p < world_; ++p) {
    FK_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_[p], cudaStreamNonBlocking));
    FK_CUDA_CHECK(cudaEventCreateWithFlags(&chunk_[p], cudaEventDisableTiming));
    FK_CUDA_CHECK(cudaEventCreateWithFlags(&sent_[p], cudaEventDisableTiming));
  }
}

OverlappedLinear::~OverlappedLinear() {
  for (int p = 0; p < world_; ++p) {
    cudaStreamSynchronize(copy_[p]);
    cudaEventDestroy(sent_[p]);
    cudaEventDestroy(chunk_[p]);
    cudaStreamDestroy(copy_[p]);
  }
}

void OverlappedLinear::push(int p, char* dst, const void* src, int64_t bytes, uint32_t* flag, uint32_t epoch) {
  cudaStream_t c = copy_[p];
  if (bytes > 0) FK_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, c));
  at::signal_kernel<<<1, 1, 0, c>>>(flag, epoch);
  FK_CHECK_LAUNCH();
  FK_CUDA_CHECK(cudaEventRecord(sent_[p], c));
}

void OverlappedLinear::wait_pushes(cudaStream_t s) {
  for (int p = 0; p < world_; ++p)
    if (p != rank_) FK_CUDA_CHECK(cudaStreamWaitEvent(s, sent_[p], 0));
}

/// The epochs and receive halves are host values (Note [Overlapped linears]): a captured call would replay one epoch.
void refuse_capture(const char* op, int rank, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  FK_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  if (st != cudaStreamCaptureStatusNone)
    throw std::runtime_error(std::string("overlapped linear ") + op + " (rank " + std::to_string(rank) +
                             "): called while the stream is captured into a CUDA graph; it runs eager only (its epochs are host values)");
}

void OverlappedLinear::check_call(const char* op, const Tensor& a, int64_t rows, int64_t cols, const char* what) const {
  if (a.dim() != 2 || a.size(0) != rows || a.size(1) != cols || a.dtype() != DType::kBF16 || !a.is_contiguous())
    throw std::runtime_error(std::string("overlapped linear ") + op + " (rank " + std::to_string(rank_) + "): " + what + " " + a.str() +
                             ": a contiguous bf16 [" + std::to_string(rows) + ", " + std::to_string(cols) + "] expected");
}

void OverlappedLinear::all_gather_matmul(const Tensor& x_shard, const Tensor& w, Tensor& y) {
  const int64_t K = cfg_.gather_k;
  if (K == 0) throw std::runtime_error("overlapped linear all_gather_matmul (rank " + std::to_string(rank_) + "): built with gather_k 0");
  const int64_t c = x_shard.dim() == 2 ? x_shard.size(0) : -1, T = c * world_, N = w.dim() == 2 ? w.size(0) : -1;
  if (T > cfg_.max_tokens)
    throw std::runtime_error("overlapped linear all_gather_matmul (rank " + std::to_string(rank_) + "): " + std::to_string(T) +
                             " rows over the ranks, above max_tokens " + std::to_string(cfg_.max_tokens));
  check_call("all_gather_matmul", x_shard, c, K, "x_shard");
  check_call("all_gather_matmul", w, N, K, "w");
  check_call("all_gather_matmul", y, T, N, "y");
  const cudaStream_t s = current_stream();
  refuse_capture("all_gather_matmul", rank_, s);
  const uint32_t epoch = ++ag_epoch_;
  const int64_t chunk_bytes = c * K * 2;
  char* const* bases = mem_->buffers();
  auto slot = [&](int owner, int src) {  // where rank src's shard lands in rank owner's buffer this call
    return bases[owner] + off_ag_ + (int64_t(epoch & 1) * world_ + src) * ag_slot_;
  };
  // Pushes, one copy stream per peer (copies to different peers run side by side on their links).
  FK_CUDA_CHECK(cudaEventRecord(chunk_[rank_], s));
  for (int i = 1; i < world_; ++i) {
    const int p = (rank_ + i) % world_;
    FK_CUDA_CHECK(cudaStreamWaitEvent(copy_[p], chunk_[rank_], 0));
    push(p, slot(p, rank_), x_shard.data_ptr(), chunk_bytes, &flags_of(bases[p])->ag[rank_], epoch);
  }
  // GEMMs: the own chunk, then ranks r - 1, r - 2, ... as they arrive.
  auto* yp = static_cast<char*>(y.data_ptr());
  gemm(yp + int64_t(rank_) * c * N * 2, N, x_shard.data_ptr(), w.data_ptr(), c, N, K, s);
  for (int i = 1; i < world_; ++i) {
    const int q = (rank_ - i + world_) % world_;
    at::wait_kernel<<<1, 1, 0, s>>>(&flags_of(bases[rank_])->ag[q], epoch, timeout_ns_, rank_, q, 0);
    FK_CHECK_LAUNCH();
    gemm(yp + int64_t(q) * c * N * 2, N, slot(rank_, q), w.data_ptr(), c, N, K, s);
  }
  // The call ends when the shard has left (the caller may reuse x_shard).
  wait_pushes(s);
}

void OverlappedLinear::matmul_reduce_scatter(const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = cfg_.scatter_n;
  if (N == 0) throw std::runtime_error("overlapped linear matmul_reduce_scatter (rank " + std::to_string(rank_) + "): built with scatter_n 0");
  const int64_t T = x.dim() == 2 ? x.size(0) : -1, K = x.dim() == 2 ? x.size(1) : -1;
  if (T < 0 || T % world_ != 0 || T > cfg_.max_tokens)
    throw std::runtime_error("overlapped linear matmul_reduce_scatter (rank " + std::to_string(rank_) + "): x " + x.str() +
                             ": rows a multiple of the " + std::to_string(world_) + " ranks, at most max_tokens " +
                             std::to_string(cfg_.max_tokens) + " expected");
  const int64_t c = T / world_;
  check_call("matmul_reduce_scatter", x, T, K, "x");
  check_call("matmul_reduce_scatter", w, N, K, "w");
  check_call("matmul_reduce_scatter", y, c, N, "y");
  const cudaStream_t s = current_stream();
  refuse_capture("matmul_reduce_scatter", rank_, s);
  const uint32_t epoch = ++rs_epoch_;
  const int64_t chunk_bytes = c * N * 2;
  char* const* bases = mem_->buffers();
  auto slot = [&](int owner, int src) {  // where rank src's partial rows for rank owner land this call
    return bases[owner] + off_rs_ + (int64_t(epoch & 1) * world_ + src) * rs_slot_;
  };
  const auto* xp = static_cast<const char*>(x.data_ptr());
  auto* stage = static_cast<char*>(stage_.data_ptr());
  // The rows for rank r + 1, r + 2, ... (each pushed as soon as computed), the own rows last.
  for (int i = 1; i <= world_; ++i) {
    const int d = (rank_ + i) % world_;
    gemm(stage + int64_t(d) * rs_slot_, N, xp + int64_t(d) * c * K * 2, w.data_ptr(), c, N, K, s);
    if (d == rank_) break;
    FK_CUDA_CHECK(cudaEventRecord(chunk_[d], s));
    FK_CUDA_CHECK(cudaStreamWaitEvent(copy_[d], chunk_[d], 0));
    push(d, slot(d, rank_), stage + int64_t(d) * rs_slot_, chunk_bytes, &flags_of(bases[d])->rs[rank_], epoch);
  }
  at::SumArgs a{};
  a.world = world_;
  for (int q = 0; q < world_; ++q) {
    if (q == rank_) {
      a.part[q] = reinterpret_cast<const __nv_bfloat16*>(stage + int64_t(q) * rs_slot_);
      continue;
    }
    at::wait_kernel<<<1, 1, 0, s>>>(&flags_of(bases[rank_])->rs[q], epoch, timeout_ns_, rank_, q, 1);
    FK_CHECK_LAUNCH();
    a.part[q] = reinterpret_cast<const __nv_bfloat16*>(slot(rank_, q));
  }
  const int64_t n = c * N;
  if (n > 0) {
    const int64_t blocks = std::min<int64_t>((n / 8 + 255) / 256, 132 * 8);
    at::sum_partials_kernel<<<unsigned(blocks), 256, 0, s>>>(a, y.data<__nv_bfloat16>(), n);
    FK_CHECK_LAUNCH();
  }
  // The staged rows must not be overwritten (next call) before they have left.
  wait_pushes(s);
}

}  // namespace fk::dist
