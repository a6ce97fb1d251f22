"""THE table of diagnostic codes: every `Rule` class, in family order (S, N, P, C, D, R, B, L, V), then by code.

As ruff's `codes.rs`, one explicit list rather than classes registering themselves at import: the whole set
of codes reads in one screen, a duplicate or out-of-order code fails at import, and a class the table does not
list fails a test (tests/test_rules.py) instead of silently never being documented.

Adding a rule: write its class, with docstring, in its family's module; add it here at its code's place;
raise it as `TheRule.diagnostic(...)`; regenerate docs/diagnostics.md (`commdsl explain --all`). The tests then
also ask for a programs/bad fixture (P to V codes), or for a case in tests/test_resolve.py and a row in
docs/language.md's table (S and N codes).
Retiring a rule: keep its class and its row, set `removed = True` and say in its docstring what replaced it.
Its code is never given to another rule; `commdsl explain` and the docs mark it removed, and the tests stop
running its examples.
"""

from __future__ import annotations

from commdsl.collectives import all_to_all
from commdsl.rules import (
    FAMILIES,
    Rule,
    backend,
    coalesced,
    collectives,
    deadlock,
    idioms,
    names,
    p2p,
    requests,
    settings,
    sizes,
    suppression,
    syntax,
    verify,
)

FAMILY_ORDER = tuple(f.letter for f in FAMILIES)

RULES: tuple[type[Rule], ...] = (
    syntax.UnexpectedToken,
    syntax.UnexpectedCharacter,
    syntax.InconsistentDedent,
    syntax.UnexpectedEndOfFile,
    syntax.MissingColon,
    syntax.SendWithoutDestination,
    syntax.RecvWithoutSource,
    syntax.ProgramTooLong,
    names.UndefinedName,
    names.DuplicateDeclaration,
    names.WrongKindOfName,
    names.UnknownDtype,
    names.BadReduceOp,
    names.MisplacedDeclaration,
    names.InvalidView,
    names.MisusedHandle,
    names.InvalidExpect,
    names.UnknownBackend,
    names.InvalidBatch,
    names.InvalidWorld,
    names.RecursiveFunction,
    names.WrongArgumentCount,
    names.InvalidCoalesced,
    sizes.ViewOutOfBounds,
    sizes.NotAnInteger,
    sizes.DivisionByZero,
    sizes.ShapeMismatch,
    sizes.WorldSizeNotDeclared,
    sizes.BadParamValue,
    sizes.MeshDoesNotTileWorld,
    sizes.InvalidGroup,
    sizes.InvalidTensorSize,
    sizes.HandleNotAssigned,
    sizes.MixedDtypes,
    sizes.BufferDoesNotFit,
    sizes.TensorsExceedMemory,
    sizes.ExpansionTooLarge,
    sizes.TimeLimitExceeded,
    sizes.UnsupportedElementOp,
    sizes.InvalidTopology,
    settings.InvalidSettings,
    sizes.ConstantOutOfRange,
    p2p.UnmatchedSend,
    p2p.UnmatchedRecv,
    p2p.TagMismatch,
    p2p.MessageSizeMismatch,
    p2p.MessageDtypeMismatch,
    p2p.NcclTagReorder,
    p2p.PeerOutOfRange,
    p2p.P2pWithSelf,
    p2p.PeerNotInGroup,
    p2p.MessageRace,
    p2p.TagOutOfRange,
    p2p.BatchAcrossGroups,
    collectives.CollectiveKindMismatch,
    collectives.CollectiveOrderSwap,
    collectives.RootMismatch,
    collectives.ReduceOpMismatch,
    collectives.CollectiveDtypeMismatch,
    collectives.CollectiveSizeMismatch,
    collectives.MissingParticipant,
    collectives.CrossGroupOrder,
    collectives.AsyncMismatch,
    collectives.GroupNonmember,
    collectives.RootNotInGroup,
    all_to_all.AllToAllSplitsMismatch,
    collectives.NewGroupMismatch,
    coalesced.CoalescedMixedCollectives,
    coalesced.CoalescedMixedReduceOps,
    coalesced.CoalescedMismatch,
    coalesced.CoalescedReadsEarlierOutput,
    collectives.OverlappingBuffers,
    collectives.AsyncAcrossGroups,
    collectives.ListShapeMismatch,
    collectives.FlatShapeMismatch,
    deadlock.Deadlock,
    deadlock.BufferingHazard,
    requests.RequestNeverWaited,
    requests.RequestWaitedTwice,
    requests.BufferInFlight,
    requests.ReadAfterReduce,
    requests.RequestWaitedAgain,
    requests.IdleRank,
    backend.UnsupportedReduceOp,
    backend.IntegerAvgTruncates,
    backend.NcclRecvFromAny,
    idioms.SendLoopIsBroadcast,
    idioms.RecvLoopIsGather,
    idioms.PairwiseExchangeIsAllToAll,
    idioms.ReduceThenBroadcast,
    idioms.CollectiveResultUnused,
    suppression.UnusedNoqa,
    verify.ExpectFailed,
    verify.IntegerDivisionByZero,
    verify.OrderDependentSum,
    verify.FloatOutOfIntegerRange,
)

CODES: dict[str, type[Rule]] = {r.code: r for r in RULES}
BY_NAME: dict[str, type[Rule]] = {r.name: r for r in RULES}


assert len(CODES) == len(RULES), "a diagnostic code is listed twice"
assert len(BY_NAME) == len(RULES), "a rule name is used twice"
assert all(code[0] in FAMILY_ORDER for code in CODES), "a code's letter is not a family in rules.FAMILIES"
assert list(CODES) == sorted(CODES, key=lambda c: (FAMILY_ORDER.index(c[0]), c)), "RULES is out of order"


def lookup(text: str) -> type[Rule] | None:
    """A rule from its code (any case) or its kebab-case name."""
    key = text.strip()
    return CODES.get(key.upper()) or BY_NAME.get(key.lower())


def selected(code: str, select: tuple[str, ...], ignore: tuple[str, ...]) -> bool:
    """Whether `--select`/`--ignore` (codes or prefixes, as ruff's) keep a finding of `code`: selected (all
    when `select` is empty) and not ignored."""
    return (not select or code.startswith(select)) and not (ignore and code.startswith(ignore))
