#!/usr/bin/env python3
"""The torch peer of fk_collectives' expert-parallel dispatch + combine (issue 23): the all-to-all
token dispatcher as PyTorch-only MoE stacks write it (Megatron-LM's MoEAlltoAllTokenDispatcher pattern:
sort the tokens by destination rank, exchange the split sizes, bring them to the host,
torch.distributed.all_to_all_single of the rows and of their routing, and back), timed the way
fk_collectives times ours, in the same job layout.

    torchrun --nproc-per-node 2 bench/peers/torch_ep.py --jsonl peers.jsonl [--tokens 1,16,128] [--hidden 7168]

Routing: every token's --topk distinct experts of --experts drawn uniformly (torch.Generator seeded by
rank and token count), weights uniform in [0.5, 1) renormalised; experts_per_rank consecutive ids per
rank. A token goes once to every rank holding one of its experts (as fk's dispatch). One call = dispatch
(rows + ids and weights) then combine (the received rows sent back as they are, summed per token in
fp32 by index_add_). Checked once per row: with the rows sent back unchanged, every token's output must
be its input times the number of ranks it went to (#wrong counts the elements that are not, over the
ranks). Eager only (the split sizes go to the host). Method: CUDA events around --iters calls after
--warmup, --runs times, each run lined up by a one-element all-reduce; the median run; the slowest
rank. NCCL_NVLS_ENABLE=0 is set.
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


def routing(rank, tokens, experts, topk, device):
    g = torch.Generator(device="cpu").manual_seed(1000003 * (rank + 1) + tokens)
    ids = torch.rand(tokens, experts, generator=g).topk(topk, dim=1).indices.to(torch.int32)
    w = 0.5 + 0.5 * torch.rand(tokens, topk, generator=g)
    return ids.to(device), (w / w.sum(dim=1, keepdim=True)).to(device)


def make_call(x, ids, w, world, per_rank):
    """dispatch + combine of x [T, H] by ids / w; returns fn() -> out [T, H] bf16."""
    T, H = x.shape
    mask = torch.zeros(T, world, dtype=torch.bool, device=x.device)
    if T:
        mask.scatter_(1, (ids // per_rank).long(), True)

    def fn():
        dest, tok = mask.t().nonzero(as_tuple=True)  # destination-major, token order within a destination
        send_split = mask.sum(dim=0).to(torch.int64)
        recv_split = torch.empty_like(send_split)
        dist.all_to_all_single(recv_split, send_split)
        ins, outs = send_split.tolist(), recv_split.tolist()
        rows = x.index_select(0, tok)
        meta = torch.cat([ids.index_select(0, tok).float(), w.index_select(0, tok)], dim=1)
        recv = torch.empty(sum(outs), H, dtype=x.dtype, device=x.device)
        recv_meta = torch.empty(sum(outs), meta.shape[1], dtype=meta.dtype, device=x.device)
        dist.all_to_all_single(recv, rows, outs, ins)
        dist.all_to_all_single(recv_meta, meta, outs, ins)
        back = torch.empty_like(rows)
        dist.all_to_all_single(back, recv, ins, outs)  # combine: the (unchanged) rows go home
        out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
        out.index_add_(0, tok, back.float())
        return out.to(x.dtype)

    return fn, mask.sum(dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--tokens", default="1,16,64,128,256,512")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, r = dist.get_world_size(), dist.get_rank()
    if a.experts % world or a.topk > a.experts:
        sys.exit(f"torch_ep: --experts {a.experts} must be a multiple of the {world} ranks and at least --topk")
    per_rank = a.experts // world
    align = torch.zeros(1, device="cuda")
    env = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "gpu": torch.cuda.get_device_name(),
           "ranks": world, "dtype": "bf16", "iters": a.iters, "runs": a.runs}
    for i, T in enumerate(int(t) for t in a.tokens.split(",")):
        row = {**env, "peer": "torch_all_to_all_single", "graph": False, "tokens": T, "hidden": a.hidden, "topk": a.topk,
               "experts": a.experts}
        try:
            x = ((torch.arange(T * a.hidden, device="cuda") % 8 + 1) * (r + 1)).to(torch.bfloat16).view(T, a.hidden)
            ids, w = routing(r, T, a.experts, a.topk, "cuda")
            fn, fanout = make_call(x, ids, w, world, per_rank)
            got = fn()
            want = (x.float() * fanout.float().unsqueeze(1)).to(torch.bfloat16)
            wrong = torch.tensor([(got != want).sum().item()], device="cuda", dtype=torch.int64)
            dist.all_reduce(wrong)
            sent = torch.tensor([int(fanout.sum().item()) * a.hidden * 2], device="cuda", dtype=torch.int64)
            dist.all_reduce(sent, op=dist.ReduceOp.MAX)
            per = timed(fn, a.iters, a.warmup + (50 if i == 0 else 0), False, align, a.runs)
            row.update(us=max(per), us_per_rank=per, wrong=int(wrong.item()), max_sent_bytes=int(sent.item()))
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            torch.cuda.synchronize()
        if r == 0:
            print(json.dumps({k: row[k] for k in ("peer", "tokens", "us", "wrong", "error") if k in row}), flush=True)
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
