"""Contributions (tensors as raw little-endian bytes) and the Python
reference of every op's result, from docs/protocol.md and the .proto.

Floating values are chosen so that every sum, mean and weighted mean the
tests make is exact in the server's accumulator and in the result's dtype;
the reference can then be byte exact whatever order the server folds ranks in.
"""

import struct
from dataclasses import dataclass
from typing import List, Sequence

from fedgather.v1 import fedgather_pb2 as pb

_FORMAT = {pb.F32: "f", pb.F16: "e", pb.F64: "d", pb.I64: "q", pb.I32: "i",
           pb.I16: "h", pb.I8: "b", pb.U8: "B", pb.BOOL: "?"}
_FLOATING = (pb.F32, pb.F16, pb.BF16, pb.F64)
_INTEGER_BITS = {pb.I64: 64, pb.I32: 32, pb.I16: 16, pb.I8: 8, pb.U8: 8}


def element_size(dtype: int) -> int:
    return 2 if dtype == pb.BF16 else struct.calcsize(_FORMAT[dtype])


def encode(dtype: int, values: Sequence) -> bytes:
    if dtype == pb.BF16:  # the high half of each exact float32
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack(f"<{len(values)}{_FORMAT[dtype]}", *values)


def decode(dtype: int, data: bytes) -> List:
    if dtype == pb.BF16:
        return [struct.unpack("<f", b"\0\0" + data[i:i + 2])[0]
                for i in range(0, len(data), 2)]
    count = len(data) // element_size(dtype)
    return list(struct.unpack(f"<{count}{_FORMAT[dtype]}", data))


@dataclass
class Tensor:
    name: str
    dtype: int
    shape: List[int]
    data: bytes

    @property
    def spec(self) -> pb.TensorSpec:
        return pb.TensorSpec(name=self.name, dtype=self.dtype,
                             shape=self.shape)


def _count(shape: Sequence[int]) -> int:
    total = 1
    for extent in shape:
        total *= extent
    return total


def values(dtype: int, count: int, rank: int) -> List:
    """Values: `count` exact values that differ by rank and by position."""
    if dtype == pb.BOOL:
        return [(i * 7 + rank) % 3 == 0 for i in range(count)]
    if dtype == pb.U8:
        return [(i * 31 + rank * 101) % 256 for i in range(count)]
    if dtype == pb.I8:  # near the top, so that sums wrap
        return [100 + (i * 5 + rank * 3) % 28 for i in range(count)]
    if dtype in _INTEGER_BITS:
        return [(i * 37 + rank * 1009) % 2001 - 1000 for i in range(count)]
    if dtype == pb.BF16:
        return [float((i * 3 + rank * 7) % 61 - 30) for i in range(count)]
    return [((i * 13 + rank * 5) % 161 - 80) * 0.5 for i in range(count)]


def tensor(name: str, dtype: int, shape: Sequence[int], rank: int) -> Tensor:
    return Tensor(name, dtype, list(shape),
                  encode(dtype, values(dtype, _count(shape), rank)))


def mixed(rank: int, first_dim: int = 3, big: bool = False) -> List[Tensor]:
    """Mixed: tensors of every kind of dtype, one of them empty; the first
    tensor's first dimension is first_dim (ALL_GATHER_V varies it). `big`
    adds a tensor over one 1 MiB chunk."""
    tensors = [tensor("weights", pb.F32, [first_dim, 1001], rank),
               tensor("half", pb.F16, [777], rank),
               tensor("brain", pb.BF16, [8, 8], rank),
               tensor("double", pb.F64, [33], rank),
               tensor("count", pb.I64, [5, 7], rank),
               tensor("small", pb.I8, [19], rank),
               tensor("flags", pb.BOOL, [13], rank),
               tensor("empty", pb.U8, [0], rank)]
    if big:
        tensors.append(tensor("big", pb.F32, [300_000], rank))
    return tensors


def reducible(rank: int, reduce_op: int, big: bool = False) -> List[Tensor]:
    """Reducible: tensors `reduce_op` can take (MEAN and WEIGHTED_MEAN need
    floating ones; BOOL cannot be reduced)."""
    dtypes = [pb.F32, pb.F16, pb.BF16, pb.F64]
    if reduce_op not in (pb.MEAN, pb.WEIGHTED_MEAN):
        dtypes += [pb.I64, pb.I32, pb.I16, pb.I8, pb.U8]
    tensors = [tensor(f"t{index}", dtype, [3, 337], rank)
               for index, dtype in enumerate(dtypes)]
    if big:
        tensors.append(tensor("big", pb.F32, [300_000], rank))
    return tensors


def _wrap(dtype: int, value: int) -> int:
    bits = _INTEGER_BITS[dtype]
    value %= 1 << bits
    if dtype != pb.U8 and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def reduce(reduce_op: int, dtype: int, parts: Sequence[bytes],
           weights: Sequence[float]) -> bytes:
    """Reduce: the element-wise reduction of every rank's bytes of one
    tensor, as protocol.md and the ReduceOp comments define it."""
    columns = list(zip(*[decode(dtype, part) for part in parts]))
    if reduce_op == pb.SUM:
        out = [sum(column) for column in columns]
    elif reduce_op == pb.MIN:
        out = [min(column) for column in columns]
    elif reduce_op == pb.MAX:
        out = [max(column) for column in columns]
    elif reduce_op == pb.MEAN:
        out = [sum(column) / len(column) for column in columns]
    elif reduce_op == pb.WEIGHTED_MEAN:
        out = [sum(w * x for w, x in zip(weights, column)) / sum(weights)
               for column in columns]
    else:
        raise ValueError(reduce_op)
    if dtype in _INTEGER_BITS:
        out = [_wrap(dtype, value) for value in out]
    return encode(dtype, out)
