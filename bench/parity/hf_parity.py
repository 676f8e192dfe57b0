#!/usr/bin/env python3
"""Parity of fk_model (the L4 model runner) against HuggingFace transformers.

Runs `fk_model` (or takes its files), rebuilds the same model in transformers from the repo's
hf_configs/ with the same weights (bf16 or fp16: the model dtype, Note [Model dtype] in
hfmodel.py), and compares, per prompt (no padding) (encoders, e.g. BERT: per-layer hidden states and
pooled vectors instead, encoder_parity.py):
  a) the residual stream after every decoder layer   (prefill.layer.{i})
  b) last-token logits of every prompt               (prefill.logits)
  c) greedy decode, teacher-forced in HF on the prompt + our tokens: argmax agreement, near-tie
     gaps of disagreements, our chosen-token logits, last-step logits (decode.*)
Tolerances are relative to an fp32 "truth" (the same weights upcast): ours may be at most
`--factor` (2) times as far from fp32 as HF in the model dtype is, with stated floors
(docs/parity.md). Result keys name that run by the dtype's tag: hf_bf16..., or hf_f16... for fp16.

    python3 bench/parity/hf_parity.py --arch meta-llama/Llama-3.1-8B-Instruct --layers 4 --out out/parity
    python3 bench/parity/hf_parity.py --all --out out/parity
    python3 bench/parity/hf_parity.py --arch ORG/MODEL --weights W.safetensors --dump D.safetensors --out DIR
    python3 bench/parity/hf_parity.py --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep-text \
        --vision-arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --layers 4 --vision-layers 4 --out DIR
      (a vision-language model: one image per prompt through fk_model's tower + text model, and through HF's
      Qwen2VLForConditionalGeneration with the same weights; the same checks a)-c) on the text model)

Exit: 0 all pass, 1 a parity or contract failure (fk_model crashing counts), 2 usage/setup
errors (missing fk_model, config not found, torch/transformers missing, no GPU when asked).
"""
import argparse
import gc
import json
import math
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

EXIT_OK, EXIT_FAIL, EXIT_SETUP = 0, 1, 2

# Tolerances (docs/parity.md explains them).
# "HF bf16" below is HF in the model dtype: bf16, or fp16 for a float16 model.
FACTOR = 2.0          # ours-vs-fp32 may be this many times HF-bf16-vs-fp32
FLOOR_REL = 5e-3      # floor on relative L2 bounds: ~4-5 bf16 roundings (one is ~1e-3 rel. RMS; fp16's is 8x less)
MIN_MATCH = 0.90      # greedy-token agreement with HF bf16 (teacher forced)
TIE_FACTOR = 6.0      # near-tie bound = TIE_FACTOR * delta, delta = max |HF bf16 - fp32| logit
# abs floor for single logits: eps * max|logit| (1-2 ulps), eps of the model dtype (torch.finfo(dtype).eps)
ULP_FLOOR = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}
ROUTE_TIE_FACTOR = 4.0  # MoE routing near-tie: top-k margin <= 4 x bf16 router-logit error (docs/parity.md)


class ContractError(RuntimeError):
    pass


def log(msg=""):
    print(msg, flush=True)


def rel_l2(a, b):
    a = a.double()
    b = b.double()
    den = float(b.norm())
    num = float((a - b).norm())
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def rel_entry(a, tag, name, ours, hf, truth):
    """One relative-L2 check (docs/parity.md): ours-vs-fp32 <= max(factor x HF-{tag}-vs-fp32, floor)."""
    e_o, e_h = rel_l2(ours, truth), rel_l2(hf, truth)
    bound = max(a.factor * e_h, a.floor_rel)
    return {"name": name, "metric": "rel_l2", "ours": e_o, f"hf_{tag}": e_h, "bound": bound,
            "ours_vs_hf": rel_l2(ours, hf), "max_abs_vs_fp32": float((ours - truth).abs().max()),
            "pass": bool(e_o <= bound)}


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return f"{x:.3e}" if (abs(x) < 1e-2 or abs(x) >= 1e4) else f"{x:.4f}"


# --- fk_model ------------------------------------------------------------------------------------

def vision_weights_path(wpath):
    return wpath[:-len(".safetensors")] + ".vision.safetensors" if wpath.endswith(".safetensors") else wpath + ".vision"


