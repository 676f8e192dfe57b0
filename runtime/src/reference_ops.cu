// References for composite tasks (Note [Composite references]).
#include "fk/tasks/reference_ops.h"

#include <cmath>

#include "fk/kernels/gemm.h"
#include "fk/kernels/reference/activation_ref.cuh"
#include "fk/kernels/reference/attention_ref.cuh"
#include "fk/kernels/reference/layer_norm_ref.cuh"
#include "fk/kernels/reference/moe_ref.cuh"
#include "fk/kernels/reference/qk_norm_ref.cuh"
#include "fk/kernels/reference/rms_norm_ref.cuh"
#include "fk/kernels/reference/rotary_embedding_ref.cuh"
#include "fk/kernels/reference/silu_and_mul_ref.cuh"
#include "fk/kernels/reference/vocab_parallel_embedding_ref.cuh"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/runner.h"  // under_compute_sanitizer
#include "fk/runtime/tp_group.h"
#include "fk/tasks/attention.h"  // window_range

namespace fk::tasks::ref {

namespace {

namespace kr = fk::kernels::reference;

int64_t blocks(int64_t n, int threads = 256) { return (n + threads - 1) / threads; }

template <class T> __device__ float ld(const T* p) { return static_cast<float>(*p); }

template <class T> __global__ void round_kernel(T* out, const float* in, const T* bias, int64_t rows, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  float v = in[i];
  if (bias) v += static_cast<float>(bias[i % cols]);
  out[i] = static_cast<T>(v);
}

template <class T> __global__ void add_f32_kernel(float* out, const T* a, const T* b, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(a[i]) + static_cast<float>(b[i]);
}

template <class T> __global__ void accumulate_f32_kernel(float* acc, const T* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) acc[i] += static_cast<float>(x[i]);
}

template <class T>
__global__ void store_rows_kernel(T* cache, int64_t num_slots, const T* x, int64_t x_stride, const int64_t* slots,
                                  int64_t tokens, int64_t row) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= tokens * row) return;
  const int64_t t = i / row, c = i % row;
  const int64_t s = slots[t];
  if (s >= 0 && s < num_slots) cache[s * row + c] = x[t * x_stride + c];
}

void check_model_dtype(const Tensor& t, const char* what) {
  FK_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF16, std::string("reference ") + what + ": bf16/f16 expected, got " + t.str());
  FK_CHECK(t.dim() == 2 && t.stride(1) == 1, std::string("reference ") + what + ": 2-D rows expected, got " + t.str());
}

template <class T> struct Tag { using type = T; };
// Calls f(Tag<T>{}) for the model dtype T.
template <class F> void dispatch(DType d, F&& f) {
  if (d == DType::kBF16) f(Tag<bf16>{});
  else if (d == DType::kF16) f(Tag<f16>{});
  else FK_CHECK(false, std::string("reference op: unsupported dtype ") + dtype_name(d));
}

Tensor finish(const Tensor& f32, DType dtype, const Tensor& bias = Tensor()) {
  Tensor out = empty(f32.sizes(), dtype);
  const int64_t cols = f32.size(-1), rows = f32.numel() / cols;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    round_kernel<T><<<blocks(rows * cols), 256, 0, current_stream()>>>(out.data<T>(), f32.data<float>(),
                                                                       bias.defined() ? bias.data<T>() : nullptr, rows, cols);
  });
  FK_CHECK_LAUNCH();
  return out;
}

fk::kernels::GemmDType gemm_dtype(DType d) {
  return d == DType::kBF16 ? fk::kernels::GemmDType::kBF16 : fk::kernels::GemmDType::kF16;
}

