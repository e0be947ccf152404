"""``POST /webhooks/github``: GitHub as an integration (CO-35; CO-10, CO-38, CO-41 where they meet it).

Driven by ``integrations.github`` (the generic ``/webhooks/inbound/{source}`` stays). Order of checks,
so a refused request changes nothing:

1. draining, no company, or a shedding node → 503 + ``Retry-After`` (FL-129, FL-113);
2. no ``integrations.github`` (or ``enabled: false``) → 404 ``github_not_configured``;
3. body over 5 MiB → 413 ``body_too_large``;
4. the secret unset or its variable unresolved → 503 ``webhook_secret_unset`` + ``Retry-After``;
5. ``X-Hub-Signature-256`` missing or wrong → 401, HMAC-SHA256 over the **raw bytes** as sent (a
   body re-encoded after signing fails);
6. ``X-GitHub-Event`` / ``X-GitHub-Delivery`` missing → 400 naming the header; the body: JSON
   (``application/json``) or form-encoded (``application/x-www-form-urlencoded``: the JSON is the
   ``payload`` field) — a form without ``payload``, or one whose ``payload`` is not a JSON object, is
   400 naming ``payload``;
7. ``ping`` → 200 ``pong``; an event kind CO-35 does not handle → 200 ``ignored`` naming it;
8. the delivery id is claimed once in the ``claims`` slot (a repeat is 200 ``duplicate``; the claim
   fails open when the store cannot be asked, FL-33).

A delivery processed again because its claim failed open changes nothing twice: its comment is
written with an operation id derived from the delivery id (ES-6: the estate folds the repeat onto
the first), and its triggers carry ``github:<delivery>:<seat>`` as ``Nats-Msg-Id``, so the inbox
stream collapses them; such a routed entry says ``"duplicate": true`` (its ``event_id`` never runs).
Seen in the chaos run (issue 17): the claims bucket's leader lost for 10 s, a replayed comment
delivery mirrored its comment twice.

Then, without any model: the delivery's issue or pull request is **linked** to one work item whose
basis is ``github:<repository id>#<number>`` — the first delivery about it creates the item (in
``integrations.github.project``), and a second create for the same basis, however it comes (another
node, a seat's tool), returns the existing item; later deliveries mirror title and body edits,
labels, a GitHub assignee who is a seat, and the state (closed → ``done``, reopened →
``reopened``) as tracker writes authored ``github:<login>``; a comment becomes a comment on the item
that wakes its assignee and ``@``-mentioned seats (CO-41). Last, CO-35's directed routing wakes the
seats the event names (:func:`services.ingress.github.directed_targets`), an ``opened`` that names
none goes to ``route_unmatched_to``, and every trigger carries the conversation key
``github:<repo full name>#<number>`` (CO-38) and the linked item.

The answer says what was done: 202 ``{"status": "accepted", "event", "delivery", "linked":
{"work_item", "outcome"}, "routed": [{"seat", "reason", "event_id", "duplicate"?}], "woken": [...]}``; 200
``ignored`` with the reason when the delivery changed nothing and woke nobody.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared import estate, logs, telemetry
from shared.router import EstateRouter, RouterError, router_of
from shared.runtime import NodeContext, api_error

from ...github import HANDLED_EVENTS, GitHubEvent, directed_targets, seat_logins, tracker_change
from ...triggers import TriggerPublisher, admit_work, claim_delivery
from .webhooks import MAX_BODY_BYTES, read_capped, signature_ok
from .work import estate_http_error

__all__ = ["router"]

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
    title = ev.title.strip() or f"GitHub {ev.kind}"
    return title if len(title) <= TITLE_LIMIT else title[: TITLE_LIMIT - 1] + "…"


_MIRRORED = ("title", "body", "labels", "status", "assignee", "url")


def _parse(body: bytes, content_type: str) -> dict[str, Any]:
    """The delivery's JSON object, from a JSON or a form-encoded body.

    Raises:
        HTTPException: 400 ``invalid_form`` / ``invalid_json`` naming the field.
    """
    raw = body
    field = "body"
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        field = "payload"
        try:
            form = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise api_error(400, "invalid_form", "body: a form body must be UTF-8") from None
        values = form.get("payload")
        if not values:
            raise api_error(400, "invalid_form", "payload: the form has no payload field")
        raw = values[0].encode("utf-8", "surrogatepass")
    try:
        payload = json.loads(raw)
        json.dumps(payload, ensure_ascii=False).encode("utf-8")  # lone surrogates cannot be forwarded
    except (UnicodeDecodeError, UnicodeEncodeError, ValueError) as e:
        raise api_error(400, "invalid_json", f"{field}: not JSON ({e})") from None
    except RecursionError:
        raise api_error(400, "invalid_json", f"{field}: JSON nested too deeply") from None
    if not isinstance(payload, dict):
        raise api_error(400, "invalid_json", f"{field}: a JSON object is required")
    return payload


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


def router(ctx: NodeContext, publisher: TriggerPublisher) -> APIRouter:
    """Build ``POST /webhooks/github`` over ``ctx`` publishing triggers through ``publisher``."""
    r = APIRouter(tags=["webhooks"])

    async def link(
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

    async def comment_wakes(
        ev: GitHubEvent, item: dict[str, Any], comment: dict[str, Any], text: str
    ) -> list[str]:
        from shared.tools import publish_comment_wakes

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

    @r.post(
        "/webhooks/github",
        status_code=202,
        responses={
            200: {
                "description": "Taken before, ignored, or a ping: nothing new published",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        },
    )
    @telemetry.count_webhook(lambda kw: "github")
    async def github(request: Request) -> Any:
        admit_work(ctx)
        gh = ctx.org.company.integrations.github
        if gh is None or not gh.enabled:
            raise api_error(404, "github_not_configured", "the company has no enabled integrations.github")
        body = await read_capped(request, MAX_BODY_BYTES)
        if body is None:
            raise api_error(413, "body_too_large", f"the body is over {MAX_BODY_BYTES} bytes (5 MiB)")
        if not gh.webhook_secret:
            raise api_error(
                503,
                "webhook_secret_unset",
                "integrations.github.webhook_secret is not configured or its variable is unset",
                headers={"Retry-After": "60"},
            )
        if not signature_ok(gh.webhook_secret, body, request.headers.get("x-hub-signature-256")):
            _log.warning("webhook_signature_rejected", source="github")
            raise api_error(401, "bad_signature", "X-Hub-Signature-256 is missing or does not match the body")
        name = request.headers.get("x-github-event", "").strip()
        if not name:
            raise api_error(400, "missing_event", "header X-GitHub-Event is required")
        delivery = request.headers.get("x-github-delivery", "").strip()
        if not delivery:
            raise api_error(400, "missing_delivery_id", "header X-GitHub-Delivery is required")
        payload = _parse(body, request.headers.get("content-type", ""))
        if name == "ping":
            return JSONResponse({"status": "pong", "delivery": delivery}, status_code=200)
        ev = GitHubEvent(name, payload)
        if name in HANDLED_EVENTS and (problem := ev.unreadable()) is not None:
            raise api_error(400, "invalid_payload", problem)
        if name not in HANDLED_EVENTS:
            _log.info("github_ignored", github_event=ev.kind, delivery=delivery, reason="kind_not_handled")
            return JSONResponse(
                {"status": "ignored", "event": ev.kind, "reason": f"event {name!r} is not handled (CO-35)"},
                status_code=200,
            )
        claim = await claim_delivery(ctx, f"github.{hashlib.sha256(delivery.encode()).hexdigest()[:40]}")
        if claim.duplicate:
            _log.info("webhook_duplicate", source="github", delivery=delivery)
            return JSONResponse({"status": "duplicate", "delivery": delivery}, status_code=200)
        try:
            return await handle(ev, delivery)
        except (estate.EstateError, RouterError) as e:
            await claim.release(ctx)  # GitHub's retry must not read as a duplicate
            raise estate_http_error(e) from None
        except Exception:
            await claim.release(ctx)
            raise

    async def handle(ev: GitHubEvent, delivery: str) -> Any:
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
            est = router_of(ctx)
            item, outcome = await link(est, ev, change, _project(ctx, unmatched))
            text = change.get("comment")
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
                woken = await comment_wakes(ev, item, comment, text)
                outcome = "commented" if outcome in ("unchanged", "existing") else outcome
        if ev.action == "opened" and outcome not in ("created", "no_project", ""):
            targets = []  # the issue was already linked: a redelivered "opened" wakes nobody again
        if not targets and not woken and outcome in ("created", "no_project") and unmatched:
            targets = [(unmatched, "unmatched")]  # a conversation starts and names no seat
        key = str(item["key"]) if item is not None and item.get("key") else None
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
            reason = (
                "nothing to mirror and nobody to route to" if key else "not about an issue or pull request"
            )
            return JSONResponse(
                {
                    "status": "ignored",
                    "event": ev.kind,
                    "delivery": delivery,
                    "reason": reason,
                    "linked": linked,
                },
                status_code=200,
            )
        return {
            "status": "accepted",
            "event": ev.kind,
            "delivery": delivery,
            "linked": linked,
            "routed": routed,
            "woken": woken,
        }

    return r
