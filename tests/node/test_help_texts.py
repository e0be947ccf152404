"""``--help`` speaks to a newcomer: no spec requirement ids in any command's text (issue 38).

The walk covers what Typer builds from the app the console script runs: every command and group,
its help and short help, and every parameter's help; ``crewlet <group> --help`` is read through a
real process too, since that is what a user sees.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

from typer.main import get_command

from crewlet._help import without_ids
from crewlet.cli import app
from tests.support.procs import REPO, VENV_BIN

SPEC_ID = re.compile(r"\b(FL|CO|ES|AG)-\d+")


def _walk(command: Any, path: list[str]) -> list[tuple[str, str, str]]:
    """``(command path, what, text)`` for every help text under ``command``."""
    where = " ".join(path)
    out = [(where, "help", command.help or ""), (where, "short help", command.short_help or "")]
    out += [(where, f"--{p.name}", getattr(p, "help", None) or "") for p in command.params]
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        out += _walk(sub, [*path, name])
    return out


def test_no_help_text_names_a_spec_id() -> None:
    texts = _walk(get_command(app), ["crewlet"])
    assert len({t[0] for t in texts}) >= 50  # every command and group was walked
    found = [f"{where} {what}: {text[:120]!r}" for where, what, text in texts if SPEC_ID.search(text)]
    assert not found, "\n".join(found)


def test_the_printed_help_has_no_spec_id() -> None:
    for args in ([], ["config", "import"], ["node"]):
        out = subprocess.run(
            [str(VENV_BIN / "crewlet"), *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        )
        assert out.returncode == 0, out.stderr
        assert "Usage" in out.stdout
        assert not SPEC_ID.search(out.stdout), (args, out.stdout)


def test_ids_come_out_with_their_punctuation() -> None:
    assert without_ids("List work items (CO-24).") == "List work items."
    assert without_ids("Import (PUT /config; CO-4, CO-28, FL-109).") == "Import (PUT /config)."
    assert without_ids("Run a node; ``--company`` is a seed (CO-4, FL-109).") == (
        "Run a node; ``--company`` is a seed."
    )
    assert without_ids("FL-147: the members") == ": the members"
    assert without_ids("Backups (ES-81..ES-84)") == "Backups"
    assert without_ids("no ids here") == "no ids here"
