"""Inbox coalescing (CO-38): the pure partition and merge, and drain batches on a real nats-server.

The partition groups one drain by conversation key, oldest conversation first, in event-time order
(FL-85); the merge makes one trigger that carries every constituent and the strongest reply
obligation. A drain batch settles per group with FL-81's verdicts, and a deferral hands back every
delivery of the batch not yet settled, never acking one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import structlog

from shared import config
from shared.bus import BusUnavailable, Deferred, Delivery, Envelope, MessageTooLarge
from shared.turns import Trigger, merge_triggers, partition, work_key

from .conftest import Broker


def ts(second: int) -> str:
    return f"2024-05-01T10:00:{second:02d}Z"


def trig(event_id: str, second: int, key: str | None = None, **fields: Any) -> Trigger:
    return Trigger(event_id=event_id, timestamp=ts(second), conversation_key=key, **fields)


def ids(groups: list[list[Trigger]]) -> list[list[str]]:
    return [[t.event_id for t in g] for g in groups]


# -- partition ---------------------------------------------------------------------------------


def test_partition_groups_by_conversation_oldest_conversation_first() -> None:
    # broker order is not event order (FL-85: a redelivery comes back behind newer mail)
    items = [
        trig("b2", 5, "github:o/r#2"),
        trig("a1", 3, "github:o/r#1"),
        trig("solo", 4),
        trig("b1", 1, "github:o/r#2"),
        trig("a2", 6, "github:o/r#1"),
    ]
    assert ids(partition(items, lambda t: t)) == [["b1", "b2"], ["a1", "a2"], ["solo"]]


def test_partition_keeps_triggers_without_a_key_apart() -> None:
    items = [trig(f"e{i}", i) for i in range(4)]
    assert ids(partition(items, lambda t: t)) == [["e0"], ["e1"], ["e2"], ["e3"]]


def test_partition_puts_copies_of_one_event_together() -> None:
    # CO-11 step 1: same-id duplicates inside one fetch are one group (the merge drops the copy)
    items = [trig("x", 1), trig("y", 2), trig("x", 1)]
    groups = partition(items, lambda t: t)
    assert ids(groups) == [["x", "x"], ["y"]]
    assert merge_triggers(groups[0]).event_ids == ("x",)


def test_partition_gives_an_item_without_a_trigger_its_own_group_and_keeps_every_item() -> None:
    items: list[Any] = ["poison", trig("a", 2, "k"), "poison-2", trig("b", 1, "k")]
    groups = partition(items, lambda x: x if isinstance(x, Trigger) else None)
    # no timestamp sorts first, in broker order; then the conversation by its oldest message
    assert groups[:2] == [["poison"], ["poison-2"]]
    assert ids(groups[2:]) == [["b", "a"]]
    assert sorted(map(id, (i for g in groups for i in g))) == sorted(map(id, items))


def test_partition_of_nothing_is_empty() -> None:
    assert partition([], lambda t: t) == []


# -- merge -------------------------------------------------------------------------------------


def test_one_trigger_merges_to_itself() -> None:
    t = trig("only", 1, "k", text="hello")
    assert merge_triggers([t]) is t


def test_a_merged_trigger_carries_every_constituent_in_time_order() -> None:
    parts = [
        trig(f"e{n}", n, "github:Codertocat/Hello-World#1", text=f"comment {n}", sender=s)
        for n, s in [(3, "bob"), (1, "alice"), (5, "carol"), (2, "alice"), (4, "bob")]
    ]
    merged = merge_triggers(parts)
    order = ["e1", "e2", "e3", "e4", "e5"]
    assert merged.event_id == "e1" and merged.constituent_ids == tuple(order)
    assert [p.event_id for p in merged.parts] == order
    assert merged.event_ids == tuple(order) and merged.work_key == work_key(order)
    assert merged.timestamp == ts(1) and merged.conversation_key == "github:Codertocat/Hello-World#1"
    assert merged.sender == "alice, bob, carol"
    # every text, in timestamp order, each under its own heading
    positions = [merged.text.index(f"comment {n}") for n in range(1, 6)]
    assert positions == sorted(positions)
    assert merged.text.count("--- message ") == 5
    assert "--- message 1 of 5 · 2024-05-01T10:00:01Z · from alice ---\ncomment 1" in merged.text
    assert merged.text.startswith("5 messages in conversation github:Codertocat/Hello-World#1")


def test_a_merged_trigger_owes_the_strongest_reply() -> None:
    assert (
        merge_triggers([trig("a", 1, reply_mode="none"), trig("b", 2, reply_mode="tool")]).reply_mode
        == "tool"
    )
    three = [trig("a", 1, reply_mode="tool"), trig("b", 2, reply_mode="engine"), trig("c", 3)]
    assert merge_triggers(three).reply_mode == "engine"
    assert merge_triggers([trig("a", 1), trig("b", 2)]).reply_mode == "none"


def test_merge_keeps_the_oldest_identity_the_deepest_depth_and_the_newest_item() -> None:
    old = trig(
        "old",
        1,
        "k",
        type="task_assigned",
        source="api",
        payload={"message_id": "m-old"},
        trace_headers={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        work_item={"key": "SUP-1"},
    )
    new = trig("new", 2, "k", delegation_depth=2, work_item={"key": "SUP-2"}, payload={"message_id": "m-new"})
    merged = merge_triggers([new, old])
    assert (merged.event_id, merged.type, merged.source) == ("old", "task_assigned", "api")
    assert merged.payload == {"message_id": "m-old"} and merged.trace_headers == old.trace_headers
    assert merged.delegation_depth == 2 and merged.work_item_key == "SUP-2"
    assert [p.payload["message_id"] for p in merged.parts] == ["m-old", "m-new"]


def test_merging_a_merged_trigger_flattens_and_drops_duplicates() -> None:
    ab = merge_triggers([trig("a", 1, "k"), trig("b", 2, "k")])
    again = merge_triggers([trig("c", 3, "k"), ab, trig("a", 1, "k")])
    assert again.constituent_ids == ("a", "b", "c")


def test_merging_nothing_is_refused() -> None:
    try:
        merge_triggers([])
    except ValueError:
        return
    raise AssertionError("merge_triggers([]) did not raise")


def test_the_coalescing_settings_are_live() -> None:
    """CO-38 is built: the two settings are no longer logged ``feature_inert``."""
    company = config.Company.model_validate(
        {
            "name": "Acme",
            "providers": {"llm": {"default": {"type": "offline", "model": "crewlet-offline-1"}}},
            "notification_coalesce_window_seconds": 2,
            "notification_coalesce_max_batch": 5,
        }
    )
    assert not [p for p in config.inert_paths(company) if "coalesce" in p]


# -- drain batches on a real broker ------------------------------------------------------------


def event(n: int, key: str | None = None, second: int | None = None) -> Envelope:
    payload: dict[str, Any] = {"n": n}
    if key:
        payload["conversation_key"] = key
    extra = {"timestamp": ts(second)} if second is not None else {}
    return Envelope.new("external_notification", source="api", payload=payload, **extra)


async def publish(bus: Any, handle: str, *ns: int, key: str | None = None) -> None:
    for n in ns:
        await bus.publish_to_seat(handle, event(n, key), msg_id=f"{handle}-{n}")


def n_of(d: Delivery) -> int:
    assert d.envelope is not None
    return int(d.envelope.payload["n"])


def by_key(batch: list[Delivery]) -> list[list[Delivery]]:
    def trigger(d: Delivery) -> Trigger | None:
        return Trigger.from_envelope(d.envelope.to_dict()) if d.envelope is not None else None

    return partition(batch, trigger)


async def test_a_drain_takes_what_is_there_up_to_the_batch_size(broker: Broker) -> None:
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", *range(25))
    box = await bus.attach("triage", 1)
    first = await box.fetch_batch(20, timeout=1)
    assert [n_of(d) for d in first] == list(range(20))
    rest = await box.fetch_batch(20, timeout=1)
    assert [n_of(d) for d in rest] == list(range(20, 25))
    assert await box.fetch_batch(20, timeout=0.2) == []
    for d in first + rest:
        await box.ack(d)
    await publish(bus, "triage", 30, 31)
    one = await box.fetch_batch(1, timeout=1)  # max_batch 1 is the old one-at-a-time fetch
    assert [n_of(d) for d in one] == [30]
    await box.ack(one[0])
    await box.detach()


async def test_a_window_collects_what_arrives_after_the_first_message(broker: Broker) -> None:
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    box = await bus.attach("triage", 1)
    await publish(bus, "triage", 1)

    async def later() -> None:
        await asyncio.sleep(0.3)
        await publish(bus, "triage", 2, 3)

    task = asyncio.create_task(later())
    batch = await box.fetch_batch(20, timeout=1, window=1.0)
    await task
    assert [n_of(d) for d in batch] == [1, 2, 3]
    for d in batch:
        await box.ack(d)
    # without a window only what is there is taken
    await publish(bus, "triage", 4)
    task = asyncio.create_task(later())
    batch = await box.fetch_batch(20, timeout=1)
    assert [n_of(d) for d in batch] == [4]
    await task
    await box.ack(batch[0])
    await box.detach()


async def test_each_conversation_is_one_handler_call_and_every_delivery_is_acked_once(broker: Broker) -> None:
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1, 2, 3, key="conv-a")
    await publish(bus, "triage", 4)
    await publish(bus, "triage", 5, key="conv-a")
    box = await bus.attach("triage", 1)
    seen: list[list[int]] = []

    async def handler(group: list[Delivery]) -> None:
        seen.append([n_of(d) for d in group])

    with structlog.testing.capture_logs() as logs:
        outcomes = await box.process_batch(handler, group=by_key, max_batch=20, timeout=1)
    assert outcomes == ["acked", "acked"]
    assert seen == [[1, 2, 3, 5], [4]]
    acks = Counter(e["stream_seq"] for e in logs if e["event"] == "inbox_acked" and e["outcome"] == "ack")
    assert sorted(acks) == [1, 2, 3, 4, 5] and set(acks.values()) == {1}
    state = await bus.state("triage")
    assert (state.pending, state.ack_pending) == (0, 0)
    await box.detach()


async def test_a_deferral_hands_back_the_rest_of_the_batch_and_acks_nothing_of_it(
    broker: Broker, second: Any
) -> None:
    """FL-81 for a batch: the deferred group and every later one are NAKed at once, one delivery each."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1)
    await publish(bus, "triage", 2, 3, key="conv")
    await publish(bus, "triage", 4)
    old = await bus.attach("triage", 1)
    calls: list[list[int]] = []

    async def refuse_the_second(group: list[Delivery]) -> None:
        calls.append([n_of(d) for d in group])
        if len(calls) == 2:
            raise Deferred()

    outcomes = await old.process_batch(refuse_the_second, group=by_key, max_batch=20, timeout=1)
    assert outcomes == ["acked", "deferred", "deferred"]
    assert calls == [[1], [2, 3]]  # the group after the deferral never ran here
    assert old.paused and old.outstanding() == []
    new = await (await second()).bus().attach("triage", 2)
    handed = await new.fetch_batch(20, timeout=1)
    assert sorted((n_of(d), d.num_delivered) for d in handed) == [(2, 2), (3, 2), (4, 2)]
    for d in handed:
        await new.ack(d)
    await old.detach()
    await new.detach()


