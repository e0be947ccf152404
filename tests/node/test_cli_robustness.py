"""The operator commands against bad local input, hostile data and a URL that is not crewlet's.

1. An argument that is not valid text (a lone surrogate, a byte that is not UTF-8 as the shell
   passes it) or a token that is not printable ASCII without whitespace is refused naming the
   field, exit 2, before any request is sent.
2. Control characters in the data (a work item's title from a GitHub issue, a seat's text) reach
   the terminal neutralised (``\\x1b``), never raw; ``--json`` stays JSON.
3. A server that is not a crewlet node (an HTML 404 page, ``{"ok": true}`` for everything) gets one
   line naming the URL and what is wrong, exit 1 — never a dump, an empty table or a traceback.
4. ``send --timeout`` without ``--wait`` or as ``nan`` is refused.

Group 1 and 3 run against a tiny HTTP server on loopback (started and stopped per test); group 2
against one real node (``crewlet run``, offline provider, example company).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from crewlet.cli import app
from tests.support.procs import REPO, TOKEN, VENV_BIN, Node, free_port

ESC_TITLE = "evil \x1b]0;pwned\x07title \x1b[31mred\x1b[0m \x9b2J end"
"""A title as a webhook might carry it: an OSC window-title set, an SGR colour, a C1 CSI."""


@dataclass
class Fake:
    """A loopback HTTP server that is not crewlet: ``answer(method, path)`` gives ``(status,
    content type, body)``; every request's path is recorded."""

    url: str
    seen: list[str] = field(default_factory=list)


