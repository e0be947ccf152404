"""FL-67: returning work to the broker is a NAK of the original delivery, never a republish.

A grep-level check over every release, detach, deferral and shed path of the seat host and the
mailbox: none of them calls publish. (Dead-lettering publishes to ``CREWLET_DLQ`` by design,
fleet.md §28 item 5, and is not a return of work.)
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from shared.bus import Mailbox, _verdicts
from shared.leases import SeatHost, _host_state

PATHS: list[Callable[..., Any]] = [
    Mailbox.detach,
    Mailbox.nak,
    Mailbox.pause,
    Mailbox.process,
    Mailbox.process_batch,  # the handler verdicts, a batch's deferral included (CO-38)
    _verdicts.settle,
    _verdicts.run_group,
    _verdicts.defer,
    SeatHost.release,
    SeatHost._lose,  # noqa: SLF001
    SeatHost._teardown,  # noqa: SLF001
    _host_state.tend_undead,
    SeatHost.stop,
]


def test_no_release_or_shed_path_calls_publish() -> None:
    for fn in PATHS:
        source = inspect.getsource(fn)
        assert not re.search(r"\bpublish\w*\(", source), f"{fn.__qualname__} publishes"


def test_the_check_can_see_a_publish() -> None:
    assert re.search(r"\bpublish\w*\(", inspect.getsource(Mailbox.dead_letter))
