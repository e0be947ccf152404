"""Seat mailboxes on a real nats-server: retention, handover, dead letters, keepalive, fences (FL-76..FL-84)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import structlog

from shared.bus import (
    AGENT_STREAM,
    DLQ_STREAM,
    STREAMS,
    Deferred,
    Delivery,
    Envelope,
    MailboxDetached,
    MailboxFenced,
    RetryLater,
    StreamMismatch,
    dlq_subject,
    inbox_group,
    inbox_subject,
    provision_streams,
)

from .conftest import Broker


def event(n: int) -> Envelope:
    return Envelope.new("external_notification", source="api", payload={"n": n})


async def publish(bus: Any, handle: str, *ns: int) -> None:
    for n in ns:
        await bus.publish_to_seat(handle, event(n), msg_id=f"{handle}-{n}")


def n_of(d: Delivery) -> int:
    assert d.envelope is not None
    return int(d.envelope.payload["n"])


async def test_streams_exist_with_their_retentions(broker: Broker) -> None:
    """FL-76 accept: streams exist with the retentions above after boot; provisioning again is a no-op."""
    await broker.bus().provision()
    for spec in STREAMS:
        info = await broker.js.stream_info(spec.name)
        assert getattr(info.config.retention, "value", info.config.retention) == spec.retention
        assert sorted(info.config.subjects or []) == sorted(spec.subjects)
        assert float(info.config.max_age or 0) == (spec.age.total_seconds() if spec.age else 0)


async def test_a_stream_of_another_shape_is_refused(broker: Broker) -> None:
    from nats.js.api import StreamConfig

    await broker.js.delete_stream("CREWLET_CONFIG")
    await broker.js.add_stream(StreamConfig(name="CREWLET_CONFIG", subjects=["crewlet.config.>"], max_age=60))
    with pytest.raises(StreamMismatch, match="max_age"):
        await provision_streams(broker.js)


async def test_mail_published_with_nothing_attached_waits_in_order(broker: Broker) -> None:
    """FL-77 accept: mail published while no node is attached is delivered in order on attach."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage", "writer"])
    await publish(bus, "triage", 0, 1, 2)
    await publish(bus, "writer", 9)
    state = await bus.state("triage")
    assert (state.pending, state.ack_pending) == (3, 0)
    box = await bus.attach("triage", 1)
    got = []
    for _ in range(3):
        d = await box.fetch(timeout=1)
        assert d is not None
        got.append(n_of(d))
        await box.ack(d)
    assert got == [0, 1, 2]
    assert await box.fetch(timeout=0.2) is None
    await box.detach()


async def test_a_subject_no_mailbox_covers_drops_what_is_published(broker: Broker) -> None:
    """Why mailboxes exist before anything publishes (FL-78): interest retention drops the rest."""
    bus = broker.bus()
    await publish(bus, "ghost", 0)
    await bus.ensure_mailboxes(["ghost"])
    assert (await bus.state("ghost")).pending == 0


async def test_publishing_is_deduplicated_by_message_id_and_carries_trace_context(broker: Broker) -> None:
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    env = Envelope.new("task_assigned", source="work", trace_id="ab" * 16, span_id="cd" * 8)
    first = await bus.publish_to_seat("triage", env, headers={"tracestate": "k=v"})
    again = await bus.publish_to_seat("triage", env, headers={"tracestate": "k=v"})
    assert first.stream == AGENT_STREAM and not first.duplicate and again.duplicate and again.seq == first.seq
    box = await bus.attach("triage", 1)
    d = await box.fetch(timeout=1)
    assert d is not None and d.msg_id == env.id and d.envelope == env
    assert d.headers["traceparent"] == f"00-{'ab' * 16}-{'cd' * 8}-01" and d.headers["tracestate"] == "k=v"
    await box.ack(d)
    assert await box.fetch(timeout=0.2) is None