// Note [Reference GEMMs under compute-sanitizer]
// racecheck runs with a kernel filter (our kernels only: gpu_protocol.sh), and with that filter
// the sanitizer itself fails inside any cuBLAS kernel, which ends the CUDA context. A task whose
// own kernels are ours but whose reference calls cuBLAS (moe_grouped_gemm) would then never be
// checked. Under the sanitizer the references therefore compute their GEMMs with a plain loop:
// one thread per output, fp32 accumulation over k in order, the same fp32 result as
// gemm_f32_out up to summation order. Slow, so only there; the tolerance is unchanged.
template <class T>
__global__ void plain_gemm_f32_kernel(float* c, int64_t ldc, const T* x, int64_t ldx, const T* w, int64_t m,
                                      int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, j = i % n;
    float acc = 0.f;
    for (int64_t q = 0; q < k; ++q) acc += float(x[r * ldx + q]) * float(w[j * k + q]);
    c[r * ldc + j] = acc;
  }
}

// c (fp32, row stride ldc) = x W^T: gemm_f32_out, or the plain loop under the sanitizer.
void ref_gemm_f32(float* c, int64_t ldc, const void* x, int64_t ldx, const void* w, int64_t m, int64_t n, int64_t k,
                  DType dtype) {
  static const bool plain = fk::under_compute_sanitizer();
  if (!plain) {
    fk::kernels::gemm_f32_out(c, ldc, x, ldx, w, m, n, k, gemm_dtype(dtype), current_stream());
    return;
  }
  if (m * n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t nb = std::min<int64_t>(blocks(m * n), 65535);
    plain_gemm_f32_kernel<T><<<nb, 256, 0, current_stream()>>>(c, ldc, static_cast<const T*>(x), ldx,
                                                              static_cast<const T*>(w), m, n, k);
  });
  FK_CHECK_LAUNCH();
}

}  // namespace

Tensor round_to(const Tensor& f32, DType dtype) {
  FK_CHECK(f32.dtype() == DType::kF32 && f32.is_contiguous(), "round_to: contiguous f32 expected, got " + f32.str());
  return finish(f32, dtype);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_model_dtype(x, "linear input");
  FK_CHECK(w.dim() == 2 && w.size(1) == x.size(1) && w.is_contiguous() && w.dtype() == x.dtype(), "reference linear weight " + w.str());
  const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
  Tensor c = empty({m, n}, DType::kF32);
  ref_gemm_f32(c.data<float>(), n, x.data_ptr(), x.stride(0), w.data_ptr(), m, n, k, x.dtype());
  return finish(c, x.dtype(), bias);
}

