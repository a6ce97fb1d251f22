"""Evaluates element expressions (`Elem` tuples of the Schedule) on NumPy or torch arrays.

The simulator and the runtime share this one evaluator, so `x.chunk(k, p) += tmp` means the same
thing in both; only the array library differs (`NUMPY` here, a torch adapter in the runtime). On NumPy
the values are `TensorValues`, which compute in torch's dtypes, not NumPy's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from commdsl.schedule import Elem, View
from commdsl.values import COMPARE, NUMPY_ARITHMETIC


class ArrayLib:
    """The few array functions an element expression needs."""

    def __init__(self, arange: Callable, minimum: Callable, maximum: Callable, absolute: Callable):
        self.arange = arange
        self.minimum = minimum
        self.maximum = maximum
        self.absolute = absolute


def _numpy_extreme(op: str) -> Callable:
    def call(a, b):
        if not isinstance(a, TensorValues) and not isinstance(b, TensorValues):  # two Python numbers
            return min(a, b) if op == "min" else max(a, b)
        return torch_binary(op, a, b)

    return call


NUMPY = ArrayLib(
    lambda n: TensorValues(np.arange(n, dtype=np.int64), "int64"), _numpy_extreme("min"), _numpy_extreme("max"), abs
)
"""NumPy with torch's arithmetic: `read` gives `TensorValues` (`tensor_values`), `i` is an int64 tensor."""


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
    that is a scalar. Each of the dtype torch computes it in (`result_type`)."""
    from commdsl.dtypes import DTYPES

    if in_place(op, value, target, dtype_of):
        return []
    out: list[int] = []

    def size(dtype: str) -> int:
        return DTYPES[dtype].itemsize if dtype in DTYPES else np.dtype(dtype).itemsize  # int16: int8 with uint8

    def made(dtype: str, zero_dim: bool = False) -> TensorValues:
        out.append(size(dtype))
        return TensorValues(_NO_VALUES, dtype, zero_dim)

    def walk(e: Elem):  # a TensorValues without values for an array, the number itself for a number
        tag = e[0]
        if tag == "v":
            return TensorValues(_NO_VALUES, dtype_of(e[1]), not e[1].shape)
        if tag == "i":
            return made("int64")
        if tag == "u":
            inner = walk(e[2])
            return made(inner.dtype, inner.zero_dim) if isinstance(inner, TensorValues) and e[1] != "+" else inner
        if tag in ("b", "f"):
            args = [walk(a) for a in ((e[2], e[3]) if tag == "b" else e[2])]
            arrays = [a for a in args if isinstance(a, TensorValues)]
            if not arrays:
                return args[0]
            return made(_result_of(e[1], *args) if len(args) == 2 else arrays[0].dtype)  # `abs`: its operand's
        return e[1]  # a number

    value_type = walk(value)
    if op == "=" and value[0] == "v":  # `x[1:3] = x[0:2]`: cloned first, as copy_ refuses overlapping views
        out.append(size(value_type.dtype))
    elif op != "=":  # combine(target, value): a new tensor, then copied into the target
        out.append(size(_result_of(op[:-1], TensorValues(_NO_VALUES, dtype_of(target)), value_type)))
    return out


_NO_VALUES = np.zeros(0)


def _result_of(op: str, x, y) -> str:
    """The dtype torch gives `x OP y`: bool for a comparison, the default float for `/` of integers."""
    if op in COMPARISONS:
        return "bool"
    dtype = result_type(x, y)
    return DEFAULT_FLOAT if op == "/" and dtype not in _FLOAT_RANK else dtype


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


# ---- torch's arithmetic on NumPy arrays ------------------------------------------------------------
# The simulator computes in NumPy what the runtime and a compiled script compute in torch, so every
# operation takes torch's dtype, not NumPy's: `int64 + float32` is float32 in torch (float64 in NumPy),
# `int32 + float16` float16, a bfloat16 product is rounded to bfloat16 before it is added, a one-element
# 0-dimensional view (`x[0]`) does not widen a float32 tensor to its float64, a Python float meets a
# float16 tensor as a float16 or a float32 depending on the operator, and a Python integer next to an int32
# tensor wraps into int32 (NumPy raises OverflowError). Measured against torch 2.13 on CPU op by op
# (tests/test_elementwise.py).

DEFAULT_FLOAT = "float64"
"""The default dtype the runtime and every compiled script give torch (`torch.set_default_dtype`), so that
`int * 0.5` and `int / int` compute in float64 as they do in Python: the dtype of a Python float next to an
integer or bool tensor, of `/` of integers and of `torch.as_tensor(0.5)`."""

_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
FLOAT_DTYPES = tuple(_FLOAT_RANK)


def promote_types(a: str | None, b: str | None) -> str | None:
    """torch.promote_types of two dtypes (None: no operand of that kind yet)."""
    if a is None or a == b:
        return b
    if b is None or b == "bool":
        return a
    if a == "bool":
        return b
    fa, fb = a in _FLOAT_RANK, b in _FLOAT_RANK
    if fa != fb:
        return a if fa else b
    if fa:
        if _FLOAT_RANK[a] == _FLOAT_RANK[b]:  # float16 with bfloat16
            return "float32"
        return max(a, b, key=_FLOAT_RANK.__getitem__)
    return str(np.promote_types(a, b))  # integers as NumPy promotes them (int8 with uint8: int16)


def _combine_categories(higher: str | None, lower: str | None) -> str | None:
    """torch's rule between a class of operands and a weaker one (tensors of one or more dimensions, then
    0-dimensional tensors, then Python numbers): the stronger class's dtype, unless the weaker brings a float
    to integers or anything to bools."""
    if higher in _FLOAT_RANK:
        return higher
    if higher == "bool" or lower in _FLOAT_RANK:
        return promote_types(higher, lower)
    return higher if higher is not None else lower


def _number_dtype(v) -> str:
    """The dtype torch gives a Python number (or an array of them, one per element): bool, int64, or the
    default float."""
    kind = np.asarray(v).dtype.kind
    return "bool" if kind == "b" else DEFAULT_FLOAT if kind == "f" else "int64"


def result_type(x, y) -> str:
    """torch.result_type of two operands, a `TensorValues` being a tensor and anything else a Python number."""
    dim = zero = number = None
    for v in (x, y):
        if not isinstance(v, TensorValues):
            number = promote_types(number, _number_dtype(v))
        elif v.zero_dim:
            zero = promote_types(zero, v.dtype)
        else:
            dim = promote_types(dim, v.dtype)
    out = _combine_categories(dim, _combine_categories(zero, number))
    assert out is not None
    return out


def as_dtype(a, dtype: str) -> np.ndarray:
    """Values (an array, or Python numbers) converted as torch converts them into `dtype` (bfloat16 held
    rounded in float32; integers wrap)."""
    with np.errstate(over="ignore"):  # a float beyond float16's range is inf, as torch makes it
        out = np.asarray(a).astype("float32" if dtype == "bfloat16" else dtype, copy=False)
    return bfloat16_round(out) if dtype == "bfloat16" else out


REDUCED = ("float16", "bfloat16")
"""torch computes these in float32 (its `opmath`) and rounds each result back."""


def _number_in_float32(op: str, right: bool) -> bool:
    """Whether torch's CPU kernel takes a Python number next to a float16 or bfloat16 tensor as a float32 (`x *
    0.1`, `x / 0.1`, `x // 0.1`), not rounded to the tensor's dtype first as the other operators do (`x + 0.1`,
    `x < 0.1`). Measured on torch 2.13 over every float16 and bfloat16 value."""
    return op == "*" or right and op in ("/", "//")


UFUNC = {**NUMPY_ARITHMETIC, "**": np.power, **COMPARE, "min": np.minimum, "max": np.maximum}
"""NumPy's function for each operator of an element expression, `min` and `max`."""


