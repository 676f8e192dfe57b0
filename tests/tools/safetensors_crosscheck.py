#!/usr/bin/env python3
"""Cross-checks fk's safetensors reader/writer against the reference implementation (the PyPI
`safetensors` package, which HF transformers uses to load weights).

  1. The reference writes a file (every byte-sized dtype, a scalar, 0-element tensors, metadata);
     fk reads it (full validation) and writes a copy with its own writer (safetensors_copy).
  2. The reference reads fk's copy: same names, dtypes, shapes, bytes and metadata.
  3. Where the reference's tensor order equals sorted-name order, the two writers' bytes are equal.
  4. A file the reference rejects (a hole in the buffer) is rejected by fk too.

Usage: safetensors_crosscheck.py PATH/TO/safetensors_copy
Exit 0 on success, 1 on a mismatch, 77 (ctest SKIP_RETURN_CODE) when safetensors/numpy are missing.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (pip install safetensors numpy)")
    sys.exit(77)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def reference_write(path, specs, metadata):
    """specs: name -> (reference dtype name, shape, numpy array holding the raw bytes)."""
    keep = []
    tensors = {}
    for name, (dtype, shape, arr) in specs.items():
        arr = np.ascontiguousarray(arr)
        keep.append(arr)
        tensors[name] = safetensors.TensorSpec(dtype=dtype, shape=list(shape), data_ptr=arr.ctypes.data,
                                               data_len=arr.nbytes)
    data = safetensors.serialize(tensors, metadata=metadata)
    with open(path, "wb") as f:
        f.write(data)
    return data


def load_raw(path):
    with open(path, "rb") as f:
        data = f.read()
    return {name: (t["dtype"], list(t["shape"]), bytes(t["data"])) for name, t in safetensors.deserialize(data)}


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    rng = np.random.default_rng(1234)
    specs = {
        "model.embed_tokens.weight": ("bfloat16", (8, 4), rng.integers(0, 2**16, (8, 4), dtype=np.uint16)),
        "model.layers.0.mlp.down_proj.weight": ("float32", (3, 5), rng.standard_normal((3, 5), dtype=np.float32)),
        "model.layers.0.input_layernorm.weight": ("float16", (5,), rng.standard_normal(5).astype(np.float16)),
        "model.layers.10.self_attn.q_proj.bias": ("float64", (2, 1, 3), rng.standard_normal((2, 1, 3))),
        "blk.0.positions": ("int64", (4,), np.array([-2**63, -1, 0, 2**63 - 1], dtype=np.int64)),
        "i32": ("int32", (2, 2), rng.integers(-2**31, 2**31, (2, 2), dtype=np.int32)),
        "i16": ("int16", (3,), rng.integers(-2**15, 2**15, 3, dtype=np.int16)),
        "i8": ("int8", (5,), rng.integers(-128, 128, 5, dtype=np.int8)),
        "u8": ("uint8", (7,), rng.integers(0, 256, 7, dtype=np.uint8)),
        "u16": ("uint16", (2,), np.array([0, 65535], dtype=np.uint16)),
        "u32": ("uint32", (1,), np.array([2**32 - 1], dtype=np.uint32)),
        "u64": ("uint64", (1,), np.array([2**64 - 1], dtype=np.uint64)),
        "mask": ("bool", (3,), np.array([True, False, True])),
        "fp8": ("float8_e4m3fn", (4,), rng.integers(0, 256, 4, dtype=np.uint8)),
        "scalar": ("float32", (), np.array(3.5, dtype=np.float32)),
        "empty": ("float32", (0, 3), np.zeros((0, 3), dtype=np.float32)),
        "empty_bf16": ("bfloat16", (0,), np.zeros((0,), dtype=np.uint16)),
    }
    metadata = {"format": "pt", "fk.seed": "1234", "note": "unicode \u00e9\u4e2d"}
    with tempfile.TemporaryDirectory() as d:
        ref = os.path.join(d, "ref.safetensors")
        ours = os.path.join(d, "ours.safetensors")
        reference_write(ref, specs, metadata)

        # 1. fk reads the reference's file and writes its own copy.
        r = subprocess.run([tool, ref, ours], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"fk could not read the reference file: {r.stderr.strip()}")
        if len(r.stdout.splitlines()) != len(specs):
            fail(f"fk listed {len(r.stdout.splitlines())} tensors, expected {len(specs)}")

        # 2. The reference reads fk's copy: identical content.
        a, b = load_raw(ref), load_raw(ours)
        if a != b:
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    fail(f"tensor {k!r} differs: reference {a.get(k)!r:.120} vs fk {b.get(k)!r:.120}")
            fail("tensor sets differ")
        with safetensors.safe_open(ours, framework="numpy") as f:
            if f.metadata() != metadata:
                fail(f"metadata differs: {f.metadata()} vs {metadata}")
            got = f.get_tensor("model.layers.0.mlp.down_proj.weight")
            if got.dtype != np.float32 or not np.array_equal(got, specs["model.layers.0.mlp.down_proj.weight"][2]):
                fail("numpy view of a float32 tensor differs")
            if f.get_tensor("scalar").shape != () or f.get_tensor("empty").shape != (0, 3):
                fail("scalar/empty shapes differ")
        numpy_only = {k: v[2] for k, v in specs.items() if v[0] not in ("bfloat16", "float8_e4m3fn")}
        with safetensors.safe_open(ours, framework="numpy") as f:
            for k, arr in numpy_only.items():
                got = f.get_tensor(k)
                if got.dtype != arr.dtype or got.shape != arr.shape or not np.array_equal(got, arr):
                    fail(f"numpy view of {k!r} differs")

        # 3. Same order (alignment-then-name in the reference = name order here): same bytes.
        small = {"a": specs["model.layers.0.mlp.down_proj.weight"], "b": specs["model.layers.0.input_layernorm.weight"]}
        ref_small = os.path.join(d, "ref_small.safetensors")
        ours_small = os.path.join(d, "ours_small.safetensors")
        ref_bytes = reference_write(ref_small, small, {"format": "pt"})
        r = subprocess.run([tool, ref_small, ours_small], capture_output=True, text=True)
        if r.returncode != 0:
            fail(r.stderr)
        with open(ours_small, "rb") as f:
            if f.read() != ref_bytes:
                fail("fk's bytes differ from the reference writer's for the same tensors in the same order")

        # 4. A hole in the buffer: both implementations reject it.
        hole = os.path.join(d, "hole.safetensors")
        header = b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}'
        with open(hole, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header + b"\0" * 8)
        try:
            with open(hole, "rb") as f:
                safetensors.deserialize(f.read())
            fail("the reference accepted a buffer with a hole (test premise broken)")
        except safetensors.SafetensorError:
            pass
        r = subprocess.run([tool, hole, os.path.join(d, "x.safetensors")], capture_output=True, text=True)
        if r.returncode != 1 or "leaves a hole" not in r.stderr:
            fail(f"fk did not reject the hole: rc={r.returncode} {r.stderr.strip()}")

    print(f"safetensors crosscheck: ok ({len(specs)} tensors, safetensors {safetensors.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
