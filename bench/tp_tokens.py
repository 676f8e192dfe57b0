#!/usr/bin/env python3
"""Compare tensor-parallel runs with the unsharded run (issue 23).

    python3 bench/tp_tokens.py tp1.json tp2.json [tp4.json ...] [--tie-gap 0.30] [--base-teacher tf1.json] [--json out.json]
    python3 bench/tp_tokens.py --teacher-forced tf1.json tf2.json [tf4.json ...] [--json out.json]

Greedy (the default): each file is an `fk_model --greedy` file (the first the TP-1 run: same arch,
layers, seed, steps and prompts). Per sequence the tokens must agree up to the end, or up to a first
difference where the TP-1 run's top-2 logit gap at that step is within the near-tie bound
(docs/candidates.md, "greedy tokens": a near-tie, accepted; later tokens condition on other prefixes
and are not compared). With --base-teacher (the TP-1 run's own `--teacher-forced` file, fed its own greedy tokens,
so its row k is the step that picked token k) the bound at a step is also the TP-1 run's own largest logit error
there: where the TP-1 run is further from the model's fp32 reference than its top-2 gap, its pick is no evidence
against the other run's (MoE routing near-ties with seeded weights: DeepSeek-V3 sequence 3 step 9, gap 0.69, the
TP-1 logits 0.93 off the reference and the TP 2 + EP 2 logits 0.11; bench/results/2026-11-28-s29).

--teacher-forced: each file is an `fk_model --teacher-forced` file, every run fed the same tokens
(--force-tokens: the TP-1 run's greedy file) and scored row by row against the unsharded model's
composite fp32 reference (Note [Sharded references]). The references must agree row by row to the
TP-1 run's own error at that row: top logits within tol = max(0.05, 2 x the TP-1 row's rel_l2 x its top
logit), and the same top token unless the TP-1 reference's top-2 gap is under tol. (Both references
are the same model summed in another order; over a whole model's bf16-rounded layers they drift apart
by about what the run drifts from its reference: 2 bf16 ulps of the top logit were seen at 32 layers.
Wrong slices or a wrongly gathered table move every row by far more.) At most max(1, 2% of the rows)
rows may have references apart: an MoE reference adopts its own run's near-tied routing choices (Note
[Routing capture] in fk/tasks/moe.h), so where the two runs routed a token differently their references
follow different experts (4 bf16 ulps of the top logit on 2 of 132 rows of Qwen3-30B-A3B at TP 2, H100).
Each TP run's errors are then
held to the TP-1 run's by the rules of Note [Teacher-forced bound] (generator/src/tools/compare.cc),
with the outliers ranked: every error finite; the RMS of the relative L2 errors at most 1.3 x the
TP-1 run's, over the rows less the allowed outliers; at most max(1, 2% of the rows) errors above
3 x the TP-1 run's error of the same rank (both sorted) + 0.002 and above the TP-1 run's worst row.
Ranked, not row by row: discrete events (an MoE router's near-tie choosing another expert, a rounding
flip) land on other rows in each run, and the TP-1 run has its own share of them. Where such events
are common the errors are two populations (DeepSeek-V3 with seeded weights, 5 layers, 2 x H200: 83 of
260 TP-1 rows at rel_l2 0.12-0.32 after another expert choice than the reference's, the rest at
0.020-0.035), and a run with a few more of them (92: the count varies by about its square root) puts
rows of the upper population beside TP-1 rows of the lower one; those are not outliers unless worse
than anything the TP-1 run shows. The RMS bound still holds the count: twice TP-1's share fails it.

Exit 0 when every run agrees, 1 when one does not, 2 on unusable input.
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


def compare(base, run, tie_gap, base_tf=None):
    """(verdict, rows): per sequence the tokens compared, the first difference and the base's gap there; base_tf: the
    TP-1 run's own teacher-forced file, whose row errors widen the bound where they exceed it."""
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
        row = {"sequence": i, "prompt_len": b["prompt_len"], "agreed": first, "of": len(bt), "base_gap": gap}
        if not near and gap is not None and base_tf is not None:
            errs = base_tf["sequences"][i].get("max_abs", [])
            if first < len(errs) and errs[first] is not None and gap <= errs[first]:
                near = True
                row["base_error"] = errs[first]
        ok &= near
        row["verdict"] = ("near-tie" if "base_error" not in row else "TP-1 off its reference") if near else "DIVERGED"
        rows.append(row)
    return ok, rows


