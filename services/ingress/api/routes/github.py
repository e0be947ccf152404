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

import json
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared import estate, logs, telemetry
from shared.router import RouterError
from shared.runtime import NodeContext, api_error

from ...github import HANDLED_EVENTS, GitHubEvent
from ...github_delivery import process
from ...signatures import read_signed
from ...triggers import TriggerPublisher, admit_work
from ._common import TAKEN_BEFORE, add, estate_http_error

__all__ = ["router"]

_log = logs.get("ingress.github")


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


class GitHubRoutes:
    """GitHub's webhook endpoint, publishing triggers through the ingress trigger publisher."""

    def __init__(self, ctx: NodeContext, publisher: TriggerPublisher) -> None:
        self.ctx = ctx
        self.publisher = publisher

    async def github(self, request: Request) -> Any:
        ctx = self.ctx
        admit_work(ctx)
        gh = ctx.org.company.integrations.github
        if gh is None or not gh.enabled:
            raise api_error(404, "github_not_configured", "the company has no enabled integrations.github")
        body = await read_signed(
            request,
            gh.webhook_secret,
            "X-Hub-Signature-256",
            secret_name="integrations.github.webhook_secret",
            source="github",
            log=_log,
        )
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
        try:
            answer = await process(ctx, self.publisher, ev, delivery)
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return JSONResponse(answer, status_code=200) if answer["status"] != "accepted" else answer


def router(ctx: NodeContext, publisher: TriggerPublisher) -> APIRouter:
    """Build ``POST /webhooks/github`` over ``ctx`` publishing triggers through ``publisher``."""
    r = APIRouter(tags=["webhooks"])
    github = telemetry.count_webhook(lambda kw: "github")(GitHubRoutes(ctx, publisher).github)
    add(r, "/webhooks/github", github, methods=["POST"], status_code=202, responses=TAKEN_BEFORE)
    return r
