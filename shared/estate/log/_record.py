"""The record envelope every state-log message carries (ES-5).

A record is one JSON object::

    {"v": 1, "kind": "task_update", "domain": "tracker",
     "subject": "crewlet.statelog.tracker.obj.task.<id>", "op_id": "<uuid7>.update-ENG-4",
     "writer": "n1", "generation": 1, "scope": ["task:<id>"], "at": 1732870000000000,
     "payload": {...}}

``v`` is the lowest record version that can apply it whole (ES-46: a project file naming an object
is 14, everything else here 1); ``at`` is the writer's instant in unix microseconds — appliers read
instants only from records, never from a clock (ES-16). A record names its writer and generation or
it is refused before publishing: a record naming nobody could never be dropped by the eviction gate.
A record is at most 8 MiB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shared.text import not_text

from .._errors import InvalidField, TooLarge

__all__ = ["MAX_RECORD", "RECORD_VERSION_READ", "Record"]

MAX_RECORD = 8 * 1024 * 1024
"""Largest encoded record in bytes (ES-5)."""

RECORD_VERSION_READ = 14
"""The highest record version this build applies (ES-45/46); above it a record is undecodable."""


@dataclass(frozen=True)
class Record:
    """One state-log record (ES-5).

    Attributes:
        kind: What it does (``task_create``, ``page_write``, ``barrier``...).
        domain: ``tracker`` or ``pages``.
        subject: The object's subject (or the domain's barrier subject).
        op_id: The operation id; also the message's ``Nats-Msg-Id``.
        writer: The node id that decided it.
        generation: The log generation it was decided in.
        at: The writer's instant, unix microseconds.
        payload: The kind's fields.
        scope: The objects it may touch (``task:<id>``), or a project (``project:ENG``).
        version: The lowest record version that applies it whole (ES-46).
    """

    kind: str
    domain: str
    subject: str
    op_id: str
    writer: str
    generation: int
    at: int
    payload: dict[str, Any] = field(default_factory=dict)
    scope: tuple[str, ...] = ()
    version: int = 1

    def encode(self) -> bytes:
        """Serialise for publishing.

        Raises:
            InvalidField: ``writer`` or ``generation`` is missing (ES-5: refused before publishing).
            TooLarge: the encoded record exceeds 8 MiB.
            InvalidField: a string in it is not text (a lone surrogate): the field is named.
        """
        if not self.writer:
            raise InvalidField("writer", "a state-log record must name its writer node (ES-5)")
        if not self.generation or self.generation < 1:
            raise InvalidField("generation", "a state-log record must name the generation it was decided in")
        body = {
            "v": self.version,
            "kind": self.kind,
            "domain": self.domain,
            "subject": self.subject,
            "op_id": self.op_id,
            "writer": self.writer,
            "generation": self.generation,
            "scope": list(self.scope),
            "at": self.at,
            "payload": self.payload,
        }
        try:
            raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        except UnicodeEncodeError:
            # a lone surrogate (a model's tool call can carry one): refused naming the field before
            # anything is published, never an "unknown outcome" repeated forever (issue 17)
            where, why = not_text(body) or ("record", "not valid text")
            raise InvalidField(where.removeprefix("payload."), why) from None
        if len(raw) > MAX_RECORD:
            raise TooLarge("record", MAX_RECORD, len(raw))
        return raw

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        """Parse a record.

        Raises:
            ValueError: the bytes are not a record this build can read (not JSON, fields missing,
                or a version above :data:`RECORD_VERSION_READ`).
        """
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("a record is a JSON object")
        version = int(data.get("v", 0))
        if version < 1 or version > RECORD_VERSION_READ:
            raise ValueError(
                f"record version {version} is not readable by this build (≤ {RECORD_VERSION_READ})"
            )
        payload = data.get("payload")
        return cls(
            kind=str(data["kind"]),
            domain=str(data["domain"]),
            subject=str(data["subject"]),
            op_id=str(data["op_id"]),
            writer=str(data["writer"]),
            generation=int(data["generation"]),
            at=int(data["at"]),
            payload=payload if isinstance(payload, dict) else {},
            scope=tuple(str(s) for s in data.get("scope") or ()),
            version=version,
        )
