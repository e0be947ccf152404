"""A GitHub delivery once it is admitted, signed and parsed (CO-35; CO-10, CO-38, CO-41 where they meet it).

Used by ``POST /webhooks/github`` (``services/ingress/api/routes/github.py``; the route's docstring
says the order of checks and the answer). :func:`process` claims the delivery id once (FL-122), then
**links** the delivery's issue or pull request to one work item whose basis is
``github:<repository id>#<number>`` (created on the first delivery about it; title, body, labels,
assignee and state mirrored after), mirrors a comment (waking the item's assignee and
``@``-mentioned seats, CO-41), and publishes CO-35's directed triggers. Estate and router failures
release the claim (GitHub's retry must not read as a duplicate) and propagate for the route to map.
"""

from __future__ import annotations

import hashlib
from typing import Any

from shared import estate, logs
from shared.router import EstateRouter, router_of
from shared.runtime import NodeContext
from shared.text import HIDDEN_CHARACTERS
from shared.tools import publish_comment_wakes

from .github import GitHubEvent, directed_targets, seat_logins, tracker_change
from .triggers import TriggerPublisher, claim_delivery

__all__ = ["TEXT_LIMIT", "TITLE_LIMIT", "process"]

_log = logs.get("ingress.github")
TEXT_LIMIT = 32 * 1024
"""Bytes of a GitHub body or comment mirrored on the item (the tracker's limit, CO-24); longer text
is cut on a character boundary with a note pointing at GitHub, never refused."""
TITLE_LIMIT = 300
"""Characters of a title (the tracker's limit)."""


