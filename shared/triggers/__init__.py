"""Triggers seam: what woke a seat, below both the turn engine and the channels (CO-6, CO-19, CO-38).

:class:`Trigger` is one delivery as a turn sees it; :func:`work_key` is the identity of the work it
asks for (CO-19); :func:`partition` and :func:`merge_triggers` coalesce one inbox drain into one
trigger per conversation (CO-38). Pure data and pure functions: this package imports nothing of
``shared``, so ``turns``, ``tools`` and ``channels`` can all name a trigger. ``shared.turns``
re-exports every name here.
"""

from ._trigger import (
    FIRST_LINE_MAX_CHARS,
    ReplyMode,
    Trigger,
    first_line,
    merge_triggers,
    partition,
    work_key,
)

__all__ = [
    "FIRST_LINE_MAX_CHARS",
    "ReplyMode",
    "Trigger",
    "first_line",
    "merge_triggers",
    "partition",
    "work_key",
]
