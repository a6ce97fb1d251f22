"""What the rules see for one program at one world size: the schedule, the engine's outcomes, local facts.

The engine runs the schedule once per backend, under that backend's model; the rules read one run at a time
(`outcome`, `backend`), and the checker merges what they say about each. When the program may run on NCCL and
uses tags, a run that matches by tag is kept beside the NCCL one (`tagged`). The access tracker rode
along the first run. Analyses that several rules share are computed once, on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from commdsl.checker.access import Access
from commdsl.engine import Outcome
from commdsl.resolve import Program
from commdsl.schedule import Schedule
from commdsl.source import Span, statement_text


@dataclass
class Context:
    program: Program
    schedule: Schedule
    outcome: Outcome  # the run under `backend`'s model
    tagged: Outcome | None  # a run matching by tag, with its matches, when NCCL is checked too (P207)
    access: Access
    backends: tuple[str, ...]
    lints: bool
    backend: str = "gloo"
    memo: dict = field(default_factory=dict)

    def shared(self, key: str, compute: Callable[[Context], object]):
        """An analysis several rules read (computed by the first that asks)."""
        if key not in self.memo:
            self.memo[key] = compute(self)
        return self.memo[key]

    @property
    def world(self) -> int:
        return self.schedule.world

    @cached_property
    def waits(self):
        """The wait-for analysis of the stall (`checker.waits`)."""
        from commdsl.checker.waits import analyse

        return analyse(self.outcome)

    def record(self, rid: int):
        return self.schedule.records[int(rid)]

    def op(self, rid: int, pos: int):
        """Rank `ranks[pos]`'s concrete op of record `rid`."""
        return self.schedule.op_at(self.schedule.records[int(rid)], int(pos))

    def locate(self, op_id: int):
        """(record, position) of an op id."""
        return self.schedule.locate(int(op_id))

    def text(self, span: Span) -> str:
        """The source text of a statement on one line, without comments: a block's lines joined by `; `
        (`batch: send x to 1; recv y from 1`)."""
        return statement_text(self.program.source.text, span)
