"""Comment and mention wakes (CO-41): who a comment wakes, the per-item bound, and the publish.

A comment on a native work item wakes its assignee and watchers (``reason: commented``) and every
agent seat ``@mentioned`` in its text (``reason: mentioned``), never its author. Each wake is a
CO-10 tracker wake (:func:`shared.bus.wake_envelope`): ``external_notification{source: work}`` at
delegation depth 0, carrying the writing turn as ``parent_turn_id`` and the writer's trace context.

**The bound.** So that two seats cannot converse forever through one item, a seat gets at most
:data:`COMMENT_WAKES_PER_HOUR` comment wakes per item per hour (CO-41, ours), fleet-wide. The count
lives in the coordination store's ``wakes`` slot, whose bucket age is the hour (FL-34: retention is
a bucket's age, never a per-key TTL). A (seat, item) pair owns six keys ``<seat>.<item>.0`` to
``.5``; a wake must *create* one that is absent (create-only-if-absent, so two nodes racing for the
last key cannot both win), and each key ages out one hour after it was written: at most six wakes in
any sliding hour. The key records the comment id, so a repeated publish of one comment (an API
retry with the same ``op_id``) is counted once.

**When the store cannot answer** (:class:`~shared.coordination.CoordinationUnavailable`, FL-32) the
bound fails *open*: the wake is published and ``comment_wake_limit_unknown`` is logged. A missed
wake loses work silently (the seat never learns of a comment addressed to it), while an extra wake
costs one turn; and a store that cannot be reached also stops this node admitting new turns within
one heartbeat (FL-53), so failing open cannot feed an unbounded conversation. FL-33 has no row for
this contract; the choice is ours.

Not guaranteed: a wake is published after the comment landed, by its writer; a writer that dies in
between loses the wake (the comment itself stays). Mentions are plain ``@handle`` words outside code
spans and fenced code blocks; no other Markdown is parsed.

.. versionadded:: 0.1 (issue 10, CO-41)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from shared import logs, telemetry
from shared.bus import Bus, BusError, Envelope, PublishOutcomeUnknown, wake_envelope
from shared.config import HANDLE_PATTERN
from shared.coordination import Coordination, CoordinationUnavailable, RevisionConflict, bucket_specs

__all__ = [
    "COMMENT_WAKES_PER_HOUR",
    "COMMENT_WAKE_WINDOW",
    "CommentWakeReason",
    "claim_comment_wake",
    "comment_wake_targets",
    "mentioned_handles",
    "publish_comment_wakes",
]

_log = logs.get("tools.wakes")

COMMENT_WAKES_PER_HOUR = 6
"""At most this many comment wakes per seat and item in :data:`COMMENT_WAKE_WINDOW` (CO-41, ours)."""


def _window() -> timedelta:
    age = bucket_specs("crewlet", lease_ttl=timedelta(seconds=45))["wakes"].age
    if age is None:  # pragma: no cover - an ageless bucket would make the bound "6 ever"
        raise RuntimeError("the coordination 'wakes' bucket must have an age (CO-41, FL-34)")
    return age


COMMENT_WAKE_WINDOW = _window()
"""The bound's sliding window: the ``wakes`` bucket's age, one hour (CO-41, FL-34)."""

CommentWakeReason = Literal["commented", "mentioned"]
"""Why a comment woke a seat: it is the item's assignee or a watcher, or it was ``@mentioned``."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[`~]*[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_HANDLE = HANDLE_PATTERN.removeprefix("^").removesuffix("$")
# After a non-word character (not an e-mail's local part, not "@@"), and a whole handle: "@devops"
# never mentions "dev", and "@dev." or "(@dev)" does.
_MENTION = re.compile(rf"(?<![\w.@/-])@({_HANDLE})(?![\w-])")
_SAFE = re.compile(r"^[A-Za-z0-9_=-]{1,64}$")


def _seat(ref: Any) -> str | None:
    """A bare handle from an item field: ``lead`` and ``seat:lead`` both name the seat ``lead``."""
    if not isinstance(ref, str) or not ref:
        return None
    return ref.removeprefix("seat:")


def mentioned_handles(body: str) -> list[str]:
    """Return the handles ``@mentioned`` in ``body``, in order of first appearance (CO-41).

    A mention is ``@`` and a handle in the company's grammar (``HANDLE_PATTERN``), after the start
    or a non-word character, and not inside a code span (`` `@dev` ``) or a fenced code block.
    Whether a handle names a seat is not checked here.

    Args:
        body: A comment's text (Markdown).

    Returns:
        Distinct handles, first appearance first; empty when there is none.
    """
    prose = _CODE_SPAN.sub(" ", _FENCE.sub("\n", body))
    return list(dict.fromkeys(m.group(1) for m in _MENTION.finditer(prose)))


