// The job's NCCL communicator (fk/runtime/comm.h, Note [Communicator]).
#include "fk/runtime/comm.h"

#include <cstring>
#include <stdexcept>
#include <thread>

#include "fk/runtime/cuda_check.h"

namespace fk::dist {
namespace {

/// Communicators made by this process so far (the n-th one's store keys; the same order on every rank).
int g_generation = 0;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kF32: return ncclFloat32;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    default: throw std::runtime_error("Communicator: no NCCL type for dtype " + std::string(dtype_name(d)));
  }
}

}  // namespace

std::string Communicator::key(const std::string& name) const { return "fk/nccl/" + std::to_string(generation_) + "/" + name; }

void Communicator::fail(const std::string& what) {
  const std::string msg = "communicator (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + "): " + what;
  if (!aborted_) abort(what);
  throw std::runtime_error(msg);
}

void Communicator::abort(const std::string& why) {
  if (aborted_) return;
  aborted_ = true;
  try {
    if (!store_.check(key("abort"))) store_.set(key("abort"), "rank " + std::to_string(rank_) + ": " + why);
  } catch (const std::exception&) {
    // the store is gone (rank 0 ended): the others find out through it too
  }
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
}

/// One poll: NCCL's asynchronous error, the store's abort flag (at most every 50 ms), the deadline.
void Communicator::poll_failures(const std::string& what, std::chrono::steady_clock::time_point deadline) {
  ncclResult_t async = ncclSuccess;
  if (comm_ != nullptr && ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
    fail(what + ": NCCL reported " + ncclGetErrorString(async) + (ncclGetLastError(comm_) ? std::string(" (") + ncclGetLastError(comm_) + ")" : ""));
  const auto now = std::chrono::steady_clock::now();
  if (now - last_flag_check_ >= std::chrono::milliseconds(50)) {
    last_flag_check_ = now;
    bool flagged = false;
    std::string who;
    try {
      flagged = store_.check(key("abort"));
      if (flagged) who = store_.get(key("abort"));
    } catch (const std::exception& e) {
      fail(what + ": the rendezvous store is unreachable (" + e.what() + ")");
    }
    if (flagged) fail(what + ": another rank aborted the job (" + who + ")");
  }
  if (now >= deadline) fail(what + ": not done within " + std::to_string(timeout_.count()) + " ms");
}

/// Non-blocking NCCL: an operation returns ncclInProgress until the communicator is ready for the next.
/// An enqueued collective is usually ready within microseconds, so the first millisecond spins (a
/// sleep there cost every eager call 200 us or more: fk_collectives on 2 H100s, session 24); then
/// the waits back off to sleeps.
void Communicator::wait_ready(const std::string& what) {
  const auto start = std::chrono::steady_clock::now(), deadline = start + timeout_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) fail(what + ": ncclCommGetAsyncError failed");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(what + ": NCCL reported " + ncclGetErrorString(state));
    if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1)) continue;
    poll_failures(what, deadline);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Communicator::Communicator(TcpStore& store, std::chrono::milliseconds timeout)
    : store_(store), timeout_(timeout), rank_(store.env().rank), world_(store.env().world_size), generation_(g_generation++) {
  int devices = 0;
  FK_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) throw std::runtime_error("communicator (rank " + std::to_string(rank_) + "): no CUDA device");
  device_ = store.env().local_rank % devices;
  FK_CUDA_CHECK(cudaSetDevice(device_));
  ncclUniqueId id;
  if (rank_ == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("communicator (rank 0): ncclGetUniqueId failed");
    store_.set(key("uid"), std::string(reinterpret_cast<const char*>(&id), sizeof id));
  }
  const std::string uid = store_.get(key("uid"));  // waits for rank 0, bounded by the store's timeout
  if (uid.size() != sizeof id) throw std::runtime_error("communicator: the store's NCCL id has " + std::to_string(uid.size()) + " bytes");
  std::memcpy(&id, uid.data(), sizeof id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) fail(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
  wait_ready("joining the communicator");
}

