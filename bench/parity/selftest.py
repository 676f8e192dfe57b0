#!/usr/bin/env python3
"""CPU self-test of the HF parity tooling (bench/parity/, bench/peers/hf_llama_perf.py).

Tiny configs of the four families (llama with llama3 rope scaling, mistral with tied
embeddings, qwen2 with qkv bias, qwen3 with q/k norm; 2-3 layers, hidden 64, 4 heads, 2 kv heads,
vocab 256) are written to a temp dir, plus a float16 llama (torch_dtype "float16");
fake_fk_model.py plays fk_model. Checks:
  st.py round trip (and against the `safetensors` package when installed); the model dtype
  (hfmodel.model_dtype: config torch_dtype, fp32 served in bf16, the fastkernels.json sidecar);
  parity passes for an fp32 and a bf16 fake, and on the float16 llama for an fp16 and an fp32
  fake (results say dtype f16, keys hf_f16...); it fails (exit 1) on a perturbed layer weight, a
  perturbed layer dump, a wrong decode token, a crashing fk_model, a weights file with a missing
  tensor and bf16 weights for the float16 model, naming the right check; usage errors exit 2;
  hf_llama_perf.py runs (eager, CPU) and writes its rows.

Exit 0 on success, 1 on a failure, 77 (ctest SKIP_RETURN_CODE) when torch/transformers are missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
try:
    import torch
    import transformers  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e} (the parity self-test needs torch and transformers)")
    sys.exit(77)

sys.path.insert(0, HERE)
import st  # noqa: E402

PARITY = os.path.join(HERE, "hf_parity.py")
FAKE = os.path.join(HERE, "fake_fk_model.py")
PERF = os.path.join(REPO, "bench", "peers", "hf_llama_perf.py")

BASE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
            num_hidden_layers=3, max_position_embeddings=512, rms_norm_eps=1e-6, hidden_act="silu",
            bos_token_id=1, eos_token_id=2)
TINY = {
    "tiny/llama": dict(model_type="llama", rope_theta=500000.0, tie_word_embeddings=False,
                       rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=64, rope_type="llama3")),
    "tiny/mistral-tied": dict(model_type="mistral", rope_theta=1e6, sliding_window=None, tie_word_embeddings=True),
    "tiny/qwen2": dict(model_type="qwen2", rope_theta=1e6, use_sliding_window=False, sliding_window=131072,
                       max_window_layers=28, tie_word_embeddings=False),
    "tiny/qwen3": dict(model_type="qwen3", rope_theta=1e6, head_dim=32, attention_bias=False,
                       tie_word_embeddings=False, sliding_window=None),
}
# A float16 checkpoint: served, and its weights written, in fp16 (Note [Model dtype] in hfmodel.py).
TINY_F16 = {"tiny/llama-f16": dict(TINY["tiny/llama"], torch_dtype="float16")}

results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f"  ({detail})" if detail and not ok else ""), flush=True)


def run(args, env=None, tag=""):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.time()
    p = subprocess.run([sys.executable] + args, env=e, capture_output=True, text=True)
    out = p.stdout + p.stderr
    with open(os.path.join(TMP, f"log_{tag or len(results)}.txt"), "w") as f:
        f.write(out)
    print(f"     [{tag}: exit {p.returncode}, {time.time() - t0:.1f}s]", flush=True)
    return p.returncode, out


def records(out_dir):
    with open(os.path.join(out_dir, "parity.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def failing(rec):
    return sorted(c["name"] for c in rec["checks"] if not c["pass"])


def test_st():
    t = {"bf16": torch.randn(3, 5).bfloat16(), "f16": torch.randn(7).half(), "f32": torch.randn(2, 2),
         "i32": torch.arange(5, dtype=torch.int32), "i64": torch.arange(6, dtype=torch.int64).reshape(2, 3),
         "scalar": torch.tensor(3.5), "empty": torch.empty(0, 4)}
    p = os.path.join(TMP, "rt.safetensors")
    st.save(p, t, {"arch": "x/y", "layers": 2})
    r, meta = st.load(p)
    ok = set(r) == set(t) and all(r[k].dtype == t[k].dtype and torch.equal(r[k], t[k]) for k in t)
    check("st: round trip (BF16 F16 F32 I32 I64, scalar, empty)", ok and meta == {"arch": "x/y", "layers": "2"})
    with open(p, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
    check("st: header padded to 8 bytes", n % 8 == 0)
    try:
        import safetensors.torch as S
    except ImportError:
        print("     (safetensors package not installed: cross-check skipped)")
        return
    r2 = S.load_file(p)
    check("st: reference reader reads our file", all(torch.equal(r2[k], t[k]) for k in t))
    p2 = os.path.join(TMP, "rt_ref.safetensors")
    S.save_file(t, p2, metadata={"k": "v"})
    r3, m3 = st.load(p2)
    check("st: we read the reference writer's file", all(torch.equal(r3[k], t[k]) for k in t) and m3 == {"k": "v"})


def write_config(root, arch, cfg, sidecar=None):
    os.makedirs(os.path.join(root, arch))
    with open(os.path.join(root, arch, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if sidecar is not None:
        with open(os.path.join(root, arch, "fastkernels.json"), "w") as f:
            json.dump(sidecar, f, indent=1)


def test_model_dtype():
    import hfmodel

    root = os.path.join(TMP, "dtype_configs")
    llama = {**BASE, **TINY["tiny/llama"]}
    cases = [  # arch, torch_dtype (None: absent), sidecar, expected dtype (None: SetupError)
        ("d/bf16", "bfloat16", None, torch.bfloat16),
        ("d/f16", "float16", None, torch.float16),
        ("d/f32", "float32", None, torch.bfloat16),
        ("d/none", None, None, torch.bfloat16),
        ("d/f32-side-f16", "float32", {"dtype": "float16"}, torch.float16),
        ("d/f16-side-bf16", "float16", {"dtype": "bfloat16"}, torch.bfloat16),
        ("d/f16-side-other", "float16", {"dequantize": True}, torch.float16),
        ("d/side-bad", "bfloat16", {"dtype": "float32"}, None),
        ("d/int8", "int8", None, None),
    ]
    got = {}
    for arch, dt, side, want in cases:
        write_config(root, arch, {**llama, **({"torch_dtype": dt} if dt else {})}, side)
        try:
            got[arch] = hfmodel.model_dtype(arch, root)
        except hfmodel.SetupError:
            got[arch] = None
    bad = [f"{arch}: {got[arch]}" for arch, _, _, want in cases if got[arch] != want]
    check("hfmodel.model_dtype: config torch_dtype, fp32/absent -> bf16, fastkernels.json dtype", not bad,
          "; ".join(bad))
    write_config(root, "d/dtype-key", {**llama, "dtype": "float16"})  # the transformers-5 spelling
    check("hfmodel.model_dtype: \"dtype\" key", hfmodel.model_dtype("d/dtype-key", root) == torch.float16)


def main():
    global TMP
    TMP = tempfile.mkdtemp(prefix="fk_parity_selftest_")
    root = os.path.join(TMP, "configs")
    for arch, extra in {**TINY, **TINY_F16}.items():
        write_config(root, arch, {**BASE, **extra})
    env = {"FK_CONFIG_ROOT": root, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    common = ["--config-root", root, "--fk-model", FAKE, "--device", "cpu", "--prompt-lens", "5,17,40",
              "--decode-steps", "24"]
    print(f"parity self-test in {TMP} (torch {torch.__version__}, transformers {transformers.__version__})")

    test_st()
    test_model_dtype()

    # 1. fp32 fake, all four families in one process: must pass.
    out = os.path.join(TMP, "pass_f32")
    rc, log = run([PARITY, "--arch", ",".join(TINY), "--layers", "3", "--out", out, "--keep-files"] + common,
                  env, "pass_f32")
    recs = records(out) if rc in (0, 1) else []
    check("parity: fp32 fake passes for llama/mistral-tied/qwen2/qwen3", rc == 0 and len(recs) == 4
          and all(r["pass"] for r in recs), f"exit {rc}; failing {[failing(r) for r in recs]}")
    check("parity: parity.md written", os.path.isfile(os.path.join(out, "parity.md")))
    check("parity: bf16 results keep their keys (dtype bf16, hf_bf16, rows_hf_bf16, hf_bf16_vs_fp32_match)",
          recs and all(r.get("dtype") == "bf16" and "hf_bf16_s" in r
                       and any("hf_bf16" in c and "rows_hf_bf16" in c for c in r["checks"])
                       and any("hf_bf16_vs_fp32_match" in c for c in r["checks"]) for r in recs))
    keep_w = os.path.join(out, "tiny__qwen3", "weights.safetensors")
    keep_d = os.path.join(out, "tiny__qwen3", "dump.safetensors")

    # 2. bf16 fake (an implementation with bf16 rounding like HF's own): must pass.
    out = os.path.join(TMP, "pass_bf16")
    rc, log = run([PARITY, "--arch", "tiny/qwen2,tiny/llama", "--layers", "2", "--out", out] + common,
                  {**env, "FAKE_FK_DTYPE": "bf16"}, "pass_bf16")
    check("parity: bf16 fake passes", rc == 0, f"exit {rc}")

    # 2b. a float16 model: HF's low-precision run is fp16, W is fp16; an fp16 fake and an fp32 fake
    # must pass, and the results say f16 (keys hf_f16..., header hf-f16-vs-fp32).
    for fake, tag in (("f16", "pass_f16"), ("f32", "pass_f16_f32fake")):
        out = os.path.join(TMP, tag)
        rc, log = run([PARITY, "--arch", "tiny/llama-f16", "--layers", "2", "--out", out, "--keep-files"] + common,
                      {**env, "FAKE_FK_DTYPE": fake}, tag)
        recs = records(out) if rc in (0, 1) else []
        r = recs[0] if recs else {}
        md = open(os.path.join(out, "parity.md")).read() if os.path.isfile(os.path.join(out, "parity.md")) else ""
        check(f"parity: {fake} fake passes on a float16 model, result says dtype f16", rc == 0 and r.get("pass")
              and r.get("dtype") == "f16" and "hf_f16_s" in r and "hf_bf16_s" not in r
              and all("hf_bf16" not in k for c in r["checks"] for k in c)
              and any("hf_f16" in c and "rows_hf_f16" in c for c in r["checks"])
              and any("hf_f16_vs_fp32_match" in c for c in r["checks"]) and "hf-f16-vs-fp32" in md,
              f"exit {rc}; dtype {r.get('dtype')}; failing {failing(r) if r else '-'}")
    w16 = os.path.join(TMP, "pass_f16_f32fake", "tiny__llama-f16", "weights.safetensors")
    W16 = st.load(w16)[0] if os.path.isfile(w16) else {}
    check("parity: the fake writes a float16 model's weights in fp16",
          W16 and all(t.dtype == torch.float16 for t in W16.values()), w16)

    # 3. bugs must fail with exit 1 and point at the right place.
    cases = [
        ("weight:1", "tiny/llama", lambda f: "layer.0" not in f and "layer.1" in f and "prefill.logits" in f),
        ("dump:1", "tiny/qwen3", lambda f: f == ["layer.1"]),
        ("token", "tiny/mistral-tied", lambda f: "decode.near_tie" in f and not any(x.startswith("layer") for x in f)),
        ("logits", "tiny/qwen2", lambda f: "prefill.logits" in f and not any(x.startswith("layer") for x in f)),
    ]
    for corrupt, arch, expect in cases:
        out = os.path.join(TMP, "bad_" + corrupt.replace(":", ""))
        rc, log = run([PARITY, "--arch", arch, "--layers", "2", "--out", out] + common,
                      {**env, "FAKE_FK_CORRUPT": corrupt}, "bad_" + corrupt)
        f = failing(records(out)[0]) if rc == 1 else None
        check(f"parity: corrupt {corrupt} -> exit 1, failing {f}", rc == 1 and expect(f), f"exit {rc}")

    out = os.path.join(TMP, "bad_exit")
    rc, log = run([PARITY, "--arch", "tiny/llama", "--layers", "2", "--out", out] + common,
                  {**env, "FAKE_FK_EXIT": "3"}, "bad_exit")
    check("parity: crashing fk_model -> exit 1, its output shown", rc == 1 and "failing on purpose" in log
          and "exited with 3" in log, f"exit {rc}")

    # 4. strict weights: a missing tensor, given through --weights/--dump.
    if os.path.isfile(keep_w):
        W, meta = st.load(keep_w)
        W.pop("model.layers.1.self_attn.k_norm.weight")
        bad_w = os.path.join(TMP, "missing.safetensors")
        st.save(bad_w, W, meta)
        out = os.path.join(TMP, "bad_weights")
        rc, log = run([PARITY, "--arch", "tiny/qwen3", "--weights", bad_w, "--dump", keep_d, "--out", out,
                       "--config-root", root, "--device", "cpu"], env, "bad_weights")
        check("parity: weights missing a tensor -> exit 1", rc == 1 and "k_norm" in log, f"exit {rc}")
        out = os.path.join(TMP, "reuse")
        rc, log = run([PARITY, "--arch", "tiny/qwen3", "--weights", keep_w, "--dump", keep_d, "--out", out,
                       "--config-root", root, "--device", "cpu"], env, "reuse")
        check("parity: --weights/--dump of a good run passes (layers from metadata)", rc == 0, f"exit {rc}")
        # bf16 weights for the float16 llama (same shapes): the contract dtype is fp16.
        out = os.path.join(TMP, "bad_weights_dtype")
        rc, log = run([PARITY, "--arch", "tiny/llama-f16", "--weights", keep_w.replace("qwen3", "llama"),
                       "--dump", keep_d.replace("qwen3", "llama"), "--out", out, "--config-root", root,
                       "--device", "cpu"], env, "bad_weights_dtype")
        check("parity: bf16 weights for a float16 model -> exit 1, tensor and dtypes named", rc == 1
              and "model.embed_tokens.weight: dtype bfloat16, contract says float16" in log, f"exit {rc}")
    else:
        check("parity: kept weights file exists", False, keep_w)

    # 5. usage / setup errors -> exit 2.
    out = os.path.join(TMP, "usage")
    for tag, args in (
        ("no_binary", ["--arch", "tiny/llama", "--fk-model", os.path.join(TMP, "nope"), "--config-root", root]),
        ("no_config", ["--arch", "nobody/nothing", "--fk-model", FAKE, "--config-root", root]),
        ("weights_no_dump", ["--arch", "tiny/llama", "--weights", keep_w, "--config-root", root]),
        ("no_arch", ["--config-root", root]),
    ):
        rc, log = run([PARITY, "--out", out] + args, env, "usage_" + tag)
        check(f"parity: usage error {tag} -> exit 2", rc == 2, f"exit {rc}")

    # 6. the perf peer runs end to end (eager, CPU, tiny) and writes its rows.
    jl = os.path.join(TMP, "perf.jsonl")
    rc, log = run([PERF, "--arch", "tiny/llama", "--config-root", root, "--weights", keep_w.replace("qwen3", "llama"),
                   "--device", "cpu", "--modes", "eager", "--decode-batches", "1,3", "--prompt-len", "8",
                   "--new-tokens", "4", "--prefill", "2x16", "--repeats", "1", "--prefill-iters", "2",
                   "--jsonl", jl], env, "perf")
    rows = [json.loads(x) for x in open(jl)] if os.path.isfile(jl) else []
    need = {"peer", "arch", "mode", "batch", "new_tokens", "tokens_per_s", "ms_per_step", "peak_mem_gib", "torch",
            "transformers", "gpu"}
    check("perf: eager decode B=1,3 + prefill 2x16 rows", rc == 0 and len(rows) == 3
          and all(need <= set(r) and r["tokens_per_s"] > 0 for r in rows)
          and rows[0]["peer"] == "hf_eager" and rows[2]["mode"] == "prefill", f"exit {rc}, {len(rows)} rows")

    n_fail = sum(not ok for _, ok in results)
    print(f"{len(results) - n_fail} passed, {n_fail} failed")
    if n_fail:
        print(f"logs: {TMP}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
