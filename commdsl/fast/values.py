"""Vectorised values with exactly the scalar pipeline's arithmetic, or a refusal.

A *static* value (a peer, a bound, a `let`) is a Python scalar when it is the same on every active
rank, else a NumPy array over the active ranks (int64, float64 or bool standing for Python ints,
floats and bools). Python-on-Python arithmetic is `commdsl.expand._arith` itself; array arithmetic
reproduces it where that is exact (ints below 2**53, no division by zero, no mixed int/float
results) and raises `Unknown` everywhere else.

An *element* value is a Python scalar, a `Weak` array (per-rank Python scalars, one per element)
or a strong array (tensor data, `i`). NumPy treats Python scalars as weak (NEP 50): they take the
array's dtype. `Weak` arrays are cast the same way before NumPy sees them, so a vectorised
expression computes in the dtypes the per-rank scalar pipeline computes in.
"""

from __future__ import annotations

import numpy as np

from commdsl.expand import _arith, _Stop

EXACT = 1 << 53


class Unknown(Exception):
    """The fast path cannot prove the program clean; the caller runs the precise pipeline."""


def kind(v) -> str:
    if isinstance(v, np.ndarray):
        return v.dtype.kind
    if isinstance(v, bool):
        return "b"
    if isinstance(v, int):
        return "i"
    if isinstance(v, float):
        return "f"
    raise Unknown


def checked(v):
    """A Python scalar the vectorised arithmetic can represent exactly."""
    if isinstance(v, (bool, float)):
        return v
    if isinstance(v, int) and -EXACT < v < EXACT:
        return v
    raise Unknown


def sub(v, sel):
    """`v` restricted to a subset of the active ranks (a mask or positions)."""
    return v[sel] if isinstance(v, np.ndarray) else v


def at(v, pos, n: int) -> np.ndarray:
    """`v` as an array over `pos` (None: all `n` ranks of the record)."""
    if isinstance(v, np.ndarray):
        return v if pos is None else v[pos]
    return np.full(n if pos is None else len(pos), v)


def truthy(v):
    if isinstance(v, np.ndarray):
        return v if v.dtype.kind == "b" else v != 0
    return bool(v)


def as_int(v):
    """`expand._as_int`: bools refused, floats must be whole."""
    k = kind(v)
    if k == "b":
        raise Unknown
    if k == "i":
        return v
    if isinstance(v, np.ndarray):
        if not (np.isfinite(v).all() and (v == np.floor(v)).all() and (np.abs(v) < EXACT).all()):
            raise Unknown
        return v.astype(np.int64)
    if not v.is_integer():
        raise Unknown
    return checked(int(v))


def magnitude(v) -> int:
    """The largest absolute value of a static int (a scalar or an int64 array)."""
    if isinstance(v, np.ndarray):
        return max(-int(v.min()), int(v.max())) if v.size else 0
    return abs(v)


def within(v, lo, hi) -> bool:
    """lo <= v < hi on every rank (bounds scalars or arrays)."""
    if isinstance(v, np.ndarray) and not isinstance(lo, np.ndarray) and not isinstance(hi, np.ndarray):
        return not v.size or (v.min() >= lo and v.max() < hi)
    return bool(np.all((lo <= v) & (v < hi)))


def binary(node, a, b):
    """The static value of `a OP b` (node: the `Binary`, for `_arith`)."""
    op = node.op
    if op in ("and", "or"):
        if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
            return bool(a) and bool(b) if op == "and" else bool(a) or bool(b)
        f = np.logical_and if op == "and" else np.logical_or
        return f(truthy(a), truthy(b))
    if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
        try:
            return checked(_arith(node, a, b))
        except _Stop:
            raise Unknown from None
    ka, kb = kind(a), kind(b)
    if "b" in (ka, kb) or op == "**":
        raise Unknown
    cmp = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}.get(op)
    if cmp is not None:
        return cmp(a, b)
    if ka == kb == "i":
        if op in ("+", "-"):
            r = a + b if op == "+" else a - b
            if r.min() <= -EXACT or r.max() >= EXACT:
                raise Unknown
            return r
        if op == "*":
            if magnitude(a) * magnitude(b) >= EXACT:
                raise Unknown
            return a * b
        if (b == 0).any() if isinstance(b, np.ndarray) else b == 0:
            raise Unknown
        if op == "//":
            return a // b
        if op == "%":
            return a % b
        if op == "/":
            q, r = np.divmod(a, b)
            exact = r == 0
            if exact.all():
                return q
            if exact.any():
                raise Unknown  # an int on some ranks, a float on others
            return np.true_divide(a, b)
        raise Unknown
    A, B = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if op in ("+", "-", "*"):
        return {"+": np.add, "-": np.subtract, "*": np.multiply}[op](A, B)
    if op == "/" and not (B == 0).any():
        return np.true_divide(A, B)
    raise Unknown


