#!/usr/bin/env python3
"""A stand-in for `fk_model`, for the parity tool's own tests only: same command line, same
output files (the contract in docs/parity.md), computed with an fp32 HuggingFace model on
weights in the model dtype (bf16, or fp16 for a float16 config: hfmodel.model_dtype), so
hf_parity.py must pass on it.

    fake_fk_model.py --arch ORG/MODEL [--layers N] [--seed S] --save-weights W.safetensors \
        --dump D.safetensors --prompt-lens 7,33,64,128 --decode-steps 64

Environment (tests):
  FK_CONFIG_ROOT      where <org>/<model>/config.json live (default: the repo's hf_configs/)
  FAKE_FK_DTYPE       f32 (default), bf16 or f16: precision of the computation (the saved weights
                      are in the model dtype whatever this says)
  FAKE_FK_DEVICE      cpu (default) or cuda
  FAKE_FK_CORRUPT     inject a bug: weight:L (layer L's o_proj scaled by 1.1 in the computation,
                      the saved weights stay clean), dump:L (noise added to prefill.layer.L only),
                      token (one decode token replaced by a clearly non-argmax token),
                      logits (prefill.logits scaled by 1.05)
  FAKE_FK_EXIT        exit with this code right away (tests the runner's failure path)
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfmodel  # noqa: E402
import st  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save-weights", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--prompt-lens", default="7,33,64,128")
    ap.add_argument("--decode-steps", type=int, default=64)
    a = ap.parse_args()
    if os.environ.get("FAKE_FK_EXIT"):
        print("fake_fk_model: failing on purpose (FAKE_FK_EXIT)", file=sys.stderr)
        return int(os.environ["FAKE_FK_EXIT"])
    corrupt = os.environ.get("FAKE_FK_CORRUPT", "")
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[os.environ.get("FAKE_FK_DTYPE", "f32")]
    dev = os.environ.get("FAKE_FK_DEVICE", "cpu")
    torch.manual_seed(0)
    hfmodel.set_fp32_exact()

    cfg = hfmodel.load_config(a.arch, a.layers)
    mdt = hfmodel.model_dtype(a.arch)  # what fk_model writes W in (Note [Model dtype])
    n = cfg.num_hidden_layers
    model = hfmodel.build_model(cfg, dtype, dev, attn="eager")
    w = hfmodel.random_weights(model, a.seed, dtype=mdt)
    st.save(a.save_weights, w, {"arch": a.arch, "layers": str(n), "seed": str(a.seed)})
    hfmodel.check_and_load(model, w, dtype=mdt)
    if corrupt.startswith("weight:"):
        li = int(corrupt.split(":")[1])
        model.model.layers[li].self_attn.o_proj.weight.mul_(1.1)

    lens = [int(x) for x in a.prompt_lens.split(",")]
    V = cfg.vocab_size
    g = torch.Generator().manual_seed(a.seed + 1000)
    ids = torch.randint(0, V, (sum(lens),), generator=g, dtype=torch.int64)
    cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32)
    S = a.decode_steps
    B = len(lens)
    layers = [[] for _ in range(n)]
    plog, toks, tlog, last, rows0 = [], [], [], [], []
    cap = hfmodel.LayerCapture(model)
    with torch.no_grad():
        for b in range(B):
            p = ids[cu[b]:cu[b + 1]][None].to(dev)
            cap.outs.clear()
            out = model(input_ids=p, use_cache=True)
            for i in range(n):
                layers[i].append(cap.outs[i].cpu())
            cache = out.past_key_values
            lg = out.logits[0, -1].float().cpu()
            plog.append(lg)
            row_t, row_l = [], []
            for step in range(S + 1):
                t = int(lg.argmax())
                row_t.append(t)
                row_l.append(float(lg[t]))
                if b == 0:
                    rows0.append(lg)
                if step == S:
                    break
                out = model(input_ids=torch.tensor([[t]], device=dev), past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                lg = out.logits[0, -1].float().cpu()
            toks.append(row_t)
            tlog.append(row_l)
            last.append(lg)
    cap.remove()
    D = {
        "input_ids": ids,
        "cu_seqlens": cu,
        "prefill.logits": torch.stack(plog),
        "decode.tokens": torch.tensor(toks, dtype=torch.int64),
        "decode.token_logit": torch.tensor(tlog, dtype=torch.float32),
        "decode.logits_last": torch.stack(last),
    }
    for i in range(n):
        D[f"prefill.layer.{i}"] = torch.cat(layers[i]).float()
    if corrupt.startswith("dump:"):
        li = int(corrupt.split(":")[1])
        x = D[f"prefill.layer.{li}"]
        D[f"prefill.layer.{li}"] = x + 0.05 * x.std() * torch.randn(x.shape, generator=g)
    elif corrupt == "token":
        b, j = 0, S // 2
        t_bad = int(rows0[j].argmin())  # as far from the argmax as it gets
        D["decode.tokens"][b, j] = t_bad
        D["decode.token_logit"][b, j] = rows0[j][t_bad]
    elif corrupt == "logits":
        D["prefill.logits"] = D["prefill.logits"] * 1.05
    st.save(a.dump, D, {"arch": a.arch, "layers": str(n), "seed": str(a.seed), "producer": "fake_fk_model"})
    print(f"fake_fk_model: {a.arch} layers={n} prompts={lens} steps={S} dtype={dtype} weights={mdt} "
          f"corrupt={corrupt or '-'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
