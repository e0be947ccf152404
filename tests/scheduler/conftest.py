"""Companies with schedules, a real nats-server KV, and a recording publisher for the scheduler tests (CO-33)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from nats.aio.client import Client

from services.workers.scheduler import Fire, Scheduler
from shared.broker import connect
from shared.config import OrgModel, validate_company_data
from shared.coordination import NatsCoordination, provision
from tests.support.procs import NatsServer


def company_data(
    schedules: list[dict[str, Any]],
    *,
    tz: str = "UTC",
    unit_schedules: list[dict[str, Any]] | None = None,
    scheduling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A small valid company: root seat ``ops`` carries ``schedules``; unit ``eng`` (lead ``lead``,
    agent ``dev``, human ``boss``) carries ``unit_schedules``."""
    data: dict[str, Any] = {
        "name": "Clock Co",
        "timezone": tz,
        "providers": {
            "llm": {"default": {"type": "offline", "model": "crewlet-offline-1", "script": "./offline.yaml"}}
        },
        "roles": [{"name": "Ops", "handle": "ops", "schedules": schedules}],
        "units": [
            {
                "id": "eng",
                "name": "Engineering",
                "type": "team",
                "lead": "lead",
                "roles": [
                    {"name": "Lead", "handle": "lead"},
                    {"name": "Dev", "handle": "dev"},
                    {"name": "Boss", "handle": "boss", "kind": "human"},
                ],
                "schedules": unit_schedules or [],
            }
        ],
    }
    if scheduling is not None:
        data["scheduling"] = scheduling
    return data


def org_of(data: dict[str, Any]) -> OrgModel:
    """Validate ``data`` and return its org model (fails the test on any issue)."""
    company, issues = validate_company_data(data)
    assert company is not None, [(i.path, i.message) for i in issues]
    return OrgModel.from_company(company)


def every(start: datetime, end: datetime, step: float = 10.0) -> list[datetime]:
    """Tick instants from ``start`` to ``end`` inclusive, ``step`` seconds apart."""
    out, at = [], start
    while at <= end:
        out.append(at)
        at += timedelta(seconds=step)
    return out


@dataclass
class Inbox:
    """Records every ``publish(handle, fire)`` the scheduler makes (the seat inboxes)."""

    fires: list[tuple[str, Fire]] = field(default_factory=list)
    fail: int = 0

    async def __call__(self, handle: str, fire: Fire) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("inbox unreachable")
        self.fires.append((handle, fire))

    def labels(self, handle: str | None = None) -> list[str]:
        return [f.label for h, f in self.fires if handle is None or h == handle]


@dataclass
class Kv:
    """One connection to the test nats-server and its coordination store."""

    nc: Client
    coord: NatsCoordination

    def scheduler(self, inbox: Inbox) -> Scheduler:
        return Scheduler(self.coord, inbox)

    async def claims(self) -> dict[str, str]:
        """Every ``fires`` claim: key -> state."""
        import json

        return {e.key: json.loads(e.value)["state"] for e in await self.coord.entries("fires")}


async def open_kv(url: str, name: str) -> Kv:
    nc, _ = await connect(url, timeout=10, name=name)
    return Kv(nc, await provision(nc.jetstream()))


@pytest.fixture
async def kv(nats_server: NatsServer) -> AsyncIterator[Kv]:
    """A coordination store on a real nats-server (JetStream KV)."""
    store = await open_kv(nats_server.url, "sched-a")
    try:
        yield store
    finally:
        with contextlib.suppress(ConnectionError):
            await store.nc.close()


@pytest.fixture
async def kv2(nats_server: NatsServer) -> AsyncIterator[Kv]:
    """A second connection (a peer node) to the same nats-server."""
    store = await open_kv(nats_server.url, "sched-b")
    try:
        yield store
    finally:
        with contextlib.suppress(ConnectionError):
            await store.nc.close()
