"""Program → one rank-parametric torch.distributed script (`commdsl compile --emit python`).

The script is the program as a user would write it in plain torch: `rank` and `world` come from
`torch.distributed` at run time and are checked against the program's `world` line, params are
command-line flags (or environment variables), `for` stays a Python loop, `on` an `if`, groups are
`dist.new_group` (splits `dist.new_subgroups_by_enumeration`, meshes `init_device_mesh`) made in the
declared order on every rank before the body (a `g = new_group [...]` step where the program has it),
views are torch views (`x[lo:hi]`, `x[k]`, `x.tensor_split(parts)[k]`), and
every op is the torch call `commdsl run` makes for it (commdsl/runtime/ops.py). So the text is the same
at every world size: it translates the resolved AST, not an expansion.

Meaning is kept exactly where Python and the language differ. Static `/` is the language's (an integer
when it divides, `div`); `%`, `//`, `**`, comparisons, `min`/`max`/`abs` are Python's already. An element
expression is split as the expansion splits it: a part that reads no tensor and no `i` is a per-rank number
(static rules), the rest torch arithmetic under float64 as default dtype, as the runtime computes. A `let`
that shadows an outer one gets a name of its own, since Python has no block scope. Compute follows the
runtime: in place (`add_`) only for a view of another tensor of the same dtype, else computed and copied.

Nothing from the input reaches the script as code. A name becomes a Python name only when it is not a
keyword, a builtin or one of the script's own names, else it gets trailing underscores (`_python_name`);
a file name, comment or print label is text through `_text`/`_string`; numbers go through `_number`.
tests/test_compile.py parses generated scripts with `ast` and checks that only these statements exist.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
import shlex
from contextlib import contextmanager
from dataclasses import dataclass, field

from commdsl.collectives import KINDS
from commdsl.dtypes import TOLERANCE
from commdsl.elementwise import COMPARISONS, IN_PLACE
from commdsl.p2p import form
from commdsl.resolve import Program, step_group_names
from commdsl.syntax import nodes as n

INDENT = "    "

# names the script defines or uses itself; a user's name equal to one of these is renamed
SCRIPT_NAMES = frozenset(
    {
        "torch", "dist", "np", "os", "re", "sys", "argparse", "init_device_mesh", "BACKEND", "CHECKED",
        "TOLERANCE", "main", "arguments", "number", "div", "power", "index_of", "minimum", "maximum",
        "random_values", "split", "log2", "entry", "expect", "fmt", "say", "post", "wait", "pending", "args", "params",
        "rank", "world", "printed", "failures", "text", "verdict", "work", "p2p_ops", "reduce_scatter_single",
        "line", "_",
    }
)  # fmt: skip

# precedence of Python's operators, lowest first: an operand binding less tightly than its place gets parentheses
_PREC = {
    "or": 1, "and": 2, "not": 3, "cmp": 4, "|": 5, "^": 6, "&": 7, "<<": 8, ">>": 8,
    "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10, "unary": 11, "**": 12,
}  # fmt: skip
_ATOM = 13
_QUOTES = "\"'\\"  # a comment keeps them as they are
_REDUCE_OPS = ("sum", "product", "min", "max", "band", "bor", "bxor", "avg")

_HELPERS = {
    "number": '''
def arguments():
    """The params given: `--set NAME=VALUE` (repeatable), else the environment variable PARAM_NAME."""
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help=SET_HELP)
    texts = {name: os.environ[f"PARAM_{name}"] for name in PARAMS if f"PARAM_{name}" in os.environ}
    texts.update(item.partition("=")[::2] for item in cli.parse_args().set)
    for name, text in texts.items():
        if name not in PARAMS or not re.fullmatch(r"[+-]?[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false", text):
            cli.error(f"{name}={text}: the params are {', '.join(PARAMS)}, each an integer, a number or true/false")
    return {name: number(text) for name, text in texts.items()}


def number(text):
    """A param's value as `commdsl --set` reads it."""
    return text == "true" if text in ("true", "false") else int(text) if text.lstrip("+-").isdigit() else float(text)
''',
    "div": '''
def div(a, b):
    """The language's `/` on numbers: exact when it divides (`6 / 2` is the integer 3), else a fraction."""
    return a // b if type(a) is int and type(b) is int and b != 0 and a % b == 0 else a / b
''',
    "power": '''
def power(e):
    """An exponent of `tensor ** e`: a negative integer power is a fraction, as in `2 ** -1`."""
    return float(e) if type(e) is int and e < 0 else e
''',
    "log2": '''
def log2(x):
    """The language's `log2`: exact, of a positive power of two only."""
    if type(x) is not int or x <= 0 or x & (x - 1):
        raise ValueError(f"log2({x}): not a positive power of two")
    return x.bit_length() - 1
''',
    "entry": '''
def entry(table, k):
    """The language's `TABLE[k]`: inside the table only (Python's `table[-1]` would read the last entry)."""
    if not 0 <= k < len(table):
        raise IndexError(f"index {k} is outside a table of {len(table)} entries")
    return table[k]
''',
    "index_of": '''
def index_of(t):
    """The element index `i`: each element's flat position in `t`, shaped like `t`."""
    return torch.arange(t.numel()).view(t.shape)
''',
    "minimum": """
def minimum(a, b):
    return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))
""",
    "maximum": """
def maximum(a, b):
    return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))
""",
    "random_values": '''
def random_values(seed, rank, t, normal=False):
    """commdsl's seeded per-rank values (the simulator draws the same), shaped like `t`."""
    rng = np.random.default_rng([seed, rank])
    return torch.from_numpy(rng.standard_normal(t.numel()) if normal else rng.random(t.numel())).view(t.shape)
''',
    "split": '''
def split(world, key):
    """`split by KEY`: the ranks of each key, in key order (every rank makes every group, in this order)."""
    by_key = {}
    for r in range(world):
        by_key.setdefault(key(r), []).append(r)
    return [by_key[k] for k in sorted(by_key)]
''',
    "post": '''
def post(work):
    """An async op's request, kept for `wait all`."""
    pending.append(work)
    return work


def wait(*works):
    for work in works:
        if work in pending:  # a second wait on a send or recv can time out on Gloo: wait each request once
            pending.remove(work)
            work.wait()
''',
    "post_batches": '''
def post(work):
    """An async op's request, or a batch's list of works, kept for `wait all`."""
    pending.append(work)
    return work


def wait(*works):
    for work in works:
        if work in pending:  # a second wait on a send or recv can time out on Gloo: wait each request once
            pending.remove(work)
            for one in work if isinstance(work, list) else [work]:  # a batch bound to a handle: its works
                one.wait()
''',
    "expect": '''
