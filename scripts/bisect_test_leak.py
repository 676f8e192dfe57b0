#!/usr/bin/env python3
"""Find the test that leaves process state behind which breaks a later test of the same gtest binary.

A test that passes alone but fails after others in one process (scripts/gpu_protocol.sh suite:K/N, then
suite-rerun) depends on state an earlier test left: this bisects the tests that ran before it in its shard
(gtest keeps the binary's order under --gtest_filter) down to the one that breaks it, assuming one culprit.

  scripts/bisect_test_leak.py --binary build/gpu/tests/fk_gpu_tests --shards 2 --shard 1 --test 'Suite.Name/param'
      [--timeout 900] [--log out/protocol/bisect.log]

Each step runs the binary once on a subset of the earlier tests followed by the failing one, and prints the
subset's size and the verdict; the result is the culprit's name (exit 0), or a note that the failure did not
reproduce with the whole prefix (exit 1). Usage errors exit 2.
"""
import argparse
import os
import subprocess
import sys


def listed_tests(binary, shards, shard):
    """The test names of one shard, in run order (gtest's listing order, every shards-th from shard - 1)."""
    out = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True, check=True).stdout
    names, suite = [], None
    for line in out.splitlines():
        if not line.strip() or line.startswith("Running main"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return [n for i, n in enumerate(names) if i % shards == shard - 1]


def fails(binary, tests, timeout, log):
    """Runs `tests` in one process (in the binary's order); True if the last one failed."""
    env = dict(os.environ)
    env.pop("GTEST_TOTAL_SHARDS", None)
    env.pop("GTEST_SHARD_INDEX", None)
    try:
        r = subprocess.run([binary, "--gtest_brief=1", "--gtest_filter=" + ":".join(tests)], capture_output=True, text=True,
                           timeout=timeout, env=env)
        text = r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        text = "TIMEOUT"
    log.write(f"--- {len(tests)} tests\n{text[-4000:]}\n")
    log.flush()
    return f"[  FAILED  ] {tests[-1]}" in text or text == "TIMEOUT"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--shard", type=int, required=True, help="1-based, as suite:K/N")
    ap.add_argument("--test", required=True, help="the test that fails after others (exact name)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--log", default="bisect_test_leak.log")
    a = ap.parse_args()
    if not (1 <= a.shard <= a.shards):
        print(f"--shard {a.shard}: expected 1..{a.shards}", file=sys.stderr)
        return 2
    order = listed_tests(a.binary, a.shards, a.shard)
    if a.test not in order:
        print(f"--test {a.test!r} is not in shard {a.shard} of {a.shards} ({len(order)} tests)", file=sys.stderr)
        return 2
    prefix = order[: order.index(a.test)]
    with open(a.log, "w") as log:
        if not fails(a.binary, prefix + [a.test], a.timeout, log):
            print(f"{a.test} passed after all {len(prefix)} earlier tests of its shard: not reproduced")
            return 1
        cand = prefix
        while len(cand) > 1:
            half = cand[: len(cand) // 2]
            bad = fails(a.binary, half + [a.test], a.timeout, log)
            print(f"{len(half)} of {len(cand)} earlier tests: {'fails' if bad else 'passes'}", flush=True)
            cand = half if bad else cand[len(cand) // 2:]
        if not cand or not fails(a.binary, cand + [a.test], a.timeout, log):
            print("no single earlier test reproduces it (several act together): see " + a.log)
            return 1
        print(f"culprit: {cand[0]} (then {a.test} fails)")
        return 0


if __name__ == "__main__":
    sys.exit(main())
