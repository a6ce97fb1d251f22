"""Pydantic validation of commdsl's own dataclasses (the AST, spans, diagnostics, settings), kept off the start-up.

These classes are plain frozen dataclasses: a lint never validates what its own parser built, and importing
pydantic alone takes about a fifth of the wall time of `commdsl lint` on a small program (docs/benchmarks.md,
lint start-up). Pydantic validates them against the same annotations whenever something asks: a settings
file (`tomlfile.parse`), the tests that check every node the parser builds, an API user with `validate`.
Constraints that only pydantic understands (a discriminator, a bound, an after-validator) are written as
`Deferred` metadata, built when pydantic builds the schema and never before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter

T = TypeVar("T")

FORBID_EXTRA = {"extra": "forbid"}
"""The pydantic config (`__pydantic_config__`) of every validated dataclass: an unknown key is a mistake."""


class Deferred:
    """`Annotated` metadata standing for a pydantic one (`Field(ge=1)`, `Discriminator("kind")`,
    `AfterValidator(f)`), made by `build` only when pydantic builds a schema for the annotated type."""

    def __init__(self, build: Callable[[], Any]):
        self.build = build

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler(Annotated[source, self.build()])


def tagged(field: str) -> Deferred:
    """A union of dataclasses told apart by their `field` (pydantic's discriminated union)."""

    def build():
        from pydantic import Discriminator

        return Discriminator(field)

    return Deferred(build)


def after(check: Callable[[Any], Any]) -> Deferred:
    """A check run on the value once its type is validated (pydantic's `AfterValidator`)."""

    def build():
        from pydantic import AfterValidator

        return AfterValidator(check)

    return Deferred(build)


def bounded(**bounds: Any) -> Deferred:
    """Numeric bounds, as `Field(ge=1, le=64)` takes them."""

    def build():
        from pydantic import Field

        return Field(**bounds)

    return Deferred(build)


_ADAPTERS: dict[Any, Any] = {}


def adapter(cls: type[T]) -> TypeAdapter[T]:
    """The pydantic validator of a class (a dataclass or a pydantic model), built once per process."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def validate(obj: T) -> T:
    """`obj` validated field by field against its dataclass's annotations (nested nodes included): a
    ValidationError names the first field whose value its annotation does not accept."""
    fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
    return adapter(type(obj)).validate_python(fields)
