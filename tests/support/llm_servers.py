"""Scripted LLM servers on loopback: the one edge of the system tests stand in for (DESIGN.md).

:class:`OpenAIServer` answers ``POST .../chat/completions`` and :class:`AnthropicServer`
answers ``POST .../v1/messages``, each from a script of :class:`Reply` objects consumed in
order, so the real httpx client code of ``shared.providers`` runs against a real socket. Every
request is kept (path, headers, decoded JSON) for the test to inspect. A stdlib
``ThreadingHTTPServer`` on 127.0.0.1, port 0; :meth:`ScriptedServer.stop` ends it (and cuts any
scripted delay short), so use the servers as context managers or stop them in a ``finally``.

Builders give the documented response shapes: :func:`openai_text`, :func:`openai_tools`,
:func:`anthropic_text`, :func:`anthropic_tools`.

Review requests (CO-30: the only tool offered is ``submit_review``) are answered apart from the
script: from :attr:`ScriptedServer.reviews` (queue :class:`Reply` objects there, e.g.
:func:`review_reply`) or, when that is empty, with ``submit_review{decision: done}``. They are kept
in :attr:`ScriptedServer.review_seen`, not in :attr:`ScriptedServer.seen`, so a test that counts
executor calls is not thrown by the reviewer; :attr:`ScriptedServer.all_seen` has both in order.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = [
    "AnthropicServer",
    "EmbeddingsServer",
    "OpenAIServer",
    "Reply",
    "ScriptedServer",
    "anthropic_text",
    "anthropic_tools",
    "finish_reply",
    "is_review",
    "openai_text",
    "openai_tools",
    "review_reply",
]


def is_review(body: Any) -> bool:
    """True for a review request (CO-30): ``submit_review`` is the only tool offered (either wire)."""
    if not isinstance(body, dict):
        return False
    names = [t.get("function", t).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
    return names == ["submit_review"]


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        body: A JSON-able object, or raw bytes sent as they are (garbage tests).
        status: The HTTP status.
        headers: Extra response headers (``Retry-After``...).
        delay: Seconds to wait before answering (timeout tests); cut short by ``stop``.
    """

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: Any


class ScriptedServer:
    """A loopback HTTP server answering POSTs to its paths from a script.

    Args:
        script: The replies, in order; when they run out every request gets a 500
            ``script exhausted`` (so a runaway loop fails loudly).
        paths: Path suffixes this server answers; anything else is a 404.
    """

    paths: tuple[str, ...] = ()

    def __init__(self, script: list[Reply] | None = None) -> None:
        self.script: list[Reply] = list(script or [])
        self.seen: list[Seen] = []
        self.reviews: list[Reply] = []
        self.review_seen: list[Seen] = []
        self.all_seen: list[Seen] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else each small reply stalls ~40 ms on delayed ACK

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                if not any(self.path.rstrip("/").endswith(p) for p in server.paths):
                    self._send(Reply({"error": {"message": f"no route {self.path}"}}, status=404))
                    return
                seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                reply: Reply | None
                with server._lock:
                    server.all_seen.append(seen)
                    if is_review(body):
                        server.review_seen.append(seen)
                        reply = server.reviews.pop(0) if server.reviews else server.review("done")
                    else:
                        server.seen.append(seen)
                        reply = server.script.pop(0) if server.script else None
                    if reply is None and isinstance(server, EmbeddingsServer) and isinstance(body, dict):
                        reply = server.fail_with or Reply(
                            server.answer([str(t) for t in body.get("input") or []])
                        )
                if reply is None:
                    reply = Reply({"error": {"message": "script exhausted"}}, status=500)
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
                    pass  # the client gave up (a timeout test)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), name=type(self).__name__, daemon=True
        )
        self._thread.start()

    def review(self, decision: str, notes: str = "reviewed") -> Reply:
        """A ``submit_review`` answer in this server's wire format."""
        return review_reply(type(self), decision, notes)

    @property
    def port(self) -> int:
        """The bound loopback port."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self.script.extend(replies)

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


class OpenAIServer(ScriptedServer):
    """Answers ``POST {base}/chat/completions`` (base ``<url>/v1``)."""

    paths = ("/chat/completions",)

    @property
    def base_url(self) -> str:
        """The ``base_url`` a provider entry names: ``<url>/v1``."""
        return f"{self.url}/v1"


class EmbeddingsServer(ScriptedServer):
    """Answers ``POST {base}/embeddings`` (base ``<url>/v1``) with model ``scripted-hash-256`` (AG §0).

    With an empty script every request is answered computed: a 256-wide feature-hashing vector of
    each input's lower-cased word stems, L2-normalised (``shared.providers.hash_vector``), filed by
    ``index``. A scripted :class:`Reply` (a 503, a delay, a shuffled or repeated index) answers
    the next request instead; :meth:`answer` with an ``order`` builds ES-67's shuffled or repeated
    indices.
    ``fail_with`` answers every request with that reply until cleared (an outage).
    """

    paths = ("/embeddings",)
    fail_with: Reply | None = None

    @property
    def base_url(self) -> str:
        """The ``base_url`` of ``providers.embeddings``: ``<url>/v1``."""
        return f"{self.url}/v1"

    def inputs(self) -> list[list[str]]:
        """The ``input`` list of every request answered so far, in order."""
        return [list(s.body.get("input") or []) for s in self.seen if isinstance(s.body, dict)]

    @staticmethod
    def answer(texts: list[str], order: list[int] | None = None) -> dict[str, Any]:
        """A ``/embeddings`` body for ``texts``, items in ``order`` (indices; default in order)."""
        from shared.providers import hash_vector

        idx = order if order is not None else list(range(len(texts)))
        return {
            "object": "list",
            "model": "scripted-hash-256",
            "data": [{"object": "embedding", "index": i, "embedding": hash_vector(texts[i])} for i in idx],
        }


class AnthropicServer(ScriptedServer):
    """Answers ``POST {base}/v1/messages``."""

    paths = ("/v1/messages",)

    @property
    def base_url(self) -> str:
        """The ``base_url`` a provider entry names (no ``/v1``)."""
        return self.url


_ids = itertools.count(1)


def _refusals(body: Any) -> list[str]:
    """The CO-31 refusal codes of ``submit_work`` results in a request's history (either wire)."""
    codes: list[str] = []
    for m in body.get("messages") or []:
        blocks = m.get("content") if isinstance(m.get("content"), list) else [m]
        for b in blocks:
            if not isinstance(b, dict) or (b.get("role") != "tool" and b.get("type") != "tool_result"):
                continue
            try:
                content = json.loads(b.get("content") or "")
            except (TypeError, ValueError):
                continue
            if isinstance(content, dict) and content.get("code") in ("reply_owed", "not_delivered"):
                codes.append(str(content["code"]))
    return codes


