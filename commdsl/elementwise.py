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


IN_PLACE = {"+=": "add_", "-=": "sub_", "*=": "mul_"}
"""The compound assignments the runtime runs as torch's in-place method when the value is a view."""


def in_place(op: str, value: Elem, target: View, dtype_of: Callable[[View], str]) -> bool:
    """Whether the runtime runs `target op= value` as one in-place torch call (`x.chunk(k, p) += tmp`: one pass,
    no temporaries): a view of the target's dtype (no promotion to mimic) that does not overlap it."""
    return (
        op in IN_PLACE and value[0] == "v" and not value[1].overlaps(target) and dtype_of(value[1]) == dtype_of(target)
    )


def temporaries(op: str, value: Elem, target: View, dtype_of: Callable[[View], str]) -> list[int]:
    """Bytes per target element of each tensor torch allocates while the runtime computes `target op= value`
    (runtime/ops.py `_compute`): one per `evaluate` step that makes an array (an operator or function with an
    array operand, `-`/`~` of one, the index `i` as int64), the clone of `x = view`, and the result of a
    compound assignment's `combine` before its copy into the target; none for an in-place update or a value
    that is a scalar. A result's element size is the larger of its array operands' (bool for a comparison, at
    least float32 for `/`): torch's promotion for a program's usual dtypes."""
    from commdsl.dtypes import DTYPES

    if in_place(op, value, target, dtype_of):
        return []
    out: list[int] = []

    def walk(e: Elem) -> int:  # element size of e's array, 0 for a scalar
        tag = e[0]
        if tag == "v":
            return DTYPES[dtype_of(e[1])].itemsize
        if tag == "i":
            out.append(8)
            return 8
        if tag == "u":
            size = walk(e[2])
            if size and e[1] != "+":
                out.append(size)
            return size
        if tag in ("b", "f"):
            sizes = [walk(a) for a in ((e[2], e[3]) if tag == "b" else e[2])]
            if not any(sizes):
                return 0
            size = 1 if e[1] in COMPARISONS else max(max(sizes), 4 if e[1] == "/" else 1)
            out.append(size)
            return size
        return 0  # a constant

    size = walk(value)
    if op == "=" and value[0] == "v":  # `x[1:3] = x[0:2]`: cloned first, as copy_ refuses overlapping views
        out.append(size)
    elif op != "=":  # combine(target, value): a new tensor, then copied into the target
        target_size = DTYPES[dtype_of(target)].itemsize
        out.append(max(size, target_size, 4 if op == "/=" else 1))
    return out


BINARY = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
"""The arithmetic and comparison operators, shared by element expressions and per-rank integers."""

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
"""The comparison operators: their result is bool (torch's promotion, the temporaries torch makes, compile)."""


def _binary(op: str, a, b):
    try:
        return BINARY[op](a, b)
    except KeyError:
        raise ValueError(f"operator {op!r} is not elementwise") from None


# ---- what torch refuses ----------------------------------------------------------------------------
# torch computes an element expression in a promoted category, bool < integer < floating: a tensor's
# category is "strong", a Python scalar's "weak" (it wins only when its category is higher), as in
# torch's type promotion. Some operations it refuses outright, at run time, with an exception.

ORDER = "bif"


def promote(a: tuple[str, bool], b: tuple[str, bool]) -> tuple[str, bool]:
    """(category, strong) of `a OP b` for an arithmetic OP."""
    (ka, sa), (kb, sb) = a, b
    if sa == sb:
        return max(ka, kb, key=ORDER.index), sa
    strong, weak = (ka, kb) if sa else (kb, ka)
    return (weak if ORDER.index(weak) > ORDER.index(strong) else strong), True


def category(e: Elem, dtype_of: Callable[[View], str]) -> tuple[str, bool]:
    """(category, strong) of an element expression's result, as torch computes it."""
    from commdsl.dtypes import DTYPES

    tag = e[0]
    if tag == "c":
        return scalar_category(e[1]), False
    if tag == "v":
        d = DTYPES[dtype_of(e[1])]
        return ("f" if d.is_float else "b" if d.is_bool else "i"), True
    if tag == "i":
        return "i", True
    if tag == "rand":
        return "f", True
    if tag == "u":
        return category(e[2], dtype_of)
    if tag == "b":
        a, b = category(e[2], dtype_of), category(e[3], dtype_of)
        if e[1] in COMPARISONS:
            return "b", a[1] or b[1]
        if e[1] == "/":
            return "f", a[1] or b[1]
        return promote(a, b)
    args = [category(a, dtype_of) for a in e[2]]  # "f": min, max, abs
    out = args[0]
    for a in args[1:]:
        out = promote(out, a)
    return out


def scalar_category(v) -> str:
    """The category of a per-rank constant: its highest over the ranks."""
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "iub":
            return "b" if v.dtype.kind == "b" else "i"
        if v.dtype.kind == "f":
            return "f"
        return max((scalar_category(x) for x in v.tolist()), key=ORDER.index, default="i")
    return "b" if isinstance(v, bool) else "i" if isinstance(v, int) else "f"


def refusal(op: str, operands: list[tuple[str, bool]]) -> str | None:
    """What torch says when it refuses `op` on operands of these (category, strong), or None.

    Measured on torch 2.13 CPU: `-` with any bool operand, tensor or Python scalar (`x - True`), and `-b`
    raise RuntimeError; `//` and `%` of two bools, and `abs` of a bool tensor, raise NotImplementedError."""
    cats = [c for c, _ in operands]
    if op == "-" and "b" in cats:
        return "torch has no subtraction or negation of bools"
    if op in ("//", "%") and cats == ["b", "b"]:
        return f"torch has no `{op}` of two bools"
    if op == "abs" and operands[0] == ("b", True):
        return "torch has no `abs` of a bool tensor"
    return None


def integer_division(op: str, operands: list[tuple[str, bool]]) -> bool:
    """Whether `op` divides integers, which torch refuses to do by zero (`ZeroDivisionError` on CPU)."""
    return op in ("//", "%") and "f" not in [c for c, _ in operands]


def random_init(seed: int, rank: int, numel: int, normal: bool) -> np.ndarray:
    """Seeded per-rank random values: identical in the simulator and on every backend."""
    rng = np.random.default_rng([seed, rank])
    return rng.standard_normal(numel) if normal else rng.random(numel)


def bfloat16_round(a: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept in float32."""
    bits = a.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)
