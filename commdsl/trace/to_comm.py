"""Recorded calls of every rank → a `.comm` program, and for each of its lines the script line it stands for.

Why a program and not a `Schedule` built directly: a `Schedule`'s records hold the `.comm` AST node
they came from, and the rules read those nodes (the words, the views as written, the statement text
they quote). Building AST nodes without text would duplicate `syntax/transform.py` and leave the rules
quoting nothing. Writing the program instead costs one parse, gives `--emit comm` for free, and the
checker runs on exactly what `commdsl lint` would run on. Each emitted line remembers its call site
(`LineInfo`), so `trace.check` can move every span of a diagnostic (the primary one and the other
party's labels) back onto the script.

What is written:

* one tensor per distinct buffer of a rank (same storage and dtype), 1-d and as long as its furthest
  use, each use a view `b3[off:off + n]` of it (slices of one tensor are views of one buffer); object
  collectives use `obj` buffers of int64;
* one `group gK = [...]` per distinct set of global ranks a call used;
* ranks whose calls read alike are one `on` block: first ranks whose calls are identical, then ranks
  whose calls are identical once a peer is written relative to the rank (`(rank + 1) % world`);
* every element count is written times `param n = 1`, so `commdsl bench` can sweep message sizes;
* repeated runs of calls (same statements, same call sites) fold into `for` loops;
* a request handle is named by the lowest slot free when it was posted (`h0 = isend ...`, `wait h0`),
  so a post-and-wait loop folds; a batch is a `batch:` block, bound to a handle (`h0 = batch:`) when the
  script waited its works only after other calls;
* a receive from any source (`src=None`) is `recv ... from any`, so the checker's message-race rule
  (P211) sees the senders that compete for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from commdsl.trace.events import Buffer, Call, RankTrace, Read, Site

MAX_PERIOD = 64  # the longest run of calls a loop body is looked for in


@dataclass
class LineInfo:
    """What one line of the emitted program stands for."""

    site: Site
    after: dict[int, Read] = field(default_factory=dict)  # rank → the read of received data before it
    origin: str = ""


@dataclass
class Emitted:
    text: str
    lines: dict[int, LineInfo]  # 1-based line of `text` → its call site
    world: int
    backend: str = "gloo"  # what its `backend` line says: the script's, else Gloo


@dataclass
class _Leaf:
    key: tuple  # (text lines, site): what must be equal for two calls to fold
    site: Site
    origin: str
    after: dict[int, Read]


@dataclass
class _Loop:
    count: int
    body: list

    @property
    def key(self) -> tuple:
        return ("loop", self.count, tuple(n.key for n in self.body))


def _merge(a, b) -> None:
    """Fold node b's occurrences into a (same key)."""
    if isinstance(a, _Leaf):
        for r, read in b.after.items():
            a.after.setdefault(r, read)
    else:
        for x, y in zip(a.body, b.body):
            _merge(x, y)


