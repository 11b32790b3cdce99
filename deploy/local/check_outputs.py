#!/usr/bin/env python3
"""Checks the all_gather outputs of a local simulation byte for byte.

Usage: check_outputs.py [--group NAME] DIR NAME...

DIR/NAME.in.safetensors are the participants' inputs, DIR/NAME.out.safetensors
the outputs `fedgather join` wrote. NAME's certificate identity is
spiffe://fedgather/NAME. Each output must:
  - be a well-formed safetensors file;
  - carry metadata "fedgather.group" = NAME (default demo),
    "fedgather.world_size" = the number of participants, and
    "fedgather.rank.R" for R in 0..N-1 naming every participant exactly once;
  - hold exactly the input tensor names, each with the input's dtype and shape
    [N, *shape], whose slice R is, byte for byte, the input of the participant
    that "fedgather.rank.R" names.
Every participant must also agree on the rank -> identity map.

Prints the input sizes, then one "PASS NAME: ..." or "FAIL NAME: ..." line per
participant; exits 0 only if all pass, 1 otherwise, 2 on usage errors.
Python 3 standard library only.
"""
import json
import os
import struct
import sys

DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
IDENTITY_PREFIX = "spiffe://fedgather/"


def byte_size(dtype, shape):
    n = DTYPE_SIZES[dtype]
    for d in shape:
        n *= d
    return n


def read(path):
    """Returns ({name: (dtype, shape, bytes)}, metadata); ValueError if bad."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, shorter than the header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"header length {n} past the end of the file")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    meta = header.pop("__metadata__", {})
    buffer = data[8 + n:]
    tensors, spans = {}, []
    for name, entry in header.items():
        try:
            dtype, shape = entry["dtype"], entry["shape"]
            begin, end = entry["data_offsets"]
            size = byte_size(dtype, shape)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"tensor {name!r}: bad entry {entry!r} ({e})") from None
        if not 0 <= begin <= end <= len(buffer) or end - begin != size:
            raise ValueError(f"tensor {name!r}: offsets [{begin}, {end}] do not hold "
                             f"{dtype}{shape} ({size} bytes) in a {len(buffer)}-byte buffer")
        tensors[name] = (dtype, shape, buffer[begin:end])
        spans.append((begin, end))
    covered = 0
    for begin, end in sorted(spans):
        if begin != covered:
            raise ValueError(f"tensors do not tile the data buffer (gap or overlap at {begin})")
        covered = end
    if covered != len(buffer):
        raise ValueError(f"{len(buffer) - covered} bytes after the last tensor")
    return tensors, meta


def check_one(name, path, inputs, names, group):
    """Returns (problems, rank map tuple or None, own rank or None)."""
    world = len(names)
    try:
        outputs, meta = read(path)
    except FileNotFoundError:
        return [f"no output file {path}"], None, None
    except (OSError, ValueError) as e:
        return [f"cannot read {path}: {e}"], None, None
    problems = []
    if meta.get("fedgather.group") != group:
        problems.append(f"metadata fedgather.group is {meta.get('fedgather.group')!r}, want {group!r}")
    if meta.get("fedgather.world_size") != str(world):
        problems.append(f"metadata fedgather.world_size is "
                        f"{meta.get('fedgather.world_size')!r}, want '{world}'")
    ranks = tuple(meta.get(f"fedgather.rank.{r}") for r in range(world))
    extra = sorted(k for k in meta if k.startswith("fedgather.rank.")
                   and k not in {f"fedgather.rank.{r}" for r in range(world)})
    if extra:
        problems.append(f"unexpected metadata {extra}")
    wanted = sorted(IDENTITY_PREFIX + n for n in names)
    if sorted(str(i) for i in ranks) != wanted:
        problems.append(f"rank map {list(ranks)} does not name each of {wanted} once")
    owner = {IDENTITY_PREFIX + n: n for n in names}
    mine = inputs[name]
    if set(outputs) != set(mine):
        problems.append(f"tensors {sorted(outputs)}, want {sorted(mine)}")
    for tensor, (dtype, shape, _) in sorted(mine.items()):
        if tensor not in outputs:
            continue
        out_dtype, out_shape, out_data = outputs[tensor]
        if out_dtype != dtype or out_shape != [world] + shape:
            problems.append(f"{tensor} is {out_dtype}{out_shape}, want {dtype}{[world] + shape}")
            continue
        part = byte_size(dtype, shape)
        for r, identity in enumerate(ranks):
            sender = owner.get(identity)
            if sender is None:
                continue  # already reported by the rank map check
            if out_data[r * part:(r + 1) * part] != inputs[sender][tensor][2]:
                problems.append(f"{tensor}[{r}] differs from the input of {sender} ({identity})")
    own_rank = ranks.index(IDENTITY_PREFIX + name) if IDENTITY_PREFIX + name in ranks else None
    return problems, ranks, own_rank


def main(argv):
    args = argv[1:]
    group = "demo"
    if args[:1] == ["--group"] and len(args) >= 2:
        group, args = args[1], args[2:]
    if len(args) < 2 or args[0].startswith("-"):
        print("usage: check_outputs.py [--group NAME] DIR NAME...", file=sys.stderr)
        return 2
    directory, names = args[0], args[1:]
    if len(set(names)) != len(names):
        print("check_outputs.py: participant names repeat", file=sys.stderr)
        return 2

    inputs = {}
    for name in names:
        path = os.path.join(directory, f"{name}.in.safetensors")
        try:
            inputs[name] = read(path)[0]
        except (OSError, ValueError) as e:
            print(f"FAIL: cannot read input {path}: {e}")
            return 1
    layouts = {name: sorted((t, d, s) for t, (d, s, _) in tensors.items())
               for name, tensors in inputs.items()}
    if any(layout != layouts[names[0]] for layout in layouts.values()):
        print("FAIL: the inputs do not share names, dtypes and shapes")
        return 1
    per_rank = sum(len(data) for _, _, data in inputs[names[0]].values())
    print(f"inputs: {len(inputs[names[0]])} tensors, {per_rank} bytes per rank: " +
          ", ".join(f"{t} {d}{s}" for t, d, s in layouts[names[0]]))

    failed, maps = 0, {}
    for name in names:
        path = os.path.join(directory, f"{name}.out.safetensors")
        problems, ranks, own_rank = check_one(name, path, inputs, names, group)
        if ranks is not None:
            maps[name] = ranks
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            print(f"PASS {name}: rank {own_rank}, {len(inputs[name])} tensors "
                  f"[{len(names)}, *shape], every slice matches its sender's input")
    if len(set(maps.values())) > 1:
        failed += 1
        print("FAIL: participants disagree on the rank -> identity map: " +
              "; ".join(f"{n}: {list(m)}" for n, m in maps.items()))
    elif maps:
        print("rank map: " + ", ".join(f"{r}={i}" for r, i in enumerate(next(iter(maps.values())))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
