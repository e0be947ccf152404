"""Errors of the control plane (fleet.md §14, company.md CO-4)::

CrewletError
├── UsageError
│   └── ControlUsageError
│       ├── CompanyRefused         the document is not a runnable company (422; every issue named)
│       ├── UnknownRevision        no revision with that id (404)
│       ├── IfMatchFailed          ``If-Match`` named another active revision (412)
│       └── RevisionAdvanced       the pointer moved while this write was in flight (409, FL-106)
└── ServiceError
    └── ControlUnavailable         the coordination store could not be asked: the outcome is unknown
        └── PayloadUnopenable      a stored body is unsealed or sealed under a key this node lacks (FL-107)
"""

from __future__ import annotations

from typing import Any

from shared.errors import ServiceError, UsageError

__all__ = [
    "CompanyRefused",
    "ControlUnavailable",
    "ControlUsageError",
    "IfMatchFailed",
    "PayloadUnopenable",
    "RevisionAdvanced",
    "UnknownRevision",
]


class ControlUsageError(UsageError):
    """A control-plane request that cannot succeed as asked."""


class CompanyRefused(ControlUsageError):
    """The document is not a runnable company; ``issues`` lists every error (``path: message``).

    Attributes:
        issues: The validator's issues (:class:`shared.config.Issue`), errors and warnings.
    """

    def __init__(self, issues: list[Any]) -> None:
        self.issues = issues
        errors = [i for i in issues if getattr(i, "severity", "error") == "error"]
        first = errors[0].line() if errors else "refused"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"not a runnable company: {first}{more}")


class UnknownRevision(ControlUsageError):
    """No revision with this id is in the fleet's history."""

    def __init__(self, revision_id: str) -> None:
        self.revision_id = revision_id
        super().__init__(f"unknown revision {revision_id!r}: `crewlet config revisions` lists them")


class IfMatchFailed(ControlUsageError):
    """``If-Match`` named a revision that is not the active one (or ``none`` while one is)."""


class RevisionAdvanced(ControlUsageError):
    """The activation pointer moved between this write's read and its compare-and-set (FL-106).

    The revision stays in history (``revision_id``); ``active_revision_id`` is what won.
    """

    def __init__(self, revision_id: str, active_revision_id: str) -> None:
        self.revision_id = revision_id
        self.active_revision_id = active_revision_id
        super().__init__(
            f"revision {revision_id} was stored but not activated: the fleet activated "
            f"{active_revision_id} meanwhile (re-read it and try again)"
        )


class ControlUnavailable(ServiceError):
    """The coordination store did not answer; whether a write landed is unknown (FL-32)."""


class PayloadUnopenable(ControlUnavailable):
    """A stored company body does not open on this node (FL-107): refused before it is kept.

    Not retryable by waiting: the remedy is in the message (re-import it sealed, or add the missing
    key to ``secrets.keys``).
    """

    retryable = False
