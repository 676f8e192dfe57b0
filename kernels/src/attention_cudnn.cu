// cuDNN fused SDPA for packed variable-length causal prefill; see fk/kernels/attention.h and
// Note [cuDNN varlen SDPA] there.
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "fk/kernels/attention.h"

namespace fk::kernels {
namespace {

namespace fe = cudnn_frontend;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("fk cudnn attention: " + what); }

#define FK_DNN(expr)                                                                      \
  do {                                                                                    \
    cudnnStatus_t s_ = (expr);                                                            \
    if (s_ != CUDNN_STATUS_SUCCESS) fail(std::string(#expr) + " -> " + cudnnGetErrorString(s_)); \
  } while (0)
#define FK_FE(expr)                                                                       \
  do {                                                                                    \
    auto e_ = (expr);                                                                     \
    if (!e_.is_good()) fail(std::string(#expr) + " -> " + e_.get_message());             \
  } while (0)
#define FK_RT(expr)                                                                       \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) fail(std::string(#expr) + " -> " + cudaGetErrorString(e_));   \
  } while (0)

enum Uid : int64_t { kQ = 1, kK, kV, kO, kSeqQ, kSeqKV, kOffQ, kOffK, kOffV, kOffO, kBias };

/// seq_q[i], seq_k[i] (i < B) and element offsets off_q/k/v/o[i] (i <= B) from cu_seqlens; with
/// seqused_k (Note [Padded keys: seqused_k]) the keys of sequence i start at row i * max_k and
/// number seqused_k[i].
__global__ void varlen_aux_kernel(int32_t* seq_q, int32_t* seq_k, int32_t* off_q, int32_t* off_k, int32_t* off_v,
                                  int32_t* off_o, const int32_t* cu_q, const int32_t* cu_k, const int32_t* seqused_k,
                                  int max_k, int batch, int q_row, int k_row, int v_row, int o_row) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > batch) return;
  const int k_start = seqused_k ? i * max_k : cu_k[i];
  off_q[i] = cu_q[i] * q_row;
  off_k[i] = k_start * k_row;
  off_v[i] = k_start * v_row;
  off_o[i] = cu_q[i] * o_row;
  if (i < batch) {
    seq_q[i] = cu_q[i + 1] - cu_q[i];
    seq_k[i] = seqused_k ? seqused_k[i] : cu_k[i + 1] - cu_k[i];
  }
}

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  int32_t* aux = nullptr;  // seq_q [B] | seq_k [B] | off_q [B+1] | off_k [B+1] | off_v [B+1] | off_o [B+1]
};

// Note [cuDNN graph key]
// A cached graph is reused for every call with its key, so the key holds everything the build bakes in: the shapes, the
// scale, the masks, the bias table's size, and for the ragged (varlen) graph the total query and key rows, which
// set_max_total_seq_len_q / _kv fix at build time (a later call with more rows under the same maxima would run a graph
// sized for fewer).
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, int, int, uint32_t, bool, bool, int, int64_t, int64_t, bool,
                       int64_t, int64_t>;

/// Note [Attention logit bias]: the bias as a [1 or B, Hq, Sq, Sk] view of the [(B,) Hq, rows, cols] table, on `opts`.
void add_bias(fe::graph::Graph& g, fe::graph::SDPA_attributes& opts, const VarlenAttentionArgs& a) {
  if (!a.bias) return;
  const int64_t hq = a.num_heads, r = a.bias_rows, c = a.bias_cols;
  auto bias = g.tensor(fe::graph::Tensor_attributes()
                           .set_name("bias")
                           .set_uid(kBias)
                           .set_dim({a.bias_per_seq ? a.batch : 1, hq, a.max_seqlen_q, a.max_seqlen_k})
                           .set_stride({hq * r * c, r * c, c, 1}));
  opts.set_bias(bias);
}

std::mutex g_mu;

cudnnHandle_t handle_for_device(int dev) {
  static std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  FK_DNN(cudnnCreate(&h));
  handles[dev] = h;
  return h;
}

fe::DataType_t fe_type(AttnDType d) { return d == AttnDType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

CachedGraph build(cudnnHandle_t handle, const VarlenAttentionArgs& a) {
  const int64_t b = a.batch, hq = a.num_heads, hkv = a.num_kv_heads, d = a.head_dim, dv = a.head_dim_v > 0 ? a.head_dim_v : d;
  const int64_t sq = a.max_seqlen_q, sk = a.max_seqlen_k;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(a.dtype)).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  auto int_tensor = [&](const char* name, int64_t uid, int64_t n) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT32));
  };
  auto off_q = int_tensor("off_q", kOffQ, b + 1);
  auto off_k = int_tensor("off_k", kOffK, b + 1);
  auto off_v = int_tensor("off_v", kOffV, b + 1);
  auto off_o = int_tensor("off_o", kOffO, b + 1);
  auto seq_q = int_tensor("seq_q", kSeqQ, b);
  auto seq_kv = int_tensor("seq_kv", kSeqKV, b);
  auto q = g->tensor(fe::graph::Tensor_attributes().set_name("Q").set_uid(kQ).set_dim({b, hq, sq, d}).set_stride({sq * hq * d, d, hq * d, 1}).set_ragged_offset(off_q));
  auto k = g->tensor(fe::graph::Tensor_attributes().set_name("K").set_uid(kK).set_dim({b, hkv, sk, d}).set_stride({sk * hkv * d, d, hkv * d, 1}).set_ragged_offset(off_k));
  auto v = g->tensor(fe::graph::Tensor_attributes().set_name("V").set_uid(kV).set_dim({b, hkv, sk, dv}).set_stride({sk * hkv * dv, dv, hkv * dv, 1}).set_ragged_offset(off_v));
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("flash_attn_varlen")
                  .set_generate_stats(false)
                  .set_attn_scale(a.softmax_scale)
                  .set_padding_mask(true)
                  .set_seq_len_q(seq_q)
                  .set_seq_len_kv(seq_kv)
                  .set_max_total_seq_len_q(a.total_q)
                  .set_max_total_seq_len_kv(a.total_k);
  add_bias(*g, opts, a);
  if (a.causal) opts.set_causal_mask(true);
  if (a.window > 0) opts.set_diagonal_band_left_bound(a.window);  // keeps kv > q - window
  auto [o, stats] = g->sdpa(q, k, v, opts);
  (void)stats;
  o->set_output(true).set_uid(kO).set_dim({b, hq, sq, dv}).set_stride({sq * hq * dv, dv, hq * dv, 1}).set_ragged_offset(off_o);
  FK_FE(g->validate());
  FK_FE(g->build_operation_graph(handle));
  FK_FE(g->create_execution_plans({fe::HeurMode_t::A}));
  FK_FE(g->check_support(handle));
  FK_FE(g->build_plans(handle));
  CachedGraph c;
  c.graph = g;
  FK_FE(g->get_workspace_size(c.workspace_bytes));
  if (c.workspace_bytes > 0) FK_RT(cudaMalloc(&c.workspace, static_cast<size_t>(c.workspace_bytes)));
  FK_RT(cudaMalloc(&c.aux, sizeof(int32_t) * (6 * (b + 1))));
  return c;
}

