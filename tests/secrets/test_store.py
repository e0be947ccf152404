"""The secret store over the coordination KV: the twin and a real nats-server (FL-151, CO-40)."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from shared.coordination import Coordination, CoordinationUnavailable, FaultyCoordination
from shared.secrets import (
    MAX_VALUE_BYTES,
    InvalidSecretName,
    SecretInfo,
    SecretStore,
    SecretTooLarge,
    Unopenable,
    secret_values,
)

from .conftest import KEY_NEW, KEY_OLD, keyring

VALUE = "sk-live-0f9e8d7c6b5a"


async def test_set_list_reveal_unset(coord: Coordination) -> None:
    store = SecretStore(coord, keyring())
    with capture_logs() as logs:
        await store.set("OPENAI_API_KEY", VALUE, by="operator:test")
        await store.set("GITHUB_TOKEN", "ghp_other", by="operator:test")
    infos = await store.list()
    assert [i.name for i in infos] == ["GITHUB_TOKEN", "OPENAI_API_KEY"]
    info = infos[1]
    assert isinstance(info, SecretInfo) and info.key_id == "old" and info.updated_by == "operator:test"
    assert info.updated_at.endswith("Z") and VALUE not in repr(infos)
    assert await store.reveal("OPENAI_API_KEY") == VALUE
    assert await store.reveal("NOT_SET") is None and await store.info("NOT_SET") is None
    entry = await coord.get("secrets", "OPENAI_API_KEY")
    assert entry is not None and VALUE.encode() not in entry.value
    assert set(json.loads(entry.value)) == {"sealed", "key_id", "updated_at", "updated_by"}
    assert await store.unset("OPENAI_API_KEY") is True
    assert await store.unset("OPENAI_API_KEY") is False
    assert [i.name for i in await store.list()] == ["GITHUB_TOKEN"]
    assert all(VALUE not in json.dumps(e, default=str) for e in logs)
    assert [e["event"] for e in logs] == ["secret_set", "secret_set"]


async def test_a_value_copied_under_another_name_does_not_open(coord: Coordination) -> None:
    store = SecretStore(coord, keyring())
    await store.set("REAL_NAME", VALUE)
    entry = await coord.get("secrets", "REAL_NAME")
    assert entry is not None
    await coord.put("secrets", "STOLEN_NAME", entry.value)
    with pytest.raises(Unopenable) as e:
        await store.reveal("STOLEN_NAME")
    assert e.value.reason == "authentication_failed" and VALUE not in str(e.value)
    with capture_logs() as logs:
        values, failed = await store.resolve()
    assert values == {"REAL_NAME": VALUE} and failed == ["STOLEN_NAME"]
    assert [(e["event"], e["name"], e["key_id"]) for e in logs] == [
        ("secret_unopenable", "STOLEN_NAME", "old")
    ]
    assert VALUE not in json.dumps(logs)


async def test_rekey_then_remove_the_old_key(coord: Coordination) -> None:
    """CO-40's check: rotate with rekey; the old key is removable afterwards."""
    await SecretStore(coord, keyring()).set("A_KEY", "value-a")
    await SecretStore(coord, keyring()).set("B_KEY", "value-b", by="operator:x")
    before = {i.name: i for i in await SecretStore(coord, keyring()).list()}
    rotating = SecretStore(coord, keyring("new", old=KEY_OLD, new=KEY_NEW))
    assert await rotating.rekey() == 2
    assert await rotating.rekey() == 0  # everything already current
    after = {i.name: i for i in await rotating.list()}
    assert {i.key_id for i in after.values()} == {"new"}
    assert (
        after["B_KEY"].updated_by == "operator:x" and after["B_KEY"].updated_at == before["B_KEY"].updated_at
    )
    only_new = SecretStore(coord, keyring("new", new=KEY_NEW))
    assert await only_new.resolve() == ({"A_KEY": "value-a", "B_KEY": "value-b"}, [])


async def test_rekey_reports_an_unopenable_value_and_keeps_it(coord: Coordination) -> None:
    await SecretStore(coord, keyring("lost", lost=KEY_NEW)).set("ORPHAN", "v1")
    await SecretStore(coord, keyring()).set("FINE", "v2")
    before = await coord.get("secrets", "ORPHAN")
    store = SecretStore(coord, keyring("next", old=KEY_OLD, next=bytes(32)))
    with capture_logs() as logs:
        report = await store.rekey_report()
    assert report.resealed == ["FINE"] and report.unopenable == ["ORPHAN"] and report.current == []
    after = await coord.get("secrets", "ORPHAN")
    assert after is not None and before is not None and after.value == before.value  # not dropped
    assert any(e["event"] == "secret_unopenable" and e["key_id"] == "lost" for e in logs)
    rekeyed = [e for e in logs if e["event"] == "secrets_rekeyed"]
    assert rekeyed and rekeyed[0]["unopenable"] == ["ORPHAN"]


async def test_refusals_by_name(coord: Coordination) -> None:
    store = SecretStore(coord, keyring())
    with pytest.raises(InvalidSecretName) as e:
        await store.set("lower_case", "v")
    assert "lower_case" in str(e.value) and "^[A-Z][A-Z0-9_]*$" in str(e.value)
    for call in (store.unset, store.reveal, store.info):
        with pytest.raises(InvalidSecretName):
            await call("bad name")
    await store.set("BIG", "x" * MAX_VALUE_BYTES)  # exactly the limit is fine
    with pytest.raises(SecretTooLarge) as big:
        await store.set("BIG", "é" * (MAX_VALUE_BYTES // 2 + 1))  # counted in UTF-8 bytes
    assert big.value.name == "BIG" and big.value.limit == 65536 and "65538 bytes" in str(big.value)
    assert await store.reveal("BIG") == "x" * MAX_VALUE_BYTES


async def test_an_unreachable_store_propagates_unknown() -> None:
    store = SecretStore(FaultyCoordination(), keyring())
    with pytest.raises(CoordinationUnavailable):
        await store.set("A", "v")
    with pytest.raises(CoordinationUnavailable):
        await store.list()
    with pytest.raises(CoordinationUnavailable):
        await store.resolve()
    with pytest.raises(CoordinationUnavailable):
        await store.rekey()


def test_secret_values_for_redaction() -> None:
    assert secret_values({"A": "abc", "B": "", "C": "abcdef", "D": "abc"}) == ["abcdef", "abc"]
    assert secret_values({}) == []