async def test_a_successor_gets_exactly_what_its_predecessor_never_acked(broker: Broker, second: Any) -> None:
    """FL-79 accept: A acks 0-2, releases; B receives 3-5, replays nothing."""
    bus_a = broker.bus()
    await bus_a.ensure_mailboxes(["triage"])
    await publish(bus_a, "triage", 0, 1, 2, 3, 4, 5)
    a = await bus_a.attach("triage", 1)
    for expected in (0, 1, 2):
        d = await a.fetch(timeout=1)
        assert d is not None and n_of(d) == expected
        await a.ack(d)
    unfinished = await a.fetch(timeout=1)
    assert unfinished is not None and n_of(unfinished) == 3
    with structlog.testing.capture_logs() as logs:
        assert await a.detach() == 1
    assert any(e["event"] == "inbox_detached" and e["nacked"] == 1 for e in logs)
    with pytest.raises(MailboxDetached):
        await a.fetch(timeout=0.1)
    node_b = await second()
    b = await node_b.bus().attach("triage", 2)
    got = {}
    for _ in range(3):
        d = await b.fetch(timeout=1)
        assert d is not None
        got[n_of(d)] = d
        await b.ack(d)
    assert set(got) == {3, 4, 5}
    assert got[3].num_delivered == 2 and got[3].stream_seq == unfinished.stream_seq  # the original delivery
    assert await b.fetch(timeout=0.3) is None
    await b.detach()


async def test_a_failing_message_is_dead_lettered_after_the_delivery_budget(broker: Broker) -> None:
    """FL-82 (with a budget of 3): raise = NAK; the last failure goes to CREWLET_DLQ and is terminated."""
    bus = broker.bus(max_deliver=3, nak_backoff=(0.05, 0.05))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 7)
    box = await bus.attach("triage", 1)

    async def always_fails(d: Delivery) -> None:
        raise RuntimeError(f"boom on delivery {d.num_delivered}")

    outcomes = []
    for _ in range(3):
        outcomes.append(await box.process(always_fails, timeout=2))
    assert outcomes == ["nacked", "nacked", "dead_lettered"]
    assert await box.process(always_fails, timeout=0.3) == "empty"
    subject = dlq_subject(inbox_subject("triage"), inbox_group("triage"))
    msg = await broker.js.get_last_msg(DLQ_STREAM, subject)
    body = json.loads(msg.data or b"")
    assert body["reason"] == "RuntimeError: boom on delivery 3" and body["num_delivered"] == 3
    assert body["event"]["payload"] == {"n": 7} and body["seat"] == "triage"
    state = await bus.state("triage")
    assert (state.pending, state.ack_pending) == (0, 0)
    await box.detach()


async def test_return_is_ack_and_raise_is_a_delayed_nak(broker: Broker) -> None:
    bus = broker.bus(nak_backoff=(0.2, 30.0))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1)
    box = await bus.attach("triage", 1)
    seen: list[int] = []

    async def fails_once(d: Delivery) -> None:
        seen.append(d.num_delivered)
        if d.num_delivered == 1:
            raise ValueError("transient")

    assert await box.process(fails_once, timeout=1) == "nacked"
    assert box.backoff(1) == 0.2 and box.backoff(3) == 0.8 and box.backoff(99) == 30.0
    assert await box.process(fails_once, timeout=2) == "acked"
    assert seen == [1, 2]
    assert (await bus.state("triage")).ack_pending == 0
    await box.detach()


async def test_retry_later_naks_no_sooner_than_its_delay(broker: Broker) -> None:
    """A handler that knows when it can succeed (every credential benched, CO-42) spends one
    delivery waiting, not one per backoff step (FL-82)."""
    bus = broker.bus(nak_backoff=(0.1, 30.0))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1)
    box = await bus.attach("triage", 1)
    seen: list[int] = []

    async def benched_once(d: Delivery) -> None:
        seen.append(d.num_delivered)
        if d.num_delivered == 1:
            raise RetryLater("every key is cooling down", delay=2.0)

    assert await box.process(benched_once, timeout=1) == "nacked"
    assert await box.process(benched_once, timeout=1) == "empty"  # the 0.1 s backoff did not apply
    assert await box.process(benched_once, timeout=3) == "acked"
    assert seen == [1, 2]
    await box.detach()