def _serve(answer: Any) -> Iterator[Fake]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            seen.append(self.path)
            status, kind, body = answer(self.command, self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _reply

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``seen``, not the server's access log."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Fake(f"http://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


HTML_404 = (
    "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body>" + "x" * 3000 + "</body></html>"
)


@pytest.fixture
def html404() -> Iterator[Fake]:
    yield from _serve(lambda method, path: (404, "text/html; charset=utf-8", HTML_404))


@pytest.fixture
def ok_json() -> Iterator[Fake]:
    yield from _serve(lambda method, path: (200, "application/json", '{"ok": true}'))


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def crewlet(*args: str, url: str, token: str = TOKEN) -> Ran:
    """``crewlet ARGS`` in-process with ``CREWLET_URL``/``CREWLET_API_TOKEN`` set; a traceback fails."""
    env = {"CREWLET_API_TOKEN": token, "CREWLET_URL": url, "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


# -- 1. bad local input: refused naming the field, nothing sent ----------------------------------------

SURROGATE = "a\udced\udca0\udc80b"  # printf 'a\xed\xa0\x80b' as Python passes argv


@pytest.mark.parametrize(
    ("args", "field_name"),
    [
        (("send", "triage", SURROGATE), "text:"),
        (("send", SURROGATE, "hello"), "handle:"),
        (("send", "triage", "hi", "--work-item", SURROGATE), "--work-item:"),
        (("work", "show", SURROGATE), "key:"),
        (("work", "list", "--assignee", SURROGATE), "--assignee:"),
        (("turn", SURROGATE), "turn ID:"),
        (("turns", "--seat", SURROGATE), "--seat:"),
        (("budgets", "reset", "--scope", SURROGATE), "--scope:"),
        (("fleet", "broker", "remove", SURROGATE, "--confirm", "x"), "NODE:"),
        (("send", "triage", "a \ud800 lone surrogate"), "text:"),
    ],
)
def test_an_argument_that_is_not_text_is_refused_naming_it(
    ok_json: Fake, args: tuple[str, ...], field_name: str
) -> None:
    out = crewlet(*args, url=ok_json.url)
    assert out.returncode == 2, out.text
    lines = out.text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(field_name) and "not valid text" in lines[0], out.text
    assert ok_json.seen == []


@pytest.mark.parametrize(
    ("token", "what"),
    [
        ("tök-tök-tök-tök-tök-tök", "non-ASCII"),
        (TOKEN + "\n", "whitespace"),
        ("has a space" + TOKEN, "whitespace"),
        (TOKEN + "\x7f", "control"),
    ],
)
@pytest.mark.parametrize(
    "args",
    [
        ("turns",),
        ("send", "triage", "hello"),
        ("work", "list"),
        ("objects", "status"),
        ("fleet", "status"),
        ("budgets", "show"),
        ("schedules",),
        ("fleet", "broker", "list"),
    ],
)
def test_a_token_that_is_not_printable_ascii_is_refused_naming_it(
    ok_json: Fake, token: str, what: str, args: tuple[str, ...]
) -> None:
    out = crewlet(*args, url=ok_json.url, token=token)
    assert out.returncode == 2, out.text
    assert "CREWLET_API_TOKEN or --token" in out.text and what in out.text, out.text
    assert "cannot reach" not in out.text and TOKEN not in out.text  # never blames the node, never echoes
    assert ok_json.seen == []


def test_knowledge_import_refuses_a_bad_token_and_space_before_sending(ok_json: Fake, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nbody\n")
    out = crewlet("knowledge", "import", str(tmp_path), "--space", "ENG", url=ok_json.url, token="tök")
    assert out.returncode == 2 and "CREWLET_API_TOKEN or --token" in out.stderr, out.text
    out = crewlet("knowledge", "import", str(tmp_path), "--space", SURROGATE, url=ok_json.url)
    assert out.returncode == 2 and out.stderr.startswith("--space: not valid text"), out.text
    assert ok_json.seen == []


def test_undecodable_argv_bytes_as_a_real_process(ok_json: Fake) -> None:
    """The shell's bytes, as the console script gets them: one line, exit 2, no traceback."""
    env = {"PATH": "/usr/bin:/bin", "CREWLET_URL": ok_json.url, "CREWLET_API_TOKEN": TOKEN}
    for argv, name in (
        ([b"send", b"triage", b"a\xed\xa0\x80b"], b"text:"),
        ([b"work", b"show", b"\xffKEY"], b"key:"),
    ):
        done = subprocess.run(
            [bytes(VENV_BIN / "crewlet"), *argv], capture_output=True, timeout=60, cwd=REPO, env=env
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith(name), done.stderr
        assert b"0xed" in done.stderr or b"0xff" in done.stderr, done.stderr
        assert b"Traceback" not in done.stderr
    env["CREWLET_API_TOKEN"] = TOKEN + "\n"
    done = subprocess.run(
        [str(VENV_BIN / "crewlet"), "turns"], capture_output=True, text=True, timeout=60, cwd=REPO, env=env
    )
    assert done.returncode == 2 and "CREWLET_API_TOKEN or --token" in done.stderr, done.stderr
    assert "LocalProtocolError" not in done.stderr and "cannot reach" not in done.stderr
    assert ok_json.seen == []


def test_send_timeout_needs_wait_and_a_number(ok_json: Fake) -> None:
    out = crewlet("send", "triage", "hello", "--timeout", "5", url=ok_json.url)
    assert out.returncode == 2 and out.stderr.startswith("--timeout:") and "--wait" in out.stderr, out.text
    for bad in ("nan", "inf", "-1"):  # nan and -1 the option's range refuses, inf the command
        out = crewlet("send", "triage", "hello", "--wait", "--timeout", bad, url=ok_json.url)
        assert out.returncode == 2, out.text
        assert "'--timeout'" in out.stderr or out.stderr.startswith("--timeout:"), out.text
    assert ok_json.seen == []


# -- 3. a URL that is not a crewlet node --------------------------------------------------------------

COMMANDS: list[tuple[str, ...]] = [
    ("turns",),
    ("turn", "abc"),
    ("work", "list"),
    ("work", "show", "SUP-1"),
    ("objects", "status"),
    ("fleet", "status"),
    ("budgets", "show"),
    ("schedules",),
    ("fleet", "broker", "list"),
    ("send", "triage", "hello"),
    ("send", "triage", "hello", "--wait", "--timeout", "5"),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_an_html_page_is_one_line_not_a_dump(html404: Fake, args: tuple[str, ...]) -> None:
    out = crewlet(*args, url=html404.url)
    assert out.returncode == 1, out.text
    lines = out.text.strip().splitlines()
    assert len(lines) == 1, out.text
    assert lines[0].startswith(html404.url + "/") and len(lines[0]) <= 200, lines
    assert " answered 404 text/html" in lines[0] and "not a crewlet node's JSON" in lines[0], lines
    assert "<html" not in out.text


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("turns",), "turns"),
        (("turn", "abc"), "turn_id"),
        (("work", "list"), "items"),
        (("work", "show", "SUP-1"), "key"),
        (("objects", "status"), "store"),
        (("fleet", "status"), "nodes"),
        (("budgets", "show"), "scopes"),
        (("schedules",), "schedules"),
        (("fleet", "broker", "list"), "node"),
        (("send", "triage", "hello"), "message_id"),
        (("send", "triage", "hello", "--wait"), "message_id"),
        (("budgets", "reset"), "scope"),
    ],
)
def test_json_that_is_not_a_crewlet_answer_names_the_missing_key(
    ok_json: Fake, args: tuple[str, ...], key: str
) -> None:
    out = crewlet(*args, url=ok_json.url)
    assert out.returncode == 1, out.text
    assert f"the answer from {ok_json.url}/" in out.text, out.text
    assert f"is not a crewlet node's: missing '{key}'" in out.text, out.text
    assert "turn None" not in out.text and "no turns recorded" not in out.text
    assert len(ok_json.seen) == 1  # send --wait does not poll an empty id


def test_knowledge_import_against_a_json_server_names_spaces(ok_json: Fake, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nbody\n")
    out = crewlet("knowledge", "import", str(tmp_path), "--space", "ENG", url=ok_json.url)
    assert out.returncode == 1, out.text
    assert "is not a crewlet node's: missing 'spaces'" in out.stderr, out.text


def test_a_printer_never_tracebacks_on_a_wrong_shape() -> None:
    """Keys present but of a shape the printer cannot read: one line, exit 1."""
    shaped = {"/turns": {"turns": [1, 2]}, "/fleet": {"nodes": [{"no id": 1}], "seats": []}}

    def answer(method: str, path: str) -> tuple[int, str, str]:
        return 200, "application/json", json.dumps(shaped.get(path.split("?")[0], {}))

    for fake in _serve(answer):
        for args in (("turns",), ("fleet", "status")):
            out = crewlet(*args, url=fake.url)
            assert out.returncode == 1 and "is not a crewlet node's" in out.text, out.text


def test_seat_text_with_escapes_is_neutralised_in_turn_and_send(tmp_path: Path) -> None:
    """A turn's texts and a seat's reply carry ESC/OSC/C1: ``turn`` and ``send --wait`` print them
    escaped; ``--json`` keeps them (JSON escapes them itself)."""
    evil = "reply \x1b]52;c;cHduZWQ=\x07 \x1b[2J\x9b\x00 done \ud800"
    turn = {
        "turn_id": "t-1",
        "seat": "triage",
        "outcome": "delivered",
        "error": "boom \x1b[1m",
        "record": {"rounds": [{"round": 1, "text": evil}], "reply": evil},
    }
    message = {"message_id": "m-1", "status": "answered", "reply": evil, "turn_id": "t-1"}

    def answer(method: str, path: str) -> tuple[int, str, str]:
        if path.startswith("/turns/"):
            return 200, "application/json", json.dumps(turn)
        if path.startswith("/turns"):
            return 200, "application/json", json.dumps({"turns": [{**turn, "seat": evil}], "count": 1})
        if method == "POST":
            return 202, "application/json", json.dumps({"message_id": "m-1"})
        return 200, "application/json", json.dumps(message)

    for fake in _serve(answer):
        for args in (("turn", "t-1"), ("turns",), ("send", "triage", "hi", "--wait")):
            out = crewlet(*args, url=fake.url)
            assert out.returncode == 0, out.text
            assert not any(c in out.text for c in "\x1b\x07\x9b\x00\ud800"), repr(out.text)
            assert "\\x1b" in out.text, out.text
        raw = json.loads(crewlet("turn", "t-1", "--json", url=fake.url).stdout)
        assert raw["record"]["reply"] == evil


# -- 2. hostile data through a real node ---------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("clirobust")
    port = free_port()
    n = Node(["run", "--data-dir", str(d / "data"), "--port", str(port)], dir=d, port=port)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


def test_escapes_in_a_work_item_never_reach_the_terminal(node: Node) -> None:
    r = httpx.post(
        node.url + "/work",
        json={
            "project": "SUP",
            "title": ESC_TITLE,
            "body": "first \x1b[2J line\nsecond \x1b]8;;http://evil\x07link\x1b]8;;\x07",
            "assignee": "founder",  # a human: no seat is woken to work on it
        },
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]
    listed = crewlet("work", "list", "--assignee", "founder", url=node.url)
    shown = crewlet("work", "show", key, url=node.url)
    for out in (listed, shown):
        assert out.returncode == 0, out.text
        assert "\x1b" not in out.text and "\x07" not in out.text and "\x9b" not in out.text, repr(out.text)
        assert "\\x1b" in out.text and "pwned" in out.text, out.text
    assert key in listed.stdout and "first \\x1b[2J line\nsecond" in shown.stdout, shown.stdout
    out = crewlet("turns", "--seat", "bogus", url=node.url)  # GET /turns cannot tell unknown from idle
    assert out.returncode == 0 and "no turns recorded for seat 'bogus'" in out.stdout, out.text
    as_json = crewlet("work", "show", key, "--json", url=node.url)
    assert "\x1b" not in as_json.stdout and json.loads(as_json.stdout)["title"] == ESC_TITLE