def comment_wake_targets(
    item: Mapping[str, Any], body: str, *, author: str, agent_seats: Collection[str]
) -> list[tuple[str, CommentWakeReason]]:
    """Return who a comment wakes and why (CO-41): pure, no I/O.

    The item's assignee, then its watchers in the order given, with ``commented``; then every
    handle :func:`mentioned_handles` finds in ``body``, with ``mentioned``. A seat is listed once,
    with its first reason. Only agent seats are woken (a human seat has no inbox, CO-10), and never
    the comment's author: a seat is not woken by its own write.

    Args:
        item: The work item as ``get_work_item`` answers it: ``assignee`` (a handle or None) and
            ``watchers`` (a list of handles; ``seat:<handle>`` is read as ``<handle>``).
        body: The comment's text.
        author: Who wrote the comment: a seat handle (or ``seat:<handle>``), ``operator:<token
            id>``, or an external author; only a seat's handle can match a target.
        agent_seats: The handles of the company's agent seats.

    Returns:
        ``(seat, reason)`` pairs, in the order above; empty when nobody is woken.
    """
    writer = _seat(author)
    out: dict[str, CommentWakeReason] = {}

    def add(ref: Any, reason: CommentWakeReason) -> None:
        seat = _seat(ref)
        if seat is not None and seat != writer and seat in agent_seats and seat not in out:
            out[seat] = reason

    add(item.get("assignee"), "commented")
    watchers = item.get("watchers")
    if isinstance(watchers, list | tuple):
        for watcher in watchers:
            add(watcher, "commented")
    for handle in mentioned_handles(body):
        add(handle, "mentioned")
    return list(out.items())


def _token(part: str) -> str:
    """A KV-key-safe token; injective (hashed when the text is not safe as it is)."""
    if _SAFE.match(part) and not part.startswith("h_"):
        return part
    return "h_" + hashlib.sha256(part.encode()).hexdigest()[:32]


async def claim_comment_wake(coord: Coordination, seat: str, work_item: str, *, comment_id: str) -> bool:
    """Count one comment wake of ``seat`` for ``work_item`` against CO-41's bound, fleet-wide.

    Reads the pair's :data:`COMMENT_WAKES_PER_HOUR` keys in the ``wakes`` slot, then creates the
    first absent one (create-only-if-absent: of two writers racing for one key exactly one wins,
    and the loser tries the next). Each key ages out :data:`COMMENT_WAKE_WINDOW` after it was
    written (the bucket's age, FL-34), so the bound is a sliding hour.

    Args:
        coord: The coordination store.
        seat: The seat to wake.
        work_item: The item's key.
        comment_id: The comment; a comment already counted for this pair answers True again
            without counting twice.

    Returns:
        True when the wake may be published (counted now, or already counted for this comment);
        False when the pair already had its wakes this hour.

    Raises:
        CoordinationUnavailable: the store could not be asked, or a create's outcome is unknown;
            the answer is unknown (FL-32) and the caller chooses the direction.
    """
    prefix = f"{_token(seat)}.{_token(work_item)}."
    keys = [f"{prefix}{n}" for n in range(COMMENT_WAKES_PER_HOUR)]
    found = await asyncio.gather(*(coord.get("wakes", k) for k in keys))
    for entry in found:
        if entry is not None and _comment_of(entry.value) == comment_id:
            return True
    value = json.dumps(
        {"comment": comment_id, "seat": seat, "work_item": work_item, "at": datetime.now(UTC).isoformat()},
        separators=(",", ":"),
    ).encode()
    for key, entry in zip(keys, found, strict=True):
        if entry is not None:
            continue
        try:
            await coord.create("wakes", key, value)
        except RevisionConflict:
            continue  # a peer took this one since the read: try the next
        return True
    return False


def _comment_of(raw: bytes) -> str | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    comment = data.get("comment") if isinstance(data, dict) else None
    return comment if isinstance(comment, str) else None


async def _within_bound(coord: Coordination | None, seat: str, key: str, comment_id: str) -> bool:
    """CO-41's bound for one wake: False when past it (logged ``comment_wake_limited``).

    An unknown answer, or no coordination store, fails open (logged ``comment_wake_limit_unknown``).
    """
    if coord is None:
        _log.warning("comment_wake_limit_unknown", seat=seat, work_item=key, error="no coordination store")
        return True
    try:
        if not await claim_comment_wake(coord, seat, key, comment_id=comment_id):
            _log.warning("comment_wake_limited", seat=seat, work_item=key, comment=comment_id)
            return False
    except CoordinationUnavailable as e:
        _log.warning("comment_wake_limit_unknown", seat=seat, work_item=key, error=str(e))
    return True