/// Equal-length fast path (Note [cuDNN SDPA, equal lengths] in attention.h): the packed
/// [B * S, H, D] tensors are plain strided [B, H, S, D] tensors; no padding mask, no ragged
/// offsets, no auxiliary kernel.
CachedGraph build_dense(cudnnHandle_t handle, const VarlenAttentionArgs& a) {
  const int64_t b = a.batch, hq = a.num_heads, hkv = a.num_kv_heads, d = a.head_dim, dv = a.head_dim_v > 0 ? a.head_dim_v : d;
  const int64_t sq = a.max_seqlen_q, sk = a.max_seqlen_k;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(a.dtype)).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = g->tensor(fe::graph::Tensor_attributes().set_name("Q").set_uid(kQ).set_dim({b, hq, sq, d}).set_stride({sq * hq * d, d, hq * d, 1}));
  auto k = g->tensor(fe::graph::Tensor_attributes().set_name("K").set_uid(kK).set_dim({b, hkv, sk, d}).set_stride({sk * hkv * d, d, hkv * d, 1}));
  auto v = g->tensor(fe::graph::Tensor_attributes().set_name("V").set_uid(kV).set_dim({b, hkv, sk, dv}).set_stride({sk * hkv * dv, dv, hkv * dv, 1}));
  auto opts = fe::graph::SDPA_attributes().set_name("flash_attn_dense").set_generate_stats(false).set_attn_scale(a.softmax_scale);
  add_bias(*g, opts, a);
  if (a.causal) opts.set_causal_mask(true);
  if (a.window > 0) opts.set_diagonal_band_left_bound(a.window);
  auto [o, stats] = g->sdpa(q, k, v, opts);
  (void)stats;
  o->set_output(true).set_uid(kO).set_dim({b, hq, sq, dv}).set_stride({sq * hq * dv, dv, hq * dv, 1});
  FK_FE(g->validate());
  FK_FE(g->build_operation_graph(handle));
  FK_FE(g->create_execution_plans({fe::HeurMode_t::A}));
  FK_FE(g->check_support(handle));
  FK_FE(g->build_plans(handle));
  CachedGraph c;
  c.graph = g;
  FK_FE(g->get_workspace_size(c.workspace_bytes));
  if (c.workspace_bytes > 0) FK_RT(cudaMalloc(&c.workspace, static_cast<size_t>(c.workspace_bytes)));
  return c;
}

}  // namespace

