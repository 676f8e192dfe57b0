"""Parity of fk_model's encoders (embedding models: `fk_model --dump` of an L4 task behind
fk::EncoderModel, e.g. BERT) against HuggingFace transformers' own model class (AutoModel: BertModel
with its pooler), same weights. Called by hf_parity.py for configs whose model_type is an encoder's.

Per sequence (batch 1, no padding; ours ran them as one packed variable-length batch), with the
token types fk_model used (the second half of each sequence type 1: a sentence pair):
  a) the hidden states after every layer     (prefill.layer.{i} vs hidden_states[i + 1])
  b) the pooled vector of each sequence      (pooled vs pooler_output; with a pooling choice, the dump's
                                             "pooling" metadata, e.g. "cls+normalize": that pooling of
                                             HF's last hidden state, vLLM's PoolerConfig)
Vision encoders (ViT: `fk_model --dump` of an L4 task behind fk::ImageEncoderModel) against
ViTModel with its pooler, same weights and the dump's pixel_values (one batch of images; images of
another size than the config's image_size, a resolution served by `add --image-size`, with
interpolate_pos_encoding=True):
  a) the hidden states after every layer     (prefill.layer.{i} vs hidden_states[i + 1], flattened)
  b) the last hidden state (final LayerNorm) (last_hidden_state vs last_hidden_state)
  c) the pooled vector of each image         (pooled vs pooler_output)
Dynamic-resolution vision towers (Qwen2-VL's: `fk_model --dump` of an L4 task behind
fk::VisionTowerModel) against Qwen2VisionTransformerPretrainedModel built from the config's
vision_config, same weights and the dump's patch rows and grid_thw (images of several sizes and a
two-frame video in one batch):
  a) the hidden states after every block     (prefill.layer.{i} vs hidden_states[i])
  b) the blocks' output                      (last_hidden_state vs last_hidden_state)
  c) the merged tokens                       (merged vs pooler_output)
A BERT decoder with cross-attention (bert2bert's: is_decoder, add_cross_attention) is checked the
same way with the dump's encoder_hidden_states (one sequence of them per prompt) passed to BertModel.
Bounds as for the causal LMs (docs/parity.md): ours-vs-fp32 <= max(factor x HF-bf16-vs-fp32, floor).
"""
import os
import shlex
import time

ENCODER_MODEL_TYPES = ("bert", "xlm-roberta", "vit", "dinov3_vit", "siglip_vision_model", "qwen2_vl_vision", "qwen2_5_vl_vision",
                       "qwen3_vl_vision", "siglip2_vision_model")
TOWER_MODEL_TYPES = ("qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision", "siglip2_vision_model")


def tower_classes(model_type):
    """(config class, model class) of a dynamic-resolution vision tower's model type."""
    if model_type == "siglip2_vision_model":
        from transformers.models.siglip2.configuration_siglip2 import Siglip2VisionConfig
        from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionModel
        return Siglip2VisionConfig, Siglip2VisionModel
    if model_type == "qwen3_vl_vision":
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel
        return Qwen3VLVisionConfig, Qwen3VLVisionModel
    if model_type == "qwen2_5_vl_vision":
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
        return Qwen2_5_VLVisionConfig, Qwen2_5_VisionTransformerPretrainedModel
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel
    return Qwen2VLVisionConfig, Qwen2VisionTransformerPretrainedModel
VISION_MODEL_TYPES = ("vit", "dinov3_vit", "siglip_vision_model")


def encoder_model_type(arch, root):
    """The config's model_type when it is an encoder's, else None."""
    import json
    import hfmodel

    with open(hfmodel.config_path(arch, root)) as f:
        mt = hfmodel.config_component(json.load(f), arch, root).get("model_type")
    return mt if mt in ENCODER_MODEL_TYPES else None


def load_encoder_config(arch, layers, root):
    """transformers config (AutoConfig.for_model, nothing from the hub) with num_hidden_layers set."""
    import hfmodel

    if encoder_model_type(arch, root) in TOWER_MODEL_TYPES:
        return load_tower_config(arch, layers, root)
    return hfmodel.load_config(arch, layers, root, supported=ENCODER_MODEL_TYPES)