def expect(failures, line, actual, cmp, expected):
    """An `expect` at `line`: floats compare with torch.testing.assert_close's tolerances, the rest exactly."""
    a = actual.detach().cpu()
    e = torch.as_tensor(expected).cpu().broadcast_to(a.shape)
    if a.is_floating_point():
        rtol, atol = TOLERANCE[a.dtype]
        eq = torch.isclose(a.double(), e.double(), rtol=rtol, atol=atol, equal_nan=True)
    else:
        eq = a == e
    good = {"==": eq, "!=": ~eq, "<": a < e, "<=": a <= e, ">": a > e, ">=": a >= e}[cmp]
    if not bool(good.all()):
        k = int((~good).reshape(-1).nonzero()[0])
        failures.append(f"expect at line {line} failed: element {k}: got {a.reshape(-1)[k].item()!r}, "
                        f"expected {cmp} {e.reshape(-1)[k].item()!r}")
''',
    "fmt": '''
def fmt(t):
    """torch's repr under its default float32 (the script computes with float64 as default)."""
    torch.set_default_dtype(torch.float32)
    try:
        return repr(t.detach().cpu())
    finally:
        torch.set_default_dtype(torch.float64)
''',
}


@dataclass
class _Scope:
    names: dict[str, str] = field(default_factory=dict)  # language name → Python name
    parent: _Scope | None = None

    def lookup(self, name: str) -> str | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def visible(self) -> set[str]:
        out, scope = set(), self
        while scope is not None:
            out |= set(scope.names.values())
            scope = scope.parent
        return out


def emit_python(
    program: Program, backend: str = "gloo", script: str = "out.py", checked: bool = True, overrides=None
) -> str:
    """The script's text, the same at every world size. `checked`: whether the program was checked first;
    `overrides`: `--set` values, which become the script's defaults (CommdslError, N125, for a bad one)."""
    from commdsl.expand import resolve_params

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend {backend!r}")
    params = resolve_params(program, overrides)
    fixed = {k: params[k] for k in dict(overrides or {})}
    return _Writer(program, backend, params, fixed).script(script, checked)


class _Writer:
    def __init__(self, program: Program, backend: str, params: dict, fixed: dict):
        self.p, self.backend, self.params, self.fixed = program, backend, params, fixed
        self.source = program.source
        self.helpers: set[str] = set()
        self.imports: set[str] = set()
        self.preludes: set[str] = set()
        self.lines: list[str] = []
        self.decls: dict[str, n.Node] = {}  # top-level name → its declaration (tensor, group, mesh)
        self.ndim: dict[str, int] = {t.name: len(t.shape) for t in program.tensors}
        self.dtype: dict[str, str] = {t.name: t.dtype.name for t in program.tensors}
        bound = _bound_handles(program.body)
        self.arrays = {h.name for h, _ in bound if h.index is not None} | _waited_arrays(program.body)
        self.functions = {f.name.name: f for f in program.functions}
        self.defs: dict[tuple, str] = {}  # (function, its arguments' kinds) → the Python function written for it
        self.def_bodies: dict[tuple, str] = {}  # (function, its body's lines) → that Python function
        self.def_lines: list[str] = []  # those functions, written inside `main` before its body
        everything = program.body + tuple(x for f in program.functions for x in f.body)
        bound_anywhere = _bound_handles(everything)
        self.batches = {h.name for h, batch in bound_anywhere if batch}  # handles bound to batches: lists of works
        # a name bound both to a batch and to an op: its `wait` cannot be written for one kind, so `wait()` does it
        mixed = self.batches & {h.name for h, batch in bound_anywhere if not batch}
        self.waits_all = _uses_wait_all(everything) or bool(mixed)
        if self.waits_all:  # `post` and `wait`; for lists of works too where batches are bound to handles
            self.helpers.add("post_batches" if self.batches else "post")
        self.top = _Scope()
        taken: set[str] = set()
        handles = sorted({h.name for h, _ in bound} | self.arrays | _waited(program.body))  # also one bound nowhere
        made = sorted(step_group_names(program.body))
        declared = [g.name for g in (*program.groups, *program.tables)]
        functions = [f.name.name for f in program.functions]
        top_names = [p.name for p in program.params] + declared + handles + made + functions
        for name in sorted(set(top_names) | set(self.ndim)):
            self.top.names[name] = _python_name(name, taken)
            taken.add(self.top.names[name])
        self.taken = taken  # every top-level Python name: a scoped name never takes one
        self.groups_here: set[str] = set(made)  # names of groups with no declaration: steps' and parameters'
        self.in_function = 0  # > 0 while writing a function: a tensor is changed in place, never rebound
        self.view_parameters: set[str] = set()  # the view parameters of the functions being written
        for d in (*program.tensors, *program.groups):
            self.decls[d.name] = d

    # ---- layout ------------------------------------------------------------------------------------
    def script(self, script: str, checked: bool) -> str:
        main = self.main()
        w = self.p.world
        head = [
            "#!/usr/bin/env python3",
            f'"""{_text(self.p.name)}: generated by `commdsl compile {_text(shlex.quote(self.p.path))}`.',
            "",
            *[_text(c) for c in self.file_comment()],
            *([""] if self.file_comment() else []),
            f"Run it with:  torchrun --nproc-per-node N {_text(shlex.quote(script))}"
            + "".join(f" [--set {_text(p.name)}=VALUE]" for p in self.p.params),
            f"N is one of the world sizes the program declares ({self.p.describe_world() if w else 'any'})."
            + (" `commdsl compile` checked the program first" if checked else " `commdsl compile --no-check` wrote it")
            + (f", with {_text(_params_text(self.params))}." if self.params else "."),
            f"It needs only torch{' and NumPy' if 'np' in self.imports else ''}. "
            f"Comments name the line of {_text(self.p.path)} each call comes from.",
            '"""',
            "",
        ]
        environment = bool(self.p.params) or self.backend == "nccl"
        imports = ["import argparse"] * bool(self.p.params) + ["import os"] * environment
        imports += ["import re"] * ("number" in self.helpers) + ["import sys", ""]
        imports += ["import torch", "import torch.distributed as dist"]
        imports += ["import numpy as np"] * ("np" in self.imports)
        imports += ["from torch.distributed.device_mesh import init_device_mesh"] * ("mesh" in self.imports)
        consts = ["", f'BACKEND = "{self.backend}"']
        if self.params:
            names = [_string(p.name) for p in self.p.params]
            consts.append(f"PARAMS = ({', '.join(names)}{',' if len(names) == 1 else ''})")
            defaults = ", ".join(f"{p.name}={self.default_text(p)}" for p in self.p.params)
            consts.append("SET_HELP = " + _string("params, with their defaults: " + defaults))
            consts.append(f"CHECKED = {{{', '.join(f'{_string(k)}: {_number(v)}' for k, v in self.params.items())}}}"
                          "  # the params commdsl checked it with")  # fmt: skip
        if "expect" in self.helpers:
            consts.append("TOLERANCE = {  # (rtol, atol) of torch.testing.assert_close; integers compare exactly")
            consts += [f"    torch.{name}: {tol}," for name, tol in TOLERANCE.items()] + ["}"]
        consts += [KINDS[k].python_prelude for k in sorted(self.preludes) if KINDS[k].python_prelude]
        if self.waits_all:
            consts.append("pending = []  # requests not waited for yet: what `wait all` waits for")
        helpers = [_HELPERS[h] for h in _HELPERS if h in self.helpers] + [_SAY]
        tail = ["", "", 'if __name__ == "__main__":', "    main()", ""]
        return "\n".join(head + imports + consts + [""] + helpers + [""] + main + tail)

    def file_comment(self) -> list[str]:
        """The comment lines at the top of the file, before its first statement: the program's description."""
        out = []
        for text in self.source.text.splitlines():
            stripped = text.strip()
            if not stripped.startswith("#"):
                break
            out.append(stripped.lstrip("#").strip())
        return out

    def main(self) -> list[str]:
        self.lines = []
        emit = self.emit
        emit(0, "def main():")
        if self.p.params:
            self.helpers.add("number")
            emit(1, "args = arguments()")
        emit(1, "torch.set_default_dtype(torch.float64)  # int / int and int * 0.5 compute in float64, as in commdsl")
        if self.backend == "nccl":
            emit(1, 'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))')
            emit(1, 'torch.set_default_device("cuda")')
        emit(1, "dist.init_process_group(BACKEND)")
        emit(1, "rank, world = dist.get_rank(), dist.get_world_size()")
        check = self.world_check()
        if check:
            emit(1, f"if {check}:")
            emit(2, f'sys.exit(f"world size {{world}} is not one the program declares ({self.p.describe_world()})")')
        for p in self.p.params:
            name = self.top.names[p.name]
            default = _number(self.fixed[p.name]) if p.name in self.fixed else self.static(p.default, self.top)
            emit(1, f"{name} = args.get({_string(p.name)}, {default})", p.span.line)
        if self.params:
            values = ", ".join(f"{_string(p.name)}: {self.top.names[p.name]}" for p in self.p.params)
            emit(1, f"if rank == 0 and {{{values}}} != CHECKED:")
            emit(2, 'print(f"note: commdsl checked this program with {CHECKED}, not these values", file=sys.stderr)')
        for t in self.p.tables:  # before the groups, whose members may read them
            self.emit(1, f"{self.top.names[t.name]} = {self.listed(t.entries, self.top)}", t.span.line)
        for g in self.p.groups:
            self.group(g)
        for t in self.p.tensors:
            self.tensor(t)
        for name in sorted(self.arrays):
            emit(1, f"{self.top.names[name]} = {{}}  # an array of handles: slot → request")
        emit(1, "printed, failures = [], []")
        start = len(self.lines)
        self.block(self.p.body, 1, _Scope(parent=self.top))
        self.lines[start:start] = self.def_lines  # each function once, before the first statement
        emit(1, "# no closing barrier: a rank ends when its program does, as the program by itself would")
        emit(1, "dist.destroy_process_group()")
        # each rank says how it ended, with no expects too: a script that ends says so
        emit(1, "for text in printed + failures:")
        emit(2, 'say(f"rank {rank}: {text}")')
        emit(1, 'verdict = "every expect holds" if not failures else f"{len(failures)} expect(s) failed"')
        emit(1, 'say(f"rank {rank}: {verdict}")')
        emit(1, "sys.exit(1 if failures else 0)")
        return self.lines

    def default_text(self, p: n.ParamDecl) -> str:
        """A param's default as the user wrote it (or as `--set` gave it to `commdsl compile`)."""
        if p.name in self.fixed:
            return _literal(self.fixed[p.name])
        return " ".join(self.source.text[p.default.span.start : p.default.span.end].split())

    def world_check(self) -> str:
        w = self.p.world
        if w is None:
            return ""
        if w.sizes:
            return f"world not in ({', '.join(map(str, w.sizes))}{',' if len(w.sizes) == 1 else ''})"
        if w.open:
            return f"world < {w.lo}" if w.lo > 1 else ""  # `world 1..`: every size
        return f"not {w.lo} <= world <= {w.hi}"

    def emit(self, depth: int, code: str, line: int | None = None, mark: bool = False) -> None:
        """One line of code; `line`: the source line it comes from, whose comment it carries (and its number when
        `mark`: communication and expects)."""
        self.lines.append(INDENT * depth + code + self.line_comment(line, mark))

    def line_comment(self, line: int | None, mark: bool = False) -> str:
        comment = self.comment(line) if line else ""
        if line and mark:
            comment = f"line {line}" + (f": {comment}" if comment else "")
        return f"  # {_text(comment, keep=_QUOTES)}" if comment else ""

    def comment(self, line: int) -> str:
        text = self.source.line_text(line)
        return text.split("#", 1)[1].strip() if "#" in text else ""

    # ---- declarations --------------------------------------------------------------------------------
    def group(self, g: n.GroupDecl | n.MeshDecl) -> None:
        name = self.top.names[g.name]
        if isinstance(g, n.MeshDecl):
            self.imports.add("mesh")
            device = "cuda" if self.backend == "nccl" else "cpu"
            sizes = ", ".join(self.static(d.size, self.top) for d in g.dims) + ("," if len(g.dims) == 1 else "")
            dims = ", ".join(_string(d.name) for d in g.dims) + ("," if len(g.dims) == 1 else "")
            self.emit(1, f'{name} = init_device_mesh("{device}", ({sizes}), mesh_dim_names=({dims}))', g.span.line)
        elif g.split_key is None:
            self.emit(1, f"{name} = dist.new_group({self.listed(g.members, self.top)})", g.span.line)
        else:
            self.helpers.add("split")
            key = self.static(g.split_key, self.top)
            groups = f"split(world, lambda rank: {key})"
            self.emit(1, f"{name}, _ = dist.new_subgroups_by_enumeration({groups})", g.span.line)

    def tensor(self, t: n.TensorDecl) -> None:
        name = self.top.names[t.name]
        dims = [self.static(d, self.top) for d in t.shape]
        shape = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
        sizes = dims[0] if len(dims) == 1 else shape  # torch.zeros takes one size as it is
        dtype = f"torch.{t.dtype.name}"
        line = t.span.line
        if t.init is not None and not _reads_elements(t.init, self.top, self.ndim):
            value = self.static(t.init, self.top)
            self.emit(1, f"{name} = torch.full({shape}, {value}, dtype={dtype})", line)
            return
        self.emit(1, f"{name} = torch.zeros({sizes}, dtype={dtype})", None if t.init is not None else line)
        if t.init is None:
            return
        if isinstance(t.init, n.Call) and isinstance(t.init.func, n.Name) and t.init.func.id in ("rand", "randn"):
            self.helpers.add("random_values")
            self.imports.add("np")
            seed = self.static(t.init.args[0], self.top)
            normal = ", normal=True" if t.init.func.id == "randn" else ""
            self.emit(1, f"{name}.copy_(random_values({seed}, rank, {name}{normal}))", line)
            return
        self.emit(1, f"{name}.copy_({self.elem(t.init, self.top, name)})", line)

    # ---- statements ----------------------------------------------------------------------------------
    def block(self, stmts, depth: int, scope: _Scope) -> None:
        for s in stmts:
            self.stmt(s, depth, scope)

    def bind(self, scope: _Scope, name: str) -> str:
        """A Python name for a `let` or loop variable: a name of its own where it would shadow a visible one
        (Python has no block scope: the outer one would be overwritten)."""
        scope.names[name] = _python_name(name, scope.visible() | self.taken)
        return scope.names[name]

    def stmt(self, s, depth: int, scope: _Scope) -> None:
        line = s.span.line
        match s:
            case n.Let():
                value = self.static(s.value, scope)
                self.emit(depth, f"{self.bind(scope, s.name)} = {value}", line)
            case n.Assign():
                self.assign(s, depth, scope)
            case n.Expect():
                self.helpers.add("expect")
                view = self.view(s.cond.left, scope)
                value = self.elem(s.cond.right, scope, view)
                self.emit(depth, f"expect(failures, {line}, {view}, {_string(s.cond.op)}, {value})", line)
            case n.Print():
                self.helpers.add("fmt")
                for v in s.views:
                    label = _string(self.source.text[v.span.start : v.span.end] + " = ")
                    self.emit(depth, f"printed.append({label} + fmt({self.view(v, scope)}))", line)
                    line = None
            case n.Send() | n.Recv():
                call = self.p2p(s, scope)
                if s.blocking:
                    self.emit(depth, call, line, mark=True)
                    return
                call = f"post({call})" if self.waits_all else call
                handle = f"{self.handle(s.handle, scope)} = " if s.handle else ""
                self.emit(depth, handle + call, line, mark=True)
            case n.Collective():
                self.collective(s, depth, scope)
            case n.Wait():
                self.wait(s, depth, scope)
            case n.NewGroup():
                items = self.split_sizes(s.members, scope)
                members = items[0][1:] if len(items) == 1 and items[0].startswith("*") else f"[{', '.join(items)}]"
                self.emit(depth, f"{self.top.names[s.name.name]} = dist.new_group({members})", line, mark=True)
            case n.For() | n.While() | n.On():
                self.control(s, depth, scope)
            case n.Batch():
                self.batch(s, depth, scope)
            case n.Coalesced():
                self.coalesced(s, depth, scope)
            case n.CallStmt():
                args = ", ".join(self.argument(a, scope) for a in s.args)
                self.emit(depth, f"{self.function(s, scope)}({args})", line, mark=True)

    # ---- functions -----------------------------------------------------------------------------------
    def argument(self, a, scope: _Scope) -> str:
        """A call's argument as Python: a torch view, a process group (or device mesh), or a number."""
        if _is_view(a, scope, self.ndim):
            return self.view(a, scope)
        if self.group_argument(a) is not None:
            return self.group_of(a)
        return self.static(a, scope)

    def group_argument(self, a) -> tuple[str, n.Node | None] | None:
        """("group" or "mesh", its declaration if any) when an argument names a group, mesh or mesh dimension."""
        if isinstance(a, n.Attr) and isinstance(a.value, n.Name) and isinstance(self.decls.get(a.value.id), n.MeshDecl):
            return ("group", None)  # a mesh dimension: a process group
        if not isinstance(a, n.Name) or a.id not in self.top.names or a.id in self.ndim:
            return None
        decl = self.decls.get(a.id)
        if isinstance(decl, n.MeshDecl):
            return ("mesh", decl)
        if isinstance(decl, n.GroupDecl) or a.id in self.groups_here:
            return ("group", None)  # a process group: its size asked of torch, whichever group it is
        return None

    def kinds(self, s: n.CallStmt, scope: _Scope) -> tuple:
        """Each argument's kind as the script needs it: a view's dimensions and dtype, a group, a mesh, a number."""
        out = []
        for a in s.args:
            if _is_view(a, scope, self.ndim):
                out.append(("view", _view_ndim(a, self.ndim), self.dtype[n.view_tensor(a)]))
            else:
                out.append(self.group_argument(a) or ("number",))
        return tuple(out)

    @contextmanager
    def parameters(self, f: n.FunctionDef, kinds: tuple, texts: list[str]):
        """While writing `f`'s body: each parameter is a name of `main` written as `texts` says, of its kind, and
        the handles the body binds are names of their own; all as before afterwards."""
        saved = (self.lines, dict(self.top.names), dict(self.ndim), dict(self.dtype), dict(self.decls))
        self.lines = []
        try:
            for p, kind, text in zip(f.params, kinds, texts, strict=True):
                self.top.names[p.name] = text
                if kind[0] == "view":
                    self.ndim[p.name], self.dtype[p.name] = kind[1], kind[2]
                    self.view_parameters.add(p.name)
                elif kind[0] != "number":
                    self.decls[p.name] = kind[1]
                    self.groups_here.add(p.name)
            for h in sorted({h.name for h, _ in _bound_handles(f.body)}):
                self.top.names[h] = _python_name(h, self.taken)
            self.in_function += 1
            yield
        finally:
            self.in_function -= 1
            self.lines, self.top.names, self.ndim, self.dtype, self.decls = saved
            self.groups_here -= {p.name for p in f.params} - set(step_group_names(self.p.body))
            self.view_parameters -= {p.name for p in f.params}

    def function(self, s: n.CallStmt, scope: _Scope) -> str:
        """The Python function for a call, written inside `main` so that it reads the program's tensors and groups:
        once per function and kinds of arguments whose code differs (a view's dimensions and dtype can change it)."""
        f = self.functions[s.name.name]
        kinds = self.kinds(s, scope)
        if (f.name.name, kinds) in self.defs:
            return self.defs[(f.name.name, kinds)]
        local = {h.name for h, _ in _bound_handles(f.body)}
        params = [_python_name(p.name, self.taken | local) for p in f.params]
        with self.parameters(f, kinds, params):
            arrays = {h.name for h, _ in _bound_handles(f.body) if h.index is not None}
            for h in sorted(arrays):
                self.emit(2, f"{self.top.names[h]} = {{}}  # an array of handles: slot → request")
            self.block(f.body, 2, _Scope(parent=_Scope(names=dict(self.top.names))))
            body = self.lines
        same = self.def_bodies.get((f.name.name, tuple(body)))
        if same is not None:
            self.defs[(f.name.name, kinds)] = same
            return same
        first = self.top.names[f.name.name]
        name = first if first not in self.defs.values() else _python_name(first, self.taken | set(self.defs.values()))
        self.defs[(f.name.name, kinds)] = self.def_bodies[(f.name.name, tuple(body))] = name
        self.def_lines.append(INDENT + f"def {name}({', '.join(params)}):" + self.line_comment(f.span.line))
        self.def_lines.extend(body + [""])
        return name

    def inline(self, s: n.CallStmt, depth: int, scope: _Scope) -> None:
        """A call inside `batch:`: its body written in place, so that its ops join the batch's list."""
        f = self.functions[s.name.name]
        kinds = self.kinds(s, scope)
        texts = [
            self.argument(a, scope) if k[0] != "number" else f"({self.argument(a, scope)})"
            for a, k in zip(s.args, kinds, strict=True)
        ]
        call = " ".join(self.source.text[s.span.start : s.span.end].split())
        self.emit(depth, f"# line {s.span.line}: {_text(call, keep=_QUOTES)}, inlined: its ops join the batch")
        with self.parameters(f, kinds, texts):
            # the caller's names are visible only so that the body's `let`s, written in its Python scope, avoid them
            self.batch_body(f.body, depth, _Scope(parent=_Scope(names=dict(self.top.names), parent=scope)))
            body = self.lines
        self.lines.extend(body)

    def control(self, s: n.For | n.While | n.On, depth: int, scope: _Scope) -> None:
        """Loops and `on` as Python's `for`, `while` and `if`, each block a scope of its own for `let`s."""
        match s:
            case n.For():
                inner = _Scope(parent=scope)
                var = self.bind(inner, s.var)
                self.emit(depth, f"for {var} in {self.range(s.lo, s.hi, scope)}:", s.span.line)
                self.block(s.body, depth + 1, inner)
            case n.While():
                self.emit(depth, f"while {self.static(s.cond, scope)}:", s.span.line)
                self.block(s.body, depth + 1, _Scope(parent=scope))
            case n.On():
                for k, br in enumerate(s.branches):
                    self.emit(depth, f"{'if' if k == 0 else 'elif'} {self.static(br.cond, scope)}:", br.span.line)
                    self.block(br.body, depth + 1, _Scope(parent=scope))
                if s.orelse:
                    self.emit(depth, "else:")
                    self.block(s.orelse, depth + 1, _Scope(parent=scope))

    def range(self, lo, hi, scope: _Scope) -> str:
        """`lo .. hi` (inclusive) as a Python range: `range(world - 1)` for `0 .. world - 2`."""
        if isinstance(hi, n.IntLit):
            stop = str(hi.value + 1)
        elif isinstance(hi, n.Binary) and hi.op == "-" and isinstance(hi.right, n.IntLit) and hi.right.value >= 1:
            less = hi.right.value - 1
            left = self.static(hi.left, scope, _PREC["-"])
            stop = f"{left} - {less}" if less else self.static(hi.left, scope)
        else:
            stop = f"{self.static(hi, scope, _PREC['+'])} + 1"
        if isinstance(lo, n.IntLit) and lo.value == 0:
            return f"range({stop})"
        return f"range({self.static(lo, scope)}, {stop})"

    def assign(self, s: n.Assign, depth: int, scope: _Scope) -> None:
        if isinstance(s.target, n.Name) and not _is_view(s.target, scope, self.ndim):  # a `let` takes a new value
            name = self.static(s.target, scope)
            if s.op == "/=":
                self.helpers.add("div")
                self.emit(depth, f"{name} = div({name}, {self.static(s.value, scope)})", s.span.line)
            else:
                self.emit(depth, f"{name} {s.op} {self.static(s.value, scope)}", s.span.line)
            return
        target = self.view(s.target, scope)
        value = s.value
        line = s.span.line
        # a function's view parameter may be a view of any tensor: as if target and value shared one
        shared = bool({n.view_tensor(value), n.view_tensor(s.target)} & self.view_parameters)
        if s.op == "=":
            if not _reads_elements(value, scope, self.ndim):
                self.emit(depth, f"{target}.fill_({self.static(value, scope)})", line)
            elif _is_view(value, scope, self.ndim):
                same = shared or n.view_tensor(value) == n.view_tensor(s.target)  # copy_ refuses an overlapping source
                self.emit(depth, f"{target}.copy_({self.view(value, scope)}{'.clone()' if same else ''})", line)
            else:
                self.emit(depth, f"{target}.copy_({self.elem(value, scope, target)})", line)
            return
        tensor = n.view_tensor(s.target)
        same_kind = (  # where computing in place stores what the runtime's compute-and-copy stores
            _is_view(value, scope, self.ndim)
            and not shared
            and n.view_tensor(value) != tensor
            and self.dtype[n.view_tensor(value)] == self.dtype[tensor]  # the runtime's own in-place case
            or not _reads_elements(value, scope, self.ndim)
            and (self.dtype[tensor] in TOLERANCE or isinstance(value, n.IntLit) and self.dtype[tensor] != "bool")
        )  # a number into a float tensor, or an integer literal into an integer one: no promotion to undo
        if s.op in IN_PLACE and same_kind:
            rhs = self.elem(value, scope, target)
            # `x += y`; a view as `x.tensor_split(p)[k].add_(y)`, and in a function every target (`x += y` there
            # would make `x` a local of the function)
            named = isinstance(s.target, n.Name) and not self.in_function
            self.emit(depth, f"{target} {s.op} {rhs}" if named else f"{target}.{IN_PLACE[s.op]}({rhs})", line)
            return
        op = s.op[:-1]
        rhs = self.elem(value, scope, target, _PREC[op] + 1)
        self.emit(depth, f"{target}.copy_({target} {op} {rhs})", line)

    def p2p(self, s: n.Send | n.Recv, scope: _Scope, batched: bool = False) -> str:
        way = form(isinstance(s, n.Send), s.blocking)
        word = (way.batched if batched else way).torch_name
        view = self.view(s.buffer, scope)
        peer = "None" if s.peer is None else self.static(s.peer, scope)  # `from any`: torch's src=None
        if batched:
            args = [f"dist.{word}", view, peer]
            if s.group is not None or s.tag is not None:
                args.append(self.group_ref(s.group) if s.group else "None")
            if s.tag is not None:
                args.append(self.static(s.tag, scope))
            return f"dist.P2POp({', '.join(args)})"
        extra = (f", group={self.group_ref(s.group)}" if s.group else "") + (
            f", tag={self.static(s.tag, scope)}" if s.tag is not None else ""
        )
        return f"dist.{word}({view}, {peer}{extra})"

    def batch(self, s: n.Batch, depth: int, scope: _Scope) -> None:
        """`batch:` waits for its works at once; `b = batch:` keeps their list in `b` for a later `wait b`."""
        inner = _Scope(parent=scope)
        bound = f"{self.handle(s.handle, scope)} = " if s.handle is not None else ""
        post = "post(" if bound and self.waits_all else ""
        if all(isinstance(x, (n.Send, n.Recv)) for x in s.body):
            head = f"{bound}{post}dist.batch_isend_irecv([" if bound else "for work in dist.batch_isend_irecv(["
            self.emit(depth, head, s.span.line, mark=True)
            for x in s.body:
                self.emit(depth + 1, self.p2p(x, inner, batched=True) + ",", x.span.line, mark=True)
            if bound:
                self.emit(depth, "])" + (")" if post else ""))
                return
            self.emit(depth, "]):")
            self.emit(depth + 1, "work.wait()")
            return
        # ops under `for` or `on` inside the batch: gathered in a list first; a rank with none posts nothing
        self.emit(depth, "p2p_ops = []", s.span.line, mark=True)
        self.batch_body(s.body, depth, inner)
        works = "dist.batch_isend_irecv(p2p_ops) if p2p_ops else []"
        if bound:
            self.emit(depth, f"{bound}post({works})" if post else f"{bound}{works}")
            return
        self.emit(depth, f"for work in {works}:")
        self.emit(depth + 1, "work.wait()")

    def coalesced(self, s: n.Coalesced, depth: int, scope: _Scope) -> None:
        """`coalesced:` is torch's `_coalescing_manager`: the collectives inside are recorded, and leaving the
        `with` issues them as one call on the group and waits for it; bound to a handle, the manager is the
        request (`async_ops=True`: its `wait()` waits for the call)."""
        ref = s.body[0].group
        args = [self.group_ref(ref)] if ref is not None else []
        bound = self.handle(s.handle, scope) if s.handle is not None else None
        if bound is not None:
            args.append("async_ops=True")
        target = f" as {bound}" if bound is not None else ""
        self.emit(depth, f"with dist._coalescing_manager({', '.join(args)}){target}:", s.span.line, mark=True)
        self.block(s.body, depth + 1, _Scope(parent=scope))
        if bound is not None and self.waits_all:
            self.emit(depth, f"post({bound})")

    def batch_body(self, stmts, depth: int, scope: _Scope) -> None:
        for x in stmts:
            match x:
                case n.Send() | n.Recv():
                    self.emit(depth, f"p2p_ops.append({self.p2p(x, scope, batched=True)})", x.span.line, mark=True)
                case n.For():
                    inner = _Scope(parent=scope)
                    var = self.bind(inner, x.var)
                    self.emit(depth, f"for {var} in {self.range(x.lo, x.hi, scope)}:", x.span.line)
                    self.batch_body(x.body, depth + 1, inner)
                case n.On():
                    for k, br in enumerate(x.branches):
                        self.emit(depth, f"{'if' if k == 0 else 'elif'} {self.static(br.cond, scope)}:", br.span.line)
                        self.batch_body(br.body, depth + 1, _Scope(parent=scope))
                    if x.orelse:
                        self.emit(depth, "else:")
                        self.batch_body(x.orelse, depth + 1, _Scope(parent=scope))
                case n.CallStmt():
                    self.inline(x, depth, scope)
                case _:
                    self.stmt(x, depth, scope)  # a `let`

    def handle(self, h: n.HandleRef, scope: _Scope) -> str:
        """A handle as Python: its name, or for `h[k]` the entry of its dict of requests."""
        name = self.top.names[h.name]
        return f"{name}[{self.static(h.index, scope)}]" if h.index is not None else name

    def wait(self, s: n.Wait, depth: int, scope: _Scope) -> None:
        line = s.span.line
        if s.all:  # `wait all h`: those of h's requests not waited yet, as `wait all` those of the rank
            works = f"*{self.top.names[s.array.name]}.values()" if s.array is not None else "*pending"
            self.emit(depth, f"wait({works})", line, mark=True)
            return
        names = [self.handle(h, scope) for h in s.handles]
        if self.waits_all:
            self.emit(depth, f"wait({', '.join(names)})", line, mark=True)
            return
        for k, (h, name) in enumerate(zip(s.handles, names)):
            if h.name in self.batches:  # a batch's list of works
                self.emit(depth, f"for work in {name}:", line if k == 0 else None, mark=True)
                self.emit(depth + 1, "work.wait()")
            else:
                self.emit(depth, f"{name}.wait()", line if k == 0 else None, mark=True)

    def collective(self, s: n.Collective, depth: int, scope: _Scope) -> None:
        kind = KINDS[s.op]
        self.preludes.add(s.op)
        ins = [self.view(v, scope) for v in s.inputs]
        outs = [self.view(v, scope) for v in s.outputs]
        red = ""
        if kind.reducing:
            name = s.redop.name.name if s.redop else "sum"
            if name == "premul_sum" and s.redop is not None and s.redop.scale is not None:
                red = f"dist.distributed_c10d._make_nccl_premul_sum({self.static(s.redop.scale, scope)})"
            elif name in _REDUCE_OPS:
                red = f"dist.ReduceOp.{name.upper()}"
            else:
                raise ValueError(f"reduce op {name!r}")
        root = self.static(s.root, scope, _PREC["cmp"] + 1) if s.root is not None else ""
        splits = None
        if s.in_splits:
            splits = (self.split_sizes(s.in_splits, scope), self.split_sizes(s.out_splits, scope))
        fn, args = kind.script_call(s, ins, outs, red, root, self.group_size(s.group), splits)
        if s.group is not None:
            args.append(f"group={self.group_ref(s.group)}")
        if s.handle is not None:
            args.append("async_op=True")
        call = f"{fn}({', '.join(args)})"
        if s.handle is not None:
            call = f"{self.handle(s.handle, scope)} = " + (f"post({call})" if self.waits_all else call)
        self.emit(depth, call, s.span.line, mark=True)

    def split_sizes(self, items, scope: _Scope) -> list[str]:
        """A `splits` list as Python list items: `[EXPR for j in LO .. HI]` becomes a starred comprehension."""
        out = []
        for x in items:
            if not isinstance(x, n.ListFor):
                out.append(self.static(x, scope))
                continue
            out.append("*" + self.comprehension(x, scope))
        return out

    def comprehension(self, x: n.ListFor, scope: _Scope) -> str:
        inner = _Scope(parent=scope)
        var = self.bind(inner, x.var)
        return f"[{self.static(x.value, inner)} for {var} in {self.range(x.lo, x.hi, scope)}]"

    def listed(self, items, scope: _Scope) -> str:
        """A list of integers as a Python list: `[EXPR for j in LO .. HI]` alone as a comprehension."""
        if len(items) == 1 and isinstance(items[0], n.ListFor):
            return self.comprehension(items[0], scope)
        return f"[{', '.join(self.split_sizes(items, scope))}]"

    def group_ref(self, g: n.GroupRef) -> str:
        name = self.top.names[g.name]
        return f"{name}.get_group({_string(g.dim)})" if g.dim else name

    def group_size(self, g: n.GroupRef | None) -> str:
        if g is None:
            return "world"
        decl = self.decls.get(g.name)  # None for a group `new_group` makes as a step
        name = self.top.names[g.name]
        if isinstance(decl, n.MeshDecl):
            return f"{name}[{_string(g.dim or '')}].size()"
        if isinstance(decl, n.GroupDecl) and decl.split_key is None:  # its size whether this rank is in it or not
            if any(isinstance(m, n.ListFor) for m in decl.members):
                return f"len({self.listed(decl.members, self.top)})"
            return str(len(decl.members))
        return f"dist.get_world_size({name})"

    # ---- expressions ---------------------------------------------------------------------------------
    def view(self, e, scope: _Scope) -> str:
        match e:
            case n.Name():
                return self.top.names[e.id]
            case n.Slice():
                lo = self.static(e.lo, scope) if e.lo is not None else ""
                hi = self.static(e.hi, scope) if e.hi is not None else ""
                return f"{self.view(e.value, scope)}[{lo}:{hi}]"
            case n.Index():
                return f"{self.view(e.value, scope)}[{self.static(e.index, scope)}]"
            case n.Call(func=n.Attr(attr="chunk") as f):
                k, parts = (self.static(a, scope) for a in e.args)
                return f"{self.view(f.value, scope)}.tensor_split({parts})[{k}]"
        raise ValueError(f"not a view: {e.kind}")

    def static(self, e, scope: _Scope, need: int = 0) -> str:
        """A per-rank number as Python, parenthesised when it binds less tightly than `need`."""
        text, prec = self.static_prec(e, scope)
        return f"({text})" if prec < need else text

    def static_prec(self, e, scope: _Scope) -> tuple[str, int]:
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return _number(e.value), _ATOM
            case n.Name():
                if e.id in ("rank", "world"):
                    return e.id, _ATOM
                name = scope.lookup(e.id)
                if name is None:
                    raise ValueError(f"name {e.id!r}")
                return name, _ATOM
            case n.Attr():
                return self.attr(e, scope), _ATOM
            case n.Call(func=n.Name(id=fname)) if fname in ("min", "max", "abs"):
                return f"{fname}({', '.join(self.static(a, scope) for a in e.args)})", _ATOM
            case n.Call(func=n.Name(id="log2")):
                self.helpers.add("log2")
                return f"log2({self.static(e.args[0], scope)})", _ATOM
            case n.Call(func=n.Attr(attr="peer") as f):
                return f"dist.get_global_rank({self.group_of(f.value)}, {self.static(e.args[0], scope)})", _ATOM
            case n.Call(func=n.Name(id="sum")) | n.Index() if isinstance(e, n.Call) or _is_view(e, scope, self.ndim):
                return self.data_read(e, scope), _ATOM
            case n.Index(value=n.Name(id=name)):  # a table's entry
                self.helpers.add("entry")
                return f"entry({self.top.names[name]}, {self.static(e.index, scope)})", _ATOM
            case n.Unary(op="not"):
                return f"not {self.static(e.operand, scope, _PREC['not'])}", _PREC["not"]
            case n.Unary():
                return f"{e.op}{self.static(e.operand, scope, _PREC['unary'] + 1)}", _PREC["unary"]
            case n.Binary(op="/"):
                self.helpers.add("div")
                return f"div({self.static(e.left, scope)}, {self.static(e.right, scope)})", _ATOM
            case n.Binary():
                return self.binary(e, lambda x, need: self.static(x, scope, need))
        raise ValueError(f"not a number: {e.kind}")

    def data_read(self, e: n.Call | n.Index, scope: _Scope) -> str:
        """An integer read from data as torch's own: `int(t[k])`, and `int(E.sum())` for `sum(E)` (the element
        index `i` counting over the first view E reads)."""
        if isinstance(e, n.Index):
            return f"int({self.view(e, scope)})"
        first = next(_views(e.args[0], scope, self.ndim))  # resolve makes sure E reads one
        return f"int({self.elem(e.args[0], scope, self.view(first, scope), _ATOM)}.sum())"

    def binary(self, e: n.Binary, operand) -> tuple[str, int]:
        """`a OP b` with Python's precedence: left-associative, comparisons never chained, `**` right-associative."""
        if e.op in COMPARISONS:
            prec = _PREC["cmp"]
            return f"{operand(e.left, prec + 1)} {e.op} {operand(e.right, prec + 1)}", prec
        prec = _PREC[e.op]
        if e.op == "**":
            return f"{operand(e.left, prec + 1)} ** {operand(e.right, _PREC['unary'])}", prec
        return f"{operand(e.left, prec)} {e.op} {operand(e.right, prec + 1)}", prec

    def attr(self, e: n.Attr, scope: _Scope) -> str:
        """`VIEW.size`, `VIEW.rows`, `GROUP.rank`, `GROUP.size`, `MESH.DIM.rank`, `MESH.DIM.size`."""
        if e.attr in ("size", "rows") and _is_view(e.value, scope, self.ndim):
            view = self.view(e.value, scope)
            if e.attr == "size":
                return f"{view}.numel()"
            return f"len({view})" if _view_ndim(e.value, self.ndim) else "1"
        if isinstance(e.value, n.Attr):  # a mesh dimension
            mesh, dim = self.top.names[e.value.value.id], _string(e.value.attr)
            return f"{mesh}.get_local_rank({dim})" if e.attr == "rank" else f"{mesh}[{dim}].size()"
        ref = n.GroupRef(span=e.span, name=e.value.id)
        return f"dist.get_rank({self.group_ref(ref)})" if e.attr == "rank" else self.group_size(ref)

    def group_of(self, e) -> str:
        """The process group a `GROUP` or `MESH.DIM` expression names (the base of `G.peer(k)`)."""
        if isinstance(e, n.Attr):
            return self.group_ref(n.GroupRef(span=e.span, name=e.value.id, dim=e.attr))
        return self.group_ref(n.GroupRef(span=e.span, name=e.id))

    def elem(self, e, scope: _Scope, target: str, need: int = 0) -> str:
        """An element expression: torch arithmetic where it reads tensors or `i`, per-rank numbers elsewhere."""
        text, prec = self.elem_prec(e, scope, target)
        return f"({text})" if prec < need else text

    def elem_prec(self, e, scope: _Scope, target: str) -> tuple[str, int]:
        if not _reads_elements(e, scope, self.ndim):
            return self.static_prec(e, scope)
        if _is_view(e, scope, self.ndim):
            return self.view(e, scope), _ATOM
        match e:
            case n.Name(id="i"):
                self.helpers.add("index_of")
                return f"index_of({target})", _ATOM
            case n.Unary():
                return f"{e.op}{self.elem(e.operand, scope, target, _PREC['unary'] + 1)}", _PREC["unary"]
            case n.Call(func=n.Name(id="abs")):
                return f"abs({self.elem(e.args[0], scope, target)})", _ATOM
            case n.Call(func=n.Name(id=fname)) if fname in ("min", "max"):
                helper = {"min": "minimum", "max": "maximum"}[fname]
                self.helpers.add(helper)
                return f"{helper}({', '.join(self.elem(a, scope, target) for a in e.args)})", _ATOM
            case n.Binary(op="**"):
                base = self.elem(e.left, scope, target, _PREC["**"] + 1)
                if isinstance(e.right, n.IntLit):
                    return f"{base} ** {e.right.value}", _PREC["**"]
                self.helpers.add("power")
                return f"{base} ** power({self.static(e.right, scope)})", _PREC["**"]
            case n.Binary():
                return self.binary(e, lambda x, need: self.elem(x, scope, target, need))
        raise ValueError(f"not an element expression: {e.kind}")


_SAY = '''
def say(text):
    """One write per line: the ranks share stdout, and a line written in pieces can land inside another's."""
    sys.stdout.write(text + "\\n")
    sys.stdout.flush()
