#!/usr/bin/env python3
"""HuggingFace transformers performance peer for the L4 (full model) benchmark.

Times a Llama-family model in transformers (CUDA; in the model dtype: bf16, or fp16 for a float16
checkpoint, hfmodel.model_dtype) with the same weights fk_model uses:
  decode  : greedy, B sequences of --prompt-len random tokens; tokens/s = B * new_tokens / time of
            the decode loop (prefill excluded; argmax included); median of --repeats runs.
            eager   = manual loop, DynamicCache.
            compile = StaticCache + torch.compile(step, mode="reduce-overhead", fullgraph=True) on
                      the one-token step (CUDA graphs), prefill run eagerly into the static cache,
                      two warm-up loops over the timed positions before timing (HF's documented
                      recipe); a recompile inside the timed loops is an error, not a figure.
  prefill : one forward of B x S random tokens (use_cache=False, logits_to_keep=1: last-token
            logits only, as a serving engine computes them); tokens/s = B*S / median time
            (CUDA events, --prefill-iters after warm-up). compile = torch.compile(fullgraph=True,
            default mode: at 2k+ tokens launch overhead is negligible and CUDA graphs only cost memory).
Peak GPU memory (torch.cuda.max_memory_allocated, weights included) is recorded per row.

    python3 bench/peers/hf_llama_perf.py --arch meta-llama/Llama-3.1-8B-Instruct --weights W.safetensors \
        [--layers N] --modes eager,compile --decode-batches 1,8,32,64 --prompt-len 128 --new-tokens 128 \
        --prefill 1x2048,8x2048 --jsonl OUT.jsonl

One JSON line per (peer, mode, batch): {"peer": "hf_eager"|"hf_compile", "arch", "layers", "mode":
"decode"|"prefill", "batch", "prompt_len" | "seq_len", "new_tokens", "tokens_per_s", "ms_per_step",
"peak_mem_gib", "torch", "transformers", "gpu", ...; "error" when that measurement failed}. Lines
are appended as soon as each measurement ends, so a call cut short keeps what it finished.

Runtimes (H100, full 32-layer 8B, see docs/parity.md): loading ~30 s; eager decode ~10-20 s per
batch; compile decode 1-2 min per batch (compilation; the inductor cache makes later calls
faster); prefill a few seconds per shape (+ ~1 min compile). Within one 10-minute call run one
mode at a time (--modes eager, then --modes compile [--decode-batches 1,8 ...]).
Exit: 0 (rows with "error" do not change it), 2 on usage/setup errors.
"""
import argparse
import inspect
import json
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "parity"))

EXIT_SETUP = 2


def log(msg):
    print(f"[hf_llama_perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def compiled_frames(torch):
    """Frames dynamo has compiled so far (its "frames"/"ok" counter; 0 where the counter is missing)."""
    try:
        return int(torch._dynamo.utils.counters["frames"]["ok"])
    except Exception:  # noqa: BLE001 - an internal counter; absent in some torch versions
        return 0


class CompileTimeout(Exception):
    pass


class time_limit:
    """SIGALRM-based time box (main thread). Used around compilation + warm-up."""

    def __init__(self, seconds):
        self.seconds = int(seconds) if seconds and seconds > 0 else 0

    def _fire(self, *_):
        raise CompileTimeout(f"compilation/warm-up exceeded {self.seconds}s (--compile-timeout-s)")

    def __enter__(self):
        if self.seconds:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            signal.alarm(self.seconds)

    def __exit__(self, *exc):
        if self.seconds:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, self.old)
        return False


