"""`[tool.commdsl]` in `pyproject.toml`, or a `commdsl.toml`: the flags a project always passes, as ruff's
settings. The nearest directory (from where commdsl runs, upwards) with `commdsl.toml`, or a
`pyproject.toml` that has a `[tool.commdsl]` table, holds them; `--config FILE` names one, `--isolated`
ignores them. A flag on the command line wins over its `COMMDSL_<FLAG>` variable, which wins over the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from commdsl.diagnostics.render import FORMATS
from commdsl.limits import MAX_TIMEOUT_S
from commdsl.resolve import MAX_WORLD
from commdsl.rules.settings import InvalidSettings
from commdsl.source import SourceFile
from commdsl.validation import FORBID_EXTRA, after, bounded

FILES = ("commdsl.toml", "pyproject.toml")
"""Looked for in this order in each directory; a pyproject.toml counts only with a [tool.commdsl] table."""


Code = Annotated[str, after(lambda code: code.strip().upper())]
"""A code or prefix, as `--select` takes it (any case)."""


def _key(name: str) -> str:
    """A field's key in the file: spelt as its flag (`max-world` for `--max-world`)."""
    return name.replace("_", "-")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The keys, spelt as the flags. Validated (pydantic, `commdsl.validation`) only when read from a file:
    without one, the defaults cost a lint nothing."""

    __pydantic_config__ = {**FORBID_EXTRA, "alias_generator": _key}

    select: list[Code] = field(default_factory=list)
    ignore: list[Code] = field(default_factory=list)
    world: list[Annotated[int, bounded(ge=1, le=MAX_WORLD)]] = field(default_factory=list)
    backend: list[Literal["gloo", "nccl"]] = field(default_factory=list)
    max_world: Annotated[int, bounded(ge=1, le=MAX_WORLD)] | None = None  # the bounds of the flags
    max_time: Annotated[float, bounded(gt=0, le=MAX_TIMEOUT_S)] | None = None
    strict: bool = False
    exclude: list[str] = field(default_factory=list)
    output_format: Literal[FORMATS] | None = None  # type: ignore[valid-type]


def defaults() -> Settings:
    """The settings when no file gives any."""
    return Settings()


def find(start: Path) -> Path | None:
    """The settings file that applies in `start`: the nearest one up the directory tree."""
    for directory in [start, *start.parents]:
        for name in FILES:
            path = directory / name
            if path.is_file() and (name != "pyproject.toml" or _has_table(path)):
                return path
    return None


def _has_table(pyproject: Path) -> bool:
    try:
        return "[tool.commdsl" in pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def load(path: Path) -> tuple[Settings, SourceFile]:
    """The settings in `path` (FileError when it cannot be read, CommdslError with N137 when they are wrong)."""
    from commdsl.tomlfile import parse  # here: TOML and its validation only when there is a file

    source = SourceFile.read(path)
    table = ("tool", "commdsl") if path.name == "pyproject.toml" else ()
    return parse(source, Settings, InvalidSettings, table), source