def torch_binary(op: str, x, y) -> TensorValues:
    """`x OP y` (an operator, `min` or `max`) as torch computes it with at least one tensor operand: both
    converted to the promoted dtype (`/` of integers: the default float), the operation, the result in that
    dtype (a comparison's in bool); float16 and bfloat16 computed in float32 and rounded back. `n / x` is
    `x.reciprocal() * n`, as torch's `Tensor.__rtruediv__` computes it; `min`/`max` are torch.minimum/maximum
    of `torch.as_tensor` of each side, so a Python number is a 0-dimensional tensor of its dtype there."""
    if op in ("min", "max"):
        x, y = (v if isinstance(v, TensorValues) else _zero_dim(v) for v in (x, y))
    if op == "/" and not isinstance(x, TensorValues):
        return torch_binary("*", y.reciprocal(), x)
    dtype = result_type(x, y)
    if op == "/" and dtype not in _FLOAT_RANK:
        dtype = DEFAULT_FLOAT
    compute = "float32" if dtype in REDUCED else dtype
    a, b = (
        (v.a if v.dtype == dtype else as_dtype(v.a, dtype)).astype(compute, copy=False)
        if isinstance(v, TensorValues)
        else as_dtype(v, "float32" if dtype in REDUCED and _number_in_float32(op, v is y) else dtype)
        for v in (x, y)
    )
    with np.errstate(all="ignore"):
        if dtype in REDUCED and (op == "%" or op == "//" and isinstance(y, TensorValues)):
            out = _reduced_division(op, a, b, dtype)
        elif op == "**" and not isinstance(y, TensorValues) and np.ndim(y) == 0:
            out = _power(a, b)
        elif op == "%" and dtype in _FLOAT_RANK:  # torch's remainder keeps fmod's -0.0, NumPy's takes b's sign
            mod = np.fmod(a, b)
            out = np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
        else:
            out = UFUNC[op](a, b)
    zero = all(not isinstance(v, TensorValues) or v.zero_dim for v in (x, y))
    if op in COMPARISONS:
        return TensorValues(out, "bool", zero)
    return TensorValues(_rounded(out, dtype), dtype, zero)


