"""The element types a program may declare: every dtype Gloo and NCCL move."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    itemsize: int
    is_float: bool
    is_bool: bool = False
    numpy: str = ""  # numpy dtype the simulator computes in (bfloat16 is emulated in float32)

    @property
    def is_int(self) -> bool:
        return not self.is_float and not self.is_bool


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float16", 2, True, numpy="float16"),
        DType("bfloat16", 2, True, numpy="float32"),
        DType("float32", 4, True, numpy="float32"),
        DType("float64", 8, True, numpy="float64"),
        DType("int8", 1, False, numpy="int8"),
        DType("uint8", 1, False, numpy="uint8"),
        DType("int32", 4, False, numpy="int32"),
        DType("int64", 8, False, numpy="int64"),
        DType("bool", 1, False, True, numpy="bool"),
    )
}

REDUCE_OPS = ("sum", "product", "min", "max", "band", "bor", "bxor", "avg", "premul_sum")

# (rtol, atol) for comparing floats, as torch.testing.assert_close's defaults; integers compare exactly.
TOLERANCE = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}
