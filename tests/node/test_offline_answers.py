"""The example company on a real node answers questions by reading (issue 38).

One node (embedded broker, data, ingress, seats, workers) on the example company and its offline
script: ``crewlet send triage "What is open on SUP?" --wait`` lists SUP's open items and files
nothing (it used to file the question as SUP-2); a report is still filed; work assigned to ``dev``
ends ``delivered`` with the item ``in_progress`` (the example had no ``dev`` rule: the default's
answer left assigned work stalling).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.main_job.support import wait_for
from tests.node.test_operator_cli import crewlet
from tests.support.procs import TOKEN, Node

H = {"Authorization": f"Bearer {TOKEN}"}


def _sup(node: Node) -> list[dict[str, Any]]:
    r = node.get("/work?project=SUP")
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def test_the_example_answers_questions_files_reports_and_dev_works(
    start_node: Callable[..., Node], example_company: Path, tmp_path: Path
) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "data"), "--import-company", str(example_company))
    node.wait_ready(60)
    out = crewlet("send", "triage", "Crash when config file is empty", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[offline] Filed SUP-1 for the engineering lead." in out.stdout

    out = crewlet("send", "triage", "What is open on SUP?", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[offline] Open on SUP: SUP-1 [offline] Crash when config file is empty (" in out.stdout
    assert [i["key"] for i in _sup(node)] == ["SUP-1"]  # the question filed nothing

    r = httpx.post(
        f"{node.url}/work",
        headers=H,
        timeout=10,
        json={"project": "ENG", "title": "Empty config crash", "assignee": "dev"},
    )
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]

    def dev_done() -> list[dict[str, Any]] | None:
        turns = node.get("/turns?seat=dev").json()["turns"]
        ended = [t for t in turns if t.get("outcome") != "running"]
        return ended or None

    assert [t["outcome"] for t in wait_for("dev's turn", dev_done, timeout=60, node=node)] == ["delivered"]
    item = node.get(f"/work/{key}").json()
    assert item["status"] == "in_progress", item
    assert any(c["body"].startswith(f"[offline] Plan: reproduce {key}") for c in item["comments"]), item
