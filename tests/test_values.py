"""`commdsl.values`: static values over ranks, vectorised, with Python's exact arithmetic.

Every operation is checked against Python computing rank by rank on plain scalars (the reference
below shares nothing with `values` but the documented rule for `/`): the result's type and value on
every rank, and, where some ranks fail, exactly which ones and with which diagnostic.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.values import BINARY, Failure, as_int, binary, call, is_vec, log2, unary

SOURCE = SourceFile("v.comm", "let v = a + b\n")
SPAN = SOURCE.span(8, 13)
LIT = n.IntLit(span=SPAN, value=0)
FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
      "%": operator.mod, "**": operator.pow, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
      "<=": operator.le, ">": operator.gt, ">=": operator.ge, "<<": operator.lshift, ">>": operator.rshift,
      "&": operator.and_, "|": operator.or_, "^": operator.xor}
INTEGER_OPS = ("<<", ">>", "&", "|", "^")


def py_integer(op: str, x, y):
    """The integer operators: Python's on integers; a float with an integral value counts as that integer, as
    everywhere an integer is needed; a bool, another float or a negative shift count is N121, and so is a
    left shift past 4096 bits."""
    if any(isinstance(v, bool) or isinstance(v, float) and not v.is_integer() for v in (x, y)):
        return Fails("N121")
    x, y = int(x), int(y)
    if op in ("<<", ">>") and y < 0:
        return Fails("N121")
    if op == "<<" and x and abs(x).bit_length() + y > 4096:
        return Fails("N121")
    return PY[op](x, y)


def node(op: str) -> n.Binary:
    return n.Binary(span=SPAN, op=op, left=LIT, right=LIT)


class Fails:
    """The reference's verdict for one rank: this code stops it."""

    def __init__(self, code: str):
        self.code = code

    def __repr__(self):
        return f"Fails({self.code})"


def py_binary(op: str, x, y):
    """Python on two scalars, with the language's one exception: `/` of integers that divide is an integer."""
    if op in ("and", "or"):
        return bool(x and y) if op == "and" else bool(x or y)
    if op == "/" and isinstance(x, int) and isinstance(y, int) and y != 0 and x % y == 0:
        return x // y
    if op in INTEGER_OPS:
        return py_integer(op, x, y)
    try:
        value = PY[op](x, y)
    except ZeroDivisionError:
        return Fails("N122")
    except OverflowError:
        return Fails("N121")
    if isinstance(value, complex):
        return Fails("N121")
    return value


def vec(values: list) -> np.ndarray:
    """Per-rank values as the package stores them: a typed array where exact, else Python objects."""
    types = {type(x) for x in values}
    if types == {bool}:
        return np.array(values, dtype=bool)
    if types == {int} and all(abs(x) < 1 << 62 for x in values):
        return np.array(values, dtype=np.int64)
    if types == {float}:
        return np.array(values, dtype=np.float64)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def scalar_at(v, k: int):
    if is_vec(v):
        x = v[k]
        return x.item() if isinstance(x, np.generic) else x
    return v