void varlen_attention_cudnn(const VarlenAttentionArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.total_q == 0) return;
  if (!a.out || !a.q || !a.k || !a.v || !a.cu_seqlens_q || (!a.cu_seqlens_k && !a.seqused_k)) fail("null pointer");
  if (a.seqused_k && a.total_k != a.batch * a.max_seqlen_k)
    fail("with seqused_k, k/v are a padded [batch, max_seqlen_k, Hkv, D] cache: total_k must be batch * max_seqlen_k");
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.head_dim <= 0 || a.head_dim_v < 0)
    fail("bad heads");
  const int dv = a.head_dim_v > 0 ? a.head_dim_v : a.head_dim;
  if (a.window < 0) fail("window must be >= 0 (0: no sliding window)");
  if (a.window > 0 && !a.causal) fail("a sliding window needs causal attention here");
  if (a.total_q * a.num_heads * std::max(a.head_dim, dv) >= (int64_t(1) << 31) ||
      a.total_k * a.num_kv_heads * std::max(a.head_dim, dv) >= (int64_t(1) << 31)) {
    fail("ragged offsets exceed int32");
  }
  if (a.bias && (a.bias_rows < a.max_seqlen_q || a.bias_cols < a.max_seqlen_k))
    fail("the logit bias [Hq, " + std::to_string(a.bias_rows) + ", " + std::to_string(a.bias_cols) + "] is smaller than the longest sequences (" +
         std::to_string(a.max_seqlen_q) + " queries, " + std::to_string(a.max_seqlen_k) + " keys)");
  int dev = 0;
  FK_RT(cudaGetDevice(&dev));
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &a.softmax_scale, sizeof(scale_bits));
  // Every length is <= its max_seqlen, so B * max_seqlen == total means every length equals
  // max_seqlen: no device -> host sync is needed to take the dense path.
  const bool dense = a.allow_dense && a.total_q == a.batch * a.max_seqlen_q &&
                     (a.seqused_k ? a.seqused_k_full : a.total_k == a.batch * a.max_seqlen_k);
  const Key key{dev,          static_cast<int>(a.dtype), a.batch,        a.max_seqlen_q, a.max_seqlen_k, a.num_heads,
                a.num_kv_heads, a.head_dim,             dv,             scale_bits,     a.causal,       dense,          a.window,
                a.bias ? a.bias_rows : 0, a.bias ? a.bias_cols : 0, a.bias != nullptr && a.bias_per_seq,
                dense ? 0 : a.total_q, dense ? 0 : a.total_k};  // Note [cuDNN graph key]
  std::lock_guard<std::mutex> lock(g_mu);
  static std::map<Key, CachedGraph> cache;
  cudnnHandle_t handle = handle_for_device(dev);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, dense ? build_dense(handle, a) : build(handle, a)).first;
  CachedGraph& c = it->second;
  if (dense) {
    FK_DNN(cudnnSetStream(handle, stream));
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<void*>(a.q)}, {kK, const_cast<void*>(a.k)}, {kV, const_cast<void*>(a.v)}, {kO, a.out}};
    if (a.bias) pack[kBias] = const_cast<void*>(a.bias);
    FK_FE(c.graph->execute(handle, pack, c.workspace));
    return;
  }
  const int64_t b = a.batch;
  int32_t* seq_q = c.aux;
  int32_t* seq_k = seq_q + b;
  int32_t* off_q = seq_k + b;
  int32_t* off_k = off_q + b + 1;
  int32_t* off_v = off_k + b + 1;
  int32_t* off_o = off_v + b + 1;
  varlen_aux_kernel<<<static_cast<unsigned>((b + 1 + 127) / 128), 128, 0, stream>>>(
      seq_q, seq_k, off_q, off_k, off_v, off_o, a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k,
      static_cast<int>(a.max_seqlen_k), static_cast<int>(b),
      a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.num_kv_heads * dv, a.num_heads * dv);
  FK_RT(cudaGetLastError());
  FK_DNN(cudnnSetStream(handle, stream));
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(a.q)}, {kK, const_cast<void*>(a.k)}, {kV, const_cast<void*>(a.v)}, {kO, a.out},
      {kSeqQ, seq_q},   {kSeqKV, seq_k},   {kOffQ, off_q},   {kOffK, off_k}, {kOffV, off_v}, {kOffO, off_o}};
  if (a.bias) pack[kBias] = const_cast<void*>(a.bias);
  FK_FE(c.graph->execute(handle, pack, c.workspace));
}

bool cudnn_attention_available() {
  static const bool ok = [] {
    cudnnHandle_t h = nullptr;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return false;
    cudnnDestroy(h);
    return cudnnGetVersion() >= 90000;
  }();
  return ok;
}

}  // namespace fk::kernels
