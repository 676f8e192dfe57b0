// The own all-reduce over NVLink peer memory (fk/runtime/peer_allreduce.h; the kernels and Note
// [Peer all-reduce] in fk/kernels/peer_allreduce.cuh).
#include "fk/runtime/peer_allreduce.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "fk/kernels/peer_allreduce.cuh"
#include "fk/runtime/peer_allreduce_fused.cuh"
#include "fk/runtime/cuda_check.h"

namespace fk::dist {
namespace {

namespace par = fk::kernels::peer_ar;

/// PeerAllReduce objects made by this process so far (the n-th one's store keys; the same order on every rank).
int g_generation = 0;

// Note [Peer all-reduce choice]
// One-shot reads the whole message from every peer once a barrier has passed; two-shot reads 1/n of
// it from each peer, meets the peers a second time and reads the other (n-1)/n from their owners:
// per rank, (n-1) x bytes over NVLink against 2 (n-1)/n x bytes, for one barrier more. At 2 ranks
// two-shot moves as much as one-shot and only adds the barrier, so one-shot serves every size; at
// more ranks one-shot's traffic grows with n and two-shot takes over above kTwoShotFrom bytes (the
// crossover vLLM and PyTorch's symmetric memory use too, to be confirmed by fk_collectives' sweep).
constexpr int64_t kTwoShotFrom = int64_t(256) << 10;
// The Lamport one-shot (Note [Lamport all-reduce]) saves the flag round trip and the NVLink reads of
// the pulling one-shot, for W - 1 pushed copies of the message; it serves messages up to these sizes.
// At 2 ranks (one pushed copy) it beat the pulling one-shot at every size to 1 MB on 2 x H100
// (13.5 against 16.2 us at 1 MB, CUDA graph; bench/results/2026-11-27-h100x4-s24); at more ranks
// each rank pushes W - 1 copies and the bound stays at 512 KB until fk_collectives' sweep says more.
constexpr int64_t kLamportUpTo2 = int64_t(1) << 20;
constexpr int64_t kLamportUpTo = int64_t(512) << 10;
constexpr int kMaxGrid = 32;

__global__ void lamport_clear_kernel(uint32_t* p, int64_t words) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) p[i] = par::kLamportClear;
}

template <class T, int W> void launch(PeerAllReduce::Algo algo, const par::Args& a, const void* in, void* out, cudaStream_t s) {
  if (algo == PeerAllReduce::Algo::kLamport) {
    par::lamport_kernel<T, W><<<par::kLamportGrid, par::kThreads, 0, s>>>(a, static_cast<const T*>(in), static_cast<T*>(out));
    return;
  }
  constexpr int64_t N = 16 / sizeof(T);
  const int64_t packs = (a.n + N - 1) / N;
  const int64_t per_block_work = algo == PeerAllReduce::Algo::kTwoShot ? (packs + W - 1) / W : packs;
  const int grid = static_cast<int>(std::clamp<int64_t>((per_block_work + par::kThreads - 1) / par::kThreads, 1, kMaxGrid));
  if (algo == PeerAllReduce::Algo::kTwoShot)
    par::two_shot_kernel<T, W><<<grid, par::kThreads, 0, s>>>(a, static_cast<const T*>(in), static_cast<T*>(out));
  else par::one_shot_kernel<T, W><<<grid, par::kThreads, 0, s>>>(a, static_cast<const T*>(in), static_cast<T*>(out));
}
template <class T> void launch_w(int w, PeerAllReduce::Algo algo, const par::Args& a, const void* in, void* out, cudaStream_t s) {
  switch (w) {
    case 2: launch<T, 2>(algo, a, in, out, s); break;
    case 3: launch<T, 3>(algo, a, in, out, s); break;
    case 4: launch<T, 4>(algo, a, in, out, s); break;
    case 5: launch<T, 5>(algo, a, in, out, s); break;
    case 6: launch<T, 6>(algo, a, in, out, s); break;
    case 7: launch<T, 7>(algo, a, in, out, s); break;
    case 8: launch<T, 8>(algo, a, in, out, s); break;
    default: throw std::logic_error("PeerAllReduce: world size " + std::to_string(w));
  }
}

}  // namespace

void launch_peer_all_reduce(int world, PeerAllReduce::Algo algo, const par::Args& a, DType dtype, const void* in, void* out, cudaStream_t s) {
  if (algo == PeerAllReduce::Algo::kAuto) throw std::logic_error("launch_peer_all_reduce: an algorithm, not auto");
  switch (dtype) {
    case DType::kBF16: launch_w<__nv_bfloat16>(world, algo, a, in, out, s); break;
    case DType::kF16: launch_w<__half>(world, algo, a, in, out, s); break;
    case DType::kF32: launch_w<float>(world, algo, a, in, out, s); break;
    default: throw std::logic_error(std::string("launch_peer_all_reduce: dtype ") + dtype_name(dtype));
  }
  FK_CHECK_LAUNCH();
}