def run_fk_model(a, arch, layers, wpath, dpath, logpath):
    cmd = [a.fk_model]
    if a.fk_model.endswith(".py"):
        cmd = [sys.executable, a.fk_model]
    cmd += ["--arch", arch, "--layers", str(layers), "--seed", str(a.seed), "--save-weights", wpath,
            "--dump", dpath, "--prompt-lens", ",".join(map(str, a.prompt_lens)),
            "--decode-steps", str(a.decode_steps)]
    if a.vision_arch:  # a vision-language model: the tower too (its weights beside the text model's)
        cmd += ["--vision-arch", a.vision_arch, "--vision-layers", str(a.vision_layers),
                "--save-vision-weights", vision_weights_path(wpath)]
        if a.config_root:
            cmd += ["--config-root", os.path.abspath(a.config_root)]
    log(f"$ {shlex.join(cmd)}")
    t0 = time.time()
    try:
        with open(logpath, "wb") as lf:
            p = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, timeout=a.fk_timeout_s)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    dt = time.time() - t0
    if rc != 0:
        with open(logpath, "rb") as lf:
            tail = lf.read().decode("utf-8", "replace").splitlines()[-40:]
        log(f"fk_model FAILED (exit {rc}) after {dt:.1f}s; last lines of its output ({logpath}):")
        for line in tail:
            log(f"  | {line}")
        raise ContractError(f"fk_model exited with {rc}")
    return cmd, dt


# --- contract checks ----------------------------------------------------------------------------

def check_dump(D, n_layers, V, H, prompt_lens=None, decode_steps=None):
    import torch

    errs = []

    def need(name, dtype, ndim):
        t = D.get(name)
        if t is None:
            errs.append(f"missing {name}")
            return None
        if t.dtype != dtype:
            errs.append(f"{name}: dtype {t.dtype}, want {dtype}")
        if t.dim() != ndim:
            errs.append(f"{name}: {t.dim()}-D, want {ndim}-D")
            return None
        return t

    ids = need("input_ids", torch.int64, 1)
    cu = need("cu_seqlens", torch.int32, 1)
    if ids is None or cu is None:
        raise ContractError("; ".join(errs))
    T = ids.shape[0]
    cu64 = cu.long()
    B = cu.shape[0] - 1
    if B < 1 or int(cu64[0]) != 0 or int(cu64[-1]) != T or bool((cu64[1:] <= cu64[:-1]).any()):
        errs.append(f"cu_seqlens {cu.tolist()} not 0 < ... increasing ... = T ({T})")
    lens = (cu64[1:] - cu64[:-1]).tolist()
    if prompt_lens is not None and lens != list(prompt_lens):
        errs.append(f"prompt lengths {lens} != requested {list(prompt_lens)}")
    if bool(((ids < 0) | (ids >= V)).any()):
        errs.append("input_ids out of vocabulary range")
    for i in range(n_layers):
        t = need(f"prefill.layer.{i}", torch.float32, 2)
        if t is not None and tuple(t.shape) != (T, H):
            errs.append(f"prefill.layer.{i}: shape {tuple(t.shape)}, want {(T, H)}")
    pre = "prefill.layer."
    extra = sorted(k for k in D if k.startswith(pre) and (not k[len(pre):].isdigit() or int(k[len(pre):]) >= n_layers))
    if extra:
        errs.append(f"unexpected tensors {extra} (weights have {n_layers} layers)")
    pl = need("prefill.logits", torch.float32, 2)
    if pl is not None and tuple(pl.shape) != (B, V):
        errs.append(f"prefill.logits: shape {tuple(pl.shape)}, want {(B, V)}")
    tok = need("decode.tokens", torch.int64, 2)
    S = None
    if tok is not None:
        S = tok.shape[1] - 1
        if tok.shape[0] != B or S < 0:
            errs.append(f"decode.tokens: shape {tuple(tok.shape)}, want ({B}, S+1)")
        if decode_steps is not None and S != decode_steps:
            errs.append(f"decode.tokens has {S} decode steps, requested {decode_steps}")
        if bool(((tok < 0) | (tok >= V)).any()):
            errs.append("decode.tokens out of vocabulary range")
    tl = need("decode.token_logit", torch.float32, 2)
    if tl is not None and tok is not None and tl.shape != tok.shape:
        errs.append(f"decode.token_logit: shape {tuple(tl.shape)} != decode.tokens {tuple(tok.shape)}")
    ll = need("decode.logits_last", torch.float32, 2)
    if ll is not None and tuple(ll.shape) != (B, V):
        errs.append(f"decode.logits_last: shape {tuple(ll.shape)}, want {(B, V)}")
    for k, t in D.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            errs.append(f"{k}: non-finite values")
    if errs:
        raise ContractError("; ".join(errs))
    return lens, S


