#!/usr/bin/env python3
"""Performance peers for the image-encoder (vision transformer) L4 benchmark: HF transformers and timm.

Times a vision encoder built from the repo's hf_configs/ (ViTModel with its pooler, in the model dtype)
with the same weights `fk_model --save-weights` wrote, on the batches `fk_model --bench` times for image
encoders: B random images (N(0, 1) pixels, the config's image size), one forward (patch embedding ..
final LayerNorm) plus the pooler per call; images/s = B / median time (CUDA events, --iters after warm-up).
  hf_eager   : model(pixel_values) under torch.no_grad, attn_implementation=sdpa.
  hf_compile : torch.compile(model, fullgraph=True, dynamic=False) (default mode: one static graph per batch), warmed up on each timed batch first;
               a recompile inside the timed iterations is an error, not a figure.
  timm       : timm's VisionTransformer of the same dimensions (fused qkv, global_pool='token',
               no head) with the same weights mapped from HF names; forward_features + the class
               token (timm has no pooler dense: its time is a lower bound of ours' work). Before
               timing, its last hidden state is compared with HF's (relative L2 logged and recorded
               as "check_rel_l2"), so that a mis-mapped weight cannot pass unnoticed.
  timm_compile: the same under torch.compile.
Peak GPU memory (torch.cuda.max_memory_allocated, weights included) is recorded per row.

    python3 bench/peers/hf_vision_perf.py --arch google/vit-base-patch16-224-in21k --weights W.safetensors \\
        --modes hf_eager,hf_compile,timm,timm_compile --batches 1,8,32 --jsonl OUT.jsonl

One JSON line per (peer, batch): {"peer", "arch", "layers", "mode": "images", "batch", "ms", "images_per_s",
"peak_mem_gib", "torch", "transformers", "timm", "gpu"; "error" when that measurement failed}.
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
MODES = ("hf_eager", "hf_compile", "timm", "timm_compile")


def log(msg):
    print(f"[hf_vision_perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def timm_from_hf(cfg, W, dtype):
    """timm VisionTransformer with cfg's dimensions and the HF-named weights W (a dict of tensors)."""
    if cfg.model_type != "vit":
        raise ValueError(f"model_type {cfg.model_type!r}: the timm peer maps HF ViT's weights only")
    import functools
    import torch
    from timm.models.vision_transformer import VisionTransformer

    act = {"gelu": torch.nn.GELU, "gelu_new": functools.partial(torch.nn.GELU, approximate="tanh"),
           "gelu_pytorch_tanh": functools.partial(torch.nn.GELU, approximate="tanh")}.get(cfg.hidden_act)
    if act is None:
        raise ValueError(f"hidden_act {cfg.hidden_act!r}: no timm equivalent mapped")
    m = VisionTransformer(img_size=cfg.image_size, patch_size=cfg.patch_size, in_chans=cfg.num_channels, num_classes=0,
                          global_pool="token", embed_dim=cfg.hidden_size, depth=cfg.num_hidden_layers,
                          num_heads=cfg.num_attention_heads, mlp_ratio=cfg.intermediate_size / cfg.hidden_size,
                          qkv_bias=cfg.qkv_bias, norm_layer=functools.partial(torch.nn.LayerNorm, eps=cfg.layer_norm_eps),
                          act_layer=act)
    sd = {"cls_token": W["embeddings.cls_token"], "pos_embed": W["embeddings.position_embeddings"],
          "patch_embed.proj.weight": W["embeddings.patch_embeddings.projection.weight"],
          "patch_embed.proj.bias": W["embeddings.patch_embeddings.projection.bias"],
          "norm.weight": W["layernorm.weight"], "norm.bias": W["layernorm.bias"]}
    for i in range(cfg.num_hidden_layers):
        p, q = f"encoder.layer.{i}.", f"blocks.{i}."
        sd[q + "norm1.weight"], sd[q + "norm1.bias"] = W[p + "layernorm_before.weight"], W[p + "layernorm_before.bias"]
        sd[q + "norm2.weight"], sd[q + "norm2.bias"] = W[p + "layernorm_after.weight"], W[p + "layernorm_after.bias"]
        a = p + "attention.attention."
        sd[q + "attn.qkv.weight"] = torch.cat([W[a + n + ".weight"] for n in ("query", "key", "value")])
        if cfg.qkv_bias:
            sd[q + "attn.qkv.bias"] = torch.cat([W[a + n + ".bias"] for n in ("query", "key", "value")])
        sd[q + "attn.proj.weight"], sd[q + "attn.proj.bias"] = W[p + "attention.output.dense.weight"], W[p + "attention.output.dense.bias"]
        sd[q + "mlp.fc1.weight"], sd[q + "mlp.fc1.bias"] = W[p + "intermediate.dense.weight"], W[p + "intermediate.dense.bias"]
        sd[q + "mlp.fc2.weight"], sd[q + "mlp.fc2.bias"] = W[p + "output.dense.weight"], W[p + "output.dense.bias"]
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if unexpected or missing:
        raise ValueError(f"timm weight mapping: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return m.to(device="cuda", dtype=dtype).eval().requires_grad_(False)


def tower_peers(a, modes, batches):
    """A dynamic-resolution vision tower (Qwen2-VL's, Qwen2.5-VL's: HF Qwen2VisionTransformerPretrainedModel,
    Qwen2_5_VisionTransformerPretrainedModel) on the batches
    `fk_model --bench` times for towers: B images of the served size (the sidecar's image_size, else 448 px) as
    the processor's patch rows [B * g * g, C * T * P * P] plus grid_thw, one forward to the merged tokens per call.
    timm has no such tower: its modes are error rows."""
    import torch
    import encoder_parity
    import hfmodel
    import st

    try:
        dtype = hfmodel.model_dtype(a.arch, a.config_root)
        W, meta = st.load(a.weights)
        layers = int(meta["layers"]) if "layers" in meta else None
        cfg = encoder_parity.load_tower_config(a.arch, layers, a.config_root)
    except (hfmodel.SetupError, OSError, st.SafetensorsError) as e:
        log(str(e))
        return EXIT_SETUP
    naflex = cfg.model_type == "siglip2_vision_model"
    try:
        if naflex:  # SigLIP-2 NaFlex, loaded as a checkpoint (the hub's names)
            hf = encoder_parity.build_from_checkpoint(cfg, W, dtype, "cuda", "sdpa")
        else:
            with torch.device("cuda"):
                hf = encoder_parity.tower_classes(cfg.model_type)[1]._from_config(cfg, dtype=dtype, attn_implementation="sdpa")
            hf.eval()
            hf.requires_grad_(False)
            hfmodel.check_and_load(hf, W, tied=False, dtype=dtype)
    except hfmodel.WeightsError as e:
        log(str(e))
        return EXIT_SETUP
    if naflex:  # fk_model's bench grid: the position table's own (num_patches patches per image)
        g = int(round(cfg.num_patches ** 0.5))
        S, K = g * cfg.patch_size, cfg.num_channels * cfg.patch_size ** 2
    else:
        S = int(hfmodel.sidecar(a.arch, a.config_root).get("image_size", 448))
        g = S // cfg.patch_size
        K = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
    env = {"torch": torch.__version__, "transformers": __import__("transformers").__version__, "timm": None,
           "gpu": torch.cuda.get_device_name(), "dtype": hfmodel.dtype_tag(dtype), "image_size": S, "tokens_per_image": g * g}
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    for mode in modes:
        if mode.startswith("timm"):
            for b in batches:
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps({"peer": mode, "arch": a.arch, "mode": "images", "batch": b, **env,
                                        "error": "timm has no such vision tower (Qwen-VL's, SigLIP-2 NaFlex's)"}) + "\n")
            continue
        fn = torch.compile(hf, fullgraph=True, dynamic=False) if mode.endswith("compile") else hf
        for b in batches:
            row = {"peer": mode, "arch": a.arch, "layers": cfg.num_hidden_layers if naflex else cfg.depth, "mode": "images", "batch": b, **env}
            try:
                px = torch.randn(b * g * g, K, device="cuda", generator=gen, dtype=dtype)
                if naflex:  # the padded batch HF takes (no padding: every image has g x g patches), to the pooled vectors
                    pv, mask, shapes = encoder_parity.naflex_inputs(px, [(1, g, g)] * b, "cuda", dtype)
                    call = lambda: fn(pixel_values=pv, pixel_attention_mask=mask, spatial_shapes=shapes)  # noqa: E731
                else:
                    thw = torch.tensor([[1, g, g]] * b, device="cuda", dtype=torch.int64)
                    call = lambda: fn(hidden_states=px, grid_thw=thw)  # noqa: E731
                row.update(hfmodel.timed_calls(call, a.warmup, a.iters, mode.endswith("compile")))
                row["images_per_s"] = 1000.0 * b / row["ms"]
                log(f"{mode} b{b}: {row['ms']:.3f} ms, {row['images_per_s']:.1f} images/s")
            except Exception as e:  # noqa: BLE001 - one failed batch is a row with "error"
                row["error"] = f"{type(e).__name__}: {e}"
                log(f"{mode} b{b}: FAILED {row['error'][:300]}")
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, help="org/model under hf_configs/ (a vision encoder: vit, dinov3_vit, "
                    "siglip_vision_model; or a vision tower: qwen2_vl_vision, qwen2_5_vl_vision, qwen3_vl_vision, siglip2_vision_model)")
    ap.add_argument("--weights", required=True, help="safetensors from fk_model --save-weights")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config-root")
    ap.add_argument("--jsonl", required=True)
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    try:
        batches = [int(b) for b in a.batches.split(",")]
        if bad or not modes or any(b < 1 for b in batches):
            raise ValueError
    except ValueError:
        log(f"--modes {a.modes!r} (of {', '.join(MODES)}) / --batches {a.batches!r} (positive integers)")
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
    if encoder_parity.encoder_model_type(a.arch, a.config_root) in encoder_parity.TOWER_MODEL_TYPES:
        return tower_peers(a, modes, batches)
    try:
        if encoder_parity.encoder_model_type(a.arch, a.config_root) not in encoder_parity.VISION_MODEL_TYPES:
            raise hfmodel.SetupError(f"{a.arch}: not a vision encoder config (model_type one of {encoder_parity.VISION_MODEL_TYPES})")
        dtype = hfmodel.model_dtype(a.arch, a.config_root)
        W, meta = st.load(a.weights)
        layers = int(meta["layers"]) if "layers" in meta else None
        cfg = encoder_parity.load_encoder_config(a.arch, layers, a.config_root)
    except (hfmodel.SetupError, OSError, st.SafetensorsError) as e:
        log(str(e))
        return EXIT_SETUP
    try:
        hf = encoder_parity.build_from_checkpoint(cfg, W, dtype, "cuda", "sdpa")
    except hfmodel.WeightsError as e:
        log(str(e))
        return EXIT_SETUP
    try:
        import timm
        timm_version = timm.__version__
    except ImportError:
        timm_version = None
    env = {"torch": torch.__version__, "transformers": __import__("transformers").__version__, "timm": timm_version,
           "gpu": torch.cuda.get_device_name(), "dtype": hfmodel.dtype_tag(dtype)}
    g = torch.Generator(device="cuda").manual_seed(a.seed)
    # The served resolution (`fastkernels add --image-size`, recorded beside the config), else the config's.
    S, C = int(hfmodel.sidecar(a.arch, a.config_root).get("image_size", cfg.image_size)), cfg.num_channels
    interp = {"interpolate_pos_encoding": True} if S != cfg.image_size else {}
    env["image_size"] = S

    for mode in modes:
        check = None
        try:
            if mode.startswith("hf"):
                fn = hf
                call = lambda f, px: f(pixel_values=px, **interp).pooler_output  # noqa: E731
            else:
                if timm_version is None:
                    raise ImportError("timm is not installed")
                if interp:
                    raise ValueError(f"served at {S} px (checkpoint grid {cfg.image_size} px): timm resizes position embeddings "
                                     "with antialiased bicubic (a = -0.5), not HF's bicubic (a = -0.75), so no like-for-like timm peer")
                tm = timm_from_hf(cfg, {k: v.to("cuda") for k, v in W.items()}, dtype)
                with torch.no_grad():  # the mapping check: timm's final hidden state against HF's
                    px = torch.randn(2, C, S, S, device="cuda", generator=g, dtype=dtype)
                    ours, theirs = tm.forward_features(px).float(), hf(pixel_values=px).last_hidden_state.float()
                    check = float((ours - theirs).norm() / theirs.norm())
                log(f"{mode}: timm vs HF last hidden state rel L2 {check:.2e}")
                if check > 0.05:
                    raise ValueError(f"timm's model does not match HF's (rel L2 {check:.3f}): the weight mapping is wrong")
                fn = tm
                call = lambda f, px: f(px)  # noqa: E731
            if mode.endswith("compile"):
                fn = torch.compile(fn, fullgraph=True, dynamic=False)  # a static graph per batch
        except Exception as e:  # noqa: BLE001 - a peer that cannot be built is a row with "error"
            for b in batches:
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps({"peer": mode, "arch": a.arch, "mode": "images", "batch": b, **env,
                                        "error": f"{type(e).__name__}: {e}"}) + "\n")
            log(f"{mode}: FAILED {type(e).__name__}: {e}")
            continue
        for b in batches:
            row = {"peer": mode, "arch": a.arch, "layers": cfg.num_hidden_layers, "mode": "images", "batch": b, **env}
            if check is not None:
                row["check_rel_l2"] = check
            try:
                px = torch.randn(b, C, S, S, device="cuda", generator=g, dtype=dtype)
                row.update(hfmodel.timed_calls(lambda: call(fn, px), a.warmup, a.iters, mode.endswith("compile")))
                ms = row["ms"]
                row["images_per_s"] = 1000.0 * b / ms
                log(f"{mode} b{b}: {ms:.3f} ms, {row['images_per_s']:.1f} images/s")
            except Exception as e:  # noqa: BLE001 - one failed batch is a row with "error"
                row["error"] = f"{type(e).__name__}: {e}"
                log(f"{mode} b{b}: FAILED {row['error']}")
                traceback.print_exc()
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
