#!/usr/bin/env python3
"""Self-test of bench/tp_tokens.py on made-up fk_model --greedy files (no GPU): the same tokens pass,
a first difference at a near-tie passes, one beyond the bound fails, and files of another model are
refused with the field named."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def greedy(path, tokens, gaps, tp=None, arch="acme/m", layers=2):
    j = {"tool": "fk_model", "arch": arch + (f"@tp{tp}" if tp else ""), "layers": layers, "seed": 7, "steps": len(tokens[0]) - 1,
         "sequences": [{"prompt_len": 5 + i, "tokens": t, "gaps": g} for i, (t, g) in enumerate(zip(tokens, gaps))]}
    if tp:
        j["tp"] = tp
    with open(path, "w") as f:
        json.dump(j, f)
    return path


def run(*args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "tp_tokens.py"), *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    failures = []

    def expect(cond, what, out):
        if not cond:
            failures.append(f"{what}:\n{out}")

    with tempfile.TemporaryDirectory() as d:
        gaps = [[1.0, 0.1, 2.0, 1.5], [0.9, 0.8, 0.7, 0.6]]
        base = greedy(os.path.join(d, "tp1.json"), [[1, 2, 3, 4], [5, 6, 7, 8]], gaps)
        same = greedy(os.path.join(d, "same.json"), [[1, 2, 3, 4], [5, 6, 7, 8]], gaps, tp=2)
        rc, out = run(base, same)
        expect(rc == 0 and "PASS, 8/8 tokens" in out, "identical tokens pass", out)
        tie = greedy(os.path.join(d, "tie.json"), [[1, 9, 9, 9], [5, 6, 7, 8]], gaps, tp=2)  # differs where the gap is 0.1
        rc, out = run(base, tie, "--json", os.path.join(d, "out.json"))
        expect(rc == 0 and "near-tie" in out and "1/4" in out, "a difference at a near-tie passes", out)
        with open(os.path.join(d, "out.json")) as f:
            expect(json.load(f)["runs"][0]["sequences"][0]["verdict"] == "near-tie", "the JSON says near-tie", out)
        far = greedy(os.path.join(d, "far.json"), [[1, 2, 3, 4], [5, 6, 0, 0]], gaps, tp=2)  # differs where the gap is 0.7
        rc, out = run(base, far)
        expect(rc == 1 and "DIVERGED" in out and "FAIL" in out, "a difference beyond the bound fails", out)
        rc, out = run(base, far, "--tie-gap", "0.75")
        expect(rc == 0, "a wider bound accepts it", out)
        # --base-teacher: where the TP-1 run is further from its reference than its own gap, its pick is no evidence.
        def base_tf(path, max_abs, tokens=([1, 2, 3, 4], [5, 6, 7, 8])):
            j = {"tool": "fk_model", "mode": "teacher-forced", "forced_from": "own greedy tokens", "arch": "acme/m", "layers": 2,
                 "seed": 7, "steps": 3, "sequences": [{"prompt_len": 5 + i, "tokens": list(t), "max_abs": m}
                                                      for i, (t, m) in enumerate(zip(tokens, max_abs))]}
            with open(path, "w") as f:
                json.dump(j, f)
            return path
        off = base_tf(os.path.join(d, "tf1_off.json"), [[0.1] * 4, [0.1, 0.1, 0.9, 0.1]])  # 0.9 >= the gap 0.7 at step 2
        rc, out = run(base, far, "--base-teacher", off)
        expect(rc == 0 and "TP-1 off its reference" in out, "a difference where TP 1 is off by more than its gap passes", out)
        on = base_tf(os.path.join(d, "tf1_on.json"), [[0.1] * 4, [0.1, 0.1, 0.5, 0.1]])
        rc, out = run(base, far, "--base-teacher", on)
        expect(rc == 1 and "DIVERGED" in out, "a difference beyond TP 1's own error still fails", out)
        rc, out = run(base, far, "--base-teacher", base_tf(os.path.join(d, "tf1_other.json"), [[0.1] * 4] * 2, ([1, 2, 3, 4], [5, 6, 7, 9])))
        expect(rc != 0 and "not the teacher-forced run" in out, "another run's teacher-forced file is refused", out)
        other = greedy(os.path.join(d, "other.json"), [[1, 2, 3, 4], [5, 6, 7, 8]], gaps, tp=2, layers=3)
        rc, out = run(base, other)
        expect(rc != 0 and "layers" in out, "another depth is refused naming the field", out)
        with open(os.path.join(d, "bad.json"), "w") as f:
            f.write("{}")
        rc, out = run(base, os.path.join(d, "bad.json"))
        expect(rc != 0 and "field 'arch' missing" in out, "a file that is not a greedy file is refused", out)
    with tempfile.TemporaryDirectory() as d:  # --teacher-forced
        def tf(path, errs, tops=None, top_logits=None, tp=None):
            rows = len(errs[0])
            j = {"tool": "fk_model", "mode": "teacher-forced", "arch": "acme/m" + (f"@tp{tp}" if tp else ""), "layers": 2, "seed": 7,
                 "steps": rows - 1, "sequences": [{"prompt_len": 5 + i, "tokens": list(range(rows)), "rel_l2": e,
                                                   "ref_top": (tops or [[3] * rows] * len(errs))[i],
                                                   "ref_top_logit": (top_logits or [[4.0] * rows] * len(errs))[i],
                                                   "ref_gap": [0.5] * rows} for i, e in enumerate(errs)]}
            if tp:
                j["tp"] = tp
            with open(path, "w") as f:
                json.dump(j, f)
            return path
        base = tf(os.path.join(d, "tf1.json"), [[0.010] * 50, [0.012] * 50])
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "ok.json"), [[0.011] * 50, [0.013] * 50], tp=2))
        expect(rc == 0 and "PASS" in out and "ratio 1.0" in out, "errors like TP 1's pass", out)
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "far.json"), [[0.02] * 50, [0.024] * 50], tp=2))
        expect(rc == 1 and "FAIL" in out and "ratio 2.0" in out, "errors twice TP 1's fail", out)
        few = [[0.010] * 50, [0.012] * 49 + [0.5]]  # one bad row: within the allowed outliers, and dropped from the RMS
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "one.json"), few, tp=2))
        expect(rc == 0 and "outliers 1 (allowed 2)" in out, "one outlier row is allowed", out)
        many = [[0.010] * 45 + [0.5] * 5, [0.012] * 50]
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "many.json"), many, tp=2))
        expect(rc == 1 and "outliers 5" in out, "five outlier rows are not", out)
        moved = tf(os.path.join(d, "base_ev.json"), [[0.010] * 47 + [0.3] * 3, [0.012] * 50])
        rc, out = run("--teacher-forced", moved, tf(os.path.join(d, "ev.json"), [[0.010] * 50, [0.3] * 3 + [0.012] * 47], tp=2))
        expect(rc == 0 and "outliers 0" in out, "discrete events on other rows than TP 1's are ranked, not outliers", out)
        # Two populations (routing flips, Note [Teacher-forced bound]): TP 1 with 10 rows at 0.2-0.3, the run with 13.
        two = tf(os.path.join(d, "base_two.json"), [[0.010] * 45 + [0.2] * 5, [0.012] * 45 + [0.3] * 5])
        rc, out = run("--teacher-forced", two, tf(os.path.join(d, "two.json"), [[0.010] * 43 + [0.2] * 7, [0.012] * 44 + [0.3] * 6], tp=2))
        expect(rc == 0 and "outliers 0" in out, "a few more rows of TP 1's upper population are not outliers", out)
        rc, out = run("--teacher-forced", two, tf(os.path.join(d, "two_bad.json"), [[0.010] * 42 + [0.2] * 5 + [1.5] * 3,
                                                                                     [0.012] * 45 + [0.3] * 5], tp=2))
        expect(rc == 1 and "outliers 3" in out, "rows worse than anything TP 1 shows still are", out)
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "drift.json"), [[0.010] * 50, [0.012] * 50],
                                                     top_logits=[[4.0] * 50, [4.0] * 49 + [4.0625]], tp=2))
        expect(rc == 0, "references two bf16 ulps apart agree within TP 1's own drift", out)
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "ref.json"), [[0.010] * 50, [0.012] * 50],
                                                     top_logits=[[4.0] * 50, [4.0] * 49 + [4.2]], tp=2))
        expect(rc == 0 and "references apart on 1 rows" in out, "one row's references apart is allowed (routing near-ties)", out)
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "refs.json"), [[0.010] * 50, [0.012] * 50],
                                                      top_logits=[[4.0] * 48 + [4.2] * 2, [4.0] * 49 + [4.2]], tp=2))
        expect(rc == 1 and "reference top logit" in out and "references apart on 3 rows" in out, "references apart on 3 rows are refused", out)
        rc, out = run("--teacher-forced", base, tf(os.path.join(d, "all.json"), [[0.010] * 50, [0.012] * 50],
                                                     top_logits=[[5.0] * 50, [5.0] * 50], tp=2))
        expect(rc == 1 and "references apart on 100 rows" in out, "another model's references are refused", out)
    for f in failures:
        print("FAIL:", f)
    print(f"tp_tokens selftest: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
