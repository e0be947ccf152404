"""Issue 27 on the ``make run`` node: the offline provider's memory flows through the real path.

The lead's first turn (an item assigned to it) writes a diary entry and an episode by rule; the
operator's comment wakes it again, its recall puts that entry into the prompt's ``personal_memory``
and the offline provider quotes it back in the reply comment (``{memory.recalled}``). The entry is
stamped retrieved once, ``GET /agents/lead/memory`` and ``crewlet memory show lead`` show both
turns' entries and episodes, one ``prefetch_summary`` event per turn says recall used recency and
word match, and a human handle is 404 ``no_such_agent``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support.procs import TOKEN, Node

from .support import turns_of, wait_for


def _post(node: Node, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{node.url}{path}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


def test_the_second_turn_quotes_what_the_first_remembered(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "data"))
    node.wait_ready()
    r = _post(
        node, "/work", {"project": "SUP", "title": "Printer on floor 3 jams on duplex", "assignee": "lead"}
    )
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]

    def lead_done(n: int) -> list[dict[str, Any]] | None:
        done = [t for t in turns_of(node, seat="lead") if t["outcome"] not in ("running", "fenced")]
        return done if len(done) >= n else None

    wait_for("the lead's first turn", lambda: lead_done(1), timeout=30, node=node)
    r = _post(node, f"/work/{key}/comments", {"body": "Any news on the duplex jam for the printer?"})
    assert r.status_code == 201, r.text
    wait_for("the lead's comment turn", lambda: lead_done(2), timeout=30, node=node)

    first = f"{key} (assigned by operator:operator): Printer on floor 3 jams on duplex. I answered: [offline] Accepted {key}."
    item = node.get(f"/work/{key}").json()
    replies = [c["body"] for c in item["comments"] if c["author"] == "seat:lead"]
    assert replies[-1].endswith(f"From my diary: {first}"), replies

    def memory() -> dict[str, Any] | None:
        view = node.get("/agents/lead/memory").json()
        return view if len(view["episodes"]) == 2 else None

    view = wait_for("two episodes", memory, timeout=15, node=node)
    long = {row["content"]: row for row in view["personal_memories"]["long"]}
    assert first in long and len(long) == 2, long
    assert long[first]["retrieval_count"] == 1 and long[first]["last_retrieved_at"]
    assert view["personal_memories"]["short"] == [] and view["errors"] == []
    assert {e["work_item"] for e in view["episodes"]} == {key}

    summaries = [e for e in node.events() if e.get("event") == "prefetch_summary" and e.get("seat") == "lead"]
    assert len(summaries) == 2
    assert all(s["recall"] == "recency+word_match" and s["embeddings"] is False for s in summaries)
    assert summaries[1]["blocks"]["personal_memory"]["selection_count"] == 1
    assert summaries[0]["blocks"]["personal_memory"]["hit"] is False

    human = httpx.get(f"{node.url}/agents/founder/memory", headers={"Authorization": f"Bearer {TOKEN}"})
    assert human.status_code == 404 and human.json()["error"] == "no_such_agent", human.text

    shown = subprocess.run(
        [sys.executable, "-m", "crewlet", "memory", "show", "lead", "--url", node.url, "--token", TOKEN],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert first in shown.stdout and "episodes: 2" in shown.stdout
