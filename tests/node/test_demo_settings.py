"""``make run``'s settings (issue 38): a bad ``CREWLET_PORT`` is refused by name before anything
starts (it was a ``ValueError``/``OverflowError`` traceback, and port 0 made the demo wait 60 s for a
node that was ready), and the generated API token is kept in the data directory (0600) so a restart
keeps the token a second shell exported.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from crewlet._local_settings import kept_secret


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "CREWLET_PORT='abc' is not a port number (1..65535)"),
        ("99999", "CREWLET_PORT=99999 is out of range: use 1..65535"),
        ("0", "CREWLET_PORT=0 is out of range: use 1..65535"),
    ],
)
def test_bad_port_refused_by_name(tmp_path: Path, value: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "crewlet.demo"],
        env={**os.environ, "CREWLET_PORT": value, "CREWLET_DATA_DIR": str(tmp_path / "d")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"make run: {message}"
    assert "Traceback" not in done.stdout + done.stderr


def test_token_kept_across_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREWLET_API_TOKEN", raising=False)
    first, where = kept_secret(tmp_path, "CREWLET_API_TOKEN", "api-token", lambda: "one")
    assert (first, where) == ("one", "new")
    assert stat.S_IMODE((tmp_path / "api-token").stat().st_mode) == 0o600
    assert kept_secret(tmp_path, "CREWLET_API_TOKEN", "api-token", lambda: "two") == ("one", "kept")
    monkeypatch.setenv("CREWLET_API_TOKEN", "mine")
    assert kept_secret(tmp_path, "CREWLET_API_TOKEN", "api-token", lambda: "two") == ("mine", "env")