def _power(a: np.ndarray, exponent: np.ndarray):
    """`a ** exponent` for one exponent, as torch's CPU kernel computes it: 0 gives ones, 1 a copy, 2 and 3
    products, -1 and -2 a reciprocal (of a float); any other is `pow`, whose last bit can differ from torch's
    (it vectorises with SLEEF: within a few units in the last place, inside every float's tolerance)."""
    e = exponent.item()
    if e == 0:
        return np.ones_like(a)
    special = {1: lambda x: x, 2: lambda x: x * x, 3: lambda x: x * x * x}
    if a.dtype.kind == "f":
        special |= {-1: lambda x: 1 / x, -2: lambda x: 1 / (x * x)}
    return special[e](a) if e in special else np.power(a, exponent)


def _reduced_division(op: str, a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """`//` or `%` of float16 or bfloat16 values (held in float32) as torch's CPU kernel computes them: in the
    dtype itself, every step rounded (c10's div_floor_floating and remainder), not in float32 as the other
    operators (and `x // 0.1`, a number on the right, whose kernel takes it in float32). Exact against torch
    2.13 for every float16 value, and `//` for every bfloat16; a bfloat16 `%` can be one step of the dtype off,
    or a number where torch's vectorised fmod gives NaN (a subnormal divisor)."""

    def r(v) -> np.ndarray:
        return _rounded(np.asarray(v, dtype=np.float32), dtype)

    mod = r(np.fmod(a, b))
    crossed = (mod != 0) & ((b < 0) != (mod < 0))
    if op == "%":
        return np.where(crossed, r(mod + b), mod)
    div = r(r(a - mod) / b)
    div = np.where(crossed, r(div - 1), div)
    floor = np.floor(div)
    floor = np.where(div - floor > 0.5, r(floor + 1), floor)
    out = np.where(div != 0, floor, np.copysign(np.float32(0), r(a / b)))
    return np.where(b == 0, r(a / b), out)


def _rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 results of a float16 or bfloat16 operation, rounded back to it (bfloat16 held in float32)."""
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return a.astype(np.float16)
    return bfloat16_round(a) if dtype == "bfloat16" else a


def _zero_dim(v) -> TensorValues:
    """`torch.as_tensor(v)` of a Python number (or one per element)."""
    dtype = _number_dtype(v)
    return TensorValues(as_dtype(v, dtype), dtype, zero_dim=True)


class TensorValues:
    """NumPy values standing for a torch tensor of `dtype` (bfloat16 held rounded in float32), 0-dimensional
    or not, which torch's type promotion tells apart. Its operators compute as torch does (`torch_binary`);
    any other operand is a Python number, or one per element (a per-rank constant)."""

    __slots__ = ("a", "dtype", "zero_dim")
    __array_ufunc__ = None  # `ndarray + TensorValues` is ours (__radd__), not NumPy's
    __hash__ = None  # type: ignore[assignment]  # `==` is element-wise

    def __init__(self, a: np.ndarray, dtype: str, zero_dim: bool = False):
        self.a, self.dtype, self.zero_dim = a, dtype, zero_dim

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.a if dtype is None else self.a.astype(dtype)

    def reshape(self, shape: tuple[int, ...]) -> TensorValues:
        return TensorValues(self.a.reshape(shape), self.dtype, len(shape) == 0)

    def reciprocal(self) -> TensorValues:
        """torch.reciprocal: in the tensor's float dtype, or the default float for integers and bools."""
        dtype = self.dtype if self.dtype in _FLOAT_RANK else DEFAULT_FLOAT
        with np.errstate(all="ignore"):
            a = 1 / as_dtype(self.a, dtype).astype("float32" if dtype in REDUCED else dtype, copy=False)
        return TensorValues(_rounded(a, dtype), dtype, self.zero_dim)

    def unary(self, op: str) -> TensorValues:
        """`-x`, `+x`, `~x` or `abs(x)`: in the tensor's own dtype (a uint8 negation wraps)."""
        with np.errstate(all="ignore"):
            a = {"-": np.negative, "+": np.positive, "~": np.invert, "abs": np.abs}[op](self.a)
        return TensorValues(a, self.dtype, self.zero_dim)

    def __neg__(self) -> TensorValues:
        return self.unary("-")

    def __pos__(self) -> TensorValues:
        return self

    def __invert__(self) -> TensorValues:
        return self.unary("~")

    def __abs__(self) -> TensorValues:
        return self.unary("abs")

    # Python's reflected comparisons need no methods of their own: `2 < x` calls `x.__gt__(2)`.
    # fmt: off
    def __add__(self, o): return torch_binary("+", self, o)
    def __radd__(self, o): return torch_binary("+", o, self)
    def __sub__(self, o): return torch_binary("-", self, o)
    def __rsub__(self, o): return torch_binary("-", o, self)
    def __mul__(self, o): return torch_binary("*", self, o)
    def __rmul__(self, o): return torch_binary("*", o, self)
    def __truediv__(self, o): return torch_binary("/", self, o)
    def __rtruediv__(self, o): return torch_binary("/", o, self)
    def __floordiv__(self, o): return torch_binary("//", self, o)
    def __rfloordiv__(self, o): return torch_binary("//", o, self)
    def __mod__(self, o): return torch_binary("%", self, o)
    def __rmod__(self, o): return torch_binary("%", o, self)
    def __pow__(self, o): return torch_binary("**", self, o)
    def __rpow__(self, o): return torch_binary("**", o, self)
    def __eq__(self, o): return torch_binary("==", self, o)
    def __ne__(self, o): return torch_binary("!=", self, o)
    def __lt__(self, o): return torch_binary("<", self, o)
    def __le__(self, o): return torch_binary("<=", self, o)
    def __gt__(self, o): return torch_binary(">", self, o)
    def __ge__(self, o): return torch_binary(">=", self, o)
    # fmt: on


FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}
"""The largest finite value of each float dtype but float64."""