Tensor linear_tp_reduce(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_model_dtype(x, "linear input");
  FK_CHECK(w.dim() == 2 && w.size(1) == x.size(1) && w.is_contiguous() && w.dtype() == x.dtype(), "reference linear weight " + w.str());
  const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
  Tensor c = empty({m, n}, DType::kF32);
  ref_gemm_f32(c.data<float>(), n, x.data_ptr(), x.stride(0), w.data_ptr(), m, n, k, x.dtype());
  fk::dist::tp_all_reduce_(c);
  return finish(c, x.dtype(), bias);
}

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps, float weight_offset) {
  check_model_dtype(x, "rms_norm input");
  Tensor out = empty(x.sizes(), DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::rms_norm_ref<T>(out.data<float>(), nullptr, x.data<T>(), x.stride(0), nullptr, 0, w.data<T>(), x.size(0),
                        static_cast<int>(x.size(1)), static_cast<float>(eps), current_stream(), weight_offset);
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& w, double eps,
                                       float weight_offset) {
  check_model_dtype(x, "rms_norm input");
  check_model_dtype(residual, "rms_norm residual");
  // The residual sum is rounded to the model dtype before the norm reads it, as production does.
  Tensor sum32 = add_f32(x, residual);
  Tensor sum = finish(sum32, x.dtype());
  return {rms_norm(sum, w, eps, weight_offset), sum};
}

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  check_model_dtype(x, "layer_norm input");
  Tensor out = empty({x.size(0), x.size(1)}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::layer_norm_ref<T>(out.data<float>(), nullptr, x.data<T>(), x.stride(0), nullptr, 0, w.data<T>(),
                          b.defined() ? b.data<T>() : nullptr, x.size(0), static_cast<int>(x.size(1)), eps, current_stream());
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b, double eps) {
  check_model_dtype(x, "layer_norm input");
  check_model_dtype(residual, "layer_norm residual");
  Tensor sum = finish(add_f32(x, residual), x.dtype());  // rounded before the norm reads it
  return {layer_norm(sum, w, b, eps), sum};
}

Tensor activation(const Tensor& x, fk::kernels::Act act) {
  check_model_dtype(x, "activation input");
  Tensor out = empty({x.size(0), x.size(1)}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::activation_ref<T>(out.data<float>(), x.data<T>(), x.stride(0), x.size(0), static_cast<int>(x.size(1)), act,
                          current_stream());
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

Tensor head_rms_norm(const Tensor& x, int heads, int head_dim, const Tensor& w, double eps, float weight_offset) {
  check_model_dtype(x, "head_rms_norm input");
  Tensor out = empty({x.size(0), int64_t(heads) * head_dim}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::qk_norm_ref<T>(out.data<float>(), x.data<T>(), x.stride(0), w.data<T>(), x.size(0), heads, head_dim,
                       static_cast<float>(eps), current_stream(), weight_offset);
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& cos_sin_cache, int heads, int head_size,
            int rotary_dim, bool neox) {
  check_model_dtype(x, "rope input");
  FK_CHECK(positions.dtype() == DType::kI64 && positions.numel() == x.size(0), "reference rope positions " + positions.str());
  const int64_t cols = int64_t(heads) * head_size;
  Tensor out = empty({x.size(0), cols}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::rotary_embedding_ref<T>(out.data<float>(), cols, x.data<T>(), x.stride(0), positions.data<int64_t>(),
                                cos_sin_cache.data<float>(), x.size(0), heads, head_size, rotary_dim, neox, current_stream());
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

Tensor mrope_table(const Tensor& positions, const Tensor& cos_sin_cache, int rotary_dim, int s0, int s1, int s2, bool interleaved) {
  FK_CHECK(positions.dtype() == DType::kI64 && positions.dim() == 2 && positions.size(0) == 3 && positions.stride(1) == 1,
           "reference mrope positions: expected i64 [3, T] with contiguous rows, got " + positions.str());
  FK_CHECK(cos_sin_cache.dtype() == DType::kF32 && cos_sin_cache.size(-1) == rotary_dim, "reference mrope cache " + cos_sin_cache.str());
  const int64_t t = positions.size(1);
  Tensor out = empty({t, rotary_dim}, DType::kF32);
  kr::mrope_table_ref(out.data<float>(), positions.data<int64_t>(), positions.stride(0), cos_sin_cache.data<float>(), t, rotary_dim,
                      s0, s1, s2, interleaved, current_stream());
  FK_CHECK_LAUNCH();
  return out;
}

Tensor arange_i64(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return to_device(v, {n});
}

Tensor silu_and_mul(const Tensor& x, bool gelu_tanh) {
  check_model_dtype(x, "silu_and_mul input");
  const int64_t d = x.size(1) / 2;
  Tensor out = empty({x.size(0), d}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::silu_and_mul_ref<T>(out.data<float>(), x.data<T>(), x.stride(0), x.size(0), static_cast<int>(d), current_stream(),
                            gelu_tanh ? fk::kernels::GatedAct::kGeluTanh : fk::kernels::GatedAct::kSilu);
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

Tensor swigluoai_and_mul(const Tensor& x, double alpha, double limit) {
  check_model_dtype(x, "swigluoai_and_mul input");
  const int64_t d = x.size(1) / 2;
  Tensor out = empty({x.size(0), d}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::swigluoai_and_mul_ref<T>(out.data<float>(), x.data<T>(), x.stride(0), x.size(0), static_cast<int>(d),
                                 static_cast<float>(alpha), static_cast<float>(limit), current_stream());
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}

Tensor embedding(const Tensor& ids, const Tensor& weight, float scale) {
  FK_CHECK(ids.dtype() == DType::kI64 && ids.is_contiguous(), "reference embedding ids " + ids.str());
  Tensor out = empty({ids.numel(), weight.size(1)}, DType::kF32);
  dispatch(weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::vocab_parallel_embedding_ref<T>(out.data<float>(), ids.data<int64_t>(), weight.data<T>(), weight.size(0),
                                        ids.numel(), static_cast<int>(weight.size(1)), current_stream(), scale);
  });
  FK_CHECK_LAUNCH();
  return finish(out, weight.dtype());
}

namespace {
// out[i] = op(x[i]) in fp64 (elementwise references: soft-capping, scaling).
template <class T, class Op> __global__ void map_ref_kernel(float* out, const T* x, int64_t n, Op op) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(op(static_cast<double>(fk::kernels::to_float(x[i]))));
}
struct SoftcapRef {
  double cap;
  __device__ double operator()(double v) const { return cap * tanh(v / cap); }
};
struct ScaleRef {
  double s;
  __device__ double operator()(double v) const { return s * v; }
};

// op(x) elementwise from the model dtype, rounded to it.
template <class Op> Tensor map_ref(const Tensor& x, Op op) {
  Tensor out = empty(x.sizes(), DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = x.numel();
    if (n > 0)
      map_ref_kernel<T, Op><<<fk::kernels::ceil_div(n, 256), 256, 0, current_stream()>>>(out.data<float>(), x.data<T>(), n, op);
  });
  FK_CHECK_LAUNCH();
  return finish(out, x.dtype());
}
}  // namespace

Tensor softcap(const Tensor& x, double cap) {
  check_model_dtype(x, "softcap input");
  FK_CHECK(x.is_contiguous() && cap > 0, "reference softcap of " + x.str() + " with cap " + std::to_string(cap));
  return map_ref(x, SoftcapRef{static_cast<double>(static_cast<float>(cap))});  // the cap as the kernel takes it
}

Tensor scale(const Tensor& x, double s) {
  check_model_dtype(x, "scale input");
  FK_CHECK(x.is_contiguous() && std::isfinite(s), "reference scale of " + x.str() + " by " + std::to_string(s));
  return map_ref(x, ScaleRef{s});
}

void store_rows(Tensor& cache, const Tensor& x, const Tensor& slot_mapping) {
  check_model_dtype(x, "store_rows input");
  FK_CHECK(cache.is_contiguous() && cache.dtype() == x.dtype() && cache.numel() % x.size(1) == 0,
           "reference store_rows cache " + cache.str());
  FK_CHECK(slot_mapping.dtype() == DType::kI64 && slot_mapping.numel() == x.size(0), "reference slot_mapping " + slot_mapping.str());
  const int64_t row = x.size(1), slots = cache.numel() / row, tokens = x.size(0);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    store_rows_kernel<T><<<blocks(tokens * row), 256, 0, current_stream()>>>(cache.data<T>(), slots, x.data<T>(), x.stride(0),
                                                                             slot_mapping.data<int64_t>(), tokens, row);
  });
  FK_CHECK_LAUNCH();
}

namespace {
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_tok_stride, const std::vector<int32_t>& begin,
                 const std::vector<int32_t>& len, int hq, int hkv, int d, double scale, double softcap, const Tensor& sinks) {
  check_model_dtype(q, "attention q");
  const int64_t rows = q.size(0);
  FK_CHECK(int64_t(begin.size()) == rows && int64_t(len.size()) == rows, "reference attention: one KV range per query row");
  Tensor b = to_device(begin, {rows}), l = to_device(len, {rows});
  FK_CHECK(!sinks.defined() || (sinks.dtype() == DType::kF32 && sinks.numel() == hq && sinks.is_contiguous()),
           "reference attention sinks " + (sinks.defined() ? sinks.str() : std::string()));
  Tensor out = empty({rows, int64_t(hq) * d}, DType::kF32);
  dispatch(q.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::attention_ref<T>(out.data<float>(), q.data<T>(), q.stride(0), k.data<T>(), v.data<T>(), kv_tok_stride,
                         b.data<int32_t>(), l.data<int32_t>(), rows, hq, hkv, d, static_cast<float>(scale), current_stream(),
                         static_cast<float>(softcap), sinks.defined() ? sinks.data<float>() : nullptr);
  });
  FK_CHECK_LAUNCH();
  return finish(out, q.dtype());
}
}  // namespace

Tensor attention_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& cu, int hq,
                         int hkv, int d, double scale, int64_t window, double softcap, const Tensor& sinks, bool causal) {
  check_model_dtype(k, "attention k");
  check_model_dtype(v, "attention v");
  FK_CHECK(k.stride(0) == v.stride(0), "reference attention: k and v need the same row stride");
  std::vector<int32_t> begin, len;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int32_t p = 0; p < cu[s + 1] - cu[s]; ++p) {
      if (!causal) {  // bidirectional (encoders): the whole sequence
        FK_CHECK(window == 0, "reference attention: a window needs causal attention");
        begin.push_back(cu[s]);
        len.push_back(cu[s + 1] - cu[s]);
        continue;
      }
      const auto first = static_cast<int32_t>(window_range(p, window).first);
      begin.push_back(cu[s] + first);
      len.push_back(p + 1 - first);
    }
  return attention(q, k, v, k.stride(0), begin, len, hq, hkv, d, scale, softcap, sinks);
}

