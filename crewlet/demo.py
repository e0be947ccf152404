"""``make run``: start one node with the example company on the embedded broker and show the main job.

The node runs as a child process (``crewlet run``) in the foreground. This script waits for
``/ready``, imports the shared knowledge pages (``../shared/data/knowledge`` when present), posts
GitHub's real ``issues.opened`` delivery signed with ``GITHUB_WEBHOOK_SECRET`` to
``/webhooks/github`` (the node links the GitHub issue to one work item and wakes triage, which
assigns it to the lead, whose turn takes it up), then GitHub's ``issue_comment.created`` about the
same issue (a comment on the same item, which wakes the lead again), and prints what happened:
the one work item, its assignee and comment thread, the turns with their tokens. Then it keeps the node serving
at the printed URL with the printed token until Ctrl-C (which drains the node, FL-129).

Environment: ``CREWLET_API_TOKEN`` and ``GITHUB_WEBHOOK_SECRET`` (generated and printed when unset),
``CREWLET_PORT`` (default 8080), ``CREWLET_DATA_DIR`` (default ``./.crewlet``).
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


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"the node exited with {proc.returncode}; last log lines:")
            print("\n".join(log_path.read_text(errors="replace").splitlines()[-20:]))
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
    woken = ", ".join(answer.get("woken") or []) or "nobody"
    print(
        f"\nposted GitHub's {name} delivery: {r.status_code} {answer.get('status')}; work item "
        f"{linked.get('work_item')} ({linked.get('outcome')}); routed to {routed}; woke {woken}"
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


def main() -> int:
    """Run the demo; return the node's exit code."""
    token = os.environ.get("CREWLET_API_TOKEN") or secrets.token_urlsafe(24)
    secret = os.environ.get("GITHUB_WEBHOOK_SECRET") or secrets.token_hex(16)
    port = int(os.environ.get("CREWLET_PORT", "8080"))
    data_dir = Path(os.environ.get("CREWLET_DATA_DIR", ".crewlet"))
    url = f"http://127.0.0.1:{port}"
    if _port_busy(port):
        print(f"port {port} is already in use (another node?): stop it, or set CREWLET_PORT to a free port")
        return 2
    env = {**os.environ, "CREWLET_API_TOKEN": token, "GITHUB_WEBHOOK_SECRET": secret}
    crewlet = str(Path(sys.executable).parent / "crewlet")
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "node.log"
    print(f"starting a node with the example company (log: {log_path})", flush=True)
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
    signal.signal(signal.SIGINT, lambda *_: proc.send_signal(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    if not _wait_ready(proc, url, log_path):
        if proc.poll() is None:
            proc.terminate()
        return proc.wait() or 1
    print(f"node ready at {url}")
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
    print()
    fleet_status.show(url, token)
    print(f"\nThe node keeps serving at {url}")
    print(f"  export CREWLET_API_TOKEN={token}")
    print(f"  export GITHUB_WEBHOOK_SECRET={secret}")
    print(f'  curl -H "Authorization: Bearer $CREWLET_API_TOKEN" {url}/turns')
    print(f"  CREWLET_URL={url} .venv/bin/crewlet send triage 'What is open?' --wait")
    print(f"  the operator UI: {url}/ui/ (it asks for the token once)")
    print("Press Ctrl-C to drain and stop it.", flush=True)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
