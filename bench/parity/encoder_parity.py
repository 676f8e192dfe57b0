"""Parity of fk_model's encoders (embedding models: `fk_model --dump` of an L4 task behind
fk::EncoderModel, e.g. BERT) against HuggingFace transformers' own model class (AutoModel: BertModel
with its pooler), same weights. Called by hf_parity.py for configs whose model_type is an encoder's.

Per sequence (batch 1, no padding; ours ran them as one packed variable-length batch), with the
token types fk_model used (the second half of each sequence type 1: a sentence pair):
  a) the hidden states after every layer     (prefill.layer.{i} vs hidden_states[i + 1])
  b) the pooled vector of each sequence      (pooled vs pooler_output)
Bounds as for the causal LMs (docs/parity.md): ours-vs-fp32 <= max(factor x HF-bf16-vs-fp32, floor).
"""
import os
import shlex
import time

ENCODER_MODEL_TYPES = ("bert", "xlm-roberta")


def encoder_model_type(arch, root):
    """The config's model_type when it is an encoder's, else None."""
    import json
    import hfmodel

    with open(hfmodel.config_path(arch, root)) as f:
        mt = json.load(f).get("model_type")
    return mt if mt in ENCODER_MODEL_TYPES else None


def load_encoder_config(arch, layers, root):
    """transformers config (AutoConfig.for_model, nothing from the hub) with num_hidden_layers set."""
    import hfmodel

    return hfmodel.load_config(arch, layers, root, supported=ENCODER_MODEL_TYPES)


def build_encoder(cfg, dtype, device, attn):
    """BertModel / XLMRobertaModel (with its pooler) in eval mode, random init on `device`."""
    import torch
    from transformers import AutoModel

    with torch.device(device):
        m = AutoModel.from_config(cfg, dtype=dtype, attn_implementation=attn)
    m.eval()
    m.requires_grad_(False)
    return m


def check_dump(D, n_layers, H):
    """Shapes and keys of an encoder dump; returns the sequence lengths."""
    from hf_parity import ContractError

    for k in ("input_ids", "token_type_ids", "cu_seqlens", "pooled"):
        if k not in D:
            raise ContractError(f"missing {k}")
    cu = [int(x) for x in D["cu_seqlens"].tolist()]
    lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    T, B = cu[-1], len(lens)
    if cu[0] != 0 or any(n < 1 for n in lens) or D["input_ids"].numel() != T or D["token_type_ids"].numel() != T:
        raise ContractError(f"cu_seqlens {cu} does not describe input_ids of {D['input_ids'].numel()} tokens")
    for i in range(n_layers):
        k = f"prefill.layer.{i}"
        if k not in D or tuple(D[k].shape) != (T, H):
            raise ContractError(f"{k}: expected [{T}, {H}], got {tuple(D[k].shape) if k in D else 'nothing'}")
    if tuple(D["pooled"].shape) != (B, H):
        raise ContractError(f"pooled: expected [{B}, {H}], got {tuple(D['pooled'].shape)}")
    extra = sorted(k for k in D if k.startswith("prefill.layer.") and int(k.rsplit(".", 1)[1]) >= n_layers)
    if extra:
        raise ContractError(f"dump has layers beyond {n_layers}: {extra[:3]}")
    return lens


def hf_encoder_run(model, D, lens, device):
    """Per sequence: (hidden states after each layer [T, H] fp32 CPU, concatenated over sequences;
    pooled [B, H] fp32 CPU)."""
    import torch

    ids, tt = D["input_ids"], D["token_type_ids"]
    n = model.config.num_hidden_layers
    layers = [[] for _ in range(n)]
    pooled = []
    off = 0
    with torch.no_grad():
        for L in lens:
            out = model(input_ids=ids[off:off + L][None].to(device), token_type_ids=tt[off:off + L][None].to(device),
                        output_hidden_states=True)
            off += L
            for i in range(n):
                layers[i].append(out.hidden_states[i + 1][0].float().cpu())
            pooled.append(out.pooler_output[0].float().cpu())
            del out
    return [torch.cat(x) for x in layers], torch.stack(pooled)


def check_encoder(a, arch, workdir, res):
    """Fills `res` (hf_parity's result dict) for an encoder and returns it."""
    import torch
    import hfmodel
    import st
    from hf_parity import ContractError, free, rel_entry, run_fk_model

    mdt = hfmodel.model_dtype(arch, a.config_root)
    tag = hfmodel.dtype_tag(mdt)
    res["runner"] = "embedding"
    t_start = time.time()
    if a.weights:
        wpath, dpath = a.weights, a.dump
        W, wmeta = st.load(wpath)
        layers = a.layers if a.layers is not None else int(wmeta.get("layers", 0)) or None
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
        for k, want in (("arch", arch), ("layers", str(layers)), ("seed", str(a.seed))):
            if wmeta.get(k) != want:
                res["errors"].append(f"weights metadata {k}={wmeta.get(k)!r}, want {want!r}")
    cfg = load_encoder_config(arch, layers, a.config_root)
    layers = cfg.num_hidden_layers
    res["layers"] = layers
    try:
        hfmodel.check_dtypes(W, mdt, f"weights {wpath} ({arch} is served in {hfmodel.dtype_name(mdt)})")
        D, dmeta = st.load(dpath)
        if dmeta.get("runner") != "embedding":
            raise ContractError(f"dump {dpath} is not an encoder dump (runner={dmeta.get('runner')!r})")
        lens = check_dump(D, layers, cfg.hidden_size)
    except (hfmodel.WeightsError, ContractError, st.SafetensorsError, OSError) as e:
        res["errors"].append(f"dump/weights: {e}")
        return res
    res["prompt_lens"] = lens
    runs = {}
    for name, dtype in ((tag, mdt), ("fp32", torch.float32)):
        t0 = time.time()
        model = build_encoder(cfg, dtype, a.device, a.attn)
        try:
            hfmodel.check_and_load(model, W, tied=False, dtype=mdt)
        except hfmodel.WeightsError as e:
            res["errors"].append(str(e))
            free(model)
            return res
        runs[name] = hf_encoder_run(model, D, lens, a.device)
        free(model)
        res[f"hf_{name}_s"] = round(time.time() - t0, 2)
    del W
    (h16_layers, h16_pool), (f32_layers, f32_pool) = runs[tag], runs["fp32"]

    for i in range(layers):
        res["checks"].append(rel_entry(a, tag, f"layer.{i}", D[f"prefill.layer.{i}"], h16_layers[i], f32_layers[i]))
    res["checks"].append(rel_entry(a, tag, "pooled", D["pooled"], h16_pool, f32_pool))
    res["pass"] = not res["errors"] and all(c["pass"] for c in res["checks"])
    res["total_s"] = round(time.time() - t_start, 2)
    free(runs, D)
    return res
