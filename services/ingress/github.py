"""GitHub deliveries, read: what one delivery is about and whom it concerns (CO-35).

Pure functions over a delivery's payload, no I/O, so the routing table is tested row by row:

- :class:`GitHubEvent` names the event (``issues.opened``), the repository, the issue or pull request
  number, its **basis** ``github:<repository id>#<number>`` (the work item it mirrors, one per
  GitHub issue or pull request) and its **conversation key** ``github:<repo full name>#<number>``;
- :func:`directed_targets` is CO-35's directed routing table: ``review_requested`` → the requested
  reviewer; ``opened`` → requested reviewers, assignees, ``@``-mentions in the body; ``assigned`` →
  the assignee; a review ``changes_requested``/``approved`` → the PR author; ``closed`` (merged or
  not), ``reopened``, ``ready_for_review``, ``converted_to_draft`` → the author then the assignees;
  ``issues.closed`` → the assignees; ``workflow_run.completed`` with ``conclusion: failure`` → the
  run's actor. First reason per person wins; only logins that are agent seats are routed (seat
  identity: ``identities.github_login`` of an agent role, ``contact.github_login`` of a human one,
  compared case-insensitively). Not routed: label, milestone, synchronize, edits, deletions,
  green or cancelled runs, team review requests;
- :func:`tracker_change` is what a delivery changes on the linked work item without any model:
  title and body (``opened``, ``edited``), labels, the assignee (a GitHub assignee who is a seat),
  the state (``closed`` → ``done``, ``reopened`` → ``reopened``), and comments.

Choices (ours, where CO-35 is silent): ``route_unmatched_to`` receives only what starts a
conversation (an issue or pull request ``opened`` that names no seat): a later event nobody is
routed for is mirrored on the linked item and wakes nobody, so a repository's ordinary traffic
costs one triage turn per issue, not one per delivery.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HANDLED_EVENTS",
    "GitHubEvent",
    "directed_targets",
    "mentions",
    "seat_logins",
    "tracker_change",
]

HANDLED_EVENTS = frozenset(
    {
        "issues",
        "pull_request",
        "issue_comment",
        "pull_request_review",
        "pull_request_review_comment",
        "workflow_run",
    }
)
"""The event kinds CO-35 handles; anything else is answered ``ignored`` naming the kind."""

_MENTION = re.compile(r"(?<![\w@`])@([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))\b")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def _login(user: Any) -> str:
    return str(user.get("login") or "") if isinstance(user, Mapping) else ""


def mentions(text: str) -> list[str]:
    """``@login`` mentions in GitHub Markdown, in order, without duplicates; code spans do not count."""
    out: list[str] = []
    for m in _MENTION.finditer(_CODE.sub(" ", text or "")):
        if m.group(1) not in out:
            out.append(m.group(1))
    return out


@dataclass(frozen=True)
class GitHubEvent:
    """One delivery (``X-GitHub-Event`` and its payload).

    Attributes:
        name: The ``X-GitHub-Event`` header (``issues``, ``pull_request``, ...).
        payload: The parsed body.
    """

    name: str
    payload: Mapping[str, Any]

    @property
    def action(self) -> str:
        """The payload's ``action`` (``opened``, ``labeled``, ...), or ``""``."""
        return str(self.payload.get("action") or "")

    @property
    def kind(self) -> str:
        """``<event>.<action>`` (``issues.opened``), or the bare event name."""
        return f"{self.name}.{self.action}" if self.action else self.name

    @property
    def repository(self) -> Mapping[str, Any]:
        """The payload's ``repository`` object (empty when absent)."""
        repo = self.payload.get("repository")
        return repo if isinstance(repo, Mapping) else {}

    @property
    def subject(self) -> Mapping[str, Any]:
        """The issue or pull request the delivery is about (empty for e.g. ``workflow_run``)."""
        for key in ("pull_request", "issue"):
            value = self.payload.get(key)
            if isinstance(value, Mapping):
                return value
        return {}

    @property
    def is_pull_request(self) -> bool:
        """True for a pull request (an ``issue_comment`` on one too)."""
        return "pull_request" in self.payload or "pull_request" in self.subject

    @property
    def number(self) -> int | None:
        """The issue or pull request number (a positive integer below 2**53), or None."""
        n = self.subject.get("number")
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 2**53:
            return n
        return None

    def unreadable(self) -> str | None:
        """What makes an issue or pull request delivery unlinkable, naming the field; None when fine.

        ``workflow_run`` is about no issue: it is never unreadable here.
        """
        if self.name == "workflow_run":
            return None
        where = "pull_request" if isinstance(self.payload.get("pull_request"), Mapping) else "issue"
        if not self.subject:
            return f"{where}: an object is required for a {self.name} delivery"
        if self.number is None:
            return f"{where}.number: a positive integer is required (got {self.subject.get('number')!r})"
        repo_id = self.repository.get("id")
        if not isinstance(repo_id, int) or isinstance(repo_id, bool) or repo_id <= 0:
            return f"repository.id: a positive integer is required (got {repo_id!r})"
        if not isinstance(self.repository.get("full_name"), str):
            return "repository.full_name: a string is required"
        return None

    @property
    def basis(self) -> str | None:
        """``github:<repository id>#<number>``: the work item this delivery mirrors (CO-35), or None."""
        repo_id = self.repository.get("id")
        if self.number is None or not isinstance(repo_id, int):
            return None
        return f"github:{repo_id}#{self.number}"

    @property
    def conversation_key(self) -> str | None:
        """``github:<repo full name>#<number>`` (CO-35, CO-38), or None."""
        name = self.repository.get("full_name")
        if self.number is None or not isinstance(name, str):
            return None
        return f"github:{name}#{self.number}"

    @property
    def title(self) -> str:
        """The issue or pull request title (``""`` when it is not a string)."""
        value = self.subject.get("title")
        return value if isinstance(value, str) else ""

    @property
    def body(self) -> str:
        """The issue or pull request body (``""`` when GitHub sends null or not a string)."""
        value = self.subject.get("body")
        return value if isinstance(value, str) else ""

    @property
    def state_status(self) -> str | None:
        """The tracker status the subject's GitHub state means: ``closed`` → ``done``, else None."""
        return "done" if self.subject.get("state") == "closed" else None

    @property
    def url(self) -> str:
        """The issue or pull request ``html_url``."""
        return str(self.subject.get("html_url") or "")

    @property
    def labels(self) -> list[str]:
        """The subject's label names, in GitHub's order."""
        raw = self.subject.get("labels")
        return (
            [str(lb["name"]) for lb in raw if isinstance(lb, Mapping) and lb.get("name")]
            if isinstance(raw, list)
            else []
        )

    @property
    def author(self) -> str:
        """The subject's author login."""
        return _login(self.subject.get("user"))

    @property
    def assignees(self) -> list[str]:
        """The subject's assignee logins."""
        raw = self.subject.get("assignees")
        out = [_login(a) for a in raw] if isinstance(raw, list) else []
        single = _login(self.subject.get("assignee"))
        return [x for x in dict.fromkeys([*out, single]) if x]

    @property
    def comment(self) -> Mapping[str, Any]:
        """The ``comment`` (issue or review comment) or ``review`` object, or empty."""
        for key in ("comment", "review"):
            value = self.payload.get(key)
            if isinstance(value, Mapping):
                return value
        return {}

    @property
    def sender(self) -> str:
        """Who caused the delivery."""
        return _login(self.payload.get("sender"))

    def text(self, work_item: str | None = None) -> str:
        """What a seat reads: the kind, where, who, the title and the body or comment."""
        where = (
            f"{self.repository.get('full_name', '?')}#{self.number}"
            if self.number is not None
            else str(self.repository.get("full_name", "?"))
        )
        what = "pull request" if self.is_pull_request else "issue"
        lines = [f"[github {self.kind}] {what} {where} by {self.sender or '?'}: {self.title}".rstrip(": ")]
        if self.name in ("issue_comment", "pull_request_review_comment", "pull_request_review"):
            lines += ["", str(self.comment.get("body") or "")]
        elif self.action in ("opened", "edited"):
            lines += ["", self.body]
        if self.name == "workflow_run":
            run = self.payload.get("workflow_run") or {}
            lines += [
                "",
                f"workflow {run.get('name', '?')} concluded {run.get('conclusion', '?')}: {run.get('html_url', '')}",
            ]
        if work_item:
            lines += ["", f"Linked work item: {work_item}" + (f" ({self.url})" if self.url else "")]
        return "\n".join(lines).strip()


