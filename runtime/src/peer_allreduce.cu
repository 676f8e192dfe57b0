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

const char* algo_name(PeerAllReduce::Algo a) {
  switch (a) {
    case PeerAllReduce::Algo::kOneShot: return "one_shot";
    case PeerAllReduce::Algo::kTwoShot: return "two_shot";
    case PeerAllReduce::Algo::kLamport: return "lamport";
    default: return "auto";
  }
}

PeerAllReduce::PeerAllReduce(TcpStore& store, int64_t max_bytes, std::chrono::milliseconds timeout, int64_t lamport_bytes)
    : store_(store), rank_(store.env().rank), world_(store.env().world_size), generation_(g_generation++),
      max_bytes_((std::max<int64_t>(max_bytes, 16) + 4095) / 4096 * 4096),
      lamport_bytes_(std::min(max_bytes_, (std::max<int64_t>(lamport_bytes, 16) + 4095) / 4096 * 4096)),
      timeout_ns_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count())) {
  const std::string who = "peer all-reduce (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")";
  const DistEnv& env = store.env();
  if (world_ < 2 || world_ > par::kMaxRanks)
    throw std::runtime_error(who + ": serves 2 to " + std::to_string(par::kMaxRanks) + " ranks; use the NCCL all-reduce otherwise");
  if (env.local_world_size != world_)
    throw std::runtime_error(who + ": the ranks span hosts (" + std::to_string(env.local_world_size) + " of " + std::to_string(world_) +
                             " on this one); peer memory needs every rank on one host: use the NCCL all-reduce");
  int devices = 0;
  FK_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) throw std::runtime_error(who + ": no CUDA device");
  device_ = env.local_rank % devices;  // the Communicator's choice (Note [Communicator])
  FK_CUDA_CHECK(cudaSetDevice(device_));
  const std::string k = "fk/peer_ar/" + std::to_string(generation_) + "/";
  // Every GPU must reach every other directly (NVLink or PCIe peer-to-peer). Each rank publishes its
  // verdict before any buffer is mapped, so that all ranks give up together, naming the first reason.
  char bus[64] = {};
  FK_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
  const std::vector<std::string> buses = store_.all_gather(k + "bus", bus);
  std::string problem;
  for (int p = 0; p < world_ && problem.empty(); ++p) {
    if (p == rank_) continue;
    const std::string& theirs = buses[size_t(p)];
    int dev = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&dev, theirs.c_str()) != cudaSuccess) {
      (void)cudaGetLastError();
      problem = "rank " + std::to_string(p) + "'s GPU (" + theirs + ") is not visible to rank " + std::to_string(rank_) +
                " (CUDA_VISIBLE_DEVICES must show every local GPU to every rank)";
    } else if (cudaDeviceCanAccessPeer(&can, device_, dev) != cudaSuccess || !can) {
      (void)cudaGetLastError();
      problem = std::string("GPU ") + bus + " (rank " + std::to_string(rank_) + ") cannot access rank " + std::to_string(p) + "'s GPU " +
                theirs + " directly (no NVLink / peer-to-peer path): use the NCCL all-reduce";
    }
  }
  for (const std::string& v : store_.all_gather(k + "verdict", problem.empty() ? "ok" : problem))
    if (v != "ok") throw std::runtime_error(who + ": " + v);
  const int64_t lamport_total = 3 * int64_t(world_) * lamport_bytes_;
  const size_t total = static_cast<size_t>(par::kSignalBytes + 4 * max_bytes_ + lamport_total);
  FK_CUDA_CHECK(cudaMalloc(&own_, total));
  FK_CUDA_CHECK(cudaMemset(own_, 0, static_cast<size_t>(par::kSignalBytes)));
  lamport_clear_kernel<<<256, 256>>>(reinterpret_cast<uint32_t*>(own_ + par::kSignalBytes + 4 * max_bytes_), lamport_total / 4);
  FK_CHECK_LAUNCH();
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  FK_CUDA_CHECK(cudaIpcGetMemHandle(&h, own_));
  const std::vector<std::string> handles = store_.all_gather(k + "ipc", std::string(reinterpret_cast<const char*>(&h), sizeof h));
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) {
      mapped_[p] = own_;
      continue;
    }
    const std::string& s = handles[size_t(p)];
    if (s.size() != sizeof h) throw std::runtime_error(who + ": rank " + std::to_string(p) + "'s buffer handle has " + std::to_string(s.size()) + " bytes");
    std::memcpy(&h, s.data(), sizeof h);
    void* ptr = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) throw std::runtime_error(who + ": mapping rank " + std::to_string(p) + "'s buffer failed: " + cudaGetErrorString(e));
    mapped_[p] = static_cast<char*>(ptr);
  }
  // No rank may signal a peer before that peer has zeroed its flags.
  store_.barrier(k + "ready");
}

PeerAllReduce::~PeerAllReduce() {
  // The peers may still read this rank's buffer: meet them first (bounded by the store's timeout).
  try {
    cudaDeviceSynchronize();
    store_.barrier("fk/peer_ar/" + std::to_string(generation_) + "/closing");
  } catch (const std::exception&) {
    // a peer is gone: nobody reads the buffers any more
  }
  for (int p = 0; p < world_ && p < par::kMaxRanks; ++p)
    if (mapped_[p] != nullptr && p != rank_) cudaIpcCloseMemHandle(mapped_[p]);
  if (own_ != nullptr) cudaFree(own_);
}

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
  const par::Args a = peer_kernel_args(*this, in.numel());
  const cudaStream_t s = current_stream();
  switch (in.dtype()) {
    case DType::kBF16: launch_w<__nv_bfloat16>(world_, algo, a, in.data_ptr(), out.data_ptr(), s); break;
    case DType::kF16: launch_w<__half>(world_, algo, a, in.data_ptr(), out.data_ptr(), s); break;
    default: launch_w<float>(world_, algo, a, in.data_ptr(), out.data_ptr(), s); break;
  }
  FK_CHECK_LAUNCH();
}

}  // namespace fk::dist
