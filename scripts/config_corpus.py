#!/usr/bin/env python3
"""Regenerate tests/fixtures/config_corpus/expected.json: `fastkernels add` of every config in the
corpus, each in a fresh scratch repository holding this tree's templates and descriptors and no
other config. Review the diff before committing: the test (ConfigCorpus.EveryConfigGeneratesOr
FailsPrecisely in tests/cpu/config_corpus_test.cc) holds the binary to it line for line.

    scripts/config_corpus.py [--fastkernels build/default/generator/fastkernels]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fixtures", "config_corpus")
INFO = ("wrote ", "added ", "recorded ", "removed ")  # progress lines, not outcomes


def scratch(dst):
    os.makedirs(os.path.join(dst, "hf_configs"))
    shutil.copytree(os.path.join(ROOT, "templates"), os.path.join(dst, "templates"))
    shutil.copytree(os.path.join(ROOT, "generator", "descriptors"), os.path.join(dst, "generator", "descriptors"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fastkernels", default=os.path.join(ROOT, "build", "default", "generator", "fastkernels"))
    a = ap.parse_args()
    runs = []
    for name in sorted(os.listdir(CORPUS)):
        if not name.endswith(".json") or name == "expected.json":
            continue
        path = os.path.join(CORPUS, name)
        with open(path, encoding="utf-8") as f:
            quantised = '"quantization_config"' in f.read()
        todo = [[], ["--dequantize"]] if quantised else [[]]
        while todo:
            args = todo.pop(0)
            with tempfile.TemporaryDirectory() as tmp:
                root = os.path.join(tmp, "r")
                scratch(root)
                p = subprocess.run([a.fastkernels, "add", "--root", root, *args, path], capture_output=True, text=True)
            lines = [l for l in (p.stdout + p.stderr).replace(path, "{file}").splitlines() if not l.startswith(INFO)]
            # A float32 checkpoint is refused unless served in 16 bits: run it again as a user would.
            if p.returncode != 0 and "--dtype" not in args and any("float32 checkpoint" in l for l in lines):
                todo.append(args + ["--dtype", "bfloat16"])
            run = {"config": name, "args": " ".join(args), "rc": p.returncode}
            if p.returncode == 0:
                run["name"] = next(l.split()[1] for l in lines if l.startswith("name "))
            else:
                run["output"] = lines
            runs.append(run)
    doc = {
        "_comment": "fastkernels add of every config here, each in a scratch repository holding this tree's templates "
        "and descriptors and no other config: the exit code, the name it took, and on failure every line printed "
        "except progress lines; {file} stands for the config's path. Regenerate with scripts/config_corpus.py.",
        "runs": runs,
    }
    with open(os.path.join(CORPUS, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{len(runs)} runs, {sum(r['rc'] == 0 for r in runs)} generate")


if __name__ == "__main__":
    sys.exit(main())