def build_encoder(cfg, dtype, device, attn, pooler=True):
    """BertModel / XLMRobertaModel / ViTModel in eval mode, random init on `device`; with its pooler
    unless `pooler` is False (an embedding model served with a pooling choice has none)."""
    import torch
    from transformers import AutoModel

    kw = {} if pooler else {"add_pooling_layer": False}
    with torch.device(device):
        m = AutoModel.from_config(cfg, dtype=dtype, attn_implementation=attn, **kw)
    m.eval()
    m.requires_grad_(False)
    return m


def build_from_checkpoint(cfg, W, dtype, device, attn, pooler=True):
    """The model as transformers loads a published checkpoint: W (the hub's parameter names, as
    fk_model writes them) saved as model.safetensors beside the config and read back by
    AutoModel.from_pretrained, whose checkpoint conversion maps the hub's names onto the installed
    version's modules (transformers 5 renamed ViT's: encoder.layer.N.attention.attention.query ->
    layers.N.attention.q_proj). Every tensor must be used and every parameter loaded (WeightsError)."""
    import tempfile
    import hfmodel
    from safetensors.torch import save_file
    from transformers import AutoModel

    kw = {} if pooler else {"add_pooling_layer": False}
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        save_file({k: v.contiguous() for k, v in W.items()}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        m, info = AutoModel.from_pretrained(d, dtype=dtype, attn_implementation=attn, output_loading_info=True, **kw)
    problems = [f"{k} {len(v)}: {sorted(v)[:6]}" for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v]
    if problems:
        raise hfmodel.WeightsError("weights do not load as a checkpoint: " + "; ".join(problems))
    m.to(device)
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


def check_vision_dump(D, n_layers, H, P):
    """Shapes and keys of an image-encoder dump; returns (images, tokens per image)."""
    from hf_parity import ContractError

    for k in ("pixel_values", "last_hidden_state", "pooled"):
        if k not in D:
            raise ContractError(f"missing {k}")
    px = D["pixel_values"]
    if px.dim() != 4:
        raise ContractError(f"pixel_values: expected [B, C, S, S], got {tuple(px.shape)}")
    B = px.shape[0]
    T = D["last_hidden_state"].shape[0] // max(B, 1)
    if tuple(D["last_hidden_state"].shape) != (B * T, H):
        raise ContractError(f"last_hidden_state: expected [{B} x tokens, {H}], got {tuple(D['last_hidden_state'].shape)}")
    for i in range(n_layers):
        k = f"prefill.layer.{i}"
        if k not in D or tuple(D[k].shape) != (B * T, H):
            raise ContractError(f"{k}: expected [{B * T}, {H}], got {tuple(D[k].shape) if k in D else 'nothing'}")
    if tuple(D["pooled"].shape) != (B, P):
        raise ContractError(f"pooled: expected [{B}, {P}], got {tuple(D['pooled'].shape)}")
    extra = sorted(k for k in D if k.startswith("prefill.layer.") and int(k.rsplit(".", 1)[1]) >= n_layers)
    if extra:
        raise ContractError(f"dump has layers beyond {n_layers}: {extra[:3]}")
    return B, T


def hf_vision_run(model, D, device):
    """(hidden states after each layer [B*T, H] fp32 CPU, last hidden state [B*T, H], pooled [B, P])."""
    import torch

    px = D["pixel_values"].to(device=device, dtype=model.dtype)
    # Images served at another resolution than the checkpoint's (`add --image-size`): HF resizes the
    # position embeddings (bicubic) when asked to, as ours do.
    kw = {"interpolate_pos_encoding": True} if px.shape[-1] != model.config.image_size else {}
    with torch.no_grad():
        out = model(pixel_values=px, output_hidden_states=True, **kw)
    n = model.config.num_hidden_layers
    flat = lambda t: t.reshape(-1, t.shape[-1]).float().cpu()  # noqa: E731
    layers = [flat(out.hidden_states[i + 1]) for i in range(n)]
    res = (layers, flat(out.last_hidden_state), out.pooler_output.float().cpu())
    del out
    return res


def pool_choice(last, pooling):
    """The pooling choice ("cls", "mean", "last", each with an optional "+normalize") of one
    sequence's final hidden states [L, H] (fp32), as vLLM's pooler computes it: [H]."""
    import torch

    kind, _, norm = pooling.partition("+")
    if kind == "cls":
        v = last[0]
    elif kind == "last":
        v = last[-1]
    elif kind == "mean":
        v = last.mean(dim=0)
    else:
        raise ValueError(f"unknown pooling {pooling!r}")
    return torch.nn.functional.normalize(v, dim=-1) if norm == "normalize" else v


HEAD_PREFIXES = ("colbert_linear.", "sparse_linear.")


def split_heads(W):
    """(backbone weights, per-token head weights): the heads (Note [Embedding heads]:
    colbert_linear.*, sparse_linear.*, vLLM's names) are not BertModel parameters."""
    heads = {k: v for k, v in W.items() if k.startswith(HEAD_PREFIXES)}
    return {k: v for k, v in W.items() if k not in heads}, heads


def token_heads(last, heads, dtype, drop):
    """The per-token heads of one sequence from its final hidden states [L, H] (the model's dtype,
    as FlagEmbedding and ColBERT run them; fk runs them in the model dtype too): (normalised token
    vectors [L', d] fp32 or None, lexical weights [L''] fp32 or None); `drop`: the vectors skip the
    first token, the weights the first and the last (BGE-M3)."""
    import torch

    vecs = weights = None
    if "colbert_linear.weight" in heads:
        w = heads["colbert_linear.weight"].to(last.device, dtype)
        b = heads.get("colbert_linear.bias")
        p = torch.nn.functional.linear(last, w, None if b is None else b.to(last.device, dtype))
        vecs = torch.nn.functional.normalize(p.float(), dim=-1)[1 if drop else 0:].cpu()
    if "sparse_linear.weight" in heads:
        w = heads["sparse_linear.weight"].to(last.device, dtype)
        b = heads.get("sparse_linear.bias")
        s = torch.relu(torch.nn.functional.linear(last, w, None if b is None else b.to(last.device, dtype))).float()[:, 0]
        weights = (s[1:-1] if drop else s).cpu()
    return vecs, weights


def encoder_side(D, B):
    """A decoder dump's encoder output (bert2bert: cross-attention): (states [Tk, H] fp32, offsets
    [B + 1]) or None for an encoder's dump."""
    from hf_parity import ContractError

    if "encoder_hidden_states" not in D:
        return None
    cu = [int(x) for x in D["encoder_cu_seqlens"].tolist()]
    if len(cu) != B + 1 or cu[0] != 0 or any(cu[i + 1] <= cu[i] for i in range(B)) or cu[-1] != D["encoder_hidden_states"].shape[0]:
        raise ContractError(f"encoder_cu_seqlens {cu} does not describe encoder_hidden_states {tuple(D['encoder_hidden_states'].shape)}")
    return D["encoder_hidden_states"], cu


def hf_encoder_run(model, D, lens, device, pooling="pooler", heads=None, drop=False):
    """Per sequence: (hidden states after each layer [T, H] fp32 CPU, concatenated over sequences;
    pooled [B, H] fp32 CPU: the model's pooler_output, or the pooling choice over the last layer).
    A decoder with cross-attention gets its sequence's encoder output (the dump's, in the model's
    dtype: the values fk_model used) as encoder_hidden_states, without a cache."""
    import torch

    ids, tt = D["input_ids"], D["token_type_ids"]
    n = model.config.num_hidden_layers
    layers = [[] for _ in range(n)]
    pooled, vecs, weights = [], [], []
    off = 0
    enc = encoder_side(D, len(lens))
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        for b, L in enumerate(lens):
            kw = {}
            if enc is not None:
                states, ecu = enc
                kw = {"encoder_hidden_states": states[ecu[b]:ecu[b + 1]][None].to(device, dtype), "use_cache": False}
            out = model(input_ids=ids[off:off + L][None].to(device), token_type_ids=tt[off:off + L][None].to(device),
                        output_hidden_states=True, **kw)
            off += L
            for i in range(n):
                layers[i].append(out.hidden_states[i + 1][0].float().cpu())
            if pooling == "pooler":
                pooled.append(out.pooler_output[0].float().cpu())
            else:  # from the model-dtype hidden states, in fp32 (as vLLM pools)
                pooled.append(pool_choice(out.last_hidden_state[0].float(), pooling).cpu())
            if heads:
                v, w = token_heads(out.last_hidden_state[0], heads, dtype, drop)
                vecs.append(v)
                weights.append(w)
            del out
    cat = lambda xs: torch.cat(xs) if xs and xs[0] is not None else None
    return [torch.cat(x) for x in layers], torch.stack(pooled), cat(vecs), cat(weights)


def load_tower_config(arch, layers, root):
    """Qwen2VLVisionConfig / Qwen2_5_VLVisionConfig from the config's vision_config (transformers registers
    no AutoConfig for the sub-configs), depth set to `layers`; the legacy keys transformers ignores are
    dropped (the generator checked that they agree with the ones it reads)."""
    import json
    import hfmodel

    with open(hfmodel.config_path(arch, root)) as f:
        d = hfmodel.config_component(json.load(f), arch, root)
    config_cls, _ = tower_classes(d.get("model_type"))
    for k in ("model_type", "torch_dtype", "dtype", "in_chans", "spatial_patch_size", "transformers_version", "architectures"):
        d.pop(k, None)
    key = "num_hidden_layers" if config_cls.__name__ == "Siglip2VisionConfig" else "depth"
    full = int(d.get(key, getattr(config_cls(), key)))
    n = full if layers is None else int(layers)
    if not 1 <= n <= full:
        raise hfmodel.SetupError(f"{arch}: --layers {n} out of range 1..{full}")
    d[key] = n
    return config_cls(**d)


def naflex_inputs(px, grids, device, dtype):
    """SigLIP-2 NaFlex's HF inputs from packed patch rows [T, K] of grids [(1, h, w)]: pixel_values padded to
    the longest image [B, N, K], pixel_attention_mask [B, N] (1 at an image's patches), spatial_shapes [B, 2]."""
    import torch

    n = max(h * w for _, h, w in grids)
    pv = torch.zeros(len(grids), n, px.shape[1], device=device, dtype=dtype)
    mask = torch.zeros(len(grids), n, device=device, dtype=torch.long)
    off = 0
    for i, (_, h, w) in enumerate(grids):
        pv[i, :h * w] = px[off:off + h * w].to(device=device, dtype=dtype)
        mask[i, :h * w] = 1
        off += h * w
    shapes = torch.tensor([[h, w] for _, h, w in grids], device=device, dtype=torch.long)
    return pv, mask, shapes


def naflex_valid_rows(x, grids):
    """The rows of HF's padded [B, N, E] output at each image's patches, packed [T, E] in the processor's order."""
    import torch

    return torch.cat([x[i, :h * w] for i, (_, h, w) in enumerate(grids)])


def check_tower_dump(D, n_layers, E, O, K, m):
    """Shapes and keys of a vision-tower dump; returns the grids [(t, h, w)]."""
    from hf_parity import ContractError

    for k in ("pixel_values", "grid_thw", "last_hidden_state", "merged"):
        if k not in D:
            raise ContractError(f"missing {k}")
    grids = [tuple(int(x) for x in g) for g in D["grid_thw"].tolist()]
    T = sum(t * h * w for t, h, w in grids)
    if tuple(D["pixel_values"].shape) != (T, K):
        raise ContractError(f"pixel_values: expected [{T}, {K}] for grids {grids}, got {tuple(D['pixel_values'].shape)}")
    for k in [f"prefill.layer.{i}" for i in range(n_layers)] + ["last_hidden_state"]:
        if k not in D or tuple(D[k].shape) != (T, E):
            raise ContractError(f"{k}: expected [{T}, {E}], got {tuple(D[k].shape) if k in D else 'nothing'}")
    if tuple(D["merged"].shape) != (T // (m * m), O):
        raise ContractError(f"merged: expected [{T // (m * m)}, {O}], got {tuple(D['merged'].shape)}")
    return grids


def check_tower(a, arch, workdir, res, mdt, tag):
    """check_encoder for a dynamic-resolution vision tower (Qwen2-VL's, Qwen2.5-VL's). Qwen2.5-VL's
    hidden states are in window order on both sides (HF's last_hidden_state and block outputs; Note
    [Vision windows]); the merged tokens in the processor's order."""
    import torch
    import hfmodel
    import st
    from hf_parity import ContractError, free, rel_entry, run_fk_model

    res["runner"] = "vision-tower"
    t_start = time.time()
    layers = a.layers if a.layers is not None else 4
    os.makedirs(workdir, exist_ok=True)
    wpath, dpath = os.path.join(workdir, "weights.safetensors"), os.path.join(workdir, "dump.safetensors")
    for p in (wpath, dpath):
        if os.path.exists(p):
            os.remove(p)
    try:
        cmd, dt = run_fk_model(a, arch, layers, wpath, dpath, os.path.join(workdir, "fk_model.log"))
        res["fk_model_cmd"], res["fk_model_s"] = shlex.join(cmd), round(dt, 2)
        W, wmeta = st.load(wpath)
        cfg = load_tower_config(arch, layers, a.config_root)
        res["layers"] = layers
        hfmodel.check_dtypes(W, mdt, f"weights {wpath} ({arch} is served in {hfmodel.dtype_name(mdt)})")
        D, dmeta = st.load(dpath)
        if dmeta.get("runner") != "vision-tower":
            raise ContractError(f"dump {dpath} is not a vision-tower dump (runner={dmeta.get('runner')!r})")
        naflex = cfg.model_type == "siglip2_vision_model"
        if naflex:  # SigLIP-2 NaFlex: patch rows of C * P * P, no merger (merged = last_hidden_state), one vector per image
            K, E, O = cfg.num_channels * cfg.patch_size ** 2, cfg.hidden_size, cfg.hidden_size
        else:
            K = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
            # Qwen2.5-VL's and Qwen3-VL's width is hidden_size, the merger's out_hidden_size; Qwen2-VL's embed_dim, hidden_size.
            E, O = (cfg.embed_dim, cfg.hidden_size) if cfg.model_type == "qwen2_vl_vision" else (cfg.hidden_size, cfg.out_hidden_size)
        grids = check_tower_dump(D, layers, E, O, K, 1 if naflex else cfg.spatial_merge_size)
        if naflex and ("pooled" not in D or tuple(D["pooled"].shape) != (len(grids), E)):
            raise ContractError(f"pooled: expected [{len(grids)}, {E}], got {tuple(D['pooled'].shape) if 'pooled' in D else 'nothing'}")
        _, model_cls = tower_classes(cfg.model_type)
    except (hfmodel.WeightsError, ContractError, st.SafetensorsError, OSError) as e:
        res["errors"].append(f"dump/weights: {e}")
        return res
    res["grids"] = grids
    runs = {}
    for name, dtype in ((tag, mdt), ("fp32", torch.float32)):
        t0 = time.time()
        try:
            if naflex:  # loaded as a checkpoint (the hub's names carry no vision_model. prefix)
                model = build_from_checkpoint(cfg, W, dtype, a.device, a.attn)  # W is in mdt (check_dtypes above)
            else:
                with torch.device(a.device):
                    model = model_cls._from_config(cfg, dtype=dtype, attn_implementation=a.attn)
                model.eval()
                model.requires_grad_(False)
                hfmodel.check_and_load(model, W, tied=False, dtype=mdt)
        except hfmodel.WeightsError as e:
            res["errors"].append(str(e))
            return res
        with torch.no_grad():
            if naflex:
                pv, mask, shapes = naflex_inputs(D["pixel_values"], grids, a.device, dtype)
                out = model(pixel_values=pv, pixel_attention_mask=mask, spatial_shapes=shapes, output_hidden_states=True)
                out.hidden_states = tuple(naflex_valid_rows(h, grids) for h in out.hidden_states)
                out.last_hidden_state = naflex_valid_rows(out.last_hidden_state, grids)
            else:
                px = D["pixel_values"].to(device=a.device, dtype=dtype)
                thw = torch.tensor(grids, dtype=torch.long, device=a.device)
                out = model(hidden_states=px, grid_thw=thw, output_hidden_states=True)
        # Qwen3-VL's deepstack features: HF's of the blocks the reduced tower has (transformers 5: deepstack_features).
        ds = [d.float().cpu() for d in (getattr(out, "deepstack_features", None) or [])]
        hs = list(out.hidden_states)
        if len(hs) == layers + 1:  # the patch embedding first, where a version records it
            hs = hs[1:]
        if len(hs) != layers:
            res["errors"].append(f"HF returned {len(hs)} hidden states for {layers} blocks")
            return res
        runs[name] = ([h.reshape(-1, h.shape[-1]).float().cpu() for h in hs], out.last_hidden_state.float().cpu(),
                      out.pooler_output.float().cpu(), ds)
        del out
        free(model)
        res[f"hf_{name}_s"] = round(time.time() - t0, 2)
    del W
    (h16_layers, h16_last, h16_merged, h16_ds), (f32_layers, f32_last, f32_merged, f32_ds) = runs[tag], runs["fp32"]
    for i in range(layers):
        res["checks"].append(rel_entry(a, tag, f"layer.{i}", D[f"prefill.layer.{i}"], h16_layers[i], f32_layers[i]))
    res["checks"].append(rel_entry(a, tag, "last_hidden_state", D["last_hidden_state"], h16_last, f32_last))
    # HF's pooler_output: the merged tokens (Qwen towers), SigLIP-2's head vectors (its merged rows are last_hidden_state)
    res["checks"].append(rel_entry(a, tag, "pooled" if naflex else "merged", D["pooled" if naflex else "merged"], h16_merged, f32_merged))
    ours_ds = sorted((k for k in D if k.startswith("deepstack.")), key=lambda k: int(k.split(".")[1]))
    if len(ours_ds) != len(h16_ds):
        res["errors"].append(f"deepstack features: {len(ours_ds)} in the dump, {len(h16_ds)} from HF")
    for j, k in enumerate(ours_ds[:len(h16_ds)]):
        res["checks"].append(rel_entry(a, tag, k, D[k], h16_ds[j], f32_ds[j]))
    res["pass"] = not res["errors"] and all(c["pass"] for c in res["checks"])
    res["total_s"] = round(time.time() - t_start, 2)
    free(runs, D)
    return res


def check_encoder(a, arch, workdir, res):
    """Fills `res` (hf_parity's result dict) for an encoder and returns it."""
    import torch
    import hfmodel
    import st
    from hf_parity import ContractError, free, rel_entry, run_fk_model

    mdt = hfmodel.model_dtype(arch, a.config_root)
    if encoder_model_type(arch, a.config_root) in TOWER_MODEL_TYPES:
        return check_tower(a, arch, workdir, res, mdt, hfmodel.dtype_tag(mdt))
    tag = hfmodel.dtype_tag(mdt)
    res["runner"] = "embedding"
    vision = False
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
        vision = cfg.model_type in VISION_MODEL_TYPES
        want_runner = "image-encoder" if vision else "embedding"
        if dmeta.get("runner") != want_runner:
            raise ContractError(f"dump {dpath} is not an {want_runner} dump (runner={dmeta.get('runner')!r})")
        pooling = dmeta.get("pooling", "pooler")
        W, heads = split_heads(W)
        drop = dmeta.get("drop_special_tokens", "0") == "1"
        want_heads = {"token_vectors": int(dmeta.get("multi_vector", "0")) > 0, "lexical_weights": dmeta.get("sparse", "0") == "1"}
        for k, want in want_heads.items():
            if want != (k in D):
                raise ContractError(f"dump {dpath}: {k} {'missing' if want else 'present'} (metadata multi_vector="
                                    f"{dmeta.get('multi_vector')!r}, sparse={dmeta.get('sparse')!r})")
        if want_heads["token_vectors"] != ("colbert_linear.weight" in heads) or want_heads["lexical_weights"] != ("sparse_linear.weight" in heads):
            raise ContractError(f"weights {wpath}: head weights {sorted(heads)} do not match the dump's heads {want_heads}")
        if vision:
            pool = getattr(cfg, "pooler_output_size", None) or cfg.hidden_size
            images, tokens = check_vision_dump(D, layers, cfg.hidden_size, pool)
        else:
            lens = check_dump(D, layers, cfg.hidden_size)
    except (hfmodel.WeightsError, ContractError, st.SafetensorsError, OSError) as e:
        res["errors"].append(f"dump/weights: {e}")
        return res
    if vision:
        res["runner"] = "image-encoder"
        res["images"], res["tokens_per_image"] = images, tokens
    else:
        res["prompt_lens"] = lens
        res["pooling"] = pooling
        if "encoder_hidden_states" in D:
            res["cross_attention"] = True
            res["encoder_lens"] = [int(b - a) for a, b in zip(D["encoder_cu_seqlens"].tolist()[:-1], D["encoder_cu_seqlens"].tolist()[1:])]
    runs = {}
    for name, dtype in ((tag, mdt), ("fp32", torch.float32)):
        t0 = time.time()
        try:
            if vision:  # the hub's names, loaded through transformers' checkpoint conversion
                model = build_from_checkpoint(cfg, W, dtype, a.device, a.attn)
            else:
                model = build_encoder(cfg, dtype, a.device, a.attn, pooler=pooling == "pooler")
                hfmodel.check_and_load(model, W, tied=False, dtype=mdt)
        except hfmodel.WeightsError as e:
            res["errors"].append(str(e))
            return res
        runs[name] = hf_vision_run(model, D, a.device) if vision else hf_encoder_run(model, D, lens, a.device, pooling, heads, drop)
        free(model)
        res[f"hf_{name}_s"] = round(time.time() - t0, 2)
    del W
    if vision:
        (h16_layers, h16_last, h16_pool), (f32_layers, f32_last, f32_pool) = runs[tag], runs["fp32"]
    else:
        (h16_layers, h16_pool, h16_vec, h16_w), (f32_layers, f32_pool, f32_vec, f32_w) = runs[tag], runs["fp32"]

    for i in range(layers):
        res["checks"].append(rel_entry(a, tag, f"layer.{i}", D[f"prefill.layer.{i}"], h16_layers[i], f32_layers[i]))
    if vision:
        res["checks"].append(rel_entry(a, tag, "last_hidden_state", D["last_hidden_state"], h16_last, f32_last))
    res["checks"].append(rel_entry(a, tag, "pooled", D["pooled"], h16_pool, f32_pool))
    if not vision:
        for name, h16, f32 in (("token_vectors", h16_vec, f32_vec), ("lexical_weights", h16_w, f32_w)):
            if name not in D:
                continue
            if tuple(D[name].shape) != tuple(f32.shape):
                res["errors"].append(f"{name}: fk_model {tuple(D[name].shape)} vs HF {tuple(f32.shape)}")
                continue
            res["checks"].append(rel_entry(a, tag, name, D[name], h16, f32))
    res["pass"] = not res["errors"] and all(c["pass"] for c in res["checks"])
    res["total_s"] = round(time.time() - t_start, 2)
    free(runs, D)
    return res
