"""`[tool.commdsl]` in `pyproject.toml`, or a `commdsl.toml`: the flags a project always passes, as ruff's
settings. The nearest directory (from where commdsl runs, upwards) with `commdsl.toml`, or a
`pyproject.toml` that has a `[tool.commdsl]` table, holds them; `--config FILE` names one, `--isolated`
ignores them. A flag on the command line wins over its `COMMDSL_<FLAG>` variable, which wins over the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from commdsl.diagnostics.render import FORMATS
from commdsl.limits import MAX_TIMEOUT_S
from commdsl.resolve import MAX_WORLD
from commdsl.rules.settings import InvalidSettings
from commdsl.source import SourceFile
from commdsl.tomlfile import parse

FILES = ("commdsl.toml", "pyproject.toml")
"""Looked for in this order in each directory; a pyproject.toml counts only with a [tool.commdsl] table."""


Code = Annotated[str, AfterValidator(lambda code: code.strip().upper())]
"""A code or prefix, as `--select` takes it (any case)."""


class Settings(BaseModel):
    """The keys, spelt as the flags (`max-world` for `--max-world`). The validators are built only to read a
    file (`defer_build`): without one, `defaults()` costs a lint nothing."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=lambda name: name.replace("_", "-"), defer_build=True
    )

    select: list[Code] = Field(default_factory=list)
    ignore: list[Code] = Field(default_factory=list)
    world: list[Annotated[int, Field(ge=1, le=MAX_WORLD)]] = Field(default_factory=list)
    backend: list[Literal["gloo", "nccl"]] = Field(default_factory=list)
    max_world: int | None = Field(default=None, ge=1, le=MAX_WORLD)  # the bounds of the flags
    max_time: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S)
    strict: bool = False
    exclude: list[str] = Field(default_factory=list)
    output_format: Literal[FORMATS] | None = None  # type: ignore[valid-type]


def defaults() -> Settings:
    """The settings when no file gives any."""
    return Settings.model_construct()


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
    source = SourceFile.read(path)
    table = ("tool", "commdsl") if path.name == "pyproject.toml" else ()
    return parse(source, Settings, InvalidSettings, table), source