def fold(seq: list) -> list:
    """Greedy loop folding: at each position the repetition covering the most calls becomes a `for`."""
    ids: dict[tuple, int] = {}
    keys = [ids.setdefault(n.key, len(ids)) for n in seq]
    out: list = []
    i, n = 0, len(seq)
    while i < n:
        best_cover, best_p = 1, 1
        for p in range(1, min(MAX_PERIOD, (n - i) // 2) + 1):
            k = 1
            while i + (k + 1) * p <= n and keys[i + k * p : i + (k + 1) * p] == keys[i : i + p]:
                k += 1
            if k >= 2 and k * p > best_cover:
                best_cover, best_p = k * p, p
        if best_cover > 1:
            p, k = best_p, best_cover // best_p
            body = seq[i : i + p]
            for c in range(1, k):
                for j in range(p):
                    _merge(body[j], seq[i + c * p + j])
            out.append(_Loop(k, fold(body)))
            i += best_cover
        else:
            out.append(seq[i])
            i += 1
    if len(out) < len(seq):  # loops side by side may now repeat as a whole
        return fold(out)
    return out


# ---- per-rank statements ------------------------------------------------------------------------------


class _Names:
    """Tensor names and sizes shared by every rank; group names.

    A tensor is a key (the script's name for the buffer, its slot, its dtype): the first pass over every
    rank collects the keys and their extents, `settle` names them (the script's own name where one key
    has it: `grad`; numbered where several do: `x_0`, `x_1`; `b0`, `b1`, ... for buffers the script did
    not name itself, such as DDP's buckets), and the second pass writes the texts with those names."""

    def __init__(self):
        self.keys: dict[tuple, tuple[str, int, Site]] = {}  # key → (dtype, extent, first site)
        self.final: dict[tuple, str] = {}
        self.groups: dict[tuple[int, ...], tuple[str, Site]] = {}

    def key(self, b: Buffer, site: Site) -> tuple:
        base = _SYNTHETIC.get(b.id, "tmp") if b.id < 0 else _base(b.label)
        key = (base, b.id, b.dtype)
        dtype, extent, first = self.keys.get(key, (b.dtype, 0, site))
        self.keys[key] = (dtype, max(extent, b.offset + b.numel), first)
        return key

    def settle(self) -> None:
        """Final names for every key (after the first pass)."""
        by_base: dict[str, list[tuple]] = {}
        for key in self.keys:
            by_base.setdefault(key[0], []).append(key)
        taken: set[str] = set()
        for base, keys in by_base.items():
            for k, key in enumerate(keys):
                if key[1] < 0:
                    name = f"{base}_{_short(key[2])}"
                elif base and len(keys) == 1 and not _reserved(base):
                    name = base
                else:
                    name = f"{base or 'b'}{'_' if base else ''}{k}"
                while name in taken or (name != base and _reserved(name) and base):
                    name += "_"
                taken.add(name)
                self.final[key] = name

    @property
    def tensors(self) -> dict[str, tuple[str, int, Site]]:
        return {self.final[key]: value for key, value in self.keys.items()}

    def group(self, ranks: tuple[int, ...] | None, site: Site) -> str:
        if ranks is None:
            return ""
        if ranks not in self.groups:
            self.groups[ranks] = (f"g{len(self.groups)}", site)
        return f" in {self.groups[ranks][0]}"


_KEYWORDS = set(
    "program world backend param tensor group split by mesh new_group let for in on else batch send recv isend irecv "
    "to from tag broadcast all_reduce reduce all_gather gather scatter reduce_scatter all_to_all into op splits "
    "barrier wait all expect print and or not true false rank i n min max abs rand randn".split()
)
_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*(\[.*)?", re.S)


def _base(label: str) -> str:
    """The script's name for a buffer from the expression it passed: `grad` from `grad`, `buf` from
    `buf[0:8]`, `weight` from `self.weight`; "" for anything else (`torch.ones(4)`, `x + 1`)."""
    m = _LABEL.fullmatch(label.strip())
    return m.group(1).rsplit(".", 1)[-1].strip() if m else ""


def _reserved(name: str) -> bool:
    """Names the program uses itself: keywords, built-ins, `n`, and the g/h/rep/b numbered names."""
    return name in _KEYWORDS or re.fullmatch(r"(g|h|rep|b)\d+", name) is not None


_SYNTHETIC = {-1: "obj", -2: "objs", -3: "fout", -4: "unused", -5: "a2a_in", -6: "a2a_out", -8: "read"}
"""Buffers the script never named: an object collective's, a functional collective's fresh output, a
non-root's absent gather/scatter list, the flat buffers of a list all_to_all, what a read of a buffer in
flight is read into."""


def _n(numel: int) -> str:
    """A recorded element count, scaled by the program's `n` (1 as recorded)."""
    return "0" if numel == 0 else "n" if numel == 1 else f"{numel} * n"


def _short(dtype: str) -> str:
    return {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64"}.get(dtype, dtype)


class _Rank:
    """One rank's calls as statement texts, absolute and with peers relative to the rank."""

    def __init__(self, trace: RankTrace, names: _Names):
        self.rank, self.world, self.names = trace.rank, trace.world, names
        self.slots: dict[int, int] = {}  # request → slot
        self.abs: list[tuple[str, ...]] = []
        self.rel: list[tuple[str, ...]] = []
        self.sites: list[Site] = []
        self.origins: list[str] = []
        self.after: list[Read | None] = []
        read: Read | None = None
        for e in trace.events:
            if isinstance(e, Read):
                read = read or e
                continue
            lines = self._lines(e, relative=False)
            if lines is None:
                continue
            self.abs.append(lines)
            self.rel.append(self._lines(e, relative=True, count_slots=False) or lines)
            self.sites.append(e.site)
            self.origins.append(e.origin)
            self.after.append(read)

    def view(self, b: Buffer, site: Site, role: str = "") -> str:
        return _Deferred(self, b, site, role)  # type: ignore[return-value]

    def peer(self, p: int | None, relative: bool) -> str:
        if p is None:
            return "any"
        if not relative or not 0 <= p < self.world:  # a rank outside the world stays itself (P208), not wrapped
            return str(p)
        d = (p - self.rank) % self.world
        if d == 0:
            return "rank"
        if d > self.world // 2:
            return f"(rank - {self.world - d}) % world"
        return f"(rank + {d}) % world"

    def _slot(self, req: int) -> str:
        used = set(self.slots.values())
        slot = next(s for s in range(len(used) + 1) if s not in used)
        self.slots[req] = slot
        return f"h{slot} = "

    def _handle(self, c: Call, count_slots: bool) -> str:
        """`hN = ` for an async call (a batch whose works the script waits later included), else nothing."""
        if c.req is None:
            return ""
        return self._slot(c.req) if count_slots else f"h{self.slots.get(c.req, 0)} = "

    def _lines(self, c: Call, relative: bool, count_slots: bool = True) -> tuple[str, ...] | None:
        names = self.names
        g = names.group(c.group, c.site)
        tag = f" tag {c.tag}" if c.tag else ""
        if c.op == "wait":
            held = [self.slots.get(q) for q in c.reqs]
            if count_slots:
                for q in c.reqs:
                    self.slots.pop(q, None)
            held = [h for h in held if h is not None]
            if not held:
                return None
            return ("wait " + ", ".join(f"h{h}" for h in held),)
        if c.op == "batch":
            body = []
            for op in c.ops:
                word = "send" if op.op == "isend" else "recv"
                prep = "to" if word == "send" else "from"
                t = f" tag {op.tag}" if op.tag else ""
                gg = names.group(op.group, c.site)
                peer = self.peer(op.peer, relative)
                body.append(f"    {word} {self.view(op.inputs[0], c.site)} {prep} {peer}{t}{gg}")
            return (self._handle(c, count_slots) + "batch:", *body)
        if c.op in ("read", "write"):  # the script's own op on a buffer in flight: `x = x` writes, `read_f32 = x` reads
            b = c.inputs[0]
            into = self.view(b, c.site) if c.op == "write" else self.view(Buffer(-8, b.numel, b.dtype), c.site)
            return (f"{into} = {self.view(b, c.site)}",)
        handle = self._handle(c, count_slots)
        if c.op in ("send", "recv", "isend", "irecv"):
            prep = "to" if c.op in ("send", "isend") else "from"
            role = "obj" if c.origin == "object" else ""
            return (
                f"{handle}{c.op} {self.view(c.inputs[0], c.site, role)} {prep} {self.peer(c.peer, relative)}{tag}{g}",
            )
        return (handle + self._collective(c, g),)

    def _collective(self, c: Call, g: str) -> str:
        site = c.site
        op = f" op {c.redop}" if c.redop and c.redop != "sum" else ""
        role = "obj" if c.origin == "object" else ""
        k = c.op

        def many(bufs, r):
            return "[" + ", ".join(str(self.view(b, site, r)) for b in bufs) + "]"

        if k == "barrier":
            return f"barrier{g}"
        if k == "all_reduce":
            return f"all_reduce {self.view(c.inputs[0], site, role)}{op}{g}"
        if k == "broadcast":
            return f"broadcast {self.view(c.inputs[0], site, role)} from {c.root}{g}"
        if k == "reduce":
            return f"reduce {self.view(c.inputs[0], site, role)} to {c.root}{op}{g}"
        size = len(c.group) if c.group else self.world
        x = c.inputs[0] if c.inputs else Buffer(-7, 0, "float32")
        if k == "all_gather":
            out = many(c.outputs, role or "out") if c.outputs_listed else self.view(c.outputs[0], site, role or "out")
            return f"all_gather {self.view(x, site, role)} into {out}{g}"
        if k == "gather":
            if c.outputs:
                out = many(c.outputs, role) if c.outputs_listed else str(self.view(c.outputs[0], site, role or "out"))
            else:
                out = str(self.view(Buffer(-4, x.numel * size, x.dtype), site, "unused"))
            return f"gather {self.view(x, site, role)} into {out} to {c.root}{g}"
        if k == "scatter":
            y = c.outputs[0]
            if c.inputs:
                src = many(c.inputs, role) if c.inputs_listed else str(self.view(c.inputs[0], site, role or "in"))
            else:
                src = str(self.view(Buffer(-4, y.numel * size, y.dtype), site, "unused"))
            return f"scatter {src} into {self.view(y, site, role)} from {c.root}{g}"
        if k == "reduce_scatter":
            src = many(c.inputs, "") if c.inputs_listed else self.view(x, site)
            return f"reduce_scatter {src} into {self.view(c.outputs[0], site, 'out')}{op}{g}"
        if k == "all_to_all":
            if c.inputs_listed:  # one flat exchange, one split per tensor of the list
                n_in, n_out = sum(b.numel for b in c.inputs), sum(b.numel for b in c.outputs)
                xin = self.view(Buffer(-5, n_in, c.inputs[0].dtype), site, "a2a_in")
                xout = self.view(Buffer(-6, n_out, c.outputs[0].dtype), site, "a2a_out")
                ins, outs = ", ".join(_n(b.numel) for b in c.inputs), ", ".join(_n(b.numel) for b in c.outputs)
                splits = f" splits [{ins}], [{outs}]"
                return f"all_to_all {xin} into {xout}{splits}{g}"
            splits = ""
            if c.in_splits or c.out_splits:
                in_splits = c.in_splits or tuple([x.numel // size] * size)
                out_splits = c.out_splits or tuple([c.outputs[0].numel // size] * size)
                splits = f" splits [{', '.join(map(_n, in_splits))}], [{', '.join(map(_n, out_splits))}]"
            return f"all_to_all {self.view(x, site)} into {self.view(c.outputs[0], site, 'out')}{splits}{g}"
        raise ValueError(f"no .comm form for {k}")


class _Deferred:
    """A view whose text needs the settled names and extents (the first pass only collects them)."""

    def __init__(self, rank: _Rank, b: Buffer, site: Site, role: str):
        self.key = rank.names.key(b, site)
        self.numel, self.offset = b.numel, b.offset
        self.names = rank.names

    def __str__(self) -> str:
        name = self.names.final.get(self.key, "unsettled")
        full = self.names.keys[self.key][1]
        if self.offset == 0 and self.numel == full:
            return name
        return f"{name}[{_n(self.offset)}:{_n(self.offset + self.numel)}]"

    def __format__(self, spec: str) -> str:
        return str(self)


# the texts hold _Deferred views through f-strings: f-strings format them at once, so sizes must be final
# before the texts are made; `emit` therefore makes them twice (the first pass only sizes the tensors)


def _cohorts(ranks: list[_Rank]) -> list[tuple[list[int], bool]]:
    """Ranks grouped by identical calls, then groups merged where peers relative to the rank agree:
    (members, written with relative peers)."""
    by_abs: dict[tuple, list[int]] = {}
    for r in ranks:
        by_abs.setdefault((tuple(r.abs), tuple(r.sites)), []).append(r.rank)
    by_rel: dict[tuple, list[list[int]]] = {}
    for members in by_abs.values():
        r = ranks[members[0]]
        by_rel.setdefault((tuple(r.rel), tuple(r.sites)), []).append(members)
    out = []
    for groups in by_rel.values():
        if len(groups) == 1:
            out.append((groups[0], False))
        else:
            out.append((sorted(m for g in groups for m in g), True))
    return sorted(out, key=lambda x: x[0][0])


def _condition(members: list[int]) -> str:
    runs: list[tuple[int, int]] = []
    for m in members:
        if runs and runs[-1][1] == m - 1:
            runs[-1] = (runs[-1][0], m)
        else:
            runs.append((m, m))
    parts = [f"rank == {a}" if a == b else f"rank >= {a} and rank <= {b}" for a, b in runs]
    if len(parts) == 1:
        return parts[0]
    return " or ".join(f"({p})" if " and " in p else p for p in parts)


def emit(traces: list[RankTrace], name: str = "traced") -> Emitted:
    """The `.comm` program every rank's calls make, with its line map."""
    world = len(traces)
    names = _Names()
    for t in traces:  # first pass: every buffer's longest use, every group
        _Rank(t, names)
    names.settle()
    ranks = [_Rank(t, names) for t in traces]
    backend = "nccl" if any((t.backend or "").lower() == "nccl" for t in traces) else "gloo"
    out: list[str] = [
        f"program {name}",
        f"world {world}",
        f"backend {backend}",
        "param n = 1  # scales every message: `commdsl bench` sweeps it",
        "",
    ]
    lines: dict[int, LineInfo] = {}

    def add(text: str, info: LineInfo | None = None, comment: bool = True) -> None:
        if info is not None and comment:
            text = f"{text}  # {info.site.path.rsplit('/', 1)[-1]}:{info.site.line}"
        out.append(text)
        if info is not None:
            lines[len(out)] = info

    for tname, (dtype, numel, site) in names.tensors.items():
        add(f"tensor {tname}: {dtype}[{_n(numel)}]", LineInfo(site))
    for granks, (gname, site) in names.groups.items():
        add(f"group {gname} = [{', '.join(map(str, granks))}]", LineInfo(site))
    add("")
    cohorts = _cohorts(ranks)
    for members, relative in cohorts:
        first = ranks[members[0]]
        texts = first.rel if relative else first.abs
        if not texts:
            continue
        seq = []
        for j, text in enumerate(texts):
            after = {m: ranks[m].after[j] for m in members if ranks[m].after[j] is not None}
            seq.append(_Leaf((text, first.sites[j]), first.sites[j], first.origins[j], after))  # type: ignore[arg-type]
        indent = ""
        if len(cohorts) > 1 or len(members) < world:
            add(f"on {_condition(members)}:")
            indent = "    "
        _write(fold(seq), indent, add, [0])
    return Emitted("\n".join(out) + "\n", lines, world, backend)


def _write(nodes: list, indent: str, add, depth: list[int]) -> None:
    for node in nodes:
        if isinstance(node, _Loop):
            depth[0] += 1
            var = f"rep{depth[0]}"
            first = node.body[0]
            while isinstance(first, _Loop):
                first = first.body[0]
            add(f"{indent}for {var} in 0 .. {node.count - 1}:", LineInfo(first.site, dict(first.after), first.origin))
            _write(node.body, indent + "    ", add, depth)
            depth[0] -= 1
        else:
            text = node.key[0]
            for j, line in enumerate(text):
                add(indent + line, LineInfo(node.site, dict(node.after), node.origin), comment=j == 0)