def same(got, want) -> bool:
    """Equal in type and value (a NaN equals a NaN, and a zero's sign counts)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, float):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    return got == want


def check(result, want: list):
    """`result` (scalar or per-rank array) against the per-rank reference values."""
    if not is_vec(result):
        assert len({(type(w), w) for w in want}) <= 1 or len(want) == 1
    got = [scalar_at(result, k) for k in range(len(want))]
    assert all(same(g, w) for g, w in zip(got, want)), (got, want)


# ---- operands ------------------------------------------------------------------------------------

small_ints = st.integers(-40, 40)
big_ints = st.one_of(st.integers((1 << 62) - 3, (1 << 62) + 3), st.integers(-(1 << 62) - 3, -(1 << 62) + 3),
                     st.integers(1 << 53, 1 << 64), st.integers(-(1 << 70), 1 << 70))
floats = st.one_of(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
                   st.sampled_from([0.0, -0.0, 0.5, -2.5, 3.0, 1e300, -1e300, 1e-300]))
scalars = st.one_of(small_ints, small_ints, st.booleans(), floats, big_ints)


@st.composite
def operand(draw, size: int, elements=scalars):
    """A scalar (the same on every rank) or a vector over `size` ranks, of one kind or mixed."""
    if draw(st.booleans()):
        return draw(elements)
    kind = draw(st.sampled_from(["int", "bool", "float", "mixed"]))
    one = {"int": small_ints, "bool": st.booleans(), "float": floats, "mixed": elements}[kind]
    return vec(draw(st.lists(one, min_size=size, max_size=size)))


def per_rank(v, size: int) -> list:
    return [scalar_at(v, k) for k in range(size)]


def outcome(fn, *args):
    """(value, None) or (None, Failure)."""
    try:
        return fn(*args), None
    except Failure as f:
        return None, f


def assert_failure(f: Failure, want: list, size: int):
    """The failure's mask marks exactly the reference's failing ranks, and the diagnostic of the first of them
    (the one the expansion reports) has that rank's code, at the operator's span."""
    failing = [isinstance(w, Fails) for w in want]
    assert f is not None, ("no failure", want)
    mask = np.ones(size, dtype=bool) if f.mask is True else np.asarray(f.mask, dtype=bool)
    assert mask.tolist() == failing
    first = failing.index(True)
    d = f.diagnostic(first)
    assert d.code == want[first].code and d.span == SPAN, (first, d)


# ---- binary operators ------------------------------------------------------------------------------

ARITH_OPS = sorted(set(BINARY) - {"**"})


@FAST
@given(st.data(), st.integers(1, 6), st.sampled_from(ARITH_OPS + ["and", "or"]))
def test_binary_matches_python_rank_by_rank(data, size, op):
    a = data.draw(operand(size), label="a")
    b = data.draw(operand(size), label="b")
    want = [py_binary(op, x, y) for x, y in zip(per_rank(a, size), per_rank(b, size))]
    got, failure = outcome(binary, node(op), a, b)
    if any(isinstance(w, Fails) for w in want):
        assert_failure(failure, want, size)
    else:
        assert failure is None, failure and failure.diagnostic(0).message
        check(got, want)


@pytest.mark.parametrize("op", ["/", "//", "%"])
def test_int_vector_divided_with_an_integer_beyond_int64(op):
    big = 1 << 63
    check(binary(node(op), vec([0, 3]), big), [py_binary(op, 0, big), py_binary(op, 3, big)])
    check(binary(node(op), big, vec([1, 3])), [py_binary(op, big, 1), py_binary(op, big, 3)])


@pytest.mark.parametrize("op", ["//", "%"])
@pytest.mark.parametrize("shift", [0, 1, 12, 31, 32, 61])
def test_an_int64_vector_by_a_power_of_two_matches_python(op, shift):
    """The mask and shift `%` and `//` take for a power of two are Python's floor remainder and division."""
    lo, hi = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
    rng = np.random.default_rng(shift)
    values = [lo, lo + 1, -(1 << shift) - 1, -(1 << shift), -1, 0, 1, (1 << shift) - 1, 1 << shift, hi - 1, hi]
    values += rng.integers(lo, hi, 40, endpoint=True).tolist() + rng.integers(-5000, 5000, 40).tolist()
    got = binary(node(op), np.array(values, dtype=np.int64), 1 << shift)  # int64 itself, as `vec` would not keep it
    assert got.dtype == np.int64
    check(got, [py_binary(op, x, 1 << shift) for x in values])


powers_base = st.one_of(st.integers(-12, 12), st.booleans(), st.floats(-20, 20, allow_nan=False))
powers_exp = st.one_of(st.integers(-4, 8), st.booleans(), st.sampled_from([0.5, -0.5, 2.0, 1.5]))


@FAST
@given(st.data(), st.integers(1, 6))
def test_power_matches_python_rank_by_rank(data, size):
    a = data.draw(operand(size, powers_base), label="a")
    b = data.draw(operand(size, powers_exp), label="b")
    if is_vec(a) and a.dtype != object:  # `operand`'s homogeneous vectors use the wide strategies: narrow them
        a = vec([max(-12, min(12, x)) if type(x) is int else x for x in a.tolist()])
    if is_vec(b) and b.dtype != object:
        b = vec([max(-4, min(8, x)) if type(x) is int else (x if type(x) is bool else 0.5) for x in b.tolist()])
    want = [py_binary("**", x, y) for x, y in zip(per_rank(a, size), per_rank(b, size))]
    got, failure = outcome(binary, node("**"), a, b)
    if any(isinstance(w, Fails) for w in want):
        assert_failure(failure, want, size)
    else:
        assert failure is None
        check(got, want)


@pytest.mark.parametrize("a, b, op, want", [
    (7, 2, "/", 3.5), (6, 2, "/", 3), (-1, 4, "%", 3), (True, True, "+", 2), (-7, 2, "//", -4),
    (1, 2.0, "<", True), (2, -1, "**", 0.5), (True, 2, "/", 0.5), (-3, 3, "/", -1),
])
def test_documented_examples_scalar_and_vector(a, b, op, want):
    check(binary(node(op), a, b), [want])
    check(binary(node(op), vec([a, a]), b), [want, want])
    check(binary(node(op), a, vec([b, b])), [want, want])


