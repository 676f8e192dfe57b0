"""Shared helpers: build a HuggingFace transformers model from the repo's hf_configs/ (no
network), find the dtype it is served in (bf16 or fp16, model_dtype), load weights strictly from a
safetensors file written per the fk_model contract, and capture the residual stream after each
decoder layer.

Used by bench/parity/hf_parity.py, bench/parity/fake_fk_model.py and
bench/peers/hf_llama_perf.py.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CONFIG_ROOT = os.path.join(REPO, "hf_configs")
# The text models of vision-language checkpoints (`add --component text_config`): transformers has
# their decoder (Qwen2VLTextModel, ...) but no causal-LM class of its own; TextCausalLM adds the
# composite's lm_head to it.
VLM_TEXT_MODEL_TYPES = ("qwen2_vl_text", "qwen2_5_vl_text", "qwen3_vl_text")
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen3_moe", "gemma2", "gemma3_text",
                         "gpt_oss", "deepseek_v3", "granite", "olmo2") + VLM_TEXT_MODEL_TYPES
# Keys only a VLM's composite config reads (where image tokens go), left out of a legacy text component.
COMPOSITE_ONLY_KEYS = ("architectures", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
                       "vision_token_id", "model_type")
DEFAULT_ARCHS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-8B",
)

sys.path.insert(0, HERE)  # st.py beside this file


class SetupError(RuntimeError):
    """Usage / environment problem (exit code 2)."""


class WeightsError(RuntimeError):
    """The weights file does not match the model (a contract failure of the producer)."""


def config_root(arg=None):
    return arg or os.environ.get("FK_CONFIG_ROOT") or DEFAULT_CONFIG_ROOT


def config_path(arch, root=None):
    root = config_root(root)
    p = os.path.join(root, arch, "config.json")
    if not os.path.isfile(p):
        have = []
        if os.path.isdir(root):
            for org in sorted(os.listdir(root)):
                d = os.path.join(root, org)
                if os.path.isdir(d):
                    have += [f"{org}/{m}" for m in sorted(os.listdir(d))
                             if os.path.isfile(os.path.join(d, m, "config.json"))]
        raise SetupError(f"config not found: {p} (arch {arch!r}; available under {root}: "
                         f"{', '.join(have) or 'none'})")
    return p


# Note [Model dtype]
# A model is served (and fk_model writes its weights, the contract's W) in one 16-bit dtype: the
# sidecar <root>/<arch>/fastkernels.json's "dtype" when it names one (`add --dtype`: serve the
# checkpoint in another dtype than its own), else the config's torch_dtype ("dtype" in
# transformers 5) when that is bfloat16 or float16. A float32 or dtype-less config is served in
# bfloat16 (vLLM's dtype="auto" serves fp32 checkpoints in 16 bits too).
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Short tags, as in result keys (hf_bf16, hf_f16; the generator's dtype suffixes).
DTYPE_TAGS = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


def dtype_tag(dtype):
    return DTYPE_TAGS[dtype]


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def sidecar(arch, root=None):
    """The user's recorded choices for `arch` (<root>/<arch>/fastkernels.json; {} when absent)."""
    side = os.path.join(os.path.dirname(config_path(arch, root)), "fastkernels.json")
    if not os.path.isfile(side):
        return {}
    try:
        with open(side) as f:
            d = json.load(f)
    except ValueError as e:
        raise SetupError(f"{side}: not JSON ({e})")
    if not isinstance(d, dict):
        raise SetupError(f"{side}: not a JSON object")
    return d


