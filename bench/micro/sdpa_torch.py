#!/usr/bin/env python3
"""Torch SDPA peers for the prefill target (causal GQA 32/8, d128, bf16, batch 1): each backend,
CUDA events, 256 MiB L2 flush before every call, median of 30. Prints TFLOP/s (causal flops)."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def t_us(fn, reps=30):
    fn(); fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return sorted(ts)[len(ts) // 2]


for s in (4096, 8192, 16384):
    q = torch.randn(1, 32, s, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, s, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, s, 128, device="cuda", dtype=torch.bfloat16)
    flops = 4 * s * (s + 1) / 2 * 128 * 32
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                us = t_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
            print(f"TORCH sdpa {name:9s} b1 s{s:<6d} {us:9.1f} us {flops / us / 1e6:6.1f} TFLOP/s")
        except Exception as e:  # backend unavailable for this shape
            print(f"TORCH sdpa {name:9s} b1 s{s:<6d} unavailable: {str(e).splitlines()[0][:100]}")