def self_consistency(D, S, ulp):
    """Our own files must agree with themselves: token 0 is an argmax of prefill.logits, the last
    token an argmax of decode.logits_last, and token_logit holds those logits. Tolerance: one
    ulp (`ulp`, ULP_FLOOR of the model dtype) of the value (a dump may round logits through the
    model dtype on one path and not the other)."""
    errs = []
    pl, ll = D["prefill.logits"], D["decode.logits_last"]
    tok, tl = D["decode.tokens"], D["decode.token_logit"]
    for b in range(tok.shape[0]):
        for col, lg in ((0, pl[b]), (S, ll[b])):
            t = int(tok[b, col])
            v, mx = float(lg[t]), float(lg.max())
            tol = ulp * max(abs(mx), 1e-3)
            if v < mx - tol:
                errs.append(f"prompt {b}: decode.tokens[{col}]={t} has logit {v:.5f} < max {mx:.5f}")
            if abs(float(tl[b, col]) - v) > tol:
                errs.append(f"prompt {b}: decode.token_logit[{col}]={float(tl[b, col]):.5f} != logits[{t}]={v:.5f}")
    return errs


# --- HF side ------------------------------------------------------------------------------------

def hf_run(model, D, lens, S, device):
    """Per prompt (batch 1, no padding): forward prompt + our decode tokens[:S]; returns the
    residual stream after every layer on the prompt positions ([T, H] per layer, fp32 CPU) and
    the logits at positions L-1 .. L+S-1 ([B, S+1, V] fp32 CPU; row j is what chose token j).
    A vision-language dump (pixel_values, grid_thw: one image per prompt) feeds each prompt its
    image; the layers are the text model's (model.model.language_model)."""
    import types

    import torch
    import hfmodel

    vlm = "grid_thw" in D
    text = types.SimpleNamespace(model=model.model.language_model) if vlm else model
    n = len(text.model.layers)
    ids, tok = D["input_ids"], D["decode.tokens"]
    cap = hfmodel.LayerCapture(text)
    rcap = hfmodel.RouterCapture(text)
    if vlm:
        grids = D["grid_thw"]
        patch_rows = (grids[:, 0] * grids[:, 1] * grids[:, 2]).tolist()
        px_off = [0]
        for r in patch_rows:
            px_off.append(px_off[-1] + int(r))
        import inspect
        takes_mm_types = any("mm_token_type_ids" in inspect.signature(f).parameters for f in (model.forward, model.model.forward))
        image_token = int(model.config.image_token_id)
    layers = [[] for _ in range(n)]
    logits = []
    routers = []  # per prompt: [layers, 2, E] router logits at the rows of (b) and decode.logits_last
    off = 0
    with torch.no_grad():
        for b, L in enumerate(lens):
            seq = torch.cat([ids[off:off + L], tok[b, :S]]).to(device)
            off += L
            cap.keep = slice(0, L)
            cap.outs.clear()
            rcap.outs.clear()
            if vlm:
                vdtype = next(model.model.visual.parameters()).dtype
                px = D["pixel_values"][px_off[b]:px_off[b + 1]].to(device=device, dtype=vdtype)
                extra = {}
                if takes_mm_types:  # transformers >= 5.13 wants the modality of each token (0 text, 1 image)
                    extra["mm_token_type_ids"] = (seq == image_token).long()[None]
                out = model(input_ids=seq[None], pixel_values=px, image_grid_thw=grids[b:b + 1].to(device),
                            use_cache=False, logits_to_keep=S + 1, **extra)
            else:
                out = model(input_ids=seq[None], use_cache=False, logits_to_keep=S + 1)
            for i in range(n):
                layers[i].append(cap.outs[i].cpu())
            if rcap.active:
                routers.append(torch.stack([rcap.outs[i][[L - 1, L + S - 1]] for i in range(rcap.n)]).cpu())
            lg = out.logits[0].float()
            assert lg.shape[0] == S + 1, lg.shape
            logits.append(lg.cpu())
            del out
    cap.remove()
    rcap.remove()
    return [torch.cat(x) for x in layers], torch.stack(logits), (torch.stack(routers) if routers else None)


