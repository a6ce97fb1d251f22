"""Static values over a set of ranks, with Python's exact arithmetic, evaluated for all ranks at once.

The expansion evaluates every `let`, peer, bound and shape once for all the ranks that reach a
statement. A value is a Python scalar when it is the same on every one of those ranks, else a NumPy
array with one entry per rank: int64, float64 or bool where that is exact, an object array of Python
numbers where it is not (integers near 2**62, a `/` that divides on some ranks only). Either way the
result is what Python computes rank by rank: `7 / 2` is `3.5`, `6 / 2` is the integer `3`, `-1 % 4`
is `3`, `True + True` is `2`.

A rank whose arithmetic fails (division by zero, a huge power) stops with a diagnostic: `Failure`
names which of the ranks failed and builds the diagnostic for the first of them, so the expansion can
report it and go on with the others.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from commdsl.diagnostics import Diagnostic
from commdsl.rules.sizes import DivisionByZero, NotAnInteger
from commdsl.syntax import nodes as n

SAFE = 1 << 62
"""int64 arithmetic is exact while every operand and result stays below this (no overflow check needed)."""
EXACT_FLOAT = 1 << 53
"""Integers below this convert to float64 and compare with floats exactly."""
MAX_POWER_BITS = 4096
"""`a ** b` on integers stops here: `10 ** 10 ** 10` is an error, not an hour of arithmetic."""

BINARY: dict[str, Callable] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
"""The operators of per-rank values: arithmetic, integer and comparison."""
INTEGER_OPS = ("<<", ">>", "&", "|", "^")
"""Operators on integers only (per-rank values; element expressions fold them to per-rank constants)."""
NUMPY_INTEGER = {
    "<<": np.left_shift,
    ">>": np.right_shift,
    "&": np.bitwise_and,
    "|": np.bitwise_or,
    "^": np.bitwise_xor,
}
NUMPY_ARITHMETIC = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.true_divide,
    "//": np.floor_divide,
    "%": np.remainder,
}
COMPARE = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


class Failure(Exception):
    """Some of the ranks cannot go on: `mask` marks them (True for all when the value was uniform);
    `diagnostic(k)` is the diagnostic of the k-th rank (a position among the active ranks)."""

    def __init__(self, mask, diagnostic: Callable[[int], Diagnostic]):
        super().__init__()
        self.mask = mask
        self.diagnostic = diagnostic


class Unread(Failure):
    """The ranks in `mask` reached an integer read from tensor data whose value is not known yet: they stop
    there without a diagnostic until the schedule has run that far (`expand.expand`)."""


def fail_all(diagnostic: Diagnostic):
    """A failure of every active rank alike (a uniform value)."""
    return Failure(True, lambda k: diagnostic)


def is_vec(v) -> bool:
    return isinstance(v, np.ndarray)


def sub(v, sel):
    """`v` restricted to some of the active ranks (a mask or positions)."""
    return v[sel] if isinstance(v, np.ndarray) else v


def at(v, pos, n: int):
    """`v` as an array over positions `pos` (None: all `n`)."""
    if isinstance(v, np.ndarray):
        return v if pos is None else v[pos]
    return np.full(n if pos is None else len(pos), v)


def distinct(a, axis: int | None = None) -> np.ndarray:
    """`np.unique(a)`, sorted distinct values (rows along `axis`). Plain `np.unique` first asks
    `np.ma.is_masked`, which imports `numpy.ma`: 7 ms of a small lint's start-up (docs/benchmarks.md);
    asking for the counts takes numpy's path that does not."""
    return np.unique(a, return_counts=True, axis=axis)[0]


def ident(v):
    """An array by identity, any other value by itself: a key for values a cache holds on to (the expansion
    gives a loop's records one array where their values are equal)."""
    return ("array", id(v)) if isinstance(v, np.ndarray) else v


def item(v, k: int):
    """The Python scalar `v` has at position k."""
    if isinstance(v, np.ndarray):
        x = v[k]
        return x.item() if isinstance(x, np.generic) else x
    return v


def uniform(v):
    """A scalar when every rank has the same value (cheaper to store and to print). Most per-rank values
    differ at their ends already (a rank's chunk, its peer): that is looked at before the whole array."""
    if isinstance(v, np.ndarray) and v.size and v.dtype != object and v[-1] == v[0] and (v == v[0]).all():
        return v[0].item()
    return v


def kind(v) -> str:
    """'b', 'i', 'f' or 'o' (mixed Python numbers)."""
    if isinstance(v, np.ndarray):
        return {"b": "b", "i": "i", "u": "i", "f": "f"}.get(v.dtype.kind, "o")
    if isinstance(v, bool):
        return "b"
    return "i" if isinstance(v, int) else "f"