def config_component(d, arch, root=None):
    """The config dict to build: `d` itself, or the nested component the sidecar names (`add --component
    vision_config`, Note [Config components]: SigLIP's vision tower from a SiglipConfig), whose missing dtype
    is the composite's."""
    comp = sidecar(arch, root).get("component")
    if not comp:
        return d
    # Legacy layout (Qwen2-VL, Qwen2.5-VL): no text_config, the text model's keys at the top level; the
    # component is those keys but the other components and the composite's own (as the generator takes it).
    legacy_text = (comp == "text_config" and comp not in d and "hidden_size" in d and "num_hidden_layers" in d
                   and isinstance(d.get("model_type"), str))
    if not legacy_text and not isinstance(d.get(comp), dict):
        raise SetupError(f"{arch}: the sidecar names component {comp!r}, which the config does not hold as an object")
    if legacy_text:
        part = {k: v for k, v in d.items()
                if k not in COMPOSITE_ONLY_KEYS and not (k.endswith("_config") and isinstance(v, dict))}
    else:
        part = dict(d[comp])
    # The composite's tie_word_embeddings is the text model's (Qwen3-VL's small checkpoints say it there only).
    if comp == "text_config" and "tie_word_embeddings" in d and "tie_word_embeddings" not in part:
        part["tie_word_embeddings"] = d["tie_word_embeddings"]
    # The component's model type as the generator derives it (Note [Config components]): its own, or,
    # where it is missing or repeats the composite's (Qwen2-VL's vision_config: "qwen2_vl"), the
    # composite's joined to the key without "_config" (qwen2_vl_vision).
    if isinstance(d.get("model_type"), str) and part.get("model_type", d["model_type"]) == d["model_type"]:
        part["model_type"] = d["model_type"] + "_" + (comp[:-7] if comp.endswith("_config") and len(comp) > 7 else comp)
    for k in ("torch_dtype", "dtype"):
        if k in d and "torch_dtype" not in part and "dtype" not in part:
            part["torch_dtype"] = d[k]
    return part


def model_dtype(arch, root=None):
    """torch.bfloat16 or torch.float16: the dtype `arch` is served in (Note [Model dtype])."""
    cpath = config_path(arch, root)
    choice = sidecar(arch, root).get("dtype")
    if choice is not None:
        if not isinstance(choice, str) or choice not in DTYPES:
            raise SetupError(f"{os.path.join(os.path.dirname(cpath), 'fastkernels.json')}: dtype {choice!r} "
                             f"(want one of {', '.join(DTYPES)})")
        return DTYPES[choice]
    with open(cpath) as f:
        d = json.load(f)
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else {}
    dt = d.get("torch_dtype") or d.get("dtype") or text.get("torch_dtype") or text.get("dtype")
    if dt in (None, "float32"):
        return torch.bfloat16
    if not isinstance(dt, str) or dt not in DTYPES:
        raise SetupError(f"{arch}: torch_dtype {dt!r} in {cpath} (supported: {', '.join(DTYPES)}, "
                         f"or float32 served in bfloat16)")
    return DTYPES[dt]


GENERATION_DEFAULT_KEYS = (
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "num_return_sequences", "output_scores", "return_dict_in_generate",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "bad_words_ids")


def load_config(arch, layers=None, root=None, supported=SUPPORTED_MODEL_TYPES):
    """transformers config for `arch` from <root>/<arch>/config.json, num_hidden_layers
    overridden. Built with AutoConfig.for_model from the JSON dict: nothing touches the hub.
    `supported`: the model types the caller's check handles (encoder_parity passes its own)."""
    from transformers import AutoConfig

    with open(config_path(arch, root)) as f:
        d = json.load(f)
    d = config_component(d, arch, root)
    mt = d.pop("model_type", None)
    # A config lowered as a known model type (`add --as`, recorded as the sidecar's served_as) runs
    # transformers' own class for its model_type: that is the check of the user's claim.
    if mt not in supported and sidecar(arch, root).get("served_as") not in supported:
        raise SetupError(f"{arch}: model_type {mt!r} not supported (supported: {', '.join(supported)}, "
                         f"or a config added with `fastkernels add --as` one of them)")
    # A component config may leave the depth to its class default (SigLIP-2's vision_config).
    full = int(d["num_hidden_layers"]) if "num_hidden_layers" in d else int(AutoConfig.for_model(mt).num_hidden_layers)
    n = full if layers is None else int(layers)
    if not 1 <= n <= full:
        raise SetupError(f"{arch}: --layers {n} out of range 1..{full}")
    d["num_hidden_layers"] = n
    if isinstance(d.get("layer_types"), list):
        d["layer_types"] = d["layer_types"][:n]
    # quantization_config: gpt-oss ships MXFP4 experts; parity runs the bf16 model (random weights).
    # torch_dtype/dtype: the caller builds the model in model_dtype() (or fp32, the truth).
    for k in ("torch_dtype", "dtype", "transformers_version", "architectures", "quantization_config"):
        d.pop(k, None)
    for k in [k for k in d if k.startswith("_")]:  # hub bookkeeping (_name_or_path)
        d.pop(k)
    # Generation defaults transformers 4.x wrote into model configs (bert2bert's decoder): they do not
    # touch the forward pass, and transformers 5 refuses to save a config that holds them.
    for k in GENERATION_DEFAULT_KEYS:
        d.pop(k, None)
    # return_dict false (bert2bert's printed config) makes forward return tuples; the checks read
    # the output's fields. It changes the container, not the values.
    d.pop("return_dict", None)
    cfg = AutoConfig.for_model(mt, **d)
    cfg.architectures = None
    return cfg


