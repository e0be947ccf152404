"""A real node (embedded broker, offline provider) fires a schedule once per slot and lists it (CO-33).

``* * * * *`` with ``tick_seconds: 1``: the first tick after start catches up the current minute's
slot (it is always inside the 120 s window), so the test does not wait for a minute boundary.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.main_job.support import wait_for
from tests.support.procs import REPO, Node, write_yaml


def _company(dir: Path) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "examples" / "offline-script.yaml", dir / "offline-script.yaml")
    data: dict[str, Any] = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["scheduling"] = {"tick_seconds": 1}
    data["units"][0]["schedules"] = [
        {
            "name": "heartbeat",
            "cron": "* * * * *",
            "task": "Post a heartbeat",
            "target": "lead",
            "timeout_seconds": 60,
        }
    ]
    return write_yaml(dir / "company.yaml", data)


def test_a_node_fires_its_schedule_once_and_lists_it(start_node: Callable[..., Node], tmp_path: Path) -> None:
    company = _company(tmp_path / "co")
    node = start_node("run", "--data-dir", str(tmp_path / "data"), "--import-company", str(company))
    node.wait_ready()

    def fired() -> list[dict[str, Any]]:
        return [e for e in node.events() if e.get("event") == "scheduled_task_fired"]

    first = wait_for("the first fire", fired, node=node)[0]
    assert (first["schedule"], first["seat"], first["scope"]) == ("heartbeat", "lead", "unit:eng")

    def listed() -> dict[str, Any] | None:
        r = node.get("/schedules")
        assert r.status_code == 200, r.text
        (sched,) = r.json()["schedules"]
        return sched if sched["last_slot"]["seats"] == {"lead": "fired"} else None

    sched = wait_for("GET /schedules shows the last slot fired", listed, node=node)
    assert (
        sched["cron"] == "* * * * *" and sched["timezone"] == "Europe/Lisbon" and sched["targets"] == ["lead"]
    )
    assert sched["next_fire"]["at"] > sched["last_slot"]["at"]
    events = node.events()
    assert not [e for e in events if e.get("event") == "feature_inert" and "schedul" in str(e.get("path"))]
    assert not [e for e in events if e.get("event") in ("duty_tick_failed", "scheduled_fire_failed")]
    per_label = Counter(e["fire_label"] for e in fired())
    assert per_label and max(per_label.values()) == 1, per_label  # ticks every second, one fire per slot
