// Peer-mapped buffers (fk/runtime/peer_memory.h).
#include "fk/runtime/peer_memory.h"

#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "fk/runtime/cuda_check.h"

namespace fk::dist {

PeerMemory::PeerMemory(TcpStore& store, const std::string& key, const std::string& who, int64_t bytes, int64_t zeroed_bytes,
                       const std::function<void(char* own)>& init)
    : store_(store), key_(key), rank_(store.env().rank), world_(store.env().world_size), bytes_(bytes) {
  const DistEnv& env = store.env();
  if (world_ < 2 || world_ > kMaxRanks)
    throw std::runtime_error(who + ": serves 2 to " + std::to_string(kMaxRanks) + " ranks; use NCCL otherwise");
  if (env.local_world_size != world_)
    throw std::runtime_error(who + ": the ranks span hosts (" + std::to_string(env.local_world_size) + " of " + std::to_string(world_) +
                             " on this one); peer memory needs every rank on one host: use NCCL");
  int devices = 0;
  FK_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) throw std::runtime_error(who + ": no CUDA device");
  device_ = env.local_rank % devices;  // the Communicator's choice (Note [Communicator])
  FK_CUDA_CHECK(cudaSetDevice(device_));
  // Every GPU must reach every other directly (NVLink or PCIe peer-to-peer). Each rank publishes its
  // verdict before any buffer is mapped, so that all ranks give up together, naming the first reason.
  char bus[64] = {};
  FK_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
  const std::vector<std::string> buses = store_.all_gather(key_ + "bus", bus);
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
                theirs + " directly (no NVLink / peer-to-peer path): use NCCL";
    }
  }
  for (const std::string& v : store_.all_gather(key_ + "verdict", problem.empty() ? "ok" : problem))
    if (v != "ok") throw std::runtime_error(who + ": " + v);
  FK_CUDA_CHECK(cudaMalloc(&own_, static_cast<size_t>(bytes_)));
  FK_CUDA_CHECK(cudaMemset(own_, 0, static_cast<size_t>(zeroed_bytes)));
  if (init) init(own_);
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  FK_CUDA_CHECK(cudaIpcGetMemHandle(&h, own_));
  const std::vector<std::string> handles = store_.all_gather(key_ + "ipc", std::string(reinterpret_cast<const char*>(&h), sizeof h));
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
  store_.barrier(key_ + "ready");
}

PeerMemory::~PeerMemory() {
  try {
    cudaDeviceSynchronize();
    store_.barrier(key_ + "closing");
  } catch (const std::exception&) {
    // a peer is gone: nobody reads the buffers any more
  }
  for (int p = 0; p < world_ && p < kMaxRanks; ++p)
    if (mapped_[p] != nullptr && p != rank_) cudaIpcCloseMemHandle(mapped_[p]);
  if (own_ != nullptr) cudaFree(own_);
}

}  // namespace fk::dist