def free(*objs):
    import torch
    for o in objs:
        del o
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- one architecture ---------------------------------------------------------------------------

def check_arch(a, arch, workdir):
    import torch
    import hfmodel
    import st

    mdt = hfmodel.model_dtype(arch, a.config_root)  # bf16 or fp16 (Note [Model dtype])
    tag = hfmodel.dtype_tag(mdt)
    res = {"arch": arch, "dtype": tag, "seed": a.seed, "attn": a.attn, "device": a.device, **hfmodel.versions(),
           "factor": a.factor, "floor_rel": a.floor_rel, "min_match": a.min_match, "tie_factor": a.tie_factor,
           "route_tie_factor": a.route_tie_factor,
           "checks": [], "errors": [], "pass": False}
    if a.device.startswith("cuda"):
        res["gpu"] = torch.cuda.get_device_name()
    import encoder_parity
    if encoder_parity.encoder_model_type(arch, a.config_root):  # an embedding model (BERT): encoder_parity.py
        return encoder_parity.check_encoder(a, arch, workdir, res)
    t_start = time.time()
    if a.weights:
        wpath, dpath = a.weights, a.dump
        W, wmeta = st.load(wpath)
        layers = a.layers
        if layers is None:
            layers = int(wmeta["layers"]) if "layers" in wmeta else \
                1 + max(int(k.split(".")[2]) for k in W if k.startswith("model.layers."))
        requested_lens, requested_steps = None, None
    else:
        layers = a.layers if a.layers is not None else 4
        os.makedirs(workdir, exist_ok=True)
        wpath = os.path.join(workdir, "weights.safetensors")
        dpath = os.path.join(workdir, "dump.safetensors")
        for p in (wpath, dpath):
            if os.path.exists(p):
                os.remove(p)
        try:
            cmd, dt = run_fk_model(a, arch, layers, wpath, dpath, os.path.join(workdir, "fk_model.log"))
        except ContractError as e:
            res["errors"].append(str(e))
            return res
        res["fk_model_cmd"] = shlex.join(cmd)
        res["fk_model_s"] = round(dt, 2)
        W, wmeta = st.load(wpath)
        if a.vision_arch:  # Note [Multimodal prefill]: the composite's weights are both files'
            VW, _ = st.load(vision_weights_path(wpath))
            W = hfmodel.vlm_weights(W, VW)
        # A VLM's prompts hold its image tokens besides the requested text lengths.
        requested_lens, requested_steps = (None if a.vision_arch else a.prompt_lens), a.decode_steps
        for k, want in (("arch", arch), ("layers", str(layers)), ("seed", str(a.seed))):
            if wmeta.get(k) != want:
                res["errors"].append(f"weights metadata {k}={wmeta.get(k)!r}, want {want!r}")
    res["layers"] = layers
    res["weights_metadata"] = wmeta
    try:  # before anything is built: a W in the wrong dtype is named here, tensor by tensor
        hfmodel.check_dtypes(W, mdt, f"weights {wpath} ({arch} is served in {hfmodel.dtype_name(mdt)})")
    except hfmodel.WeightsError as e:
        res["errors"].append(str(e))
        return res
    cfg = hfmodel.load_config(arch, layers, a.config_root)
    vcfg = hfmodel.load_vlm_config(arch, layers, a.vision_layers, a.config_root) if a.vision_arch else None
    V, H = cfg.vocab_size, cfg.hidden_size
    try:
        D, _ = st.load(dpath)
        lens, S = check_dump(D, layers, V, H, requested_lens, requested_steps)
    except (ContractError, st.SafetensorsError, OSError) as e:
        res["errors"].append(f"dump: {e}")
        return res
    res["prompt_lens"], res["decode_steps"] = lens, S
    res["errors"] += self_consistency(D, S, ULP_FLOOR[tag])

    # HF in the model dtype, bf16 or fp16 (what we measure against), and HF fp32 (the truth), one
    # after the other; both load the same W (in the model dtype, upcast by the fp32 model).
    runs = {}
    for name, dtype in ((tag, mdt), ("fp32", torch.float32)):
        t0 = time.time()
        model = (hfmodel.build_vlm_model(vcfg, dtype, a.device, a.attn) if a.vision_arch
                 else hfmodel.build_model(cfg, dtype, a.device, a.attn))
        try:
            hfmodel.check_and_load(model, W, dtype=mdt)
        except hfmodel.WeightsError as e:
            res["errors"].append(str(e))
            free(model)
            return res
        runs[name] = hf_run(model, D, lens, S, a.device)
        free(model)
        res[f"hf_{name}_s"] = round(time.time() - t0, 2)
    del W
    (h16_layers, h16_tf, h16_r), (f32_layers, f32_tf, f32_r) = runs[tag], runs["fp32"]
    checks = res["checks"]
    top_k = int(getattr(cfg, "num_experts_per_tok", 0) or 0)

    def rel_check(name, ours, hf, truth, ambiguous=None):
        c = rel_entry(a, tag, name, ours, hf, truth)
        if ours.dim() == 2:  # one row per prompt: say which rows carry the error
            c["rows_ours"] = [rel_l2(ours[i], truth[i]) for i in range(ours.shape[0])]
            c[f"rows_hf_{tag}"] = [rel_l2(hf[i], truth[i]) for i in range(ours.shape[0])]
        if ambiguous is not None:
            c["routing"] = ambiguous
            if not c["pass"] and ambiguous["rows"]:
                # Note [Routing near-ties] in docs/parity.md: set aside routing-ambiguous rows, the
                # worst (by our error) first, only until the bound holds over the rest; at least
                # one row must remain. Every row set aside is reported.
                keep = list(range(ours.shape[0]))
                dropped = []
                for i in sorted(ambiguous["rows"], key=lambda i: -c["rows_ours"][i]):
                    if len(keep) == 1:
                        break
                    keep.remove(i)
                    dropped.append(i)
                    e_o2, e_h2 = rel_l2(ours[keep], truth[keep]), rel_l2(hf[keep], truth[keep])
                    b2 = max(a.factor * e_h2, a.floor_rel)
                    c.update({"rows_set_aside": list(dropped), "ours_unambiguous": e_o2,
                              f"hf_{tag}_unambiguous": e_h2, "bound_unambiguous": b2, "pass": bool(e_o2 <= b2)})
                    if c["pass"]:
                        break
        checks.append(c)

    def routing_ties(j):
        """Rows (prompts) whose fp32 router logits at position j (0: (b)'s row, 1: decode's last)
        put a top-k boundary within tie_factor x the bf16 router noise in some layer."""
        if h16_r is None or f32_r is None or top_k <= 0:
            return None
        z32, z16 = f32_r[:, :, j].float(), h16_r[:, :, j].float()        # [B, layers, E]
        srt = z32.sort(-1, descending=True).values
        margin = srt[..., top_k - 1] - srt[..., top_k]                   # k-th minus (k+1)-th logit
        noise = (z16 - z32).abs().amax(-1)                                # bf16 router-logit error
        ratio = margin / noise.clamp_min(1e-12)                           # [B, layers]
        rows = [int(b) for b in range(ratio.shape[0]) if float(ratio[b].min()) <= a.route_tie_factor]
        return {"rows": rows, "route_tie_factor": a.route_tie_factor,
                "min_margin_over_noise": [float(ratio[b].min()) for b in range(ratio.shape[0])],
                "layer": [int(ratio[b].argmin()) for b in range(ratio.shape[0])]}

    # a) residual stream per layer
    for i in range(layers):
        rel_check(f"layer.{i}", D[f"prefill.layer.{i}"], h16_layers[i], f32_layers[i])
    # b) prefill logits (row 0 of the teacher-forced logits = the prompt's last token)
    rel_check("prefill.logits", D["prefill.logits"], h16_tf[:, 0], f32_tf[:, 0], routing_ties(0))
    # c) decode, teacher forced
    tok, tl = D["decode.tokens"], D["decode.token_logit"]
    h_arg = h16_tf.argmax(-1)
    match = tok == h_arg
    h_max = h16_tf.max(-1).values
    h_tok = h16_tf.gather(-1, tok[..., None])[..., 0]
    f_tok = f32_tf.gather(-1, tok[..., None])[..., 0]
    gap = h_max - h_tok
    delta_b = float((h16_tf[:, 0] - f32_tf[:, 0]).abs().max())
    delta = float((h16_tf - f32_tf).abs().max())
    tie_bound = a.tie_factor * delta
    n_tok = tok.numel()
    n_exact = int(match.sum())
    # A token whose HF logit equals HF's max is an exact tie (bf16 logits over 150k tokens tie
    # often); HF's argmax picks the lowest index, ours may pick another: that is agreement.
    agree = match | (gap <= 0)
    n_match = int(agree.sum())
    f_arg = f32_tf.argmax(-1)
    f_gap = h_max - h16_tf.gather(-1, f_arg[..., None])[..., 0]
    checks.append({"name": "decode.argmax_match", "metric": "fraction", "ours": n_match / n_tok,
                   "bound": a.min_match, "n": n_tok, "n_match": n_match, "n_exact_index": n_exact,
                   f"hf_{tag}_vs_fp32_match": float(((h_arg == f_arg) | (f_gap <= 0)).float().mean()),
                   "pass": bool(n_match / n_tok >= a.min_match)})
    mm = ~agree
    worst = float(gap[mm].max()) if bool(mm.any()) else 0.0
    mism = [{"prompt": int(b), "step": int(j), "ours": int(tok[b, j]), "hf": int(h_arg[b, j]),
             "gap": float(gap[b, j])} for b, j in mm.nonzero().tolist()]
    checks.append({"name": "decode.near_tie", "metric": "max_gap", "ours": worst, "bound": tie_bound,
                   "delta_prefill": delta_b, "delta": delta, "mismatches": mism[:32],
                   "pass": bool(worst <= tie_bound)})
    e_o = float((tl - f_tok).abs().max())
    e_h = float((h_tok - f_tok).abs().max())
    bound = max(a.factor * e_h, ULP_FLOOR[tag] * float(f_tok.abs().max()))
    checks.append({"name": "decode.token_logit", "metric": "max_abs", "ours": e_o, f"hf_{tag}": e_h, "bound": bound,
                   "ours_vs_hf": float((tl - h_tok).abs().max()),
                   "ours_vs_hf_mean": float((tl - h_tok).abs().mean()), "pass": bool(e_o <= bound)})
    rel_check("decode.logits_last", D["decode.logits_last"], h16_tf[:, S], f32_tf[:, S], routing_ties(1))
    res["pass"] = not res["errors"] and all(c["pass"] for c in checks)
    res["total_s"] = round(time.time() - t_start, 2)
    free(runs, D)
    return res


