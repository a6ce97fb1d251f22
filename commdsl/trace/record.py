"""Record every rank of a real PyTorch script under torch's `fake` process group (torch imported here).

How (issue 16's feasibility study, kept): the parent imports torch once and forks one child per rank.
Each child sets the environment a launcher would (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*,
and mpirun's OMPI_COMM_WORLD_*), replaces every binding of the `torch.distributed` functions it
records (the attribute on `torch.distributed`, and the same function object wherever another module
imported it by name: DeviceMesh imports `init_process_group`, `P2POp` checks `op is isend` against
`distributed_c10d`'s own global), runs the script as `__main__` and sends what it saw to the parent as JSON.
`init_process_group` becomes the `fake` backend, whose calls complete at once without communicating.

Three layers see the calls:

* the wrappers around the public API record each call with its arguments as the user gave them
  (root, peer, group, tag, reduce op, async handle, `batch_isend_irecv` grouping, `wait`);
* a `TorchDispatchMode` records the `c10d` and functional-collective ops nobody called through that
  API (DDP's reducer and FSDP2 issue theirs from C++ or below the API); it also completes their
  `Work` with a real future, because the fake backend's has no value and DDP's reducer asserts one;
  it follows which tensors hold received data through local compute, and logs the script's reads and
  writes of a buffer while an async call of its own still moves it (for R503);
* a `TorchFunctionMode` logs reads of such tensors into Python (`.item()`, `bool(t)`, `.tolist()`)
  and, where there is no GPU, runs `.cuda()` / `device="cuda"` on the CPU (`torch.set_default_device`,
  whose mode sits below this one, is replaced where scripts get it).

One process per rank, not threads (a process holds one default group) and not one process running the
ranks in turn (module state leaks between ranks).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import linecache
import os
import runpy
import signal
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from commdsl.trace.events import Buffer, Call, RankTrace, Read, Site, trace_from_json, trace_to_json

_C10D = dist.distributed_c10d
_COMMDSL_DIR = str(Path(__file__).resolve().parents[1])
_LIBRARY_DIRS = tuple(
    {
        str(Path(p).resolve())
        for p in (
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
            str(Path(torch.__file__).resolve().parents[1]),
        )
    }
) + (_COMMDSL_DIR,)

TESTED_TORCH = ("2.13",)
"""torch minor versions the recorder is tested on: the fake backend's store
(`torch.testing._internal.distributed.fake_pg.FakeStore`), the `c10d::` op schemas and the flight-recorder
format are private and change between versions (docs/trace.md)."""

REDUCE_OPS = ("sum", "product", "min", "max", "band", "bor", "bxor", "avg", "premul_sum")


class RecorderBug(BaseException):
    """A wrapper's own code failed (not the torch call it wraps). A BaseException, so the script's
    `except Exception` does not swallow it; the rank reports it as commdsl's failure."""

    def __init__(self, name: str, site: Site, error: Exception):
        super().__init__(f"commdsl trace could not record `{name}` at {site}: {type(error).__name__}: {error}")


def _raised_here(e: BaseException) -> bool:
    """Whether the innermost frame of the exception is this module's (a torch error comes from torch's)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) == os.path.realpath(__file__)


def _is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    return not path.startswith(_LIBRARY_DIRS)


def user_frame() -> Any:
    """The innermost frame of the user's own code on the stack (None when there is none)."""
    frame: Any = sys._getframe(1)
    while frame is not None and not _is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_site(frame: Any = None) -> Site:
    """The line and columns of the call in the user's innermost frame (`frame`, when the caller has it)."""
    frame = frame if frame is not None else user_frame()
    if frame is None:
        return Site("<unknown>", 1, 1, 1, 1)
    info: Any = inspect.getframeinfo(frame, context=0)
    pos = info.positions
    line = info.lineno
    if pos is not None and pos.lineno is not None and pos.col_offset is not None:
        path = os.path.realpath(info.filename)
        end_line = pos.end_lineno or line
        start = _chars(path, pos.lineno, pos.col_offset) + 1
        end = _chars(path, end_line, pos.end_col_offset if pos.end_col_offset is not None else pos.col_offset) + 1
        return Site(path, pos.lineno, start, end_line, end)
    return Site(os.path.realpath(info.filename), line, 1, line, 1)


def _chars(path: str, line: int, byte_col: int) -> int:
    """Python's columns count UTF-8 bytes; spans count characters."""
    text = linecache.getline(path, line)
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace")) if text else byte_col


_CALL_TEXTS: dict[tuple, tuple[list[str], list[str], dict[str, str]] | None] = {}


def _call_texts(site: Site) -> tuple[list[str], list[str], dict[str, str]] | None:
    """The call written at `site`: its callee's dotted names (`_dotted`), and its positional and keyword
    arguments' source text (None when the site is not one call, or it passes `*args`)."""
    key = (site.path, site.line, site.column, site.end_line, site.end_column)
    if key in _CALL_TEXTS:
        return _CALL_TEXTS[key]
    found = None
    lines = linecache.getlines(site.path)[site.line - 1 : site.end_line]
    if lines:
        if len(lines) == 1:
            text = lines[0][site.column - 1 : site.end_column - 1]
        else:
            text = lines[0][site.column - 1 :] + "".join(lines[1:-1]) + lines[-1][: site.end_column - 1]
        text = text.strip()
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            node = None
        if isinstance(node, ast.Call) and not any(isinstance(x, ast.Starred) for x in node.args):
            callee = _dotted(node.func)
            positional = [ast.get_source_segment(text, x) or "" for x in node.args]
            keywords = {k.arg: ast.get_source_segment(text, k.value) or "" for k in node.keywords if k.arg}
            found = (callee, positional, keywords)
    _CALL_TEXTS[key] = found
    return found


