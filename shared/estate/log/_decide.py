"""What a write decides before it appends: the shared shapes of the domain modules (ES-9, ES-10).

A domain's decide function reads the local rows in one snapshot and returns a :class:`Decision`:
the record to append and its subject expectation, or — when nothing would change — the answer to
give without writing. Apply functions then re-check what they must deterministically.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from ..store._schema import T_ANCHOR
from ._record import Record

__all__ = ["ID_NAMESPACE", "DecideCtx", "Decision", "Rules", "ViewFn", "anchor_of", "derived_id", "iso"]

ID_NAMESPACE = uuid.UUID("5b0c7a4e-6a52-4f0e-9d8e-3c1c7e0f4a21")
"""Namespace of ids derived from operation ids (ES-13: a re-run create files one item)."""

ViewFn = Callable[[Connection, str], dict[str, Any]]
"""``(conn, object_id) -> answer``: how a write's answer is read back from the rows."""


def derived_id(*parts: str) -> str:
    """Return a UUID derived from ``parts`` (a create's id from its op id, ES-13)."""
    return str(uuid.uuid5(ID_NAMESPACE, "\x1f".join(parts)))


def iso(us: int | None) -> str | None:
    """Render unix microseconds as an ISO-8601 UTC instant (None stays None)."""
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1_000_000, UTC).isoformat().replace("+00:00", "Z")


def anchor_of(conn: Connection, domain: str, subject: str) -> int:
    """Return the last sequence this copy consumed on ``subject`` (0 = none): the ES-10 anchor."""
    v = conn.execute(
        select(T_ANCHOR.c.last_consumed_seq).where(T_ANCHOR.c.domain == domain, T_ANCHOR.c.subject == subject)
    ).scalar()
    return int(v or 0)


@dataclass(frozen=True)
class Rules:
    """Company facts a writer checks at decide time (never read by apply, ES-16).

    Attributes:
        types: Work item types a create accepts (built-ins plus ``tracker.types``, CO-24).
        seats: Seat handles an assignee may name; None when the org is unknown (no check).
    """

    types: tuple[str, ...] = ("task", "bug", "epic", "story", "spike", "chore")
    seats: frozenset[str] | None = None


@dataclass(frozen=True)
class DecideCtx:
    """Who decides and when.

    Attributes:
        op_id: The operation id.
        writer: This node's id (stamped on the record, ES-5).
        at: The decision instant, unix microseconds (the record's ``at``).
        rules: The company facts.
    """

    op_id: str
    writer: str
    at: int
    rules: Rules = field(default_factory=Rules)

    def record(
        self,
        *,
        kind: str,
        domain: str,
        subject: str,
        payload: dict[str, Any],
        scope: tuple[str, ...] = (),
        version: int = 1,
    ) -> Record:
        """Build a record stamped with this context's op id, writer, generation 1 and instant."""
        return Record(
            kind=kind,
            domain=domain,
            subject=subject,
            op_id=self.op_id,
            writer=self.writer,
            generation=1,
            at=self.at,
            payload=payload,
            scope=scope,
            version=version,
        )


@dataclass
class Decision:
    """The outcome of deciding one write.

    Attributes:
        object_kind: The kind of object the write is about.
        object_id: Its id (ES-7 compares it with the ledger's to refuse ``op_reused``).
        record: The record to append; None when nothing needs writing.
        expect: The subject expectation (the anchor); None for additive kinds and creates.
        noop: The answer's object when ``record`` is None.
        resolved_to: With ``record`` None, the id of an existing object the write folds onto (a
            create whose ``external`` basis an item already holds, CO-35): the answer is outcome
            ``existing`` showing that object. ``object_id`` stays the op's own id.

    .. versionchanged:: 0.1 ``resolved_to`` (issue 10).
    """

    object_kind: str
    object_id: str
    record: Record | None = None
    expect: int | None = None
    noop: dict[str, Any] | None = None
    resolved_to: str | None = None
