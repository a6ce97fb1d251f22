"""Lark tree → AST nodes (nodes.py), one method per rule or alias, each node with its span."""

from __future__ import annotations

from dataclasses import replace

from lark import Token, Transformer, Tree, v_args
from lark.exceptions import VisitError
from lark.tree import Meta

from commdsl.collectives import KINDS
from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.rules.names import InvalidView, MisusedHandle
from commdsl.rules.sizes import NotAnInteger
from commdsl.rules.syntax import UnexpectedToken
from commdsl.source import SourceFile, Span
from commdsl.syntax import nodes as n


class _Invalid(Exception):
    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic


MAX_INT_LITERAL = (1 << 63) - 1
"""The largest integer literal: tensors, ranks and sizes are int64 in the simulator and in torch."""


@v_args(inline=True, meta=True)
class _ToAst(Transformer):
    def __init__(self, source: SourceFile):
        super().__init__()
        self.source = source

    # spans ---------------------------------------------------------------------------------------
    def _span(self, meta: Meta) -> Span:
        return self.source.span(meta.start_pos, meta.end_pos)

    def _tok(self, tok: Token) -> Span:
        return self.source.span(tok.start_pos, tok.end_pos)

    def _ident(self, tok: Token) -> n.Ident:
        return n.Ident(span=self._tok(tok), name=str(tok))

    def _int(self, tok: Token) -> int:
        """An integer literal; every value commdsl computes with is an int64, so a literal must fit one."""
        if len(tok) > len(str(MAX_INT_LITERAL)) or int(tok) > MAX_INT_LITERAL:  # int() takes at most 4300 digits
            digits = f"{len(tok)} digits" if len(tok) > 30 else f"`{tok}`"
            raise _Invalid(
                NotAnInteger.diagnostic(
                    f"this integer literal is too large ({digits})",
                    span=self._tok(tok),
                    label=f"above {MAX_INT_LITERAL} (2**63 - 1)",
                    help="integers are 64-bit: write a smaller value, or a float such as `1e19`",
                )
            )
        return int(tok)

    # top level -----------------------------------------------------------------------------------
    def start(self, meta, *stmts):
        span = self._span(meta) if not meta.empty else self.source.span(0, 0)
        return n.Module(span=span, body=tuple(stmts))

    def suite(self, meta, *stmts):
        return tuple(stmts)

    def program_decl(self, meta, name):
        return n.ProgramDecl(span=self._span(meta), name=str(name))

    def world_one(self, meta, size):
        return n.WorldDecl(span=self._span(meta), sizes=(self._int(size),))

    def world_range(self, meta, lo, hi):
        return n.WorldDecl(span=self._span(meta), lo=self._int(lo), hi=self._int(hi))

    def world_open(self, meta, lo):
        return n.WorldDecl(span=self._span(meta), lo=self._int(lo), open=True)

    def world_list(self, meta, *sizes):
        return n.WorldDecl(span=self._span(meta), sizes=tuple(self._int(s) for s in sizes))

    def backend_decl(self, meta, *names):
        return n.BackendDecl(span=self._span(meta), names=tuple(self._ident(t) for t in names))

    def param_decl(self, meta, name, default):
        return n.ParamDecl(span=self._span(meta), name=str(name), default=default)

    def tensor_decl(self, meta, name, dtype, *rest):
        *shape, init = rest
        shape = tuple(s for s in shape if s is not None)
        return n.TensorDecl(span=self._span(meta), name=str(name), dtype=self._ident(dtype), shape=shape, init=init)

    def group_list(self, meta, name, *members):
        return n.GroupDecl(span=self._span(meta), name=str(name), members=tuple(members))

    def group_for(self, meta, name, members):
        return n.GroupDecl(span=self._span(meta), name=str(name), members=(members,))

    def group_split(self, meta, name, key):
        return n.GroupDecl(span=self._span(meta), name=str(name), split_key=key)

    def mesh_decl(self, meta, name, *dims):
        return n.MeshDecl(span=self._span(meta), name=str(name), dims=tuple(dims))

    def mesh_dim(self, meta, name, size):
        return n.MeshDim(span=self._span(meta), name=str(name), size=size)

    def table_list(self, meta, name, *entries):
        return n.TableDecl(span=self._span(meta), name=str(name), entries=tuple(entries))

    def table_for(self, meta, name, entries):
        return n.TableDecl(span=self._span(meta), name=str(name), entries=(entries,))

    def let_stmt(self, meta, name, value):
        return n.Let(span=self._span(meta), name=str(name), value=value)

    # statements ----------------------------------------------------------------------------------
    def assign_stmt(self, meta, target, op, value):
        span = self._span(meta)
        if isinstance(value, n.NewGroup):
            if op != "=" or not isinstance(target, n.Name):
                raise _Invalid(
                    UnexpectedToken.diagnostic(
                        "`new_group` makes a group named with `g = new_group [...]`",
                        span=target.span,
                        label="expected a plain group name and `=`",
                        help="write `g = new_group [0, 1]`, then `all_reduce x in g`",
                    )
                )
            return replace(value, name=n.Ident(span=target.span, name=target.id), span=span)
        if isinstance(value, (n.Send, n.Recv, n.Collective)):
            handle = self._handle(target, op, "isend x to 1")
            if isinstance(value, (n.Send, n.Recv)) and value.blocking:
                word = "send" if isinstance(value, n.Send) else "recv"
                raise _Invalid(
                    MisusedHandle.diagnostic(
                        f"a blocking `{word}` returns no handle",
                        span=value.span,
                        label=f"`{word}` completes before the next statement",
                        help=f"use `i{word}` for a request you `wait` on later",
                    )
                )
            return replace(value, handle=handle, span=span)
        return n.Assign(span=span, target=target, op=str(op), value=value)

    def _handle(self, target, op, example: str) -> n.HandleRef:
        """The handle an op is bound to: `h` or `h[i]`, with `=`."""
        if op == "=" and isinstance(target, n.Name):
            return n.HandleRef(span=target.span, name=target.id)
        if op == "=" and isinstance(target, n.Index) and isinstance(target.value, n.Name):
            return n.HandleRef(span=target.span, name=target.value.id, index=target.index)
        raise _Invalid(
            MisusedHandle.diagnostic(
                "a communication op can only be bound to a handle with `h = OP` or `h[i] = OP`",
                span=target.span,
                label="expected a handle name (or `h[i]`) and `=`",
                help=f"write `h = {example}`, then `wait h`",
            )
        )

    def comm_stmt(self, meta, op):
        return op

    def call_stmt(self, meta, expr):
        """Only `NAME(args)` stands alone on a line: any other expression there does nothing."""
        if isinstance(expr, n.Call) and isinstance(expr.func, n.Name):
            name = n.Ident(span=expr.func.span, name=expr.func.id)
            return n.CallStmt(span=self._span(meta), name=name, args=expr.args)
        raise _Invalid(
            UnexpectedToken.diagnostic(
                "an expression on its own is not a statement",
                span=self._span(meta),
                label="expected `=`, `+=`, ... or a call of a `def`",
                help="assign it (`x = ...`), or call a function defined with `def NAME(...):`",
            )
        )

    def new_group_op(self, meta, members):
        return n.NewGroup(span=self._span(meta), name=None, members=members)

    def _p2p(self, cls, meta, buffer, peer, tag, group, blocking):
        return cls(span=self._span(meta), buffer=buffer, peer=peer, tag=tag, group=group, blocking=blocking)

    def send_op(self, meta, buffer, peer, tag, group):
        return self._p2p(n.Send, meta, buffer, peer, tag, group, True)

    def recv_op(self, meta, buffer, peer, tag, group):
        return self._p2p(n.Recv, meta, buffer, peer, tag, group, True)

    def recv_any(self, meta, buffer, tag, group):
        return self._p2p(n.Recv, meta, buffer, None, tag, group, True)

    def irecv_any(self, meta, buffer, tag, group):
        return self._p2p(n.Recv, meta, buffer, None, tag, group, False)

    def isend_op(self, meta, buffer, peer, tag, group):
        return self._p2p(n.Send, meta, buffer, peer, tag, group, False)

    def irecv_op(self, meta, buffer, peer, tag, group):
        return self._p2p(n.Recv, meta, buffer, peer, tag, group, False)

    def tag(self, meta, expr):
        return expr

    def group_ref(self, meta, name, dim):
        return n.GroupRef(span=self._span(meta), name=str(name), dim=str(dim) if dim is not None else None)

    def redop(self, meta, name, scale):
        return n.RedOp(span=self._span(meta), name=self._ident(name), scale=scale)

    def splits(self, meta, in_sizes, out_sizes):
        computed = any(isinstance(x, n.ListFor) for x in in_sizes + out_sizes)  # its length: at expansion
        if len(in_sizes) != len(out_sizes) and not computed:
            raise _Invalid(
                InvalidView.diagnostic(
                    "`splits` needs two lists of the same length (input, output)",
                    span=self._span(meta),
                    label=f"{len(in_sizes)} input sizes, {len(out_sizes)} output sizes",
                    help="give one input and one output size per member of the group",
                )
            )
        return in_sizes, out_sizes

    def split_sizes(self, meta, *exprs):
        return tuple(exprs)

    def split_for(self, meta, values):
        return (values,)

    def list_for(self, meta, value, var, lo, hi):
        return n.ListFor(span=self._span(meta), value=value, var=str(var), lo=lo, hi=hi)

    def one_buffer(self, meta, view):
        return (view,), False

    def buffer_list(self, meta, *views):
        return tuple(views), True

    def __default__(self, data, children, meta):
        """A collective's rule, `<kind>_op`: its kind module says what its parts mean (`Kind.statement`)."""
        kind = KINDS.get(data.removesuffix("_op")) if data.endswith("_op") else None
        if kind is None:
            return super().__default__(data, children, meta)
        return n.Collective(span=self._span(meta), op=kind.name, **kind.statement(*children))

    def handle_ref(self, meta, name, index):
        return n.HandleRef(span=self._span(meta), name=str(name), index=index)

    def wait_handles(self, meta, *handles):
        return n.Wait(span=self._span(meta), handles=tuple(handles))

    def wait_all(self, meta, array):
        return n.Wait(span=self._span(meta), all=True, array=self._ident(array) if array is not None else None)

    def expect_stmt(self, meta, cond):
        return n.Expect(span=self._span(meta), cond=cond)

    def print_stmt(self, meta, *views):
        return n.Print(span=self._span(meta), views=tuple(views))

    def _block(self, meta, body) -> Span:
        """A compound statement ends with its last statement, not with the blank and comment lines after it."""
        return self.source.span(meta.start_pos, body[-1].span.end)

    def for_stmt(self, meta, var, lo, hi, body):
        return n.For(span=self._block(meta, body), var=str(var), lo=lo, hi=hi, body=body)

    def while_stmt(self, meta, cond, body):
        return n.While(span=self._block(meta, body), cond=cond, body=body)

    def on_stmt(self, meta, cond, body, *rest):
        *elifs, orelse = rest
        first = n.Branch(span=self._block(meta, body), cond=cond, body=body)
        last = orelse or (elifs[-1].body if elifs else body)
        return n.On(span=self._block(meta, last), branches=(first, *elifs), orelse=orelse or ())

    def else_on(self, meta, cond, body):
        return n.Branch(span=self._block(meta, body), cond=cond, body=body)

    def else_(self, meta, body):
        return body

    def batch_stmt(self, meta, target, op, body):
        handle = None if target is None else self._handle(target, op, "batch:")
        return n.Batch(span=self._block(meta, body), body=body, handle=handle)

    def coalesced_stmt(self, meta, target, op, body):
        handle = None if target is None else self._handle(target, op, "coalesced:")
        return n.Coalesced(span=self._block(meta, body), body=body, handle=handle)

    def def_stmt(self, meta, name, *rest):
        *params, body = rest
        params = tuple(self._ident(p) for p in params if p is not None)
        return n.FunctionDef(span=self._block(meta, body), name=self._ident(name), params=params, body=body)

    # expressions ---------------------------------------------------------------------------------
    def int_lit(self, meta, tok):
        return n.IntLit(span=self._tok(tok), value=self._int(tok))

    def float_lit(self, meta, tok):
        return n.FloatLit(span=self._tok(tok), value=float(tok))

    def true_lit(self, meta):
        return n.BoolLit(span=self._span(meta), value=True)

    def false_lit(self, meta):
        return n.BoolLit(span=self._span(meta), value=False)

    def name(self, meta, tok):
        return n.Name(span=self._tok(tok), id=str(tok))

    def attr(self, meta, value, name):
        return n.Attr(span=self._span(meta), value=value, attr=str(name))

    def call(self, meta, func, *args):
        return n.Call(span=self._span(meta), func=func, args=tuple(a for a in args if a is not None))

    def slice(self, meta, value, lo, hi):
        return n.Slice(span=self._span(meta), value=value, lo=lo, hi=hi)

    def index(self, meta, value, idx):
        return n.Index(span=self._span(meta), value=value, index=idx)

    def unary(self, meta, op, operand):
        return n.Unary(span=self._span(meta), op=str(op), operand=operand)

    def not_(self, meta, operand):
        return n.Unary(span=self._span(meta), op="not", operand=operand)

    def _chain(self, meta, items, op=None):
        """Fold `a op b op c` left-associatively; `op` given for keyword operators (and/or)."""
        # The chain's meta includes the parentheses round its first and last operands; an operand's own
        # span does not, so `(rank + 1) % world` would start inside the parenthesis. Each fold ends after
        # the parentheses its right operand opened.
        text, k, step = self.source.text, 0, 1 if op else 2
        left = items[0]
        while k + step < len(items):
            sym = op or str(items[k + 1])
            right = items[k + step]
            k += step
            end = right.span.end if k + step < len(items) else meta.end_pos
            while (
                text.count("(", meta.start_pos, end) > text.count(")", meta.start_pos, end) and text.find(")", end) >= 0
            ):
                end = text.find(")", end) + 1
            left = n.Binary(span=self.source.span(meta.start_pos, end), op=sym, left=left, right=right)
        return left

    def arith(self, meta, *items):
        return self._chain(meta, items)

    def term(self, meta, *items):
        return self._chain(meta, items)

    def comparison(self, meta, *items):
        return self._chain(meta, items)

    def bit_or(self, meta, *items):
        return self._chain(meta, items)

    def bit_xor(self, meta, *items):
        return self._chain(meta, items)

    def bit_and(self, meta, *items):
        return self._chain(meta, items)

    def shift(self, meta, *items):
        return self._chain(meta, items)

    def or_expr(self, meta, *items):
        return self._chain(meta, [x for pair in zip(items, ["or"] * len(items)) for x in pair][:-1])

    def and_expr(self, meta, *items):
        return self._chain(meta, [x for pair in zip(items, ["and"] * len(items)) for x in pair][:-1])

    def power(self, meta, base, exponent):
        return n.Binary(span=self._span(meta), op="**", left=base, right=exponent)


