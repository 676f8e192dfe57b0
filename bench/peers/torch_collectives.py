#!/usr/bin/env python3
"""The peers of fk_collectives (issue 23): torch.distributed's NCCL collectives and PyTorch's
symmetric-memory all-reduces, timed the way fk_collectives times ours, in the same job layout.

    torchrun --nproc-per-node 2 bench/peers/torch_collectives.py --jsonl peers.jsonl [--max-bytes 1G]

Peers, each over the same sizes (8 B to --max-bytes, x2), eager and as one CUDA graph of --iters calls:
  torch_nccl_all_reduce / _all_gather / _reduce_scatter   dist.all_reduce / all_gather_into_tensor /
                                                          reduce_scatter_tensor (NCCL)
  symm_one_shot        torch.ops.symm_mem.one_shot_all_reduce on a tensor already in symmetric memory
  symm_two_shot        torch.ops.symm_mem.two_shot_all_reduce_ (in place), the same
  symm_one_shot_copy   the input copied into the symmetric buffer first, then one-shot (what vLLM's
                       SymmMemCommunicator does per call; fk's own all-reduce copies inside its kernel)
symm_* run up to --symm-max-bytes (the buffer). Method (fk_collectives'): CUDA events around --iters
calls after --warmup, --runs times, each run started by a one-element all-reduce that lines the ranks
up; a rank's time per call is the median of its runs; the row is the slowest rank's. busbw as nccl-tests: algbw x 2 (n-1)/n
for all-reduce, x (n-1)/n for all-gather / reduce-scatter (bytes: the larger buffer's). A peer that
raises is written as an error row. NCCL_NVLS_ENABLE=0 is set (no NVLink multicast).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def timed(fn, iters, warmup, graph, align, runs):
    for _ in range(warmup):
        fn()
    g = None
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()  # warm on the capture stream
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn()
        g.replay()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs_us = []
    for _ in range(runs):
        torch.cuda.synchronize()
        dist.barrier()
        dist.all_reduce(align)
        e0.record()
        if g is not None:
            g.replay()
        else:
            for _ in range(iters):
                fn()
        e1.record()
        torch.cuda.synchronize()
        runs_us.append(e0.elapsed_time(e1) * 1000.0 / iters)
    runs_us.sort()
    us = torch.tensor([runs_us[len(runs_us) // 2]], device="cuda", dtype=torch.float64)
    per_rank = [torch.zeros_like(us) for _ in range(dist.get_world_size())]
    dist.all_gather(per_rank, us)
    return [float(x.item()) for x in per_rank]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="1G")
    ap.add_argument("--symm-max-bytes", default="64M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--peers", default="torch_nccl_all_reduce,torch_nccl_all_gather,torch_nccl_reduce_scatter,"
                    "symm_one_shot,symm_two_shot,symm_one_shot_copy")
    ap.add_argument("--modes", default="eager,graph")
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    w, r = dist.get_world_size(), dist.get_rank()
    group_name = dist.group.WORLD.group_name
    dt = torch.bfloat16
    align = torch.zeros(1, device="cuda")
    env = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "gpu": torch.cuda.get_device_name(),
           "ranks": w, "dtype": "bf16", "iters": a.iters, "runs": a.runs}
    symm = None
    symm_max = parse_bytes(a.symm_max_bytes)
    peers = a.peers.split(",")
    if any(p.startswith("symm") for p in peers):
        try:
            import torch.distributed._symmetric_memory as symm_mem
            symm = symm_mem.empty(symm_max // 2, device="cuda", dtype=dt)
            symm_mem.rendezvous(symm, group_name)
        except Exception as e:  # noqa: BLE001
            symm = None
            if r == 0:
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps({**env, "peer": "symm_mem", "error": f"{type(e).__name__}: {e}"}) + "\n")
    for peer in peers:
        for mode in a.modes.split(","):
            b = parse_bytes(a.min_bytes)
            while b <= parse_bytes(a.max_bytes):
                n = max(1, b // 2)
                if peer.startswith("symm") and (symm is None or n * 2 > symm_max):
                    break
                row = {**env, "peer": peer, "graph": mode == "graph", "bytes": n * 2}
                try:
                    if peer == "torch_nccl_all_reduce":
                        x = torch.ones(n, device="cuda", dtype=dt)
                        fn, bus, nbytes = (lambda: dist.all_reduce(x)), 2.0 * (w - 1) / w, n * 2
                    elif peer == "torch_nccl_all_gather":
                        m = max(1, n // w)
                        x, y = torch.ones(m, device="cuda", dtype=dt), torch.empty(m * w, device="cuda", dtype=dt)
                        fn, bus, nbytes = (lambda: dist.all_gather_into_tensor(y, x)), (w - 1) / w, m * w * 2
                    elif peer == "torch_nccl_reduce_scatter":
                        m = max(1, n // w)
                        x, y = torch.ones(m * w, device="cuda", dtype=dt), torch.empty(m, device="cuda", dtype=dt)
                        fn, bus, nbytes = (lambda: dist.reduce_scatter_tensor(y, x)), (w - 1) / w, m * w * 2
                    else:
                        view = symm[:n]
                        view.fill_(1.0)
                        src = torch.ones(n, device="cuda", dtype=dt)
                        if peer == "symm_one_shot":
                            fn = lambda: torch.ops.symm_mem.one_shot_all_reduce(view, "sum", group_name)  # noqa: E731
                        elif peer == "symm_two_shot":
                            fn = lambda: torch.ops.symm_mem.two_shot_all_reduce_(view, "sum", group_name)  # noqa: E731
                        else:
                            def fn():
                                view.copy_(src)
                                return torch.ops.symm_mem.one_shot_all_reduce(view, "sum", group_name)
                        bus, nbytes = 2.0 * (w - 1) / w, n * 2
                    per_rank = timed(fn, a.iters, a.warmup, mode == "graph", align, a.runs)
                    us = max(per_rank)
                    row.update(bytes=nbytes, us=us, us_per_rank=per_rank, algbw_gbps=nbytes / (us * 1e3),
                               busbw_gbps=nbytes / (us * 1e3) * bus)
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    torch.cuda.synchronize()
                if r == 0:
                    print(json.dumps({k: row[k] for k in ("peer", "graph", "bytes", "us", "busbw_gbps", "error") if k in row}), flush=True)
                    with open(a.jsonl, "a") as f:
                        f.write(json.dumps(row) + "\n")
                if "error" in row:
                    break
                b *= 2
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
