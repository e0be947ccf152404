"""The activation pointer and revision history on a real nats-server's KV (FL-104..FL-107, FL-110)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from shared import control
from shared.coordination import Coordination, CoordinationBusy
from shared.secrets import Keyring

DOC = {"name": "Acme", "mission": "m1"}


def rev(doc: dict[str, object] | None = None, **kw: object) -> control.Revision:
    return control.Revision(revision_id=control.new_revision_id(), document=dict(doc or DOC), **kw)  # type: ignore[arg-type]


async def test_activate_mints_epochs_and_reactivation_is_a_new_epoch(
    kv: Coordination, keyring: Keyring
) -> None:
    store = control.ControlStore(kv, keyring)
    assert await store.pointer() is None
    assert await store.epoch() == (0, "", 0)
    r1 = rev(summary="first")
    await store.store(r1)
    a1 = await store.activate(r1, by="t", expected_epoch=0)
    a2 = await store.activate(r1, by="t")  # FL-104: the same revision again is a new epoch
    assert a2.epoch > a1.epoch > 0
    got = await store.pointer()
    assert got is not None and got.epoch == a2.epoch
    assert got.revision.revision_id == r1.revision_id and got.revision.document == DOC
    assert got.revision.summary == "first"


async def test_instants_rise_across_skewed_clocks(kv: Coordination, keyring: Keyring) -> None:
    """FL-105: node B's clock is 5 s behind node A's; its activation still gets a later instant."""
    base = 1_800_000_000_000
    a = control.ControlStore(kv, keyring, clock_ms=lambda: base)
    b = control.ControlStore(kv, keyring, clock_ms=lambda: base - 5_000)
    r1, r2, r3 = rev(), rev(), rev()
    for r in (r1, r2, r3):
        await a.store(r)
    x = await a.activate(r1, by="a")
    y = await b.activate(r2, by="b")
    z = await b.activate(r3, by="b")
    assert x.activated_at == base
    assert y.activated_at == base + 1 and z.activated_at == base + 2
    assert (await a.pointer()).activated_at == base + 2  # type: ignore[union-attr]


async def test_concurrent_activations_one_wins_the_other_stays_history(
    kv: Coordination, keyring: Keyring
) -> None:
    """FL-106: two writers read the same epoch; exactly one moves the pointer, the other is 409."""
    store = control.ControlStore(kv, keyring)
    seed = rev()
    await store.store(seed)
    start = (await store.activate(seed, by="seed")).epoch
    r1, r2 = rev({"name": "One"}), rev({"name": "Two"})

    async def put(r: control.Revision) -> control.Activation | control.RevisionAdvanced:
        await store.store(r)
        try:
            return await store.activate(r, by="t", expected_epoch=start)
        except control.RevisionAdvanced as e:
            return e

    results = await asyncio.gather(put(r1), put(r2))
    won = [x for x in results if isinstance(x, control.Activation)]
    lost = [x for x in results if isinstance(x, control.RevisionAdvanced)]
    assert len(won) == 1 and len(lost) == 1
    assert lost[0].active_revision_id == won[0].revision.revision_id
    history = {r.revision_id for r in await store.history()}
    assert {seed.revision_id, r1.revision_id, r2.revision_id} <= history
    pointer = await store.pointer()
    assert pointer is not None and pointer.revision.revision_id == won[0].revision.revision_id


async def test_unsealed_or_foreign_payload_is_refused(kv: Coordination, keyring: Keyring) -> None:
    """FL-107: a pointer holding a plaintext body, or one sealed under another key, does not open."""
    store = control.ControlStore(kv, keyring)
    plain = {"revision_id": "r-x", "payload": DOC, "activated_at": 1}
    await kv.put("config", control.ACTIVATION_KEY, json.dumps(plain).encode())
    with pytest.raises(control.PayloadUnopenable, match="not sealed"):
        await store.pointer()
    other = control.ControlStore(kv, Keyring("k9", {"k9": os.urandom(32)}))
    r = rev()
    await other.store(r)
    await other.activate(r, by="elsewhere")
    with pytest.raises(control.PayloadUnopenable, match="k9"):
        await store.pointer()
    with pytest.raises(control.PayloadUnopenable):
        await store.get(r.revision_id)


async def test_body_is_bound_to_its_revision_id(kv: Coordination, keyring: Keyring) -> None:
    """A sealed body copied under another revision id does not open (the id is the associated data)."""
    store = control.ControlStore(kv, keyring)
    r = rev()
    await store.store(r)
    entry = await kv.get("revisions", r.revision_id)
    assert entry is not None
    data = json.loads(entry.value)
    data["revision_id"] = "r-forged"
    await kv.put("revisions", "r-forged", json.dumps(data).encode())
    with pytest.raises(control.PayloadUnopenable):
        await store.get("r-forged")
    with pytest.raises(control.UnknownRevision):
        await store.get("r-nope")


async def test_status_error_is_cut_and_ages_out(kv: Coordination) -> None:
    """FL-110: a 1 MB error is stored as ≤ 2 000 bytes on a character boundary; a silent node vanishes."""
    big = "é" * 600_000  # 1.2 MB of two-byte characters
    await control.write_status(kv, control.NodeStatus(node="n1", status="error", error=big))
    got = (await control.read_statuses(kv))["n1"]
    assert len(got.error.encode()) <= control.ERROR_TEXT_LIMIT
    assert got.error == "é" * (control.ERROR_TEXT_LIMIT // 2)
    await asyncio.sleep(4.5)  # the status bucket's age: 4 reconcile intervals (TTL 3 s / 3 × 4)
    assert "n1" not in await control.read_statuses(kv)


def test_redact_and_diff() -> None:
    before = {
        "providers": {"llm": {"a": {"api_keys": ["sk-live-123", "${KEY}"], "model": "m1"}}},
        "roles": [{"handle": "x", "goal": "g"}, {"handle": "y", "goal": "g"}],
        "mcp_servers": [{"name": "s", "env": {"TOKEN": "literal", "OTHER": "${OTHER}"}}],
    }
    after = {
        "providers": {"llm": {"a": {"api_keys": ["sk-live-456", "${KEY}"], "model": "m2"}}},
        "roles": [{"handle": "y", "goal": "g2"}, {"handle": "z", "goal": "g"}],
        "mcp_servers": [{"name": "s", "env": {"TOKEN": "literal", "OTHER": "${OTHER}"}}],
    }
    red = control.redact(before)
    assert red["providers"]["llm"]["a"]["api_keys"] == ["***", "${KEY}"]
    assert red["mcp_servers"][0]["env"] == {"TOKEN": "***", "OTHER": "${OTHER}"}
    changes = {(c.path, c.op): c for c in control.diff(before, after)}
    assert set(changes) == {
        ("providers.llm.a.api_keys[0]", "changed"),  # a changed literal credential is a change...
        ("providers.llm.a.model", "changed"),
        ("roles[x]", "removed"),
        ("roles[y].goal", "changed"),
        ("roles[z]", "added"),
    }
    key = changes[("providers.llm.a.api_keys[0]", "changed")]
    assert (key.before, key.after) == ("***", "***")  # ...shown masked
    assert "sk-live" not in json.dumps([c.as_dict() for c in changes.values()])
    assert control.masked_credentials(red) == ["providers.llm.a.api_keys", "mcp_servers[0].env"]
    assert control.masked_credentials(before) == []
    assert control.diff(before, before) == []


class _BusyFirst:
    """The real coordination store, whose first ``busy`` creates are refused as 10164 is (the key's
    leader holding another writer's uncommitted proposal, as when nodes boot together)."""

    def __init__(self, inner: Coordination, busy: int) -> None:
        self.inner, self.busy, self.creates = inner, busy, 0

    async def create(self, slot: str, key: str, value: bytes) -> int:
        self.creates += 1
        if self.busy > 0:
            self.busy -= 1
            raise CoordinationBusy(f"{key}: leader has an uncommitted proposal (10164)")
        return await self.inner.create(slot, key, value)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_a_seed_refused_as_busy_is_stored_on_a_repeat_and_read_back(
    kv: Coordination, keyring: Keyring
) -> None:
    busy = _BusyFirst(kv, busy=2)
    r = rev(summary="seed")
    await control.ControlStore(busy, keyring).store(r)  # type: ignore[arg-type]
    assert busy.creates == 3
    assert (await control.ControlStore(kv, keyring).get(r.revision_id)).document == DOC


async def test_a_create_busy_past_the_retries_is_reported_unknown(kv: Coordination, keyring: Keyring) -> None:
    from shared.control._store import BUSY_RETRIES

    busy = _BusyFirst(kv, busy=BUSY_RETRIES + 1)
    with pytest.raises(control.ControlUnavailable, match="may not be stored"):
        await control.ControlStore(busy, keyring).store(rev())  # type: ignore[arg-type]
    assert busy.creates == BUSY_RETRIES + 1
