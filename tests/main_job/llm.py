"""Scripted LLM servers that answer per seat (a copy-and-extend of ``tests.support.llm_servers``).

A node runs several seats at once (the triage turn's tracker wake starts the lead's turn while
the triage turn still has a round to go), so one global script would answer them in a racy
order. :class:`RoutedServer` keeps one script per seat, found from the system prompt's
``(handle `<seat>`)`` line, and a script entry may be a callable that builds the reply from the
request (to echo what the turn was asked). Requests are kept per seat for the test to inspect.
Delays, raw-bytes bodies and error statuses come from :class:`tests.support.llm_servers.Reply`.

Review requests (CO-30: ``submit_review`` is the only tool offered) are answered apart from the
seat's script: from its review script (:meth:`RoutedServer.add_review`) or, when that is empty,
with ``submit_review{decision: done}``. Every request is kept with its ``phase`` (``execute`` or
``review``); :meth:`RoutedServer.requests` and :meth:`RoutedServer.wait_requests` count only
``execute`` requests unless asked for another phase (``phase="review"``, or ``None`` for all).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.support.llm_servers import Reply, anthropic_tools, is_review, openai_tools

__all__ = ["AnthropicRouted", "OpenAIRouted", "RoutedServer", "Script", "Seen"]

Script = Reply | Callable[[Any], Reply]
"""One scripted answer, or a function of the decoded request body that returns one."""

_HANDLE = re.compile(r"\(handle `([a-z0-9_-]+)`\)")


@dataclass
class Seen:
    """One request the server received."""

    seat: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    phase: str = "execute"


class RoutedServer:
    """A loopback HTTP server answering LLM calls from per-seat scripts.

    A seat whose script ran out is answered by ``respond`` when given, else with a 500 ``script
    exhausted`` (a runaway loop fails loudly). :meth:`stop` ends the server and cuts any scripted
    delay short.
    """

    paths: tuple[str, ...] = ()

    def __init__(
        self,
        scripts: Mapping[str, Sequence[Script]] | None = None,
        *,
        respond: Callable[[str, Any], Reply] | None = None,
    ) -> None:
        self.scripts: dict[str, list[Script]] = {k: list(v) for k, v in (scripts or {}).items()}
        self.reviews: dict[str, list[Script]] = {}
        self.respond = respond
        self.seen: list[Seen] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes; with Nagle on, the body waits for the
            # client's delayed ACK (~40 ms a reply), which would be the server's latency, not ours
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                self._send(Reply({"ok": True}))

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                if not any(self.path.rstrip("/").endswith(p) for p in server.paths):
                    self._send(Reply({"error": {"message": f"no route {self.path}"}}, status=404))
                    return
                seat = server.seat_of(body)
                review = is_review(body)
                with server._cond:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    phase = "review" if review else "execute"
                    server.seen.append(Seen(seat, self.path, headers, body, time.monotonic(), phase))
                    queue = (server.reviews if review else server.scripts).get(seat, [])
                    entry = queue.pop(0) if queue else None
                    server._cond.notify_all()
                if entry is None and review:
                    reply = server.review_reply("done", "reviewed")
                elif entry is None and server.respond is not None:
                    reply = server.respond(seat, body)
                elif entry is None:
                    reply = Reply({"error": {"message": f"script exhausted for seat {seat!r}"}}, status=500)
                else:
                    reply = entry(body) if callable(entry) else entry
                if reply.delay and server._stopping.wait(reply.delay):
                    return
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout, a killed node)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), name=type(self).__name__, daemon=True
        )
        self._thread.start()

    @staticmethod
    def system_of(body: Any) -> str:
        """The system prompt of a decoded request (wire-specific)."""
        raise NotImplementedError

    def seat_of(self, body: Any) -> str:
        """The seat a request is for: the handle the system prompt names, or ``?``."""
        try:
            match = _HANDLE.search(self.system_of(body))
        except (KeyError, IndexError, TypeError):
            match = None
        return match.group(1) if match else "?"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def add(self, seat: str, *entries: Script) -> None:
        """Append entries to ``seat``'s script."""
        with self._cond:
            self.scripts.setdefault(seat, []).extend(entries)

    def add_review(self, seat: str, *entries: Script) -> None:
        """Append entries to ``seat``'s review script (see :meth:`review_reply`)."""
        with self._cond:
            self.reviews.setdefault(seat, []).extend(entries)

    def review_reply(self, decision: str, notes: str = "reviewed", **extra: str) -> Reply:
        """A ``submit_review{decision, notes, **extra}`` answer in this server's wire format."""
        call = ("submit_review", {"decision": decision, "notes": notes, **extra})
        return anthropic_tools(call) if "/v1/messages" in self.paths else openai_tools(call)

    def requests(self, seat: str | None = None, *, phase: str | None = "execute") -> list[Seen]:
        """The requests received so far, of one seat or all, in arrival order; of one phase
        (``execute`` by default, ``review``), or of all with ``phase=None``."""
        with self._cond:
            return [
                s
                for s in self.seen
                if (seat is None or s.seat == seat) and (phase is None or s.phase == phase)
            ]

    def wait_requests(
        self, seat: str, count: int, timeout: float = 20.0, *, phase: str | None = "execute"
    ) -> list[Seen]:
        """Wait until ``seat`` has made at least ``count`` requests of ``phase`` (see
        :meth:`requests`); return them.

        Raises:
            AssertionError: They did not arrive in time (names what did).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [s for s in self.seen if s.seat == seat and (phase is None or s.phase == phase)]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    seats = [s.seat for s in self.seen]
                    raise AssertionError(f"{seat}: {len(got)}/{count} requests in {timeout} s; all: {seats}")
                self._cond.wait(left)

    def stop(self) -> None:
        """Stop serving and wait for the server thread; safe to call twice."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OpenAIRouted(RoutedServer):
    """Chat Completions: ``POST <base>/chat/completions``, base ``<url>/v1/``."""

    paths = ("/chat/completions",)

    @staticmethod
    def system_of(body: Any) -> str:
        """The first message's content (the system prompt goes first, CO-13)."""
        return str(body["messages"][0]["content"])

    @property
    def base_url(self) -> str:
        """The ``base_url`` of a provider entry."""
        return f"{self.url}/v1/"


class AnthropicRouted(RoutedServer):
    """Messages API: ``POST <base>/v1/messages``."""

    paths = ("/v1/messages",)

    @staticmethod
    def system_of(body: Any) -> str:
        """The system block's text (CO-14)."""
        return str(body["system"][0]["text"])

    @property
    def base_url(self) -> str:
        """The ``base_url`` of a provider entry (no ``/v1``)."""
        return self.url