class Timer:
    def __init__(self, device):
        import torch
        self.cuda = device.startswith("cuda")
        self.torch = torch

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self):
        if self.cuda:
            self.s = self.torch.cuda.Event(enable_timing=True)
            self.e = self.torch.cuda.Event(enable_timing=True)
            self.s.record()
        else:
            self.t0 = time.perf_counter()

    def stop_ms(self):
        if self.cuda:
            self.e.record()
            self.e.synchronize()
            return self.s.elapsed_time(self.e)
        return (time.perf_counter() - self.t0) * 1e3


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def make_cache(kind, model, batch, max_len, device, dtype):
    """DynamicCache / StaticCache across transformers versions: the constructor's keywords are
    read with inspect (5.x: config=, max_cache_len=; 4.4x: also max_batch_size/batch_size,
    device, dtype)."""
    import transformers
    cls = getattr(transformers, kind)
    params = inspect.signature(cls.__init__).parameters
    kw = {}
    if "config" in params:
        kw["config"] = model.config
    if kind == "StaticCache":
        kw["max_cache_len"] = max_len
        for k in ("max_batch_size", "batch_size"):
            if k in params:
                kw[k] = batch
        if "device" in params:
            kw["device"] = device
        if "dtype" in params:
            kw["dtype"] = dtype
    try:
        return cls(**kw)
    except TypeError:
        if kind == "DynamicCache":
            return cls()
        raise


def wants_cache_position(model):
    return "cache_position" in inspect.signature(model.forward).parameters