class TextCausalLM(torch.nn.Module):
    """A VLM's text model as a causal LM: transformers' decoder for the text config (AutoModel:
    Qwen2VLTextModel, Qwen3VLTextModel, ...) under `model`, and the composite's lm_head, applied as
    Qwen2VLForConditionalGeneration applies it (to the last logits_to_keep positions). The state-dict
    names are a causal LM's (model.layers.*, lm_head.weight). Positions default to the text model's own
    (three equal rows: a text-only prompt)."""

    def __init__(self, cfg, dtype, attn):
        from transformers import AutoModel

        super().__init__()
        self.config = cfg
        self.model = AutoModel.from_config(cfg, dtype=dtype, attn_implementation=attn)
        self.lm_head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=dtype)
        if getattr(cfg, "tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight
        import inspect

        params = inspect.signature(self.model.forward).parameters  # once: forward stays traceable
        self._cache_kw = "past_key_values" if "past_key_values" in params else "cache"
        self._takes_cache_position = "cache_position" in params
        from transformers.modeling_outputs import CausalLMOutputWithPast

        self._output = CausalLMOutputWithPast  # a ModelOutput, which torch.compile traces (fullgraph)

    def forward(self, input_ids=None, use_cache=False, logits_to_keep=0, position_ids=None, past_key_values=None,
                cache_position=None, **kw):
        if past_key_values is not None:  # the cache keyword of this transformers version
            kw[self._cache_kw] = past_key_values
        if cache_position is not None and self._takes_cache_position:
            kw["cache_position"] = cache_position
        out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=use_cache, **kw)
        h = out.last_hidden_state
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        cache = getattr(out, "past_key_values", None)
        return self._output(logits=self.lm_head(h),
                                      past_key_values=cache if cache is not None else getattr(out, "cache", None))


def build_model(cfg, dtype, device, attn="sdpa"):
    """Model with random init, built directly on `device` (fast on GPU, no CPU copy)."""
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        if getattr(cfg, "model_type", None) in VLM_TEXT_MODEL_TYPES:
            m = TextCausalLM(cfg, dtype, attn)
        else:
            m = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
    m.eval()
    m.requires_grad_(False)
    return m


# The composite vision-language models whose text model (VLM_TEXT_MODEL_TYPES) and vision tower
# fk_model runs together (--vision-arch): the composite config's model type.
VLM_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def load_vlm_config(arch, layers, vision_layers, root=None):
    """The composite config (Qwen2VLConfig) stored beside `arch` (a VLM's text component: its
    config.json is the whole composite, verbatim), the text model cut to `layers` decoder layers and
    the tower to `vision_layers` blocks. Built offline with AutoConfig.for_model."""
    from transformers import AutoConfig

    with open(config_path(arch, root)) as f:
        d = json.load(f)
    mt = d.pop("model_type", None)
    if mt not in VLM_MODEL_TYPES:
        raise SetupError(f"{arch}: model_type {mt!r} is not a vision-language model fk_model runs whole "
                         f"(supported: {', '.join(VLM_MODEL_TYPES)})")
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else d
    text["num_hidden_layers"] = int(layers)
    vc = dict(d.get("vision_config") or {})
    vc["depth"] = int(vision_layers)
    d["vision_config"] = vc
    for k in ("torch_dtype", "dtype", "transformers_version", "architectures", "quantization_config"):
        d.pop(k, None)
    for k in [k for k in d if k.startswith("_")]:
        d.pop(k)
    cfg = AutoConfig.for_model(mt, **d)
    cfg.architectures = None
    return cfg


