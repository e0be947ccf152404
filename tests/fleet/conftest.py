"""The fleet of a test module: a 3-member cluster and three node processes, shared by its tests.

Fault tests restore what they broke (restart the node, the member, the link) and wait for the
fleet to converge before they end, so the next test starts from three nodes holding three seats
each. Everything is stopped by PID when the module ends, whatever happened.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fleet.harness import Fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three converged nodes ``a``, ``b``, ``c`` (all roles) on a 3-member cluster."""
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        # The first node provisions the buckets and streams; the others then boot together. Booting
        # all three at once on a fresh cluster can fail a node (reported: the objects-slot claim
        # meets a bucket still electing its leader, "no responders", and the node exits 1).
        f.start(f.names[0]).wait_ready(90)
        for name in f.names[1:]:
            f.start(name)
        for node in f.nodes.values():
            node.wait_ready(90)
        f.wait_converged(60)
        yield f
    finally:
        f.stop()