Tensor attention_cross(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& cu_q,
                       const std::vector<int32_t>& cu_k, int hq, int hkv, int d, double scale) {
  check_model_dtype(k, "cross-attention k");
  check_model_dtype(v, "cross-attention v");
  FK_CHECK(k.stride(0) == v.stride(0), "reference cross-attention: k and v need the same row stride");
  FK_CHECK(cu_q.size() == cu_k.size() && cu_q.size() >= 2, "reference cross-attention: one key range per query sequence");
  std::vector<int32_t> begin, len;
  for (size_t s = 0; s + 1 < cu_q.size(); ++s)
    for (int32_t p = cu_q[s]; p < cu_q[s + 1]; ++p) {
      begin.push_back(cu_k[s]);
      len.push_back(cu_k[s + 1] - cu_k[s]);
    }
  return attention(q, k, v, k.stride(0), begin, len, hq, hkv, d, scale, 0.0, Tensor());
}

Tensor attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const std::vector<int32_t>& lens,
                        int hq, int hkv, int d, double scale, int64_t window, double softcap, const Tensor& sinks) {
  FK_CHECK(k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes(), "reference decode caches " + k_cache.str());
  const int64_t max_len = k_cache.size(1);
  std::vector<int32_t> begin, len;
  for (size_t b = 0; b < lens.size(); ++b) {
    const auto first = lens[b] > 0 ? static_cast<int32_t>(window_range(lens[b] - 1, window).first) : 0;
    begin.push_back(static_cast<int32_t>(b * max_len + first));
    len.push_back(lens[b] - first);
  }
  return attention(q, k_cache, v_cache, int64_t(hkv) * d, begin, len, hq, hkv, d, scale, softcap, sinks);
}