def teacher_compare(base, run):
    """(ok, summary) of a TP run's teacher-forced rows against the TP-1 run's (Note [Teacher-forced bound])."""
    eb, ec, problems, rows_off = [], [], [], set()
    for i, (b, r) in enumerate(zip(base["sequences"], run["sequences"])):
        if b["tokens"] != r["tokens"]:
            return False, {"problem": f"sequence {i}: the runs were fed other tokens (--force-tokens the same greedy file expected)"}
        for s in range(len(b["rel_l2"])):
            tol = max(0.05, 2 * b["rel_l2"][s] * abs(b["ref_top_logit"][s]))  # the TP-1 run's own drift at this row
            before = len(problems)
            if b["ref_top"][s] != r["ref_top"][s] and b["ref_gap"][s] >= tol:
                problems.append(f"sequence {i} step {s}: reference top token {r['ref_top'][s]} vs TP-1's {b['ref_top'][s]} "
                                f"(TP-1's top-2 gap {b['ref_gap'][s]:.4f}, bound {tol:.4f})")
            if abs(b["ref_top_logit"][s] - r["ref_top_logit"][s]) > tol:
                problems.append(f"sequence {i} step {s}: reference top logit {r['ref_top_logit'][s]:.4f} vs TP-1's "
                                f"{b['ref_top_logit'][s]:.4f} (bound {tol:.4f})")
            if len(problems) > before:
                rows_off.add((i, s))
            eb.append(b["rel_l2"][s])
            ec.append(r["rel_l2"][s])
    nonfinite = sum(1 for e in ec if e is None or e != e or e in (float("inf"), float("-inf")))
    n = len(ec)
    allowed = max(1, int(0.02 * n))
    ranked = zip(sorted(ec, reverse=True), sorted(eb, reverse=True)) if nonfinite == 0 else []
    worst = max(eb) if eb else 0.0
    outliers = [k for k, (c, e) in enumerate(ranked) if c > 3 * e + 0.002 and c > worst]
    keep = sorted(range(n), key=lambda k: ec[k] - eb[k])[: n - min(allowed, n - 1)] if nonfinite == 0 else []
    rms = lambda xs: (sum(x * x for x in xs) / len(xs)) ** 0.5 if xs else 0.0  # noqa: E731
    ratio = rms([ec[k] for k in keep]) / rms([eb[k] for k in keep]) if keep and rms([eb[k] for k in keep]) > 0 else None
    ok = len(rows_off) <= allowed and nonfinite == 0 and ratio is not None and ratio <= 1.3 and len(outliers) <= allowed
    return ok, {"rows": n, "rms_ratio": ratio, "rms_tp1": rms(eb), "rms_tp": rms([e for e in ec if e == e]), "outliers": len(outliers),
                "allowed_outliers": allowed, "nonfinite": nonfinite, "reference_rows_apart": len(rows_off),
                "reference_problems": problems[:10]}