def _int64(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == np.int64


def _magnitude(v) -> int | float:
    if isinstance(v, np.ndarray):
        return max(-float(v.min()), float(v.max())) if v.size else 0
    return abs(v)


def _objects(v, size: int) -> np.ndarray:
    """Python scalars, one per rank."""
    out = np.empty(size, dtype=object)
    if isinstance(v, np.ndarray):
        out[:] = v.tolist() if v.dtype != object else v
    else:
        out[:] = [v] * size
    return out


def tidy(values: np.ndarray) -> np.ndarray:
    """An object array of Python numbers as a typed array where that is exact."""
    if values.dtype != object or not values.size:
        return values
    kinds = {type(x) for x in values}
    if kinds == {bool}:
        return values.astype(bool)
    if kinds == {int} and all(-SAFE < x < SAFE for x in values):
        return values.astype(np.int64)
    if kinds == {float}:
        return values.astype(np.float64)
    return values


def arith(node: n.Binary, a, b):
    """`a OP b` on two Python scalars, as Python computes it, with `/` exact when it divides."""
    op = node.op
    if op in INTEGER_OPS:
        a, b = _operands(node, a, b)
        if op in ("<<", ">>") and b < 0:
            raise fail_all(_negative_shift(node, b))
        if op == "<<" and a and abs(a).bit_length() + b > MAX_POWER_BITS:
            raise fail_all(
                NotAnInteger.diagnostic(
                    "this value is too large", span=node.span, label=f"`{a} << {b}` has over {MAX_POWER_BITS} bits"
                )
            )
    if op == "/" and isinstance(a, int) and isinstance(b, int) and b != 0 and a % b == 0:
        return a // b
    if (
        op == "**"
        and isinstance(a, int)
        and isinstance(b, int)
        and b > 0
        and b * (abs(a).bit_length() - 1) > MAX_POWER_BITS
    ):
        raise fail_all(
            NotAnInteger.diagnostic(
                "this value is too large", span=node.span, label=f"`{a} ** {b}` has over {MAX_POWER_BITS} bits"
            )
        )
    try:
        value = BINARY[op](a, b)
    except ZeroDivisionError:
        raise fail_all(
            DivisionByZero.diagnostic(
                f"division by zero in `{op}`", span=node.span, label="the right-hand side is 0 here"
            )
        ) from None
    except OverflowError:
        raise fail_all(NotAnInteger.diagnostic("this value is too large", span=node.span, label="overflow")) from None
    if isinstance(value, complex):
        raise fail_all(
            NotAnInteger.diagnostic("this value is not a real number", span=node.span, label=f"`{a} ** {b}` is complex")
        )
    return value


def _operands(node: n.Binary, a, b):
    """Both sides of an integer operator as integers (N121 names the side that is not)."""
    what = f"an operand of `{node.op}`"
    return as_int(a, node.left, what), as_int(b, node.right, what)


def _negative_shift(node: n.Binary, count) -> Diagnostic:
    return NotAnInteger.diagnostic(
        f"a shift count must be 0 or more, but it is {count}",
        span=node.right.span,
        label=f"shifts by {count}",
        help=f"shift the other way: `{'>>' if node.op == '<<' else '<<'}` by {-count}",
    )


def _integer_op(node: n.Binary, a, b, size: int):
    """`a OP b` for an integer operator over the ranks: NumPy where int64 holds it exactly, else rank by rank
    (which also finds each rank whose operands are not integers or whose shift count is negative)."""
    if kind(a) != "i" or kind(b) != "i" or max(_magnitude(a), _magnitude(b)) >= SAFE or np.any(np.asarray(b) < 0):
        return _by_rank(node, a, b, size)
    if node.op == "<<" and int(_magnitude(a)).bit_length() + int(_magnitude(b)) >= 62:
        return _by_rank(node, a, b, size)
    if node.op == ">>":
        b = np.minimum(b, 63)  # Python shifts every bit out; NumPy leaves counts of 64 and more undefined
    return np.broadcast_to(NUMPY_INTEGER[node.op](a, b), (size,)).copy()


def log2(node: n.Call, v):
    """`log2(x)`: the exact exponent of a positive power of two (N121 for any other value)."""
    v = as_int(v, node.args[0], "the argument of `log2`")
    if not is_vec(v):
        if v <= 0 or v & (v - 1):
            raise fail_all(_not_a_power(node, v))
        return v.bit_length() - 1
    bad = np.array([x <= 0 or bool(x & (x - 1)) for x in v.tolist()], dtype=bool)
    if bad.any():
        raise Failure(bad, lambda k: _not_a_power(node, item(v, k)))
    return tidy(np.array([x.bit_length() - 1 for x in v.tolist()], dtype=object))


def _not_a_power(node: n.Call, value: int) -> Diagnostic:
    why = "not positive" if value <= 0 else "not a power of two"
    return NotAnInteger.diagnostic(
        f"`log2` needs a positive power of two, but its argument is {value}",
        span=node.span,
        label=f"{value} is {why}",
        help="for any size, count with a loop: `let d = 1`, then `while d < x:` ... `d <<= 1`",
    )


def _by_rank(node: n.Binary, a, b, size: int) -> np.ndarray:
    """Python's arithmetic rank by rank: exact whatever the values, for the cases NumPy cannot do exactly."""
    xs, ys = _objects(a, size), _objects(b, size)
    out = np.empty(size, dtype=object)
    failed = np.zeros(size, dtype=bool)
    first = None
    for k in range(size):
        try:
            out[k] = arith(node, xs[k], ys[k])
        except Failure as f:
            failed[k] = True
            first = first or f
            out[k] = 0
    if first is not None:
        raise Failure(failed, first.diagnostic)
    return tidy(out)


def binary(node: n.Binary, a, b):
    """The static value of `a OP b` over the ranks."""
    op = node.op
    if op in ("and", "or"):
        if not is_vec(a) and not is_vec(b):
            return (bool(a) and bool(b)) if op == "and" else (bool(a) or bool(b))
        f = np.logical_and if op == "and" else np.logical_or
        return f(truthy(a), truthy(b))
    if not is_vec(a) and not is_vec(b):
        return arith(node, a, b)
    size = (a if is_vec(a) else b).size
    if op in INTEGER_OPS:
        return _integer_op(node, a, b, size)
    ka, kb = kind(a), kind(b)
    if "o" in (ka, kb) or op == "**":
        return _by_rank(node, a, b, size)
    if ka == "b":  # Python's bools are the integers 0 and 1 in arithmetic
        a, ka = (a.astype(np.int64) if is_vec(a) else int(a)), "i"
    if kb == "b":
        b, kb = (b.astype(np.int64) if is_vec(b) else int(b)), "i"
    if (
        "f" in (ka, kb)
        and "i" in (ka, kb)
        and max(_magnitude(x) for x, k in ((a, ka), (b, kb)) if k == "i") >= EXACT_FLOAT
    ):
        return _by_rank(node, a, b, size)  # an int too large to meet a float exactly in NumPy
    if op in COMPARE:
        return COMPARE[op](a, b)
    if op in ("/", "//", "%"):
        zero = (b == 0) if is_vec(b) else np.full(size, b == 0)
        if zero.any():
            raise Failure(
                zero,
                lambda k: DivisionByZero.diagnostic(
                    f"division by zero in `{op}`", span=node.span, label="the right-hand side is 0 here"
                ),
            )
    if ka == kb == "i":
        return _int_op(node, op, a, b, size)
    A, B = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(all="ignore"):
        value = NUMPY_ARITHMETIC[op](A, B)
    return np.broadcast_to(value, (size,)).copy() if value.shape != (size,) else value


def _int_op(node: n.Binary, op: str, a, b, size: int):
    if op in ("%", "//") and _int64(a) and type(b) is int and -SAFE < b < SAFE and (op == "%" or b != -1):
        # NumPy's int64 remainder and floor division are Python's for every int64 and such a divisor (only
        # MIN // -1 overflows): no magnitude to look at (a ring's `(rank - s) % world`, thousands of times).
        # By a power of two they are a mask and an arithmetic shift, in two's complement for every int64 too,
        # and several times faster than NumPy's integer division (a world of 4096).
        if b > 0 and not b & (b - 1):
            return np.bitwise_and(a, b - 1) if op == "%" else np.right_shift(a, b.bit_length() - 1)
        return np.remainder(a, b) if op == "%" else np.floor_divide(a, b)
    ma, mb = _magnitude(a), _magnitude(b)
    if max(ma, mb) >= SAFE:  # an operand NumPy cannot hold in int64 (even `0 * 2**63` would not convert)
        return _by_rank(node, a, b, size)
    if op in ("+", "-"):
        if ma + mb >= SAFE:
            return _by_rank(node, a, b, size)
        return a + b if op == "+" else a - b
    if op == "*":
        if ma * mb >= SAFE:
            return _by_rank(node, a, b, size)
        return a * b
    if op == "//":
        return np.floor_divide(a, b)
    if op == "%":
        return np.remainder(a, b)
    q, r = np.divmod(a, b)  # op == "/"
    exact = r == 0
    if exact.all():
        return q
    if not exact.any() and max(ma, mb) < EXACT_FLOAT:
        return np.true_divide(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)) + np.zeros(size)
    return _by_rank(node, a, b, size)