const char* algo_name(PeerAllReduce::Algo a) {
  switch (a) {
    case PeerAllReduce::Algo::kOneShot: return "one_shot";
    case PeerAllReduce::Algo::kTwoShot: return "two_shot";
    case PeerAllReduce::Algo::kLamport: return "lamport";
    default: return "auto";
  }
}

PeerAllReduce::PeerAllReduce(TcpStore& store, int64_t max_bytes, std::chrono::milliseconds timeout, int64_t lamport_bytes)
    : rank_(store.env().rank), world_(store.env().world_size), generation_(g_generation++),
      timeout_ns_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count())) {
  const std::string who = "peer all-reduce (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")";
  if (world_ > par::kMaxRanks)
    throw std::runtime_error(who + ": serves 2 to " + std::to_string(par::kMaxRanks) + " ranks; use the NCCL all-reduce otherwise");
  const PeerBufferLayout l = peer_buffer_layout(world_, max_bytes, lamport_bytes);
  max_bytes_ = l.half_bytes;
  lamport_bytes_ = l.lamport_bytes;
  mem_ = std::make_unique<PeerMemory>(store, "fk/peer_ar/" + std::to_string(generation_) + "/", who, l.total_bytes, par::kSignalBytes,
                                      [&](char* own) { clear_lamport_buffers(own, l); });
}

void clear_lamport_buffers(char* own, const PeerBufferLayout& l, cudaStream_t s) {
  const int64_t words = (l.total_bytes - l.lamport_offset) / 4;
  lamport_clear_kernel<<<256, 256, 0, s>>>(reinterpret_cast<uint32_t*>(own + l.lamport_offset), words);
  FK_CHECK_LAUNCH();
}

PeerAllReduce::~PeerAllReduce() = default;

std::string PeerAllReduce::unsupported(const Tensor& t) const {
  if (t.dtype() != DType::kBF16 && t.dtype() != DType::kF16 && t.dtype() != DType::kF32)
    return "dtype " + std::string(dtype_name(t.dtype())) + " (bf16, f16 or f32 expected)";
  if (!t.is_contiguous()) return "a non-contiguous tensor " + t.str();
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return "data not 16-byte aligned";
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  if (bytes > max_bytes_) return std::to_string(bytes) + " bytes, above the buffer's " + std::to_string(max_bytes_);
  return "";
}

PeerAllReduce::Algo PeerAllReduce::choose(int64_t bytes) const {
  if (bytes <= std::min(world_ == 2 ? kLamportUpTo2 : kLamportUpTo, lamport_bytes_)) return Algo::kLamport;
  return world_ == 2 || bytes <= kTwoShotFrom ? Algo::kOneShot : Algo::kTwoShot;
}

void PeerAllReduce::require(const Tensor& t, const std::string& what) const {
  const std::string why = unsupported(t);
  if (!why.empty()) throw std::runtime_error("peer all-reduce (rank " + std::to_string(rank_) + "): " + what + ": " + why);
}

void PeerAllReduce::all_reduce_(Tensor& t, Algo algo) { all_reduce(t, t, algo); }

void PeerAllReduce::all_reduce(const Tensor& in, Tensor& out, Algo algo) {
  std::string why = unsupported(in);
  if (why.empty() && (out.dtype() != in.dtype() || out.numel() != in.numel())) why = "out " + out.str() + " unlike in " + in.str();
  if (why.empty()) why = unsupported(out);
  if (!why.empty()) throw std::runtime_error("peer all-reduce (rank " + std::to_string(rank_) + "): " + why);
  if (in.numel() == 0) return;
  const int64_t bytes = in.numel() * static_cast<int64_t>(dtype_size(in.dtype()));
  if (algo == Algo::kAuto) algo = choose(bytes);
  if (algo == Algo::kLamport && bytes > lamport_bytes_)
    throw std::runtime_error("peer all-reduce (rank " + std::to_string(rank_) + "): " + std::to_string(bytes) +
                             " bytes, above the Lamport buffer's " + std::to_string(lamport_bytes_));
  launch_peer_all_reduce(world_, algo, peer_kernel_args(*this, in.numel()), in.dtype(), in.data_ptr(), out.data_ptr(), current_stream());
}

}  // namespace fk::dist