def _fit(text: str, url: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` within ``limit`` UTF-8 bytes; a cut one ends with a note saying where the rest is."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    note = f"\n\n[cut: the GitHub text is {len(raw)} bytes; read the rest at {url or 'GitHub'}]"
    keep = raw[: limit - len(note.encode())].decode(errors="ignore")
    return keep + note


def _title(ev: GitHubEvent) -> str:
    """The item's title from GitHub's: a NUL or bidirectional control written as its escape (the
    tracker refuses them in titles, issue 38), cut to :data:`TITLE_LIMIT` characters."""
    title = "".join(f"\\u{ord(c):04x}" if c in HIDDEN_CHARACTERS else c for c in ev.title).strip()
    title = title or f"GitHub {ev.kind}"
    return title if len(title) <= TITLE_LIMIT else title[: TITLE_LIMIT - 1] + "…"


_MIRRORED = ("title", "body", "labels", "status", "assignee", "url")


async def _full(est: EstateRouter, key: str) -> dict[str, Any]:
    """One work item with its body (``work.get`` answers ``{"data": item}``)."""
    answer = await est.get_work_item(key, read_level="linearizable")
    return dict(answer.get("data") or answer)


def _project(ctx: NodeContext, unmatched: str | None) -> str | None:
    """``integrations.github.project``, else the unmatched seat's unit's project, else the first."""
    org = ctx.org
    gh = org.company.integrations.github
    if gh.project:
        return str(gh.project)
    seat = org.seat(unmatched) if unmatched else None
    if seat is not None and seat.unit_id is not None:
        unit = org.unit(seat.unit_id)
        if unit is not None and unit.project:
            return str(unit.project)
    for unit in org.units:
        if unit.project:
            return str(unit.project)
    return None


async def _link(
    est: EstateRouter, ev: GitHubEvent, change: dict[str, Any], project: str | None
) -> tuple[dict[str, Any] | None, str]:
    """Find or create the linked item and mirror ``change`` on it; ``(item, outcome)``."""
    author = f"github:{ev.sender or 'unknown'}"
    found = await est.list_work_items(external=ev.basis, limit=1)
    items = (found.get("data") or {}).get("items") or []
    if not items:
        if project is None:
            _log.warning("github_no_project", github_event=ev.kind, basis=ev.basis)
            return None, "no_project"
        # the first delivery about it may be any event: the item starts as GitHub has it now
        created = await est.create_work_item(
            project,
            _title(ev),
            body=_fit(ev.body, ev.url) or None,
            assignee=change.get("assignee"),
            author=author,
            author_kind="integration",
            external=ev.basis,
            url=ev.url or None,
            labels=ev.labels or None,
        )
        item = dict(created.get("object") or {})
        if created.get("outcome") == "existing":  # another node or a seat linked it first (log order)
            return item, "existing"
        status = change.get("status") or ev.state_status
        if status and item.get("key"):
            moved = await est.update_work_item(
                str(item["key"]), status=status, author=author, author_kind="integration"
            )
            item = dict(moved.get("object") or item)
        return item, "created"
    item = await _full(est, str(items[0]["key"]))  # with its body, to compare
    if "title" in change:
        change = {**change, "title": _title(ev), "body": _fit(ev.body, ev.url)}
    for _ in range(3):  # a concurrent write moved the version: read again and re-apply the change
        fields = {
            k: v
            for k, v in change.items()
            if k in _MIRRORED and v is not None and (item.get(k) or None) != (v or None)
        }
        if not fields:
            return item, "unchanged"
        try:
            updated = await est.update_work_item(
                str(item["key"]),
                if_match=item.get("version"),  # a body edit states the version it edited (CO-24)
                author=author,
                author_kind="integration",
                **fields,
            )
        except estate.VersionConflict:
            item = await _full(est, str(item["key"]))
            continue
        return dict(updated.get("object") or item), "updated"
    raise estate.VersionConflict(
        f"{item.get('key')} kept moving while GitHub's change was mirrored", item.get("version")
    )


async def _comment_wakes(
    ctx: NodeContext, ev: GitHubEvent, item: dict[str, Any], comment: dict[str, Any], text: str
) -> list[str]:
    bus = ctx.extras.get("bus")
    if bus is None or ctx.coord is None:
        return []
    return list(
        await publish_comment_wakes(
            bus,
            ctx.coord,
            item,
            comment,
            author=f"github:{ev.sender or 'unknown'}",
            agent_seats={s.handle for s in ctx.org.seats},
            conversation_key=ev.conversation_key,
        )
    )


async def _mirror(
    ctx: NodeContext, ev: GitHubEvent, change: dict[str, Any], unmatched: str | None, delivery: str
) -> tuple[dict[str, Any] | None, str, list[str]]:
    """Link the delivery's issue or pull request and mirror its change and comment: ``(item,
    outcome, woken seats)``."""
    est = router_of(ctx)
    item, outcome = await _link(est, ev, change, _project(ctx, unmatched))
    text = change.get("comment")
    woken: list[str] = []
    if item is not None and isinstance(text, str):
        text = _fit(text, str(ev.comment.get("html_url") or ev.url))
        res = await est.comment_on_work_item(
            str(item["key"]),
            text,
            author=f"github:{ev.sender or 'unknown'}",
            author_kind="integration",
            # the same delivery processed twice (its claim failed open, FL-33) comments once
            op_id=estate.derive_op_id("github-comment", delivery, str(item["key"])),
        )
        comment = dict(res.get("object") or {"body": text})
        woken = await _comment_wakes(ctx, ev, item, comment, text)
        outcome = "commented" if outcome in ("unchanged", "existing") else outcome
    return item, outcome, woken


async def _route(
    publisher: TriggerPublisher,
    ev: GitHubEvent,
    targets: list[tuple[str, str]],
    key: str | None,
    delivery: str,
) -> list[dict[str, Any]]:
    """Publish one trigger per ``(seat, reason)`` target; the routed entries of the answer."""
    routed = []
    for seat, reason in targets:
        published = await publisher.publish(
            seat,
            type="external_notification",
            source="github",
            payload={
                "source": "github",
                "text": ev.text(key),
                "event": ev.kind,
                "reason": reason,
                "sender": ev.sender,
                "conversation_key": ev.conversation_key,
                "work_item": key,
                "basis": ev.basis,
                "url": ev.url,
                "delivery": delivery,
            },
            msg_id=f"github:{delivery}:{seat}",
        )
        entry: dict[str, Any] = {"seat": seat, "reason": reason, "event_id": published.event_id}
        if published.duplicate:
            entry["duplicate"] = True
        routed.append(entry)
    return routed


async def _handle(
    ctx: NodeContext, publisher: TriggerPublisher, ev: GitHubEvent, delivery: str
) -> dict[str, Any]:
    org = ctx.org
    gh = org.company.integrations.github
    logins = seat_logins([*org.seats, *org.humans])
    change = tracker_change(ev, logins)
    targets = directed_targets(ev, logins)
    item: dict[str, Any] | None = None
    outcome = ""
    woken: list[str] = []
    unmatched = org.resolve(gh.route_unmatched_to) if gh.route_unmatched_to else None
    if ev.basis is not None and ev.name != "workflow_run":
        item, outcome, woken = await _mirror(ctx, ev, change, unmatched, delivery)
    if ev.action == "opened" and outcome not in ("created", "no_project", ""):
        targets = []  # the issue was already linked: a redelivered "opened" wakes nobody again
    if not targets and not woken and outcome in ("created", "no_project") and unmatched:
        targets = [(unmatched, "unmatched")]  # a conversation starts and names no seat
    key = str(item["key"]) if item is not None and item.get("key") else None
    routed = await _route(publisher, ev, targets, key, delivery)
    linked = {"work_item": key, "outcome": outcome} if key else None
    _log.info(
        "github_delivery_handled",
        github_event=ev.kind,
        delivery=delivery,
        work_item=key,
        outcome=outcome or None,
        routed=[x["seat"] for x in routed],
        woken=woken,
    )
    if not routed and not woken and outcome in ("", "unchanged"):
        reason = "nothing to mirror and nobody to route to" if key else "not about an issue or pull request"
        return {
            "status": "ignored",
            "event": ev.kind,
            "delivery": delivery,
            "reason": reason,
            "linked": linked,
        }
    return {
        "status": "accepted",
        "event": ev.kind,
        "delivery": delivery,
        "linked": linked,
        "routed": routed,
        "woken": woken,
    }


async def process(
    ctx: NodeContext, publisher: TriggerPublisher, ev: GitHubEvent, delivery: str
) -> dict[str, Any]:
    """Claim ``delivery`` once (FL-122), then link, mirror and route the event ``ev`` (CO-35).

    Args:
        ctx: The node's context (its org with ``integrations.github``, its bus and coordination).
        publisher: The ingress trigger publisher.
        ev: The delivery's event (a kind in :data:`~services.ingress.github.HANDLED_EVENTS`).
        delivery: The ``X-GitHub-Delivery`` id.

    Returns:
        ``{"status": "duplicate", "delivery"}`` for a delivery taken before; ``{"status": "ignored",
        "event", "delivery", "reason", "linked"}`` when it changed nothing and woke nobody; else
        ``{"status": "accepted", "event", "delivery", "linked", "routed", "woken"}``.

    Raises:
        EstateError | RouterError: a tracker read or write failed (the claim is released first).
    """
    claim = await claim_delivery(ctx, f"github.{hashlib.sha256(delivery.encode()).hexdigest()[:40]}")
    if claim.duplicate:
        _log.info("webhook_duplicate", source="github", delivery=delivery)
        return {"status": "duplicate", "delivery": delivery}
    try:
        return await _handle(ctx, publisher, ev, delivery)
    except Exception:
        await claim.release(ctx)  # GitHub's retry must not read as a duplicate
        raise
