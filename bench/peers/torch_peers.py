#!/usr/bin/env python3
"""Torch peers for fk_bench: times torch eager and torch.compile on exactly the cases fk_bench ran.

Reads the case list that `fk_bench --export-cases cases.json` writes, reconstructs each task's
constants from its name (names spell every constant; docs/task-kinds.md), and times the torch
formulation production falls back to (vLLM's `forward_native` for norms/rope/activations,
F.embedding, F.linear = cuBLAS, SDPA with each backend) with the same method as fk_bench:
CUDA events, the L2 flushed (256 MiB written) before every timed call, rotating input sets,
warm-up, median with min/max. Writes JSON lines, one per (task, case, peer).

Mixture-of-experts kinds: replicated_linear (the router gate) is F.linear like the other linears;
build_moe builds the rest. topk_softmax (fp32 softmax + torch.topk [+ renormalise], the HF router /
vLLM's torch fallback), moe_align_block_size (a sort-based torch formulation of vLLM's alignment,
no host synchronisation) and moe_sum (sum over the top-k axis) get eager and torch.compile peers;
moe_grouped_gemm gets torch's grouped GEMM (F.grouped_mm, else torch._grouped_mm) on rows already
sorted by expert (torch_grouped_mm), and with the gather / weight multiply / scatter back to slot
order the task includes (torch_grouped_mm_gather); fused_experts and sparse_moe_block get the
grouped_mm pipeline (sort by expert, grouped GEMM, SiLU-and-mul, grouped GEMM, routing weight,
un-permute, sum; eager and compiled) and HF transformers' eager per-expert loop (torch_hf_loop,
which synchronises with the host as HF does). A peer that raises (e.g. a grouped GEMM rejecting
its inputs) is written as an error record.

DeepSeek MLA decode (mla_decode, absorbed: one 576-wide latent KV head shared by all query heads):
torch_eager_absorbed (score GEMM, fp32 softmax, GEMM with the latent c_kv; HF-style eager on the
latent cache), its torch.compile, and torch_sdpa (SDPA with one KV head, V a view of K's first
512 columns; torch picks the backend).

    python3 bench/peers/torch_peers.py cases.json --out peers.jsonl [--no-compile]
"""
import argparse
import json
import math
import re
import sys
import time

import torch
import torch.nn.functional as F

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
FLUSH = None
SLEEP_CYCLES = 400_000  # ~200 us at 1.98 GHz


def flush():
    FLUSH.zero_()
    # Keep the GPU busy while Python launches the next call, so host-side overhead (dynamo
    # guards, the compiled wrapper) is not timed as GPU time: the 256 MiB flush alone (~85 us)
    # does not always cover torch.compile's per-call overhead. fk_bench's C++ launch path adds
    # a few microseconds at most, well inside the flush.
    torch.cuda._sleep(SLEEP_CYCLES)


