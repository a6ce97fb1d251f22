"""Folding a loop's repeated iterations for an observer that times them (`commdsl predict`).

A ring's 8,190 steps at world 4096 are one batch and one add, again and again, every rank at the same record.
Timing them one by one is what made the prediction slow at scale (docs/predict.md, "Scale"). The timing model
is a max-plus system: every time it computes is a maximum of earlier times plus durations, and every choice it
makes compares two such times. So when an iteration's ops cost what the one before cost and the clocks after it
are the clocks before it shifted by one amount per size (the loop's steady state, which a ring reaches once its
slowest hop has paced every rank), every further alike iteration shifts them by that amount again, and m of them
are the state now plus m shifts, without timing each.

`Steady` watches the records the engine runs with every rank in step (`Engine.run_ready`), each reduced to a
key of what it does and what its cost depends on (`Engine.lockstep_key`: a point-to-point op's peers, tags and
whether it blocks or binds a request, a wait's requests as which earlier records posted them, and the
observer's `Observer.cost_key`, its bytes). Where the keys repeat with a period of P records, it takes the state
at three period boundaries in a row (`Engine.snapshot`: only where the engine is at rest, every rank free to go
on with nothing posted, queued or called that has not completed; a loop of `isend`, `recv` and `wait` is at
rest between its iterations, not inside them, so the boundary is looked for at each of a period's records)
and hands them to the engine (`Engine.fold`): the observer says whether its state shifted alike across them
(`Observer.settled`), the engine looks ahead for how many whole periods of alike records follow for every rank,
and where they are at least `FEWEST_FOLDED`, each waiting only for requests its own records posted, the
observer applies them as shifts (`Observer.fold`) and the engine moves every rank past them. Anything else (a
rank that runs a record the others do not, a collective, a `new_group`) breaks the watch.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from commdsl.engine import Engine

LONGEST_PERIOD = 64
"""The most records one repeated iteration may hold: longer ones are timed one by one."""

WATCHED = 3
"""Periods whose clocks are compared before a fold: the state must shift alike across two of them."""

FEWEST_FOLDED = 16
"""The fewest periods worth a fold: a shorter loop is timed step by step, to the bit as it always was (a fold
gives the same times to rounding, not to the bit)."""

KEPT = WATCHED * LONGEST_PERIOD
"""Keys kept of a run of records in step: as far back as a period is looked for."""

VALUES_KEPT = 100_000
"""Arrays `Values` remembers by identity before it starts again."""


class Steady:
    """The watch over the records every rank runs in step (see the module docstring)."""

    def __init__(self, engine: Engine):
        self.e = engine
        self.values = Values()
        self.keys: list[Hashable] = []  # the keys of the latest records run in step since the last break
        self.count = 0  # records run in step since the last break: the next one's index
        self.seen: dict[Hashable, int] = {}  # each key's latest index
        self.period = 0  # P while three periods' states are being taken, else 0
        self.snaps: list[object] = []
        self.due = 0  # the boundary (before record `due`) at which the next state is taken
        self.last_try = 0  # the last boundary the first state of a period may be taken at
        self.calm = 0  # no period is looked for before this index (after a declined fold)
        self.declined = 0

    def reset(self) -> None:
        self.keys.clear()
        self.count = 0
        self.seen.clear()
        self.period = 0
        self.snaps.clear()
        self.calm = 0
        self.declined = 0

    def stepped(self, key: Hashable | None) -> None:
        """Every rank has just run one record of this key (None: a record that breaks the watch)."""
        if key is None:
            if self.count:
                self.reset()
            return
        keys = self.keys
        i = self.count
        self.count += 1
        keys.append(key)
        if len(keys) > 2 * KEPT:  # a long run that does not fold: keep what a period can look back at
            del keys[:-KEPT]
            self.seen = {k: j for k, j in self.seen.items() if j > i - KEPT}
        before = self.seen.get(key)
        self.seen[key] = i
        if self.period:
            if key != keys[-1 - self.period]:  # the iteration changed: watch again from here
                self.period = 0
                self.snaps.clear()
            return
        if before is None or i < self.calm:
            return
        P = i - before
        if P > LONGEST_PERIOD or len(keys) < WATCHED * P:
            return
        tail = keys[-P:]
        if all(keys[-(j + 1) * P : -j * P] == tail for j in range(1, WATCHED)):
            self.period = P
            self.snaps.clear()
            self.due = i + 1
            self.last_try = i + P

    def boundary(self) -> bool:
        """Every rank is about to run its next record together: take the state here where one is due, and with
        WATCHED of them try to fold. True where the engine folded (its ranks moved on)."""
        if not self.period or self.count != self.due:
            return False
        i, P = self.count, self.period
        snap = self.e.snapshot(P)
        if snap is None:
            if not self.snaps and i < self.last_try:  # not at rest here: the period's next boundary may be
                self.due = i + 1
            else:
                self.period = 0
                self.snaps.clear()
                self.calm = i + LONGEST_PERIOD
            return False
        self.snaps.append(snap)
        self.due = i + P
        if len(self.snaps) < WATCHED:
            return False
        folded = self.e.fold(self.keys[-P:], list(self.snaps))
        self.period = 0
        self.snaps.clear()
        if folded:
            self.reset()
        else:  # not (yet) a uniform shift: look again later, less often each time
            self.declined += 1
            self.calm = i + P * (2 ** min(self.declined, 10))
        return folded


class ByValue:
    """An array in a key, equal to another holding the same values. Hashed by its shape and ends; compared by
    identity first (`Values` names equal arrays by one of these)."""

    __slots__ = ("a", "h")

    def __init__(self, a: np.ndarray):
        self.a = a
        ends = (a.flat[0].item(), a.flat[-1].item()) if a.size else ()
        self.h = hash((a.shape, a.dtype.str, ends))

    def __hash__(self) -> int:
        return self.h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByValue) and (
            self.a is other.a or (self.h == other.h and bool(np.array_equal(self.a, other.a)))
        )


class Values:
    """Values for keys: an array by its values, named by the first array seen with the same values (a loop's
    records share one array per block of iterations, `commdsl.hoist`, so two alike records may hold equal
    arrays that are not the same object), each array compared once; anything else as it is."""

    def __init__(self):
        self.named: dict[int, tuple[np.ndarray, ByValue]] = {}  # id(array) → the array (holding its id), its name
        self.names: dict[ByValue, ByValue] = {}

    def __call__(self, v):
        if not isinstance(v, np.ndarray):
            return v
        got = self.named.get(id(v))
        if got is not None and got[0] is v:
            return got[1]
        if len(self.named) >= VALUES_KEPT:  # names already in keys still compare by value
            self.named.clear()
            self.names.clear()
        name = ByValue(v)
        name = self.names.setdefault(name, name)
        self.named[id(v)] = (v, name)
        return name


def whole_periods(keys: list[Hashable], ahead) -> int:
    """How many whole periods of `keys` the records `ahead` (an iterator of their keys) begin with."""
    P = len(keys)
    n = 0
    for j, key in enumerate(ahead):
        if key is None or key != keys[j % P]:
            break
        n = j + 1
    return n // P


def moved_alike(states: list[np.ndarray], delta: np.ndarray, floor: np.ndarray) -> np.ndarray | None:
    """Which entries of one array, taken at consecutive period boundaries (`states`), moved: each by `delta` of
    its column at every period (to 1e-9 of it, and the time's rounding), or None where one moved otherwise. An
    entry that did not move must lie at or below `floor` (the earliest clock of its column): every maximum that
    reads it also reads a later clock, which then always wins, so it never matters again."""
    moved = np.zeros(states[0].shape, dtype=bool)
    for before, after in zip(states, states[1:]):
        moved |= after != before
    for before, after in zip(states, states[1:]):
        off = np.abs((after - before) - delta) > 1e-9 * delta + 1e-15 * np.abs(after)
        if (off & moved).any():
            return None
    if ((states[-1] > floor) & ~moved).any():
        return None
    return moved
