#!/usr/bin/env python3
"""Writes one participant's random input tensors as a safetensors file.

Usage: make_inputs.py OUT.safetensors SEED [MIB]
Tensors: "weight" F32 [rows, 1024] (about MIB MiB), "step" I64 [17],
"mask" U8 [3, 5], "empty" F32 [0, 4]. Standard library only.
"""
import json
import random
import struct
import sys


def main():
    path, seed = sys.argv[1], int(sys.argv[2])
    mib = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    rng = random.Random(seed)
    rows = max(1, int(mib * 1024 * 1024 / 4 / 1024))
    tensors = [
        ("empty", "F32", [0, 4], 0),
        ("mask", "U8", [3, 5], 15),
        ("step", "I64", [17], 17 * 8),
        ("weight", "F32", [rows, 1024], rows * 1024 * 4),
    ]
    header, blobs, offset = {}, [], 0
    for name, dtype, shape, size in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + size]}
        blobs.append(rng.randbytes(size))
        offset += size
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


if __name__ == "__main__":
    main()
