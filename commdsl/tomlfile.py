"""Settings files in TOML, validated by pydantic, every mistake a diagnostic that points into the file.

`tomllib` reports where a file stops being TOML but not where a key is, so a key's span is found by
scanning the file's table headers and `key =` lines. Used by `[tool.commdsl]` / `commdsl.toml`
(`settings.py`) and by the topology files of `commdsl predict`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
import typing
from typing import Any, TypeVar

from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.rules import Rule
from commdsl.source import SourceFile, Span
from commdsl.validation import adapter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Model = TypeVar("Model")


def parse(source: SourceFile, model: type[Model], rule: type[Rule], table: tuple[str, ...] = ()) -> Model:
    """The `table` of the TOML text in `source` (the whole file when empty) as `model` (a pydantic model or
    a dataclass of `commdsl.validation`); CommdslError with one `rule` diagnostic per mistake otherwise."""
    from pydantic import ValidationError  # here: a lint without a settings file never validates

    try:
        data = tomllib.loads(source.text)
    except tomllib.TOMLDecodeError as e:
        raise CommdslError([_decode_error(source, e, rule)]) from None
    for name in table:
        data = data.get(name, {})
    try:
        return adapter(model).validate_python(data)
    except ValidationError as e:
        raise CommdslError([_validation_error(source, err, rule, model, table) for err in e.errors()]) from None


def line_span(source: SourceFile, line: int, column: int = 1) -> Span:
    """From (line, column) to the end of that line (at least one character where the line has one)."""
    starts = [0] + [i + 1 for i, c in enumerate(source.text) if c == "\n"]
    line = max(1, min(line, len(starts)))
    start = starts[line - 1] + max(column - 1, 0)
    end = starts[line] - 1 if line < len(starts) else len(source.text)
    start = min(start, max(end - 1, starts[line - 1]))
    return source.span(start, max(end, start + 1) if end > start else start)


def key_span(source: SourceFile, loc: tuple) -> Span | None:
    """Where the key at `loc` (("tool", "commdsl", "select"), ("link", 0, "dst")) is written: its `key = value`
    line, the header of the table it names (`[intra.sub]`), or its `key = ` inside an inline table of the key
    before it (`intra = { bogus = 3 }`); None when the key is not written."""
    names = [p for p in loc if isinstance(p, str)]
    if not names:
        return None
    key, want_table = names[-1], ".".join(names[:-1])
    want_index = next((p for p in loc if isinstance(p, int)), -1)
    table, index, seen, offset = "", -1, -1, 0
    for line in source.text.splitlines(keepends=True):
        stripped = line.strip()
        header = re.match(r"^\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?", stripped)
        if header:
            table = header.group(1)
            if stripped.startswith("[[") and table == want_table:
                seen += 1
            index = seen if stripped.startswith("[[") else -1
        else:
            m = re.match(r"^(\s*)(" + re.escape(key) + r"|\"" + re.escape(key) + r"\")\s*=", line)
            if m and table == want_table and (want_index < 0 or index == want_index):
                start = offset + len(m.group(1))
                return source.span(start, offset + len(line.rstrip("\r\n")))
        offset += len(line)
    own_table = table_span(source, ".".join(names)) if want_index < 0 else None
    if own_table is not None:  # a table of its own: its header
        return own_table
    outer = key_span(source, loc[:-1]) if len(names) > 1 else None
    if outer is not None:  # an inline table: the key inside its line
        text = source.text[outer.start : outer.end]
        m = re.search(r"[{,]\s*(" + re.escape(key) + r"|\"" + re.escape(key) + r"\")\s*=", text)
        if m:
            return source.span(outer.start + m.start(1), outer.start + m.end(1))
    return outer


def table_span(source: SourceFile, table: str, index: int = -1) -> Span | None:
    """The header line of `[table]`, or of the `index`-th `[[table]]`."""
    offset, seen = 0, -1
    for line in source.text.splitlines(keepends=True):
        m = re.match(r"^\s*\[(\[?)\s*([A-Za-z0-9_.-]+)\s*\]", line)
        if m and m.group(2) == table:
            seen += 1
            if index < 0 or seen == index:
                return source.span(offset, offset + len(line.rstrip("\r\n")))
        offset += len(line)
    return None


def _decode_error(source: SourceFile, e: Exception, rule: type[Rule]) -> Diagnostic:
    msg = str(e)
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    text = re.sub(r"\s*\(at line \d+, column \d+\)", "", msg) or "not TOML"
    span = line_span(source, int(m.group(1)), int(m.group(2))) if m else line_span(source, 1)
    return rule.diagnostic(f"{source.path}: not a TOML file: {text[0].lower() + text[1:]}", span=span, label="here")


def _validation_error(source: SourceFile, err, rule: type[Rule], model: type, table: tuple) -> Diagnostic:
    loc = tuple(err["loc"])
    where = ".".join(str(p + 1) if isinstance(p, int) else p for p in loc) or "(file)"
    full = table + loc
    if err["type"] == "missing":
        inside = ".".join(str(p) for p in full[:-1] if isinstance(p, str))
        index = next((p for p in loc if isinstance(p, int)), -1)
        return rule.diagnostic(
            f"{source.path}: `{where}` is required",
            span=(table_span(source, inside, index) if inside else None) or line_span(source, 1),
            label=f"no `{loc[-1]}` in {'[' + inside + ']' if inside else 'the file'}",
            help=f"add `{loc[-1]} = …`" + (f" under [{inside}]" if inside else ""),
        )
    span = key_span(source, full) or line_span(source, 1)
    if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's, a dataclass's
        known = _known(model, loc)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`? " if close else ""
        return rule.diagnostic(
            f"{source.path}: unknown key `{where}`",
            span=span,
            label="not a setting",
            help=f"{hint}the keys are {', '.join(f'`{k}`' for k in known)}",
        )
    msg = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]  # without "Value error, "
    dotted = ".".join(map(str, full))
    single = err["type"] in ("tuple_type", "list_type") and table_span(source, dotted) is not None
    return rule.diagnostic(
        f"{source.path}: `{where}`: {msg[0].lower() + msg[1:]}",
        span=span,
        label="here",
        help=f"each entry of a list of tables is its own `[[{dotted}]]`" if single else None,
    )


def _known(model: type, loc: tuple) -> list[str]:
    """The keys allowed where `loc` points: those of the model nested at its tables."""
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        annotation = _keys(model).get(part)
        inner = getattr(annotation, "__args__", (annotation,)) if annotation else ()
        nested = [a for a in inner if dataclasses.is_dataclass(a) or hasattr(a, "model_fields")]
        if not nested:
            break
        model = nested[0]
    return list(_keys(model))


def _keys(model: type) -> dict[str, Any]:
    """A model's keys as a file spells them (by alias), each with its type."""
    if dataclasses.is_dataclass(model):
        alias = getattr(model, "__pydantic_config__", {}).get("alias_generator") or (lambda name: name)
        hints = typing.get_type_hints(model)
        return {alias(f.name): hints[f.name] for f in dataclasses.fields(model)}
    return {f.alias or name: f.annotation for name, f in model.model_fields.items()}  # type: ignore[attr-defined]
