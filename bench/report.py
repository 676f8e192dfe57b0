#!/usr/bin/env python3
"""Merges fk_bench results with the torch peers of the same run and checks the targets.

    python3 bench/report.py results.jsonl peers.jsonl --out report.md

Targets (issue #2): memory-bound L1 tasks >= 90% of the copy bandwidth measured in the same run
at >= 4096 tokens and at least as fast as torch.compile at every token count; GEMMs >= 0.97x
cuBLAS and torch F.linear at every shape and the small-M path >= 1.15x both at M=1; attention prefill >= 0.95x
the fastest torch SDPA backend at 4K and 8K tokens; decode attention reported as % of HBM
bandwidth (the copy bandwidth of the run); MLA prefill and decode beside their peers (every slower
case is listed). MoE (issue #5): routing (topk_softmax) and alignment
(moe_align_block_size, grouped_topk) at least as fast as the torch reference (eager) at every token count; the
grouped expert GEMM >= 0.9x torch grouped_mm at prefill sizes (>= 1024 tokens); decode sizes as %
of HBM bandwidth; fused_experts / sparse_moe_block / deepseek_moe beside the torch grouped_mm pipeline and the HF
transformers expert loop.
"""
import argparse
import json
import sys

MEMORY_KINDS = {"rms_norm", "fused_add_rms_norm", "qk_norm", "rotary_embedding", "silu_and_mul",
                "vocab_parallel_embedding", "store_kvcache", "gemma_rms_norm", "gemma_fused_add_rms_norm",
                "gemma_qk_norm", "gelu_tanh_and_mul", "scaled_word_embedding", "concat_and_cache_mla",
                "layer_norm", "fused_add_layer_norm",
                # issue 22: encoders, vision towers, embedding heads
                "activation", "gelu_and_mul", "swigluoai_and_mul", "l2_normalize", "embedding_pooler", "interpolate",
                "vision_rope_2d", "token_classifier", "layer_scale"}
ATTENTION_KINDS = {"flash_attn_prefill", "flash_attn_decode", "cross_attention"}
GEMM_KINDS = {"qkv_parallel_linear", "merged_column_parallel_linear", "row_parallel_linear", "parallel_lm_head",
              "replicated_linear", "column_parallel_linear"}
SMALL_M = 16  # the GEMV path's limit (fk/kernels/gemv.cuh: M <= 16); larger M is cuBLASLt
MOE_ROUTING_KINDS = {"topk_softmax", "grouped_topk", "moe_align_block_size", "moe_sum"}
MOE_BLOCK_KINDS = {"fused_experts", "sparse_moe_block", "deepseek_moe"}


