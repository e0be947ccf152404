"""Run inside ``unshare -n`` (AG-10 Check): a ``type: local`` node and its nats-server, no network.

``python -m tests.support.offline_node DIR`` starts a nats-server and one node whose company has
``providers.embeddings: {type: local}`` (the ``wordllama`` weights inside the wheel), publishes a
few pages, waits for the embedding duty to embed them and prints one JSON line: the node's
``crewlet_embedding_calls_total{provider="local"}``, the network interfaces it could see and a
hybrid search's answer. The caller runs it in a new network namespace whose only interface is
loopback, so any download attempt would fail.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import time
from pathlib import Path

import httpx
import nats
import yaml

from tests.support.pages import publish_pages
from tests.support.procs import REPO, TOKEN, NatsServer, Node, free_port, node_file


def _calls(node: Node) -> float:
    text = node.get("/metrics").text
    m = re.search(r'^crewlet_embedding_calls_total\{provider="local"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


async def _publish(url: str) -> None:
    nc = await nats.connect(url)
    try:
        pages = [
            ("ENG", "Release sign-off", "The release manager signs off every production deployment."),
            ("ENG", "Garden care", "Water the tomatoes twice a week and prune the roses."),
            ("ENG", "Invoices", "Customers are billed monthly; overdue invoices get a reminder."),
        ]
        await publish_pages(nc.jetstream(), pages, writer="offline")
    finally:
        await nc.close()


def main(root: Path) -> int:
    server = NatsServer(root / "nats")
    node = None
    try:
        company = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
        company["providers"]["embeddings"] = {"type": "local"}
        (root / "c").mkdir(parents=True, exist_ok=True)
        (root / "c" / "company.yaml").write_text(yaml.safe_dump(company))
        (root / "c" / "offline-script.yaml").write_text(
            (REPO / "examples" / "offline-script.yaml").read_text()
        )
        port = free_port()
        f = node_file(
            root / "n", node_id="n1", port=port, stream={"type": "nats", "url": server.url, "replicas": 1}
        )
        node = Node(["node", "--node", str(f), "--company", str(root / "c" / "company.yaml")],
                    dir=root / "n" / "run", port=port, env={"CREWLET_EMBEDDING_TICK_SECONDS": "1"})  # fmt: skip
        node.wait_ready(120)
        asyncio.run(_publish(server.url))
        deadline = time.monotonic() + 120
        while _calls(node) < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        answer = {}
        while time.monotonic() < deadline:
            r = httpx.get(node.url + "/knowledge/search", params={"q": "who approves a production deploy?"},
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)  # fmt: skip
            answer = r.json()
            if answer.get("semantic") == "ok":
                break
            time.sleep(0.5)
        print(
            json.dumps(
                {"calls": _calls(node), "interfaces": [n for _, n in socket.if_nameindex()], "answer": answer}
            )
        )
        return 0
    finally:
        if node is not None:
            node.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