async def test_a_failing_group_is_nacked_and_the_next_group_still_runs(broker: Broker) -> None:
    bus = broker.bus(nak_backoff=(0.2, 30.0))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1, 2, key="conv")
    await publish(bus, "triage", 3)
    box = await bus.attach("triage", 1)

    async def handler(group: list[Delivery]) -> None:
        if n_of(group[0]) == 1 and group[0].num_delivered == 1:
            raise ValueError("transient")

    assert await box.process_batch(handler, group=by_key, max_batch=20, timeout=1) == ["nacked", "acked"]
    again = await box.fetch_batch(20, timeout=2)  # after the 0.2 s NAK delay
    assert sorted((n_of(d), d.num_delivered) for d in again) == [(1, 2), (2, 2)]
    for d in again:
        await box.ack(d)
    await box.detach()


async def test_a_fenced_ack_stops_the_batch_and_leaves_the_rest_unsettled(broker: Broker) -> None:
    holder = {"triage": 1}
    bus = broker.bus(fence=lambda h, e: holder.get(h) == e)
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1, 2)
    box = await bus.attach("triage", 1)

    async def lose_the_seat(group: list[Delivery]) -> None:
        holder["triage"] = 2

    assert await box.process_batch(lose_the_seat, max_batch=20, timeout=1) == ["fenced"]
    assert sorted(d.stream_seq for d in box.outstanding()) == [1, 2]
    assert await box.detach() == 0  # the NAKs are fenced too: they return after the ack wait


