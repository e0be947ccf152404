"""The trigger names the turn engine's modules import, re-exported from :mod:`shared.triggers`.

:class:`Trigger` and its helpers live below both the turn engine and the channels (``channels``
names a trigger and ``turns → tools → channels``), so they moved there; this module keeps the
engine's ``from ._trigger import Trigger`` lines as they were.
"""

from shared.triggers import (
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