async def test_in_progress_keeps_a_long_delivery_from_redelivery(broker: Broker, second: Any) -> None:
    """FL-83's backstop is held off by keepalives (ack wait shortened to 1 s)."""
    bus = broker.bus(ack_wait=timedelta(seconds=1))
    await bus.ensure_mailboxes(["triage", "writer"])
    await publish(bus, "triage", 1)
    await publish(bus, "writer", 2)
    other = (await second()).bus(ack_wait=timedelta(seconds=1))
    # kept alive: a second binding sees nothing for 2.5 ack waits
    box = await bus.attach("triage", 1)
    d = await box.fetch(timeout=1)
    assert d is not None
    spy = await other.attach("triage", 1)
    async with box.keepalive(d, every=0.3):
        assert await spy.fetch(timeout=2.5) is None
    await box.ack(d)
    # control: without keepalives the same wait redelivers
    w = await bus.attach("writer", 1)
    dw = await w.fetch(timeout=1)
    assert dw is not None
    spy_w = await other.attach("writer", 1)
    again = await spy_w.fetch(timeout=2.5)
    assert again is not None and again.stream_seq == dw.stream_seq and again.num_delivered == 2
    await spy_w.ack(again)
    for m in (box, spy, w, spy_w):
        m._fence = lambda h, e: False  # noqa: SLF001 - nothing left to NAK on the way out
        await m.detach()


async def test_a_deferred_delivery_goes_to_the_new_owner_at_once(broker: Broker, second: Any) -> None:
    """FL-81 accept: a deferred message reaches the new owner promptly with its delivery count + 1."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 5)
    old = await bus.attach("triage", 1)

    async def wrong_node(d: Delivery) -> None:
        raise Deferred()

    assert await old.process(wrong_node, timeout=1) == "deferred"
    assert old.paused and await old.fetch(timeout=0.2) is None
    new = await (await second()).bus().attach("triage", 2)
    d = await new.fetch(timeout=1)
    assert d is not None and n_of(d) == 5 and d.num_delivered == 2
    await new.ack(d)
    old.resume()
    assert not old.paused
    await old.detach()
    await new.detach()


async def test_a_late_ack_from_a_fenced_holder_is_refused(broker: Broker, second: Any) -> None:
    """JetStream accepts late acks, so the fence is ours: an old epoch's ack is not sent."""
    current = {"triage": 1}

    def fence(handle: str, epoch: int) -> bool:
        return current.get(handle) == epoch

    bus = broker.bus(fence=fence, ack_wait=timedelta(seconds=1))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1)
    old = await bus.attach("triage", 1)
    d = await old.fetch(timeout=1)
    assert d is not None
    current["triage"] = 2  # the seat moved on while the old holder worked
    with structlog.testing.capture_logs() as logs:
        for action in (old.ack(d), old.nak(d), old.in_progress(d), old.term(d), old.dead_letter(d, "x")):
            with pytest.raises(MailboxFenced):
                await action
        with pytest.raises(MailboxFenced):
            await old.fetch(timeout=0.1)
    refused = [e["action"] for e in logs if e["event"] == "inbox_ack_fenced"]
    assert refused == ["ack", "nak", "in_progress", "term", "dead_letter", "fetch"]
    new = await (await second()).bus(fence=fence, ack_wait=timedelta(seconds=1)).attach("triage", 2)
    redelivered = await new.fetch(timeout=2.5)  # the refused ack never reached the broker
    assert (
        redelivered is not None and redelivered.stream_seq == d.stream_seq and redelivered.num_delivered == 2
    )
    await new.ack(redelivered)
    assert await old.detach() == 0
    await new.detach()


async def test_a_fenced_detach_leaves_the_in_flight_delivery_for_the_ack_wait(
    broker: Broker, second: Any
) -> None:
    """FL-66 accept: a fenced release leaves the in-flight message unacked; the successor gets it after
    the ack wait (shortened to 1 s) with its original identity; later mail is served at once."""
    holder = {"triage": 1}
    bus = broker.bus(fence=lambda h, e: holder.get(h) == e, ack_wait=timedelta(seconds=1))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1)
    old = await bus.attach("triage", 1)
    inflight = await old.fetch(timeout=1)
    assert inflight is not None
    holder["triage"] = 2
    assert await old.detach() == 0
    await publish(bus, "triage", 2)
    new = await (await second()).bus(fence=lambda h, e: holder.get(h) == e).attach("triage", 2)
    first = await new.fetch(timeout=0.5)
    assert first is not None and n_of(first) == 2  # later mail immediately
    await new.ack(first)
    late = await new.fetch(timeout=2.5)
    assert late is not None and late.msg_id == inflight.msg_id and late.stream_seq == inflight.stream_seq
    await new.ack(late)
    await new.detach()


