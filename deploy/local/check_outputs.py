#!/usr/bin/env python3
"""Checks the all_gather outputs of a local simulation byte for byte.

Usage: check_outputs.py DIR NAME...
DIR/NAME.in.safetensors are the inputs, DIR/NAME.out.safetensors the outputs.
Every output must hold each input tensor stacked [N, *shape], where slice r is
the input of the participant whose identity metadata "fedgather.rank.r" names,
and every participant must agree on the rank -> identity map.
Prints one PASS/FAIL line per participant; exits 0 only if all pass.
"""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], entry["shape"], data[base + begin:base + end])
    return tensors, meta


def main():
    directory, names = sys.argv[1], sys.argv[2:]
    inputs = {name: read(f"{directory}/{name}.in.safetensors")[0] for name in names}
    by_identity = {f"spiffe://fedgather/{name}": name for name in names}
    world, failed, maps = len(names), 0, set()
    for name in names:
        problems = []
        try:
            outputs, meta = read(f"{directory}/{name}.out.safetensors")
        except (OSError, ValueError) as e:
            print(f"FAIL {name}: cannot read its output: {e}")
            failed += 1
            continue
        ranks = [meta.get(f"fedgather.rank.{r}") for r in range(world)]
        maps.add(tuple(ranks))
        if sorted(filter(None, ranks)) != sorted(by_identity):
            problems.append(f"rank map {ranks} does not name every participant")
        for tensor, (dtype, shape, data) in inputs[name].items():
            if tensor not in outputs:
                problems.append(f"missing tensor {tensor}")
                continue
            out_dtype, out_shape, out_data = outputs[tensor]
            if out_dtype != dtype or out_shape != [world] + shape:
                problems.append(f"{tensor} is {out_dtype}{out_shape}, want {dtype}{[world] + shape}")
                continue
            part = len(data)
            for r, identity in enumerate(ranks):
                expected = inputs[by_identity.get(identity, name)][tensor][2]
                if out_data[r * part:(r + 1) * part] != expected:
                    problems.append(f"{tensor} rank {r} differs from {identity}'s input")
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            print(f"PASS {name}: {len(outputs)} tensors, every rank's slice matches its sender's input")
    if len(maps) > 1:
        print("FAIL: participants disagree on the rank -> identity map")
        failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
