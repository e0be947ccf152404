"""``crewlet config``: import, revisions, diff, activate, show and export against a real node
(CO-4, CO-28, FL-104, FL-109); bad input is refused by name, locally when it can be, and never
with a traceback.

The CLI runs in this process through Typer's test runner (the installed entry point's own app,
with only ``CREWLET_URL`` and ``CREWLET_API_TOKEN`` set: a subprocess per call cost ~1 s of
imports, 30 s over the module); the node is a real ``crewlet run`` process on loopback (seeded
with the example company).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crewlet.cli import app as cli_app
from crewlet.config_cli import absolute_scripts, change_line
from tests.support.procs import REPO, SHARED, TOKEN, Node, free_port

EXAMPLE = REPO / "examples" / "company.yaml"
UPSTREAM = SHARED / "data" / "upstream-examples"
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens there
_ACTIVE = re.compile(r"revision (\S+) active at epoch (\d+)")


def crewlet(*args: str, url: str = NOWHERE, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    """Run the CLI with ``url`` and ``token`` (None: unset) as its ``CREWLET_*`` environment."""
    env = {name: None for name in os.environ if name.startswith("CREWLET_")}
    env |= {"CREWLET_URL": url, "CREWLET_API_TOKEN": token}
    result = CliRunner().invoke(cli_app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback the user would have seen
    out = subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    return out


def activated(out: subprocess.CompletedProcess[str]) -> tuple[str, int]:
    """``(revision id, epoch)`` from an import's or an activation's output."""
    assert out.returncode == 0, out.stdout + out.stderr
    m = _ACTIVE.search(out.stdout)
    assert m, out.stdout
    return m.group(1), int(m.group(2))


def company_copy(dir: Path, **changes: Any) -> Path:
    """The example company (and its offline rules file) copied into ``dir``, with top-level ``changes``."""
    dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "examples" / "offline-script.yaml", dir / "offline-script.yaml")
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update(changes)
    path = dir / "company.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- no node needed ---------------------------------------------------------------------------


def test_change_lines_and_absolute_scripts(tmp_path: Path) -> None:
    assert change_line({"path": "roles[2].handle", "op": "added", "after": "qa"}) == '+ roles[2].handle: "qa"'
    assert change_line({"path": "policies[0]", "op": "removed", "before": "x"}) == '- policies[0]: "x"'
    assert (
        change_line({"path": "turn_engine.max_tool_rounds", "op": "changed", "before": 24, "after": 30})
        == "~ turn_engine.max_tool_rounds: 24 -> 30"
    )
    doc = {
        "providers": {
            "llm": {
                "a": {"type": "offline", "script": "./rules.yaml"},
                "b": {"type": "offline", "script": "/abs/rules.yaml"},
                "c": {"type": "anthropic", "model": "m"},
            }
        }
    }
    out = absolute_scripts(doc, tmp_path)
    assert out["providers"]["llm"]["a"]["script"] == str((tmp_path / "rules.yaml").resolve())
    assert out["providers"]["llm"]["b"]["script"] == "/abs/rules.yaml"
    assert out["providers"]["llm"]["c"] == {"type": "anthropic", "model": "m"}
    assert doc["providers"]["llm"]["a"]["script"] == "./rules.yaml"  # the input is not modified


def test_bad_files_are_refused_locally_and_nothing_is_sent(tmp_path: Path) -> None:
    # NOWHERE is unreachable: had anything been sent, the exit would be 1 with "cannot reach"
    out = crewlet("config", "import", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and f"{tmp_path / 'nope.yaml'}: (document): no such file" in out.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    out = crewlet("config", "import", str(broken))
    assert out.returncode == 2 and f"{broken}: (document): YAML syntax error: line" in out.stderr
    bad = tmp_path / "company.yaml"
    bad.write_text(
        EXAMPLE.read_text().replace("    handle: dev\n", "    handle: dev\n        backstroy: typo\n", 1)
    )
    out = crewlet("config", "import", str(bad))
    assert out.returncode == 2, out.stderr
    assert any(line.startswith(f"{bad}: units[0].roles[1].backstroy: ") for line in out.stderr.splitlines())
    assert "nothing was imported" in out.stderr and "cannot reach" not in out.stderr
    # the offline provider's rules file is relative to the company file: not beside this copy
    lone = tmp_path / "lone" / "company.yaml"
    lone.parent.mkdir()
    lone.write_text(EXAMPLE.read_text())
    out = crewlet("config", "import", str(lone))
    assert out.returncode == 2 and f"{lone}: providers.llm.default.script: " in out.stderr
    assert "offline-script.yaml: no such file" in out.stderr and "cannot reach" not in out.stderr


def test_compat_warnings_then_the_node_is_asked(tmp_path: Path) -> None:
    out = crewlet("config", "import", str(UPSTREAM / "fixture.company.yaml"))
    assert out.returncode == 2 and "extensions" in out.stderr and "cannot reach" not in out.stderr
    out = crewlet("config", "import", "--compat", str(UPSTREAM / "fixture.company.yaml"))
    assert "extensions: warning: unsupported" in out.stderr
    assert out.returncode == 1 and f"cannot reach {NOWHERE}" in out.stderr


def test_usage_refusals_without_a_node(tmp_path: Path) -> None:
    good = company_copy(tmp_path / "c")
    out = crewlet("config", "import", str(good), token=None)
    assert out.returncode == 2 and "no API token" in out.stderr
    out = crewlet("config", "import", str(good), "--summary", "two\nlines")
    assert out.returncode == 2 and "--summary" in out.stderr
    out = crewlet("config", "import", str(good), "--offline")
    assert out.returncode == 2 and "--data-dir" in out.stderr
    out = crewlet("config", "import", str(good), "--offline", "--dry-run", "--data-dir", str(tmp_path))
    assert out.returncode == 2 and "--dry-run" in out.stderr
    out = crewlet("config", "import", str(good), "--offline", "--data-dir", str(tmp_path / "absent"))
    assert out.returncode == 2 and "no such directory" in out.stderr
    for args in (["show"], ["revisions"], ["export"], ["diff", "a"], ["activate", "a"]):
        out = crewlet("config", *args, token=None)
        assert out.returncode == 2 and "no API token" in out.stderr, args
        out = crewlet("config", *args)
        assert out.returncode == 1 and f"cannot reach {NOWHERE}" in out.stderr, args


# --- against a running node -------------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One ``crewlet run`` node (seeded with the example company) for this module's tests."""
    dir = tmp_path_factory.mktemp("config-node")
    port = free_port()
    started = Node(["run", "--data-dir", str(dir / "data"), "--port", str(port)], dir=dir, port=port)
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def revision_ids(node: Node) -> list[str]:
    """Every revision id the node lists, newest first."""
    out = crewlet("config", "revisions", "--limit", "500", "--json", url=node.url)
    assert out.returncode == 0, out.stderr
    return [r["revision_id"] for r in json.loads(out.stdout)["revisions"]]