class Bench:
    def __init__(self, a, model, dtype):
        import torch
        import hfmodel
        self.a, self.model, self.torch = a, model, torch
        self.timer = Timer(a.device)
        self.V = model.config.vocab_size
        self.gen = torch.Generator(device="cpu").manual_seed(a.seed)
        self.cache_pos = wants_cache_position(model)
        self.dtype = dtype  # the model dtype, the model's and the KV cache's
        v = hfmodel.versions()
        self.base = {"arch": a.arch, "layers": model.config.num_hidden_layers, "torch": v["torch"],
                     "transformers": v["transformers"], "attn": a.attn, "dtype": hfmodel.dtype_tag(dtype),
                     "weights": a.weights or "random-init",
                     "gpu": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"}

    def ids(self, b, s):
        return self.torch.randint(0, self.V, (b, s), generator=self.gen).to(self.a.device)

    def reset_mem(self):
        if self.a.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def peak(self):
        if self.a.device.startswith("cuda"):
            return round(self.torch.cuda.max_memory_allocated() / 2**30, 3)
        return None

    # --- decode ---------------------------------------------------------------------------------
    def decode_eager(self, B):
        torch, model, a = self.torch, self.model, self.a
        P, N = a.prompt_len, a.new_tokens
        ids = self.ids(B, P)

        def run(steps):
            cache = make_cache("DynamicCache", model, B, P + steps, a.device, self.dtype)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            cache = out.past_key_values
            self.timer.sync()
            self.timer.start()
            for _ in range(steps):
                out = model(input_ids=tok, past_key_values=cache, use_cache=True)
                tok = out.logits[:, -1].argmax(-1, keepdim=True)
            ms = self.timer.stop_ms()
            return ms

        with torch.inference_mode():
            # Warm-up with a full-length run: the first pass over each new KV length pays one-time
            # costs (attention backend plans, allocator growth) that made it ~3x slower on H100.
            run(N)
            times = [run(N) for _ in range(a.repeats)]
        return times, None

    def decode_compile(self, B):
        torch, model, a = self.torch, self.model, self.a
        P, N = a.prompt_len, a.new_tokens
        ids = self.ids(B, P)
        cache = make_cache("StaticCache", model, B, P + N + 8, a.device, self.dtype)
        use_cp = self.cache_pos
        pos = torch.zeros(1, dtype=torch.long, device=a.device)

        def step(tok, cache_position):
            kw = {"cache_position": cache_position} if use_cp else {}
            out = model(input_ids=tok, past_key_values=cache, use_cache=True, **kw)
            return out.logits[:, -1].argmax(-1, keepdim=True)

        # Static shapes: one specialised graph per batch size (dynamic=False; the caller resets
        # dynamo between batches), as in HF's static-cache recipe.
        cstep = torch.compile(step, mode="reduce-overhead", fullgraph=True, dynamic=False)

        def prefill():
            cache.reset()
            kw = {"cache_position": torch.arange(P, device=a.device)} if use_cp else {}
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1, **kw)
            return out.logits[:, -1].argmax(-1, keepdim=True)

        def run(steps, timed):
            tok = prefill()
            pos.fill_(P)
            self.timer.sync()
            if timed:
                self.timer.start()
            for _ in range(steps):
                tok = cstep(tok, pos).clone()
                if use_cp:
                    pos.add_(1)
            if timed:
                return self.timer.stop_ms()
            self.timer.sync()
            return None

        with torch.inference_mode():
            t0 = time.time()
            with time_limit(a.compile_timeout_s):
                # Compile + CUDA-graph capture over every position the timed loops visit (a model
                # may specialise on the position: gpt-oss recompiled inside 16-step timed loops
                # after a 4-step warm-up, bench/results/2026-11-23-h100-moe-gemm-ws192/README.md).
                run(max(a.warmup_steps, N), False)
                run(max(a.warmup_steps, N), False)
            compile_s = time.time() - t0
            frames0 = compiled_frames(torch)
            times = [run(N, True) for _ in range(a.repeats)]
            recompiled = compiled_frames(torch) - frames0
        if recompiled > 0:
            raise RuntimeError(f"torch.compile compiled {recompiled} more frame(s) inside the timed decode loops: "
                               f"not a steady state (times {[round(t, 1) for t in times]} ms)")
        return times, compile_s

    def decode(self, mode, B):
        row = {"peer": f"hf_{mode}", **self.base, "mode": "decode", "batch": B, "prompt_len": self.a.prompt_len,
               "new_tokens": self.a.new_tokens}
        self.reset_mem()
        t0 = time.time()
        try:
            times, compile_s = (self.decode_eager if mode == "eager" else self.decode_compile)(B)
            ms = median(times)
            N = self.a.new_tokens
            row.update(tokens_per_s=round(B * N / (ms / 1e3), 2), ms_per_step=round(ms / N, 4),
                       decode_ms=[round(t, 3) for t in times], repeats=len(times))
            if compile_s is not None:
                row["compile_s"] = round(compile_s, 1)
        except Exception as e:  # noqa: BLE001 - record and go on with the next batch
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
            log(f"decode {mode} B={B} failed:\n{traceback.format_exc(limit=4)}")
        if mode == "compile":
            self.torch._dynamo.reset()  # free this batch's graphs / CUDA-graph pool
        row["peak_mem_gib"] = self.peak()
        row["wall_s"] = round(time.time() - t0, 1)
        return row

    # --- prefill --------------------------------------------------------------------------------
    def prefill(self, mode, B, S):
        torch, model, a = self.torch, self.model, self.a
        row = {"peer": f"hf_{mode}", **self.base, "mode": "prefill", "batch": B, "seq_len": S, "new_tokens": 0}
        self.reset_mem()
        t0 = time.time()
        try:
            ids = self.ids(B, S)

            def fwd(x):
                return model(input_ids=x, use_cache=False, logits_to_keep=1).logits

            fn = fwd if mode == "eager" else torch.compile(fwd, fullgraph=True, dynamic=False)
            with torch.inference_mode():
                tc = time.time()
                with time_limit(a.compile_timeout_s if mode == "compile" else 0):
                    for _ in range(2):
                        fn(ids)
                    self.timer.sync()
                if mode == "compile":
                    row["compile_s"] = round(time.time() - tc, 1)
                times = []
                for _ in range(a.prefill_iters):
                    self.timer.start()
                    fn(ids)
                    times.append(self.timer.stop_ms())
            ms = median(times)
            row.update(tokens_per_s=round(B * S / (ms / 1e3), 1), ms_per_step=round(ms, 4),
                       prefill_ms_min=round(min(times), 4), iters=len(times))
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
            log(f"prefill {mode} {B}x{S} failed:\n{traceback.format_exc(limit=4)}")
        if mode == "compile":
            torch._dynamo.reset()
        row["peak_mem_gib"] = self.peak()
        row["wall_s"] = round(time.time() - t0, 1)
        return row


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--weights", help="W.safetensors from fk_model --save-weights (loaded strictly); "
                                      "without it the model keeps its random init (timing does not depend on values)")
    ap.add_argument("--layers", type=int, help="default: the weights' metadata, else the full model")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--what", default="decode,prefill", help="decode, prefill or both")
    ap.add_argument("--decode-batches", default="1,8,32,64")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prefill", default="1x2048,8x2048", help="BxS shapes, comma-separated")
    ap.add_argument("--jsonl", required=True, help="rows are appended")
    ap.add_argument("--compile-timeout-s", type=float, default=300)
    ap.add_argument("--repeats", type=int, default=3, help="timed decode loops per batch (median)")
    ap.add_argument("--warmup-steps", type=int, default=4, help="compiled decode steps per warm-up run")
    ap.add_argument("--prefill-iters", type=int, default=10)
    ap.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompt ids")
    ap.add_argument("--config-root", default=None)
    return ap.parse_args(argv)


