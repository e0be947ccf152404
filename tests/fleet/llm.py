"""A scripted OpenAI-compatible model for fleet tests: every seat, every turn, from one rule.

A turn is one or two rounds: the first round answers with text and ``submit_work`` (or, for a seat
told to, with one ``create_work_item`` call carrying the trigger's text as the title), the round
after a tool result answers with text and ``submit_work`` (:func:`finish_reply`: the outcome the
engine accepts, CO-31). Review requests (CO-30) are answered ``done`` and not recorded. Each
seat's first round can be delayed, so a turn takes a few seconds and a test can act while it runs.
Requests are kept (seat, round, arrival time) so a test can wait for a turn to be under way; a
later executor iteration (a claim the engine sent back) is not a first round. The
builders and :class:`~tests.support.llm_servers.Reply` come from :mod:`tests.support.llm_servers`;
only the choice of reply is per request here.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.llm_servers import Reply, finish_reply, is_review, openai_text, openai_tools

__all__ = ["FleetLLM", "Request"]

_HANDLE = re.compile(r"\(handle `([a-z0-9_-]+)`\)")


@dataclass(frozen=True)
class Request:
    """One model call the server received."""

    seat: str
    first_round: bool
    text: str
    at: float
    authorization: str = ""


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A node killed mid-request resets its connection: expected here, not worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FleetLLM:
    """A loopback Chat Completions server (``POST /v1/chat/completions``) answering by rule.

    Attributes:
        delays: Seat → seconds to wait before answering that seat's first round (default 0).
        tool_seats: Seats whose first round calls ``create_work_item`` (project ``SUP``).
        asks: Seat → colleague: that seat's next first round calls ``a2a_ask`` on the colleague
            (once; CO-36).
        rate_limited: API keys answered ``429`` (a rate-limited credential, CO-42).
    """

    def __init__(self) -> None:
        self.delays: dict[str, float] = {}
        self.tool_seats: set[str] = set()
        self.asks: dict[str, str] = {}
        self.rate_limited: set[str] = set()
        self.memory_filter: Any = None  # AG-8: (listing text) -> the filter's answer ("2", "none")
        self.filter_requests: list[str] = []  # the user text of every memory filter call
        self.reviews: dict[str, list[str]] = {}  # seat -> decisions its next reviews give, in order
        self.seen: list[Request] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                    reply, delay = server._answer(body, self.headers.get("Authorization", ""))
                except (ValueError, KeyError, IndexError, TypeError) as e:
                    reply, delay = Reply({"error": {"message": f"bad request: {e}"}}, status=400), 0.0
                if delay and server._stopping.wait(delay):
                    return
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the asking node was killed

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The provider entry's ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def entry(self) -> dict[str, Any]:
        """The ``providers.llm`` entry that points a company at this server."""
        return {
            "type": "openai-compatible",
            "model": "fleet-model",
            "base_url": self.base_url,
            "api_keys": ["fleet-test-key"],
        }

    def _answer(self, body: dict[str, Any], authorization: str = "") -> tuple[Reply, float]:
        messages = body["messages"]
        if str(messages[0]["content"]).startswith("## Memory filter"):  # AG-8's auxiliary filter
            listing = str(messages[-1]["content"])
            with self._cond:
                self.filter_requests.append(listing)
            answer = self.memory_filter(listing) if self.memory_filter is not None else "none"
            return openai_text(answer), 0.0
        match = _HANDLE.search(str(messages[0]["content"]))
        seat = match.group(1) if match else "?"
        if is_review(body):
            with self._cond:
                queued = self.reviews.get(seat) or []
                decision = queued.pop(0) if queued else "done"
            return openai_tools(
                ("submit_review", {"decision": decision, "notes": f"review: {decision}"})
            ), 0.0
        text = str(messages[-1].get("content") or "")
        # a turn's first round: not after a tool result, and not a later executor iteration (its
        # prompt carries the prior-work ledger, CO-30), so one turn is one first round
        first = messages[-1].get("role") != "tool" and "## Prior work" not in text
        with self._cond:
            self.seen.append(Request(seat, first, text, time.monotonic(), authorization))
            self._cond.notify_all()
        if authorization.removeprefix("Bearer ") in self.rate_limited:
            return Reply({"error": {"message": "rate limited", "type": "rate_limit"}}, status=429), 0.0
        if not first:
            return finish_reply(body, f"done for {seat}"), 0.0
        delay = self.delays.get(seat, 0.0)
        with self._cond:
            target = self.asks.pop(seat, None)
        if target is not None:
            return openai_tools(
                ("a2a_ask", {"handle": target, "brief": f"{seat} asks: {text[-120:]}"})
            ), delay
        if seat in self.tool_seats:
            task = text.split("\n## ")[0].strip()  # the task section: memory and knowledge follow it (AG-8)
            title = task.splitlines()[-1][:200] if task else "fleet work"
            return openai_tools(("create_work_item", {"project": "SUP", "title": title})), delay
        return finish_reply(body, f"answered by {seat}"), delay

    def requests(self, seat: str | None = None) -> list[Request]:
        """The requests so far (of one seat, or all), in arrival order."""
        with self._cond:
            return [r for r in self.seen if seat is None or r.seat == seat]

    def wait_first_round(self, seat: str, after: int, timeout: float = 30.0) -> Request:
        """Wait for ``seat``'s next first-round request beyond the first ``after`` of its requests.

        Raises:
            AssertionError: none came within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [r for r in self.seen if r.seat == seat][after:]
                firsts = [r for r in got if r.first_round]
                if firsts:
                    return firsts[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no turn of {seat} reached the model within {timeout} s")
                self._cond.wait(left)

    def stop(self) -> None:
        """Stop serving (cuts any delay short)."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
