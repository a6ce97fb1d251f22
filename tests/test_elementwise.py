"""`commdsl.elementwise`: what the checker says torch refuses is what torch refuses (no operand holds a 0,
so only a refusal can raise).

Every operator of an element expression, over every pair of operand categories (a bool, integer or float
tensor, or a Python scalar of each), is run in torch; `refusal` must name exactly the cases that raise,
and `promote` must give the category of the ones that compute."""

from __future__ import annotations

import itertools

import numpy as np

import pytest
import torch

from commdsl.elementwise import integer_division, promote, refusal

TENSORS = {"b": torch.tensor([True, True]), "i": torch.tensor([3, 4]), "f": torch.tensor([1.5, 2.0])}
SCALARS = {"b": True, "i": 3, "f": 1.5}
OPERANDS = [(c, True) for c in "bif"] + [(c, False) for c in "bif"]
BINARY = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.true_divide, "//": torch.floor_divide,
          "%": torch.remainder, "min": torch.minimum, "max": torch.maximum}


def value(operand):
    c, strong = operand
    return TENSORS[c] if strong else SCALARS[c]


def torch_refuses(fn, *args) -> bool:
    try:
        fn(*args)
    except (RuntimeError, NotImplementedError, TypeError):
        return True
    return False


def category_of(t: torch.Tensor) -> str:
    return "b" if t.dtype == torch.bool else "f" if t.dtype.is_floating_point else "i"


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("a, b", [p for p in itertools.product(OPERANDS, OPERANDS) if p[0][1] or p[1][1]])
def test_binary_refusals_and_categories_match_torch(op, a, b):
    fn = BINARY[op]
    if op in ("min", "max"):  # torch.minimum takes tensors: a scalar is the 0-d tensor the runtime makes
        args = [value(x) if x[1] else torch.tensor(value(x)) for x in (a, b)]
    else:
        args = [value(a), value(b)]
    refused = torch_refuses(fn, *args)
    assert (refusal(op, [a, b]) is not None) == refused
    if not refused:
        assert promote(a, b)[0] == category_of(fn(*args)) or op == "/"


@pytest.mark.parametrize("c", "bif")
def test_negation_and_abs_of_a_tensor(c):
    t = TENSORS[c]
    assert (refusal("-", [(c, True)]) is not None) == torch_refuses(torch.neg, t)
    assert (refusal("abs", [(c, True)]) is not None) == torch_refuses(torch.abs, t)


@pytest.mark.parametrize("op", ["//", "%"])
@pytest.mark.parametrize("a, b", [p for p in itertools.product(OPERANDS, OPERANDS) if p[0][1] or p[1][1]])
def test_integer_division_is_the_one_that_refuses_a_zero_divisor(op, a, b):
    if refusal(op, [a, b]) is not None:
        return  # refused whatever the divisor
    zero = TENSORS[b[0]] * 0 if b[1] else type(SCALARS[b[0]])(0)
    if b[0] == "b":
        zero = torch.zeros(2, dtype=torch.bool) if b[1] else False
    assert integer_division(op, [a, b]) == torch_refuses(BINARY[op], value(a), zero)


# ---- the simulator's arithmetic is torch's ------------------------------------------------------------------------
# `TensorValues` computes in NumPy what torch computes, dtype and value: every operator and `min`/`max` over
# every pair of dtypes (tensors of one dimension and of none, and Python numbers of each kind), on values that
# round, overflow, wrap, divide by zero and fall between a float16 or bfloat16's steps.

from commdsl.elementwise import BINARY as VALUE_OPS  # noqa: E402
from commdsl.elementwise import DEFAULT_FLOAT, TensorValues, fill_refuses, torch_binary  # noqa: E402
from commdsl.dtypes import TOLERANCE  # noqa: E402
from commdsl.simulate import cast  # noqa: E402

DTYPE_NAMES = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
HOSTILE = [0, 1, -1, 3, 7, -7, 100, 127, -128, 255, 300, 65504, 70000, 16777217, 2**31 - 1, -(2**31), 2**40 + 3,
           0.1, -0.5, 1.5, 2.5, 1.0009765625, 1e-8, 3.4e38, 1e20, float("inf"), float("nan")]  # fmt: skip
NUMBERS = [True, 3, -7, 300, 2**31, 2**40 + 3, 0.5, 0.1, -2.5, 1e10, 1e-3, 65505.0]
OPS = ["+", "-", "*", "/", "//", "%", "==", "!=", "<", "<=", ">", ">=", "min", "max"]
TORCH_OPS = {**VALUE_OPS, "min": torch.minimum, "max": torch.maximum}  # Python's operators, as the runtime uses


