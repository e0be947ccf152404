"""``make fleet-local`` (issue 38): three clustered nodes on one machine, one command up, Ctrl-C down.

The script (``python -m crewlet.fleet_local``) runs as a user would: three real node processes with
embedded nats-servers clustered on loopback; a node stopped by SIGTERM hands its seats to the other
two; Ctrl-C drains the rest and says ``stopped``; nothing is left running. Bad ports are refused by
name with exit 2 before anything starts.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from crewlet.fleet_local import SettingError, node_files, port_setting
from shared.config import load_node_file
from tests.support.procs import Proc, free_port, hold_port, pid_alive, port_bindable


def test_port_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWLET_PORT", "abc")
    with pytest.raises(SettingError, match="CREWLET_PORT='abc' is not a port number"):
        port_setting("CREWLET_PORT", 8081, span=3)
    monkeypatch.setenv("CREWLET_PORT", "65534")
    with pytest.raises(SettingError, match="CREWLET_PORT=65534 is out of range: use 1..65533"):
        port_setting("CREWLET_PORT", 8081, span=3)
    monkeypatch.setenv("CREWLET_PORT", "0")
    with pytest.raises(SettingError, match="out of range"):
        port_setting("CREWLET_PORT", 8081)
    monkeypatch.setenv("CREWLET_PORT", " ")
    assert port_setting("CREWLET_PORT", 8081) == 8081


def test_node_files_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWLET_API_TOKEN", "t" * 32)
    monkeypatch.setenv("CREWLET_SECRETS_KEY", "0+wIc4cfqPukveOK5Vlcm9HjyADVViFUTNoaDKlVosY=")
    files = node_files(tmp_path, 9001, 9101)
    assert sorted(files) == ["node-1", "node-2", "node-3"]
    loaded = [load_node_file(files[n]) for n in sorted(files)]
    assert [issues for _, issues in loaded] == [[], [], []]
    cfgs = [cfg for cfg, _ in loaded]
    assert [c.api.port for c in cfgs] == [9001, 9002, 9003]
    assert [c.node.id for c in cfgs] == ["node-1", "node-2", "node-3"]


def _start(tmp_path: Path, env: dict[str, str]) -> Proc:
    return Proc(
        [sys.executable, "-m", "crewlet.fleet_local"],
        log=tmp_path / "fleet-local.out",
        env=env,
        cwd=tmp_path,
    )


def test_bad_port_refused_before_anything_starts(tmp_path: Path) -> None:
    proc = _start(tmp_path, {"CREWLET_PORT": "99999", "CREWLET_DATA_DIR": str(tmp_path / "d")})
    try:
        assert proc.wait(30) == 2
        assert "CREWLET_PORT=99999 is out of range" in proc.output()
        assert not (tmp_path / "d").exists()
    finally:
        proc.stop()


@pytest.mark.fleet
@pytest.mark.timeout(240)
def test_three_nodes_up_a_seat_moves_ctrl_c_down(tmp_path: Path) -> None:
    # three consecutive free ports for the API and three for the routes, from this worker's slice
    def run_of_three() -> int:
        for _ in range(200):
            base = free_port()
            if all(port_bindable(base + i) for i in (1, 2)):
                hold_port(base + 1)
                hold_port(base + 2)
                return base
        raise AssertionError("no three consecutive free ports")

    api, route = run_of_three(), run_of_three()
    token = "fleet-local-token-0123456789abcdef"
    env = {
        "CREWLET_PORT": str(api),
        "CREWLET_ROUTE_PORT": str(route),
        "CREWLET_DATA_DIR": str(tmp_path / "fleet"),
        "CREWLET_API_TOKEN": token,
    }
    proc = _start(tmp_path, env)
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and "Press Ctrl-C" not in proc.output():
            assert proc.popen.poll() is None, proc.output()[-3000:]
            time.sleep(0.5)
        out = proc.output()
        assert "Press Ctrl-C to drain and stop all three." in out, out[-3000:]
        pids = {m[0]: int(m[1]) for m in re.findall(r"(node-\d): http://\S+\s+pid (\d+)", out)}
        assert sorted(pids) == ["node-1", "node-2", "node-3"]
        h = {"Authorization": f"Bearer {token}"}

        def owners() -> dict[str, str]:
            view = httpx.get(f"http://127.0.0.1:{api}/fleet", headers=h, timeout=5).json()
            return {s["seat"]: s["node"] for s in view["seats"]}

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(owners()) < 4:
            time.sleep(0.5)
        assert len(owners()) == 4
        # stop the node holding a seat (not node-1, which we ask): its seats go to the other two
        victim = next((n for n in owners().values() if n != "node-1"), "node-2")
        os.kill(pids[victim], signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = owners()
            if len(now) == 4 and victim not in now.values():
                break
            time.sleep(0.5)
        assert len(owners()) == 4 and victim not in owners().values(), owners()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and f"{victim} stopped (exit 0)" not in proc.output():
            time.sleep(0.2)
        assert f"{victim} stopped (exit 0); its seats move to the other two" in proc.output()
        proc.signal(signal.SIGINT)
        assert proc.wait(90) == 0, proc.output()[-3000:]
        assert proc.output().rstrip().endswith("stopped")
    finally:
        proc.stop()
        for pid in pids.values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert not any(pid_alive(p) for p in pids.values())