async def test_retire_deletes_a_decommissioned_seats_mailboxes(broker: Broker) -> None:
    """FL-84: the explicit path that deletes consumers."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    assert (await broker.js.stream_info(AGENT_STREAM)).state.consumer_count == 2
    await bus.retire("triage")
    assert (await broker.js.stream_info(AGENT_STREAM)).state.consumer_count == 0
    await bus.retire("triage")  # idempotent


async def test_ensure_is_idempotent_and_updates_the_budget(broker: Broker) -> None:
    await broker.bus().ensure_mailboxes(["triage"] * 3)
    await broker.bus(max_deliver=5).ensure_mailboxes(["triage"])
    info = await broker.js.consumer_info(
        AGENT_STREAM, broker.bus().consumer_config("agent-triage", inbox_subject("triage")).durable_name or ""
    )
    assert info.config.max_deliver == 5 and info.config.inactive_threshold in (None, 0, 0.0)
    assert float(info.config.ack_wait or 0) == 1800.0


async def test_one_seat_runs_one_handler_at_a_time_and_two_seats_run_concurrently(broker: Broker) -> None:
    """CO-7 check: two messages for one seat never run concurrently; messages for two seats do."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage", "writer"])
    await publish(bus, "triage", 1, 2)
    await publish(bus, "writer", 3)
    running: set[str] = set()
    overlaps: list[set[str]] = []

    def handler_for(tag: str) -> Any:
        async def handler(d: Delivery) -> None:
            running.add(f"{tag}-{n_of(d)}")
            overlaps.append(set(running))
            await asyncio.sleep(0.3)
            running.discard(f"{tag}-{n_of(d)}")

        return handler

    triage, writer = await bus.attach("triage", 1), await bus.attach("writer", 1)
    results = await asyncio.gather(
        triage.process(handler_for("triage"), timeout=1),
        triage.process(handler_for("triage"), timeout=1),
        writer.process(handler_for("writer"), timeout=1),
    )
    assert sorted(results) == ["acked", "acked", "acked"]
    assert not any({"triage-1", "triage-2"} <= seen for seen in overlaps)
    assert any(any(s.startswith("triage") for s in seen) and "writer-3" in seen for seen in overlaps)
    await triage.detach()
    await writer.detach()


async def test_the_dead_letter_hook_runs_after_the_letter_and_cannot_undo_it(broker: Broker) -> None:
    """CO-8 (issue 14): the attach's ``on_dead_letter`` runs once the delivery is on the DLQ subject
    and terminated, for a failure and for a deferral on the last allowed delivery; a hook that
    fails leaves the letter standing."""
    bus = broker.bus(max_deliver=2, nak_backoff=(0.05, 0.05))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1)
    heard: list[tuple[int, int, str, bool]] = []

    async def hook(d: Delivery, reason: str) -> None:
        heard.append((d.envelope.payload["n"] if d.envelope else -1, d.num_delivered, reason, d.settled))
        if len(heard) == 1:
            raise RuntimeError("status store down")

    box = await bus.attach("triage", 1, on_dead_letter=hook)

    async def fails(d: Delivery) -> None:
        if d.envelope is not None and d.envelope.payload["n"] == 2:
            raise Deferred()
        raise RuntimeError("boom")

    outcomes = [await box.process(fails, timeout=2) for _ in range(2)]
    await publish(bus, "triage", 2)
    outcomes.append(await box.process(fails, timeout=2))
    box.resume()  # the deferral paused fetching
    outcomes.append(await box.process(fails, timeout=2))
    assert outcomes == ["nacked", "dead_lettered", "deferred", "dead_lettered"], outcomes
    assert heard == [
        (1, 2, "RuntimeError: boom", True),
        (2, 2, "deferred on its last allowed delivery", True),
    ]
    # the terminations are acks the server applies on its own time: wait for the consumer to say so
    for _ in range(100):
        state = await bus.state("triage")
        if (state.pending, state.ack_pending) == (0, 0):
            break
        await asyncio.sleep(0.1)
    assert (state.pending, state.ack_pending) == (0, 0)
    await box.detach()