def main(argv=None):
    try:
        a = parse_args(argv)
    except SystemExit as e:
        return EXIT_SETUP if e.code not in (0, None) else 0
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"hf_llama_perf: setup error: {e}", file=sys.stderr)
        return EXIT_SETUP
    import hfmodel
    import st

    try:
        modes = [m for m in a.modes.split(",") if m]
        what = [w for w in a.what.split(",") if w]
        batches = [int(x) for x in a.decode_batches.split(",") if x]
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.prefill.split(",") if s]
        assert set(modes) <= {"eager", "compile"} and set(what) <= {"decode", "prefill"}
        assert all(len(s) == 2 for s in shapes)
    except (ValueError, AssertionError):
        print("hf_llama_perf: setup error: bad --modes/--what/--decode-batches/--prefill", file=sys.stderr)
        return EXIT_SETUP
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("hf_llama_perf: setup error: no CUDA device (use --device cpu for a smoke test)", file=sys.stderr)
        return EXIT_SETUP
    W, meta = None, {}
    if a.weights:
        if not os.path.isfile(a.weights):
            print(f"hf_llama_perf: setup error: no such file {a.weights}", file=sys.stderr)
            return EXIT_SETUP
        t0 = time.time()
        W, meta = st.load(a.weights)
        log(f"read {a.weights} ({sum(t.numel() for t in W.values()) / 1e9:.2f} B params) in {time.time() - t0:.1f}s")
        if meta.get("arch") not in (None, a.arch):
            log(f"warning: weights were written for {meta.get('arch')}, timing {a.arch}")
    layers = a.layers if a.layers is not None else (int(meta["layers"]) if "layers" in meta else None)
    try:
        cfg = hfmodel.load_config(a.arch, layers, a.config_root)
        mdt = hfmodel.model_dtype(a.arch, a.config_root)  # Note [Model dtype]
    except hfmodel.SetupError as e:
        print(f"hf_llama_perf: setup error: {e}", file=sys.stderr)
        return EXIT_SETUP
    t0 = time.time()
    model = hfmodel.build_model(cfg, mdt, a.device, a.attn)
    if W is not None:
        try:
            hfmodel.check_and_load(model, W, dtype=mdt)
        except hfmodel.WeightsError as e:
            print(f"hf_llama_perf: setup error: {e}", file=sys.stderr)
            return EXIT_SETUP
        del W
    log(f"model {a.arch} layers={cfg.num_hidden_layers} on {a.device} in {time.time() - t0:.1f}s")
    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    bench = Bench(a, model, mdt)
    os.makedirs(os.path.dirname(os.path.abspath(a.jsonl)), exist_ok=True)
    for mode in modes:
        jobs = ([("decode", b) for b in batches] if "decode" in what else []) + \
               ([("prefill", s) for s in shapes] if "prefill" in what else [])
        for kind, arg in jobs:
            row = bench.decode(mode, arg) if kind == "decode" else bench.prefill(mode, *arg)
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
            shape = f"B={arg}" if kind == "decode" else f"{arg[0]}x{arg[1]}"
            log(f"{row['peer']:10s} {kind:7s} {shape:9s} "
                + (f"ERROR {row['error']}" if "error" in row else
                   f"{row['tokens_per_s']:>10.1f} tok/s  {row['ms_per_step']:.3f} ms/step  "
                   f"peak {row['peak_mem_gib']} GiB" + (f"  compile {row['compile_s']}s" if "compile_s" in row else "")))
        if mode == "compile":
            torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
