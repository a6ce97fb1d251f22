"""Every diagnostic code, one table sorted by code. A code is never reused; a retired one stays, marked.

Families (selectable by prefix, `--select P,D`): S syntax, N names/types/shapes, P point-to-point,
C collectives, D deadlock/buffering, R requests and local races, B backend support, L idiom lints.
The long explanations (`commdsl explain CODE`, docs/diagnostics.md) live in `commdsl/diagnostics/explain.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from commdsl.diagnostics.model import Severity


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    severity: Severity
    summary: str


_TABLE = [
    # syntax
    Code("S001", "unexpected-token", "error", "a token the grammar does not allow here"),
    Code("S002", "unexpected-character", "error", "a character that is not part of the language"),
    Code("S003", "inconsistent-dedent", "error", "a line's indentation matches no enclosing block"),
    Code("S004", "unexpected-end-of-file", "error", "the file ends in the middle of a statement"),
    Code("S005", "missing-colon", "error", "a block header (`for`, `on`, `else`, `batch`) without `:`"),
    Code("S006", "send-without-destination", "error", "`send`/`isend` without `to RANK`"),
    Code("S007", "recv-without-source", "error", "`recv`/`irecv` without `from RANK`"),
    # names, types, shapes
    Code("N101", "undefined-name", "error", "a name that is not declared"),
    Code("N102", "duplicate-declaration", "error", "a name declared twice, or a built-in redeclared"),
    Code("N103", "wrong-kind-of-name", "error", "a name used where a different kind is needed (a tensor as a rank, ...)"),
    Code("N104", "unknown-dtype", "error", "a dtype Gloo and NCCL do not move"),
    Code("N105", "bad-reduce-op", "error", "an unknown reduce op, or one on a collective that does not reduce"),
    Code("N106", "misplaced-declaration", "error", "a header or declaration inside a block or after statements"),
    Code("N107", "invalid-view", "error", "an expression that is not a view where a tensor view is needed"),
    Code("N108", "misused-handle", "error", "a handle bound to a blocking op or with an augmented assignment"),
    Code("N109", "invalid-expect", "error", "`expect` without a comparison"),
    Code("N110", "unknown-backend", "error", "a backend other than gloo or nccl"),
    Code("N111", "invalid-batch", "error", "a statement that cannot be part of a `batch` block"),
    Code("N112", "invalid-world", "error", "an empty `world` declaration, or a size below 1 or above 65536"),
    Code("N120", "view-out-of-bounds", "error", "a slice, index or chunk outside its tensor"),
    Code("N121", "not-an-integer", "error", "a non-integer value where a rank, size or index is needed"),
    Code("N122", "division-by-zero", "error", "a division or modulo by zero"),
    Code("N123", "shape-mismatch", "error", "element-expression operands whose shape differs from the target's"),
    Code("N124", "world-size-not-declared", "error", "a world size outside the program's `world` line"),
    Code("N125", "bad-param-value", "error", "`--set` of an unknown param or with a value that is not a number"),
    Code("N126", "mesh-does-not-tile-world", "error", "a mesh whose dimensions do not multiply to the world size"),
    Code("N127", "invalid-group", "error", "a group naming a rank outside the world or twice"),
    Code("N128", "invalid-tensor-size", "error", "a tensor with a negative shape or too many elements"),
    Code("N129", "handle-not-assigned", "error", "`wait` on a handle this rank never assigned"),
    Code("N130", "mixed-dtypes", "error", "one collective's buffers with different dtypes"),
    Code("N131", "buffer-does-not-fit", "error", "a collective's buffers sized wrongly for its group"),
    Code("N132", "tensors-exceed-memory", "error", "the tensors of all ranks need more memory than this machine has"),
    Code("N133", "expansion-too-large", "error", "a program that expands to more loop steps and ops than commdsl holds"),
]

CODES: dict[str, Code] = {c.code: c for c in _TABLE}
BY_NAME: dict[str, Code] = {c.name: c for c in _TABLE}


def register(*codes: Code) -> None:
    """Checker families add their codes here at import (one table, kept sorted)."""
    for c in codes:
        if c.code in CODES:
            raise ValueError(f"diagnostic code {c.code} registered twice")
        CODES[c.code] = c
        BY_NAME[c.name] = c
