"""``make run``: start one node with the example company on the embedded broker and show the main job.

The node runs as a child process (``crewlet run``) in the foreground. This script waits for
``/ready``, imports the shared knowledge pages (``../shared/data/knowledge`` when present), posts
GitHub's real ``issues.opened`` delivery signed with ``GITHUB_WEBHOOK_SECRET`` to
``/webhooks/github`` (the node links the GitHub issue to one work item and wakes triage, which
assigns it to the lead, whose turn takes it up), then GitHub's ``issue_comment.created`` about the
same issue (a comment on the same item, which wakes the lead again), and prints what happened:
the one work item, its assignee and comment thread (the lead's second comment quotes a line its
diary kept from the first turn: the offline provider's memory, AG-8), the turns with their tokens,
and what the lead remembers (``crewlet memory show lead``). Then it keeps the node serving
at the printed URL with the printed token until Ctrl-C (which drains the node, FL-129).

Environment: ``CREWLET_API_TOKEN`` and ``GITHUB_WEBHOOK_SECRET`` (when unset, made once and kept in
the data directory, mode 0600, so a restart keeps the token a second shell exported), ``CREWLET_PORT``
(default 8080; not a port number or out of range: refused by name, exit 2), ``CREWLET_DATA_DIR``
(default ``./.crewlet``). Ctrl-C says that the node drains and when it stopped; a second Ctrl-C is
forwarded (the node exits at once, FL-130).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from . import fleet_status
from ._local_settings import SettingError, kept_secret, port_setting

__all__ = ["main"]

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


def _port_busy(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _log_since(log_path: Path, offset: int) -> list[str]:
    """The lines this run's node wrote to ``log_path`` (from byte ``offset``: an earlier run's lines
    in the same file are not this node's)."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def _wait_ready(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, offset: int = 0, timeout: float = 60.0
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"the node exited with {proc.returncode}; its last log lines:")
            print("\n".join(_log_since(log_path, offset)[-20:]))
            return False
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    print(f"the node did not become ready within {timeout:.0f} s; see {log_path}")
    return False


def _import_knowledge(client: httpx.Client) -> None:
    # the same reading as `crewlet knowledge import` (titles from each page's heading), so a later
    # import of the folder updates these pages instead of adding copies
    from .knowledge_cli import read_pages

    folder = SHARED_DATA / "knowledge" / "nimbus-docs"
    if not folder.is_dir():
        print(f"(no knowledge pages at {folder}; skipping the import)")
        return
    pages, errors = read_pages(folder, space="ENG")
    for error in errors:
        print(f"  {error}")
    count = 0
    for page in pages:
        r = client.post(
            "/knowledge/pages", json={"space": page.space, "title": page.title, "body": page.body}
        )
        if r.status_code in (200, 201):
            count += 1
        else:
            print(f"  import of {page.rel} answered {r.status_code}: {r.text[:200]}")
    print(f"imported {count} knowledge pages from {folder} into space ENG")


def _post_github(client: httpx.Client, secret: str, name: str) -> dict[str, Any] | None:
    """POST one saved GitHub delivery (``<event>.<action>.json``) to ``/webhooks/github``, signed."""
    path = SHARED_DATA / "github-webhooks" / f"{name}.json"
    if not path.is_file():
        print(f"(no GitHub delivery at {path}; nothing to post)")
        return None
    body = path.read_bytes()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    r = client.post(
        "/webhooks/github",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": name.split(".")[0],
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature,
        },
    )
    answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    linked = (answer.get("linked") or {}) if isinstance(answer, dict) else {}
    routed = ", ".join(f"{x['seat']} ({x['reason']})" for x in answer.get("routed") or []) or "nobody"
    woken = ", ".join(answer.get("woken") or [])  # seats the linked item's tracker wakes (assignee, watchers)
    print(
        f"\nposted GitHub's {name} delivery: {r.status_code} {answer.get('status')}; work item "
        f"{linked.get('work_item')} ({linked.get('outcome')}); routed to {routed}"
        + (f"; the work item woke {woken}" if woken else "")
    )
    return dict(answer) if r.status_code == 202 else None