def main_teacher(a):
    files = [a.base] + a.runs
    runs = [load(p) for p in files]
    base = runs[0]
    out, all_ok = [], True
    for path, run in zip(files[1:], runs[1:]):
        for key in ("layers", "seed", "steps"):
            if base[key] != run[key]:
                sys.exit(f"tp_tokens: {path}: {key} {run[key]!r} differs from {a.base}'s {base[key]!r}")
        if base["arch"].split("@")[0] != run["arch"].split("@")[0] or run.get("mode") != "teacher-forced" or base.get("mode") != "teacher-forced":
            sys.exit(f"tp_tokens: {path}: expected fk_model --teacher-forced files of the same model")
        ok, summ = teacher_compare(base, run)
        all_ok &= ok
        ratio = f"{summ['rms_ratio']:.3f}" if summ.get("rms_ratio") is not None else "-"
        print(f"{path} (tp {run.get('tp', 1)}) against {a.base}: {'PASS' if ok else 'FAIL'}, {summ.get('rows', 0)} rows, RMS rel_l2 "
              f"{summ.get('rms_tp', 0):.5f} vs TP-1 {summ.get('rms_tp1', 0):.5f} (ratio {ratio}, bound 1.3), outliers "
              f"{summ.get('outliers', 0)} (allowed {summ.get('allowed_outliers', 0)}), references apart on "
              f"{summ.get('reference_rows_apart', 0)} rows (allowed {summ.get('allowed_outliers', 0)})" + (f"; {summ['problem']}" if "problem" in summ else ""))
        for p in summ.get("reference_problems", []):
            print("  " + p)
        out.append({"run": path, "tp": run.get("tp", 1), "pass": ok, **summ})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"base": a.base, "arch": base["arch"], "layers": base["layers"], "mode": "teacher-forced", "runs": out}, f, indent=1)
    return 0 if all_ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the TP-1 run's fk_model --greedy file")
    ap.add_argument("runs", nargs="+", help="the tensor-parallel runs' files")
    ap.add_argument("--tie-gap", type=float, default=0.30, help="near-tie bound in logits (default 0.30, docs/candidates.md)")
    ap.add_argument("--json", help="also write the comparison here")
    ap.add_argument("--teacher-forced", action="store_true", help="compare fk_model --teacher-forced files (see above)")
    ap.add_argument("--base-teacher", help="greedy: the TP-1 run's own fk_model --teacher-forced file (see above)")
    a = ap.parse_args()
    if a.teacher_forced:
        return main_teacher(a)
    base = load(a.base)
    base_tf = None
    if a.base_teacher:
        base_tf = load(a.base_teacher)
        if (base_tf.get("mode") != "teacher-forced" or base_tf.get("forced_from") != "own greedy tokens" or
                base_tf["arch"] != base["arch"] or base_tf["seed"] != base["seed"] or base_tf["layers"] != base["layers"] or
                [q["tokens"] for q in base_tf["sequences"]] != [q["tokens"] for q in base["sequences"]]):
            sys.exit(f"tp_tokens: {a.base_teacher}: not the teacher-forced run of {a.base} on its own greedy tokens "
                     "(same arch, seed, layers and tokens expected)")
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
        ok, rows = compare(base, run, a.tie_gap, base_tf)
        all_ok &= ok
        agreed = sum(r["agreed"] for r in rows)
        total = sum(r["of"] for r in rows)
        print(f"{path} (tp {run.get('tp', 1)}) against {a.base}: {'PASS' if ok else 'FAIL'}, {agreed}/{total} tokens before any difference")
        for r in rows:
            gap = f", TP-1 top-2 gap {r['base_gap']:.3f}" if r.get("base_gap") is not None else ""
            if r.get("base_error") is not None:
                gap += f" within the TP-1 run's own logit error there ({r['base_error']:.3f})"
            print(f"  sequence {r['sequence']} (prompt {r['prompt_len']}): {r['agreed']}/{r['of']} {r['verdict']}{gap}")
        out.append({"run": path, "tp": run.get("tp", 1), "pass": ok, "agreed": agreed, "tokens": total, "tie_gap": a.tie_gap,
                    "sequences": rows})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"base": a.base, "arch": base["arch"], "layers": base["layers"], "runs": out}, f, indent=1)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
