"""A scripted OpenAI-compatible model server for the turn benchmarks, run as its own process.

Run: ``python -m bench._llm --delay 0.2 --mode one`` prints ``PORT <n>`` on its first line and
serves ``POST /v1/chat/completions`` on 127.0.0.1 until it is signalled: minimal HTTP/1.1 with
keep-alive on one asyncio loop (issue 16: the stdlib ``ThreadingHTTPServer`` it was, one thread per
connection, answered 128 concurrent 200 ms calls in ~0.5–3.5 s on 2 cores, so the model, not the
node, bounded 5c). It answers by rule instead of from a queue, so concurrent turns of many seats get
the right reply:

- ``--mode two``: a conversation with no tool result yet gets one ``create_work_item`` call (no
  assignee, so no other seat is woken); once a tool result is in it, one ``submit_work`` call. Two
  rounds, one tool call per round.
- ``--mode one``: every executor request gets one ``submit_work`` call: one executor round per
  turn.

In both modes a reviewer's request (its only tool is ``submit_review``, CO-30) gets
``submit_review{decision: done}``: every turn adds one review round, so a ``one`` turn makes two
model calls and the bound of a node is ``max_concurrent / (2 × delay)`` turns per second.

``--delay`` seconds are awaited before each answer (the model's latency). It runs in its own
process so it does not share the benchmark driver's interpreter lock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import threading
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


async def _serve_conn(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, mode: str, project: str
) -> None:
    """Answer the requests of one keep-alive HTTP/1.1 connection until the client closes it."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else ""
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            raw = await reader.readexactly(length) if length else b""
            if not path.rstrip("/").endswith("/chat/completions"):
                data = json.dumps({"error": {"message": f"no route {path}"}}).encode()
                status = "404 Not Found"
            else:
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = {}
                if delay:
                    await asyncio.sleep(delay)
                data = json.dumps(reply_for(body, mode, project)).encode()
                status = "200 OK"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
        return  # the client hung up or sent what is not HTTP: this connection is done (finally closes it)
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> None:
    """Serve until killed; print ``PORT <n>`` first."""
    ap = argparse.ArgumentParser(prog="python -m bench._llm")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--mode", choices=("one", "two"), default="two")
    ap.add_argument("--project", default="BEN")
    opts = ap.parse_args(argv)

    async def serve() -> None:
        server = await asyncio.start_server(
            lambda r, w: _serve_conn(r, w, opts.delay, opts.mode, opts.project),
            "127.0.0.1",
            0,
            backlog=1024,  # 128+ calls in flight must not be refused at connect
        )
        port = server.sockets[0].getsockname()[1]
        print(f"PORT {port}", flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    sys.exit(0)


if __name__ == "__main__":
    main()