Communicator::~Communicator() {
  if (comm_ == nullptr) return;
  // Finalize flushes outstanding work; bounded like every wait, then destroy (abort when it does not finish).
  ncclResult_t state = ncclCommFinalize(comm_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while ((state == ncclSuccess || state == ncclInProgress) && ncclCommGetAsyncError(comm_, &state) == ncclSuccess &&
         state == ncclInProgress && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (state == ncclSuccess) ncclCommDestroy(comm_);
  else ncclCommAbort(comm_);
  comm_ = nullptr;
}

void Communicator::synchronize(cudaStream_t stream) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) fail(std::string("the stream failed: ") + cudaGetErrorString(q));
    poll_failures("waiting for the stream", deadline);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void Communicator::all_reduce_(Tensor& t) {
  FK_CHECK(t.is_contiguous(), "all_reduce_: a contiguous tensor, got " + t.str());
  if (aborted_) fail("all_reduce_ after an abort");
  const ncclResult_t r = ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), ncclSum, comm_,
                                       current_stream());
  if (r != ncclSuccess && r != ncclInProgress) fail(std::string("ncclAllReduce: ") + ncclGetErrorString(r));
  wait_ready("all_reduce_");
}

void Communicator::all_reduce(const Tensor& in, Tensor& out) {
  FK_CHECK(in.is_contiguous() && out.is_contiguous() && in.numel() == out.numel() && in.dtype() == out.dtype(),
           "all_reduce: contiguous tensors of one size and dtype, got " + in.str() + " -> " + out.str());
  if (aborted_) fail("all_reduce after an abort");
  const ncclResult_t r = ncclAllReduce(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), ncclSum,
                                       comm_, current_stream());
  if (r != ncclSuccess && r != ncclInProgress) fail(std::string("ncclAllReduce: ") + ncclGetErrorString(r));
  wait_ready("all_reduce");
}

void Communicator::send_recv(const std::vector<P2P>& ops) {
  if (aborted_) fail("send_recv after an abort");
  for (const P2P& op : ops)
    FK_CHECK(op.peer >= 0 && op.peer < world_ && op.bytes >= 0 && (op.data != nullptr || op.bytes == 0),
             "send_recv: peer " + std::to_string(op.peer) + " of " + std::to_string(world_) + ", " + std::to_string(op.bytes) + " bytes");
  ncclResult_t r = ncclGroupStart();
  for (const P2P& op : ops) {
    if (r != ncclSuccess && r != ncclInProgress) break;
    if (op.bytes == 0) continue;
    r = op.send ? ncclSend(op.data, static_cast<size_t>(op.bytes), ncclChar, op.peer, comm_, current_stream())
                : ncclRecv(op.data, static_cast<size_t>(op.bytes), ncclChar, op.peer, comm_, current_stream());
  }
  const ncclResult_t e = ncclGroupEnd();
  if (r == ncclSuccess || r == ncclInProgress) r = e;
  if (r != ncclSuccess && r != ncclInProgress) fail(std::string("ncclSend / ncclRecv group: ") + ncclGetErrorString(r));
  wait_ready("send_recv");
}

void Communicator::all_gather(const Tensor& in, Tensor& out) {
  FK_CHECK(in.is_contiguous() && out.is_contiguous() && in.dtype() == out.dtype() && out.numel() == in.numel() * world_,
           "all_gather: in " + in.str() + ", out " + out.str() + " (world_size x the input's elements, one dtype)");
  if (aborted_) fail("all_gather after an abort");
  const ncclResult_t r = ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_,
                                       current_stream());
  if (r != ncclSuccess && r != ncclInProgress) fail(std::string("ncclAllGather: ") + ncclGetErrorString(r));
  wait_ready("all_gather");
}

void Communicator::reduce_scatter(const Tensor& in, Tensor& out) {
  FK_CHECK(in.is_contiguous() && out.is_contiguous() && in.dtype() == out.dtype() && in.numel() == out.numel() * world_,
           "reduce_scatter: in " + in.str() + ", out " + out.str() + " (the input world_size x the output's elements, one dtype)");
  if (aborted_) fail("reduce_scatter after an abort");
  const ncclResult_t r = ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), nccl_type(in.dtype()), ncclSum,
                                           comm_, current_stream());
  if (r != ncclSuccess && r != ncclInProgress) fail(std::string("ncclReduceScatter: ") + ncclGetErrorString(r));
  wait_ready("reduce_scatter");
}

}  // namespace fk::dist