def unary(node: n.Unary, v):
    op = node.op
    if op == "not":
        return np.logical_not(truthy(v)) if is_vec(v) else not v
    if op == "+":  # Python's `+True` is the int 1
        return (v.astype(np.int64) if v.dtype == bool else v) if is_vec(v) else (int(v) if isinstance(v, bool) else v)
    if not is_vec(v):
        return -v
    if v.dtype == bool:
        return -v.astype(np.int64)
    if v.dtype == object or (v.dtype.kind == "i" and _magnitude(v) >= SAFE):
        return tidy(np.array([-x for x in _objects(v, v.size)], dtype=object))
    return -v


def call(fname: str, args: list):
    """Static `min`, `max`, `abs`: Python's, which return one of their arguments."""
    if not any(is_vec(a) for a in args):
        return abs(args[0]) if fname == "abs" else {"min": min, "max": max}[fname](args)
    size = next(a for a in args if is_vec(a)).size
    kinds = {kind(a) for a in args}
    if kinds & {"o", "b"} or len(kinds) > 1 or (kinds == {"i"} and max(_magnitude(a) for a in args) >= SAFE):
        cols = [_objects(a, size) for a in args]
        fn = {"min": min, "max": max}.get(fname)
        out = np.empty(size, dtype=object)
        out[:] = [abs(c[0]) if fname == "abs" else fn(*c) for c in zip(*cols)] if cols else []
        return tidy(out)
    if fname == "abs":
        return np.abs(args[0])
    out = args[0]
    for a in args[1:]:  # Python keeps the first of equal values (0.0 before -0.0) and skips a later NaN
        out = np.where(a < out, a, out) if fname == "min" else np.where(a > out, a, out)
    return out + np.zeros(size, dtype=out.dtype) if not is_vec(out) else out


