"""Minimal safetensors reader/writer on torch alone (no `safetensors`, no numpy).

Format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
data buffer (offsets are relative to its start). Dtypes: BF16, F16, F32, I32, I64 (plus U8, I8,
I16, BOOL, F64 for completeness).

    from st import load, save
    tensors, metadata = load("w.safetensors")          # dict name -> CPU tensor, dict str -> str
    save("w.safetensors", tensors, metadata={"arch": "x"})
"""
import json
import struct

import torch

DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "I8": torch.int8,
    "U8": torch.uint8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 << 20


class SafetensorsError(ValueError):
    pass


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: file shorter than 8 bytes")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER:
            raise SafetensorsError(f"{path}: header length {n} too large")
        hb = f.read(n)
        if len(hb) != n:
            raise SafetensorsError(f"{path}: truncated header")
    try:
        header = json.loads(hb.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: bad header JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    return header, meta, 8 + n


def load(path, names=None):
    """Loads every tensor (or only `names`) of a safetensors file into CPU tensors that own
    their memory. Returns (dict name -> tensor, metadata dict)."""
    header, meta, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
    spans = []
    for name, info in header.items():
        try:
            dtype = DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            b, e = (int(x) for x in info["data_offsets"])
        except KeyError as ex:
            raise SafetensorsError(f"{path}: tensor {name!r}: missing/unknown field {ex}") from None
        isz = torch.empty((), dtype=dtype).element_size()
        if e - b != _numel(shape) * isz or b < 0 or start + e > size:
            raise SafetensorsError(f"{path}: tensor {name!r}: bad data_offsets {b},{e} for "
                                   f"{info['dtype']}{shape} (file {size} bytes)")
        spans.append((b, e, name, dtype, shape))
    spans.sort()
    for (b0, e0, n0, _, _), (b1, _, n1, _, _) in zip(spans, spans[1:]):
        if b1 < e0:
            raise SafetensorsError(f"{path}: tensors {n0!r} and {n1!r} overlap")
    out = {}
    with open(path, "rb") as f:
        for b, e, name, dtype, shape in spans:
            if names is not None and name not in names:
                continue
            buf = bytearray(e - b)
            f.seek(start + b)
            if f.readinto(buf) != e - b:
                raise SafetensorsError(f"{path}: short read for {name!r}")
            if e == b:
                t = torch.empty(shape, dtype=dtype)
            else:
                # bytearray is freshly allocated (aligned); the tensor keeps it alive.
                t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)
            out[name] = t
    if names is not None:
        missing = [n for n in names if n not in out]
        if missing:
            raise SafetensorsError(f"{path}: missing tensors {missing[:8]}")
    return out, meta


def save(path, tensors, metadata=None):
    """Writes tensors (dict name -> tensor, any device) in sorted-name order, header padded with
    spaces to a multiple of 8 bytes (what the reference writer does)."""
    header = {}
    items = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in NAMES:
            raise SafetensorsError(f"tensor {name!r}: unsupported dtype {t.dtype}")
        t = t.detach().to("cpu").contiguous()
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + nbytes]}
        items.append((t, nbytes))
        off += nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for t, nbytes in items:
            if nbytes == 0:
                continue
            buf = bytearray(nbytes)
            torch.frombuffer(buf, dtype=torch.uint8).copy_(t.reshape(-1).view(torch.uint8))
            f.write(buf)
