"""Turns seam: one seat's turn on one trigger (CO-16..CO-22, CO-30..CO-32, FL-74).

:class:`TurnEngine` runs ``execute`` → ``review`` iterations against a seat's provider chains and
tool surface, guarded by the in-turn fence, with correctives (CO-32) and the reply obligation's
checks (:func:`reply_obligation`, CO-31), and returns a :class:`TurnResult` (what section 10
records); a :class:`TurnRecorder` receives the record as it happens. :class:`Trigger` and
:func:`work_key` are the turn's identity (CO-19); :func:`partition` and :func:`merge_triggers`
coalesce one inbox drain into one trigger per conversation (CO-38); :func:`build_prompt` is prompt
assembly (CO-17).
"""

from ._charge import WorkItemCharge
from ._completed import COMPLETED_SUBJECT, PAYLOAD_FIELDS, completed_payload, settled
from ._errors import SeatNotRunnable, TurnError
from ._executor import BudgetGate, Fence, ToolSurface, TurnEngine, review_chain_keys
from ._obligation import reply_obligation
from ._prompt import (
    PREFETCH_CHARS,
    PREFETCH_HITS,
    PREFETCH_QUERY_CHARS,
    Prompt,
    build_prompt,
    prefetch_knowledge,
)
from ._recall import REFRESH_MEMORY, RecallOpener, TurnRecall, refresh_memory_tool
from ._recorder import MemoryRecorder, TurnRecorder
from ._result import (
    REDELIVER_ERROR_KINDS,
    Decision,
    ErrorKind,
    Outcome,
    Phase,
    PhaseRecord,
    Review,
    RoundRecord,
    Section,
    ToolExecution,
    TurnResult,
    TurnStart,
)
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
    "COMPLETED_SUBJECT",
    "FIRST_LINE_MAX_CHARS",
    "PAYLOAD_FIELDS",
    "PREFETCH_CHARS",
    "PREFETCH_HITS",
    "PREFETCH_QUERY_CHARS",
    "REDELIVER_ERROR_KINDS",
    "REFRESH_MEMORY",
    "RecallOpener",
    "TurnRecall",
    "Decision",
    "ErrorKind",
    "BudgetGate",
    "Fence",
    "MemoryRecorder",
    "Outcome",
    "Phase",
    "PhaseRecord",
    "Prompt",
    "ReplyMode",
    "Review",
    "RoundRecord",
    "SeatNotRunnable",
    "Section",
    "ToolExecution",
    "Trigger",
    "ToolSurface",
    "TurnEngine",
    "TurnError",
    "TurnRecorder",
    "TurnResult",
    "TurnStart",
    "WorkItemCharge",
    "build_prompt",
    "completed_payload",
    "first_line",
    "merge_triggers",
    "partition",
    "prefetch_knowledge",
    "refresh_memory_tool",
    "reply_obligation",
    "settled",
    "review_chain_keys",
    "work_key",
]
