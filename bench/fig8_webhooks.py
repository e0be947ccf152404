"""Figure 8: signed webhook ingest, requests per second at one ingress node, with claims dedupe [floor: a bare
FastAPI endpoint that reads the body].

What is measured: a real node process with roles ``[data, ingress]`` (FL-17: ingress needs data beside
it; no seats role, so no turn runs and competes for the CPU) answering ``POST
/webhooks/inbound/bench``, the generic signed webhook (CO-9): read the body with its cap, check the
``X-Hub-Signature-256`` HMAC over the raw bytes, parse the JSON, claim the delivery id in the
``claims`` bucket (KV create: the dedupe, FL-122), publish the envelope to the routed seat's inbox,
answer 202. Every delivery id is new, so every request pays the claim and the publish.

The body is a real GitHub delivery (``issues.opened.json`` of the shared data, re-serialised compact,
about 9 KB; a small JSON object when the shared data is absent), the same bytes and signature on
every request. Load: 16 keep-alive connections, each sending its next request as soon as the last
was answered (:mod:`bench._http`, a minimal client, so the generator is cheaper than the floor).

The floor: the bare FastAPI app of :mod:`bench._bare` (``POST /hook`` reads the body, answers 202),
same uvicorn settings, same load, same body and headers. Node and floor alternate in rounds; the
rate is counted in 0.5 s windows (median window, and as "p99" the 1st percentile window).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from ._ctx import Ctx
from ._env import SHARED, WEBHOOK_SECRET, nats_server, start_bare, start_node, write_company
from ._http import Conn
from ._result import Row, failed, row_from

__all__ = ["run"]

_CONNS = 16
_WINDOW = 0.5


TEXT_POINTER = "/issue/title"
"""Where the webhook entry reads the text (the GitHub delivery has no ``/text``: with the default
pointer every request would be answered 200 ``ignored`` and pay neither the claim nor the publish)."""


def _company(path: Path) -> Path:
    """The one-seat bench company with its webhook's ``text_pointer`` set to :data:`TEXT_POINTER`."""
    company = write_company(path, seats=1)
    doc = yaml.safe_load(company.read_text())
    for hook in doc["integrations"]["webhooks"]:
        hook["text_pointer"] = TEXT_POINTER
    company.write_text(yaml.safe_dump(doc, sort_keys=False))
    return company


def _body() -> tuple[bytes, str]:
    path = SHARED / "data" / "github-webhooks" / "issues.opened.json"
    if path.is_file():
        doc: Any = json.loads(path.read_text())
        origin = "issues.opened.json (octokit webhooks examples), compact"
    else:
        doc = {"text": "A bench delivery", "issue": {"title": "Bench", "body": "x" * 512}}
        origin = "a small JSON object (the shared data was absent)"
    return json.dumps(doc, separators=(",", ":")).encode(), origin


async def _load(
    port: int, path: str, body: bytes, sig: str, seconds: float, prefix: str
) -> tuple[list[float], int, int]:
    """Send for ``seconds``; return the completion times, accepted and refused counts."""
    done: list[float] = []
    bad = [0]
    counter = [0]
    stop_at = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        conn = await Conn.open(port)
        try:
            while time.perf_counter() < stop_at:
                counter[0] += 1
                headers = {
                    "Content-Type": "application/json",
                    "X-Hub-Signature-256": sig,
                    "X-Request-Id": f"{prefix}-{k}-{counter[0]}",
                }
                status, _ = await conn.post(path, body, headers)
                if status == 202:  # accepted: claimed and published (200 is ignored or duplicate)
                    done.append(time.perf_counter())
                else:
                    bad[0] += 1
        finally:
            await conn.close()

    await asyncio.gather(*(worker(k) for k in range(_CONNS)))
    return done, len(done), bad[0]


def _windows(times: list[float]) -> list[float]:
    if not times:
        return []
    times = sorted(times)
    start = times[0]
    out = []
    t = start
    while t + _WINDOW <= times[-1]:
        out.append(sum(1 for x in times if t <= x < t + _WINDOW) / _WINDOW)
        t += _WINDOW
    return out


def run(ctx: Ctx) -> list[Row]:
    """Measure row 8."""
    label = "8 signed webhook ingest at one ingress node (claims dedupe)"
    rounds, seconds = ctx.n(2, 4), ctx.n(2.0, 5.0)
    body, origin = _body()
    sig = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    params: dict[str, Any] = {
        "connections": _CONNS,
        "rounds": rounds,
        "seconds_per_round": seconds,
        "body_bytes": len(body),
        "body": origin,
        "roles": ["data", "ingress"],
        "unique_delivery_ids": True,
        "text_pointer": TEXT_POINTER,
    }
    ctx.say(f"figure 8: {rounds} rounds of {seconds:g} s on the node and on the bare app")
    try:
        with contextlib.ExitStack() as stack:
            srv = nats_server(stack, ctx.sub("nats"))
            bare = start_bare(stack, ctx.sub("bare"))
            company = _company(ctx.sub("company") / "company.yaml")
            node = start_node(
                stack,
                ctx.root,
                node_id="ingress-1",
                company=company,
                nats_url=srv.url,
                roles=("data", "ingress"),
            )
            node_port = int(urlparse(node.url).port or 0)
            bare_port = int(urlparse(bare).port or 0)
            fig: list[float] = []
            floor: list[float] = []
            accepted = refused = 0
            for r in range(rounds):
                times, ok, bad = asyncio.run(
                    _load(node_port, "/webhooks/inbound/bench", body, sig, seconds, f"r{r}")
                )
                fig += _windows(times)
                accepted += ok
                refused += bad
                times, _, fbad = asyncio.run(_load(bare_port, "/hook", body, sig, seconds, f"f{r}"))
                floor += _windows(times)
                if fbad:
                    raise RuntimeError(f"the bare floor refused {fbad} requests")
            if refused:
                raise RuntimeError(
                    f"the node refused {refused} of {accepted + refused} signed deliveries: {node.output()[-1500:]}"
                )
    except Exception as e:  # noqa: BLE001
        return [failed(label, "req/s", f"{type(e).__name__}: {e}", params)]
    params["accepted"] = accepted
    return [row_from(label, "req/s", fig, "bare FastAPI endpoint reading the body", floor, parameters=params)]