# --- reporting ----------------------------------------------------------------------------------

def header(tag):
    """Table header; `tag` is the result's dtype tag (bf16, f16)."""
    return ("check", "metric", "ours-vs-fp32", f"hf-{tag}-vs-fp32", "bound", "ours-vs-hf", "result")


def rows(res):
    out = []
    tag = res.get("dtype", "bf16")  # results from before fp16 support are bf16
    for c in res["checks"]:
        if c["name"] == "decode.argmax_match":
            out.append((c["name"], "match", f"{c['n_match']}/{c['n']} = {c['ours']:.3f} (index {c['n_exact_index']})",
                        f"(vs fp32 {c[f'hf_{tag}_vs_fp32_match']:.3f})", f">= {c['bound']:.2f}", "-",
                        "PASS" if c["pass"] else "FAIL"))
        elif c["name"] == "decode.near_tie":
            out.append((c["name"], "max gap", fmt(c["ours"]), f"delta {fmt(c['delta'])}", f"<= {fmt(c['bound'])}",
                        f"{len(c['mismatches'])} mism.", "PASS" if c["pass"] else "FAIL"))
        else:
            over_all = "over" if "bound_unambiguous" in c else ("PASS" if c["pass"] else "FAIL")
            out.append((c["name"], c["metric"], fmt(c["ours"]), fmt(c.get(f"hf_{tag}")), f"<= {fmt(c['bound'])}",
                        fmt(c.get("ours_vs_hf")), over_all))
            if "bound_unambiguous" in c:  # Note [Routing near-ties] (docs/parity.md)
                rows_ = ",".join(map(str, c["rows_set_aside"]))
                out.append((f"{c['name']} w/o prompts {rows_}", "rel_l2 (routing near-tie excluded)",
                            fmt(c["ours_unambiguous"]), fmt(c[f"hf_{tag}_unambiguous"]),
                            f"<= {fmt(c['bound_unambiguous'])}", "-", "PASS" if c["pass"] else "FAIL"))
    return out