def fill_refuses(v, dtype: str) -> np.ndarray:
    """Where torch's `fill_` and `torch.full` refuse number `v` (one per rank, or one for all) for a tensor of
    `dtype`: c10's checked conversion ("value cannot be converted to type uint8_t without overflow"). An integer
    wraps into an unsigned dtype down to minus its maximum; a float into an integer dtype must be finite and
    within its range; a float dtype takes inf and NaN but no finite number beyond its largest."""
    a = np.asarray(v)
    out = np.zeros(a.shape, dtype=bool)
    if dtype == "bool" or dtype == "float64" or a.dtype.kind == "b":
        return out
    if dtype in FLOAT_MAX:
        with np.errstate(invalid="ignore"):
            return np.isfinite(a) & (np.abs(a.astype(np.float64)) > FLOAT_MAX[dtype])
    info = np.iinfo(dtype)
    if a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            return ~(np.isfinite(a) & (a >= info.min) & (a <= info.max))
    ints = a.astype(object)  # Python integers: no wrap while comparing
    low = -info.max if info.min == 0 else info.min
    return np.array((ints < low) | (ints > info.max), dtype=bool).reshape(a.shape)


def tensor_values(a: np.ndarray, dtype: str, shape: tuple) -> TensorValues:
    """A view's values as the tensor torch reads: of its dtype, 0-dimensional where its shape is `()`."""
    return TensorValues(a, dtype, len(shape) == 0)


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
