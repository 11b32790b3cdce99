#!/usr/bin/env python3
"""Writes the seed corpus of collective_protocol_fuzzer.

    tests/fuzz/make_collective_protocol_seeds.py [OUT_DIR]

OUT_DIR defaults to tests/fuzz/corpus/collective_protocol. Each seed spells
out, in the byte layout collective_protocol_fuzzer.cc reads (Setup, Step,
MakePlan), a group and a few steps that start a round; when the input runs
out the simulated members cooperate, so every seed reaches the commit of its
op (checked against the fuzzer's reference model), one per op and reduction
plus a resumed stream, a quorum round and the inputs that found bugs.
"""
import os
import sys

OPS = ["ALL_GATHER", "ALL_REDUCE", "BROADCAST", "ALL_GATHER_V", "ALL_GATHER_BYTES"]
REDUCE = ["SUM", "MIN", "MAX", "MEAN", "WEIGHTED_MEAN"]
DTYPES = ["F32", "I32", "F16", "BF16", "F64", "I64", "I16", "I8", "U8", "BOOL"]
DTYPE_SIZE = {"F32": 4, "I32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8,
              "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def setup(world, max_chunk=4, grace=0, buffered=0, quorum=0):
    """Setup: world size, limits (round timeout, buffer, window, grace),
    chunk limit, quorum."""
    limits = (buffered << 2) | (grace << 6)
    quorum_byte = (0x80 | quorum) if quorum else 0
    return bytes([world - 1, limits, max_chunk - 1, quorum_byte])


def step(client, action, *details):
    return bytes([(client << 4) | action, *details])


def plan(op, world, reduce="SUM", root=0, tensors=(("F32", (2,)),),
         first_dims=None, weights=None):
    """MakePlan's bytes. tensors: (dtype, shape) pairs."""
    out = [OPS.index(op), REDUCE.index(reduce), root]
    if op != "ALL_GATHER_BYTES":
        out.append(len(tensors) - 1)
        for dtype, shape in tensors:
            out += [DTYPES.index(dtype), len(shape), *shape]
    for r in range(world):
        if first_dims is not None:
            out += first_dims[r]
        out.append([1, 2, 0.5, 3].index(weights[r]) if weights else 0)
    return bytes(out)


def header(client, resume=False):
    return step(client, 1 if resume else 0, 0)


def values(n, start):
    return bytes((start + 3 * i) & 0xFF for i in range(n))


def seeds():
    s = {}
    # ALL_GATHER of two tensors over 3 ranks; rank 0 starts and uploads.
    s["all_gather"] = (setup(3) + header(0) +
                       plan("ALL_GATHER", 3, tensors=(("F32", (2,)), ("I8", (3,)))) +
                       values(11, 1) + step(0, 2, 3) + step(0, 2, 15))
    s["broadcast"] = (setup(3) + header(1) +
                      plan("BROADCAST", 3, root=1, tensors=(("I16", (2, 2)),)) +
                      values(8, 5))
    s["all_gather_v"] = (setup(2) + header(0) +
                         plan("ALL_GATHER_V", 2, tensors=(("F32", (1, 2)),),
                              first_dims=[[1], [3]]) + values(8, 9))
    s["all_gather_bytes"] = (setup(4) + header(2) +
                             plan("ALL_GATHER_BYTES", 4, first_dims=[[5], [0], [2], [1]]) +
                             values(2, 7))
    for reduce, dtype in [("SUM", "I32"), ("MIN", "I8"), ("MAX", "BF16"),
                          ("MEAN", "F32"), ("WEIGHTED_MEAN", "F16")]:
        world = 3
        s[f"all_reduce_{reduce.lower()}"] = (
            setup(world, max_chunk=3) + header(0) +
            plan("ALL_REDUCE", world, reduce=reduce, tensors=((dtype, (3,)),),
                 weights=[1, 2, 0.5]) +
            values(3 * DTYPE_SIZE[dtype], 0x41))
    # A stream cancelled mid-upload resumes (resume grace 5 s) and commits.
    s["resume"] = (setup(2, grace=1) + header(0) +
                   plan("ALL_GATHER", 2, tensors=(("I32", (3,)),)) + values(12, 3) +
                   step(0, 2, 3) + step(0, 7) + header(0, resume=True))
    # Quorum 2 of 3: rank 2 never starts; the quorum deadline closes it out.
    s["quorum"] = (setup(3, quorum=2) + header(0) +
                   plan("ALL_REDUCE", 3, reduce="SUM", tensors=(("I64", (2,)),)) +
                   values(16, 11) + header(1) + values(16, 13) + step(0, 8, 4))
    # Regression seeds (round.cc: a receiver lost after the commit kept its
    # claims on the frames it had not written, so they stayed counted):
    # both ranks upload and end, then rank 1's stream is cancelled, or its
    # first write fails.
    both_ended = (setup(2) + header(0) + plan("ALL_GATHER", 2, tensors=(("I32", (3,)),)) +
                  values(12, 1) + header(1) + values(12, 5) +
                  step(0, 2, 15) * 3 + step(0, 4, 0) + step(1, 2, 15) * 3 + step(1, 4, 0))
    s["lost_after_commit"] = both_ended + step(1, 7)
    s["write_fails_after_commit"] = both_ended + step(1, 5, 0xF0)
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "collective_protocol")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
