"""Which `.comm` files a command works on, as ruff finds Python files: a file named on the command line is
taken as is; a directory is searched for `*.comm` files, skipping what `.gitignore` files ignore (each
applies below its own directory, a deeper one over a shallower, `!` patterns re-including), hidden
directories, the usual environment and build directories, and the `exclude` patterns of the settings.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathspec

SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "venv", "site-packages", "build", "dist", "_build"})
"""Directories never searched (besides hidden ones, such as `.git` and `.venv`), as ruff's default excludes."""


def comm_files(paths: Iterable[str], exclude: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(the files to work on, the directories in `paths` that held none), in the order the paths are given,
    a directory standing for its finds, sorted."""
    files: list[str] = []
    empty: list[str] = []
    excluded = None
    for path in paths:
        if not os.path.isdir(path):
            files.append(path)
            continue
        if excluded is None:
            import pathspec  # only a directory's search needs it: files alone start without it

            excluded = pathspec.GitIgnoreSpec.from_lines(list(exclude))
        found = sorted(_search(Path(path), excluded))
        if not found:
            empty.append(path)
        files += found
    return files, empty


def _search(top: Path, excluded: pathspec.GitIgnoreSpec) -> Iterable[str]:
    outer = _outer_gitignores(top)
    inner: list[tuple[Path, pathspec.GitIgnoreSpec]] = []  # those from `top` down to the directory walked
    for here, dirs, names in os.walk(top):
        base = Path(here)
        while inner and not base.is_relative_to(inner[-1][0]):  # left the directory of the deepest one
            inner.pop()
        spec = _gitignore(base)
        if spec is not None:
            inner.append((base, spec))
        ignores = outer + inner
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and not _ignored(base / d, True, ignores, excluded, top)
        )
        for name in names:
            if name.endswith(".comm") and not _ignored(base / name, False, ignores, excluded, top):
                yield str(base / name)


def _gitignore(directory: Path) -> pathspec.GitIgnoreSpec | None:
    import pathspec

    f = directory / ".gitignore"
    if not f.is_file():
        return None
    return pathspec.GitIgnoreSpec.from_lines(f.read_text(encoding="utf-8", errors="replace").splitlines())


def _outer_gitignores(top: Path) -> list[tuple[Path, pathspec.GitIgnoreSpec]]:
    """The `.gitignore` files of the directories above `top` up to its repository's root (the nearest one
    holding `.git`), outermost first: they apply inside `top` too. None outside a repository."""
    top = top.resolve()
    if (top / ".git").exists():
        return []
    found = []
    for directory in top.parents:
        spec = _gitignore(directory)
        if spec is not None:
            found.append((directory, spec))
        if (directory / ".git").exists():
            return found[::-1]
    return []


def _ignored(path: Path, is_dir: bool, ignores, excluded: pathspec.GitIgnoreSpec, top: Path) -> bool:
    """Whether `path` is left out: by the settings' `exclude` (relative to the searched directory), else by
    the deepest `.gitignore` with a pattern that matches it."""
    suffix = "/" if is_dir else ""
    if excluded.match_file(os.path.relpath(path, top) + suffix):
        return True
    resolved = path.resolve()
    for base, spec in reversed(ignores):
        result = spec.check_file(os.path.relpath(resolved, base.resolve()) + suffix)
        if result.include is not None:
            return bool(result.include)
    return False
