#!/usr/bin/env python3
"""HuggingFace transformers performance peer for the encoder (embedding model) L4 benchmark.

Times an encoder (BertModel / XLMRobertaModel with its pooler, built from the repo's hf_configs/ by
bench/parity/encoder_parity.py, in the model dtype) with the same weights `fk_model --save-weights`
wrote, on the shapes `fk_model --bench` times for encoders: B sequences of S random tokens (no
padding, so no attention mask: the fastest HF path), one forward plus the pooler per call (a model
served with a pooling choice, fastkernels.json's `pooling` / `normalize` as BGE-M3's `cls` +
normalize: the model without its pooler, then that pooling of the last hidden state, as
sentence-transformers computes it; inside the compiled function in compile mode);
sequences/s = B / median time (CUDA events, --iters after warm-up).
  eager   : model(input_ids, token_type_ids) under torch.no_grad, attn_implementation=sdpa.
  compile : torch.compile(model, fullgraph=True, dynamic=False) (default mode: one static graph per shape), warmed up on each timed shape first;
            a recompile inside the timed iterations is an error, not a figure.
Peak GPU memory (torch.cuda.max_memory_allocated, weights included) is recorded per row.

    python3 bench/peers/hf_encoder_perf.py --arch google-bert/bert-base-uncased --weights W.safetensors \\
        --modes eager,compile --shapes 1x128,1x512,32x128,32x512 --jsonl OUT.jsonl

One JSON line per (peer, shape): {"peer": "hf_eager"|"hf_compile", "arch", "layers", "mode": "embed",
"batch", "seq_len", "ms", "sequences_per_s", "tokens_per_s", "peak_mem_gib", "torch", "transformers",
"gpu"; "error" when that measurement failed}, appended as soon as each ends.
Exit: 0 (rows with "error" do not change it), 2 on usage/setup errors.
"""
import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "parity"))

EXIT_SETUP = 2


