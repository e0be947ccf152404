"""The usage domain's tables (ES-69, AG-47): one row per published day object and its spend rows.

A day object is what one node recorded for one company day and one seat (``kind = seat``) or one
schedule run as one seat (``kind = schedule``). ``usage_days`` holds its counts; ``usage_spend``
its tokens, one row per ``(seat, phase, worker, provider, model)``. Applying a newer value of the
object replaces both (no arbitration: each node is the only writer of its own objects).
"""

from __future__ import annotations

from sqlmodel import Field

from ...store._schema import EstateModel, table_of

__all__ = ["T_USAGE_DAYS", "T_USAGE_SPEND", "UsageDay", "UsageSpend"]


class UsageDay(EstateModel, table=True):
    """``usage_days``: one published day object (ES-69, AG-47).

    Attributes:
        id: ``<node>.<day>.<object>``: the subject's object id.
        node: The node that recorded it.
        day: The company day, ``YYYY-MM-DD`` on the company ``timezone``.
        kind: ``seat`` or ``schedule``.
        seat: The seat's handle (a schedule's: the seat it ran as).
        schedule: ``<scope>/<name>`` of a schedule object; "" for a seat object.
        turns: Turns ended that day (started that day, on the company clock).
        outcomes: JSON ``{outcome: turns}``.
        durations: JSON histogram ``{"1","5","15","60","300","900","over": turns}`` (seconds).
        page_reads: JSON ``[{page, via, reads}]``, at most 256 entries (AG-47).
        reads_dropped: Page reads past the 256 entries.
        fires: Schedule fires its turns worked (schedule objects; 0 for seats).
        sandbox_runs: Sandbox runs (0 until sandboxes exist, AG-23).
        approvals: Approvals asked (0 until approvals exist, AG-38).
        at: The record's instant, unix µs (the writer's clock, ES-16).
        seq: The log sequence it was applied from.
    """

    __tablename__ = "usage_days"
    id: str = Field(primary_key=True)
    node: str = Field(index=True)
    day: str = Field(index=True)
    kind: str = "seat"
    seat: str = Field(default="", index=True)
    schedule: str = ""
    turns: int = 0
    outcomes: str = "{}"
    durations: str = "{}"
    page_reads: str = "[]"
    reads_dropped: int = 0
    fires: int = 0
    sandbox_runs: int = 0
    approvals: int = 0
    at: int = 0
    seq: int = 0


class UsageSpend(EstateModel, table=True):
    """``usage_spend``: one day object's tokens for one ``(seat, phase, worker, provider, model)``.

    ``phase`` is ``execute|review|auxiliary|sandbox|subagent|judge`` (AG-47); ``worker`` names the
    duty of auxiliary spend ("" otherwise). Tokens are tokens; ``rounds`` counts model calls.
    ``day``, ``node``, ``kind`` and ``schedule`` repeat the object's so a window sums in one scan.
    """

    __tablename__ = "usage_spend"
    day_id: str = Field(primary_key=True)
    line: int = Field(primary_key=True)
    node: str
    day: str = Field(index=True)
    kind: str = "seat"
    seat: str = ""
    schedule: str = ""
    phase: str = "execute"
    worker: str = ""
    provider: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    rounds: int = 0


T_USAGE_DAYS = table_of(UsageDay)
T_USAGE_SPEND = table_of(UsageSpend)
