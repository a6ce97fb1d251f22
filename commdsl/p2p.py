"""What each point-to-point form means, in one place, as `collectives/` does for each collective.

A form is a word of the language (`send`, `recv`, `isend`, `irecv`) and the torch.distributed function
that runs it. `batch:` posts its ops with `dist.batch_isend_irecv`, whose `P2POp` entries take the async
function of the op's direction whichever word the user wrote. The runtime calls `function`, `commdsl
compile` writes `dist.<torch_name>`, the rules name an op by its `word`, and the simulator moves
`delivered` elements for a matched pair. What each backend does with the forms (buffering, issue order,
tags) is modelled by the engine and documented in docs/backend-support.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class P2PForm:
    """One point-to-point form: its direction, whether it completes before the next statement, and its
    torch function (`dist.send(tensor, dst, group=, tag=)`; async forms return a request to `wait`)."""

    word: str
    is_send: bool
    blocking: bool

    @property
    def torch_name(self) -> str:
        """The function's name in torch.distributed: the same word as the language's."""
        return self.word

    @property
    def function(self) -> Callable:
        """The torch.distributed function itself (imported late: the checker never needs torch)."""
        import torch.distributed as dist

        return getattr(dist, self.torch_name)

    @property
    def batched(self) -> P2PForm:
        """The form a `batch:` posts this op as: `P2POp` takes `isend` or `irecv`."""
        return form(self.is_send, blocking=False)


FORMS = {
    (is_send, blocking): P2PForm(("" if blocking else "i") + ("send" if is_send else "recv"), is_send, blocking)
    for is_send in (True, False)
    for blocking in (True, False)
}


# The peer of `recv x from any` in a Schedule and in the engine's posts: torch's `src=None`, a receive that
# takes a message from whichever sender on its (group, tag) channel comes first.
ANY_SOURCE = -1


def form(is_send: bool, blocking: bool) -> P2PForm:
    """The form of an op by its direction and blocking-ness."""
    return FORMS[(bool(is_send), bool(blocking))]


def delivered(send_numel: np.ndarray, recv_numel: np.ndarray) -> np.ndarray:
    """Elements a matched pair moves: the shorter side's count. A receive larger than its send keeps its
    last elements (Gloo, measured); a send larger than its receive aborts the receiver on Gloo. Both are
    `P205` before launch; the simulator moves what fits."""
    return np.minimum(send_numel, recv_numel)