def merge(old, positions: np.ndarray, new, size: int):
    """A value over `size` ranks whose entries at `positions` are replaced by `new` (a `let` that a `while`
    loop reassigned on the ranks that ran its body)."""
    if positions.size == size:
        return new
    same = kind(old) == kind(new) != "o"
    if same and max(_magnitude(old), _magnitude(new)) < SAFE:  # typed arrays hold both exactly
        out = np.array(old, copy=True) if is_vec(old) else np.full(size, old)
        out[positions] = new
        return uniform(out)
    out = _objects(old, size)
    out[positions] = _objects(new, positions.size)
    return uniform(tidy(out))


def truthy(v):
    if is_vec(v):
        if v.dtype == bool:
            return v
        if v.dtype == object:
            return np.array([bool(x) for x in v], dtype=bool)
        return v != 0
    return bool(v)


def as_int(v, node: n.Node, what: str):
    """An integer on every rank (an int64 array or a Python int); ranks with a bool or a fraction fail (N121)."""
    k = kind(v)
    if not is_vec(v):
        if k == "b":
            raise fail_all(
                NotAnInteger.diagnostic(
                    f"{what} must be an integer, not a condition", span=node.span, label="a true/false value"
                )
            )
        if k == "f":
            if not float(v).is_integer():
                raise fail_all(_fraction(v, node, what))
            return int(v)
        return v
    if k == "i":
        return v.astype(np.int64, copy=False)
    if k == "b":
        raise Failure(
            np.ones(v.size, dtype=bool),
            lambda i: NotAnInteger.diagnostic(
                f"{what} must be an integer, not a condition", span=node.span, label="a true/false value"
            ),
        )
    if k == "f":
        whole = np.isfinite(v) & (v == np.floor(v))
        if not whole.all():
            raise Failure(~whole, lambda i: _fraction(v[i], node, what))
        if _magnitude(v) < SAFE:
            return v.astype(np.int64)
    out = np.empty(v.size, dtype=object)
    bad = np.zeros(v.size, dtype=bool)
    for i, x in enumerate(v.tolist()):
        if isinstance(x, bool) or isinstance(x, float) and not x.is_integer():
            bad[i] = True
        out[i] = int(x) if not bad[i] else 0
    if bad.any():
        first = v[int(np.argmax(bad))]
        raise Failure(
            bad,
            lambda i: (
                _fraction(first, node, what)
                if not isinstance(first, bool)
                else NotAnInteger.diagnostic(
                    f"{what} must be an integer, not a condition", span=node.span, label="a true/false value"
                )
            ),
        )
    return tidy(out)


def _fraction(value, node: n.Node, what: str) -> Diagnostic:
    value = float(value)
    return NotAnInteger.diagnostic(
        f"{what} must be an integer, but it is {value:g}",
        span=node.span,
        label=f"{value:g}",
        help="use `//` for integer division",
    )


def as_index_array(v, size: int) -> np.ndarray:
    """An integer value as an int64 array over the ranks (object arrays of big ints stay objects)."""
    if is_vec(v):
        return v
    return np.full(size, v, dtype=np.int64 if -SAFE < v < SAFE else object)
