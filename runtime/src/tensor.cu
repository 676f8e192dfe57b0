// Tensor views and stream-ordered allocation (a memory pool that keeps freed blocks, so steady
// state allocation costs no device synchronisation and no GPU time, like PyTorch's allocator).
#include <cstdlib>
#include <string>
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <numeric>
#include <sstream>

#include "checking_modes.h"
#include "kernel_trace.h"
#include "fk/runtime/task.h"
#include "fk/runtime/tensor.h"

namespace fk {

namespace {
thread_local cudaStream_t g_stream = nullptr;
std::atomic<bool> g_poison{false};
std::atomic<bool> g_guard{false};
std::atomic<bool> g_side_fills{false};
std::atomic<bool> g_deferred_oom{false};  // an allocation failed while freed blocks were held back

// Note [Caching allocator]
// Like PyTorch's CUDA caching allocator: freed blocks go to a free list keyed by (stream,
// rounded size) and are handed out again on the same stream, where stream order makes reuse
// safe. Steady-state allocation is host-side bookkeeping only: it puts nothing on the GPU
// timeline, so a `forward` that allocates its output (as production modules do) is timed
// fairly. A tensor used on another stream than it was allocated on must outlive that work
// (the runner uses one stream per task).
class CachingAllocator {
 public:
  void* allocate(size_t bytes, cudaStream_t s) {
    const size_t rounded = round(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find({s, rounded});
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, rounded);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_all();
      err = cudaMalloc(&p, rounded);
      if (err == cudaErrorMemoryAllocation && deferring()) g_deferred_oom = true;
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc (caching allocator)", __FILE__, __LINE__);
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ += rounded;
    peak_ = std::max(peak_, reserved_);
    return p;
  }
  void deallocate(void* p, size_t bytes, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (no_reuse_) {  // Note [Allocator without reuse]: kept, never handed out again (nor freed)
      retired_.push_back(p);
      return;
    }
    if (defer_) {
      deferred_.push_back({{s, round(bytes)}, p});
      return;
    }
    free_[{s, round(bytes)}].push_back(p);
  }
  /// While on, freed blocks are held back from reuse until it is turned off: fills that do not
  /// follow stream order (side fills, Note [Stream gate] in runner.cc) must never land in a block
  /// that queued work may still write.
  void set_defer(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    defer_ = on;
    if (on) return;
    for (auto& [key, p] : deferred_) free_[key].push_back(p);
    deferred_.clear();
  }
  bool deferring() {
    std::lock_guard<std::mutex> lock(mu_);
    return defer_;
  }
  void release_all() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return;
    cudaDeviceSynchronize();
    for (auto& [key, blocks] : free_)
      for (void* p : blocks) {
        cudaFree(p);
        reserved_ -= key.second;
      }
    free_.clear();
  }
  size_t reserved() {
    std::lock_guard<std::mutex> lock(mu_);
    return reserved_;
  }
  size_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  static size_t round(size_t bytes) {
    const size_t unit = bytes < (size_t(1) << 20) ? 512 : (size_t(2) << 20);
    return (bytes + unit - 1) / unit * unit;
  }
  std::mutex mu_;
  // Note [Allocator without reuse]
  // FK_ALLOCATOR_NO_REUSE=1 (read once) keeps every freed block out of reuse for the life of the process: a
  // diagnostic for results that change with what ran before in the same process (a tensor used on another stream
  // than its own after it was freed, a captured graph reading a freed block). Memory grows with every allocation:
  // for a few tests, not for a suite.
  const bool no_reuse_ = [] {
    const char* v = std::getenv("FK_ALLOCATOR_NO_REUSE");
    return v != nullptr && std::string(v) == "1";
  }();
  std::vector<void*> retired_;
  std::map<std::pair<cudaStream_t, size_t>, std::vector<void*>> free_;
  std::vector<std::pair<std::pair<cudaStream_t, size_t>, void*>> deferred_;
  bool defer_ = false;
  size_t reserved_ = 0, peak_ = 0;
};

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();  // never destroyed: outlives static teardown
  return *a;
}
}  // namespace

