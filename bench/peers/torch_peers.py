#!/usr/bin/env python3
"""Torch peers for fk_bench: times torch eager and torch.compile on exactly the cases fk_bench ran.

Reads the case list that `fk_bench --export-cases cases.json` writes, reconstructs each task's
constants from its name (names spell every constant; docs/task-kinds.md), and times the torch
formulation production falls back to (vLLM's `forward_native` for norms/rope/activations,
F.embedding, F.linear = cuBLAS, SDPA with each backend) with the same method as fk_bench:
CUDA events, the L2 flushed (256 MiB written) before every timed call, rotating input sets,
warm-up, median with min/max. Writes JSON lines, one per (task, case, peer).

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


def qk_norm_native(q, k, qw, kw, d, eps):
    qh = rms_norm_native(q.view(q.shape[0], -1, d), qw, eps).view(q.shape)
    kh = rms_norm_native(k.view(k.shape[0], -1, d), kw, eps).view(k.shape)
    return qh, kh


def rope_native(positions, q, k, cos_sin, d, rot):
    cs = cos_sin.index_select(0, positions)
    cos, sin = cs.chunk(2, dim=-1)

    def apply(x):
        t = x.shape[0]
        x = x.view(t, -1, d)
        xr = x[..., :rot]
        x1, x2 = xr.chunk(2, dim=-1)
        c = cos.unsqueeze(-2).to(x.dtype)
        s = sin.unsqueeze(-2).to(x.dtype)
        o = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
        if rot < d:
            o = torch.cat((o, x[..., rot:]), dim=-1)
        return o.reshape(t, -1)

    return apply(q), apply(k)


def silu_and_mul_native(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def store_kvcache_native(key, value, kc, vc, slots):
    kc.index_copy_(0, slots, key)
    vc.index_copy_(0, slots, value)


# --- per-kind case builders: return {peer_name: callable(set)} and nsets -----------------------

def g(pattern, name):
    m = re.match(pattern, name)
    if not m:
        raise ValueError(f"cannot parse task name {name!r} with {pattern!r}")
    return m.groups()


def build(kind, name, dims, use_compile):
    dev = "cuda"
    dtype = DT[name.rsplit("_", 1)[1]]
    peers = {}

    def add(fn_native, args_sets, tag=""):
        peers["torch_eager" + tag] = lambda i: fn_native(*args_sets[i])
        if use_compile:
            cf = torch.compile(fn_native, dynamic=False)
            peers["torch_compile" + tag] = lambda i: cf(*args_sets[i])

    T = dims.get("num_tokens")
    if kind == "rms_norm" or kind == "fused_add_rms_norm":
        h, eps = g(r".*rms_norm_h(\d+)_eps([^_]+)_", name)
        h, eps = int(h), float(eps)
        w = torch.randn(h, device=dev, dtype=dtype)
        n = nsets_for(T * h * 2 * (2 if kind != "rms_norm" else 1))
        if kind == "rms_norm":
            sets = [(torch.randn(T, h, device=dev, dtype=dtype), w, eps) for _ in range(n)]
            add(rms_norm_native, sets)
        else:
            sets = [(torch.randn(T, h, device=dev, dtype=dtype), torch.randn(T, h, device=dev, dtype=dtype), w, eps)
                    for _ in range(n)]
            add(fused_add_rms_norm_native, sets)
        return peers, n
    if kind == "qk_norm":
        hq, hkv, d, eps = g(r"qk_norm_hq(\d+)_hkv(\d+)_d(\d+)_eps([^_]+)_", name)
        hq, hkv, d, eps = int(hq), int(hkv), int(d), float(eps)
        qw, kw = torch.randn(d, device=dev, dtype=dtype), torch.randn(d, device=dev, dtype=dtype)
        n = nsets_for(T * (hq + hkv) * d * 2)
        sets = [(torch.randn(T, hq * d, device=dev, dtype=dtype), torch.randn(T, hkv * d, device=dev, dtype=dtype),
                 qw, kw, d, eps) for _ in range(n)]
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
    if kind == "silu_and_mul":
        (i_,) = g(r"silu_and_mul_i(\d+)_", name)
        i_ = int(i_)
        n = nsets_for(T * i_ * 2 * 3)
        sets = [(torch.randn(T, 2 * i_, device=dev, dtype=dtype),) for _ in range(n)]
        add(silu_and_mul_native, sets)
        return peers, n
    if kind == "vocab_parallel_embedding":
        v, h = map(int, g(r"vocab_parallel_embedding_v(\d+)_h(\d+)_", name))
        w = torch.randn(v, h, device=dev, dtype=dtype)
        n = nsets_for(T * h * 2 * 2)
        sets = [(torch.randint(0, v, (T,), device=dev), w) for _ in range(n)]
        add(F.embedding, sets)
        return peers, n
    if kind in ("qkv_parallel_linear", "merged_column_parallel_linear", "row_parallel_linear", "parallel_lm_head"):
        if kind == "qkv_parallel_linear":
            h, d, hq, hkv, b = g(r"qkv_parallel_linear_h(\d+)_d(\d+)_hq(\d+)_hkv(\d+)_(bias|nobias)_", name)
            k, nout, bias = int(h), (int(hq) + 2 * int(hkv)) * int(d), b == "bias"
        elif kind == "merged_column_parallel_linear":
            k, n0, n1, b = g(r"merged_column_parallel_linear_k(\d+)_n(\d+)_(\d+)_(bias|nobias)_", name)
            k, nout, bias = int(k), int(n0) + int(n1), b == "bias"
        elif kind == "row_parallel_linear":
            k, nout, b = g(r"row_parallel_linear_k(\d+)_n(\d+)_(bias|nobias)_", name)
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
        if B != 1:
            return {}, 1  # SDPA has no variable-length batch; peers only for single sequences
        n = 2
        sets = [(torch.randn(1, hq, S, d, device=dev, dtype=dtype), torch.randn(1, hkv, S, d, device=dev, dtype=dtype),
                 torch.randn(1, hkv, S, d, device=dev, dtype=dtype)) for _ in range(n)]
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for tag, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                        ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            def f(i, be=be):
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(*sets[i], is_causal=True, enable_gqa=True)
            peers["torch_sdpa_" + tag] = f
        return peers, n
    if kind == "flash_attn_decode":
        hq, hkv, d = map(int, g(r"flash_attn_decode_hq(\d+)_hkv(\d+)_d(\d+)_", name))
        B, L = dims["batch"], dims["kv_len"]
        n = nsets_for(B * L * hkv * d * 4)
        n = min(n, 2)
        sets = [(torch.randn(B, hq, 1, d, device=dev, dtype=dtype),
                 torch.randn(B, L, hkv, d, device=dev, dtype=dtype).transpose(1, 2),
                 torch.randn(B, L, hkv, d, device=dev, dtype=dtype).transpose(1, 2)) for _ in range(n)]
        peers["torch_sdpa"] = lambda i: F.scaled_dot_product_attention(*sets[i], enable_gqa=True)
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