def log(msg):
    print(f"[hf_encoder_perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_shapes(text):
    out = []
    for spec in text.split(","):
        b, _, s = spec.strip().partition("x")
        if not (b.isdigit() and s.isdigit() and int(b) > 0 and int(s) > 0):
            raise ValueError(f"--shapes: {spec!r} is not BxS (e.g. 32x512)")
        out.append((int(b), int(s)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, help="org/model under hf_configs/ (an encoder: bert, xlm-roberta)")
    ap.add_argument("--weights", help="safetensors from fk_model --save-weights (default: seeded random weights)")
    ap.add_argument("--layers", type=int, help="encoder layers (default: the weights' metadata, else the config's)")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--shapes", default="1x128,1x512,32x128,32x512")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config-root")
    ap.add_argument("--jsonl", required=True)
    a = ap.parse_args(argv)
    try:
        shapes = parse_shapes(a.shapes)
        modes = [m.strip() for m in a.modes.split(",") if m.strip()]
        bad = [m for m in modes if m not in ("eager", "compile")]
        if bad or not modes:
            raise ValueError(f"--modes: {a.modes!r} (eager, compile)")
    except ValueError as e:
        log(str(e))
        return EXIT_SETUP
    try:
        import torch
        import encoder_parity
        import hfmodel
        import st
    except ImportError as e:
        log(f"{e} (needs torch and transformers)")
        return EXIT_SETUP
    if not torch.cuda.is_available():
        log("no CUDA device")
        return EXIT_SETUP
    try:
        if not encoder_parity.encoder_model_type(a.arch, a.config_root):
            raise hfmodel.SetupError(f"{a.arch}: not an encoder config (model_type one of {encoder_parity.ENCODER_MODEL_TYPES})")
        dtype = hfmodel.model_dtype(a.arch, a.config_root)
        W, meta = st.load(a.weights) if a.weights else (None, {})
        layers = a.layers if a.layers is not None else (int(meta["layers"]) if "layers" in meta else None)
        cfg = encoder_parity.load_encoder_config(a.arch, layers, a.config_root)
    except (hfmodel.SetupError, OSError, st.SafetensorsError) as e:
        log(str(e))
        return EXIT_SETUP
    side = hfmodel.sidecar(a.arch, a.config_root)
    pooling = side.get("pooling", "pooler") + ("+normalize" if side.get("normalize") else "")
    model = encoder_parity.build_encoder(cfg, dtype, "cuda", "sdpa", pooler=pooling == "pooler")
    # The per-token heads (fastkernels.json multi_vector / sparse; Note [Embedding heads]): every output fk_model
    # computes, as torch modules in the model dtype (FlagEmbedding's and ColBERT's way), with the weights' head
    # tensors or seeded ones.
    mv, sparse, drop = int(side.get("multi_vector", 0)), bool(side.get("sparse")), bool(side.get("drop_special_tokens"))
    hb = bool(side.get("head_bias"))
    heads = {}
    if W is not None:
        W, heads = encoder_parity.split_heads(W)
        hfmodel.check_and_load(model, W, tied=False, dtype=dtype)
    else:
        hfmodel.check_and_load(model, hfmodel.random_weights(model, a.seed, dtype=dtype), tied=False, dtype=dtype)
    del W
    colbert = torch.nn.Linear(cfg.hidden_size, mv, bias=hb, device="cuda", dtype=dtype) if mv else None
    sparse_linear = torch.nn.Linear(cfg.hidden_size, 1, bias=hb, device="cuda", dtype=dtype) if sparse else None
    for name, mod in (("colbert_linear", colbert), ("sparse_linear", sparse_linear)):
        if mod is not None and f"{name}.weight" in heads:
            mod.weight.data.copy_(heads[f"{name}.weight"])
            if hb:
                mod.bias.data.copy_(heads[f"{name}.bias"])
    # RoBERTa-style models take ids equal to padding_idx as padding: the prompts avoid it (as fk_model's do).
    pad = getattr(cfg, "pad_token_id", None) if cfg.model_type == "xlm-roberta" else None
    env = {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
           "gpu": torch.cuda.get_device_name(), "dtype": hfmodel.dtype_tag(dtype), "pooling": pooling,
           "heads": {"multi_vector": mv, "sparse": sparse, "drop_special_tokens": drop}}
    g = torch.Generator(device="cuda").manual_seed(a.seed)

    def inputs(b, s):
        ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda", generator=g)
        if pad is not None:
            ids[ids == pad] = (pad + 1) % cfg.vocab_size
        tt = None
        if getattr(cfg, "type_vocab_size", 0) > 1:  # a sentence pair: the second half type 1, as fk_model's
            tt = (torch.arange(s, device="cuda") * 2 >= s).long().expand(b, s).contiguous()
        return ids, tt

    def embed(input_ids, token_type_ids):
        out = model(input_ids=input_ids, token_type_ids=token_type_ids)
        extra = []
        h = out.last_hidden_state
        if colbert is not None:  # the token vectors (BGE-M3: without the first token)
            extra.append(torch.nn.functional.normalize(colbert(h[:, 1:] if drop else h), dim=-1))
        if sparse_linear is not None:  # the lexical weights (BGE-M3: without the first and last tokens)
            extra.append(torch.relu(sparse_linear(h[:, 1:-1] if drop else h)))
        if pooling == "pooler":
            return (out.pooler_output, *extra)
        kind, _, norm = pooling.partition("+")
        v = h[:, 0] if kind == "cls" else h[:, -1] if kind == "last" else h.float().mean(dim=1).to(h.dtype)
        return (torch.nn.functional.normalize(v, dim=-1) if norm == "normalize" else v, *extra)

    for mode in modes:
        fn = embed
        if mode == "compile":
            fn = torch.compile(embed, fullgraph=True, dynamic=False)  # a static graph per shape (automatic dynamic shapes would compile generic kernels after the second shape)
        for b, s in shapes:
            row = {"peer": f"hf_{mode}", "arch": a.arch, "layers": cfg.num_hidden_layers, "mode": "embed", "batch": b,
                   "seq_len": s, **env}
            try:
                ids, tt = inputs(b, s)
                row.update(hfmodel.timed_calls(lambda: fn(ids, tt), a.warmup, a.iters, mode == "compile"))
                ms = row["ms"]
                row.update({"sequences_per_s": 1000.0 * b / ms, "tokens_per_s": 1000.0 * b * s / ms})
                log(f"{mode} {b}x{s}: {ms:.3f} ms, {row['sequences_per_s']:.1f} sequences/s")
            except Exception as e:  # noqa: BLE001 - one failed shape is a row with "error", not the end of the run
                row["error"] = f"{type(e).__name__}: {e}"
                log(f"{mode} {b}x{s}: FAILED {row['error']}")
                traceback.print_exc()
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
