"""Evaluates element expressions (`Elem` tuples of the Schedule) on NumPy or torch arrays.

The simulator and the runtime share this one evaluator, so `x.chunk(k, p) += tmp` means the same
thing in both; only the array library differs (`NUMPY` here, a torch adapter in the runtime).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from commdsl.schedule import Elem, View


class ArrayLib:
    """The few array functions an element expression needs."""

    def __init__(self, arange: Callable, minimum: Callable, maximum: Callable, absolute: Callable):
        self.arange = arange
        self.minimum = minimum
        self.maximum = maximum
        self.absolute = absolute


NUMPY = ArrayLib(lambda n: np.arange(n, dtype=np.int64), np.minimum, np.maximum, np.abs)


def evaluate(e: Elem, read: Callable[[View], object], shape: tuple[int, ...], lib: ArrayLib):
    """Value of `e` for a target of `shape`: a scalar or an array broadcastable to `shape`."""
    tag = e[0]
    if tag == "c":
        return e[1]
    if tag == "v":
        return read(e[1])
    if tag == "i":
        n = 1
        for d in shape:
            n *= d
        return lib.arange(n).reshape(shape)
    if tag == "u":
        v = evaluate(e[2], read, shape, lib)
        return -v if e[1] == "-" else (v if e[1] == "+" else ~v)
    if tag == "b":
        a = evaluate(e[2], read, shape, lib)
        b = evaluate(e[3], read, shape, lib)
        return _binary(e[1], a, b)
    if tag == "f":
        args = [evaluate(a, read, shape, lib) for a in e[2]]
        if e[1] == "min":
            return lib.minimum(*args)
        if e[1] == "max":
            return lib.maximum(*args)
        return lib.absolute(args[0]) if not isinstance(args[0], (int, float)) else abs(args[0])
    raise ValueError(f"element expression {tag!r} is not allowed here")


BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
"""The arithmetic and comparison operators, shared by element expressions and per-rank integers."""


def _binary(op: str, a, b):
    try:
        return BINARY[op](a, b)
    except KeyError:
        raise ValueError(f"operator {op!r} is not elementwise") from None


def random_init(seed: int, rank: int, numel: int, normal: bool) -> np.ndarray:
    """Seeded per-rank random values: identical in the simulator and on every backend."""
    rng = np.random.default_rng([seed, rank])
    return rng.standard_normal(numel) if normal else rng.random(numel)


def bfloat16_round(a: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept in float32."""
    bits = a.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)
