"""``GET /schedules`` in process on a real KV, and ``crewlet schedules`` over the wire (CO-33)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from crewlet.schedules_cli import app as cli
from services.ingress.api.routes import schedules as routes
from shared.config import NodeConfig
from shared.coordination import Coordination, FaultyCoordination, MemoryCoordination
from shared.runtime import NodeContext, install_error_handlers
from tests.support.procs import free_port

from .conftest import Inbox, Kv, company_data, org_of

TOKEN = "t" * 32
READER = "r" * 32
NOBODY = "n" * 32
SCHEDULES: list[dict[str, Any]] = [
    {"name": "pulse", "cron": "*/5 * * * *", "task": "check"},
    {
        "name": "night",
        "cron": "30 1 * * *",
        "task": "sweep",
        "timezone": "America/New_York",
        "catchup": False,
    },
]
UNIT = [{"name": "standup", "cron": "0 9 * * 1-5", "task": "sync", "target": "lead"}]


def node_app(coord: Coordination | None) -> tuple[FastAPI, NodeContext]:
    cfg = NodeConfig.model_validate(
        {
            "node": {"id": "node-a"},
            "api": {
                "auth": {
                    "tokens": [
                        {"id": "op", "token": TOKEN},
                        {"id": "reader", "token": READER, "grants": ["state:read"]},
                        {"id": "nobody", "token": NOBODY, "grants": ["config:write"]},
                    ]
                }
            },
        }
    )
    ctx = NodeContext(cfg)
    ctx.coord = coord
    ctx.org = org_of(company_data(SCHEDULES, unit_schedules=UNIT, tz="Europe/Lisbon"))
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(routes.router(ctx))
    return app, ctx


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node")


async def test_lists_every_schedule_with_next_fire_and_the_last_slots_claims(kv: Kv) -> None:
    app, ctx = node_app(kv.coord)
    at = datetime(2026, 11, 1, 6, 40, tzinfo=UTC)  # the second 01:40 in New York
    await kv.scheduler(Inbox()).tick(ctx.org, now=at)  # pulse 06:40 fires; night's 05:30Z is skipped
    view = await routes.schedules_view(ctx, now=at)
    assert view["asked"] == "node-a" and view["fires"] == "ok" and view["enabled"] is True
    by_name = {s["name"]: s for s in view["schedules"]}
    assert list(by_name) == ["pulse", "night", "standup"]
    pulse, night, standup = by_name["pulse"], by_name["night"], by_name["standup"]
    assert (
        pulse["scope"] == "role:ops" and pulse["timezone"] == "Europe/Lisbon" and pulse["targets"] == ["ops"]
    )
    assert pulse["next_fire"] == {"at": "2026-11-01T06:45:00+00:00", "label": "20261101T0645"}
    assert pulse["last_slot"] == {
        "at": "2026-11-01T06:40:00+00:00",
        "label": "20261101T0640",
        "seats": {"ops": "fired"},
    }
    assert night["catchup"] is False and night["timezone"] == "America/New_York"
    assert night["next_fire"] == {"at": "2026-11-02T06:30:00+00:00", "label": "20261102T0130"}
    assert night["last_slot"]["label"] == "20261101T0130" and night["last_slot"]["seats"] == {
        "ops": "skipped"
    }
    assert standup["scope"] == "unit:eng" and standup["target"] == "lead" and standup["targets"] == ["lead"]
    assert standup["next_fire"]["label"] == "20261102T0900"  # Monday, Lisbon wall clock
    assert standup["last_slot"]["seats"] == {"lead": None}
    async with client(app) as c:
        assert (await c.get("/schedules")).status_code == 401
        assert (await c.get("/schedules", headers={"Authorization": f"Bearer {NOBODY}"})).status_code == 403
        r = await c.get("/schedules", headers={"Authorization": f"Bearer {READER}"})
    assert r.status_code == 200, r.text
    assert [s["name"] for s in r.json()["schedules"]] == ["pulse", "night", "standup"]


async def test_an_unreadable_store_still_lists_and_says_so() -> None:
    app, ctx = node_app(FaultyCoordination())
    view = await routes.schedules_view(ctx, now=datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    assert view["fires"] == "unavailable"
    assert all(v is None for s in view["schedules"] for v in s["last_slot"]["seats"].values())
    ctx.org = None
    async with client(app) as c:
        r = await c.get("/schedules", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 503 and r.json()["error"] == "not_configured"


@pytest.fixture
def served() -> Iterator[tuple[str, NodeContext]]:
    """The schedules route under uvicorn on loopback, in a thread; stopped after the test."""
    app, ctx = node_app(MemoryCoordination())
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}", ctx
    finally:
        server.should_exit = True
        thread.join(10)


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_cli_lists_schedules_through_a_running_node(served: tuple[str, NodeContext]) -> None:
    url, ctx = served
    shown = run("--url", url, "--token", READER)
    assert shown.exit_code == 0, shown.output
    for text in ("pulse", "*/5 * * * *", "America/New_York", "unit:eng", "standup"):
        assert text in shown.output, shown.output
    listed = run("list", "-url", url, "-token", READER, "--json")
    assert listed.exit_code == 0, listed.output
    assert '"name": "night"' in listed.output and '"next_fire"' in listed.output
    assert run("list", "--url", url).exit_code == 2  # no token
    denied = run("list", "--url", url, "--token", NOBODY)
    assert denied.exit_code == 2 and "403" in denied.output
    stopped = f"http://127.0.0.1:{free_port()}"
    gone = run("list", "--url", stopped, "--token", READER)
    assert gone.exit_code == 1 and f"cannot reach the node at {stopped}" in gone.output


async def test_a_line_that_never_matches_lists_without_fires() -> None:
    app, ctx = node_app(MemoryCoordination())
    ctx.org = org_of(company_data([{"name": "never", "cron": "0 0 30 2 *", "task": "t"}]))
    (never,) = (await routes.schedules_view(ctx))["schedules"]
    assert never["next_fire"] is None and never["last_slot"] is None