def time_fn(fn, nsets, max_iters=200, target_ms=60.0, warmup=3):
    for i in range(warmup):
        flush()
        fn(i % nsets)
    torch.cuda.synchronize()
    times = []
    total = 0.0
    it = 0
    last = None
    while it < max_iters:
        evs = []
        for b in range(10):
            flush()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn((it + b) % nsets)
            e.record()
            evs.append((s, e))
        torch.cuda.synchronize()
        for s, e in evs:
            ms = s.elapsed_time(e)
            times.append(ms * 1e3)
            total += ms
        it += 10
        med = sorted(times)[len(times) // 2]
        if it >= 10 and total >= target_ms:
            break
        if last is not None and abs(med - last) <= 0.01 * last and it >= 30:
            break
        last = med
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    return {"median_us": med, "min_us": times[0], "max_us": times[-1], "iters": n}


def nsets_for(nbytes):
    return 8 if nbytes < 32 << 20 else (4 if nbytes < 512 << 20 else 2)


# --- torch formulations (vLLM forward_native equivalents) -----------------------------------

def rms_norm_native(x, w, eps):
    xf = x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    return (xf * torch.rsqrt(var + eps)).to(x.dtype) * w


def fused_add_rms_norm_native(x, res, w, eps):
    z = x.float() + res.float()
    res_out = z.to(x.dtype)
    var = z.pow(2).mean(-1, keepdim=True)
    return (z * torch.rsqrt(var + eps)).to(x.dtype) * w, res_out


def qk_norm_native(q, k, qw, kw, d, eps, norm=rms_norm_native):
    qh = norm(q.view(q.shape[0], -1, d), qw, eps).view(q.shape)
    kh = norm(k.view(k.shape[0], -1, d), kw, eps).view(k.shape)
    return qh, kh


def layer_norm_native(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def fused_add_layer_norm_native(x, res, w, b, eps):
    z = x + res
    return F.layer_norm(z, (z.shape[-1],), w, b, eps), z


def gemma_rms_norm_native(x, w, eps):
    """HF GemmaRMSNorm: fp32 normalise, times (1 + w) in fp32, one rounding."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())).to(x.dtype)


def gemma_fused_add_rms_norm_native(x, res, w, eps):
    z = (x.float() + res.float()).to(x.dtype)
    return gemma_rms_norm_native(z, w, eps), z


def gelu_tanh_and_mul_native(x):
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


def gelu_and_mul_native(x):
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d]) * x[..., d:]


# The activation kind's modules as get_act_fn builds them (QuickGELU: vLLM's forward_native).
ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x), "relu": F.relu, "silu": F.silu,
               "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu2": lambda x: torch.square(F.relu(x))}


def scaled_embedding_native(ids, w, scale):
    """HF Gemma3TextScaledWordEmbedding: rows times embed_scale in the weight dtype."""
    return F.embedding(ids, w) * scale


def _neox_rotate(x, cos, sin, d, rot):
    """x [T, H*d] rotated NeoX-style by per-token cos/sin [T, rot/2] (in x's dtype); columns past rot kept."""
    t = x.shape[0]
    x = x.view(t, -1, d)
    x1, x2 = x[..., :rot].chunk(2, dim=-1)
    c = cos.unsqueeze(-2).to(x.dtype)
    s = sin.unsqueeze(-2).to(x.dtype)
    o = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    if rot < d:
        o = torch.cat((o, x[..., rot:]), dim=-1)
    return o.reshape(t, -1)


def rope_native(positions, q, k, cos_sin, d, rot):
    cos, sin = cos_sin.index_select(0, positions).chunk(2, dim=-1)
    return _neox_rotate(q, cos, sin, d, rot), _neox_rotate(k, cos, sin, d, rot)


def mrope_native(positions, q, k, cos_sin, d, rot, sections, interleaved):
    """vLLM MRotaryEmbedding.forward_native (NeoX style): positions [3, T]; each rotary frequency's
    cos/sin from the temporal, height or width row its section names (interleaved: Qwen3-VL's strided
    sections)."""
    cs = cos_sin[positions]  # [3, T, rot]
    cos, sin = cs.chunk(2, dim=-1)
    if interleaved:
        c, s = cos[0].clone(), sin[0].clone()
        for a in (1, 2):
            idx = slice(a, sections[a] * 3, 3)
            c[..., idx] = cos[a][..., idx]
            s[..., idx] = sin[a][..., idx]
    else:
        c = torch.cat([m[i] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
        s = torch.cat([m[i] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return _neox_rotate(q, c, s, d, rot), _neox_rotate(k, c, s, d, rot)


def silu_and_mul_native(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def swigluoai_and_mul_native(x, alpha, limit):
    """vLLM SwigluOAIAndMul / HF GptOssExperts._apply_gate: interleaved gate/up, clamped."""
    gate, up = x[..., ::2], x[..., 1::2]
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


def attention_with_sinks_eager(q, k, v, sinks, mask):
    """HF eager_attention_forward of gpt-oss: scores (+ mask), one sink logit per head joins the
    softmax, its probability is dropped. q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D], sinks [Hq] f32."""
    g_ = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g_, dim=1)
    v = v.repeat_interleave(g_, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    z = torch.cat([s, sinks.view(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)], dim=-1)
    p = torch.softmax(z, dim=-1)[..., :-1].to(v.dtype)
    return torch.matmul(p, v)


def mla_decode_absorbed_eager(q, kv, scale, dkv):
    """DeepSeek MLA absorbed decode, eager (HF-style attention on the latent cache, what vLLM's
    torch reference of the MLA decode computes): q [B, H, Dkv + Dr] (q_nope·W_UK | q_pe), kv
    [B, L, Dkv + Dr] (c_kv | k_pe, one latent head shared by all H): the score GEMM in the model
    dtype (fp32 accumulation), scale and softmax in fp32, probabilities back to the model dtype,
    times the latent c_kv (the first Dkv columns). Returns [B, H, Dkv]."""
    s = torch.matmul(q, kv.transpose(-1, -2)).float() * scale
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return torch.matmul(p, kv[..., :dkv])


def store_kvcache_native(key, value, kc, vc, slots):
    kc.index_copy_(0, slots, key)
    vc.index_copy_(0, slots, value)


# --- mixture of experts (HF transformers / vLLM native equivalents) ------------------------------
# Routing layout as in vLLM (runtime/include/fk/tasks/moe.h, Note [MoE routing layout]):
# topk_ids [T, K] i32 and topk_weights [T, K] f32; slot s = t * K + k.

# F.grouped_mm (torch >= 2.10) is the public wrapper of torch._grouped_mm: mat_a [M, k] row-major
# with its rows grouped by `offs` (int32 cumulative group ends), mat_b [G, k, n] (column-major is
# the kernel's fast layout: an expert weight [G, n, k] transposed), out [M, n]. None where this
# torch has neither (the grouped GEMM peers then fail with an error record).
GROUPED_MM = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def concat_and_cache_mla_native(kv_c, k_pe, cache, slots):
    cache[slots] = torch.cat([kv_c, k_pe], dim=-1)
    return cache


def grouped_topk_native(logits, bias, top_k, groups, topk_group, sigmoid, renorm, scale):
    """vLLM grouped_topk (python semantics) for one batch of router logits."""
    scores = logits.float().sigmoid() if sigmoid else logits.float().softmax(dim=-1)
    T, E = scores.shape
    choice = scores + bias if bias is not None else scores
    grouped = choice.view(T, groups, E // groups)
    gs = grouped.topk(2, dim=-1)[0].sum(dim=-1) if bias is not None else grouped.max(dim=-1).values
    gidx = gs.topk(topk_group, dim=-1, sorted=False)[1]
    gmask = torch.zeros_like(gs).scatter_(1, gidx, 1)
    smask = gmask.unsqueeze(-1).expand(T, groups, E // groups).reshape(T, E)
    ids = choice.masked_fill(smask == 0, float("-inf")).topk(top_k, dim=-1)[1]
    w = scores.gather(1, ids)
    if renorm:
        w = w / w.sum(dim=-1, keepdim=True)
    return w * scale, ids.to(torch.int32)


def grouped_mm(a, b_t, offs):
    if GROUPED_MM is None:
        raise RuntimeError(f"torch {torch.__version__} has neither F.grouped_mm nor torch._grouped_mm")
    return GROUPED_MM(a, b_t, offs=offs)


def moe_block_m(tokens, top_k, num_experts):
    # Must match kernels/include/fk/kernels/moe_gemm.cuh moe_gemm_block_m: the block the
    # moe_align_block_size task (and both grouped GEMMs) use for a token count. By the expected
    # rows per expert R = T * K / E in floating point: R < 24 -> 16, 96 <= R < 192 -> 192,
    # R < 256 -> 64, else 128.
    rows = max(tokens, 0) * max(top_k, 1) / max(num_experts, 1)
    if rows < 24.0:
        return 16
    if 96.0 <= rows < 192.0:
        return 192
    return 64 if rows < 256.0 else 128


def moe_align_capacity(numel, num_experts, block):
    """(max_padded, max_blocks) as kernels/include/fk/kernels/moe_routing.cuh sizes the outputs."""
    max_padded = numel + num_experts * (block - 1)
    return max_padded, (max_padded + block - 1) // block


def topk_softmax_native(logits, top_k, renormalize):
    """vLLM fused_topk's torch path / HF router: softmax in fp32, top-k, optional renormalise."""
    w, ids = torch.topk(torch.softmax(logits, dim=-1, dtype=torch.float32), top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def expert_counts(flat_ids, num_experts):
    # Slots per expert without a host synchronisation: torch.bincount on CUDA reads the input's
    # max back to size its output, and has a data-dependent shape under torch.compile.
    return torch.zeros(num_experts, dtype=torch.int64, device=flat_ids.device).scatter_add_(
        0, flat_ids, torch.ones_like(flat_ids))


def moe_align_native(topk_ids, num_experts, block, max_padded, max_blocks):
    """vLLM moe_align_block_size in torch ops, no host synchronisation. Returns sorted_token_ids
    [max_padded] i32 (each expert's slots, stable order, padded with the sentinel numel to a
    multiple of block), expert_ids [max_blocks] i32 (-1 past the end), num_tokens_post_pad [1] i32."""
    flat = topk_ids.reshape(-1).long()
    numel = flat.numel()
    counts = expert_counts(flat, num_experts)
    padded = (counts + block - 1) // block * block
    seg_end = torch.cumsum(padded, 0)
    seg_start = seg_end - padded
    count_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(numel, device=flat.device) - count_start[expert_of]
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32, device=flat.device)
    sorted_ids.index_copy_(0, seg_start[expert_of] + rank, order.to(torch.int32))
    block_start = torch.arange(max_blocks, device=flat.device) * block
    total = seg_end[-1:]
    expert_ids = torch.where(block_start < total, torch.searchsorted(seg_end, block_start, right=True), -1)
    return sorted_ids, expert_ids.to(torch.int32), total.to(torch.int32)


def moe_sum_native(x):
    return x.sum(dim=1)


def sort_by_expert(topk_ids, num_experts):
    """order: slots sorted by expert (stable); offs: int32 cumulative slots per expert (the
    grouped GEMM's group ends). No host synchronisation."""
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(expert_counts(flat, num_experts), 0, dtype=torch.int32)
    return order, offs


def fused_experts_grouped_mm(x, w13, w2, topk_weights, topk_ids, b13=None, b2=None, swiglu_limit=0.0):
    """vLLM fused_experts with torch's grouped GEMM: sort the slots by expert, gather the token
    rows, w13 grouped GEMM, SiLU-and-mul, w2 grouped GEMM, routing weight (fp32), scatter back
    to slot order, sum over the top-k slots. w13 [E, 2I, H], w2 [E, H, I]. gpt-oss: per-expert
    biases b13 [E, 2I], b2 [E, H] and SwigluOAIAndMul (interleaved) when swiglu_limit > 0."""
    t, h = x.shape
    k = topk_ids.shape[1]
    inter = w2.shape[2]
    order, offs = sort_by_expert(topk_ids, w13.shape[0])
    a = x.index_select(0, order // k)
    g = grouped_mm(a, w13.transpose(-2, -1), offs)
    eid = topk_ids.reshape(-1).long()[order] if b13 is not None else None
    if b13 is not None:
        g = g + b13[eid]
    act = swigluoai_and_mul_native(g, 1.702, swiglu_limit) if swiglu_limit > 0 else F.silu(g[:, :inter]) * g[:, inter:]
    o = grouped_mm(act, w2.transpose(-2, -1), offs)
    if b2 is not None:
        o = o + b2[eid]
    o = (o.float() * topk_weights.reshape(-1)[order].unsqueeze(1)).to(x.dtype)
    out = torch.empty(t * k, h, device=x.device, dtype=x.dtype).index_copy_(0, order, o)  # order is a permutation
    return out.view(t, k, h).sum(dim=1)


def hf_experts_loop(x, w13, w2, topk_weights, topk_ids):
    """HF transformers 5 MixtralExperts.forward (eager): for every expert hit, torch.where over
    its one-hot mask (host synchronisation), gather, gate_up linear, SiLU * up, down linear,
    routing weight, index_add_ into the output. topk_weights in the hidden dtype, as
    MixtralSparseMoeBlock passes them."""
    num_experts = w13.shape[0]
    out = torch.zeros_like(x)
    with torch.no_grad():
        mask = F.one_hot(topk_ids.long(), num_classes=num_experts).permute(2, 1, 0)  # [E, K, T]
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for e in hit:
        e = e[0]
        pos, tok = torch.where(mask[e])
        gate, up = F.linear(x[tok], w13[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, w2[e]) * topk_weights[tok, pos, None]
        out.index_add_(0, tok, y.to(out.dtype))
    return out


def fused_experts_hf_loop(x, w13, w2, topk_weights, topk_ids):
    return hf_experts_loop(x, w13, w2, topk_weights.to(x.dtype), topk_ids)


def sparse_moe_grouped_mm(x, gate_w, w13, w2, top_k, renormalize, gate_b=None, b13=None, b2=None, swiglu_limit=0.0):
    """vLLM MixtralMoE / Qwen3MoeSparseMoeBlock / gpt-oss MLPBlock: replicated gate, fused_topk,
    fused_experts."""
    topk_weights, topk_ids = topk_softmax_native(F.linear(x, gate_w, gate_b), top_k, renormalize)
    return fused_experts_grouped_mm(x, w13, w2, topk_weights, topk_ids, b13, b2, swiglu_limit)


def sparse_moe_hf_loop(x, gate_w, w13, w2, top_k, renormalize):
    """HF transformers 5 MixtralSparseMoeBlock: router (fp32 softmax, top-k, renormalise), the
    weights cast to the hidden dtype, the eager experts loop."""
    probs = torch.softmax(F.linear(x, gate_w).float(), dim=-1)
    topk_weights, topk_ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return hf_experts_loop(x, w13, w2, topk_weights.to(x.dtype), topk_ids)


def deepseek_moe_grouped_mm(x, gate_w, bias, w13, w2, sw13, sw2, top_k, groups, topk_group, sigmoid, renorm, scale):
    """vLLM DeepseekV2MoE: shared experts (a dense SiLU-gated MLP), the replicated gate, grouped
    top-k (routed_scaling_factor in the weights), fused experts; routed + shared."""
    shared = F.linear(silu_and_mul_native(F.linear(x, sw13)), sw2)
    topk_weights, topk_ids = grouped_topk_native(F.linear(x, gate_w), bias, top_k, groups, topk_group, sigmoid, renorm, scale)
    return fused_experts_grouped_mm(x, w13, w2, topk_weights, topk_ids) + shared


# --- per-kind case builders: return {peer_name: callable(set)} and nsets -----------------------

def g(pattern, name):
    m = re.match(pattern, name)
    if not m:
        raise ValueError(f"cannot parse task name {name!r} with {pattern!r}")
    return m.groups()


def add_peers(peers, fn_native, args_sets, use_compile, tag=""):
    """torch_eager<tag> and (unless --no-compile) torch_compile<tag> of fn_native(*args_sets[i])."""
    peers["torch_eager" + tag] = lambda i: fn_native(*args_sets[i])
    if use_compile:
        cf = torch.compile(fn_native, dynamic=False)
        peers["torch_compile" + tag] = lambda i: cf(*args_sets[i])


def build(kind, name, dims, use_compile):
    if kind in MOE_KINDS:
        return build_moe(kind, name, dims, use_compile)
    dev = "cuda"
    dtype = DT[name.rsplit("_", 1)[1]]
    peers = {}

    def add(fn_native, args_sets, tag=""):
        add_peers(peers, fn_native, args_sets, use_compile, tag)

    T = dims.get("num_tokens")
    if kind in ("rms_norm", "fused_add_rms_norm", "gemma_rms_norm", "gemma_fused_add_rms_norm"):
        gemma = kind.startswith("gemma_")  # GemmaRMSNorm: weight used as 1 + w
        h, eps = g(r".*rms_norm_h(\d+)_eps([^_]+)_", name)
        h, eps = int(h), float(eps)
        w = (0.1 if gemma else 1.0) * torch.randn(h, device=dev, dtype=dtype)
        fused = "fused_add" in kind
        n = nsets_for(T * h * 2 * (2 if fused else 1))
        if not fused:
            sets = [(torch.randn(T, h, device=dev, dtype=dtype), w, eps) for _ in range(n)]
            add(gemma_rms_norm_native if gemma else rms_norm_native, sets)
        else:
            sets = [(torch.randn(T, h, device=dev, dtype=dtype), torch.randn(T, h, device=dev, dtype=dtype), w, eps)
                    for _ in range(n)]
            add(gemma_fused_add_rms_norm_native if gemma else fused_add_rms_norm_native, sets)
        return peers, n
    if kind in ("layer_norm", "fused_add_layer_norm"):
        # torch.nn.LayerNorm is the production module itself (F.layer_norm: ATen's fused kernel);
        # the fused kind is the encoder's eager `h = a + h; out = norm(h)`, and its torch.compile.
        h, eps, bias = g(r".*layer_norm_h(\d+)_eps([^_]+)_(bias|nobias)_", name)
        h, eps = int(h), float(eps)
        w = 1.0 + 0.1 * torch.randn(h, device=dev, dtype=dtype)
        b = 0.1 * torch.randn(h, device=dev, dtype=dtype) if bias == "bias" else None
        fused = kind == "fused_add_layer_norm"
        n = nsets_for(T * h * 2 * (2 if fused else 1))
        if not fused:
            sets = [(torch.randn(T, h, device=dev, dtype=dtype), w, b, eps) for _ in range(n)]
            add(layer_norm_native, sets)
        else:
            sets = [(torch.randn(T, h, device=dev, dtype=dtype), torch.randn(T, h, device=dev, dtype=dtype), w, b, eps)
                    for _ in range(n)]
            add(fused_add_layer_norm_native, sets)
        return peers, n
    if kind == "gelu_tanh_and_mul":
        (i_,) = g(r"gelu_tanh_and_mul_i(\d+)_", name)
        i_ = int(i_)
        n = nsets_for(T * i_ * 2 * 3)
        add(gelu_tanh_and_mul_native, [(torch.randn(T, 2 * i_, device=dev, dtype=dtype),) for _ in range(n)])
        return peers, n
    if kind == "gelu_and_mul":
        (i_,) = g(r"gelu_and_mul_i(\d+)_", name)
        i_ = int(i_)
        n = nsets_for(T * i_ * 2 * 3)
        add(gelu_and_mul_native, [(torch.randn(T, 2 * i_, device=dev, dtype=dtype),) for _ in range(n)])
        return peers, n
    if kind == "activation":
        act, h = g(r"activation_(.+)_h(\d+)_[a-z0-9]+$", name)
        h = int(h)
        n = nsets_for(T * h * 2)
        add(ACTIVATIONS[act], [(3 * torch.randn(T, h, device=dev, dtype=dtype),) for _ in range(n)])
        return peers, n
    if kind == "scaled_word_embedding":
        v, h = map(int, g(r"scaled_word_embedding_v(\d+)_h(\d+)_", name))
        w = torch.randn(v, h, device=dev, dtype=dtype)
        scale = torch.tensor(h ** 0.5, device=dev).to(dtype)  # "_scaled": sqrt(embedding_dim)
        n = nsets_for(T * h * 2 * 2)
        add(scaled_embedding_native, [(torch.randint(0, v, (T,), device=dev), w, scale) for _ in range(n)])
        return peers, n
    if kind in ("qk_norm", "gemma_qk_norm"):
        gemma = kind == "gemma_qk_norm"
        hq, hkv, d, eps = g(r"(?:gemma_)?qk_norm_hq(\d+)_hkv(\d+)_d(\d+)_eps([^_]+)_", name)
        hq, hkv, d, eps = int(hq), int(hkv), int(d), float(eps)
        ws = 0.1 if gemma else 1.0
        qw, kw = ws * torch.randn(d, device=dev, dtype=dtype), ws * torch.randn(d, device=dev, dtype=dtype)
        n = nsets_for(T * (hq + hkv) * d * 2)
        norm = gemma_rms_norm_native if gemma else rms_norm_native
        sets = [(torch.randn(T, hq * d, device=dev, dtype=dtype), torch.randn(T, hkv * d, device=dev, dtype=dtype),
                 qw, kw, d, eps, norm) for _ in range(n)]
        add(qk_norm_native, sets)
        return peers, n
    if kind == "rotary_embedding":
        d, rot, pos, base, _scaling, _style, hq, hkv = g(
            r"rotary_embedding_d(\d+)_rot(\d+)_pos(\d+)_base([^_]+)_(.+)_(neox|gptj)_hq(\d+)_hkv(\d+)_", name)
        d, rot, pos, hq, hkv = int(d), int(rot), int(pos), int(hq), int(hkv)
        inv = 1.0 / (float(base) ** (torch.arange(0, rot, 2, device=dev, dtype=torch.float32) / rot))
        freqs = torch.outer(torch.arange(pos, device=dev, dtype=torch.float32), inv)
        cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
        n = nsets_for(T * (hq + hkv) * d * 2 * 2)
        sets = [(torch.randint(0, pos, (T,), device=dev), torch.randn(T, hq * d, device=dev, dtype=dtype),
                 torch.randn(T, hkv * d, device=dev, dtype=dtype), cos_sin, d, rot) for _ in range(n)]
        add(rope_native, sets)
        return peers, n
    if kind == "mrope":
        d, rot, pos, base, style, il, s0, s1, s2, hq, hkv = g(
            r"mrope_d(\d+)_rot(\d+)_pos(\d+)_base([^_]+)_none_(neox|gptj)_mrope(i?)(\d+)x(\d+)x(\d+)_hq(\d+)_hkv(\d+)_", name)
        if style != "neox":
            return {}, 1  # the peer is NeoX-style only (every mrope checkpoint is)
        d, rot, pos, hq, hkv = int(d), int(rot), int(pos), int(hq), int(hkv)
        sections = [int(s0), int(s1), int(s2)]
        inv = 1.0 / (float(base) ** (torch.arange(0, rot, 2, device=dev, dtype=torch.float32) / rot))
        freqs = torch.outer(torch.arange(pos, device=dev, dtype=torch.float32), inv)
        cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
        n = nsets_for(T * (hq + hkv) * d * 2 * 2)
        sets = [(torch.randint(0, pos, (3, T), device=dev), torch.randn(T, hq * d, device=dev, dtype=dtype),
                 torch.randn(T, hkv * d, device=dev, dtype=dtype), cos_sin, d, rot, sections, il == "i") for _ in range(n)]
        add(mrope_native, sets)
        return peers, n
    if kind == "silu_and_mul":
        (i_,) = g(r"silu_and_mul_i(\d+)_", name)
        i_ = int(i_)
        n = nsets_for(T * i_ * 2 * 3)
        sets = [(torch.randn(T, 2 * i_, device=dev, dtype=dtype),) for _ in range(n)]
        add(silu_and_mul_native, sets)
        return peers, n
    if kind == "swigluoai_and_mul":
        i_, alpha, limit = g(r"swigluoai_and_mul_i(\d+)_a([0-9.e+-]+)_lim([0-9.e+-]+)_", name)
        i_, alpha, limit = int(i_), float(alpha), float(limit)
        n = nsets_for(T * i_ * 2 * 3)
        sets = [(4 * torch.randn(T, 2 * i_, device=dev, dtype=dtype), alpha, limit) for _ in range(n)]
        add(swigluoai_and_mul_native, sets)
        return peers, n
    if kind == "vocab_parallel_embedding":
        v, h = map(int, g(r"vocab_parallel_embedding_v(\d+)_h(\d+)_", name))
        w = torch.randn(v, h, device=dev, dtype=dtype)
        n = nsets_for(T * h * 2 * 2)
        sets = [(torch.randint(0, v, (T,), device=dev), w) for _ in range(n)]
        add(F.embedding, sets)
        return peers, n
    if kind in ("qkv_parallel_linear", "merged_column_parallel_linear", "row_parallel_linear", "replicated_linear",
                "column_parallel_linear", "parallel_lm_head"):
        if kind == "qkv_parallel_linear":
            h, d, hq, hkv, b = g(r"qkv_parallel_linear_h(\d+)_d(\d+)_hq(\d+)_hkv(\d+)_(bias|nobias)_", name)
            k, nout, bias = int(h), (int(hq) + 2 * int(hkv)) * int(d), b == "bias"
        elif kind == "merged_column_parallel_linear":
            k, n0, n1, b = g(r"merged_column_parallel_linear_k(\d+)_n(\d+)_(\d+)_(bias|nobias)_", name)
            k, nout, bias = int(k), int(n0) + int(n1), b == "bias"
        elif kind in ("row_parallel_linear", "replicated_linear", "column_parallel_linear"):  # router gate: replicated
            k, nout, b = g(r"(?:row_parallel|replicated|column_parallel)_linear_k(\d+)_n(\d+)_(bias|nobias)_", name)
            k, nout, bias = int(k), int(nout), b == "bias"
        else:
            v, h = g(r"parallel_lm_head_v(\d+)_h(\d+)_", name)
            k, nout, bias = int(h), int(v), False
        w = torch.randn(nout, k, device=dev, dtype=dtype) / math.sqrt(k)
        bvec = torch.randn(nout, device=dev, dtype=dtype) if bias else None
        n = nsets_for(T * k * 2)
        sets = [(torch.randn(T, k, device=dev, dtype=dtype), w, bvec) for _ in range(n)]
        peers["torch_linear_cublas"] = lambda i: F.linear(*sets[i])
        return peers, n
    if kind == "flash_attn_prefill":
        hq, hkv, d = map(int, g(r"flash_attn_prefill_hq(\d+)_hkv(\d+)_d(\d+)_", name))
        B, S = dims["batch"], dims["seq_len"]
        bidir = "_bidir" in name  # encoders: no causal mask
        if B != 1 and dims.get("uniform") != 1:
            # SDPA has no variable-length batch, and a padded one would do more work than the task
            # (the registry's batches have unequal lengths): peers for single sequences and for
            # uniform batches (dim `uniform`: every sequence S tokens, the encoders' and vision
            # towers' dense [B, H, S, D] shapes) only.
            return {}, 1
        n = 2
        sets = [(torch.randn(B, hq, S, d, device=dev, dtype=dtype), torch.randn(B, hkv, S, d, device=dev, dtype=dtype),
                 torch.randn(B, hkv, S, d, device=dev, dtype=dtype)) for _ in range(n)]
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sw = re.search(r"_sw(\d+)_", name)
        cap = re.search(r"_cap([0-9.e+-]+)_", name)
        if "_sinks_" in name:  # gpt-oss: out * Z / (Z + e^sink) = out * sigmoid(lse - sink), lse from flex
            if not use_compile:
                return {}, 1
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            W = int(sw.group(1)) if sw else 0
            bm = create_block_mask(lambda b, h, q, kv: (kv <= q) & ((kv > q - W) if W else (kv >= 0)), None, None, S, S,
                                   device=dev)
            flex = torch.compile(flex_attention, dynamic=False)
            sinks = torch.randn(hq, device=dev, dtype=torch.float32)

            def flex_sinks(i):
                o, lse = flex(*sets[i], block_mask=bm, enable_gqa=True, return_lse=True)
                return (o.float() * torch.sigmoid(lse - sinks.view(1, -1, 1)).unsqueeze(-1)).to(o.dtype)
            peers["torch_flex_attention_sinks_compiled"] = flex_sinks
            return peers, n
        if cap:  # soft-capping (Gemma 2): SDPA cannot; flex_attention with a score_mod (HF's flex path)
            if not use_compile:
                return {}, 1
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            c = float(cap.group(1))
            W = int(sw.group(1)) if sw else 0
            bm = create_block_mask(lambda b, h, q, kv: (kv <= q) & ((kv > q - W) if W else (kv >= 0)), None, None, S, S,
                                   device=dev)
            flex = torch.compile(flex_attention, dynamic=False)
            score_mod = lambda s_, b, h, q, kv: c * torch.tanh(s_ / c)
            peers["torch_flex_attention_softcap_compiled"] = lambda i: flex(*sets[i], score_mod=score_mod, block_mask=bm,
                                                                            enable_gqa=True)
            return peers, n
        if sw:  # sliding window of W keys: key j kept for query i when i - W < j <= i
            W = int(sw.group(1))
            ii = torch.arange(S, device=dev)
            band = (ii[None, :] <= ii[:, None]) & (ii[None, :] > ii[:, None] - W)
            for tag, be in (("efficient", SDPBackend.EFFICIENT_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                def fm(i, be=be):
                    with sdpa_kernel([be]):
                        return F.scaled_dot_product_attention(*sets[i], attn_mask=band, enable_gqa=True)
                peers["torch_sdpa_mask_" + tag] = fm
            if use_compile:
                from torch.nn.attention.flex_attention import create_block_mask, flex_attention
                bm = create_block_mask(lambda b, h, q, kv: (kv <= q) & (kv > q - W), None, None, S, S, device=dev)
                flex = torch.compile(flex_attention, dynamic=False)
                peers["torch_flex_attention_compiled"] = lambda i: flex(*sets[i], block_mask=bm, enable_gqa=True)
            return peers, n
        for tag, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                        ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            def f(i, be=be):
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(*sets[i], is_causal=not bidir, enable_gqa=True)
            peers["torch_sdpa_" + tag] = f
        return peers, n
    if kind == "cross_attention":
        # Uniform batches only (SDPA has no variable-length batch). Decode (write 0): SDPA of one query per
        # sequence over the cache [B, L, Hkv, D] (as vLLM's cross-attention reads its cache). First step
        # (write 1): the same production work, the cache written (a copy, reshape_and_cache's) and attended.
        hq, hkv, d = map(int, g(r"cross_attention_hq(\d+)_hkv(\d+)_d(\d+)_", name))
        B, Q, L, write = dims["batch"], dims["q_len"], dims["kv_len"], dims["write"]
        if dims.get("uniform") != 1:
            return {}, 1
        from torch.nn.attention import SDPBackend, sdpa_kernel
        n = 2
        sets = [(torch.randn(B, hq, Q, d, device=dev, dtype=dtype),
                 torch.randn(B, L, hkv, d, device=dev, dtype=dtype), torch.randn(B, L, hkv, d, device=dev, dtype=dtype))
                for _ in range(n)]
        kc, vc = torch.empty(B, L, hkv, d, device=dev, dtype=dtype), torch.empty(B, L, hkv, d, device=dev, dtype=dtype)
        for tag, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                        ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            def f(i, be=be):
                q, k, v = sets[i]
                if write:
                    kc.copy_(k)
                    vc.copy_(v)
                    k, v = kc, vc
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)
            peers[("torch_copy_sdpa_" if write else "torch_sdpa_") + tag] = f
        return peers, n
    if kind == "interpolate":
        # F.interpolate itself (NHWC: a channels_last tensor), eager and compiled.
        mode, ac, c, ih, iw, oh, ow, layout = g(r"interpolate_([a-z_]+?)_(ac|hp)_c(\d+)_(\d+)x(\d+)_to_(\d+)x(\d+)_(nhwc|nchw)_", name)
        aa = mode.endswith("_aa")
        mode = mode[:-3] if aa else mode
        c, ih, iw, oh, ow = int(c), int(ih), int(iw), int(oh), int(ow)
        B = dims["batch"]
        n = nsets_for(B * c * (ih * iw + oh * ow) * 2)
        mf = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        sets = [(torch.randn(B, c, ih, iw, device=dev, dtype=dtype).contiguous(memory_format=mf),) for _ in range(n)]
        kw = {"size": (oh, ow), "mode": mode}
        if mode != "nearest":
            kw["align_corners"] = ac == "ac"
        if aa:
            kw["antialias"] = True
        add(lambda x: F.interpolate(x, **kw), sets)
        return peers, n
    if kind == "token_classifier":
        # The production head: nn.Linear(hidden, labels) then the pooler's act_fn (vLLM's token_classify pooler;
        # BGE-M3's sparse weights relu(sparse_linear(h))), eager and compiled.
        n_lab, h, act, bias = g(r"token_classifier_n(\d+)_h(\d+)_([a-z]+)_(bias|nobias)_", name)
        n_lab, h, T = int(n_lab), int(h), dims["num_tokens"]
        n = nsets_for(T * h * 2)
        w = torch.randn(n_lab, h, device=dev, dtype=dtype) / h ** 0.5
        b = torch.randn(n_lab, device=dev, dtype=dtype) if bias == "bias" else None
        fn = {"relu": torch.relu, "sigmoid": torch.sigmoid, "none": lambda y: y}[act]
        sets = [(torch.randn(T, h, device=dev, dtype=dtype),) for _ in range(n)]
        add(lambda x: fn(F.linear(x, w, b)), sets)
        return peers, n
    if kind == "flash_attn_decode":
        hq, hkv, d = map(int, g(r"flash_attn_decode_hq(\d+)_hkv(\d+)_d(\d+)_", name))
        B, L = dims["batch"], dims["kv_len"]
        n = nsets_for(B * L * hkv * d * 4)
        n = min(n, 2)
        sets = [(torch.randn(B, hq, 1, d, device=dev, dtype=dtype),
                 torch.randn(B, L, hkv, d, device=dev, dtype=dtype).transpose(1, 2),
                 torch.randn(B, L, hkv, d, device=dev, dtype=dtype).transpose(1, 2)) for _ in range(n)]
        sw = re.search(r"_sw(\d+)_", name)
        if "_sinks_" in name:  # gpt-oss: HF's eager sink attention over the (window of the) cache
            W = min(int(sw.group(1)), L) if sw else L
            sinks = torch.randn(hq, device=dev, dtype=torch.float32)
            fn = attention_with_sinks_eager
            peers["torch_eager_sinks"] = lambda i: fn(sets[i][0], sets[i][1][:, :, L - W:], sets[i][2][:, :, L - W:], sinks, None)
            if use_compile:
                cfn = torch.compile(attention_with_sinks_eager, dynamic=False)
                peers["torch_compile_sinks"] = lambda i: cfn(sets[i][0], sets[i][1][:, :, L - W:], sets[i][2][:, :, L - W:],
                                                             sinks, None)
            return peers, n
        if sw:  # the query (the last token) sees the last W cached keys: SDPA over that slice
            W = min(int(sw.group(1)), L)
            peers["torch_sdpa_window_slice"] = lambda i: F.scaled_dot_product_attention(
                sets[i][0], sets[i][1][:, :, L - W:], sets[i][2][:, :, L - W:], enable_gqa=True)
            return peers, n
        peers["torch_sdpa"] = lambda i: F.scaled_dot_product_attention(*sets[i], enable_gqa=True)
        return peers, n
    if kind == "concat_and_cache_mla":
        kv, r = map(int, g(r"concat_and_cache_mla_kv(\d+)_r(\d+)_", name))
        slots_total = max(2 * T, 4096)
        cache = torch.zeros(slots_total, kv + r, device=dev, dtype=dtype)
        n = nsets_for(T * (kv + r) * 2 * 2)
        # kv_c and k_pe as slices of one [T, kv + r + 64] buffer, as the harness (and kv_a_proj's output)
        sets = []
        for _ in range(n):
            buf = torch.randn(T, kv + r + 64, device=dev, dtype=dtype)
            sets.append((buf[:, :kv], buf[:, kv:kv + r], cache, torch.randperm(slots_total, device=dev)[:T]))
        add(concat_and_cache_mla_native, sets)
        return peers, n
    if kind == "mla_prefill":
        hq, dqk, dv = map(int, g(r"mla_prefill_hq(\d+)_dqk(\d+)_dv(\d+)_", name))
        B, S = dims["batch"], dims["seq_len"]
        if B != 1:
            return {}, 1  # SDPA has no variable-length batch; peers only for single sequences
        m = re.search(r"_scale([0-9.e+-]+)_", name)
        scale = float(m.group(1)) if m else dqk ** -0.5
        n = 2
        sets = [(torch.randn(1, hq, S, dqk, device=dev, dtype=dtype), torch.randn(1, hq, S, dqk, device=dev, dtype=dtype),
                 torch.randn(1, hq, S, dv, device=dev, dtype=dtype)) for _ in range(n)]
        from torch.nn.attention import SDPBackend, sdpa_kernel
        # SDPA accepts a v head dim != the qk one on the cuDNN and efficient backends; FlashAttention
        # needs equal dims, so vLLM pads v to 192 for it: that padded form is the flash peer.
        for tag, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            def f(i, be=be):
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(*sets[i], is_causal=True, scale=scale)
            peers["torch_sdpa_" + tag] = f

        def flash_padded(i):
            q, k, v = sets[i]
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                o = F.scaled_dot_product_attention(q, k, F.pad(v, (0, dqk - dv)), is_causal=True, scale=scale)
            return o[..., :dv]
        peers["torch_sdpa_flash_vpad"] = flash_padded
        return peers, n
    if kind == "mla_decode":
        hq, dkv, dr = map(int, g(r"mla_decode_hq(\d+)_kv(\d+)_r(\d+)_", name))
        sc = re.search(r"_s(?:cale)?([0-9][0-9.e+-]*)_", name)  # _s<scale> or _scale<scale>
        scale = float(sc.group(1)) if sc else (dkv + dr) ** -0.5  # the name spells the model's scale when it has one
        B, L = dims["batch"], dims["kv_len"]
        # Every sequence holds L keys here: the task's lengths (decode_seq_lens: sequence b has
        # L - b * L // (2B)) would need a mask or one call per sequence (SDPA has no ragged batch),
        # so at batch > 1 the peers read up to a third more keys than the task's kernel does.
        n = min(nsets_for(B * L * (dkv + dr) * 2), 2)
        sets = [(torch.randn(B, hq, dkv + dr, device=dev, dtype=dtype), torch.randn(B, L, dkv + dr, device=dev, dtype=dtype))
                for _ in range(n)]
        peers["torch_eager_absorbed"] = lambda i: mla_decode_absorbed_eager(sets[i][0], sets[i][1], scale, dkv)
        if use_compile:
            cf = torch.compile(mla_decode_absorbed_eager, dynamic=False)
            peers["torch_compile_absorbed"] = lambda i: cf(sets[i][0], sets[i][1], scale, dkv)

        def sdpa(i):  # one KV head (MQA), V the first Dkv columns of K (a view); torch picks the backend
            k = sets[i][1].unsqueeze(1)
            return F.scaled_dot_product_attention(sets[i][0].unsqueeze(2), k, k[..., :dkv], scale=scale, enable_gqa=True)
        peers["torch_sdpa"] = sdpa
        return peers, n
    if kind == "store_kvcache":
        hkv, d = map(int, g(r"store_kvcache_hkv(\d+)_d(\d+)_", name))
        slots_total = max(2 * T, 4096)
        kc = torch.zeros(slots_total, hkv, d, device=dev, dtype=dtype)
        vc = torch.zeros_like(kc)
        n = nsets_for(T * hkv * d * 2 * 4)
        sets = [(torch.randn(T, hkv, d, device=dev, dtype=dtype), torch.randn(T, hkv, d, device=dev, dtype=dtype), kc, vc,
                 torch.randperm(slots_total, device=dev)[:T]) for _ in range(n)]
        add(store_kvcache_native, sets)
        return peers, n
    return {}, 1


MOE_KINDS = ("topk_softmax", "grouped_topk", "moe_align_block_size", "moe_sum", "moe_grouped_gemm", "fused_experts",
             "sparse_moe_block", "deepseek_moe")
MOE_SET_BUDGET = 24 << 30  # bytes of rotating sets at most, as the fk_bench grouped GEMM harness


def nsets_within(nbytes, budget=MOE_SET_BUDGET):
    n = nsets_for(nbytes)
    while n > 1 and n * nbytes > budget:
        n -= 1
    return n


def random_routing(tokens, num_experts, top_k, dev):
    """As the fk_bench harness: the renormalised top-k of random logits (K distinct experts per
    token, roughly uniform load; positive f32 weights, i32 ids)."""
    return topk_softmax_native(torch.randn(tokens, num_experts, device=dev, dtype=torch.bfloat16), top_k, True)


def random_weight(shape, fan_in, dev, dtype):
    return torch.randn(*shape, device=dev, dtype=dtype).mul_(1.0 / math.sqrt(fan_in))


def build_moe(kind, name, dims, use_compile):
    dev = "cuda"
    T = dims["num_tokens"]
    peers = {}
    if kind == "moe_align_block_size":  # ids are int32 whatever the model dtype: the name ends in _i32
        E, K = map(int, g(r"moe_align_block_size_e(\d+)_top(\d+)_i32$", name))
        block = moe_block_m(T, K, E)
        max_padded, max_blocks = moe_align_capacity(T * K, E, block)
        n = nsets_for(T * K * 4)
        sets = [(random_routing(T, E, K, dev)[1], E, block, max_padded, max_blocks) for _ in range(n)]
        add_peers(peers, moe_align_native, sets, use_compile)
        return peers, n
    dtype = DT[name.rsplit("_", 1)[1]]
    if kind == "topk_softmax":
        E, K, renorm = g(r"topk_softmax_e(\d+)_top(\d+)_(renorm|norenorm)_", name)
        E, K, renorm = int(E), int(K), renorm == "renorm"
        n = nsets_for(T * E * 2)
        sets = [(torch.randn(T, E, device=dev, dtype=dtype), K, renorm) for _ in range(n)]
        add_peers(peers, topk_softmax_native, sets, use_compile)
        return peers, n
    if kind == "grouped_topk":
        E, K, G, TG, sf, renorm, rs, bias = g(
            r"grouped_topk_e(\d+)_top(\d+)_g(\d+)_tg(\d+)_(sigmoid|softmax)_(renorm|norenorm)_rs([0-9.e+-]+)(_bias)?_", name)
        E, K, G, TG = int(E), int(K), int(G), int(TG)
        b = torch.randn(E, device=dev, dtype=torch.float32) * 0.1 if bias else None
        n = nsets_for(T * E * 2)
        sets = [(torch.randn(T, E, device=dev, dtype=dtype), b, K, G, TG, sf == "sigmoid", renorm == "renorm", float(rs))
                for _ in range(n)]
        add_peers(peers, grouped_topk_native, sets, use_compile)
        return peers, n
    if kind == "moe_sum":
        H, K = map(int, g(r"moe_sum_h(\d+)_top(\d+)_", name))
        n = nsets_for(T * K * H * 2)
        sets = [(torch.randn(T, K, H, device=dev, dtype=dtype),) for _ in range(n)]
        add_peers(peers, moe_sum_native, sets, use_compile)
        return peers, n
    if kind == "moe_grouped_gemm":
        E, K, nout, kin, perslot, weighted, has_bias = g(
            r"moe_grouped_gemm_e(\d+)_top(\d+)_n(\d+)_k(\d+)(_perslot)?(_weighted)?(_bias)?_", name)
        E, K, nout, kin, perslot, weighted = int(E), int(K), int(nout), int(kin), bool(perslot), bool(weighted)
        has_bias = bool(has_bias)
        rows = T * K
        a_rows = rows if perslot else T
        # Per set: weights, A, A pre-gathered in expert order, the output (the gather peer's
        # un-permuted copy is transient). Weights per set, as the fk_bench harness.
        set_bytes = (E * nout * kin + a_rows * kin + rows * kin + rows * nout) * 2
        n = min(nsets_within(set_bytes), 2)
        sets = []
        for _ in range(n):
            a = torch.randn(a_rows, kin, device=dev, dtype=dtype)
            w_t = random_weight((E, nout, kin), kin, dev, dtype).transpose(-2, -1)  # [E, k, n] column-major
            topk_weights, topk_ids = random_routing(T, E, K, dev)
            order, offs = sort_by_expert(topk_ids, E)
            src = order if perslot else order // K  # A row of each sorted slot
            ws = topk_weights.reshape(-1)[order].unsqueeze(1) if weighted else None
            # gpt-oss: a per-expert bias [E, n], added before the routing weight (one row per sorted slot)
            brow = (torch.randn(E, nout, device=dev, dtype=dtype)[topk_ids.reshape(-1).long()[order]]
                    if has_bias else None)
            sets.append(dict(a=a, w_t=w_t, order=order, offs=offs, src=src, ws=ws, a_sorted=a.index_select(0, src),
                             brow=brow))

        def grouped(i):  # the grouped GEMM alone, rows already in expert order
            s = sets[i]
            o = grouped_mm(s["a_sorted"], s["w_t"], s["offs"])
            if has_bias:
                o = o + s["brow"]
            return (o.float() * s["ws"]).to(dtype) if weighted else o

        def grouped_gather(i):  # the task's whole operator: gather, grouped GEMM, weight, scatter to slot order
            s = sets[i]
            o = grouped_mm(s["a"].index_select(0, s["src"]), s["w_t"], s["offs"])
            if has_bias:
                o = o + s["brow"]
            if weighted:
                o = (o.float() * s["ws"]).to(dtype)
            return torch.empty(rows, nout, device=dev, dtype=dtype).index_copy_(0, s["order"], o)

        peers["torch_grouped_mm"] = grouped
        peers["torch_grouped_mm_gather"] = grouped_gather
        return peers, n
    if kind in ("fused_experts", "sparse_moe_block"):
        E, K, H, I = map(int, g(r"(?:fused_experts|sparse_moe_block)_e(\d+)_top(\d+)_h(\d+)_i(\d+)_", name))
        lim = re.search(r"_swigluoai([0-9.e+-]+)_", name)
        gpt_oss = dict(b13=random_weight((E, 2 * I), 1, dev, dtype) if "_ebias_" in name else None,
                       b2=random_weight((E, H), 1, dev, dtype) if "_ebias_" in name else None,
                       swiglu_limit=float(lim.group(1)) if lim else 0.0)
        gate_b = random_weight((E,), 1, dev, dtype) if "_rbias_" in name else None
        # One set of expert weights (as the fk_bench harness; the flush keeps them out of the L2),
        # rotating activations.
        w13 = random_weight((E, 2 * I, H), H, dev, dtype)
        w2 = random_weight((E, H, I), I, dev, dtype)
        n = nsets_for(T * H * 2)
        if kind == "fused_experts":
            sets = [(torch.randn(T, H, device=dev, dtype=dtype), w13, w2, *random_routing(T, E, K, dev))
                    for _ in range(n)]
            fns = (fused_experts_grouped_mm, fused_experts_hf_loop)
        else:
            (renorm,) = g(r"sparse_moe_block_e\d+_top\d+_h\d+_i\d+(?:_swigluoai[0-9.e+-]+)?(?:_ebias)?_(renorm|norenorm)", name)
            gate_w = random_weight((E, H), H, dev, dtype)
            sets = [(torch.randn(T, H, device=dev, dtype=dtype), gate_w, w13, w2, K, renorm == "renorm")
                    for _ in range(n)]
            fns = (sparse_moe_grouped_mm, sparse_moe_hf_loop)
        pipeline, hf_loop = fns
        extra = dict(gpt_oss, **({"gate_b": gate_b} if kind == "sparse_moe_block" else {}))
        peers["torch_grouped_mm"] = lambda i: pipeline(*sets[i], **extra)
        if use_compile:
            cf = torch.compile(pipeline, dynamic=False)
            peers["torch_compile_grouped_mm"] = lambda i: cf(*sets[i], **extra)
        if gpt_oss["swiglu_limit"] == 0 and gpt_oss["b13"] is None:  # the HF loop peer is Mixtral's experts
            peers["torch_hf_loop"] = lambda i: hf_loop(*sets[i])
        return peers, n
    if kind == "deepseek_moe":
        H, E, K, G, TG, sf, renorm, rs, bias, I, S = g(
            r"deepseek_moe_h(\d+)_e(\d+)_top(\d+)_g(\d+)_tg(\d+)_(sigmoid|softmax)_(renorm|norenorm)_rs([0-9.e+-]+)(_bias)?"
            r"_i(\d+)_shared(\d+)_", name)
        H, E, K, G, TG, I, S = map(int, (H, E, K, G, TG, I, S))
        b = torch.randn(E, device=dev, dtype=torch.float32) * 0.02 if bias else None
        w = dict(gate_w=random_weight((E, H), H, dev, dtype), bias=b, w13=random_weight((E, 2 * I, H), H, dev, dtype),
                 w2=random_weight((E, H, I), I, dev, dtype), sw13=random_weight((2 * S, H), H, dev, dtype),
                 sw2=random_weight((H, S), S, dev, dtype))
        n = nsets_for(T * H * 2)
        xs = [torch.randn(T, H, device=dev, dtype=dtype) for _ in range(n)]
        args = dict(top_k=K, groups=G, topk_group=TG, sigmoid=sf == "sigmoid", renorm=renorm == "renorm", scale=float(rs))
        peers["torch_grouped_mm"] = lambda i: deepseek_moe_grouped_mm(xs[i], **w, **args)
        if use_compile:
            cf = torch.compile(deepseek_moe_grouped_mm, dynamic=False)
            peers["torch_compile_grouped_mm"] = lambda i: cf(xs[i], **w, **args)
        return peers, n
    return {}, 1


def main():
    global FLUSH
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", help="JSON written by fk_bench --export-cases")
    ap.add_argument("--out", required=True, help="JSON lines output")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile peers")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_peers: no CUDA device", file=sys.stderr)
        return 3
    FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    # Each case compiles afresh (torch._dynamo.reset() below): one specialisation per compiled
    # function, so neither the recompile limit (silent eager fallback) nor guard checks over
    # hundreds of cached shapes distort the peer; never switch to dynamic shapes.
    import torch._dynamo as dynamo
    dynamo.config.automatic_dynamic_shapes = False
    cases = json.load(open(args.cases))
    t0 = time.time()
    with open(args.out, "w") as out:
        out.write(json.dumps({"type": "peer_env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                              "cudnn": torch.backends.cudnn.version()}) + "\n")
        for idx, c in enumerate(cases):
            dynamo.reset()
            try:
                peers, nsets = build(c["kind"], c["task"], c["dims"], not args.no_compile)
            except Exception as e:  # a peer that cannot be built is reported, not fatal
                out.write(json.dumps({"type": "peer", "task": c["task"], "case": c["case"], "error": repr(e)}) + "\n")
                continue
            for pname, fn in peers.items():
                try:
                    r = time_fn(fn, nsets)
                    rec = {"type": "peer", "task": c["task"], "case": c["case"], "peer": pname, **r}
                except Exception as e:
                    rec = {"type": "peer", "task": c["task"], "case": c["case"], "peer": pname, "error": repr(e)[:300]}
                out.write(json.dumps(rec) + "\n")
                out.flush()
            print(f"[{idx + 1}/{len(cases)} {time.time() - t0:.0f}s] {c['task']} {c['case']} "
                  f"{len(peers)} peers", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
