"""Figure 9: memory, the RSS of one node holding 1 000 idle seats [floor: an idle node holding none].

What is measured: real node processes (all four roles, the embedded broker, as ``crewlet run`` has
it), one with a company of 1 000 agent seats and one with a company of none (only the human owner).
Each is started, waited for until ``/health`` counts every seat held, left to settle, then its
``VmRSS`` is read every 0.25 s for a few seconds: the median and p99 of those samples. The node's
own process only; the embedded ``nats-server`` child's RSS and both processes' CPU use while idle
are in the parameters.

**Why ``coordination.type: local``.** With the fleet store (``embedded-kv``) the fair-share policy
claims at most 4 seats per 5 s sweep even on a lone node (FL-56), so holding 1 000 seats would take
about 21 minutes. Local coordination (legal beside a solo embedded broker) keeps the leases in the
node's memory and claims every seat in one sweep; everything else a held seat costs is the same:
both mailboxes created at boot, the attached pull subscription, the seat loop fetching every second,
the dispatcher and seat-host state. The lease records themselves live in the node's memory instead
of the broker's (a few hundred bytes each).

**Why the agent stream is pre-created.** nats-server 2.15.1 caps a stream that does not set
``max_consumers`` at 1 000 consumers, and every seat has two on ``CREWLET_AGENT``: as the engine
stands, a node with more than 500 agent seats fails its boot with 10026 "maximum consumers limit
reached". The benchmark pre-creates the stream in the embedded broker's store with the engine's own
shape and ``max_consumers`` raised (``bench/_env.py``), and says so in the parameters.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any

from tests.support.procs import children_named

from ._ctx import Ctx
from ._env import (
    AGENT_MAX_CONSUMERS,
    cpu_seconds,
    precreate_agent_store,
    rss_mb,
    start_node,
    wait_held,
    write_company,
)
from ._result import Row, failed, not_measured, row_from

__all__ = ["run"]


def _sample(
    ctx: Ctx, name: str, seats: int, settle: float, seconds: float
) -> tuple[list[float], dict[str, Any]]:
    with contextlib.ExitStack() as stack:
        root = ctx.sub(name)
        company = write_company(root / "company" / "company.yaml", seats=seats)
        js_store = root / "jetstream"
        if seats > 500:  # see _env.AGENT_MAX_CONSUMERS: as the engine stands, boot fails at 500 seats
            precreate_agent_store(js_store)
        t0 = time.monotonic()
        node = start_node(
            stack,
            root,
            node_id=name,
            company=company,
            nats_url=None,
            coordination="local",
            js_store=js_store,
            ready_timeout=300,
        )
        held = wait_held(node, seats, 300) if seats else 0.0
        boot = time.monotonic() - t0
        time.sleep(settle)
        kids = children_named(node.pid, "nats-server")
        cpu0 = cpu_seconds(node.pid)
        kcpu0 = cpu_seconds(kids[0]) if kids else 0.0
        w0 = time.monotonic()
        samples = []
        end = w0 + seconds
        while time.monotonic() < end:
            samples.append(rss_mb(node.pid))
            time.sleep(0.25)
        wall = time.monotonic() - w0
        info = {
            "boot_to_all_held_s": round(boot, 1),
            "held_after_ready_s": round(held, 1),
            "idle_cpu_percent": round(100 * (cpu_seconds(node.pid) - cpu0) / wall, 1),
            "broker_rss_mb": round(rss_mb(kids[0]), 1) if kids else None,
            "broker_idle_cpu_percent": round(100 * (cpu_seconds(kids[0]) - kcpu0) / wall, 1)
            if kids
            else None,
        }
        return samples, info


def run(ctx: Ctx) -> list[Row]:
    """Measure row 9."""
    label = "9 RSS of one node holding 1,000 idle seats"
    seats = 1000
    settle, seconds = ctx.n(3, 10), ctx.n(3, 8)
    params: dict[str, Any] = {
        "seats": seats,
        "coordination": "local",
        "stream": "embedded",
        "settle_s": settle,
        "sample_s": seconds,
    }
    try:
        ctx.say("figure 9: an idle node with no seats")
        floor, finfo = _sample(ctx, "idle-0", 0, settle, seconds)
        ctx.say(f"figure 9: a node with {seats} seats")
        fig, info = _sample(ctx, "idle-1000", seats, settle, seconds)
    except Exception as e:  # noqa: BLE001
        return [failed(label, "MB", f"{type(e).__name__}: {e}", params)]
    params.update({f"seats_{k}": v for k, v in info.items()})
    params.update({f"none_{k}": v for k, v in finfo.items()})
    params["agent_stream_max_consumers"] = AGENT_MAX_CONSUMERS
    params["workaround"] = (
        "CREWLET_AGENT pre-created with max_consumers raised: the server default (1 000 per stream) stops boot at 500 seats"
    )
    params["kb_per_seat"] = round((statistics.median(fig) - statistics.median(floor)) * 1024 / seats, 1)
    return [row_from(label, "MB", fig, "idle node, no seats", floor, parameters=params), _ten_thousand(info)]


def _ten_thousand(info: dict[str, Any]) -> Row:
    """Row 9b: 10 000 idle seats, not measured on this machine; why, from the 1 000-seat run.

    Every held seat's loop fetches from its inbox once a second, so an "idle" node's CPU grows with
    its seats (``idle_cpu_percent`` at 1 000); the boot creates two consumers per seat; the embedded
    broker holds their state. Extrapolated linearly from the 1 000-seat node: the boot takes
    minutes, the idle loops alone would keep about ``10 × idle_cpu_percent`` % of a core busy, and
    the stream needs ``max_consumers`` ≥ 20 000.
    """
    boot = float(info.get("boot_to_all_held_s") or 0.0)
    cpu = float(info.get("idle_cpu_percent") or 0.0)
    broker = info.get("broker_rss_mb")
    params: dict[str, Any] = {
        "seats": 10_000,
        "extrapolated_boot_s": round(10 * boot),
        "extrapolated_idle_cpu_percent": round(10 * cpu),
        "extrapolated_broker_rss_mb": round(10 * float(broker)) if broker else None,
        "consumers_needed": 20_000,
    }
    reason = (
        f"from the 1 000-seat node, 10 000 seats would boot in ~{10 * boot:.0f} s and their "
        f"idle seat loops (one fetch per seat per second) would use ~{10 * cpu:.0f} % of a core on a "
        f"2-core machine shared with the broker, so the node would not be idle and the RSS not an idle one"
    )
    return not_measured("9b RSS of one node holding 10,000 idle seats", "MB", reason, params)
