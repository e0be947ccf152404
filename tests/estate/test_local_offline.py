"""AG-10 Check: a ``type: local`` node and its nats-server run together in one new network namespace.

``unshare -n`` (root) gives the child a network namespace with loopback only (brought up with
``ip link set lo up``); the node loads ``wordllama`` from the weights inside its wheel, embeds the
pages, and ``crewlet_embedding_calls_total{provider="local"}`` rises. Any download attempt would
fail there, so the run proves the local model touches no network. The hybrid answer finds the page
titled "Release sign-off" for "who approves a production deploy?" (no shared content word but
"production").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.procs import REPO


def test_a_local_model_node_embeds_with_no_network(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "unshare -n needs root (the test machines run as root)"
    cmd = f"ip link set lo up && exec {sys.executable} -m tests.support.offline_node {tmp_path}"
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", cmd],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["interfaces"] == ["lo"]
    assert out["calls"] >= 1
    ans = out["answer"]
    assert (ans["mode_used"], ans["semantic"]) == ("hybrid", "ok")
    assert ans["hits"][0]["title"] == "Release sign-off"
