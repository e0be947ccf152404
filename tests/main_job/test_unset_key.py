"""An LLM key that is not set, as a newcomer meets it (issue 38).

``crewlet validate`` said "valid", ``crewlet config import`` activated silently, and ``crewlet send
--wait`` printed only "still queued"; the reason (``llm_unavailable: no member of the chain has a
usable key``) was only on ``GET /messages/{id}``. Now validate and import warn once per unresolved
``${NAME}`` naming its path, and ``send --wait`` prints the message's error while it waits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.node.test_operator_cli import crewlet
from tests.support.procs import Node

from .support import company_with_provider

KEY = "CREWLET_TEST_UNSET_LLM_KEY"
ENTRY = {
    "type": "openai-compatible",
    "model": "m",
    "base_url": "http://127.0.0.1:9/v1/",
    "api_keys": [f"${{{KEY}}}"],
}
WHERE = "providers.llm.default.api_keys[0]"


def test_validate_warns_on_each_unresolved_reference(tmp_path: Path) -> None:
    company = company_with_provider(tmp_path / "company.yaml", ENTRY)
    out = crewlet("validate", "--company", str(company))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == f"valid: {company}"
    warned = {line.split(": warning: ")[0].removeprefix(f"{company}: ") for line in lines[:-1]}
    assert {WHERE, "providers.llm.claude.api_keys[0]", "integrations.webhooks[0].secret"} <= warned, lines
    line = next(line for line in lines if line.startswith(f"{company}: {WHERE}: warning: "))
    assert f"${{{KEY}}} is not set in this shell's environment" in line
    assert f"crewlet secrets set {KEY}" in line


def test_import_warns_and_send_wait_says_why_it_waits(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    company = company_with_provider(tmp_path / "company.yaml", ENTRY)
    node = start_node("run", "--data-dir", str(tmp_path / "data"), "--company", str(company))
    node.wait_ready(90)
    out = crewlet("config", "import", str(company), "--dry-run", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(
        rf"{re.escape(str(company))}: {re.escape(WHERE)}: warning: \$\{{{KEY}\}} is not set in node-0's "
        "secret store or environment",
        out.stderr,
    ), out.stderr
    out = crewlet("send", "triage", "Is anyone there?", "--wait", "--timeout", "20", url=node.url)
    assert out.returncode == 2, out.stdout + out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("still queued: llm_unavailable: ")]
    assert said, out.stderr
    assert "usable key" in said[0]
    assert len(said) == len(set(said))  # each attempt's error once, not once per poll
    assert "is still queued (turn " in out.stderr and " s (llm_unavailable: " in out.stderr, out.stderr