def _wait_turns(client: httpx.Client, seats: list[str], since: float, timeout: float = 30.0) -> None:
    """Wait until each of ``seats`` (in order, repeats counted) finished a turn started after ``since``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        turns = client.get("/turns", params={"limit": 50}).json().get("turns", [])
        done = sorted(
            (t for t in turns if t.get("started_at", 0) >= since and t.get("outcome") != "running"),
            key=lambda t: t["started_at"],
        )
        want = list(seats)
        for t in done:
            if want and t["seat"] == want[0]:
                want.pop(0)
        if not want:
            return
        time.sleep(0.2)


def _show_item(client: httpx.Client, key: str, since: float) -> None:
    item = client.get(f"/work/{key}").json()
    print(f"\nwork item {item['key']}: {item['title']}")
    print(f"  {item.get('url') or ''}")
    print(f"  status {item['status']}, assignee {item['assignee']}, filed by {item['reporter']}")
    print(f"  labels {item.get('labels') or []}, linked to {item.get('external')}")
    for c in item.get("comments", []):
        print(f"  comment by {c['author']}: {c['body']}")
    turns = client.get("/turns", params={"limit": 50}).json().get("turns", [])
    print("\nturns:")
    for t in sorted((t for t in turns if t.get("started_at", 0) >= since), key=lambda t: t["started_at"]):
        print(
            f"  {t['seat']:<7} {t['outcome']:<10} {t['rounds']} rounds, {t['tool_calls']} tool calls, "
            f"{t['tokens']['input']} in / {t['tokens']['output']} out tokens, trace {t['trace_id']}"
        )


def _show_memory(client: httpx.Client, handle: str) -> None:
    """What ``handle`` remembers (AG-9): the offline provider wrote a diary entry per turn, and the
    second turn's comment quoted the first one's back (recalled into its prompt, AG-8)."""
    r = client.get(f"/agents/{handle}/memory")
    if r.status_code != 200:
        print(f"\nmemory of {handle}: {r.status_code} {r.text[:200]}")
        return
    view = r.json()
    diary = view["personal_memories"]["long"]
    print(f"\nmemory of {handle}: {len(diary)} diary entries, {len(view['episodes'])} episodes")
    for row in diary:
        print(f"  diary (retrieved {row.get('retrieval_count', 0)}x): {row.get('content', '')}")
    print(f"  read it all with: crewlet memory show {handle}")


def _drained(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the node to exit after a Ctrl-C, saying what happens; return its exit code."""
    started = time.monotonic()
    while proc.poll() is None:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            print(
                f"  still draining ({time.monotonic() - started:.0f} s): finishing turns in flight",
                flush=True,
            )
        except KeyboardInterrupt:  # pragma: no cover - a signal handler forwards it instead
            continue
    print(f"stopped (exit {proc.returncode}) after {time.monotonic() - started:.1f} s", flush=True)
    return proc.returncode


def _show_main_job(url: str, token: str, secret: str) -> None:
    """The main job through the API: knowledge, GitHub's issue and comment, the work item, the fleet."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        _import_knowledge(client)
        since = time.time()
        opened = _post_github(client, secret, "issues.opened")
        key = ((opened or {}).get("linked") or {}).get("work_item")
        if opened is not None and key:
            _wait_turns(client, ["triage", "lead"], since)  # triage assigns it; the lead takes it
            # a follow-up comment on the same GitHub issue: a comment on the same work item, which
            # wakes its assignee; no new item, no triage turn (CO-35, CO-41)
            if _post_github(client, secret, "issue_comment.created") is not None:
                _wait_turns(client, ["triage", "lead", "lead"], since)
            _show_item(client, str(key), since)
            _show_memory(client, "lead")
    print()
    fleet_status.show(url, token)
    print(f"\nThe node keeps serving at {url}")
    print(f"  export CREWLET_API_TOKEN={token}")
    print(f"  export GITHUB_WEBHOOK_SECRET={secret}")
    print(f'  curl -H "Authorization: Bearer $CREWLET_API_TOKEN" {url}/turns')
    print(f"  CREWLET_URL={url} .venv/bin/crewlet send triage 'What is open?' --wait")
    print(f"  CREWLET_URL={url} .venv/bin/crewlet memory show lead   (what the lead remembers, AG-9)")
    print(f"  the operator UI: {url}/ui/ (it asks for the token once)")


def main() -> int:
    """Run the demo; return the node's exit code."""
    data_dir = Path(os.environ.get("CREWLET_DATA_DIR") or ".crewlet")
    try:
        port = port_setting("CREWLET_PORT", 8080)
    except SettingError as e:
        print(f"make run: {e}", file=sys.stderr)
        return 2
    token, token_from = kept_secret(
        data_dir, "CREWLET_API_TOKEN", "api-token", lambda: secrets.token_urlsafe(24)
    )
    secret, _ = kept_secret(
        data_dir, "GITHUB_WEBHOOK_SECRET", "github-webhook.secret", lambda: secrets.token_hex(16)
    )
    url = f"http://127.0.0.1:{port}"
    if _port_busy(port):
        print(f"port {port} is already in use (another node?): stop it, or set CREWLET_PORT to a free port")
        return 2
    env = {**os.environ, "CREWLET_API_TOKEN": token, "GITHUB_WEBHOOK_SECRET": secret}
    crewlet = str(Path(sys.executable).parent / "crewlet")
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "node.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    print(f"starting a node with the example company (log: {log_path})", flush=True)
    if token_from != "env":
        print(
            f"(API token {'kept in' if token_from == 'kept' else 'made and kept in'} {data_dir / 'api-token'}; "
            "set CREWLET_API_TOKEN to use your own)"
        )
    with open(log_path, "ab") as log:
        # its own session: a terminal's Ctrl-C reaches this script only, which forwards it once
        # (the node reads a second SIGINT as "exit at once", FL-130)
        proc = subprocess.Popen(
            [crewlet, "run", "--port", str(port), "--data-dir", str(data_dir)],
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    stopping: list[int] = []

    def forward(sig: int, _frame: Any) -> None:
        if not stopping:
            print(
                "\ndraining: the node finishes its turns and hands its seats back (Ctrl-C again: stop now)",
                flush=True,
            )
        stopping.append(sig)
        proc.send_signal(sig)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    if not _wait_ready(proc, url, log_path, offset):
        if proc.poll() is None:
            proc.terminate()
        return proc.wait() or 1
    print(f"node ready at {url}")
    _show_main_job(url, token, secret)
    print("Press Ctrl-C to drain and stop it.", flush=True)
    while proc.poll() is None and not stopping:
        time.sleep(0.2)
    return _drained(proc)


if __name__ == "__main__":
    sys.exit(main())