def fmt(x, spec=".2f", suffix=""):
    return f"{x:{spec}}{suffix}" if x is not None else "-"


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("peers", nargs="?")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = load(a.results)
    env = next((r for r in rows if r.get("type") == "env"), {})
    all_cases = [r for r in rows if r.get("type") == "case"]
    # Off-registry cases (Note [Off-registry shapes]) have no peers: they count for correctness
    # and are left out of the peer tables.
    cases = [r for r in all_cases if not r.get("off_registry")]
    peers = {}
    peer_env = {}
    if a.peers:
        try:
            for p in load(a.peers):
                if p.get("type") == "peer_env":
                    peer_env = p
                elif p.get("type") == "peer" and "median_us" in p:
                    peers.setdefault((p["task"], p["case"]), {})[p["peer"]] = p["median_us"]
        except FileNotFoundError:
            pass
    copy = env.get("copy_tbps", 0)
    out = []
    out.append("# FastKernels L1 benchmark report\n")
    out.append(f"- device: {env.get('gpu')} (driver {env.get('driver_version', '?')}, CUDA runtime {env.get('cuda_runtime')})")
    out.append(f"- date: {env.get('date')}; commit: {env.get('commit')}")
    out.append(f"- command: `{env.get('command')}`")
    out.append(f"- copy bandwidth measured in this run: {copy:.3f} TB/s (read + write, 1 GiB device-to-device)")
    if peer_env:
        out.append(f"- peers: torch {peer_env.get('torch')}, cuDNN {peer_env.get('cudnn')} on {peer_env.get('gpu')}")
    out.append(f"- method: {env.get('method', {}).get('statistic')}; clocks before {env.get('clocks_before')}\n")

    passed = sum(1 for c in all_cases if c["status"] == "PASSED")
    failed = sum(1 for c in all_cases if c["status"] not in ("PASSED", "SKIPPED"))
    skipped = sum(1 for c in all_cases if c["status"] == "SKIPPED")
    off = sum(1 for c in all_cases if c.get("off_registry"))
    out.append(f"Correctness: {passed} passed, {failed} failed, {skipped} skipped (of {len(all_cases)} cases, "
               f"{off} of them off-registry).\n")
    misses = []

    def us(c):
        return c.get("time_us", {}).get("median")

    out.append("## Memory-bound tasks\n")
    out.append("| task | case | fk us | TB/s | % copy | eager us | compile us | vs compile |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for c in cases:
        if c["kind"] not in MEMORY_KINDS or us(c) is None:
            continue
        p = peers.get((c["task"], c["case"]), {})
        e, k = p.get("torch_eager"), p.get("torch_compile")
        ratio = (k / us(c)) if k else None
        out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {c['tbps']:.3f} | {c['pct_copy_bw']:.1f} | "
                   f"{e and f'{e:.2f}' or '-'} | {k and f'{k:.2f}' or '-'} | {ratio and f'{ratio:.2f}x' or '-'} |")
        t = c["dims"].get("num_tokens", 0)
        if t >= 4096 and c["pct_copy_bw"] < 90:
            misses.append(f"{c['task']} {c['case']}: {c['pct_copy_bw']:.1f}% of copy bandwidth (target 90%)")
        if ratio is not None and ratio < 1.0:
            misses.append(f"{c['task']} {c['case']}: {ratio:.2f}x torch.compile (target >= 1.0x)")

    # Two peers: cuBLASLt called by fk_bench in the same process (our plan: the heuristic's first
    # algorithm), and torch F.linear timed by torch_peers.py in the same session (torch's own cuBLAS /
    # cuBLASLt choice, not ours). Both are judged: a path that only beats our own choice of peer is no win.
    out.append("\n## GEMMs (peers: cuBLASLt in the same process; torch F.linear, torch's own cuBLAS choice)\n")
    out.append("| task | case | path | fk us | TFLOP/s | TB/s | cuBLAS us | vs cuBLAS | torch us | vs torch |")
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in cases:
        if c["kind"] not in GEMM_KINDS or us(c) is None:
            continue
        peer = c.get("peer", {})
        sp = peer.get("speedup")
        tl = peers.get((c["task"], c["case"]), {}).get("torch_linear_cublas")
        st = tl / us(c) if tl else None
        m = c["dims"].get("num_tokens", 0)
        path = "small-M" if 0 < m <= SMALL_M else "GEMM"
        out.append(f"| {c['task']} | {c['case']} | {path} | {us(c):.2f} | {c['tflops']:.1f} | {c['tbps']:.3f} | "
                   f"{peer.get('median_us', 0):.2f} | {sp and f'{sp:.3f}x' or '-'} | {tl and f'{tl:.2f}' or '-'} | "
                   f"{st and f'{st:.3f}x' or '-'} |")
        for name, r in (("cuBLAS", sp), ("torch F.linear", st)):
            if r is not None and r < 0.97:
                misses.append(f"{c['task']} {c['case']}: {r:.3f}x {name} (target >= 0.97x)")
            if m == 1 and r is not None and r < 1.15:
                misses.append(f"{c['task']} {c['case']}: {r:.3f}x {name} at M=1 (target >= 1.15x)")
        if tl is None and not c.get("off_registry"):  # the peers run the registry cases
            misses.append(f"{c['task']} {c['case']}: no torch F.linear peer in this run")

    out.append("\n## Attention\n")
    out.append("| task | case | fk us | TFLOP/s | TB/s | % copy | best SDPA | SDPA us | vs best |")
    out.append("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for c in cases:
        if c["kind"] not in ATTENTION_KINDS or us(c) is None:
            continue
        p = peers.get((c["task"], c["case"]), {})
        best = min(p.items(), key=lambda kv: kv[1]) if p else None
        ratio = best[1] / us(c) if best else None
        out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {c['tflops']:.1f} | {c['tbps']:.3f} | "
                   f"{100 * c['tbps'] / copy if copy else 0:.1f} | {best[0] if best else '-'} | "
                   f"{best[1] if best else 0:.2f} | {ratio and f'{ratio:.3f}x' or '-'} |")
        if c["kind"] == "flash_attn_prefill" and c["case"] in ("b1_s4096", "b1_s8192") and ratio is not None and ratio < 0.95:
            misses.append(f"{c['task']} {c['case']}: {ratio:.3f}x the fastest SDPA backend (target >= 0.95x)")
        # issue 22: encoder (bidirectional) attention >= 1.0x the fastest SDPA backend at every case it measures
        if c["kind"] == "flash_attn_prefill" and "_bidir_" in c["task"] and ratio is not None and ratio < 1.0:
            misses.append(f"{c['task']} {c['case']}: {ratio:.3f}x the fastest SDPA backend (encoder target >= 1.0x)")

    mla = [c for c in cases if c["kind"] in ("mla_prefill", "mla_decode") and us(c) is not None]
    if mla:
        out.append("\n## Multi-head latent attention (peers: torch SDPA backends for prefill; the absorbed "
                   "attention in torch eager / torch.compile for decode, every sequence at the full kv_len)\n")
        out.append("| task | case | fk us | TFLOP/s | TB/s | % copy | best peer | peer us | vs best |")
        out.append("|---|---|---:|---:|---:|---:|---|---:|---:|")
        for c in mla:
            p = peers.get((c["task"], c["case"]), {})
            best = min(p.items(), key=lambda kv: kv[1]) if p else None
            ratio = best[1] / us(c) if best else None
            out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {c['tflops']:.1f} | {c['tbps']:.3f} | "
                       f"{100 * c['tbps'] / copy if copy else 0:.1f} | {best[0] if best else '-'} | "
                       f"{fmt(best[1] if best else None)} | {fmt(ratio, '.3f', 'x')} |")
            if ratio is not None and ratio < 1.0:
                misses.append(f"{c['task']} {c['case']}: {ratio:.3f}x the fastest peer ({best[0]})")

    moe_routing = [c for c in cases if c["kind"] in MOE_ROUTING_KINDS and us(c) is not None]
    if moe_routing:
        out.append("\n## MoE routing, alignment and expert sum (peer: the torch reference, eager)\n")
        out.append("| task | case | fk us | fk graph us | torch eager us | vs eager |")
        out.append("|---|---|---:|---:|---:|---:|")
        for c in moe_routing:
            e = peers.get((c["task"], c["case"]), {}).get("torch_eager")
            ratio = e / us(c) if e else None
            g = c.get("graph_us", {}).get("median")
            out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {fmt(g)} | {fmt(e)} | {fmt(ratio, '.2f', 'x')} |")
            if c["kind"] != "moe_sum" and ratio is not None and ratio < 1.0:
                misses.append(f"{c['task']} {c['case']}: {ratio:.2f}x the torch reference (target >= 1.0x)")
    moe_gemm = [c for c in cases if c["kind"] == "moe_grouped_gemm" and us(c) is not None]
    if moe_gemm:
        out.append("\n## MoE grouped expert GEMM (peers: torch grouped_mm on rows pre-sorted by expert; "
                   "the same with the gather and scatter inside the call)\n")
        out.append("| task | case | fk us | TFLOP/s | TB/s | % copy | grouped_mm us | vs grouped_mm | +gather us | vs +gather |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in moe_gemm:
            p = peers.get((c["task"], c["case"]), {})
            g, gg = p.get("torch_grouped_mm"), p.get("torch_grouped_mm_gather")
            r, rg = (g / us(c) if g else None), (gg / us(c) if gg else None)
            out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {c['tflops']:.1f} | {c['tbps']:.3f} | "
                       f"{100 * c['tbps'] / copy if copy else 0:.1f} | {fmt(g)} | {fmt(r, '.2f', 'x')} | {fmt(gg)} | "
                       f"{fmt(rg, '.2f', 'x')} |")
            if c["dims"].get("num_tokens", 0) >= 1024 and r is not None and r < 0.9:
                misses.append(f"{c['task']} {c['case']}: {r:.2f}x torch grouped_mm (target >= 0.9x at prefill sizes)")
    moe_blocks = [c for c in cases if c["kind"] in MOE_BLOCK_KINDS and us(c) is not None]
    if moe_blocks:
        out.append("\n## MoE blocks (peers: the torch grouped_mm pipeline; HF transformers 5 expert loop)\n")
        out.append("| task | case | fk us | TFLOP/s | TB/s | % copy | grouped_mm pipeline us | vs pipeline | HF loop us | vs HF loop |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in moe_blocks:
            p = peers.get((c["task"], c["case"]), {})
            g, h = p.get("torch_grouped_mm"), p.get("torch_hf_loop")
            out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {c['tflops']:.1f} | {c['tbps']:.3f} | "
                       f"{100 * c['tbps'] / copy if copy else 0:.1f} | {fmt(g)} | {fmt(g / us(c) if g else None, '.2f', 'x')} | "
                       f"{fmt(h)} | {fmt(h / us(c) if h else None, '.2f', 'x')} |")

    # Every other case with peers in this run (no kind is dropped silently): fk against its fastest peer.
    handled = MEMORY_KINDS | GEMM_KINDS | ATTENTION_KINDS | MOE_ROUTING_KINDS | MOE_BLOCK_KINDS | {"mla_prefill", "mla_decode", "moe_grouped_gemm"}
    other = [c for c in cases if c["kind"] not in handled and us(c) is not None and peers.get((c["task"], c["case"]))]
    if other:
        out.append("\n## Other tasks (fastest peer of the run)\n")
        out.append("| task | case | fk us | TFLOP/s | TB/s | best peer | peer us | vs best |")
        out.append("|---|---|---:|---:|---:|---|---:|---:|")
        for c in other:
            best = min(peers[(c["task"], c["case"])].items(), key=lambda kv: kv[1])
            ratio = best[1] / us(c)
            out.append(f"| {c['task']} | {c['case']} | {us(c):.2f} | {c.get('tflops', 0):.1f} | {c.get('tbps', 0):.3f} | {best[0]} | "
                       f"{best[1]:.2f} | {ratio:.3f}x |")
            if ratio < 1.0:
                misses.append(f"{c['task']} {c['case']}: {ratio:.3f}x the fastest peer ({best[0]})")
    no_peer = sorted({c["task"] for c in cases if us(c) is not None and not peers.get((c["task"], c["case"]))})
    if a.peers and no_peer:
        out.append("\n## Tasks without a peer in this run\n")
        out.extend(f"- {t}" for t in no_peer)

    out.append("\n## Targets missed\n")
    out.extend(f"- {m}" for m in misses) if misses else out.append("- none")
    out.append(f"\n{passed} passed, {failed} failed")
    open(a.out, "w").write("\n".join(out) + "\n")
    print("\n".join(out[-len(misses) - 3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