namespace {

template <class T>
__global__ void gather_rows_kernel(T* out, const T* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * k) return;
  out[i] = a[rows[i / k] * lda + i % k];
}

__global__ void scatter_rows_kernel(float* out, const float* c, const int32_t* dst, const float* scale, const float* bias,
                                    int64_t m, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  const int64_t r = i / n;
  const int32_t s = dst[r];
  const float x = bias ? c[i] + bias[i % n] : c[i];
  out[s * n + i % n] = scale ? x * scale[s] : x;
}

}  // namespace

Tensor moe_linear_f32(const Tensor& a, const Tensor& w, const std::vector<int32_t>& topk_ids, int top_k,
                      bool per_slot_rows, const Tensor& topk_weights, const Tensor& bias) {
  check_model_dtype(a, "moe_linear input");
  FK_CHECK(w.dim() == 3 && w.is_contiguous() && w.dtype() == a.dtype() && w.size(2) == a.size(1),
           "reference moe_linear weight " + w.str() + " for input " + a.str());
  const int64_t num_valid = static_cast<int64_t>(topk_ids.size()), E = w.size(0), n = w.size(1), k = w.size(2);
  FK_CHECK(a.size(0) == (per_slot_rows ? num_valid : num_valid / top_k), "reference moe_linear: " + a.str() + " rows for " +
                                                                              std::to_string(num_valid) + " routed slots");
  FK_CHECK(!topk_weights.defined() || (topk_weights.dtype() == DType::kF32 && topk_weights.numel() == num_valid),
           "reference moe_linear weights " + topk_weights.str());
  FK_CHECK(!bias.defined() || (bias.dim() == 2 && bias.size(0) == E && bias.size(1) == n && bias.is_contiguous()),
           "reference moe_linear bias " + bias.str() + " for weight " + w.str());
  const Tensor bias_f32 = bias.defined() ? to_f32(bias) : Tensor();
  Tensor out = empty({num_valid, n}, DType::kF32);
  std::vector<std::vector<int32_t>> slots(E);
  for (int64_t s = 0; s < num_valid; ++s) {
    FK_CHECK(topk_ids[s] >= 0 && topk_ids[s] < E, "reference moe_linear: expert id " + std::to_string(topk_ids[s]) +
                                                      " out of range at slot " + std::to_string(s));
    slots[topk_ids[s]].push_back(static_cast<int32_t>(s));
  }
  const size_t es = dtype_size(a.dtype());
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = static_cast<int64_t>(slots[e].size());
    if (m == 0) continue;
    std::vector<int32_t> rows(m);
    for (int64_t i = 0; i < m; ++i) rows[i] = per_slot_rows ? slots[e][i] : slots[e][i] / top_k;
    Tensor rows_d = to_device(rows, {m}), dst_d = to_device(slots[e], {m});
    Tensor ae = empty({m, k}, a.dtype());
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      gather_rows_kernel<T><<<blocks(m * k), 256, 0, current_stream()>>>(ae.data<T>(), a.data<T>(), a.stride(0),
                                                                       rows_d.data<int32_t>(), m, k);
    });
    FK_CHECK_LAUNCH();
    Tensor ce = empty({m, n}, DType::kF32);
    const void* we = static_cast<const char*>(w.data_ptr()) + e * n * k * es;
    ref_gemm_f32(ce.data<float>(), n, ae.data_ptr(), k, we, m, n, k, a.dtype());
    scatter_rows_kernel<<<blocks(m * n), 256, 0, current_stream()>>>(
        out.data<float>(), ce.data<float>(), dst_d.data<int32_t>(),
        topk_weights.defined() ? topk_weights.data<float>() : nullptr,
        bias_f32.defined() ? bias_f32.data<float>() + e * n : nullptr, m, n);
    FK_CHECK_LAUNCH();
  }
  return out;
}