def _dotted(node: ast.expr) -> list[str]:
    """`dist.all_reduce` → ["dist", "all_reduce"]; a part that is not a name is "" (`group().all_reduce` →
    ["", "all_reduce"]: its last name still tells, but it cannot be looked up)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + [node.attr]
    return [""]


def _resolve(names: list[str], frame: Any) -> object:
    """What the dotted names mean in `frame`, read without running any code (no property or `__getattr__`
    of the script's runs); None when a name is not there."""
    missing = object()
    value = frame.f_locals.get(names[0], frame.f_globals.get(names[0], missing)) if names[0] else missing
    for attr in names[1:]:
        if value is missing:
            break
        try:
            value = inspect.getattr_static(value, attr, missing)
        except Exception:  # noqa: BLE001 - an object that refuses introspection: unresolved
            return None
    return None if value is missing else value


def _labels(name: str, functions: tuple, site: Site, frame: Any, args: tuple, kwargs: dict) -> dict[int, str]:
    """id(tensor) → the expression the script passed it as (`grad`, `buf[0:8]`, `outs` for each tensor of a
    list), when the call at `site` is this function's own call: by its name, or through an alias the
    user's `frame` binds to one of `functions` (`rs = dist.reduce_scatter_single; rs(out, x)`); {} otherwise
    (DDP's internal broadcast, called from the line `model(x)`)."""
    texts = _call_texts(site)
    if texts is None:
        return {}
    if texts[0][-1] != name and (frame is None or not any(_resolve(texts[0], frame) is f for f in functions)):
        return {}
    out: dict[int, str] = {}
    pairs = list(zip(args, texts[1])) + [(v, texts[2].get(k, "")) for k, v in kwargs.items()]
    for value, text in pairs:
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and text:
                out[id(t)] = text
    return out


def _user_traceback(exc: BaseException) -> str:
    """The exception with the user's frames only (never torch's, the standard library's or ours)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_user_file(f.filename)]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines.extend(traceback.format_list(frames))
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(lines)


def _dtype(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _redop(op) -> str:
    if isinstance(op, str):
        return op.lower()
    if type(op).__name__ == "ScriptObject":  # a c10d op's boxed ReduceOp: `op()` is its RedOpType's number
        try:
            number = int(op.op())
        except Exception:  # noqa: BLE001 - unreadable: the default
            return "sum"
        for name in REDUCE_OPS:
            value = getattr(dist.ReduceOp.RedOpType, name.upper(), None)
            if value is not None and int(value) == number:
                return name
        return "sum"
    for name in REDUCE_OPS:
        value = getattr(dist.ReduceOp, name.upper(), None)
        if value is not None and op == value:
            return name
    return "sum"


# ---- one rank's recording --------------------------------------------------------------------------


@dataclass
class _State:
    rank: int
    world: int
    trace: RankTrace
    buffers: dict  # (storage, dtype) → slot
    tainted: set
    live: set = field(default_factory=set)  # the slots of live buffers
    labels: dict = field(default_factory=dict)  # id(tensor) → its argument's text, during one API call
    next_req: int = 0
    in_flight: dict = field(default_factory=dict)  # request → its call's buffers by slot, until it is waited
    inside: int = 0  # >0 while one of our wrappers runs: nested calls are its own, not the user's
    processes_started: int = 0
    spawn_nprocs: int | None = None


_STATE: _State | None = None


def _state() -> _State:
    assert _STATE is not None
    return _STATE


def _storage(t) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse) is never tracked
        return 0


def _buf(t) -> Buffer:
    """The tensor as a view of a buffer: one id per live (storage, dtype), the tensor's elements at its
    storage offset. Ids are slots, the lowest free one when a storage is first seen, freed when the tensor
    that owns it (a view's base) dies, so a loop that makes a fresh tensor each step names it alike each
    step (and every rank alike) wherever the allocator puts it; slices of one tensor are views of one
    buffer, so overlapping ones in flight are seen to overlap."""
    st = _state()
    key = (_storage(t), _dtype(t))
    slot = st.buffers.get(key)
    if slot is None:
        slot = next(s for s in range(len(st.live) + 1) if s not in st.live)
        st.buffers[key] = slot
        st.live.add(slot)
        owner = t._base if t._base is not None else t
        weakref.finalize(owner, _release, st, key, slot)
    label = st.labels.get(id(t), "")
    return Buffer(slot, int(t.numel()), _dtype(t), int(t.storage_offset()), label, tuple(map(int, t.shape)))


def _release(st: _State, key: tuple, slot: int) -> None:
    if st.buffers.get(key) == slot:
        del st.buffers[key]
        st.live.discard(slot)


def _taint(*tensors) -> None:
    st = _state()
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st.tainted.add(_storage(t))


def _group_ranks(group) -> tuple[int, ...] | None:
    if group is None or group is dist.GroupMember.WORLD:
        return None
    ranks = tuple(dist.get_process_group_ranks(group))
    return None if ranks == tuple(range(_state().world)) else ranks


def _global(group, rank: int | None) -> int | None:
    if rank is None:
        return None
    ranks = _group_ranks(group)
    return rank if ranks is None else ranks[rank]


def _record(call: Call) -> None:
    _state().trace.events.append(call)


class _Handle:
    """The Work a recorded async call returns: `wait()` is recorded; everything else is the real Work's."""

    def __init__(self, work, req: int | None, batch: tuple | None = None, keep: tuple = ()):
        self._work, self._req, self._batch, self._waited = work, req, batch, False
        # the call's tensors stay alive until the wait, as a real Work keeps them: a buffer in flight
        # keeps its name even if the script drops it (`reqs.append(dist.irecv(torch.empty(n), src))`)
        self._keep = keep

    def wait(self, *args, **kwargs):
        if not self._waited and _STATE is not None:
            if self._batch is None:
                _STATE.in_flight.pop(self._req, None)
                _record(Call("wait", user_site(), reqs=(self._req,)))
            else:
                _batch_waited(*self._batch)
        self._keep = ()
        self._waited = True
        return True

    def is_completed(self):
        return True

    def get_future(self):
        """torch's `work.get_future()`: whoever holds the future waits on it (a DDP comm hook returns it to DDP's
        reducer, which waits in C++, below the API), so the request counts as waited here; it was never waited
        to the trace, and a DDP script with `allreduce_hook` got R501 and R503 on its buckets."""
        self.wait()
        if self._work is None:  # a receive from any source, not run: nothing to wait on
            done: torch.futures.Future = torch.futures.Future()
            done.set_result(None)
            return done
        return self._work.get_future()

    def __getattr__(self, name):
        return getattr(self._work, name)


def _async(work, call: Call, async_op: bool, keep: tuple = ()):
    if not async_op:
        _record(call)
        return None
    st = _state()
    call.req = st.next_req
    st.next_req += 1
    st.in_flight[call.req] = _buffers(call)
    _record(call)
    return _Handle(work, call.req, keep=keep)


def _buffers(call: Call) -> dict[int, Buffer]:
    """The buffers an async call moves (a batch's ops' too), by slot: in flight until the call is waited."""
    bufs = [*call.inputs, *call.outputs, *(b for op in call.ops for b in op.inputs)]
    return {b.id: b for b in bufs if b.id >= 0}


def _note_access(func, args, kwargs) -> None:
    """An op of the script's on a buffer an async call is still moving: a `read` or `write` event (the checker's
    R503, a race with the transport, as `check` finds it in a program). A view op (`x[0:4]`, `.view`) touches no
    data and is not one; consecutive accesses of one kind from one line to one view are one."""
    st = _state()
    flying = {slot: b for bufs in st.in_flight.values() for slot, b in bufs.items()}
    schema = func._schema
    if any(r.alias_info is not None for r in schema.returns) and not any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
    ):
        return
    given = list(zip(schema.arguments, args)) + [(a, kwargs[a.name]) for a in schema.arguments if a.name in kwargs]
    for arg, value in given:
        write = arg.alias_info is not None and arg.alias_info.is_write
        for t in _flat(value):
            if not isinstance(t, torch.Tensor):
                continue
            held = flying.get(st.buffers.get((_storage(t), _dtype(t))))
            if held is None:
                continue
            access = Call("write" if write else "read", user_site(), inputs=(replace(_buf(t), label=held.label),))
            if not _repeats(st.trace.events, access):
                _record(access)


def _repeats(events: list, access: Call) -> bool:
    """The last event is the same access from the same line (a loop over the buffer's elements, say)."""
    last = events[-1] if events else None
    return isinstance(last, Call) and (last.op, last.site, last.inputs) == (access.op, access.site, access.inputs)


def _wrap_api(name: str, original, handler):
    sig = inspect.signature(original)

    def wrapper(*args, **kwargs):
        st = _STATE
        if st is None or st.inside:
            return original(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        frame = user_frame()
        site = user_site(frame)
        st.inside += 1
        st.labels = _labels(name, (wrapper, original), site, frame, args, kwargs)
        del frame  # a frame kept alive keeps every local of the script's
        try:
            return handler(original, a, site)
        except Exception as e:
            if _raised_here(e):  # our recording failed, not the call: never passed off as the script's error
                raise RecorderBug(name, site, e) from e
            raise
        finally:
            st.inside -= 1
            st.labels = {}

    wrapper.__name__ = name
    wrapper.__qualname__ = name
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__signature__ = sig  # type: ignore[attr-defined]
    return wrapper


def _p2p(is_send: bool, blocking: bool):
    def handler(original, a, site):
        group = a.get("group")
        t = a["tensor"]
        peer_arg = "dst" if is_send else "src"
        peer = a.get(peer_arg)
        gpeer = a.get(f"group_{peer_arg}")
        if peer is None and gpeer is not None:
            peer = _global(group, gpeer)
        op = ("send" if is_send else "recv") if blocking else ("isend" if is_send else "irecv")
        buf = _buf(t)
        call = Call(op, site, group=_group_ranks(group), inputs=(buf,), peer=peer, tag=int(a.get("tag") or 0))
        if peer is None:  # recv from any source: not run (the fake backend has no sender to name); the
            _taint(t)  # bridge gives it the sender it is checked with, and the script gets a stand-in
            st = _state()
            if blocking:
                _record(call)
                return 0 if st.rank != 0 else min(1, st.world - 1)
            return _async(None, call, True, (t,))
        result = original(**a)
        if not is_send:
            _taint(t)
        if blocking:
            _record(call)
            return peer if not is_send else result
        return _async(result, call, True, (t,))

    return handler


def _batch(original, a, site):
    ops = []
    for p in a["p2p_op_list"]:
        is_send = getattr(p.op, "__name__", "") in ("isend", "send")
        ops.append(
            Call(
                "isend" if is_send else "irecv",
                site,
                group=_group_ranks(p.group),
                inputs=(_buf(p.tensor),),
                peer=p.peer,
                tag=int(p.tag or 0),
            )
        )
        if not is_send:
            _taint(p.tensor)
    works = list(original(**a) or [])
    call = Call("batch", site, ops=tuple(ops))
    if works:  # its request: waited when the script has waited every work of the list
        st = _state()
        call.req = st.next_req
        st.next_req += 1
        st.in_flight[call.req] = _buffers(call)
    _record(call)
    left = [len(works)]
    return [_Handle(w, call.req, batch=(call, left)) for w in works]


def _batch_waited(call: Call, left: list[int]) -> None:
    """One work of a batch waited. With the last one, the batch's request is: a `batch:` that waits at its end
    when nothing came between, else a `wait` of the batch bound to a handle (its buffers in flight until here)."""
    left[0] -= 1
    if left[0]:
        return
    events = _state().trace.events
    assert call.req is not None  # a batch that returned works has a request
    _state().in_flight.pop(call.req, None)
    if events and events[-1] is call:
        call.req = None
    else:
        _record(Call("wait", user_site(), reqs=(call.req,)))


def _root(a, group, name: str) -> int | None:
    value = a.get(name)
    return value if value is not None else _global(group, a.get(f"group_{name}"))


def _fill_all_gather(c: Call, a) -> list:
    if "tensor_list" in a:
        c.inputs, c.outputs, c.outputs_listed = (_buf(a["tensor"]),), tuple(map(_buf, a["tensor_list"])), True
        return list(a["tensor_list"])
    c.inputs, c.outputs = (_buf(a["input_tensor"]),), (_buf(a["output_tensor"]),)
    return [a["output_tensor"]]


def _fill_gather(c: Call, a) -> list:
    c.inputs = (_buf(a["tensor"]),)
    c.root = _root(a, a.get("group"), "dst")
    gl = a.get("gather_list")
    if gl:
        c.outputs, c.outputs_listed = tuple(map(_buf, gl)), True
        return list(gl)
    return []


def _fill_scatter(c: Call, a) -> list:
    c.outputs = (_buf(a["tensor"]),)
    c.root = _root(a, a.get("group"), "src")
    sl = a.get("scatter_list")
    if sl:
        c.inputs, c.inputs_listed = tuple(map(_buf, sl)), True
    return [a["tensor"]]


def _fill_reduce_scatter(c: Call, a) -> list:
    c.redop = _redop(a.get("op"))
    if "input_list" in a:
        c.inputs, c.inputs_listed = tuple(map(_buf, a["input_list"])), True
    else:
        c.inputs = (_buf(a["input"]),)
    c.outputs = (_buf(a["output"]),)
    return [a["output"]]


def _rows(t) -> int:
    """Elements per row of dimension 0 (splits count rows; the emitted tensors are flat)."""
    return t.numel() // max(1, t.shape[0]) if t.dim() else 1


def _fill_all_to_all(c: Call, a) -> list:
    if "output_tensor_list" in a:  # the list form: one flat exchange with one split per tensor
        ins, outs = a["input_tensor_list"], a["output_tensor_list"]
        c.inputs, c.outputs = tuple(map(_buf, ins)), tuple(map(_buf, outs))
        c.inputs_listed = c.outputs_listed = True
        return list(outs)
    c.inputs, c.outputs = (_buf(a["input"]),), (_buf(a["output"]),)
    if a.get("input_split_sizes"):
        c.in_splits = tuple(int(s) * _rows(a["input"]) for s in a["input_split_sizes"])
    if a.get("output_split_sizes"):
        c.out_splits = tuple(int(s) * _rows(a["output"]) for s in a["output_split_sizes"])
    return [a["output"]]


def _fill_in_place(c: Call, a) -> list:
    t = a["tensor"]
    c.inputs = (_buf(t),)
    if c.op in ("all_reduce", "reduce"):
        c.redop = _redop(a.get("op"))
    if c.op == "broadcast":
        c.root = _root(a, a.get("group"), "src")
    if c.op == "reduce":
        c.root = _root(a, a.get("group"), "dst")
    return [t]


_FILL = {
    "all_reduce": _fill_in_place,
    "broadcast": _fill_in_place,
    "reduce": _fill_in_place,
    "all_gather": _fill_all_gather,
    "gather": _fill_gather,
    "scatter": _fill_scatter,
    "reduce_scatter": _fill_reduce_scatter,
    "all_to_all": _fill_all_to_all,
}


def _collective(kind: str):
    def handler(original, a, site):
        c = Call(kind, site, group=_group_ranks(a.get("group")))
        written = _FILL[kind](c, a)
        fake_args, copy_back = _stand_ins(kind, a)
        work = original(**fake_args)
        if copy_back is not None:
            copy_back()
        _taint(*written)
        return _async(work, c, bool(a.get("async_op")), tuple(_flat(list(a.values()))))

    return handler


def _stand_ins(kind: str, a: dict):
    """(the arguments for torch's fake process group, what to do after it, or None). The fake copies this
    rank's input into every buffer of `all_gather`'s output list, and input j into output j of `all_to_all`'s,
    which fails for the uneven sizes torch's NCCL takes (one broadcast per member; one send and receive per
    pair): it gets outputs shaped as those inputs instead, copied into the script's where the elements fit.
    The others keep what they held: the fake's data is made up either way. The one-tensor forms of
    `all_gather` and `reduce_scatter` get their tensors flat: NCCL takes any shapes with the elements (the
    fake's shape arithmetic failed on a `[4, 2]` input for a `[4]` output), and the shapes Gloo refuses are
    recorded and reported (C321) rather than raised here."""
    if kind in ("all_gather", "reduce_scatter") and "tensor_list" not in a and "input_list" not in a:
        keys = ("output_tensor", "input_tensor") if kind == "all_gather" else ("output", "input")
        if all(a[k].dim() == 1 for k in keys):
            return a, None
        flat = {k: a[k].reshape(-1) for k in keys}
        out = keys[0]

        def copy_flat() -> None:
            if flat[out].data_ptr() != a[out].data_ptr():  # reshaped by a copy: a view could not be made
                a[out].copy_(flat[out].view_as(a[out]))

        return dict(a, **flat), copy_flat
    if kind == "all_gather" and "tensor_list" in a:
        key, outs, shaped = "tensor_list", a["tensor_list"], [a["tensor"]] * len(a["tensor_list"])
    elif kind == "all_to_all" and "output_tensor_list" in a:
        key, outs, shaped = "output_tensor_list", a["output_tensor_list"], a["input_tensor_list"]
    else:
        return a, None
    if len(outs) == len(shaped) and all(o.shape == x.shape for o, x in zip(outs, shaped)):
        return a, None
    stand_in = [torch.empty_like(x) for x in shaped]

    def copy_back() -> None:
        for out, got in zip(outs, stand_in):
            if out.numel() == got.numel():
                out.copy_(got.view_as(out))

    return dict(a, **{key: stand_in}), copy_back


def _barrier(original, a, site):
    work = original(**a)
    return _async(work, Call("barrier", site, group=_group_ranks(a.get("group"))), bool(a.get("async_op")))


def _object(kind: str):
    """Object collectives: recorded as the collective they are built on, not executed (the fake backend's
    data would not unpickle)."""

    def handler(original, a, site):
        st = _state()
        group = a.get("group")
        c = Call(kind, site, group=_group_ranks(group), origin="object")
        one = Buffer(-1, 1, "int64")
        size = len(_group_ranks(group) or range(st.world))
        if kind == "broadcast":
            lst = a["object_list"]
            c.inputs = (Buffer(-1, max(1, len(lst)), "int64"),)
            src = a.get("src")
            c.root = src if src is not None else _global(group, a.get("group_src"))
        elif kind == "all_gather":
            c.inputs, c.outputs = (one,), (Buffer(-2, size, "int64"),)
            lst = a["object_list"]
            for i in range(len(lst)):
                lst[i] = a["obj"]
        elif kind == "gather":
            dst = a.get("dst")
            c.root = dst if dst is not None else _global(group, a.get("group_dst"))
            c.inputs, c.outputs = (one,), (Buffer(-2, size, "int64"),)
            lst = a.get("object_gather_list")
            if lst is not None:
                for i in range(len(lst)):
                    lst[i] = a["obj"]
        elif kind == "scatter":
            src = a.get("src")
            c.root = src if src is not None else _global(group, a.get("group_src"))
            c.inputs, c.outputs = (Buffer(-2, size, "int64"),), (one,)
        elif kind in ("send", "recv"):
            lst = a["object_list"]
            peer_arg = "dst" if kind == "send" else "src"
            peer = a.get(peer_arg)
            if peer is None and a.get(f"group_{peer_arg}") is not None:
                peer = _global(group, a.get(f"group_{peer_arg}"))
            c.peer = peer
            c.inputs = (Buffer(-1, max(1, len(lst)), "int64"),)
        _record(c)
        return None

    return handler


# ---- init, launchers, CUDA -------------------------------------------------------------------------


def _init(original, a, site):
    st = _state()
    from torch.testing._internal.distributed.fake_pg import FakeStore

    asked = a.get("backend")
    st.trace.backend = str(asked) if asked is not None else None
    ws = a.get("world_size")
    if ws not in (None, -1) and int(ws) != st.world:
        st.trace.warnings.append(f"{site}: init_process_group(world_size={ws}) traced at --world {st.world}")
    rk = a.get("rank")
    if rk not in (None, -1) and int(rk) != st.rank:
        st.trace.warnings.append(f"{site}: init_process_group(rank={rk}) on the process traced as rank {st.rank}")
    if dist.is_initialized():
        return None
    return original(backend="fake", store=FakeStore(), rank=st.rank, world_size=st.world)


class _Process:
    """`multiprocessing.Process` in a traced script: the k-th process started runs here when k is this
    rank (its target then is this rank's program); the others are not started."""

    def __init__(self, group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None):
        self._target, self._args, self._kwargs = target, tuple(args), dict(kwargs or {})
        self.name, self.daemon, self.exitcode, self.pid = name, daemon, None, os.getpid()

    def run(self):
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def start(self):
        st = _state()
        index = st.processes_started
        st.processes_started += 1
        if index == st.rank:
            self.run()  # a subclass's own run(), or the target
        self.exitcode = 0

    def join(self, timeout=None):
        return None

    def is_alive(self):
        return False

    def terminate(self):
        return None

    kill = terminate


class _SpawnContext:
    """What `mp.spawn(..., join=False)` returns: this rank's process already ran, so joining is done."""

    def join(self, timeout=None):
        return True

    def pids(self):
        return [os.getpid()]


def _spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    st = _state()
    st.spawn_nprocs = int(nprocs)
    if int(nprocs) != st.world:
        st.trace.warnings.append(
            f"{user_site()}: mp.spawn(nprocs={nprocs}) traced at --world {st.world}: "
            "each traced rank runs fn(rank) as the spawned process of that index would"
        )
    fn(st.rank, *args)
    return None if join else _SpawnContext()


def _start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    return _spawn(fn, args, nprocs, join, daemon, start_method)


def _noop():
    """A fresh do-nothing function (one object per replaced function: torch's tracing rules key on them)."""

    def noop(*args, **kwargs):
        return None

    return noop


_CUDA_NOTE = "no GPU here: CUDA tensors, modules and device meshes of the script ran on the CPU"


class _Functions(TorchFunctionMode):
    """Reads of received values into Python, and CUDA placement on a machine without GPUs."""

    def __init__(self, shim_cuda: bool):
        super().__init__()
        self.shim_cuda = shim_cuda
        self.reads = {
            torch.Tensor.item: "item()",
            torch.Tensor.tolist: "tolist()",
            torch.Tensor.__bool__: "bool()",
            torch.Tensor.__int__: "int()",
            torch.Tensor.__float__: "float()",
            torch.Tensor.__index__: "index",
        }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        what = self.reads.get(func)
        st = _STATE
        if what is not None and st is not None and args and isinstance(args[0], torch.Tensor):
            if _storage(args[0]) in st.tainted:
                st.trace.events.append(Read(user_site(), what))
        if self.shim_cuda:
            if func is torch.Tensor.cuda:
                _note_no_gpu()
                return args[0]
            if "device" in kwargs and _is_cuda(kwargs["device"]):
                _note_no_gpu()
                kwargs = {**kwargs, "device": "cpu"}
            if func is torch.Tensor.to and len(args) > 1 and type(args[1]) is int:  # t.to(rank): a GPU index
                _note_no_gpu()
                args = (args[0], "cpu", *args[2:])
            if func is torch.Tensor.to and any(_is_cuda(x) for x in args[1:]):
                _note_no_gpu()
                args = tuple("cpu" if _is_cuda(x) else x for x in args)
        return func(*args, **kwargs)


def _note_no_gpu() -> None:
    """Say once per recording that the script's CUDA placement ran on the CPU."""
    st = _STATE
    if st is not None and _CUDA_NOTE not in st.trace.notes:
        st.trace.notes.append(_CUDA_NOTE)


def _is_cuda(x) -> bool:
    if isinstance(x, torch.device):
        return x.type == "cuda"
    if isinstance(x, str):
        return x.startswith("cuda")
    if isinstance(x, int) and not isinstance(x, bool):
        return False
    return False


# ---- below the API: c10d and functional collectives ------------------------------------------------


def _pg_ranks(obj) -> tuple[int, ...] | None:
    pg = torch._C._distributed_c10d.ProcessGroup.unbox(obj) if type(obj).__name__ == "ScriptObject" else obj
    return _group_ranks(pg)


def _named_group(name: Any):
    return _C10D._resolve_process_group(name)


def _completed(out, value):
    """A c10d op's (tensors, work) with a Work that completes with `value` (the fake backend's has none)."""
    fut = torch.futures.Future()
    fut.set_result(value)
    return (out[0], torch._C._distributed_c10d._create_work_from_future(fut).boxed())


class _Dispatch(TorchDispatchMode):
    """Collectives issued below the API (DDP, FSDP2, DTensor, functional collectives), which tensors hold
    received data (an op with such an input makes such outputs), and the script's ops on buffers in flight."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        st = _STATE
        ns = func.namespace
        name = func._schema.name.split("::")[-1]
        if st is not None and not st.inside and ns in ("c10d", "_c10d_functional"):
            try:
                self._record(ns, name, args)
            except Exception as e:  # noqa: BLE001 - our failure must not become the script's
                st.trace.warnings.append(f"{user_site()}: {ns}::{name} could not be recorded ({type(e).__name__}: {e})")
        elif st is not None and st.in_flight and not st.inside and ns == "aten":
            _note_access(func, args, kwargs)
        out = func(*args, **kwargs)
        if st is None:
            return out
        if ns == "c10d" and isinstance(out, tuple) and len(out) == 2 and type(out[1]).__name__ == "ScriptObject":
            if name in ("allreduce_", "broadcast_", "allgather_", "reduce_scatter_", "alltoall_", "recv_"):
                _taint(*_flat(out[0]))
            else:
                _taint(*_flat(args[0]))
            out = _completed(out, out[0])
        elif ns == "_c10d_functional":
            _taint(*_flat(out))
        elif st.tainted and _any_tainted(args, kwargs):
            _taint(*_flat(out))
            if name.endswith("_") or "out" in kwargs:
                _taint(*_flat(args[:1]), *_flat(list(kwargs.values())))
        return out

    def _record(self, ns: str, name: str, args) -> None:
        site = user_site()
        if ns == "_c10d_functional" and name in ("wait_tensor", "_wrap_tensor_autograd"):
            return
        c = (_c10d_call if ns == "c10d" else _functional_call)(name, args, site)
        if c is None:
            _state().trace.warnings.append(f"{site}: {ns}::{name} is not checked (the trace has no form for it)")
            return
        c.origin = "c10d"
        _record(c)


def _c10d_call(name: str, args, site: Site) -> Call | None:
    """A `c10d::` op (what ProcessGroup methods dispatch to) as a Call."""
    if name == "allreduce_":
        return Call("all_reduce", site, _pg_ranks(args[1]), inputs=tuple(map(_buf, args[0])), redop=_redop(args[2]))
    if name == "_allgather_base_":
        return Call("all_gather", site, _pg_ranks(args[2]), inputs=(_buf(args[1]),), outputs=(_buf(args[0]),))
    if name == "allgather_":
        c = Call("all_gather", site, _pg_ranks(args[2]), inputs=(_buf(args[1][0]),))
        c.outputs, c.outputs_listed = tuple(map(_buf, args[0][0])), True
        return c
    if name == "_reduce_scatter_base_":
        c = Call("reduce_scatter", site, _pg_ranks(args[2]), inputs=(_buf(args[1]),), outputs=(_buf(args[0]),))
        c.redop = _redop(args[3])
        return c
    if name == "reduce_scatter_":
        c = Call("reduce_scatter", site, _pg_ranks(args[2]), outputs=(_buf(args[0][0]),))
        c.inputs, c.inputs_listed, c.redop = tuple(map(_buf, args[1][0])), True, _redop(args[3])
        return c
    if name == "broadcast_":
        group = _pg_ranks(args[1])
        c = Call("broadcast", site, group, inputs=tuple(map(_buf, args[0])))
        c.root = int(args[2]) if group is None else group[int(args[2])]
        return c
    if name == "alltoall_base_":
        return Call("all_to_all", site, _pg_ranks(args[2]), inputs=(_buf(args[1]),), outputs=(_buf(args[0]),))
    if name == "barrier":
        return Call("barrier", site, _pg_ranks(args[1]))
    if name in ("send", "recv_"):
        group = _pg_ranks(args[1])
        peer = int(args[2]) if group is None else group[int(args[2])]
        c = Call("send" if name == "send" else "recv", site, group, inputs=tuple(map(_buf, args[0])))
        c.peer, c.tag = peer, int(args[3])
        return c
    return None


def _functional_call(name: str, args, site: Site) -> Call | None:
    """A functional collective (`_c10d_functional::`, DTensor's) as a Call; its output is a fresh tensor."""
    if name == "all_reduce":
        return Call(
            "all_reduce", site, _group_ranks(_named_group(args[2])), inputs=(_buf(args[0]),), redop=_redop(args[1])
        )
    t = args[0]
    if name == "all_gather_into_tensor":
        c = Call("all_gather", site, _group_ranks(_named_group(args[2])), inputs=(_buf(t),))
        c.outputs = (Buffer(-3, int(t.numel()) * int(args[1]), _dtype(t)),)
        return c
    if name == "reduce_scatter_tensor":
        c = Call("reduce_scatter", site, _group_ranks(_named_group(args[3])), inputs=(_buf(t),), redop=_redop(args[1]))
        c.outputs = (Buffer(-3, int(t.numel()) // max(1, int(args[2])), _dtype(t)),)
        return c
    if name == "broadcast":
        g = _group_ranks(_named_group(args[2]))
        return Call("broadcast", site, g, inputs=(_buf(t),), root=int(args[1]) if g is None else g[int(args[1])])
    return None


def _flat(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _flat(y)]
    return []


def _any_tainted(args, kwargs) -> bool:
    st = _state()
    return any(_storage(t) in st.tainted for t in _flat(list(args)) + _flat(list(kwargs.values())))


# ---- installing the wrappers -----------------------------------------------------------------------

_API = {
    "send": _p2p(True, True),
    "recv": _p2p(False, True),
    "isend": _p2p(True, False),
    "irecv": _p2p(False, False),
    "batch_isend_irecv": _batch,
    "broadcast": _collective("broadcast"),
    "all_reduce": _collective("all_reduce"),
    "reduce": _collective("reduce"),
    "all_gather": _collective("all_gather"),
    "all_gather_into_tensor": _collective("all_gather"),
    "all_gather_single": _collective("all_gather"),  # torch 2.13's name for it (the old one now warns)
    "_all_gather_base": _collective("all_gather"),
    "gather": _collective("gather"),
    "scatter": _collective("scatter"),
    "reduce_scatter": _collective("reduce_scatter"),
    "reduce_scatter_tensor": _collective("reduce_scatter"),
    "reduce_scatter_single": _collective("reduce_scatter"),  # torch 2.13's name for it
    "_reduce_scatter_base": _collective("reduce_scatter"),
    "all_to_all_single": _collective("all_to_all"),
    "all_to_all": _collective("all_to_all"),
    "barrier": _barrier,
    "monitored_barrier": _barrier,
    "broadcast_object_list": _object("broadcast"),
    "all_gather_object": _object("all_gather"),
    "gather_object": _object("gather"),
    "scatter_object_list": _object("scatter"),
    "send_object_list": _object("send"),
    "recv_object_list": _object("recv"),
    "init_process_group": _init,
}


def _rebind(replacements: dict[int, object], modules=None) -> None:
    """Every attribute of `modules` (default: every loaded module) bound to one of the originals now holds
    its replacement."""
    for module in list(sys.modules.values()) if modules is None else modules:
        d = getattr(module, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for key, value in list(d.items()):
            new = replacements.get(id(value))
            if new is not None:
                try:
                    setattr(module, key, new)
                except (AttributeError, TypeError):
                    pass


_WRAPPED = False


def wrap_api() -> None:
    """Replace every binding of the recorded functions in every loaded module, once per process (the
    parent's, before it forks: the scan is most of a child's own cost). The wrappers pass every call
    straight through while no recording runs, so the parent's torch behaves as before."""
    global _WRAPPED
    if _WRAPPED:
        return
    replacements: dict[int, object] = {}
    for name, handler in _API.items():
        original = getattr(_C10D, name, None)
        if original is not None:
            replacements[id(original)] = _wrap_api(name, original, handler)
    _rebind(replacements)
    _WRAPPED = True


def install(shim_cuda: bool) -> list[contextlib.AbstractContextManager]:
    """In the child: the API wrapped (if the parent has not), the launchers and (without GPUs) CUDA calls
    replaced where scripts get them from, and the two modes to enter."""
    import multiprocessing
    import multiprocessing.context

    import torch.distributed.device_mesh
    import torch.multiprocessing as tmp

    wrap_api()
    homes = [torch, tmp, multiprocessing, multiprocessing.context, torch.cuda, dist, torch.distributed.device_mesh]
    replacements: dict[int, object] = {}
    pairs: list[tuple[object, object]] = [
        (tmp.spawn, _spawn),
        (tmp.start_processes, _start_processes),
        (multiprocessing.Process, _Process),
        (tmp.Process, _Process),
        (multiprocessing.set_start_method, _noop()),
    ]
    if shim_cuda:
        st = _state()
        pairs += [
            (torch.cuda.set_device, _noop()),
            (torch.cuda.synchronize, _noop()),
            (torch.cuda.current_device, lambda: st.rank),
            (torch.cuda.device_count, lambda: st.world),
            (torch.cuda.empty_cache, _noop()),
        ]
    for original, new in pairs:
        replacements[id(original)] = new
    if shim_cuda:
        from torch.distributed import device_mesh

        mesh_init = device_mesh.init_device_mesh

        def init_device_mesh(device_type, *args, **kwargs):
            if device_type == "cuda":
                _note_no_gpu()
                device_type = "cpu"
            return mesh_init(device_type, *args, **kwargs)

        replacements[id(mesh_init)] = init_device_mesh
        set_default_device = torch.set_default_device

        def set_default_device_cpu(device):
            """`torch.set_default_device("cuda")`: torch places every tensor made after it from a mode at the
            bottom of the mode stack, below `_Functions`, which never sees the device to move it to the CPU."""
            if _is_cuda(device):
                _note_no_gpu()
                device = "cpu"
            return set_default_device(device)

        replacements[id(set_default_device)] = set_default_device_cpu
        ddp = torch.nn.parallel.DistributedDataParallel
        ddp_init = ddp.__init__

        def ddp_init_cpu(self, module, device_ids=None, output_device=None, *args, **kwargs):
            return ddp_init(self, module, None, None, *args, **kwargs)

        ddp.__init__ = ddp_init_cpu  # type: ignore[method-assign]
    _rebind(replacements, homes)
    return [_Functions(shim_cuda), _Dispatch()]


# ---- the child and the parent ------------------------------------------------------------------------


def _launcher_env(rank: int, world: int) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(world),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(world),
    }


def _stand_in_hint(trace: RankTrace) -> str:
    """What the recording made up before the failure, in case the script tripped on it."""
    made_up = [
        f"{c.site}: `{c.op}` of objects (not executed: the list kept what this rank passed)"
        for c in trace.events
        if isinstance(c, Call) and c.origin == "object"
    ] + [
        f"{c.site}: receive from any source (not executed: the sender it returned is a stand-in)"
        for c in trace.events
        if isinstance(c, Call) and c.op in ("recv", "irecv") and c.peer is None
    ]
    if not made_up:
        return ""
    return "\nnote: before this, the recording made up values the script may have used:\n  " + "\n  ".join(made_up[:5])


def version_warning() -> str | None:
    """A warning when this torch is not one the recorder was tested on."""
    minor = torch.__version__.split("+")[0].rsplit(".", 1)[0]
    if minor in TESTED_TORCH:
        return None
    return (
        f"commdsl trace is tested on torch {', '.join(TESTED_TORCH)}; this is torch {torch.__version__} "
        "(the fake backend and the c10d op schemas it relies on are private and may differ)"
    )


def record_rank(script: str, argv: list[str], rank: int, world: int) -> RankTrace:
    """Run the script as rank `rank` of `world` in this process (a forked child) and return its trace."""
    global _STATE
    trace = RankTrace(rank, world)
    _STATE = _State(rank, world, trace, {}, set())
    os.environ.update(_launcher_env(rank, world))
    torch.set_num_threads(1)
    shim_cuda = not torch.cuda.is_available()
    modes = install(shim_cuda)
    path = os.path.realpath(script)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(path))
    before = set(sys.modules)
    try:
        with contextlib.ExitStack() as stack:
            for m in modes:
                stack.enter_context(m)
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            trace.error = f"the script exited with status {e.code}"
    except RecorderBug as e:
        trace.error = f"{e} (a bug in commdsl, not in the script: please report it)"
    except BaseException as e:  # noqa: BLE001 - the user's failure is reported, never ours
        trace.error = _user_traceback(e) + _stand_in_hint(trace)
    st = _STATE
    if st.processes_started and st.processes_started != world:
        trace.warnings.append(f"the script started {st.processes_started} processes; traced at --world {world}")
    files = {path}
    for name in set(sys.modules) - before:
        f = getattr(sys.modules.get(name), "__file__", None)
        if f and _is_user_file(f):
            files.add(os.path.realpath(f))
    trace.files = sorted(files)
    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.destroy_process_group()
    return trace


def preload() -> None:
    """Import in the parent what every child would otherwise import for itself (dynamo alone is ~1 s:
    `nn.Module` construction pulls it in), so a fork starts with it loaded."""
    import torch._dynamo  # noqa: F401
    import torch.distributed.device_mesh  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.multiprocessing  # noqa: F401
    import torch.nn.parallel  # noqa: F401
    from torch.testing._internal.distributed import fake_pg  # noqa: F401

    with _Dispatch(), _Functions(False):
        torch.ones(1).add(1)


@dataclass
class Recording:
    traces: list[RankTrace]
    seconds: float


def record(script: str, argv: list[str], world: int, timeout: float = 120.0, jobs: int | None = None) -> Recording:
    """Fork one child per rank (at most `jobs` at a time), each recording the script as that rank.

    A child that runs past `timeout` seconds is killed with everything it started (each child leads its
    own process group) and its rank reported as not finished. The script's output goes to /dev/null and
    its stderr to a file whose end is quoted when the rank fails without a traceback."""
    start = time.perf_counter()
    preload()
    wrap_api()
    jobs = jobs or max(1, min(os.cpu_count() or 1, 8))
    out_dir = tempfile.mkdtemp(prefix="commdsl-trace-")
    traces: dict[int, RankTrace] = {}
    running: dict[int, tuple[int, float]] = {}  # pid -> (rank, started)
    pending = list(range(world))
    try:
        while pending or running:
            while pending and len(running) < jobs:
                rank = pending.pop(0)
                pid = _fork_rank(script, argv, rank, world, out_dir)
                running[pid] = (rank, time.monotonic())
            finished = []
            for p in list(running):  # our children only: waitpid(-1) would reap another's
                done, status = os.waitpid(p, os.WNOHANG)
                if done:
                    finished.append((p, status))
            for p, status in finished:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p, signal.SIGKILL)  # what the script left running in its group
                rank, _ = running.pop(p)
                traces[rank] = _read_trace(out_dir, rank, world, status)
            if finished:
                continue
            now = time.monotonic()
            for p, (rank, started) in list(running.items()):
                if now - started > timeout:
                    _kill(p)
                    del running[p]
                    error = f"rank {rank} did not finish in {timeout:g} s (--timeout)" + _stderr_tail(out_dir, rank)
                    traces[rank] = RankTrace(rank, world, error=error)
            time.sleep(0.005)
    finally:
        for p in running:
            _kill(p)
        for f in Path(out_dir).iterdir():
            f.unlink()
        os.rmdir(out_dir)
    return Recording([traces[r] for r in range(world)], time.perf_counter() - start)


def _kill(pid: int) -> None:
    """A child and everything it started (its own process group), then reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _stderr_tail(out_dir: str, rank: int, lines: int = 12) -> str:
    """The end of what the rank wrote to stderr (argparse's complaint, a C++ abort), for an error message."""
    try:
        text = Path(out_dir, f"{rank}.err").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return ("\nits stderr ended with:\n" + "\n".join(kept)) if kept else ""


def _fork_rank(script: str, argv: list[str], rank: int, world: int, out_dir: str) -> int:
    pid = os.fork()
    if pid:
        with contextlib.suppress(PermissionError, ProcessLookupError):
            os.setpgid(pid, pid)  # here too: no race with a kill before the child's own call
        return pid
    code = 0
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        err = os.open(os.path.join(out_dir, f"{rank}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(err, 2)
        # the parent's sys.std* may not be these fds (a test's capture): the script's go to them
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the child
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        threading.excepthook = lambda args: None
        trace = record_rank(script, argv, rank, world)
        with open(os.path.join(out_dir, f"{rank}.json"), "w", encoding="utf-8") as f:
            f.write(trace_to_json(trace))
    except BaseException:  # noqa: BLE001 - the parent reports a child that wrote nothing
        code = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _read_trace(out_dir: str, rank: int, world: int, status: int) -> RankTrace:
    path = os.path.join(out_dir, f"{rank}.json")
    try:
        with open(path, encoding="utf-8") as f:
            trace = trace_from_json(f.read())
    except OSError:
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.WEXITSTATUS(status)}"
        error = f"rank {rank} ended with {how} before its trace was written" + _stderr_tail(out_dir, rank)
        return RankTrace(rank, world, error=error)
    if trace.error and trace.error.startswith("the script exited"):
        trace.error += _stderr_tail(out_dir, rank)
    return trace
