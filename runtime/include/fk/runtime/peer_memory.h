// One device buffer per rank, mapped by every rank of the job over NVLink / PCIe peer-to-peer (issue
// 23): what the own all-reduce (fk/runtime/peer_allreduce.h) and the expert-parallel all-to-all
// (fk/runtime/ep_all_to_all.h) are built on. As vLLM's custom all-reduce and DeepEP's intranode
// buffers, it serves the ranks of one host whose GPUs reach each other directly; the constructor
// throws on every rank together, naming the first reason, where they do not.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fk/runtime/dist.h"

namespace fk::dist {

/// v rounded up to a multiple of a: the offsets of the areas inside a peer buffer.
inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

class PeerMemory {
 public:
  static constexpr int kMaxRanks = 8;
  /// Joins every rank of store.env() (all on this host, the current device being the rank's GPU;
  /// 2 to kMaxRanks ranks): allocates `bytes` on this rank, zeroes the first `zeroed_bytes` of them,
  /// runs init(own buffer) where given (before any peer may touch it), maps every peer's buffer and
  /// meets the ranks. `key` names the store keys (fresh per object: same order on every rank); `who`
  /// starts every error message.
  PeerMemory(TcpStore& store, const std::string& key, const std::string& who, int64_t bytes, int64_t zeroed_bytes,
             const std::function<void(char* own)>& init = {});
  /// Meets the peers first (they may still read this buffer; bounded by the store's timeout).
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  /// Every rank's buffer as mapped in this process (this rank's own at [rank()]).
  char* const* buffers() const { return mapped_; }
  char* own() const { return own_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int device() const { return device_; }
  int64_t bytes() const { return bytes_; }

 private:
  TcpStore& store_;
  std::string key_;
  int rank_ = 0, world_ = 1, device_ = 0;
  int64_t bytes_ = 0;
  char* own_ = nullptr;
  char* mapped_[kMaxRanks] = {};
};

}  // namespace fk::dist