namespace {
// Note [Guard regions]
// While guards are on (the runner turns them on from making a case's instance to the end of its
// correctness checks), fk::empty allocates kGuardBytes more on each side of the tensor and fills
// them with kGuardByte. A kernel that writes past either end of any tensor (inputs, weights,
// preallocated outputs, outputs and scratch that `forward` allocates) changes a guard byte.
// Guards are verified on the device, without synchronising: when a guarded tensor is freed (a
// kernel on its stream, so the check runs after every use of it) and for every live guarded
// tensor in check_guards(). A violation is recorded in a device-side record that check_guards()
// reads and clears. Timing runs with guards off, so timed calls pay nothing for them.
constexpr size_t kGuardBytes = 32 << 10;
constexpr uint8_t kGuardByte = 0xA5;

struct GuardRecord {
  unsigned int count;
  unsigned long long serial;  // allocation serial of the first violation
  long long offset;           // < 0: bytes before the start; >= 0: bytes past the end
  unsigned long long bytes;   // size of that tensor
};
__device__ GuardRecord g_guard_record;

__global__ void check_guard_kernel(const uint8_t* base, size_t bytes, unsigned long long serial) {
  const uint8_t* hi = base + kGuardBytes + bytes;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < 2 * kGuardBytes; i += size_t(gridDim.x) * blockDim.x) {
    const bool before = i < kGuardBytes;
    const uint8_t v = before ? base[i] : hi[i - kGuardBytes];
    if (v != kGuardByte) {
      // Report the violated byte closest to the tensor (the likeliest first out-of-bounds write).
      const long long off = before ? -static_cast<long long>(kGuardBytes - i) : static_cast<long long>(i - kGuardBytes);
      if (atomicAdd(&g_guard_record.count, 1u) == 0) {
        g_guard_record.serial = serial;
        g_guard_record.offset = off;
        g_guard_record.bytes = bytes;
      }
    }
  }
}

struct GuardedBlock {
  size_t bytes;  // tensor bytes (without guards)
  unsigned long long serial;
  cudaStream_t stream;
};
std::mutex g_guard_mu;
std::map<uint8_t*, GuardedBlock> g_guarded;  // base (guard start) -> block
unsigned long long g_serial = 0;

void launch_guard_check(uint8_t* base, const GuardedBlock& b) {
  detail::KernelTrace::Untraced runtime_work;  // Note [CUPTI cross-check]
  check_guard_kernel<<<16, 256, 0, b.stream>>>(base, b.bytes, b.serial);
}

cudaStream_t side_stream() {
  static cudaStream_t s = [] {
    cudaStream_t t = nullptr;
    FK_CUDA_CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    return t;
  }();
  return s;
}

/// Fills on `s`, or (side fills) on a private stream, synchronously; see Note [Stream gate] in runner.cc.
void fill_bytes(void* p, uint8_t v, size_t n, cudaStream_t s) {
  detail::KernelTrace::Untraced runtime_work;  // Note [CUPTI cross-check]
  if (g_side_fills) {
    FK_CUDA_CHECK(cudaMemsetAsync(p, v, n, side_stream()));
    FK_CUDA_CHECK(cudaStreamSynchronize(side_stream()));
  } else {
    FK_CUDA_CHECK(cudaMemsetAsync(p, v, n, s));
  }
}
}  // namespace

namespace detail {
void set_guard_allocations(bool on) { g_guard = on; }
bool take_deferred_oom() { return g_deferred_oom.exchange(false); }

void set_allocator_side_fills(bool on) {
  if (on) side_stream();  // created now, not inside a gated call
  g_side_fills = on;
  // A block freed during the gated call may still be written by work queued behind the gate;
  // reusing it there would put new guard bytes where that work writes (seen on H100 as false
  // out-of-bounds reports in the decoder layer at b32/b64).
  allocator().set_defer(on);
}

std::vector<LiveAllocation> live_guarded_allocations() {
  std::lock_guard<std::mutex> lock(g_guard_mu);
  std::vector<LiveAllocation> out;
  for (const auto& [base, b] : g_guarded) out.push_back({base + kGuardBytes, b.bytes, b.serial});
  return out;
}

std::string check_guards() {
  cudaStream_t s = current_stream();
  {
    std::lock_guard<std::mutex> lock(g_guard_mu);
    for (const auto& [base, b] : g_guarded) check_guard_kernel<<<16, 256, 0, s>>>(base, b.bytes, b.serial);
  }
  FK_CHECK_LAUNCH();
  // Frees on other streams are checked on those streams; wait for all of them.
  FK_CUDA_CHECK(cudaDeviceSynchronize());
  GuardRecord r{};
  FK_CUDA_CHECK(cudaMemcpyFromSymbol(&r, g_guard_record, sizeof(r)));
  if (r.count == 0) return "";
  const GuardRecord zero{};
  FK_CUDA_CHECK(cudaMemcpyToSymbol(g_guard_record, &zero, sizeof(zero)));
  std::ostringstream os;
  os << "out-of-bounds write: " << r.count << " guard byte(s) changed around a " << r.bytes << "-byte tensor (allocation #"
     << r.serial << "); the nearest is byte " << (r.offset < 0 ? -r.offset : r.offset + 1) << " "
     << (r.offset < 0 ? "before its start" : "after its end");
  return os.str();
}

void set_poison_allocations(bool on) { g_poison = on; }
}  // namespace detail

