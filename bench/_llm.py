"""A scripted OpenAI-compatible model server for the turn benchmarks, run as its own process.

Run: ``python -m bench._llm --delay 0.2 --mode one`` prints ``PORT <n>`` on its first line and
serves ``POST /v1/chat/completions`` on 127.0.0.1 until it is signalled. It is a copy of the shape
of ``tests/support/llm_servers.py`` (a stdlib ``ThreadingHTTPServer``, HTTP/1.1 keep-alive) that
answers by rule instead of from a queue, so concurrent turns of many seats get the right reply:

- ``--mode two``: a conversation with no tool result yet gets one ``create_work_item`` call (no
  assignee, so no other seat is woken); once a tool result is in it, one ``submit_work`` call. Two
  rounds, one tool call per round.
- ``--mode one``: every executor request gets one ``submit_work`` call: one executor round per
  turn.

In both modes a reviewer's request (its only tool is ``submit_review``, CO-30) gets
``submit_review{decision: done}``: every turn adds one review round, so a ``one`` turn makes two
model calls and the bound of a node is ``max_concurrent / (2 × delay)`` turns per second.

``--delay`` seconds are slept before each answer (the model's latency). It runs in its own process
so its threads do not share the benchmark driver's interpreter lock.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["reply_for"]

_ids = itertools.count(1)
_lock = threading.Lock()


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    with _lock:
        n = next(_ids)
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def reply_for(body: Any, mode: str, project: str) -> dict[str, Any]:
    """The scripted answer to one Chat Completions request body.

    Args:
        body: The decoded request.
        mode: ``one`` or ``two`` (see the module docstring); a review request is answered
            ``done`` in both.
        project: The tracker project ``create_work_item`` files into.
    """
    messages = body.get("messages", []) if isinstance(body, dict) else []
    tools = body.get("tools", []) if isinstance(body, dict) else []
    names = [t.get("function", {}).get("name") for t in tools if isinstance(t, dict)]
    if names == ["submit_review"]:  # the reviewer (CO-30): accept the executor's work
        return _call("submit_review", {"decision": "done", "notes": "Reviewed by the bench"})
    has_result = any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)
    if mode == "two" and not has_result:
        return _call(
            "create_work_item", {"project": project, "title": "Bench item", "body": "From the bench"}
        )
    return _call("submit_work", {"outcome": "delivered", "summary": "Done by the bench"})


def main(argv: list[str] | None = None) -> None:
    """Serve until killed; print ``PORT <n>`` first."""
    ap = argparse.ArgumentParser(prog="python -m bench._llm")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--mode", choices=("one", "two"), default="two")
    ap.add_argument("--project", default="BEN")
    opts = ap.parse_args(argv)
    count = itertools.count(1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes; with Nagle on, the body waits for the client's
        # delayed ACK (~40 ms per answer on loopback).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = {}
            if not self.path.rstrip("/").endswith("/chat/completions"):
                data = json.dumps({"error": {"message": f"no route {self.path}"}}).encode()
                status = 404
            else:
                if opts.delay:
                    time.sleep(opts.delay)
                data = json.dumps(reply_for(body, opts.mode, opts.project)).encode()
                status = 200
                next(count)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256  # 32+ turns in flight must not be refused at connect

    httpd = Server(("127.0.0.1", 0), Handler)
    print(f"PORT {httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever(0.05)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