def unary(op: str, v):
    if op == "not":
        return np.logical_not(truthy(v)) if isinstance(v, np.ndarray) else not v
    if op == "+":
        return v
    if kind(v) == "b":
        raise Unknown
    return -v


def call(fname: str, args: list):
    """Static `min`, `max`, `abs` (Python's, which return one of their arguments)."""
    if not any(isinstance(a, np.ndarray) for a in args):
        fn = {"min": min, "max": max, "abs": abs}[fname]
        return checked(fn(args[0]) if fname == "abs" else fn(args))
    kinds = {kind(a) for a in args}
    if len(kinds) != 1 or kinds & {"b"}:
        raise Unknown
    if "f" in kinds and any(np.isnan(a).any() for a in args if isinstance(a, np.ndarray)):
        raise Unknown
    if fname == "abs":
        return np.abs(args[0])
    f = np.minimum if fname == "min" else np.maximum
    out = args[0]
    for a in args[1:]:
        out = f(out, a)
    return out


# ---- element values ------------------------------------------------------------------------------

class Weak:
    """One Python scalar per element (a static value that differs by rank): weak in NumPy's sense."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray):
        self.a = a


_UFUNC = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
          "%": np.remainder, "min": np.minimum, "max": np.maximum}


def _weak_as(w: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """What NumPy makes of Python scalars `w` next to an array of `dtype` (NEP 50), or Unknown."""
    wk, dk = w.dtype.kind, dtype.kind
    if wk == "b" or dk == "b":
        raise Unknown
    if wk == "i" and dk in "iu":
        info = np.iinfo(dtype)
        if w.size and (w.min() < info.min or w.max() > info.max):
            raise Unknown
        return w.astype(dtype)
    if dk == "f":
        finite = w[np.isfinite(w)] if wk == "f" else w
        if finite.size and np.abs(finite).max() > np.finfo(dtype).max:
            raise Unknown
        return w.astype(dtype)
    return w  # a Python float next to an integer array: NumPy computes in float64


def combine(op: str, x, y):
    """`x OP y` for element values, as `commdsl.elementwise` computes it per rank."""
    f = _UFUNC[op]
    if not (isinstance(x, np.ndarray) or isinstance(y, np.ndarray)):
        raise Unknown  # two per-rank scalars: the scalar pipeline folds them in Python
    if isinstance(x, Weak) or isinstance(y, Weak):
        if isinstance(x, Weak):
            x = _weak_as(x.a, y.dtype)
        else:
            y = _weak_as(y.a, x.dtype)
    return f(x, y)


def negate(x):
    if isinstance(x, Weak):
        if x.a.dtype.kind == "b":
            raise Unknown
        return Weak(-x.a)
    if kind(x) == "b":
        raise Unknown
    return -x


def absolute(x):
    if isinstance(x, Weak):
        if x.a.dtype.kind == "b":
            raise Unknown
        return Weak(np.abs(x.a))
    if kind(x) == "b":
        raise Unknown
    return abs(x) if not isinstance(x, np.ndarray) else np.abs(x)


def as_array(x, size: int) -> np.ndarray:
    """`np.asarray` of a value, one entry per element (Python scalars become strong 0-d arrays)."""
    if isinstance(x, Weak):
        return x.a
    if isinstance(x, np.ndarray):
        return x
    return np.broadcast_to(np.asarray(x), (size,))
