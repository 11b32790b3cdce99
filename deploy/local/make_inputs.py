#!/usr/bin/env python3
"""Writes one participant's random input tensors as a safetensors file.

Usage: make_inputs.py OUT.safetensors SEED [MIB]

The same SEED always gives the same bytes; different seeds give different
bytes, so every rank's slice of a gathered output can be told apart. Every
participant gets the same names, dtypes and shapes (an all_gather needs that):

  "weight" F32  [rows, 1024]  about MIB MiB (default 4), spans many 1 MiB chunks
  "bias"   F16  [7]           14 bytes, so later offsets are not 8-aligned
  "step"   I64  [17]
  "mask"   BOOL [3, 5]        0 or 1 per byte
  "empty"  U8   [0]           no bytes at all

Python 3 standard library only. The format
(https://github.com/huggingface/safetensors): an 8-byte little-endian header
length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [b, e]},
..., "__metadata__": {str: str}} padded with spaces to a multiple of 8, then
the tensors' bytes, tiling the data buffer in header order.
"""
import json
import random
import struct
import sys

# Bytes per element of every dtype fedgather accepts.
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def byte_size(dtype, shape):
    n = DTYPE_SIZES[dtype]
    for d in shape:
        n *= d
    return n


def make_tensors(seed, mib=4.0):
    """Returns [(name, dtype, shape, bytes)] for one participant."""
    rng = random.Random(seed)
    rows = max(1, int(mib * 1024 * 1024 / (4 * 1024)))
    specs = [("weight", "F32", [rows, 1024]), ("bias", "F16", [7]),
             ("step", "I64", [17]), ("mask", "BOOL", [3, 5]),
             ("empty", "U8", [0])]
    tensors = []
    for name, dtype, shape in specs:
        size = byte_size(dtype, shape)
        if dtype == "BOOL":
            data = bytes(rng.randrange(2) for _ in range(size))
        else:
            data = rng.randbytes(size)
        tensors.append((name, dtype, list(shape), data))
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Writes [(name, dtype, shape, bytes)] (and optional string metadata)."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dtype, shape, data in tensors:
        if len(data) != byte_size(dtype, shape):
            raise ValueError(f"{name}: {len(data)} bytes for {dtype}{shape}")
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in tensors:
            f.write(data)


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    path, seed = argv[1], int(argv[2])
    mib = float(argv[3]) if len(argv) == 4 else 4.0
    if not mib > 0:
        print("make_inputs.py: MIB must be positive", file=sys.stderr)
        return 2
    write_safetensors(path, make_tensors(seed, mib))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