def test_division_exact_on_some_ranks_only_mixes_ints_and_floats():
    got = binary(node("/"), vec([6, 7, 8]), 2)
    assert [type(x) for x in got] == [int, float, int] and list(got) == [3, 3.5, 4]


@pytest.mark.parametrize("values, op, other", [
    ([(1 << 62) - 1, 5], "+", 1), ([(1 << 61), 3], "*", 4), ([-(1 << 62) + 1, 0], "-", 1),
    ([1 << 62, 2], "+", 0), ([(1 << 62) + 7, 1], "//", 2), ([1 << 53 | 1, 2], "==", float(1 << 53)),
    ([0, 0], "*", 1 << 63),  # a zero times an operand past int64 (hypothesis found it: NumPy cannot convert it)
])
def test_big_integers_fall_back_to_exact_python_objects(values, op, other):
    got = binary(node(op), vec(values), other)
    want = [py_binary(op, x, other) for x in values]
    check(got, want)
    if any(isinstance(w, int) and not isinstance(w, bool) and abs(w) >= 1 << 62 for w in want):
        assert got.dtype == object


def test_int_meeting_a_float_beyond_2_53_compares_exactly():
    # float(2**53 + 1) == 2**53: NumPy would say the int equals the float; Python does not
    got = binary(node("=="), vec([(1 << 53) + 1, 3]), float(1 << 53))
    assert got.tolist() == [False, False]


# ---- failures -------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["/", "//", "%"])
@pytest.mark.parametrize("divisor", [vec([1, 0, 2, 0]), vec([1.5, 0.0, -0.0, 2.0]), vec([True, False, True, False])])
def test_division_by_zero_marks_exactly_the_failing_ranks(op, divisor):
    with pytest.raises(Failure) as e:
        binary(node(op), vec([4, 5, 6, 7]), divisor)
    assert np.asarray(e.value.mask).tolist() == [d == 0 for d in divisor.tolist()]
    d = e.value.diagnostic(1)
    assert (d.code, d.span, d.label) == ("N122", SPAN, "the right-hand side is 0 here")
    assert f"`{op}`" in d.message


def test_division_by_zero_of_big_integers_marks_its_rank():
    with pytest.raises(Failure) as e:
        binary(node("//"), vec([1 << 70, 3, 5]), vec([2, 0, 1]))
    assert np.asarray(e.value.mask).tolist() == [False, True, False]
    assert e.value.diagnostic(1).code == "N122"


def test_uniform_division_by_zero_fails_every_rank():
    with pytest.raises(Failure) as e:
        binary(node("%"), 3, 0)
    assert e.value.mask is True and e.value.diagnostic(0).code == "N122" and e.value.diagnostic(0).span == SPAN


def test_a_power_too_large_fails_its_rank_with_n121():
    with pytest.raises(Failure) as e:
        binary(node("**"), vec([2, 10, 3]), vec([3, 5000, 2]))
    assert np.asarray(e.value.mask).tolist() == [False, True, False]
    d = e.value.diagnostic(1)
    assert d.code == "N121" and "4096 bits" in d.label and d.span == SPAN


def test_a_complex_power_fails_with_n121():
    with pytest.raises(Failure) as e:
        binary(node("**"), vec([4, -8]), 0.5)
    assert np.asarray(e.value.mask).tolist() == [False, True] and e.value.diagnostic(1).code == "N121"


# ---- unary operators and calls ---------------------------------------------------------------------

@FAST
@given(st.data(), st.integers(1, 6), st.sampled_from(["-", "not"]))
def test_unary_matches_python(data, size, op):
    v = data.draw(operand(size), label="v")
    fn = operator.neg if op == "-" else operator.not_
    want = [fn(x) for x in per_rank(v, size)]
    check(unary(n.Unary(span=SPAN, op=op, operand=LIT), v), want)


def test_unary_plus_of_a_bool_is_an_int():
    plus = n.Unary(span=SPAN, op="+", operand=LIT)
    check(unary(plus, True), [1])
    check(unary(plus, vec([True, False])), [1, 0])


