"""``GET /budgets``, ``POST /budgets/reset`` (FL-120) in process, and ``crewlet budgets`` over the wire."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from crewlet.budgets_cli import app as cli
from services.ingress.api.routes import budgets as budget_routes
from shared.budgets import Budgets
from shared.config import NodeConfig
from shared.coordination import Coordination, FaultyCoordination, MemoryCoordination
from shared.runtime import NodeContext, install_error_handlers
from tests.support.procs import free_port

from .conftest import Clock, company_data, org_of

TOKEN = "t" * 32
READER = "r" * 32


def node_app(coord: Coordination | None) -> tuple[FastAPI, NodeContext]:
    cfg = NodeConfig.model_validate(
        {
            "node": {"id": "node-a"},
            "api": {
                "auth": {
                    "tokens": [
                        {"id": "op", "token": TOKEN},
                        {"id": "reader", "token": READER, "grants": ["state:read"]},
                    ]
                }
            },
        }
    )
    ctx = NodeContext(cfg)
    ctx.coord = coord
    ctx.org = org_of(company_data(org={"day": 1000}, seats={"a": {"week": 300}, "b": None}))
    ctx.extras["budgets"] = Budgets(lambda: ctx.coord, lambda: ctx.org, clock=Clock())
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(budget_routes.router(ctx))
    return app, ctx


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node")


async def test_get_shows_caps_counters_refusing_scopes_and_refused_at() -> None:
    app, ctx = node_app(MemoryCoordination())
    seat = ctx.org.seat("a")
    budgets = budget_routes.budgets_of(ctx)
    await budgets.charge(seat.agent_id, 300)
    with pytest.raises(Exception, match="budget exhausted"):
        await budgets.charge(seat.agent_id, 1)
    async with client(app) as c:
        assert (await c.get("/budgets")).status_code == 401
        r = await c.get("/budgets", headers=auth(READER))
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["asked"] == "node-a" and view["timezone"] == "UTC"
    assert view["refusing"] == [f"agent:{seat.agent_id}"]
    org, agent = view["scopes"]
    assert org["caps"] == {"day": 1000} and org["windows"]["day"]["spent"] == 300
    assert agent["handle"] == "a" and agent["windows"]["week"]["spent"] == 300
    assert agent["refused_at"] == "2026-11-29T12:00:00+00:00"


async def test_reset_needs_config_write_and_names_an_unknown_scope() -> None:
    app, ctx = node_app(MemoryCoordination())
    seat = ctx.org.seat("a")
    await budget_routes.budgets_of(ctx).charge(seat.agent_id, 120)
    async with client(app) as c:
        assert (await c.post("/budgets/reset")).status_code == 401
        denied = await c.post("/budgets/reset", headers=auth(READER))
        assert denied.status_code == 403 and "config:write" in denied.json()["detail"]
        unknown = await c.post("/budgets/reset", params={"scope": "agent:nobody"}, headers=auth())
        assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_scope"
        assert "agent:nobody" in unknown.json()["detail"]
        empty = await c.post("/budgets/reset", params={"scope": " "}, headers=auth())
        assert empty.status_code == 400
        one = await c.post("/budgets/reset", params={"scope": "agent:a"}, headers=auth())
        assert one.status_code == 200, one.text
        assert one.json() == {
            "scope": "agent:a",
            "zeroed": [
                {"scope": f"agent:{seat.agent_id}", "period": "week", "window": "2026-W48", "was": 120}
            ],
            "by": "op",
            "node": "node-a",
        }
        every = (await c.post("/budgets/reset", headers=auth())).json()
        assert every["scope"] == "all" and [z["scope"] for z in every["zeroed"]] == [
            "org",
            f"agent:{seat.agent_id}",
        ]
        view = (await c.get("/budgets", headers=auth())).json()
    assert [w["spent"] for s in view["scopes"] for w in s["windows"].values()] == [0, 0]


async def test_an_unreadable_store_answers_503_never_an_empty_view() -> None:
    app, ctx = node_app(FaultyCoordination())
    async with client(app) as c:
        r = await c.get("/budgets", headers=auth())
        reset = await c.post("/budgets/reset", params={"scope": "org"}, headers=auth())
    assert r.status_code == 503
    assert r.json()["error"] == "budgets_unavailable"
    assert r.json()["detail"].startswith("cannot read the budget counters: coordination store unavailable")
    assert reset.status_code == 503
    ctx.coord = None  # before the node has its store
    async with client(app) as c:
        r = await c.get("/budgets", headers=auth())
    assert r.status_code == 503 and "not open" in r.json()["detail"]


def test_budgets_of_makes_one_per_node() -> None:
    cfg = NodeConfig.model_validate({"node": {"id": "n"}})
    ctx = NodeContext(cfg)
    first = budget_routes.budgets_of(ctx)
    assert budget_routes.budgets_of(ctx) is first and ctx.extras["budgets"] is first


@pytest.fixture
def served() -> Iterator[tuple[str, NodeContext]]:
    """The budgets routes under uvicorn on loopback, in a thread; stopped after the test."""
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


def test_cli_show_and_reset_through_a_running_node(served: tuple[str, NodeContext]) -> None:
    url, ctx = served
    shown = run("show", "--url", url, "--token", TOKEN)
    assert shown.exit_code == 0, shown.output
    assert "org" in shown.output and "1000" in shown.output and "refusing: none" in shown.output
    as_json = run("show", "-url", url, "-token", TOKEN, "--json")
    assert as_json.exit_code == 0 and '"timezone": "UTC"' in as_json.output
    reset = run("reset", "--scope", "org", "--url", url, "--token", TOKEN)
    assert reset.exit_code == 0 and "nothing was counted" in reset.output
    seat = ctx.org.seat("a")
    asyncio.run(budget_routes.budgets_of(ctx).charge(seat.agent_id, 70))
    shown = run("show", "--url", url, "--token", TOKEN)
    assert shown.exit_code == 0 and "2026-W48" in shown.output and "70" in shown.output
    reset = run("reset", "--url", url, "--token", TOKEN)
    assert reset.exit_code == 0, reset.output
    assert "reset org day 2026-11-29: was 70" in reset.output
    assert f"reset agent:{seat.agent_id} week 2026-W48: was 70" in reset.output
    unknown = run("reset", "-scope", "agent:ghost", "--url", url, "--token", TOKEN)
    assert unknown.exit_code == 2 and "unknown_scope" in unknown.output and "agent:ghost" in unknown.output
    denied = run("reset", "--url", url, "--token", READER)
    assert denied.exit_code == 2 and "403" in denied.output
    assert run("show", "--url", url).exit_code == 2  # no token


def test_cli_against_a_stopped_node_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = run("show", "--url", url, "--token", TOKEN)
    assert result.exit_code == 1
    assert f"cannot reach the node at {url}" in result.output