def finish_reply(body: Any, text: str, *, anthropic: bool = False) -> Reply:
    """A stand-in model's last answer: ``text`` together with the ``submit_work`` the engine will
    accept (CO-31), read from the request ``body``: ``delivered`` first; ``delivered`` again after a
    ``reply_owed`` refusal, ``blocked`` (with the refusal as evidence) after any other refusal;
    ``no_action`` in a later iteration sent back with a correction (the ledger is in its prompt).

    For fake models that used to end a turn with text alone (before CO-32's correctives)."""
    codes = _refusals(body)
    user = json.dumps(body.get("messages") or [])
    args: dict[str, Any] = {"outcome": "delivered", "summary": text}
    if "Correction: " in user and "## Prior work" in user:
        args["outcome"] = "no_action"
    if codes and codes[-1] == "reply_owed" and "not_delivered" not in codes:
        args["outcome"] = "delivered"
    elif codes:
        args = {**args, "outcome": "blocked", "evidence": f"the engine refused: {codes[-1]}"}
    call = ("submit_work", args)
    return anthropic_tools(call, text=text) if anthropic else openai_tools(call, text=text)


def review_reply(
    server: type[ScriptedServer] | str, decision: str, notes: str = "reviewed", **extra: str
) -> Reply:
    """A ``submit_review{decision, notes, **extra}`` answer (CO-30) for a wire: a server class, or
    ``"anthropic"`` / anything else for Chat Completions."""
    args = {"decision": decision, "notes": notes, **extra}
    anthropic = server == "anthropic" or (isinstance(server, type) and issubclass(server, AnthropicServer))
    return anthropic_tools(("submit_review", args)) if anthropic else openai_tools(("submit_review", args))


def openai_text(
    text: str,
    *,
    model: str = "scripted-model",
    finish: str = "stop",
    prompt_tokens: int = 100,
    completion_tokens: int = 10,
    cached: int = 0,
) -> Reply:
    """A Chat Completions answer with text only."""
    return Reply(
        {
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


def openai_tools(
    *calls: tuple[str, Any],
    text: str | None = None,
    model: str = "scripted-model",
    prompt_tokens: int = 100,
    completion_tokens: int = 10,
) -> Reply:
    """A Chat Completions answer asking for tools: each call ``(name, arguments)``; arguments
    that are a str go out verbatim (unparsable argument tests), others as JSON."""
    tool_calls = [
        {
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for name, args in calls
    ]
    return Reply(
        {
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "tool_calls": tool_calls},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }
    )


def anthropic_text(
    text: str,
    *,
    model: str = "scripted-claude",
    stop: str = "end_turn",
    input_tokens: int = 100,
    output_tokens: int = 10,
    cache_read: int = 0,
    cache_write: int = 0,
) -> Reply:
    """A Messages API answer with one text block."""
    return Reply(
        {
            "id": f"msg_{next(_ids)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": cache_write,
            },
        }
    )


def anthropic_tools(
    *calls: tuple[str, Any],
    text: str = "",
    model: str = "scripted-claude",
    input_tokens: int = 100,
    output_tokens: int = 10,
) -> Reply:
    """A Messages API answer with ``tool_use`` blocks, each call ``(name, input)``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": n, "input": a} for n, a in calls]
    return Reply(
        {
            "id": f"msg_{next(_ids)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
    )
