#!/usr/bin/env python3
"""The torch peers of fk_collectives' overlapped linears (issue 23, --op all_gather_matmul /
matmul_reduce_scatter): PyTorch's symmetric-memory fused ops, the ones vLLM's async-TP pass
substitutes (torch.ops.symm_mem.fused_all_gather_matmul, fused_matmul_reduce_scatter), and the
serial torch forms they replace (all_gather_into_tensor then one mm; one mm then
reduce_scatter_tensor), timed the way fk_collectives times its rows, in the same job layout.

    torchrun --nproc-per-node 2 bench/peers/torch_async_tp.py --jsonl peers.jsonl --op all_gather_matmul \\
        --inner 4096 --cols 3072 [--tokens 1024,2048,4096,8192]

Shapes as fk_collectives: --tokens the rows over all ranks (T, each rank T / W); all_gather_matmul
gathers x_shard [T/W, K] and multiplies by this rank's weight [N, K]^T into [T, N];
matmul_reduce_scatter multiplies x [T, K] by [N, K]^T and reduce-scatters the [T, N] partials over
the rows into [T/W, N]. Inputs ~ N(0, 1), weights ~ N(0, 1/sqrt(K)), seeded per rank. Check: the fused
op's output against the serial form's on the same inputs (1% + 0.01 x (W + 1); #wrong over the
ranks; the serial form is checked against an fp32 matmul the same way). Method: CUDA events around
--iters calls after --warmup, --runs times, each run lined up by a one-element all-reduce; the median
run; the slowest rank. Eager. NCCL_NVLS_ENABLE=0 is set.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_collectives import timed  # noqa: E402


def wrong_count(got, want, world):
    tol = 0.01 * want.float().abs() + 0.01 * (world + 1)
    return int(((got.float() - want.float()).abs() > tol).sum().item())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--op", choices=["all_gather_matmul", "matmul_reduce_scatter"], required=True)
    ap.add_argument("--tokens", default="1024,2048,4096,8192")
    # --inner / --cols, not --k / --n: torchrun reads abbreviations of its own options (--n) anywhere on the line
    ap.add_argument("--inner", type=int, default=4096, help="K, the GEMM's inner size on one rank")
    ap.add_argument("--cols", type=int, default=3072, help="N, the GEMM's output columns on one rank")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, r = dist.get_world_size(), dist.get_rank()
    group = dist.group.WORLD
    symm = None
    try:
        import torch.distributed._symmetric_memory as symm_mem  # noqa: E402

        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(group.group_name)
        symm = torch.ops.symm_mem
    except Exception as e:  # noqa: BLE001
        print(f"torch_async_tp: symmetric memory unavailable ({type(e).__name__}: {e}); timing the serial forms only", file=sys.stderr)
    align = torch.zeros(1, device="cuda")
    env = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "gpu": torch.cuda.get_device_name(),
           "ranks": world, "dtype": "bf16", "iters": a.iters, "runs": a.runs, "graph": False}
    gen = torch.Generator(device="cuda")
    for i, T in enumerate(int(t) for t in a.tokens.split(",")):
        if T % world:
            sys.exit(f"torch_async_tp: --tokens {T} must be a multiple of the {world} ranks")
        c = T // world
        gen.manual_seed(1000 + r)
        x = torch.randn(c if a.op == "all_gather_matmul" else T, a.inner, device="cuda", generator=gen).to(torch.bfloat16)
        w = (torch.randn(a.cols, a.inner, device="cuda", generator=gen) / a.inner ** 0.5).to(torch.bfloat16)
        b = w.t()  # [K, N], as the fused ops take it (A @ B)
        if a.op == "all_gather_matmul":
            full = torch.empty(T, a.inner, device="cuda", dtype=torch.bfloat16)

            def serial():
                dist.all_gather_into_tensor(full, x)
                return full @ b

            def fused():
                return symm.fused_all_gather_matmul(x, [b], gather_dim=0, group_name=group.group_name)[1][0]

            def exact():
                dist.all_gather_into_tensor(full, x)
                return (full.float() @ b.float())
        else:
            out = torch.empty(c, a.cols, device="cuda", dtype=torch.bfloat16)

            def serial():
                dist.reduce_scatter_tensor(out, x @ b)
                return out

            def fused():
                return symm.fused_matmul_reduce_scatter(x, b, "sum", scatter_dim=0, group_name=group.group_name)

            def exact():
                part = x.float() @ b.float()
                o = torch.empty(c, a.cols, device="cuda", dtype=torch.float32)
                dist.reduce_scatter_tensor(o, part)
                return o
        want = exact()
        ref = serial().clone()
        for name, fn in (("torch_serial_nccl", serial), ("torch_symm_mem_fused", fused)):
            row = {**env, "peer": name, "op": a.op, "tokens": T, "k": a.inner, "n": a.cols}
            try:
                if fn is fused and symm is None:
                    raise RuntimeError("torch.ops.symm_mem unavailable")
                got = fn()
                bad = wrong_count(got, want, world) + (wrong_count(got, ref, world) if fn is fused else 0)
                wrong = torch.tensor([bad], device="cuda", dtype=torch.int64)
                dist.all_reduce(wrong)
                per = timed(fn, a.iters, a.warmup + (5 if i == 0 else 0), False, align, a.runs)
                us = max(per)
                row.update(us=us, us_per_rank=per, wrong=int(wrong.item()), tflops_per_rank=2.0 * T * a.inner * a.cols / (us * 1e6))
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                torch.cuda.synchronize()
            if r == 0:
                print(json.dumps({k: row[k] for k in ("peer", "op", "tokens", "us", "wrong", "error") if k in row}), flush=True)
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