async def _publish_wake(
    bus: Bus,
    seat: str,
    env: Envelope,
    *,
    key: str,
    msg_id: str,
    headers: Mapping[str, str],
    reason: CommentWakeReason,
    author: str,
) -> str | None:
    """Publish one wake to ``seat``'s inbox; the seat when it is (possibly) published, else None.

    An unacknowledged publish is retried once under the same ``msg_id`` and then counted
    (``comment_wake_unconfirmed``); a refused one is logged ``comment_wake_failed``.
    """
    for attempt in (1, 2):
        try:
            await bus.publish_to_seat(seat, env, msg_id=msg_id, headers=dict(headers))
        except PublishOutcomeUnknown as e:
            if attempt == 2:  # it may be stored: the same msg id collapses a later repeat
                _log.warning("comment_wake_unconfirmed", seat=seat, work_item=key, error=str(e))
                return seat
            continue
        except BusError as e:
            _log.warning("comment_wake_failed", seat=seat, work_item=key, reason=reason, error=str(e))
            return None
        _log.info("comment_wake_published", seat=seat, work_item=key, reason=reason, writer=author)
        return seat
    return None  # pragma: no cover - the loop always returns


async def publish_comment_wakes(
    bus: Bus,
    coord: Coordination | None,
    item: Mapping[str, Any],
    comment: Mapping[str, Any],
    *,
    author: str,
    agent_seats: Collection[str],
    conversation_key: str | None = None,
    parent_turn_id: str | None = None,
    trace_headers: Mapping[str, str] | None = None,
) -> list[str]:
    """Wake the seats a comment concerns, within CO-41's bound; call it after the comment landed.

    Targets come from :func:`comment_wake_targets`; each passes :func:`claim_comment_wake` (an
    unknown answer fails open, logged ``comment_wake_limit_unknown``; past the bound the wake is
    dropped, logged ``comment_wake_limited{seat, work_item}``) and is published to the seat's inbox
    as :func:`shared.bus.wake_envelope` with ``Nats-Msg-Id`` ``comment:<comment id>:<seat>``, so
    publishing one comment's wakes twice stores them once. Failures are logged, never raised: the
    comment has landed whatever happens to its wakes.

    Args:
        bus: The node's bus.
        coord: The coordination store; None counts nothing (fail open, logged).
        item: The commented item as ``get_work_item`` answers it (``key``, ``assignee``,
            ``watchers``).
        comment: The comment as ``comment_on_work_item`` answers it (``id``, ``body``).
        author: Who wrote it: the seat's handle, ``operator:<token id>``, ``github:<login>``, ...
            It is never woken, and it is the wake's ``sender``.
        agent_seats: The handles of the company's agent seats.
        conversation_key: The wake's conversation (e.g. ``github:<repository full name>#<number>``
            for a GitHub-linked item); None for none.
        parent_turn_id: The writing turn, when a seat wrote the comment.
        trace_headers: ``traceparent``/``tracestate`` to continue in the woken turns; None takes the
            current span's context (the tool call or the HTTP request that wrote the comment).

    Returns:
        The seats woken (published, or possibly published: an unacknowledged publish is retried
        once and then counted), in target order.
    """
    key, comment_id = item.get("key"), comment.get("id")
    text = comment.get("body")
    if not isinstance(key, str) or not key or not isinstance(comment_id, str) or not comment_id:
        _log.warning("comment_wake_skipped", work_item=key, comment=comment_id, reason="no key or comment id")
        return []
    body = text if isinstance(text, str) else ""
    headers: dict[str, str] = {}
    if trace_headers is None:
        telemetry.inject(headers)
    else:
        headers.update(trace_headers)

    async def wake(seat: str, reason: CommentWakeReason) -> str | None:
        if not await _within_bound(coord, seat, key, comment_id):
            return None
        env = wake_envelope(
            key,
            author,
            parent_turn_id=parent_turn_id,
            reason=reason,
            comment_id=comment_id,
            comment_text=body,
            conversation_key=conversation_key,
        )
        msg_id = f"comment:{comment_id}:{seat}"
        return await _publish_wake(
            bus, seat, env, key=key, msg_id=msg_id, headers=headers, reason=reason, author=author
        )

    targets = comment_wake_targets(item, body, author=author, agent_seats=agent_seats)
    woken = await asyncio.gather(*(wake(seat, reason) for seat, reason in targets))
    return [seat for seat in woken if seat is not None]
