// The all-reduce fused with what follows it in a tensor-parallel layer (issue 23), over the peer
// all-reduce's buffers (fk/runtime/peer_allreduce.h; the kernel and Note [Peer all-reduce] in
// fk/kernels/peer_allreduce.cuh). Production counterpart: vLLM's AllReduceFusionPass (all_reduce
// followed by fused_add_rms_norm, replaced by FlashInfer's trtllm_allreduce_fusion with the
// residual-RMSNorm pattern). Specialised on the hidden size, as the generated tasks are.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "fk/kernels/peer_allreduce.cuh"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/peer_allreduce.h"

namespace fk::dist {

/// The kernels' view of `world` ranks' buffers (`bases`, laid out as peer_buffer_layout says: half_bytes, lamport_bytes)
/// for this rank's message of n elements.
inline fk::kernels::peer_ar::Args peer_kernel_args(char* const* bases, int world, int rank, int64_t n, int64_t half_bytes,
                                                   int64_t lamport_bytes, uint64_t timeout_ns) {
  fk::kernels::peer_ar::Args a{};
  for (int p = 0; p < world; ++p) a.base[p] = bases[p];
  a.rank = rank;
  a.n = n;
  a.half_bytes = half_bytes;
  a.lamport_bytes = lamport_bytes;
  a.timeout_ns = timeout_ns;
  return a;
}
/// The same for `par`'s buffers (every launch builds it here).
inline fk::kernels::peer_ar::Args peer_kernel_args(const PeerAllReduce& par, int64_t n) {
  return peer_kernel_args(par.buffers(), par.world_size(), par.rank(), n, par.max_bytes(), par.lamport_bytes(), par.timeout_ns());
}

/// Every rank's buffer laid out as PeerAllReduce lays it out, for a message of up to max_bytes (rounded as
/// PeerAllReduce rounds it) and Lamport messages of up to lamport_bytes on `world` ranks: the signal area,
/// the staging and result halves, then the Lamport buffers (Note [Peer all-reduce], Note [Lamport all-reduce]).
struct PeerBufferLayout {
  int64_t half_bytes = 0, lamport_bytes = 0, lamport_offset = 0, total_bytes = 0;
};
inline PeerBufferLayout peer_buffer_layout(int world, int64_t max_bytes, int64_t lamport_bytes) {
  PeerBufferLayout l;
  l.half_bytes = (std::max<int64_t>(max_bytes, 16) + 4095) / 4096 * 4096;
  l.lamport_bytes = std::min(l.half_bytes, (std::max<int64_t>(lamport_bytes, 16) + 4095) / 4096 * 4096);
  l.lamport_offset = fk::kernels::peer_ar::kSignalBytes + 4 * l.half_bytes;
  l.total_bytes = l.lamport_offset + 3 * int64_t(world) * l.lamport_bytes;
  return l;
}

/// Sets the Lamport buffers of one rank's buffer `own` (laid out as l says) to their cleared state (Note [Lamport
/// all-reduce]), on stream s; the signal area is PeerMemory's to zero.
void clear_lamport_buffers(char* own, const PeerBufferLayout& l, cudaStream_t s = nullptr);

/// Enqueues this rank's all-reduce kernel of `algo` (kOneShot, kTwoShot or kLamport, not kAuto) on `world` ranks over
/// the buffers of `a` (in, out: a.n elements of dtype). PeerAllReduce::all_reduce calls it; so does the loopback test,
/// which runs every rank of a world on one GPU (tests/gpu/test_peer_loopback.cu).
void launch_peer_all_reduce(int world, PeerAllReduce::Algo algo, const fk::kernels::peer_ar::Args& a, DType dtype, const void* in,
                            void* out, cudaStream_t s);

/// Enqueues this rank's fused all-reduce + residual add + RMSNorm kernel (Lamport or pulling one-shot) on `world` ranks
/// over the buffers of `a` (a.n = rows x kHidden); the operands' checks are all_reduce_add_rms_norm's.
template <int kHidden, class T>
void launch_all_reduce_add_rms_norm(int world, bool lamport, const fk::kernels::peer_ar::Args& a, const T* xp, T* rp, const T* wp, T* op,
                                    int64_t rows, float eps, cudaStream_t s) {
  namespace par_k = fk::kernels::peer_ar;
  using S = fk::kernels::detail::RmsNormShape<kHidden, T>;
  constexpr unsigned kLamportBlock = par_k::lamport_row_groups<kHidden, T>() * S::kThreads;
  const unsigned grid = lamport ? par_k::kLamportGrid : static_cast<unsigned>(std::min<int64_t>(rows, par_k::kMaxBlocks));
  switch (world) {
#define FK_FUSED_CASE(W)                                                                                      \
  case W:                                                                                                     \
    if (lamport) par_k::lamport_add_rms_norm_kernel<kHidden, T, W><<<grid, kLamportBlock, 0, s>>>(a, xp, rp, wp, op, rows, eps); \
    else par_k::one_shot_add_rms_norm_kernel<kHidden, T, W><<<grid, S::kThreads, 0, s>>>(a, xp, rp, wp, op, rows, eps);         \
    break;
    FK_FUSED_CASE(2)
    FK_FUSED_CASE(4)
    FK_FUSED_CASE(8)
#undef FK_FUSED_CASE
    default: throw std::runtime_error("all_reduce_add_rms_norm: world size " + std::to_string(world) + " (2, 4 or 8 expected)");
  }
  FK_CHECK_LAUNCH();
}

/// x [rows, kHidden] summed over the ranks; then residual += that sum (in T), out = RMSNorm(residual)
/// x weight (vLLM's fused_add_rms_norm: statistics in fp32, the residual kept in T). Equal bitwise to
/// par.all_reduce_(x) followed by fk::kernels::fused_add_rms_norm<kHidden>. out may be x. Every rank
/// makes the same call; enqueued on fk::current_stream(), capturable. algo: kLamport (the default
/// where the rows fit the Lamport slot; Note [Lamport all-reduce]) or kOneShot (pulling).
template <int kHidden, class T>
void all_reduce_add_rms_norm(const PeerAllReduce& par, const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out,
                             PeerAllReduce::Algo algo = PeerAllReduce::Algo::kAuto) {
  par.require(x, "all_reduce_add_rms_norm's input");
  par.require(residual, "all_reduce_add_rms_norm's residual");
  par.require(out, "all_reduce_add_rms_norm's output");
  const int64_t rows = x.numel() / kHidden;
  if (x.dtype() != dtype_of<T> || x.numel() != rows * kHidden || residual.numel() != x.numel() || out.numel() != x.numel() ||
      residual.dtype() != x.dtype() || out.dtype() != x.dtype() || weight.numel() != kHidden || weight.dtype() != x.dtype())
    throw std::runtime_error("all_reduce_add_rms_norm<" + std::to_string(kHidden) + ", " + dtype_name(dtype_of<T>) + ">: x " + x.str() +
                             ", residual " + residual.str() + ", weight " + weight.str() + ", out " + out.str() +
                             " (rows of the hidden size, one dtype, the weight [hidden])");
  if (rows == 0) return;
  const fk::kernels::peer_ar::Args a = peer_kernel_args(par, x.numel());
  const int64_t bytes = x.numel() * static_cast<int64_t>(sizeof(T));
  if (algo == PeerAllReduce::Algo::kAuto) algo = bytes <= par.lamport_bytes() ? PeerAllReduce::Algo::kLamport : PeerAllReduce::Algo::kOneShot;
  if (algo != PeerAllReduce::Algo::kLamport && algo != PeerAllReduce::Algo::kOneShot)
    throw std::runtime_error(std::string("all_reduce_add_rms_norm: algorithm ") + algo_name(algo) + " (lamport or one_shot expected)");
  if (algo == PeerAllReduce::Algo::kLamport && bytes > par.lamport_bytes())
    throw std::runtime_error("all_reduce_add_rms_norm: " + std::to_string(bytes) + " bytes, above the Lamport buffer's " +
                             std::to_string(par.lamport_bytes()));
  launch_all_reduce_add_rms_norm<kHidden, T>(par.world_size(), algo == PeerAllReduce::Algo::kLamport, a, x.data<T>(), residual.data<T>(),
                                              weight.data<T>(), out.data<T>(), rows, eps, current_stream());
}

}  // namespace fk::dist
