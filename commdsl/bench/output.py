"""The table as nccl-tests prints it, and the same rows as JSON, CSV and a plot of busbw against size."""

from __future__ import annotations

import csv
import io
import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from commdsl.bench.results import Row, Summary
from commdsl.bench.sizes import format_size
from commdsl.files import write_atomic

_LEFT = f"#{'size':>11}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>5}"
_UNITS = f"#{'(B)':>11}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>5}"
_GROUP = f"  {'time':>9}  {'algbw':>7}  {'busbw':>7}  {'#wrong':>6}"
_GROUP_UNITS = f"  {'(us)':>9}  {'(GB/s)':>7}  {'(GB/s)':>7}  {'':>6}"


def table(rows: list[Row], summaries: list[Summary], variants: list[int]) -> list[str]:
    """nccl-tests' layout for `variants` side by side (a ratio column for a comparison), then the averages."""
    by_size = by_requested(rows, variants)
    ratio = compared(summaries, variants)
    return (
        header(summaries, variants)
        + [row_line(by_size[requested], variants, ratio) for requested in sorted(by_size)]
        + footer(summaries, variants)
    )


def compared(summaries: list[Summary], variants: list[int]) -> bool:
    """Whether `variants` are a variant and its reference (--compare), which get a busbw ratio column; side by
    side otherwise, they are one collective's out-of-place and in-place forms."""
    return len(variants) == 2 and summaries[variants[1]].baseline


def by_requested(rows: list[Row], variants: list[int]) -> dict[int, dict[int, Row]]:
    """requested size → variant → its row, for the rows of `variants`."""
    out: dict[int, dict[int, Row]] = {}
    for r in rows:
        if r.variant in variants:
            out.setdefault(r.requested, {})[r.variant] = r
    return out


def form(in_place: bool | None) -> str:
    return {True: "in-place", False: "out-of-place", None: ""}[in_place]


def header(summaries: list[Summary], variants: list[int]) -> list[str]:
    width = len(_GROUP)
    lines = []
    ratio = compared(summaries, variants)
    if len(variants) > 1:
        names = [summaries[v].label if ratio else form(summaries[v].in_place) for v in variants]
        heads = "".join(f"{name[: width - 2]:>{width}}" for name in names)
        lines.append(f"#{'':>{len(_LEFT) - 1}}{heads}")
    lines.append(_LEFT + _GROUP * len(variants) + (f"  {'ratio':>6}" if ratio else ""))
    lines.append(_UNITS + _GROUP_UNITS * len(variants) + (f"  {'busbw':>6}" if ratio else ""))
    return lines


def row_line(got: dict[int, Row], variants: list[int], ratio: bool) -> str:
    """One size: its rows of `variants` side by side (and with `ratio`, the first's busbw over the second's)."""
    first = got.get(variants[0]) or next(iter(got.values()))
    text = (
        f" {first.size:>11}  {first.count:>12}  {first.dtype:>8}  {first.redop or 'none':>6}  "
        f"{-1 if first.root is None else first.root:>5}"
    )
    for v in variants:
        r = got.get(v)
        if r is None:
            text += f"  {'':>9}  {'':>7}  {'':>7}  {'':>6}"
            continue
        wrong = "N/A" if r.wrong is None else str(r.wrong)
        text += f"  {_time(r.time_us):>9}  {r.algbw:>7.3f}  {r.busbw:>7.3f}  {wrong:>6}"
    if ratio:
        a, b = got.get(variants[0]), got.get(variants[1])
        text += f"  {a.busbw / b.busbw:>6.2f}" if a and b and b.busbw > 0 else f"  {'':>6}"
    return text


def footer(summaries: list[Summary], variants: list[int]) -> list[str]:
    lines = []
    for v in variants:
        s = summaries[v]
        lines.append(f"# Avg bus bandwidth    : {s.avg_busbw:.3f} GB/s" + (f"  {s.label}" if len(variants) > 1 else ""))
    if compared(summaries, variants) and summaries[variants[1]].avg_busbw > 0:
        lines.append(
            f"# Avg busbw ratio      : {summaries[variants[0]].avg_busbw / summaries[variants[1]].avg_busbw:.2f}"
            f"  ({summaries[variants[0]].label} / {summaries[variants[1]].label})"
        )
    return lines


def _time(us: float) -> str:
    return f"{us:.1f}" if us < 1e5 else f"{us:.0f}"


def as_dict(meta: dict, rows: list[Row], summaries: list[Summary]) -> dict:
    return {
        "version": 1,
        **meta,
        "variants": [
            {
                "label": s.label,
                "program": s.program,
                "collective": s.kind,
                "how": s.how,
                "busbw_factor": s.factor,
                "baseline": s.baseline,
                "avg_busbw_gbps": s.avg_busbw,
                "in_place": s.in_place,
            }
            for s in summaries
        ],
        "rows": [_row(r) for r in rows],
    }


