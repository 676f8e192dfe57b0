#!/usr/bin/env python3
"""Compare the greedy tokens of tensor-parallel runs with the unsharded run (issue 23).

    python3 bench/tp_tokens.py tp1.json tp2.json [tp4.json ...] [--tie-gap 0.30] [--json out.json]

Each file is an `fk_model --greedy` file (the first the TP-1 run: same arch, layers, seed, steps and
prompts). Per sequence the tokens must agree up to the end, or up to a first difference where the
TP-1 run's top-2 logit gap at that step is within the near-tie bound (docs/candidates.md, "greedy
tokens": a near-tie, accepted; later tokens condition on other prefixes and are not compared).
Exit 0 when every run agrees, 1 when one diverges beyond a near-tie, 2 on unusable input.
"""
import argparse
import json
import sys


def load(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"tp_tokens: {path}: cannot read an fk_model --greedy file ({e})")
    for key in ("arch", "layers", "seed", "steps", "sequences"):
        if key not in j:
            sys.exit(f"tp_tokens: {path}: field '{key}' missing (an fk_model --greedy file expected)")
    return j


def compare(base, run, tie_gap):
    """(verdict, rows): per sequence the tokens compared, the first difference and the base's gap there."""
    rows, ok = [], True
    for i, (b, r) in enumerate(zip(base["sequences"], run["sequences"])):
        bt, rt = b["tokens"], r["tokens"]
        first = next((k for k in range(min(len(bt), len(rt))) if bt[k] != rt[k]), None)
        if first is None and len(bt) == len(rt):
            rows.append({"sequence": i, "prompt_len": b["prompt_len"], "agreed": len(bt), "of": len(bt), "verdict": "same"})
            continue
        first = min(len(bt), len(rt)) if first is None else first
        gap = b["gaps"][first] if first < len(b.get("gaps", [])) else None
        near = gap is not None and gap <= tie_gap
        ok &= near
        rows.append({"sequence": i, "prompt_len": b["prompt_len"], "agreed": first, "of": len(bt), "base_gap": gap,
                     "verdict": "near-tie" if near else "DIVERGED"})
    return ok, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the TP-1 run's fk_model --greedy file")
    ap.add_argument("runs", nargs="+", help="the tensor-parallel runs' files")
    ap.add_argument("--tie-gap", type=float, default=0.30, help="near-tie bound in logits (default 0.30, docs/candidates.md)")
    ap.add_argument("--json", help="also write the comparison here")
    a = ap.parse_args()
    base = load(a.base)
    out, all_ok = [], True
    for path in a.runs:
        run = load(path)
        for key in ("arch", "layers", "seed", "steps"):
            bv, rv = base[key], run[key]
            if key == "arch":
                bv, rv = bv.split("@")[0], rv.split("@")[0]
            if bv != rv:
                sys.exit(f"tp_tokens: {path}: {key} {run[key]!r} differs from {a.base}'s {base[key]!r} (the same model and prompts expected)")
        if [s["prompt_len"] for s in run["sequences"]] != [s["prompt_len"] for s in base["sequences"]]:
            sys.exit(f"tp_tokens: {path}: other prompts than {a.base}")
        ok, rows = compare(base, run, a.tie_gap)
        all_ok &= ok
        agreed = sum(r["agreed"] for r in rows)
        total = sum(r["of"] for r in rows)
        print(f"{path} (tp {run.get('tp', 1)}) against {a.base}: {'PASS' if ok else 'FAIL'}, {agreed}/{total} tokens before any difference")
        for r in rows:
            gap = f", TP-1 top-2 gap {r['base_gap']:.3f}" if r.get("base_gap") is not None else ""
            print(f"  sequence {r['sequence']} (prompt {r['prompt_len']}): {r['agreed']}/{r['of']} {r['verdict']}{gap}")
        out.append({"run": path, "tp": run.get("tp", 1), "pass": ok, "agreed": agreed, "tokens": total, "tie_gap": a.tie_gap,
                    "sequences": rows})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"base": a.base, "arch": base["arch"], "layers": base["layers"], "runs": out}, f, indent=1)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