def build_vlm_model(cfg, dtype, device, attn="sdpa"):
    """transformers' composite VLM (Qwen2VLForConditionalGeneration) with random init, on `device`."""
    from transformers import AutoModelForImageTextToText

    with torch.device(device):
        m = AutoModelForImageTextToText.from_config(cfg, dtype=dtype, attn_implementation=attn)
    m.eval()
    m.requires_grad_(False)
    return m


def vlm_weights(text_weights, vision_weights):
    """fk_model's two weight files (the text model's causal-LM names, the tower's
    Qwen2VisionTransformerPretrainedModel names) under the composite's names (transformers 5:
    model.language_model.*, model.visual.*, lm_head.weight)."""
    out = {}
    for k, t in text_weights.items():
        out["model.language_model." + k[len("model."):] if k.startswith("model.") else k] = t
    for k, t in vision_weights.items():
        out["model.visual." + k] = t
    return out


# HF checkpoints that store a fused projection (Phi-3: self_attn.qkv_proj, mlp.gate_up_proj)
# where the fk_model contract names its Llama-style parts (Note [Seeded weights] in
# runtime/include/fk/tasks/llama.h): the fused tensor is the parts stacked along rows, in this order.
FUSED_PARTS = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
               "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}


# HF parameters stored transposed relative to the fk_model contract, which keeps vLLM's [E, n, k]
# expert layout: gpt-oss's experts.gate_up_proj is [E, H, 2I] (ours [E, 2I, H], the same
# interleaved gate/up columns as rows) and experts.down_proj [E, I, H] (ours [E, H, I]).
TRANSPOSED_PARAMS = {"gpt_oss": ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")}
# HF parameters the contract stores in fp32 (vLLM keeps attention sinks and DeepSeek's router
# correction bias in fp32; HF keeps the latter in fp32 too, _keep_in_fp32_modules_strict).
FP32_PARAMS = ("self_attn.sinks", "mlp.gate.e_score_correction_bias")


def is_transposed(model_type, name):
    return any(name.endswith(s) for s in TRANSPOSED_PARAMS.get(model_type, ()))


def transpose_parts(model_type, weights):
    """weights with every TRANSPOSED_PARAMS tensor of `model_type` transposed (last two dims).
    Always, not by shape: gpt-oss-20b's down_proj is square per expert (I = H = 2880)."""
    out = dict(weights)
    for name, t in weights.items():
        if is_transposed(model_type, name):
            out[name] = t.transpose(-1, -2).contiguous()
    return out


def fuse_parts(expected, weights):
    """weights with the parts of every fused parameter the model expects (and the file lacks)
    concatenated under the fused name; everything else unchanged. Missing parts stay missing
    (check_and_load reports them)."""
    out = dict(weights)
    for name in expected:
        if name in out:
            continue
        for fused, parts in FUSED_PARTS.items():
            head, sep, tail = name.partition(fused + ".")
            if not sep or tail not in ("weight", "bias"):
                continue
            names = [f"{head}{p}.{tail}" for p in parts]
            if all(n in out for n in names):
                out[name] = torch.cat([out.pop(n) for n in names], dim=0)
    return out


def dtype_problems(weights, dtype):
    """'name: dtype X, contract says Y' for every tensor of `weights` (name -> tensor) that is
    not in the contract's dtype: fp32 for FP32_PARAMS, the model dtype `dtype` for the rest."""
    out = []
    for k in sorted(weights):
        want = torch.float32 if k.endswith(FP32_PARAMS) else dtype
        if weights[k].dtype != want:
            out.append(f"{k}: dtype {dtype_name(weights[k].dtype)}, contract says {dtype_name(want)}")
    return out


def check_dtypes(weights, dtype, what="weights"):
    """WeightsError unless every tensor of `weights` is in the contract dtype (dtype_problems);
    names the first few offenders and counts the rest (a file in the wrong dtype has hundreds)."""
    probs = dtype_problems(weights, dtype)
    if probs:
        raise WeightsError(f"{what}: {len(probs)} tensor(s) not in the contract dtype (model dtype "
                           f"{dtype_name(dtype)}; {', '.join(FP32_PARAMS)} fp32): " + "; ".join(probs[:6])
                           + (f"; ... and {len(probs) - 6} more" if len(probs) > 6 else ""))


def check_and_load(model, weights, tied=None, dtype=torch.bfloat16):
    """Loads `weights` (name -> tensor) into `model` strictly. Missing/unexpected names, shape
    mismatches and tensors not in the contract dtype (`dtype`, the model dtype, which need not be
    the dtype `model` was built in; fp32 for FP32_PARAMS) are WeightsError. With tied embeddings
    the file has no lm_head.weight; it is taken from model.embed_tokens.weight (and must not be
    present)."""
    if tied is None:
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
    sd = model.state_dict()
    expected = set(sd)
    weights = fuse_parts(expected, weights)
    weights = transpose_parts(str(getattr(model.config, "model_type", "")), weights)
    have = set(weights)
    problems = []
    if tied:
        expected.discard("lm_head.weight")
        if "lm_head.weight" in have:
            problems.append("lm_head.weight present although tie_word_embeddings is true")
            have.discard("lm_head.weight")
    missing = sorted(expected - have)
    unexpected = sorted(have - expected)
    if missing:
        problems.append(f"missing {len(missing)}: {missing[:6]}{' ...' if len(missing) > 6 else ''}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)}: {unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}")
    for k in sorted(expected & have):
        w = weights[k]
        if tuple(w.shape) != tuple(sd[k].shape):
            problems.append(f"{k}: shape {tuple(w.shape)} != expected {tuple(sd[k].shape)}")
    dprobs = dtype_problems({k: weights[k] for k in expected & have}, dtype)
    problems += dprobs[:6] + ([f"... and {len(dprobs) - 6} more dtype mismatches"] if len(dprobs) > 6 else [])
    if problems:
        raise WeightsError("weights do not match the model: " + "; ".join(problems))
    full = dict(weights)
    if tied:
        full["lm_head.weight"] = weights["model.embed_tokens.weight"]
    model.load_state_dict(full, strict=True)
    if tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.lm_head.weight = model.model.embed_tokens.weight
    return model


def random_weights(model, seed, std=None, dtype=torch.bfloat16):
    """Seeded random weights in `dtype` (the model dtype; attention sinks fp32) with HF names (used
    by the fake fk_model and the perf peer when no weights file is given). Norm weights
    1 + 0.1 N(0,1) (Gemma: 0.1 N(0,1)), biases 0.1 N(0,1), embeddings N(0,1) (Gemma: N(0, 1/hidden)),
    other matrices N(0, 1/fan_in) (or N(0, std) when std is given). Generated on CPU in
    sorted-name order so the values do not depend on the device."""
    g = torch.Generator().manual_seed(int(seed))
    out = {}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    # Gemma: GemmaRMSNorm weights are used as 1 + w, embeddings are scaled by sqrt(hidden)
    # (the generated GemmaForCausalLM seeds them N(0, 0.1) and N(0, 1/hidden) for the same scales).
    gemma = str(getattr(model.config, "model_type", "")).startswith("gemma")
    for name, p in sorted(model.state_dict().items()):
        if tied and name == "lm_head.weight":
            continue
        shape = tuple(p.shape)
        if name.endswith("norm.weight"):
            t = (0.0 if gemma else 1.0) + 0.1 * torch.randn(shape, generator=g)
            if tied and not gemma and name == "model.norm.weight":
                t = t * shape[-1] ** -0.5  # the tied logits stay O(1) (Note [Seeded weights])
        elif name.endswith(".bias") or name.endswith("_bias"):
            t = 0.1 * torch.randn(shape, generator=g)
        elif name.endswith("sinks"):
            out[name] = torch.randn(shape, generator=g)  # f32, as the contract stores them
            continue
        elif name == "model.embed_tokens.weight":
            t = torch.randn(shape, generator=g) * (shape[-1] ** -0.5 if gemma else 1.0)
        else:
            s = std if std is not None else shape[-1] ** -0.5
            t = s * torch.randn(shape, generator=g)
        if is_transposed(str(getattr(model.config, "model_type", "")), name):
            t = t.transpose(-1, -2).contiguous()  # the contract's layout (check_and_load transposes back)
        out[name] = t.to(torch.float32 if name.endswith(FP32_PARAMS) else dtype)  # the contract's dtypes
    return out


class LayerCapture:
    """Forward hooks on model.model.layers[i]; stores each layer's output hidden states (the
    residual stream after the layer). transformers 5 returns a tensor, 4.x a tuple (take [0])."""

    def __init__(self, model, keep=None):
        self.outs = {}
        self.keep = keep  # slice over the sequence dim, or None for all
        self.handles = [layer.register_forward_hook(self._hook(i))
                        for i, layer in enumerate(model.model.layers)]

    def _hook(self, i):
        def fn(_mod, _inp, out):
            h = out[0] if isinstance(out, (tuple, list)) else out
            h = h[0] if h.dim() == 3 else h
            if self.keep is not None:
                h = h[self.keep]
            self.outs[i] = h.detach().float()
        return fn

    def remove(self):
        for h in self.handles:
            h.remove()


class RouterCapture:
    """Forward hooks on each MoE layer's router (model.model.layers[i].mlp.gate, the
    transformers-5 TopKRouter modules: forward returns (router_logits [T, E], weights, indices));
    stores every layer's router logits in fp32. `active` is False for dense models."""

    def __init__(self, model):
        self.outs = {}
        # mlp.gate (Mixtral, Qwen3-MoE) or mlp.router (gpt-oss)
        gates = [getattr(getattr(layer, "mlp", None), "gate", None) or getattr(getattr(layer, "mlp", None), "router", None)
                 for layer in model.model.layers]
        self.active = bool(gates) and all(g is not None and hasattr(g, "top_k") for g in gates)
        self.n = len(gates) if self.active else 0
        self.handles = [g.register_forward_hook(self._hook(i)) for i, g in enumerate(gates)] if self.active else []

    def _hook(self, i):
        def fn(_mod, _inp, out):
            z = out[0] if isinstance(out, (tuple, list)) else out
            self.outs[i] = z.detach().float().reshape(-1, z.shape[-1])
        return fn

    def remove(self):
        for h in self.handles:
            h.remove()


def set_fp32_exact():
    """fp32 means fp32: no TF32 in matmuls or convolutions."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def timed_calls(call, warmup, iters, compiled):
    """Times call() as the HF peers do: `warmup` calls, then `iters` calls each between two CUDA
    events, under torch.no_grad; with `compiled` (a torch.compile'd call), a recompilation inside
    the timed calls is an error, not a figure. Returns {ms (median), ms_min, ms_max, peak_mem_gib
    (torch.cuda.max_memory_allocated over the calls, weights included)}."""
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        for _ in range(warmup):
            call()
        frames = int(torch._dynamo.utils.counters["frames"]["ok"]) if compiled else None
        times = []
        for _ in range(iters):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            call()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        if frames is not None and int(torch._dynamo.utils.counters["frames"]["ok"]) != frames:
            raise RuntimeError("torch.compile recompiled inside the timed iterations")
    times.sort()
    return {"ms": times[len(times) // 2], "ms_min": times[0], "ms_max": times[-1],
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2 ** 30}


def versions():
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__}


def slug(arch):
    return arch.replace("/", "__")
