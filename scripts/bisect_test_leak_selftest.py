#!/usr/bin/env python3
"""Self-test of scripts/bisect_test_leak.py against a fake gtest binary (no GPU): the victim fails only when one given
earlier test of its shard ran before it in the same process; the bisect must name that test, say "not reproduced" when
no earlier test breaks it, and refuse a test outside the shard. Exit 0 when all hold."""
import os
import stat
import subprocess
import sys
import tempfile

FAKE = r'''#!/usr/bin/env python3
import os, sys
tests = [f"A.t{i}" for i in range(40)] + ["B/v.p/0"] + [f"C.c{i}" for i in range(5)]
if "--gtest_list_tests" in sys.argv:
    print("Running main() from fake")
    suite = None
    for t in tests:
        s, n = t.split(".", 1)
        if s != suite:
            print(s + ".  # TypeParam")
            suite = s
        print("  " + n + "  # GetParam() = 0x1")
    sys.exit(0)
flt = [a for a in sys.argv if a.startswith("--gtest_filter=")][0][len("--gtest_filter="):].split(":")
culprit = os.environ.get("FAKE_CULPRIT", "")
broken = False
for t in [t for t in tests if t in flt]:
    broken |= t == culprit
    if t == "B/v.p/0" and broken:
        print("[  FAILED  ] B/v.p/0, where GetParam() = 0x1 (1 ms)")
        sys.exit(1)
sys.exit(0)
'''


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    tool = os.path.join(here, "bisect_test_leak.py")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "fake_gtest")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        base = [sys.executable, tool, "--binary", fake, "--shards", "2", "--shard", "1", "--log", os.path.join(d, "log")]
        for culprit in ("A.t0", "A.t22", "A.t38"):  # shard 1 holds the even tests and the victim (index 40)
            r = subprocess.run(base + ["--test", "B/v.p/0"], capture_output=True, text=True, env=dict(os.environ, FAKE_CULPRIT=culprit))
            good = r.returncode == 0 and f"culprit: {culprit} " in r.stdout
            print(("ok  " if good else "BAD ") + f"culprit {culprit}: rc={r.returncode} {r.stdout.strip().splitlines()[-1:]}")
            ok &= good
        r = subprocess.run(base + ["--test", "B/v.p/0"], capture_output=True, text=True, env=dict(os.environ, FAKE_CULPRIT="A.t3"))
        good = r.returncode == 1 and "not reproduced" in r.stdout  # A.t3 is in shard 2: nothing in shard 1 breaks the victim
        print(("ok  " if good else "BAD ") + f"no culprit in the shard: rc={r.returncode}")
        ok &= good
        r = subprocess.run(base + ["--test", "A.t1"], capture_output=True, text=True)
        good = r.returncode == 2 and "is not in shard 1" in r.stderr
        print(("ok  " if good else "BAD ") + f"a test of another shard refused: rc={r.returncode}")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
