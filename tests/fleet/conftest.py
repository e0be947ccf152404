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
        f.boot()  # all three at once, as an orchestrator starts them
        f.wait_converged(60)
        yield f
    finally:
        f.stop()
