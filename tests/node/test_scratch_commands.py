"""FL-145: offline commands refuse a scratch store, naming ``store.scratch`` (their writes would vanish).

This build's offline command is ``crewlet config import FILE --offline`` (``--node F`` or ``--data-dir
D``); there is no ``crewlet migrate``, offline ``secrets`` or ``search eval`` to refuse.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.procs import REPO, VENV_BIN, write_yaml


def crewlet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "crewlet"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
    )


def _satellite(tmp_path: Path) -> Path:
    return write_yaml(
        tmp_path / "satellite.yaml",
        {
            "node": {"id": "s", "roles": ["seats"]},
            "store": {"dir": str(tmp_path / "store"), "scratch": True},
            "stream": {"type": "nats", "url": "nats://127.0.0.1:4222"},
            "api": {"port": 0},
        },
    )


def test_offline_config_import_refuses_a_scratch_node_file(tmp_path: Path) -> None:
    """FL-145 accept (for the command this build has): exit non-zero naming store.scratch, nothing written."""
    out = crewlet(
        "config", "import", "examples/company.yaml", "--offline", "--node", str(_satellite(tmp_path))
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "store.scratch" in out.stderr and "data node's API" in out.stderr, out.stderr
    assert not (tmp_path / "store").exists()


def test_offline_config_import_refuses_a_directory_a_scratch_node_marked(tmp_path: Path) -> None:
    """A scratch node leaves ``.scratch`` in its store at every boot; ``--data-dir`` there is refused."""
    store = tmp_path / "store"
    store.mkdir()
    (store / ".scratch").write_text("store.scratch: true\n")
    out = crewlet("config", "import", "examples/company.yaml", "--offline", "--data-dir", str(store))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "store.scratch" in out.stderr, out.stderr
    assert sorted(p.name for p in store.iterdir()) == [".scratch"]