def test_import_list_diff_activate_show_export(node: Node, tmp_path: Path) -> None:
    first, epoch1 = activated(crewlet("config", "import", str(EXAMPLE), url=node.url))
    out = crewlet("config", "revisions", url=node.url)
    assert out.returncode == 0 and first in out.stdout and "import company.yaml" in out.stdout
    marked = [line for line in out.stdout.splitlines() if first in line and "│" in line]  # a table row
    assert marked and f"* epoch {epoch1}" in marked[0]

    edited = company_copy(tmp_path / "edited", mission="Answer every lantern user within an hour")
    out = crewlet("config", "import", str(edited), "--dry-run", url=node.url)
    assert out.returncode == 0, out.stderr
    assert '~ mission: "Keep the lantern CLI fast' in out.stdout and "nothing was activated" in out.stdout
    assert revision_ids(node)[0] == first  # a dry run stores nothing

    second, epoch2 = activated(crewlet("config", "import", str(edited), "--summary", "faster", url=node.url))
    assert second != first and epoch2 > epoch1
    assert revision_ids(node)[:2] == [second, first]
    out = crewlet("config", "diff", second, first, url=node.url)
    assert out.returncode == 0, out.stderr
    assert (
        '~ mission: "Keep the lantern CLI fast, documented, and its users answered within a day" -> '
        '"Answer every lantern user within an hour"' in out.stdout.splitlines()
    )
    out = crewlet("config", "diff", second, "--json", url=node.url)  # against its parent
    assert out.returncode == 0 and json.loads(out.stdout)["from"] == first
    out = crewlet("config", "diff", second, second, url=node.url)
    assert out.returncode == 0 and "no differences" in out.stdout

    again, epoch3 = activated(crewlet("config", "activate", first, "--summary", "roll back", url=node.url))
    assert again == first and epoch3 > epoch2
    out = crewlet("config", "show", url=node.url)
    assert out.returncode == 0, out.stderr
    assert first in out.stdout and str(epoch3) in out.stdout and "Lanternfish Labs" in out.stdout
    assert "agent seats" in out.stdout and "4: lead, dev, docs, triage" in out.stdout
    # re-activating the active revision mints a new epoch (FL-104)
    _, epoch4 = activated(crewlet("config", "activate", first, url=node.url))
    assert epoch4 > epoch3

    exported = tmp_path / "exported.yaml"
    out = crewlet("config", "export", "-o", str(exported), url=node.url)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(exported.read_text())["mission"].startswith("Keep the lantern CLI fast")
    assert crewlet("config", "export", url=node.url).stdout == exported.read_text()
    out = crewlet("validate", "--company", str(exported))  # the script path travels absolute
    assert out.returncode == 0, out.stderr
    out = crewlet("config", "export", "--revision", second, url=node.url)
    assert out.returncode == 0 and "Answer every lantern user within an hour" in out.stdout


