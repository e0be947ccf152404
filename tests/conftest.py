"""Shared fixtures: real nats-server and crewlet node processes, all stopped by PID."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import REPO, NatsServer, Node, free_port


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A real nats-server with JetStream (8 MB max_payload), stopped after the test."""
    server = NatsServer(tmp_path / "nats")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Start crewlet node processes; every one is stopped by PID when the test ends."""
    started: list[Node] = []

    def start(
        *args: str, name: str = "node", port: int | None = None, env: dict[str, str] | None = None
    ) -> Node:
        port = port or free_port()
        argv = list(args)
        if argv and argv[0] == "run" and "--port" not in argv:
            argv += ["--port", str(port)]
        node = Node(argv, dir=tmp_path / name, port=port, env=env)
        started.append(node)
        return node

    try:
        yield start
    finally:
        for node in started:
            node.stop()


@pytest.fixture
def example_company() -> Path:
    """The example company document shipped in ``examples/``."""
    return REPO / "examples" / "company.yaml"


def pytest_configure(config: Any) -> None:
    """Make ``tests.support`` importable however pytest is invoked."""
    import sys

    sys.path.insert(0, str(REPO))