def seat_logins(seats: Iterable[Any]) -> dict[str, tuple[str, str]]:
    """GitHub login (lower-case) → ``(handle, kind)`` from the org's seats (CO-35 seat identity).

    Agent seats are read from ``identities.github_login``, human seats from ``contact.github_login``.
    """
    out: dict[str, tuple[str, str]] = {}
    for seat in seats:
        role = seat.role
        holder = role.identities if seat.kind == "agent" else role.contact
        login = getattr(holder, "github_login", None) if holder is not None else None
        if login:
            out.setdefault(str(login).lower(), (seat.handle, seat.kind))
    return out


def directed_targets(event: GitHubEvent, logins: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """CO-35's directed routing: ``(agent seat, reason)`` pairs, first reason per person winning.

    Args:
        event: The delivery.
        logins: :func:`seat_logins` of the org.

    Returns:
        The agent seats to wake, in order, each with the reason (``review_requested``, ``assigned``,
        ``mentioned``, ``author``, ``assignee``, ``workflow_failed``); empty when the kind routes
        nobody.
    """
    p, action, name = event.payload, event.action, event.name
    people: list[tuple[str, str]] = []
    if name == "pull_request" and action == "review_requested":
        people.append((_login(p.get("requested_reviewer")), "review_requested"))
    elif name in ("issues", "pull_request") and action == "opened":
        reviewers = event.subject.get("requested_reviewers")
        for r in reviewers if isinstance(reviewers, list) else []:
            people.append((_login(r), "review_requested"))
        people += [(a, "assigned") for a in event.assignees]
        people += [(m, "mentioned") for m in mentions(event.body)]
    elif action == "assigned" and name in ("issues", "pull_request"):
        people.append((_login(p.get("assignee")), "assigned"))
    elif name == "pull_request_review" and action == "submitted":
        state = str((p.get("review") or {}).get("state") or "").lower()
        if state in ("changes_requested", "approved"):
            people.append((event.author, "author"))
    elif (
        name == "pull_request" and action in ("closed", "reopened", "ready_for_review", "converted_to_draft")
    ) or (name == "issues" and action == "reopened"):
        people.append((event.author, "author"))
        people += [(a, "assignee") for a in event.assignees]
    elif name == "issues" and action == "closed":
        people += [(a, "assignee") for a in event.assignees]
    elif name == "workflow_run" and action == "completed":
        run = p.get("workflow_run") or {}
        if isinstance(run, Mapping) and run.get("conclusion") == "failure":
            people.append((_login(run.get("actor")), "workflow_failed"))
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for login, reason in people:
        seat = logins.get(login.lower()) if login else None
        if seat is None or seat[1] != "agent" or seat[0] in seen:
            continue
        seen.add(seat[0])
        out.append((seat[0], reason))
    return out


def tracker_change(event: GitHubEvent, logins: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """What the delivery changes on the linked work item (tracker writes, no model).

    Returns:
        Fields to update (``title``, ``body``, ``labels``, ``status``, ``assignee``, ``url``), plus
        ``comment`` (the text to add) for comments and submitted reviews with a body. Empty when
        the delivery changes nothing.
    """
    name, action = event.name, event.action
    out: dict[str, Any] = {}
    if name in ("issues", "pull_request"):
        if action in ("edited", "opened"):
            out.update(title=event.title, body=event.body)
        if action in ("labeled", "unlabeled"):
            out["labels"] = event.labels
        if action in ("assigned", "unassigned", "opened"):
            seats = [logins[a.lower()][0] for a in event.assignees if a.lower() in logins]
            if seats:
                out["assignee"] = seats[0]
        if action == "closed":
            out["status"] = "done"
        if action == "reopened":
            out["status"] = "reopened"
    if (name in ("issue_comment", "pull_request_review_comment") and action == "created") or (
        name == "pull_request_review" and action == "submitted" and event.comment.get("body")
    ):
        text = str(event.comment.get("body") or "")
        if text.strip():
            state = str(event.comment.get("state") or "")
            prefix = f"{event.sender} on GitHub" + (
                f" ({state.lower()})" if name == "pull_request_review" and state else ""
            )
            out["comment"] = f"{prefix}: {text}"
    return out