async def test_keepalive_covers_every_delivery_held(broker: Broker, second: Any) -> None:
    """FL-83 with a drain batch: a long turn keeps the whole batch from redelivery (ack wait 1 s)."""
    bus = broker.bus(ack_wait=timedelta(seconds=1))
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1, 2, 3)
    box = await bus.attach("triage", 1)
    batch = await box.fetch_batch(20, timeout=1)
    assert len(batch) == 3
    await box.ack(batch[0])  # a settled one is skipped, not an error
    spy = await (await second()).bus(ack_wait=timedelta(seconds=1)).attach("triage", 1)
    async with box.keepalive(*box.outstanding(), every=0.3):
        assert await spy.fetch(timeout=2.5) is None
    for d in batch[1:]:
        await box.ack(d)
    for m in (box, spy):
        await m.detach()


async def test_a_grouping_that_raises_runs_each_delivery_alone_and_strands_none(broker: Broker) -> None:
    """Issue 35 (upstream queue conformance): a raising grouping no longer escapes the batch."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    await publish(bus, "triage", 1, 2, 3)
    box = await bus.attach("triage", 1)
    seen: list[list[int]] = []

    def broken(batch: list[Delivery]) -> list[list[Delivery]]:
        raise RuntimeError("grouping bug")

    async def handler(group: list[Delivery]) -> None:
        seen.append([n_of(d) for d in group])

    outcomes = await box.process_batch(handler, group=broken, max_batch=10, timeout=1)
    assert seen == [[1], [2], [3]] and outcomes == ["acked", "acked", "acked"]
    assert list(box.outstanding()) == []
    assert await box.fetch_batch(10, timeout=0.3) == []  # nothing left to redeliver
    await box.detach()


async def test_a_message_over_the_payload_limit_is_too_large_not_unavailable(broker: Broker) -> None:
    """Issue 35 (upstream queue conformance): a producer must not retry what can never succeed."""
    bus = broker.bus()
    await bus.ensure_mailboxes(["triage"])
    huge = Envelope.new("external_notification", source="api", payload={"text": "x" * (9 * 1024 * 1024)})
    with pytest.raises(MessageTooLarge) as e:
        await bus.publish_to_seat("triage", huge)
    assert not isinstance(e.value, BusUnavailable) and e.value.retryable is False
    assert "payload limit" in str(e.value)
