#!/usr/bin/env python3
"""Benchmarks candidate sets against the baseline, in place, at every level (docs/candidates.md).

    scripts/bench_candidates.py SET_DIR [SET_DIR ...] [--out DIR] [--build-dir DIR]
        [--max-level N] [--case-timeout S] [--model] [--model-layers N] [--model-checks-only]
        [--static-results FILE | --checker PATH] [--bench-arg=ARG ...] [--cmake-arg=ARG ...]
    scripts/bench_candidates.py SET_DIR ... --static-only --checker PATH --static-results FILE

A set is a folder of candidates laid out as `fastkernels scaffold` writes them
(L<level>/<task>.cu); the folder name names the set. Steps:
  1. static check of every candidate (`fastkernels check`, when a checker with LibTooling is
     given), or verdicts read from --static-results (the GPU machine has no libclang), else
     UNCHECKED;
  2. one CMake build with -DFK_CANDIDATE_SETS: fk_bench_<set> / fk_model_<set> per set and
     fk_bench_baseline / fk_model_baseline (the same tasks without candidates); a set whose
     targets do not build is COMPILE_ERROR, the others go on;
  3. fk_bench of the baseline and of every set (same filters, seeds and method), each case
     under a watchdog (--case-timeout): after a TIMEOUT or a lost CUDA context the run is
     resumed after that case (--resume), so a hung candidate never hangs the session;
  4. with --model, for sets that reach an L4 task: fk_model --greedy (tokens and top-2 gaps),
     fk_model --teacher-forced (every step's logits against fp32, fed the baseline's greedy
     tokens) and fk_model --bench (tokens/s; not with --model-checks-only) for the baseline and
     the set, per architecture;
  5. <out>/<set>/status.json for every set, then `fastkernels compare <out>` when a fastkernels
     binary is at hand (otherwise run it on any machine: it needs no GPU).
Exit codes: 0 done (whatever the statuses); 2 usage error; 3 the baseline itself failed to
build or run.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_TIMEOUT, EXIT_CONTEXT_LOST = 4, 5


def log(msg):
    print(f"[candidates] {msg}", flush=True)


def fail_usage(msg):
    print(f"bench_candidates.py: {msg}", file=sys.stderr)
    sys.exit(2)


def find_candidates(set_dir):
    out = []
    for level_dir in sorted(os.listdir(set_dir)):
        m = re.fullmatch(r"L([1-4])", level_dir)
        path = os.path.join(set_dir, level_dir)
        if not m or not os.path.isdir(path):
            continue
        for f in sorted(os.listdir(path)):
            if f.endswith(".cu"):
                out.append({"task": f[:-3], "level": int(m.group(1)), "file": os.path.relpath(os.path.join(path, f), ROOT)})
    return out


def run_checker(checker, cand):
    """Runs `fastkernels check` on one candidate; None when the checker has no LibTooling."""
    p = subprocess.run([checker, "check", os.path.join(ROOT, cand["file"])], cwd=ROOT, capture_output=True, text=True)
    if p.returncode == 2 and "LibTooling" in (p.stdout + p.stderr):
        return None
    # Exit 2 (unknown task) or 4 (I/O) is no verdict: UNCHECKED, with the checker's words kept.
    verdicts = {0: "PASSED", 1: "INTERFACE_MISMATCH", 3: "COMPILE_ERROR", 5: "SUSPECT"}
    text = (p.stdout + p.stderr).replace(ROOT + os.sep, "")  # repository-relative paths: same on every machine
    diags = [line for line in text.splitlines() if " error: " in line or " warning: " in line]
    if p.returncode in (2, 4):
        diags = text.strip().splitlines()[-5:]
    return {"task": cand["task"], "file": cand["file"], "exit": p.returncode,
            "verdict": verdicts.get(p.returncode, "UNCHECKED"),
            "flags": sorted(set(re.findall(r"\[SUSPECT:([a-z0-9-]+)\]", text))),
            "diagnostics": "\n".join(diags[:20])}


def load_static(path):
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                out[r["file"]] = r
            except (ValueError, KeyError) as e:
                fail_usage(f"{path}:{n}: expected a JSON object with 'file' ({e})")
    return out


def launched(exe, world, launcher):
    """The command that runs `exe` on `world` ranks (fk_launch, one process per GPU), or alone."""
    return [launcher, "--nproc", str(world), "--", exe] if world > 1 else [exe]


def run_bench(exe, jsonl, log_path, args, case_timeout, total_timeout, world=1, launcher=""):
    """fk_bench with the watchdog; resumes after TIMEOUT / lost context. Returns the last exit code.
    world > 1: every rank under fk_launch, fk_bench --world-size world (the tasks sharded for it)."""
    if os.path.exists(jsonl):
        os.remove(jsonl)
    cmd = launched(exe, world, launcher) + (["--world-size", str(world)] if world > 1 else []) + \
        ["--jsonl", jsonl, "--case-timeout", str(case_timeout)] + args
    deadline = time.time() + total_timeout
    rc, first = None, True
    with open(log_path, "a") as lf:
        while True:
            c = cmd + ([] if first else ["--resume"])
            lf.write("$ " + " ".join(c) + "\n")
            lf.flush()
            try:
                rc = subprocess.run(c, stdout=lf, stderr=lf, timeout=max(deadline - time.time(), 1)).returncode
            except subprocess.TimeoutExpired:
                lf.write("bench_candidates.py: the whole run passed its time limit\n")
                return 124
            first = False
            if rc not in (EXIT_TIMEOUT, EXIT_CONTEXT_LOST):
                return rc
            lf.write(f"bench_candidates.py: exit {rc}; resuming after the last recorded case\n")


def layout_args(arch):
    """(config id, fk_model's --tp / --ep arguments) of a model id: "org/name@tp2_ep2" -> ("org/name", [--tp 2 --ep 2])."""
    base, _, layout = arch.partition("@")
    par = []
    for part in layout.split("_") if layout else []:
        m = re.fullmatch(r"(tp|ep)(\d+)", part)
        if not m:
            raise SystemExit(f"bench_candidates.py: {arch}: unknown layout part {part!r}")
        par += ["--" + m.group(1), m.group(2)]
    return base, par


def layout_ranks(arch):
    """The ranks a model's layout runs on: its tp ("org/name@tp2_ep2" -> 2; unsharded 1), or its ep at a data-parallel
    layout ("org/name@ep2" -> 2)."""
    par = layout_args(arch)[1]
    for flag in ("--tp", "--ep"):
        if flag in par:
            return int(par[par.index(flag) + 1])
    return 1



def run_model(exe, arch, outdir, layers, timeout, log_path, force_from, bench=True, world=1, launcher=""):
    """fk_model --greedy, --teacher-forced (feeding the tokens of the greedy file `force_from`: the
    baseline's) and --bench for one architecture, into <outdir>/greedy-<arch>.json,
    <outdir>/teacher-<arch>.json and (appended) <outdir>/model.jsonl; returns a dict of what happened."""
    res = {}
    tag = arch.replace("/", "__")
    # A layout's model ("org/name@tp2_ep2") runs as the unsharded config under --tp / --ep, on world ranks.
    base, par = layout_args(arch)
    common = launched(exe, world, launcher) + ["--arch", base] + par + (["--layers", str(layers)] if layers else [])
    part = os.path.join(outdir, f"model-{tag}.jsonl")
    steps = {"greedy": common + ["--greedy", os.path.join(outdir, f"greedy-{tag}.json"), "--decode-steps", "64"]}
    steps["teacher"] = common + ["--teacher-forced", os.path.join(outdir, f"teacher-{tag}.json"), "--decode-steps", "64",
                                 "--force-tokens", force_from]
    if bench:
        steps["bench"] = common + ["--bench", "--decode-batches", "1,8,32", "--prefill", "1x2048", "--mem-steps", "0",
                                   "--jsonl", part]
    with open(log_path, "a") as lf:
        for name, c in steps.items():
            if name == "teacher" and not os.path.exists(force_from):
                res[name] = f"not run: no {force_from}"
                continue
            lf.write("$ " + " ".join(c) + "\n")
            lf.flush()
            try:
                rc = subprocess.run(c, stdout=lf, stderr=lf, timeout=timeout).returncode
                res[name] = "OK" if rc == 0 else f"exit {rc}"
            except subprocess.TimeoutExpired:
                res[name] = "TIMEOUT"
    if os.path.exists(part):
        with open(part) as src, open(os.path.join(outdir, "model.jsonl"), "a") as dst:
            dst.write(src.read())
        os.remove(part)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="+", help="candidate set folders (L<level>/<task>.cu inside)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "candidates"))
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "candidates"))
    ap.add_argument("--max-level", type=int, default=4, choices=[1, 2, 3, 4],
                    help="highest level of affected tasks to build and bench (1: the candidates' own tasks)")
    ap.add_argument("--case-timeout", type=float, default=120, help="seconds per case before TIMEOUT")
    ap.add_argument("--run-timeout", type=float, default=1800, help="seconds per fk_bench run, all resumes included")
    ap.add_argument("--model", action="store_true", help="also run fk_model (greedy tokens, tokens/s) for sets reaching L4")
    ap.add_argument("--model-layers", type=int, default=0, help="decoder layers for fk_model (0 = the config's)")
    ap.add_argument("--model-timeout", type=float, default=600)
    ap.add_argument("--model-checks-only", action="store_true",
                    help="with --model: greedy and teacher-forced runs only, no fk_model --bench (tokens/s)")
    ap.add_argument("--checker", help="a fastkernels binary built with LibTooling (static checks)")
    ap.add_argument("--static-results", help="static verdicts as JSON lines (written by --static-only)")
    ap.add_argument("--static-only", action="store_true", help="run the checker over the sets, write --static-results, stop")
    ap.add_argument("--compare", help="fastkernels binary to run `compare` with at the end")
    ap.add_argument("--bench-arg", action="append", default=[], help="passed to every fk_bench (e.g. --bench-arg=--case=^t1$)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of every fk_bench run (inputs and off-registry shapes; default: a new one, printed, "
                         "the same for the baseline and every set)")
    ap.add_argument("--cmake-arg", action="append", default=[], help="passed to the CMake configure")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--build-only", action="store_true",
                    help="configure and build, then stop (a later run with the same sets and --build-dir only relinks)")
    ap.add_argument("--world-size", type=int, default=1,
                    help="ranks (GPUs) of every fk_bench / fk_model run, under fk_launch: the tasks sharded for that many "
                         "(a collective candidate: Note [Collective tasks])")
    ap.add_argument("--arch", default="", help="only the tasks of architectures matching this regex (fk_bench --arch) and "
                                                 "only their models under --model")
    a = ap.parse_args()

    sets = []
    for d in a.sets:
        d = os.path.abspath(d)
        name = os.path.basename(d.rstrip("/"))
        if not os.path.isdir(d):
            fail_usage(f"{d}: not a folder")
        if not re.fullmatch(r"[A-Za-z0-9_]+", name) or name == "baseline":
            fail_usage(f"{d}: a set's folder name must be letters, digits and _ (and not 'baseline')")
        cands = find_candidates(d)
        if not cands:
            fail_usage(f"{d}: no candidate (expected L<level>/<task>.cu)")
        sets.append({"name": name, "dir": d, "candidates": cands})
    if len({s["name"] for s in sets}) != len(sets):
        fail_usage("two sets have the same folder name")

    # 1. Static checks.
    static = {}
    if a.static_results and not a.static_only:
        static = load_static(a.static_results)
    if a.checker:
        for s in sets:
            for c in s["candidates"]:
                r = run_checker(a.checker, c)
                if r is None:
                    if a.static_only:
                        fail_usage(f"{a.checker} was built without LibTooling; it cannot check")
                    break
                static[c["file"]] = r
    if a.static_only:
        if not a.static_results or not a.checker:
            fail_usage("--static-only needs --checker and --static-results")
        tmp = a.static_results + ".tmp"
        with open(tmp, "w") as f:
            for key in sorted(static):
                f.write(json.dumps(static[key], sort_keys=True) + "\n")
        os.replace(tmp, a.static_results)
        log(f"wrote {a.static_results} ({len(static)} candidates)")
        return 0

    # The commit the results name (fk_bench / fk_model read FK_COMMIT when the build has none).
    if "FK_COMMIT" not in os.environ:
        g = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        os.environ["FK_COMMIT"] = g.stdout.strip() if g.returncode == 0 else "unknown"

    # 2. One build: baseline and every set side by side.
    os.makedirs(a.out, exist_ok=True)
    b = a.build_dir
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cfg = ["cmake", "-S", ROOT, "-B", b, *gen, "-DCMAKE_BUILD_TYPE=Release", "-DFK_BUILD_TESTS=OFF",
           "-DFK_CANDIDATE_SETS=" + ";".join(s["dir"] for s in sets), f"-DFK_CANDIDATE_MAX_LEVEL={a.max_level}", *a.cmake_arg]
    t0 = time.time()
    with open(os.path.join(a.out, "configure.log"), "w") as lf:
        if subprocess.run(cfg, stdout=lf, stderr=lf).returncode != 0:
            log(f"configure failed: see {a.out}/configure.log")
            return 3
    set_info = {}
    for s in sets:
        with open(os.path.join(b, "candidate_sets", s["name"], "set.json")) as f:
            set_info[s["name"]] = json.load(f)
    any_model = a.model and any(set_info[s["name"]]["model"] for s in sets)
    targets = ["fk_bench_baseline"] + (["fk_model_baseline"] if any_model else []) + (["fk_launch"] if a.world_size > 1 else [])
    for s in sets:
        targets.append("fk_bench_" + s["name"])
        if a.model and set_info[s["name"]]["model"]:
            targets.append("fk_model_" + s["name"])
    for t in targets:  # a stale binary must not stand in for a failed build
        if os.path.exists(os.path.join(b, t)):
            os.remove(os.path.join(b, t))
    build_log = os.path.join(a.out, "build.log")
    keep_going = ["--", "-k", "0"] if gen else ["--", "-k"]
    with open(build_log, "w") as lf:
        subprocess.run(["cmake", "--build", b, "-j", str(a.jobs), "--target", *targets, *keep_going], stdout=lf, stderr=lf)
    log(f"build {time.time() - t0:.0f}s")
    built = {t: os.path.exists(os.path.join(b, t)) for t in targets}
    if a.build_only:
        log("built: " + ", ".join(t for t in targets if built[t]) + ("" if all(built.values()) else
            "; NOT built: " + ", ".join(t for t in targets if not built[t])))
        return 0 if all(built.values()) else 3
    if not built["fk_bench_baseline"]:
        log(f"the baseline did not build: see {build_log}")
        return 3
    with open(build_log, errors="replace") as f:
        build_text = f.read().splitlines()

    # 3. fk_bench: baseline, then every set that built; one seed for all of them, so they run the
    #    same inputs and the same off-registry cases (Note [Off-registry shapes] in runner.cc).
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(6), "little")
    log(f"seed {seed} (pass --seed {seed} to rerun the same cases)")
    if not any(x.startswith("--seed") for x in a.bench_arg):
        a.bench_arg = a.bench_arg + [f"--seed={seed}"]
    if a.arch:
        a.bench_arg = a.bench_arg + ["--arch", a.arch]
    if a.world_size > 1 and not built.get("fk_launch"):
        log(f"fk_launch did not build: see {build_log}")
        return 3
    dist = {"world": a.world_size, "launcher": os.path.join(b, "fk_launch")}
    base_dir = os.path.join(a.out, "baseline")
    os.makedirs(base_dir, exist_ok=True)
    for stale in [os.path.join(a.out, x["name"]) for x in sets] + [base_dir]:
        for f in os.listdir(stale) if os.path.isdir(stale) else []:
            if f.startswith(("model", "greedy", "teacher")):
                os.remove(os.path.join(stale, f))
    rc = run_bench(os.path.join(b, "fk_bench_baseline"), os.path.join(base_dir, "bench.jsonl"),
                   os.path.join(base_dir, "bench.log"), a.bench_arg, a.case_timeout, a.run_timeout, **dist)
    log(f"baseline fk_bench exit {rc} ({time.time() - t0:.0f}s)")
    manifest = json.load(open(os.path.join(ROOT, "generated", "manifest.json")))
    archs_of = {m["name"]: m["archs"] for m in manifest["tasks"]}
    model_archs = {}
    for s in sets:
        l4 = [t for t in set_info[s["name"]]["affected"]
              if any(m["name"] == t and m["level"] == 4 for m in manifest["tasks"])]
        # The models of this run's world size only: a layout of another size needs its own --world-size run.
        every = {arch for m in manifest["tasks"] if m["name"] in l4 for arch in m["archs"] if not a.arch or re.search(a.arch, arch)}
        model_archs[s["name"]] = sorted(x for x in every if layout_ranks(x) == a.world_size)
        if len(every) > len(model_archs[s["name"]]):
            log(f"{s['name']}: fk_model skips {len(every) - len(model_archs[s['name']])} model(s) of another layout size than "
                f"--world-size {a.world_size} (run them with --world-size N --arch REGEX)")
    base_model = {}

    def base_greedy(arch):  # every build is fed the baseline's greedy tokens (Note [Teacher-forced check])
        return os.path.join(base_dir, "greedy-" + arch.replace("/", "__") + ".json")

    if any_model:
        for arch in sorted({x for s in sets for x in model_archs[s["name"]]}):
            base_model[arch] = run_model(os.path.join(b, "fk_model_baseline"), arch, base_dir, a.model_layers, a.model_timeout,
                                         os.path.join(base_dir, "model.log"), base_greedy(arch), not a.model_checks_only, **dist)
            log(f"baseline fk_model {arch}: {base_model[arch]}")

    for s in sets:
        name, d = s["name"], os.path.join(a.out, s["name"])
        os.makedirs(d, exist_ok=True)
        ok = built["fk_bench_" + name] and (not a.model or not set_info[name]["model"] or built["fk_model_" + name])
        cand_files = [c["file"] for c in s["candidates"]]
        status = {
            "set": name,
            "candidates": s["candidates"],
            "static": [static.get(c["file"], {"task": c["task"], "file": c["file"], "verdict": "UNCHECKED", "exit": None,
                                              "flags": [], "diagnostics": ""}) for c in s["candidates"]],
            "build": "OK" if ok else "COMPILE_ERROR",
            "build_log": "",
            # With --arch, only the tasks of the selected architectures ran (fk_bench --arch); compare expects those.
            "affected": [t for t in set_info[name]["affected"] if t not in set_info[name]["tasks"] and
                         (not a.arch or any(re.search(a.arch, x) for x in archs_of.get(t, [])))],
            "max_level": a.max_level,
        }
        if a.arch:
            status["arch"] = a.arch
        if not ok:
            for stale in ("bench.jsonl", "bench.log"):
                if os.path.exists(os.path.join(d, stale)):
                    os.remove(os.path.join(d, stale))
            mine = [line for line in build_text if any(os.path.basename(f) in line for f in cand_files) or
                    f"/{name}/" in line or f"_{name}" in line]
            status["build_log"] = "\n".join([line for line in mine if "error" in line][:30] or mine[-30:])
            log(f"{name}: COMPILE_ERROR")
        else:
            rc = run_bench(os.path.join(b, "fk_bench_" + name), os.path.join(d, "bench.jsonl"), os.path.join(d, "bench.log"),
                           a.bench_arg, a.case_timeout, a.run_timeout, **dist)
            status["bench_exit"] = rc
            log(f"{name}: fk_bench exit {rc} ({time.time() - t0:.0f}s)")
            if a.model and set_info[name]["model"]:
                status["model_runs"] = {}
                for arch in model_archs[name]:
                    status["model_runs"][arch] = run_model(os.path.join(b, "fk_model_" + name), arch, d, a.model_layers,
                                                           a.model_timeout, os.path.join(d, "model.log"), base_greedy(arch),
                                                           not a.model_checks_only, **dist)
                    log(f"{name}: fk_model {arch}: {status['model_runs'][arch]}")
        with open(os.path.join(d, "status.json"), "w") as f:
            json.dump(status, f, indent=1, sort_keys=True)
            f.write("\n")

    # 5. The comparison (needs no GPU; fastkernels may not be built on this machine).
    if a.compare:
        subprocess.run([a.compare, "compare", a.out, "--manifest", os.path.join(ROOT, "generated", "manifest.json"),
                        "--jsonl", os.path.join(a.out, "compare.jsonl"), "--markdown", os.path.join(a.out, "compare.md")])
    log(f"done in {time.time() - t0:.0f}s: results in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