def test_refusals_by_a_running_node(node: Node, tmp_path: Path) -> None:
    before = revision_ids(node)
    bad = tmp_path / "company.yaml"
    bad.write_text(EXAMPLE.read_text().replace("lead: triage", "lead: nobody", 1))
    out = crewlet("config", "import", str(bad), url=node.url)
    assert out.returncode == 2 and f"{bad}: units[1].lead: " in out.stderr
    for args in (
        ["diff", "no-such-rev"],
        ["activate", "no-such-rev"],
        ["export", "--revision", "no-such-rev"],
    ):
        out = crewlet("config", *args, url=node.url)
        assert out.returncode == 2 and "no-such-rev" in out.stderr and "unknown_revision" in out.stderr, args
    out = crewlet("config", "import", str(EXAMPLE), "--if-match", "no-such-rev", url=node.url)
    assert out.returncode == 2 and "if_match_failed" in out.stderr
    out = crewlet("config", "show", url=node.url, token=None)
    assert out.returncode == 2 and "no API token" in out.stderr
    out = crewlet("config", "show", url=node.url, token="wrong-token-wrong-token-wrong")
    assert out.returncode == 2 and "refused the token (401" in out.stderr
    out = crewlet("config", "show", url=NOWHERE)
    assert out.returncode == 1 and f"cannot reach {NOWHERE}" in out.stderr
    assert revision_ids(node) == before


def test_offline_import_moves_the_pointer_at_the_next_start(tmp_path: Path) -> None:
    """FL-109: a stopped node's store takes the revision; the restarted node serves it."""
    port = free_port()
    args = ["run", "--data-dir", str(tmp_path / "data"), "--port", str(port)]
    first = Node(args, dir=tmp_path / "n", port=port)
    try:
        first.wait_ready()
    finally:
        assert first.stop() == 0
    edited = company_copy(tmp_path / "edited", mission="Stored while the node was down")
    store = tmp_path / "data" / "node-0"
    out = crewlet("config", "import", str(edited), "--offline", "--data-dir", str(store), url=NOWHERE)
    assert out.returncode == 0, out.stderr
    m = re.search(
        r"revision (\S+) stored in (\S+); the fleet's pointer moves to it at that node's next start",
        out.stdout,
    )
    assert m and m.group(2) == str(store), out.stdout
    again = Node(args, dir=tmp_path / "n", port=port)
    try:
        again.wait_ready()
        out = crewlet("config", "show", "--json", url=again.url)
        assert out.returncode == 0, out.stderr
        active = json.loads(out.stdout)
        assert active["revision_id"] == m.group(1)
        assert active["document"]["mission"] == "Stored while the node was down"
    finally:
        again.stop()


def test_public_names_are_pinned() -> None:
    from crewlet import config_cli

    assert sorted(config_cli.__all__) == ["absolute_scripts", "app", "change_line", "check_document"]


def test_compat_document_imports_into_a_running_node(node: Node) -> None:
    """CO-43: the test document carrying every upstream shape at depth imports with warnings only,
    and the node applies it (its provider has no key: its seats read as stopped, CO-5)."""
    shapes = REPO / "tests" / "config" / "data" / "compat-shapes.company.yaml"
    out = crewlet("config", "import", "--compat", str(shapes), url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning" in out.stderr and "learning" in out.stderr and "error" not in out.stderr.lower()
    shown = crewlet("config", "show", "--json", url=node.url)
    assert shown.returncode == 0 and json.loads(shown.stdout)["document"]["name"] == "Compat Shapes Co"
    health = node.get("/health", token=None).json()
    assert health["posture"] == "serve" and health["applied_epoch"] == json.loads(shown.stdout)["epoch"]
    crewlet("config", "import", str(EXAMPLE), "--summary", "back to the example", url=node.url)
