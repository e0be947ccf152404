"""Pin the public API of ``shared.turns`` (STYLE: a test pins ``__all__``)."""

from __future__ import annotations

from shared import turns

EXPECTED = [
    "BudgetGate",
    "COMPLETED_SUBJECT",
    "Decision",
    "ErrorKind",
    "FIRST_LINE_MAX_CHARS",
    "Fence",
    "MemoryRecorder",
    "Outcome",
    "PAYLOAD_FIELDS",
    "PREFETCH_CHARS",
    "PREFETCH_HITS",
    "PREFETCH_QUERY_CHARS",
    "Phase",
    "PhaseRecord",
    "Prompt",
    "REDELIVER_ERROR_KINDS",
    "REFRESH_MEMORY",
    "RecallOpener",
    "ReplyMode",
    "Review",
    "RoundRecord",
    "SeatNotRunnable",
    "Section",
    "ToolExecution",
    "ToolSurface",
    "Trigger",
    "TurnEngine",
    "TurnError",
    "TurnRecall",
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
    "review_chain_keys",
    "settled",
    "work_key",
]


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(turns.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(turns, name) is not None