@FAST
@given(st.data(), st.integers(1, 6), st.sampled_from(["min", "max", "abs"]), st.integers(2, 3))
def test_min_max_abs_match_python(data, size, fname, arity):
    count = 1 if fname == "abs" else arity
    finite = st.one_of(small_ints, st.booleans(), st.floats(-1e6, 1e6, allow_nan=False), big_ints)
    args = [data.draw(operand(size, finite), label=f"arg{j}") for j in range(count)]
    fn = abs if fname == "abs" else {"min": min, "max": max}[fname]
    want = [fn(*[scalar_at(a, k) for a in args]) for k in range(size)]
    check(call(fname, args), want)


@pytest.mark.parametrize("fname", ["min", "max"])
def test_min_max_of_an_int_vector_and_an_integer_beyond_int64(fname):
    big = 1 << 63
    fn = {"min": min, "max": max}[fname]
    check(call(fname, [vec([0, 3]), big]), [fn(0, big), fn(3, big)])


# ---- as_int -----------------------------------------------------------------------------------------

ints_floats_bools = st.one_of(small_ints, st.booleans(), st.sampled_from([2.0, -3.0, 2.5, -0.5, 1e20, 7.25]), big_ints)


@FAST
@given(st.lists(ints_floats_bools, min_size=1, max_size=6))
@example([True, 2.5, 3])
@example([1, 2.0, 3.5])
def test_as_int_refuses_bools_and_fractions_rank_by_rank(values):
    v = vec(values)
    bad = [isinstance(x, bool) or (isinstance(x, float) and not x.is_integer()) for x in values]
    try:
        got = as_int(v, LIT, "a peer rank")
    except Failure as f:
        assert any(bad)
        assert np.asarray(f.mask, dtype=bool).tolist() == bad
        d = f.diagnostic(bad.index(True))  # the first failing rank's, which the expansion reports
        assert d.code == "N121" and d.span == SPAN and d.message.startswith("a peer rank must be an integer")
        return
    assert not any(bad)
    check(got, [int(x) for x in values])


def test_as_int_messages_name_each_ranks_own_value_for_typed_arrays():
    with pytest.raises(Failure) as e:
        as_int(vec([1.0, 2.5, 3.0, 4.75]), LIT, "an index")
    assert np.asarray(e.value.mask).tolist() == [False, True, False, True]
    assert "2.5" in e.value.diagnostic(1).message and "4.75" in e.value.diagnostic(3).message
    assert e.value.diagnostic(1).help == "use `//` for integer division"
    with pytest.raises(Failure) as e:
        as_int(vec([True, False]), LIT, "a tag")
    assert e.value.diagnostic(1).message == "a tag must be an integer, not a condition"


@pytest.mark.parametrize("value, message", [(True, "not a condition"), (2.5, "but it is 2.5")])
def test_as_int_refuses_a_uniform_bool_or_fraction(value, message):
    with pytest.raises(Failure) as e:
        as_int(value, LIT, "a root rank")
    assert e.value.mask is True and e.value.diagnostic(0).code == "N121" and message in e.value.diagnostic(0).message


def test_as_int_accepts_integral_floats_as_ints():
    assert as_int(4.0, LIT, "x") == 4 and type(as_int(4.0, LIT, "x")) is int
    got = as_int(vec([1.0, 2.0, 3e20]), LIT, "x")
    check(got, [1, 2, int(3e20)])


# ---- log2 ------------------------------------------------------------------------------------------------

LOG2 = n.Call(span=SPAN, func=n.Name(span=SPAN, id="log2"), args=(LIT,))


def py_log2(x):
    """The exact exponent of a positive power of two; anything else (a bool, a fraction, 6, 0, -4) is N121."""
    if isinstance(x, bool) or isinstance(x, float) and not x.is_integer():
        return Fails("N121")
    x = int(x)
    return x.bit_length() - 1 if x > 0 and not x & (x - 1) else Fails("N121")


@FAST
@given(st.data(), st.integers(1, 6))
def test_log2_matches_python_rank_by_rank(data, size):
    powers = st.one_of(st.integers(0, 70).map(lambda k: 1 << k), small_ints, st.sampled_from([4.0, 2.5, True]))
    v = data.draw(operand(size, powers), label="v")
    want = [py_log2(x) for x in per_rank(v, size)]
    got, failure = outcome(log2, LOG2, v)
    if any(isinstance(w, Fails) for w in want):
        assert failure is not None
        assert failure.diagnostic(0).code == "N121"
    else:
        assert failure is None, failure and failure.diagnostic(0).message
        check(got, want)


def test_log2_names_the_value():
    _, failure = outcome(log2, LOG2, vec([4, 6]))
    assert failure.mask.tolist() == [False, True]
    d = failure.diagnostic(1)
    assert "its argument is 6" in d.message and d.label == "6 is not a power of two"