@pytest.fixture(autouse=True)
def commdsl_default_dtype():
    """float64, as the runtime and every compiled script set it (`elementwise.DEFAULT_FLOAT`)."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, DEFAULT_FLOAT))
    yield
    torch.set_default_dtype(saved)


def tensor_of(dtype: str, zero_dim: bool = False, shift: int = 0) -> tuple[torch.Tensor, TensorValues]:
    """The hostile values stored in a tensor of `dtype`, as torch and as TensorValues (and the simulator's `cast`
    must store them as torch does). `shift` rotates them, so two operands pair different values."""
    values = torch.tensor(HOSTILE[shift:] + HOSTILE[:shift], dtype=torch.float64)
    t = values.to(getattr(torch, dtype))
    same(TensorValues(cast(values.numpy(), dtype), dtype), t)  # the simulator stores what torch stores
    if zero_dim:
        t = t[5]
    return t, TensorValues(numpy_of(t), dtype, zero_dim)


def numpy_of(t: torch.Tensor):
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def same(got: TensorValues, want: torch.Tensor) -> None:
    """The same dtype and values, NaN where torch has NaN and zeros of torch's sign (x / -0.0 is -inf)."""
    assert got.dtype == str(want.dtype).removeprefix("torch."), (got.dtype, want.dtype)
    with np.errstate(invalid="ignore"):  # every bfloat16 bit pattern includes signalling NaNs
        g, w = got.a.astype("float64"), numpy_of(want).astype("float64")
    assert g.shape == w.shape
    bad = ~((g == w) & (np.signbit(g) == np.signbit(w)) | (g != g) & (w != w))
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} differ, first {g[bad][:3]} against torch {w[bad][:3]}"


def torch_call(op: str, x, y):
    if op in ("min", "max"):  # the runtime's and the compiled script's torch.minimum(as_tensor(a), as_tensor(b))
        x, y = torch.as_tensor(x), torch.as_tensor(y)
    return TORCH_OPS[op](x, y)


def refused(op: str, x, y) -> bool:
    try:
        torch_call(op, x, y)
    except (RuntimeError, NotImplementedError):
        return True
    return False


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("left", DTYPE_NAMES)
def test_an_operation_on_two_tensors_computes_what_torch_computes(op, left):
    for right in DTYPE_NAMES:
        for zero_dim in (False, True):
            (tx, vx), (ty, vy) = tensor_of(left), tensor_of(right, zero_dim, shift=3)
            if refused(op, tx, ty):
                continue
            if op in ("//", "%") and (numpy_of(ty) == 0).any() and not ty.dtype.is_floating_point:
                continue  # torch refuses an integer division by zero: the simulator reports it (V802)
            same(torch_binary(op, vx, vy), torch_call(op, tx, ty))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_an_operation_with_a_python_number_computes_what_torch_computes(op, dtype):
    t, v = tensor_of(dtype)
    for number in NUMBERS:
        for x, y, vx, vy in ((t, number, v, number), (number, t, number, v)):
            if refused(op, x, y) or op in ("//", "%") and not t.dtype.is_floating_point and y is t and (
                    numpy_of(t) == 0).any():  # fmt: skip
                continue
            if op == "**" or isinstance(number, int) and abs(number) > 2**31 and op in ("min", "max"):
                continue
            same(torch_binary(op, vx, vy), torch_call(op, x, y))


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_negation_and_abs_keep_the_dtype_as_torch_does(dtype):
    t, v = tensor_of(dtype)
    if dtype != "bool":
        same(-v, -t)
        same(abs(v), torch.abs(t))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "==", "<", "min"])
def test_every_float16_and_bfloat16_value_computes_as_in_torch(dtype, op):
    """Where a Python number is rounded to the dtype and where torch keeps it in float32, and how `//` and `%`
    round, differ by operator and side: every value of the dtype against numbers that fall between its steps,
    either side. A bfloat16 `%` may be one step of the dtype off (`_reduced_division`): within its tolerance, where
    torch's is a number."""
    t = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(getattr(torch, dtype))
    v = TensorValues(numpy_of(t), dtype)
    for number in (3, 2.5, 0.1, 1e-3, -7, 65505.0, 1e10):
        for x, y, vx, vy in ((t, number, v, number), (number, t, number, v)):
            got, want = torch_binary(op, vx, vy), torch_call(op, x, y)
            if dtype == "bfloat16" and op == "%":  # SLEEF's fmod, NaN for a subnormal divisor or a huge quotient
                finite = np.isfinite(numpy_of(want))
                assert np.allclose(got.a[finite], numpy_of(want)[finite], rtol=TOLERANCE["bfloat16"][0], atol=0)
            else:
                same(got, want)