def print_table(res):
    log(f"\n== {res['arch']}  layers={res.get('layers')} seed={res['seed']} prompts={res.get('prompt_lens')} "
        f"decode_steps={res.get('decode_steps')} attn={res['attn']} device={res.get('gpu', res['device'])} ==")
    r = rows(res)
    hdr = header(res.get("dtype", "bf16"))
    if r:
        w = [max(len(x[i]) for x in r + [hdr]) for i in range(len(hdr))]
        log("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
        for x in r:
            log("  ".join(v.ljust(w[i]) for i, v in enumerate(x)))
    for e in res["errors"]:
        log(f"ERROR: {e}")
    log(f"=> {res['arch']}: {'PASS' if res['pass'] else 'FAIL'}")


def write_md(path, results, a):
    L = ["# fk_model vs HuggingFace transformers: parity", ""]
    r0 = results[0] if results else {}
    lo = "/".join(sorted({r.get("dtype", "bf16") for r in results})) or "bf16"  # HF's low-precision run(s)
    L.append(f"torch {r0.get('torch')}, transformers {r0.get('transformers')}, device {r0.get('gpu', r0.get('device'))}, "
             f"attn_implementation={a.attn}. Bounds: ours-vs-fp32 <= max({a.factor:g} x HF-{lo}-vs-fp32, "
             f"{a.floor_rel:g}) (relative L2); argmax match >= {a.min_match:.0%}; disagreements must be near-ties "
             f"(HF gap <= {a.tie_factor:g} x max|HF {lo} - fp32| logit). See docs/parity.md.")
    L += ["", "| arch | layers | result | worst layer (ours / bound) | logits (ours / bound) | decode match | errors |",
          "|---|---|---|---|---|---|---|"]
    for r in results:
        lay = [c for c in r["checks"] if c["name"].startswith("layer.")]
        wl = max(lay, key=lambda c: c["ours"] / c["bound"]) if lay else None
        lg = next((c for c in r["checks"] if c["name"] == "prefill.logits"), None)
        dm = next((c for c in r["checks"] if c["name"] == "decode.argmax_match"), None)
        L.append(f"| {r['arch']} | {r.get('layers', '-')} | {'PASS' if r['pass'] else 'FAIL'} | "
                 + (f"{wl['name']}: {fmt(wl['ours'])} / {fmt(wl['bound'])}" if wl else "-") + " | "
                 + (f"{fmt(lg['ours'])} / {fmt(lg['bound'])}" if lg else "-") + " | "
                 + (f"{dm['n_match']}/{dm['n']}" if dm else "-") + " | "
                 + ("; ".join(r["errors"])[:300].replace("|", "/") or "-") + " |")
    for r in results:
        hdr = header(r.get("dtype", "bf16"))
        L += ["", f"## {r['arch']}", "", "| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
        L += ["| " + " | ".join(x) + " |" for x in rows(r)]
        for e in r["errors"]:
            L.append(f"\nERROR: {e}")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


# --- main ---------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", help="org/model (comma-separated for several)")
    ap.add_argument("--all", action="store_true", help="the four Llama-family configs")
    ap.add_argument("--layers", type=int, help="decoder layers (default 4; with --weights: from its metadata)")
    ap.add_argument("--vision-arch", default=None,
                    help="a vision-language model: --arch is its text model (a VLM's text_config component), this its "
                         "vision tower; fk_model runs both (one image per prompt) and HF the composite "
                         "(Qwen2VLForConditionalGeneration) with the same weights")
    ap.add_argument("--vision-layers", type=int, default=4, help="with --vision-arch: the tower's blocks (default 4)")
    ap.add_argument("--fk-model", default=os.path.join(REPO, "build", "gpu", "fk_model"),
                    help="fk_model binary (a .py file runs with this Python; tests use fake_fk_model.py)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-lens", default="7,33,64,128")
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--out", required=True, help="output directory (parity.jsonl, parity.md, per-arch work dirs)")
    ap.add_argument("--weights", help="existing W.safetensors (skip running fk_model; needs --dump)")
    ap.add_argument("--dump", help="existing D.safetensors (needs --weights)")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"),
                    help="HF attention implementation for both HF models (default sdpa)")
    ap.add_argument("--config-root", default=None, help="default: $FK_CONFIG_ROOT or the repo's hf_configs/")
    ap.add_argument("--keep-files", action="store_true", help="keep the W/D files fk_model wrote under --out")
    ap.add_argument("--fk-timeout-s", type=float, default=900)
    ap.add_argument("--factor", type=float, default=FACTOR)
    ap.add_argument("--floor-rel", type=float, default=FLOOR_REL)
    ap.add_argument("--min-match", type=float, default=MIN_MATCH)
    ap.add_argument("--tie-factor", type=float, default=TIE_FACTOR)
    ap.add_argument("--route-tie-factor", type=float, default=ROUTE_TIE_FACTOR,
                    help="MoE: a prompt's routing is a near-tie when a top-k margin <= this x the router-logit error "
                         "of HF in the model dtype (bf16/fp16)")
    return ap.parse_args(argv)


def setup_error(msg):
    print(f"hf_parity: setup error: {msg}", file=sys.stderr, flush=True)
    return EXIT_SETUP


def main(argv=None):
    try:
        a = parse_args(argv)
    except SystemExit as e:
        return EXIT_SETUP if e.code not in (0, None) else EXIT_OK
    if bool(a.arch) == bool(a.all):
        return setup_error("give exactly one of --arch or --all")
    try:
        a.prompt_lens = [int(x) for x in a.prompt_lens.split(",") if x.strip()]
        assert a.prompt_lens and all(x > 0 for x in a.prompt_lens) and a.decode_steps >= 0
    except (ValueError, AssertionError):
        return setup_error(f"bad --prompt-lens {a.prompt_lens!r} / --decode-steps {a.decode_steps}")
    if bool(a.weights) != bool(a.dump):
        return setup_error("--weights and --dump go together")
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        return setup_error(f"{e} (needs torch and transformers)")
    import hfmodel

    archs = list(hfmodel.DEFAULT_ARCHS) if a.all else [x.strip() for x in a.arch.split(",") if x.strip()]
    if a.weights and len(archs) != 1:
        return setup_error("--weights/--dump take exactly one --arch")
    if a.vision_arch and (len(archs) != 1 or a.weights):
        return setup_error("--vision-arch takes exactly one --arch (the VLM's text model) and runs fk_model (no --weights)")
    if a.vision_arch:
        try:
            hfmodel.load_vlm_config(archs[0], a.layers or 4, a.vision_layers, a.config_root)
        except hfmodel.SetupError as e:
            return setup_error(str(e))
    for p in (a.weights, a.dump):
        if p and not os.path.isfile(p):
            return setup_error(f"no such file: {p}")
    try:
        import encoder_parity
        for arch in archs:
            if encoder_parity.encoder_model_type(arch, a.config_root):
                encoder_parity.load_encoder_config(arch, a.layers, a.config_root)
            else:
                hfmodel.load_config(arch, a.layers, a.config_root)
            hfmodel.model_dtype(arch, a.config_root)
    except hfmodel.SetupError as e:
        return setup_error(str(e))
    if not a.weights:
        if not os.path.isfile(a.fk_model):
            return setup_error(f"fk_model not found: {a.fk_model} (build it, e.g. cmake --build build/gpu "
                               f"--target fk_model, or pass --fk-model PATH, or --weights/--dump)")
        if not a.fk_model.endswith(".py") and not os.access(a.fk_model, os.X_OK):
            return setup_error(f"fk_model is not executable: {a.fk_model}")
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        return setup_error("--device cuda but torch sees no GPU")
    if a.config_root:
        os.environ["FK_CONFIG_ROOT"] = os.path.abspath(a.config_root)
    hfmodel.set_fp32_exact()
    os.makedirs(a.out, exist_ok=True)
    jsonl = os.path.join(a.out, "parity.jsonl")
    open(jsonl, "w").close()
    results = []
    for arch in archs:
        workdir = os.path.join(a.out, hfmodel.slug(arch))
        try:
            res = check_arch(a, arch, workdir)
        except hfmodel.SetupError as e:
            return setup_error(str(e))
        finally:
            if not a.weights and not a.keep_files:
                for f in ("weights.safetensors", "weights.vision.safetensors", "dump.safetensors"):
                    p = os.path.join(workdir, f)
                    if os.path.exists(p):
                        os.remove(p)
            free()
        results.append(res)
        print_table(res)
        with open(jsonl, "a") as f:
            f.write(json.dumps(res) + "\n")
    write_md(os.path.join(a.out, "parity.md"), results, a)
    ok = all(r["pass"] for r in results)
    log(f"\nhf_parity: {sum(r['pass'] for r in results)} passed, {sum(not r['pass'] for r in results)} failed "
        f"-> {a.out}/parity.jsonl, {a.out}/parity.md")
    return EXIT_OK if ok else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