class _Read(BaseModel):
    """What a reader of `as_dict`'s document relies on; anything else it holds passes through unread."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


Micros = Annotated[StrictFloat, Field(ge=0)]


class _Line(_Read):
    line: StrictInt
    us: Micros


class _MeasuredRow(_Read):
    variant: str | None = None
    size_bytes: Annotated[StrictInt, Field(ge=0)]
    time_us: Annotated[StrictFloat, Field(gt=0)]
    predicted: bool = False
    rank_time_us: list[Micros] | None = None
    rank_page_faults: list[Annotated[StrictFloat, Field(ge=0)] | None] | None = None
    rank_cpu_us: list[Micros | None] | None = None
    lines: list[_Line] | None = None
    rank_lines: list[list[_Line]] | None = None


class _Measured(_Read):
    world: StrictInt | None = None
    host_cores: Annotated[StrictInt, Field(ge=1)] | None = None
    backend: str | None = None
    predicted: bool = False
    rows: Annotated[list[_MeasuredRow], Field(min_length=1)]


def read_json(path: str) -> dict:
    """A `--json` document of `commdsl bench`, checked to hold what `as_dict` writes where a reader uses it
    (positive finite times, sizes in bytes, per-line times), as plain data. ValueError says what is wrong and
    where; OSError when it cannot be read. A document `commdsl predict --json` wrote (`"predicted": true`) is
    refused: its times are not measurements."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f, parse_constant=_no_constant)
        except json.JSONDecodeError as e:
            raise ValueError(f"not JSON: {e}") from None
    try:
        doc = _Measured.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        why = f"{where}: {first['msg']}" if where else "not a JSON object"
        raise ValueError(f"not a `commdsl bench --json` file: {why}") from None
    if doc.predicted or any(r.predicted for r in doc.rows):
        raise ValueError("written by `commdsl predict --json`: its times are predicted, not measured")
    return doc.model_dump()


def _no_constant(name: str) -> float:
    """JSON has no NaN or Infinity; Python's json module reads them unless told not to."""
    raise ValueError(f"`{name}` is not a JSON number")


def _row(r: Row) -> dict:
    return {
        "variant": r.label,
        "collective": r.kind,
        "size_bytes": r.size,
        "requested_bytes": r.requested,
        "count": r.count,
        "dtype": r.dtype,
        "redop": r.redop,
        "root": r.root,
        "param": r.param,
        "value": r.value,
        "time_us": r.time_us,
        "algbw_gbps": r.algbw,
        "busbw_gbps": r.busbw,
        "wrong": r.wrong,
        "min_us": r.spread.get("min_us"),
        "median_us": r.spread.get("median_us"),
        "max_us": r.spread.get("max_us"),
        "stdev_us": r.spread.get("stdev_us"),
        "rank_time_us": r.rank_us,
        "rank_page_faults": r.rank_faults,
        "rank_cpu_us": r.rank_cpu_us,
        "lines": r.lines,
        "rank_lines": r.rank_lines,
        "in_place": r.in_place,
    }


CSV_FIELDS = (
    "variant",
    "collective",
    "size_bytes",
    "requested_bytes",
    "count",
    "dtype",
    "redop",
    "root",
    "param",
    "value",
    "time_us",
    "min_us",
    "median_us",
    "max_us",
    "stdev_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "in_place",
)


def write_json(path: str, data: dict, inputs=()) -> None:
    """Atomically, never over one of `inputs` (`files.write_atomic`); raises FileError."""
    write_atomic(path, json.dumps(data, indent=1) + "\n", inputs=inputs)


def write_csv(path: str, rows: list[Row], inputs=()) -> None:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in _row(r).items()})
    write_atomic(path, buf.getvalue(), inputs=inputs)


def plot(path: str, rows: list[Row], summaries: list[Summary], title: str, inputs=()) -> None:
    """busbw against size on a log2 axis, one line per variant (matplotlib's Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    sizes = sorted({r.size for r in rows})
    for i, s in enumerate(summaries):
        mine = sorted((r for r in rows if r.variant == i), key=lambda r: r.size)
        if mine:
            ax.plot([r.size for r in mine], [r.busbw for r in mine], marker="o", markersize=3, label=s.label)
    ax.set_xscale("log", base=2)
    if sizes:
        ticks = sizes if len(sizes) <= 12 else sizes[:: (len(sizes) + 11) // 12]
        ax.set_xticks(ticks, [format_size(t).replace(" ", "") for t in ticks], rotation=45)
    ax.set_xlabel("size (bytes of the measured buffer)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=120, format=path.rsplit(".", 1)[-1].lower())
    plt.close(fig)
    write_atomic(path, buf.getvalue(), inputs=inputs)