@pytest.mark.parametrize("dtype", DTYPE_NAMES[1:])
def test_a_power_computes_what_torch_computes(dtype):
    """The exponent of an element-wise `**` is a number (a negative integer one made a float, as in Python)."""
    t, v = tensor_of(dtype)
    for exponent in (0, 1, 2, 3, 4, 7, 2.0, 0.5, 1.5, -0.5, -1.0, -2.0, -3.0):
        if not t.dtype.is_floating_point and isinstance(exponent, float):
            t2, v2 = t.clamp(0, 100), TensorValues(numpy_of(t.clamp(0, 100)), dtype)  # no inf from 0 ** -1.0
        else:
            t2, v2 = t, v
        got, want = v2**exponent, t2**exponent
        if exponent in (0, 1, 2, 3, -1, -2) or not want.dtype.is_floating_point:
            same(got, want)
        else:  # torch's pow is SLEEF's (or std::pow), within an ulp or two of NumPy's and each its own at ±inf
            assert got.dtype == str(want.dtype).removeprefix("torch.")
            finite = np.isfinite(numpy_of(want))
            assert np.allclose(got.a[finite], numpy_of(want)[finite], rtol=TOLERANCE[got.dtype][0], atol=0)


FILLED = [300, -1, -129, -255, -256, 2**31, -(2**31) - 1, 2**63 - 1, 70000.0, 1e10, 1e39, 1e300, float("inf"),
          float("nan"), 2.5, -0.5, 255.9, 3.4e38, 65504.0, 65504.5, -128.5, -129.0, True, 0]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_the_numbers_n138_refuses_are_the_ones_torchs_fill_refuses(dtype):
    """`x = 300` is `x.fill_(300)` in the runtime and in a compiled script, a tensor's initialiser of one number
    `torch.full`: both check the number (c10's checked conversion); the checker refuses what they refuse."""
    for number in FILLED:
        refused = [refused_by(lambda: torch.zeros(2, dtype=getattr(torch, dtype)).fill_(number)),
                   refused_by(lambda: torch.full((2,), number, dtype=getattr(torch, dtype)))]  # fmt: skip
        assert refused == [bool(fill_refuses(number, dtype))] * 2, (dtype, number, refused)
    per_rank = np.array([1, 300, -1])  # one number per rank
    assert fill_refuses(per_rank, dtype).tolist() == [bool(fill_refuses(int(v), dtype)) for v in per_rank]


def refused_by(fn) -> bool:
    try:
        fn()
    except RuntimeError as e:
        assert "without overflow" in str(e)
        return True
    return False


@pytest.mark.parametrize("source", ["float64", "float32", "float16", "bfloat16"])
def test_a_float_stored_into_an_integer_is_what_torch_stores(source):
    """`cast` (every store of the simulator) against torch's copy on this CPU, for 200,000 floats of every
    magnitude and the values at the integer dtypes' edges: NaN, inf and floats beyond the range included (x86's
    conversion, V804)."""
    rng = np.random.default_rng(0)
    magnitude = 10.0 ** rng.uniform(-3, 25, 200_000)
    edges = [np.nan, np.inf, -np.inf, 2**31, 2**31 - 1, -(2**31), -(2**31) - 1, 2**31 - 0.5, 2**63, -(2**63), 2**32 + 7,
             3e9 + 7, -3e9 - 7, 2**15, 128.5, -0.9, 0.9, 2.0**64]  # fmt: skip
    values = torch.tensor(np.concatenate([magnitude * rng.choice([-1, 1], magnitude.size), edges]))
    t = values.to(getattr(torch, source))
    for dtype in ("bool", "uint8", "int8", "int32", "int64"):
        stored = cast(numpy_of(t), dtype)
        assert (stored == t.to(getattr(torch, dtype)).numpy()).all(), (source, dtype)


def test_the_temporaries_torch_makes_are_of_the_dtypes_it_computes_in():
    """predict and the memory check count the arrays an assignment makes: each of torch's dtype for its step."""
    from commdsl.elementwise import temporaries
    from commdsl.schedule import View

    dtypes = {"x": "int32", "g": "bfloat16", "s": "bfloat16", "acc": "float32", "big": "int64", "f": "float32"}
    v = {name: ("v", View(name, 0, (4,), 4)) for name in dtypes}

    def dtype_of(view):
        return dtypes[view.tensor]

    assert temporaries("=", ("b", "/", v["x"], ("c", 2), None), v["f"][1], dtype_of) == [8]  # float64 default
    assert temporaries("+=", ("b", "*", v["g"], v["s"], None), v["acc"][1], dtype_of) == [2, 4]
    assert temporaries("=", ("b", "+", v["big"], v["f"], None), v["f"][1], dtype_of) == [4]
    assert temporaries("=", ("b", "<", v["x"], ("c", 0.5), None), v["x"][1], dtype_of) == [1]
    assert temporaries("=", ("u", "-", ("i",)), v["big"][1], dtype_of) == [8, 8]
