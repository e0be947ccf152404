"""The seat side of an ask without a node (CO-36, FL-124): the request round-trips into the trigger
the target's turn runs on, :func:`services.seats.asks.bound` gives that turn the next hop's scope,
and :func:`services.seats.asks.admit` is the authorisation read at intake."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import cast

from services.seats import asks
from shared import channels
from shared.bus import Envelope
from shared.tools import Submission
from shared.turns import Trigger, TurnResult

from .conftest import Kit

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


async def _request(kit: Kit, *, target: str = "dev") -> tuple[channels.Channel, Trigger]:
    scope = channels.AskScope(coord=kit.coord, bus=kit.bus, work_key="wk-9", trace_headers={})
    channel, _ = await channels.ask(
        scope, requester="lead", target=target, brief="Status of ENG-3?", asker_turn_id="turn-a", now=T0
    )
    [(env, headers)] = await kit.inbox(target)
    return channel, Trigger.from_envelope(Envelope.decode(env.encode()).to_dict(), headers=headers)


async def test_the_request_is_the_target_turns_trigger(kit: Kit) -> None:
    channel, trigger = await _request(kit)
    assert (trigger.type, trigger.source, trigger.sender, trigger.reply_mode) == (
        "a2a_request",
        "a2a",
        "lead",
        "engine",
    )
    assert trigger.delegation_depth == 1 and trigger.parent_turn_id == "turn-a"
    assert "Status of ENG-3?" in trigger.text and trigger.payload["channel_id"] == channel.channel_id
    with asks.bound(SimpleNamespace(coord=kit.coord), kit.bus, trigger) as scope:
        assert channels.current() is scope
        assert scope is not None and (scope.delegation_depth, scope.delegation_chain) == (1, ("lead",))
        assert scope.work_key == trigger.work_key
    assert channels.current() is None
    with asks.bound(SimpleNamespace(coord=None), kit.bus, trigger) as none:
        assert none is None and channels.current() is None


async def test_admit_reads_the_channel(kit: Kit) -> None:
    node = SimpleNamespace(coord=kit.coord)
    channel, trigger = await _request(kit)
    assert await asks.admit(node, "dev", trigger)
    assert not await asks.admit(node, "docs", trigger)  # addressed to another seat
    assert await asks.admit(node, "dev", Trigger(event_id="e1", type="external_notification"))
    assert not await asks.admit(node, "dev", Trigger(event_id="e2", type="a2a_request"))  # names no channel
    assert await asks.admit(SimpleNamespace(coord=None), "dev", trigger)  # unknown: fails open
    await channels.sweep_channels(kit.coord, now=T0 + timedelta(hours=2))  # idle-closed before dev got to it
    assert not await asks.admit(node, "dev", trigger)


def _result(**fields: object) -> TurnResult:
    base: dict[str, object] = {
        "reply": "",
        "redact": (),
        "failed": False,
        "outcome": "delivered",
        "submission": None,
        "error_kind": None,
    }
    return cast(TurnResult, SimpleNamespace(**{**base, **fields}))


def test_reply_of_answers_or_says_why_not() -> None:
    assert asks.reply_of(_result(reply=" Use key sk-123. ", redact=("sk-123",))) == (
        "Use key [redacted].",
        True,
    )
    blocked = _result(
        reply="Cannot check",
        outcome="blocked",
        submission=Submission("blocked", "Cannot check", evidence="no VPN"),
    )
    assert asks.reply_of(blocked) == ("Cannot check\n\nBlocked: no VPN", True)
    assert asks.reply_of(_result(failed=True, outcome="failed", error_kind="llm_fatal")) == (
        "The answering turn ended failed (llm_fatal) without an answer.",
        False,
    )
    assert asks.reply_of(_result(outcome="incomplete")) == (
        "The answering turn ended incomplete without an answer.",
        False,
    )
    assert asks.reply_of(_result(outcome="no_action")) == (
        "The answering turn ended no_action without an answer.",
        False,
    )
