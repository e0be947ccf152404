"""``GET /fleet/broker`` while the lease store cannot be read (lost quorum): the group alone.

In-process: the route with a coordination store that answers "unavailable" and a member whose
group read is stubbed to the real shape; no broker is needed for this judgement.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from services.ingress.api.routes import broker as broker_routes
from shared.broker import Membership
from shared.config import NodeConfig
from shared.coordination import CoordinationUnavailable, MemoryCoordination
from shared.runtime import NodeContext, install_error_handlers

TOKEN = "t" * 32


class _NoQuorum(MemoryCoordination):
    async def entries(self, slot: Any, prefix: str = "") -> Any:
        raise CoordinationUnavailable("no quorum: 1 of 3 members")


class _Member(Membership):
    async def read_group(self, presence: list[dict[str, Any]]) -> Any:
        group = {
            "cluster": "c1",
            "leader": "",
            "peers": [
                {
                    "name": "a",
                    "peer": "p-a",
                    "self": True,
                    "leader": False,
                    "current": True,
                    "offline": False,
                    "active": 0.0,
                }
            ],
        }
        return group, "a", None


def test_lost_quorum_still_lists_the_voters() -> None:
    cfg = NodeConfig.model_validate(
        {"node": {"id": "a"}, "api": {"auth": {"tokens": [{"id": "op", "token": TOKEN}]}}}
    )
    ctx = NodeContext(cfg)
    ctx.coord = _NoQuorum(lease_ttl=timedelta(seconds=3))
    ctx.extras["broker_membership"] = _Member(None, node_id="a", kind="member")  # type: ignore[arg-type]
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(broker_routes.router(ctx))

    async def ask() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            view = await client.get("/fleet/broker", headers=auth)
            removal = await client.post("/fleet/broker/remove/b", params={"confirm": "b"}, headers=auth)
        return view, removal

    r, removal = asyncio.run(ask())
    assert r.status_code == 200, r.text
    view = r.json()
    assert [p["name"] for p in view["group"]["peers"]] == ["a"]
    assert view["findings"] == [] and view["nodes"] == []
    assert "no quorum" in view["presence_error"]
    assert removal.status_code == 503, removal.text