Tensor moe_sum_f32(const Tensor& x) {
  FK_CHECK(x.dim() == 3 && x.is_contiguous(), "reference moe_sum input " + x.str());
  const int64_t t = x.size(0), k = x.size(1), h = x.size(2);
  Tensor out = empty({t, h}, DType::kF32);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kr::moe_sum_ref<T>(out.data<float>(), x.data<T>(), t, static_cast<int>(k), static_cast<int>(h), current_stream());
  });
  FK_CHECK_LAUNCH();
  return out;
}

Tensor add_f32(const Tensor& a, const Tensor& b) {
  FK_CHECK(a.is_contiguous() && b.is_contiguous() && a.sizes() == b.sizes() && a.dtype() == b.dtype(),
           "add_f32: " + a.str() + " + " + b.str());
  Tensor out = empty(a.sizes(), DType::kF32);
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_f32_kernel<T><<<blocks(a.numel()), 256, 0, current_stream()>>>(out.data<float>(), a.data<T>(), b.data<T>(), a.numel());
  });
  FK_CHECK_LAUNCH();
  return out;
}

void accumulate_f32_(Tensor& acc, const Tensor& x) {
  FK_CHECK(acc.is_contiguous() && x.is_contiguous() && acc.dtype() == DType::kF32 && acc.numel() == x.numel(),
           "accumulate_f32_: " + acc.str() + " += " + x.str());
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    accumulate_f32_kernel<T><<<blocks(x.numel()), 256, 0, current_stream()>>>(acc.data<float>(), x.data<T>(), x.numel());
  });
  FK_CHECK_LAUNCH();
}

}  // namespace fk::tasks::ref
