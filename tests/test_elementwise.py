"""`commdsl.elementwise`: what the checker says torch refuses is what torch refuses (no operand holds a 0,
so only a refusal can raise).

Every operator of an element expression, over every pair of operand categories (a bool, integer or float
tensor, or a Python scalar of each), is run in torch; `refusal` must name exactly the cases that raise,
and `promote` must give the category of the ones that compute."""

from __future__ import annotations

import itertools

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