void release_cached_memory() { allocator().release_all(); }

void* malloc_async_scratch(size_t bytes, cudaStream_t s) {
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, s);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // the failed attempt's error, handled here
    release_cached_memory();
    e = cudaMallocAsync(&p, bytes, s);
  }
  FK_CUDA_CHECK(e);
  return p;
}
size_t allocator_reserved_bytes() { return allocator().reserved(); }
size_t allocator_peak_reserved_bytes() { return allocator().peak(); }

size_t dtype_size(DType d) {
  switch (d) {
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

Tensor::Tensor(std::shared_ptr<void> storage, void* data, DType dtype, Shape shape, Shape strides)
    : storage_(std::move(storage)), data_(data), dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {}

static Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

Tensor Tensor::from_blob(void* data, DType dtype, Shape shape) {
  Shape st = contiguous_strides(shape);
  return Tensor(nullptr, data, dtype, std::move(shape), std::move(st));
}

int64_t Tensor::size(int d) const {
  const int n = dim();
  if (d < 0) d += n;
  FK_CHECK(d >= 0 && d < n, "dimension out of range for " + str());
  return shape_[d];
}

int64_t Tensor::stride(int d) const {
  const int n = dim();
  if (d < 0) d += n;
  FK_CHECK(d >= 0 && d < n, "dimension out of range for " + str());
  return strides_[d];
}

int64_t Tensor::numel() const {
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<int64_t>());
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::view(Shape shape) const {
  FK_CHECK(is_contiguous(), "view() needs a contiguous tensor, got " + str());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      FK_CHECK(infer < 0, "view(): more than one -1");
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known ? numel() / known : 0;
  Tensor t = *this;
  t.shape_ = std::move(shape);
  FK_CHECK(t.numel() == numel(), "view(): " + t.str() + " does not match " + str());
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::narrow_last(int64_t start, int64_t len) const {
  FK_CHECK(start >= 0 && len >= 0 && start + len <= size(-1), "narrow_last out of range for " + str());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * stride(-1) * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_.back() = len;
  return t;
}

Tensor Tensor::narrow_first(int64_t start, int64_t len) const {
  FK_CHECK(dim() >= 1 && start >= 0 && len >= 0 && start + len <= size(0), "narrow_first out of range for " + str());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * stride(0) * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_.front() = len;
  return t;
}

Tensor Tensor::as_strided(Shape shape, Shape strides, int64_t offset) const {
  FK_CHECK(shape.size() == strides.size() && offset >= 0, "as_strided: sizes and strides differ in length, or offset < 0");
  int64_t reach = 0, mine = 0;  // furthest element (relative to data_) of the new view / of this one
  for (size_t i = 0; i < shape.size(); ++i) {
    FK_CHECK(shape[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride for " + str());
    if (shape[i] > 0) reach += (shape[i] - 1) * strides[i];
  }
  for (int i = 0; i < dim(); ++i)
    if (size(i) > 0) mine += (size(i) - 1) * stride(i);
  FK_CHECK(offset + reach <= mine, "as_strided: the view reaches element " + std::to_string(offset + reach) +
                                       ", past the last element (" + std::to_string(mine) + ") of " + str());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + offset * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << dtype_name(dtype_) << "[";
  for (size_t i = 0; i < shape_.size(); ++i) os << (i ? ", " : "") << shape_[i];
  os << "]";
  return os.str();
}

cudaStream_t current_stream() { return g_stream; }
void set_current_stream(cudaStream_t s) { g_stream = s; }

Tensor empty(Shape shape, DType dtype) {
  for (int64_t d : shape) FK_CHECK(d >= 0, "negative dimension in empty()");
  Shape st = contiguous_strides(shape);
  const size_t bytes = static_cast<size_t>(std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>())) *
                       dtype_size(dtype);
  void* p = nullptr;
  cudaStream_t s = current_stream();
  if (bytes > 0 && g_guard) {
    // Note [Guard regions]
    uint8_t* base = static_cast<uint8_t*>(allocator().allocate(bytes + 2 * kGuardBytes, s));
    p = base + kGuardBytes;
    fill_bytes(base, kGuardByte, kGuardBytes, s);
    fill_bytes(base + kGuardBytes + bytes, kGuardByte, kGuardBytes, s);
    if (g_poison) fill_bytes(p, 0xFF, bytes, s);
    {
      std::lock_guard<std::mutex> lock(g_guard_mu);
      g_guarded[base] = {bytes, ++g_serial, s};
    }
    std::shared_ptr<void> storage(p, [base, bytes, s](void*) {
      {
        std::lock_guard<std::mutex> lock(g_guard_mu);
        auto it = g_guarded.find(base);
        if (it != g_guarded.end()) {
          launch_guard_check(base, it->second);  // stream-ordered after every use of the tensor
          g_guarded.erase(it);
        }
      }
      cudaGetLastError();  // a deleter never throws (a broken context surfaces elsewhere)
      allocator().deallocate(base, bytes + 2 * kGuardBytes, s);
    });
    return Tensor(std::move(storage), p, dtype, std::move(shape), std::move(st));
  }
  if (bytes > 0) {
    p = allocator().allocate(bytes, s);
    if (g_poison) fill_bytes(p, 0xFF, bytes, s);
  }
  std::shared_ptr<void> storage(p, [bytes, s](void* q) {
    if (q) allocator().deallocate(q, bytes, s);
  });
  return Tensor(std::move(storage), p, dtype, std::move(shape), std::move(st));
}

namespace {
struct Strided4 {
  int64_t size[4], dst[4], src[4];
};
template <int kBytes> struct alignas(kBytes) Word {
  unsigned char b[kBytes];
};
template <int kBytes> __global__ void copy_strided_kernel(char* dst, const char* src, Strided4 s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i, od = 0, os = 0;
    for (int d = 3; d >= 0; --d) {
      const int64_t c = r % s.size[d];
      r /= s.size[d];
      od += c * s.dst[d];
      os += c * s.src[d];
    }
    *reinterpret_cast<Word<kBytes>*>(dst + od * kBytes) = *reinterpret_cast<const Word<kBytes>*>(src + os * kBytes);
  }
}
}  // namespace

void copy_strided_(const Tensor& dst, const Tensor& src) {
  FK_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype() && dst.dim() <= 4,
           "copy_strided_: " + dst.str() + " <- " + src.str() + " (same sizes and dtype, at most 4 dims)");
  const int64_t n = dst.numel();
  if (n == 0) return;
  Strided4 s;
  const int pad = 4 - dst.dim();
  for (int d = 0; d < 4; ++d) {
    s.size[d] = d < pad ? 1 : dst.size(d - pad);
    s.dst[d] = d < pad ? 0 : dst.stride(d - pad);
    s.src[d] = d < pad ? 0 : src.stride(d - pad);
  }
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65536));
  char* d = static_cast<char*>(dst.data_ptr());
  const char* sp = static_cast<const char*>(src.data_ptr());
  switch (dtype_size(dst.dtype())) {
    case 1: copy_strided_kernel<1><<<blocks, 256, 0, current_stream()>>>(d, sp, s, n); break;
    case 2: copy_strided_kernel<2><<<blocks, 256, 0, current_stream()>>>(d, sp, s, n); break;
    case 4: copy_strided_kernel<4><<<blocks, 256, 0, current_stream()>>>(d, sp, s, n); break;
    case 8: copy_strided_kernel<8><<<blocks, 256, 0, current_stream()>>>(d, sp, s, n); break;
    default: FK_CHECK(false, "copy_strided_: unsupported dtype " + dst.str());
  }
  FK_CUDA_CHECK(cudaGetLastError());
}

void copy_(Tensor& dst, const Tensor& src) {
  FK_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "copy_: " + dst.str() + " <- " + src.str());
  FK_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy_ needs contiguous tensors");
  if (dst.nbytes() == 0) return;
  FK_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, current_stream()));
}

}  // namespace fk
