"""The engine's own cost per turn with a zero-latency scripted model (run by hand, not a test).

    .venv/bin/python -m tests.main_job.bench_turn_cost [--messages 50] [--tool create_work_item]

Starts a real node (embedded broker, real estate) whose ``default`` provider is
``openai-compatible`` pointed at a scripted loopback server that answers at once: round 1 asks
for one tool call, round 2 for ``submit_work``. Then, one message at a time, it measures the
time from ``POST /seats/triage/messages`` to ``GET /messages/{id}`` reading ``answered``
(polling every 2 ms), and beside it the round trip of a bare FastAPI app under uvicorn on
loopback answering ``GET /`` in the same run, through the same kind of client. Prints medians
(and p90) in milliseconds, plus the turn's own duration and model time from ``GET /turns``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.llm_servers import Reply, openai_tools
from tests.support.procs import TOKEN, Node, free_port, node_file

from .llm import OpenAIRouted
from .support import company_with_provider
from .wire import OPENAI

_BARE_APP = """
import sys, uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.get("/")
async def root() -> dict:
    return {"ok": True}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def _tool_call(tool: str, n: int) -> tuple[str, Any]:
    if tool == "create_work_item":
        return tool, {"project": "SUP", "title": f"Bench item {n}"}
    if tool == "lookup_colleague":
        return tool, {"query": "lead"}
    raise SystemExit(f"unknown --tool {tool}")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _bare_fastapi(samples: int) -> list[float]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _BARE_APP, str(port)], stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            deadline = time.monotonic() + 20
            while True:
                try:
                    client.get("/")
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            out = []
            for _ in range(samples):
                t0 = time.perf_counter()
                r = client.get("/")
                out.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200
            return out
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--tool", default="create_work_item", choices=["create_work_item", "lookup_colleague"]
    )
    args = parser.parse_args()

    counter = {"n": 0}

    def respond(seat: str, body: Any) -> Reply:
        if OPENAI.results(body):  # round 2: the tool ran; finish the turn
            return openai_tools(("submit_work", {"outcome": "delivered", "summary": "done"}))
        counter["n"] += 1
        return openai_tools(_tool_call(args.tool, counter["n"]))

    with tempfile.TemporaryDirectory(prefix="crewlet-bench-") as tmp, OpenAIRouted(respond=respond) as llm:
        base = Path(tmp)
        company = company_with_provider(base / "company.yaml", OPENAI.entry(llm))
        port = free_port()
        path = node_file(base / "n", node_id="bench-1", port=port)
        node = Node(["node", "--node", str(path), "--company", str(company)], dir=base / "n", port=port)
        try:
            node.wait_ready()
            e2e: list[float] = []
            marks: dict[str, tuple[float, float, float]] = {}  # message id → wall: sent, accepted, answered
            with httpx.Client(
                base_url=node.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
            ) as client:
                for i in range(args.warmup + args.messages):
                    t0, sent = time.perf_counter(), time.time()
                    r = client.post("/seats/triage/messages", json={"text": f"bench message {i}"})
                    accepted = time.time()
                    assert r.status_code == 202, r.text
                    mid = r.json()["message_id"]
                    while True:
                        status = client.get(f"/messages/{mid}").json()
                        if status["status"] in ("answered", "failed"):
                            break
                        time.sleep(0.002)
                    elapsed = (time.perf_counter() - t0) * 1000
                    assert status["status"] == "answered", status
                    if i >= args.warmup:
                        e2e.append(elapsed)
                        marks[mid] = (sent, accepted, time.time())
                rows = client.get("/turns", params={"seat": "triage", "limit": args.messages}).json()["turns"]
                turn_ms, model_ms, post_ms, queue_ms, after_ms = [], [], [], [], []
                for row in rows:
                    sent, accepted, answered = marks[row["message_id"]]
                    post_ms.append((accepted - sent) * 1000)
                    queue_ms.append((row["started_at"] - accepted) * 1000)
                    after_ms.append((answered - row["ended_at"]) * 1000)
                    record = client.get(f"/turns/{row['turn_id']}").json()["record"]
                    turn_ms.append((row["ended_at"] - row["started_at"]) * 1000)
                    model_ms.append(sum(rd["duration_seconds"] for rd in record["rounds"]) * 1000)
            bare = _bare_fastapi(max(200, args.messages))
        finally:
            node.stop()
    result = {
        "messages": args.messages,
        "tool": args.tool,
        "post_to_answered_ms": {"median": statistics.median(e2e), "p90": _pct(e2e, 0.9)},
        "turn_duration_ms": {"median": statistics.median(turn_ms), "p90": _pct(turn_ms, 0.9)},
        "model_time_ms": {"median": statistics.median(model_ms)},
        "split_ms": {
            "post_202": statistics.median(post_ms),
            "accepted_to_turn_start": statistics.median(queue_ms),
            "turn_end_to_answered_seen": statistics.median(after_ms),
        },
        "bare_fastapi_get_ms": {"median": statistics.median(bare), "p90": _pct(bare, 0.9)},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