MAX_NESTING = 100
"""Deepest nesting the passes after the parser take (each recurses once per level): a deeper input is S001."""

# children per operator: `a + b + c` nests 2 deep
_CHAINS = {"arith": 2, "term": 2, "shift": 2, "bit_and": 2, "bit_xor": 2, "bit_or": 2, "and_expr": 1, "or_expr": 1}


def _too_deep(tree: Tree) -> Tree | Token | None:
    """The first node found nested deeper than MAX_NESTING (a left-folded chain counts each operator)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            return node
        if isinstance(node, Tree):
            per_op = _CHAINS.get(node.data)
            inner = depth + 1 + ((len(node.children) - 1) // per_op if per_op else 0)
            stack.extend((child, inner) for child in node.children if child is not None)
    return None


def to_ast(tree, source: SourceFile) -> n.Module:
    deep = _too_deep(tree)
    if deep is not None:
        start = deep.start_pos if isinstance(deep, Token) else deep.meta.start_pos
        raise CommdslError(
            [
                UnexpectedToken.diagnostic(
                    f"this is nested more than {MAX_NESTING} levels deep",
                    span=source.span(start, start + 1),
                    label="too deeply nested",
                    help="split the expression with `let`, or flatten the blocks",
                )
            ]
        )
    try:
        return _ToAst(source).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, _Invalid):
            raise CommdslError([err.orig_exc.diagnostic]) from None
        raise
