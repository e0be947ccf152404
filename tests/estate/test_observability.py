"""Positions register, alarms and named log lines of the estate (ES-4, ES-23, ES-24, ES-92, ES-93)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats.js.api
from structlog.testing import capture_logs

from shared.estate._alarms import Alarms
from tests.support.procs import REPO

from .conftest import Inproc, seed

Start = Callable[..., Awaitable[Inproc]]

NAMED = (
    "statelog_apply_retrying",
    "statelog_apply_faulted",
    "statelog_apply_recovered",
    "statelog_applier_stopped",
    "statelog_publish_unknown",
    "statelog_write_unvouched",
    "jetstream_domain_consumer_rebuilt",
    "jetstream_stream_slow",
    "estate_partition_not_served",
    "store_tx_retry",
    "lexical_index_built",
)


def test_every_named_log_line_is_emitted_by_the_code() -> None:
    code = "\n".join(p.read_text() for p in (REPO / "shared" / "estate").rglob("*.py"))
    for name in NAMED:
        assert re.search(rf'"{name}"', code), name


def test_an_alarm_logs_when_it_starts_and_when_it_clears() -> None:
    alarms = Alarms()
    with capture_logs() as logs:
        alarms.set("apply_lag", True, lag_records=5)
        alarms.set("apply_lag", True, lag_records=6)  # still on: no second line
        time.sleep(0.01)
        alarms.set("apply_lag", False, lag_records=0)
        alarms.set("apply_lag", False)
    assert [(e["event"], e["kind"]) for e in logs] == [
        ("alarm_started", "apply_lag"),
        ("alarm_cleared", "apply_lag"),
    ]
    assert logs[1]["duration_seconds"] > 0 and all(e["log_level"] == "warning" for e in logs)


async def test_positions_are_published_at_start_and_apply_lag_fires(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    js = a.nc.jetstream()
    kv = await js.key_value("crewlet_positions")
    row = json.loads((await kv.get("tracker.a")).value or b"{}")
    assert (
        row["node"] == "a"
        and row["stream"] == "CREWLET_TRACKER_LOG"
        and "seq" in row
        and row["generation"] == 1
    )
    applier = a.est.appliers["tracker"]
    applier.log_last = applier.applied + 3
    applier.behind_since = time.monotonic() - 61
    with capture_logs() as logs:
        applier.note_log_end(applier.log_last)
        a.est.beat._log.head = _fake_head(applier.log_last)  # type: ignore[method-assign,assignment]
        await a.est.beat.beat()
    assert [e["kind"] for e in logs if e["event"] == "alarm_started"] == ["apply_lag"]


def _fake_head(last: int) -> Callable[[str], Awaitable[tuple[int, int]]]:
    async def head(domain: str) -> tuple[int, int]:
        return 1, last

    return head


async def test_the_five_logs_are_provisioned_once_and_never_rewritten(inproc: Start, tmp_path: Path) -> None:
    a = await inproc("a")
    js = a.nc.jetstream()
    names = sorted(
        str(s.config.name) for s in await js.streams_info() if str(s.config.name).startswith("CREWLET_")
    )
    assert names == [  # ES-4 as AG §13.1 amends it: five, CREWLET_MEMORY included
        "CREWLET_MEMORY",
        "CREWLET_PAGES_LOG",
        "CREWLET_TRACKER_LOG",
        "CREWLET_TRACKER_VECTORS",
        "CREWLET_USAGE_LOG",
    ]
    info = await js.stream_info("CREWLET_TRACKER_LOG")
    assert info.config.duplicate_window == 120 and info.config.discard == nats.js.api.DiscardPolicy.NEW
    memory = await js.stream_info("CREWLET_MEMORY")  # AG-1: compacted, no age, row and statelog subjects
    assert memory.config.max_msgs_per_subject == 1 and not memory.config.max_age
    assert sorted(memory.config.subjects or []) == ["crewlet.memory.>", "crewlet.statelog.memory.>"]
    created = {n: (await js.stream_info(n)).created for n in names}
    b = await inproc("b", replicas=1)
    assert {n: (await b.nc.jetstream().stream_info(n)).created for n in names} == created
