"""commdsl/p2p.py: each point-to-point form is the torch function of its name, and a batch posts it as the
async function `P2POp` takes."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.distributed as dist

from commdsl.p2p import FORMS, delivered, form


@pytest.mark.parametrize("p", FORMS.values(), ids=lambda p: p.word)
def test_each_form_is_the_torch_function_of_its_word(p):
    assert p.function is getattr(dist, p.word)
    params = list(inspect.signature(p.function).parameters)
    assert params[:2] == ["tensor", "dst" if p.is_send else "src"] and {"group", "tag"} <= set(params)


@pytest.fixture
def world_of_one():
    """A Gloo group of this process alone (an in-memory store: no port, no process): `P2POp` needs one."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("p", FORMS.values(), ids=lambda p: p.word)
def test_a_batch_posts_every_form_as_the_op_p2pop_takes(p, world_of_one):
    b = p.batched
    assert (b.is_send, b.blocking) == (p.is_send, False)
    dist.P2POp(b.function, torch.zeros(2), 0)  # P2POp refuses anything but isend and irecv
    with pytest.raises(ValueError):
        dist.P2POp(p.function if p.blocking else dist.broadcast, torch.zeros(2), 0)


def test_forms_by_direction_and_blocking():
    assert [form(s, b).word for s in (True, False) for b in (True, False)] == ["send", "isend", "recv", "irecv"]


def test_delivered_is_the_shorter_side():
    assert delivered(np.array([4, 8, 2]), np.array([8, 4, 2])).tolist() == [4, 4, 2]


@pytest.mark.parametrize("groups, found", [
    (("in pairs", "in pairs"), []),  # one group per rank (its pair), the same for both ops: fine
    (("", ""), []),                  # the world, named by no `in`
    (("in pairs", ""), ["rank 0's `batch` has ops on `pairs[0]` and on `world`"]),
    (("in pairs", "in halves"), ["rank 0's `batch` has ops on `pairs[0]` and on `halves[10]`"]),
])
def test_p213_a_batch_on_two_groups_per_rank(groups, found):
    """torch's batch_isend_irecv refuses ops on two groups (measured: `ValueError: All ops need to use the same
    group.`); split groups differ per rank, and a rank's ops are compared with each other."""
    from commdsl.checker import CheckOptions, check_program
    from commdsl.resolve import load
    from commdsl.source import SourceFile

    text = ("program b\nworld 4\ngroup pairs = split by rank // 2\ngroup halves = split by rank // 2 + 10\n"
            "tensor x: float32[4] = rank\ntensor y: float32[4]\nlet peer = rank + 1 - 2 * (rank % 2)\n"
            f"batch:\n    send x to peer {groups[0]}\n    recv y from peer {groups[1]}\n")
    diags = check_program(load(SourceFile("b.comm", text)), CheckOptions())
    assert [d.message for d in diags if d.code == "P213"] == found


def test_p202_names_a_few_ranks_of_a_statement_and_counts_the_rest():
    """A ring step with a wrong peer leaves every rank's receive unmatched: one finding for the statement,
    what the first eight ranks' peers would name, then how many more ops and on which ranks (at world 4096
    the finding was 4096 notes, and working out each one's hint took half a minute)."""
    from commdsl.checker import CheckOptions, check_program
    from commdsl.resolve import load
    from commdsl.source import SourceFile

    text = ("program r\nworld 12\ntensor x: float32[4] = rank\ntensor y: float32[4]\nfor s in 0 .. 1:\n"
            "    batch:\n        send x to (rank + 1) % world\n        recv y from (rank + 2) % world\n")
    diags = [d for d in check_program(load(SourceFile("r.comm", text)), CheckOptions()) if d.code == "P202"]
    assert len(diags) == 1
    notes = [n.message for n in diags[0].notes]
    assert diags[0].message == "`recv` on rank 0 from rank 2 has no matching `send`"
    assert [m for m in notes if "would name" in m] == [
        f"a matching `send` on rank {(r + 2) % 12} would name rank {r}" for r in range(8)
    ]
    assert "the same on 4 more of its ops, on ranks [8, 9, 10, 11]" in notes