'''


# ---- the program's shape ------------------------------------------------------------------------------------


def _uses_wait_all(stmts) -> bool:
    return any(isinstance(s, n.Wait) and s.all for s in n.statements(stmts))


def _bound_handles(stmts) -> list[tuple[n.HandleRef, bool]]:
    """(handle, whether a batch: a list of works) of every op and batch bound to a handle."""
    return [(s.handle, isinstance(s, n.Batch)) for s in n.bound(stmts)]


def _waited(stmts) -> set[str]:
    """Every handle a `wait` names, bound or not (one bound on no rank sits in a branch no rank takes)."""
    return {h.name for s in n.statements(stmts) if isinstance(s, n.Wait) for h in s.handles}


def _waited_arrays(stmts) -> set[str]:
    """Arrays of handles that a `wait` names (`wait h[j]`, `wait all h`)."""
    out = set()
    for s in n.statements(stmts):
        if isinstance(s, n.Wait):
            out |= {h.name for h in s.handles if h.index is not None}
            out |= {s.array.name} if s.array is not None else set()
    return out


def _is_view(e, scope: _Scope, tensors) -> bool:
    """A tensor view: a tensor's name (no `let` can take one), sliced, indexed or chunked."""
    return n.view_tensor(e) in tensors


def _view_ndim(e, tensors) -> int:
    match e:
        case n.Name():
            return tensors[e.id]
        case n.Index():
            return _view_ndim(e.value, tensors) - 1
        case n.Slice():
            return _view_ndim(e.value, tensors)
        case n.Call(func=n.Attr() as f):
            return _view_ndim(f.value, tensors)
    raise ValueError("not a view")


def _reads_elements(e, scope: _Scope, tensors) -> bool:
    """Whether an expression reads a tensor's elements or `i` (else it is a per-rank number). `x.size` reads
    only a view's size; `rand` is an initialiser of its own."""
    match e:
        case n.Name(id="i"):
            return True
        case n.Name():
            return _is_view(e, scope, tensors)
        case n.Slice() | n.Index() | n.Call(func=n.Attr(attr="chunk")) if _is_view(e, scope, tensors):
            return True
        case n.Attr():
            return False
        case n.Call(func=n.Name(id="rand" | "randn")):
            return True
        case n.Call(func=n.Name(id="sum")):  # one integer per rank, read from data
            return False
    return any(_reads_elements(c, scope, tensors) for c in n.children(e))


def _views(e, scope: _Scope, tensors):
    """The views an element expression reads, outermost first."""
    if _is_view(e, scope, tensors):
        yield e
        return
    for c in n.children(e):
        yield from _views(c, scope, tensors)


# ---- what reaches the script from the input ---------------------------------------------------------------------


def _python_name(name: str, taken) -> str:
    """A user's name as a Python name: the same where it is free, else with trailing underscores (`torch` →
    `torch_`, `def` → `def_`; `_` → `t_`, `__x` → `t__x`), never one of `taken`."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name {name!r}")
    py = "t" + name if name.startswith("__") or not name.strip("_") else name  # `_` + "_" would be a dunder
    while _reserved(py) or py in taken:
        py += "_"
    return py


def _reserved(name: str) -> bool:
    return (
        keyword.iskeyword(name)
        or keyword.issoftkeyword(name)
        or name in SCRIPT_NAMES
        or hasattr(builtins, name)
        or name.startswith("__")
    )


def _params_text(params: dict) -> str:
    return ", ".join(f"{k}={_literal(v)}" for k, v in params.items())


def _literal(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else repr(v)


def _text(s: str, keep: str = "'") -> str:
    """`s` for a docstring, a string literal or (with `keep` = all quotes and backslashes) a comment: printable
    characters as they are; double quotes, backslashes and everything else (line breaks, `\\r`, U+2028, lone
    surrogates from undecodable file names) as Python escapes, so the text reads as `s` and nothing in `s` can
    end the string or the comment."""
    out = []
    for ch in s:
        if ch in keep:
            out.append(ch)
        elif ch in '\\"':
            out.append("\\" + ch)
        elif ch.isprintable() and ch not in "\x85\u2028\u2029":
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1] if ord(ch) > 0x7F else f"\\x{ord(ch):02x}")
    return "".join(out)


def _string(s: str) -> str:
    """A Python string literal holding `s`."""
    return '"' + _text(s) + '"'


def _number(v) -> str:
    """A number as Python source: `float("inf")` for 1e309, `float("nan")`, booleans as True/False."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(float(v))
    raise ValueError(f"number {v!r}")
