"""Fixtures for the config tests: where the read-only shared inputs live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """Return the read-only ``shared`` folder beside the repository root (specs and real data)."""
    return REPO.parent / "shared"


@pytest.fixture
def upstream_dir() -> Path:
    """The upstream crewlet example documents, used as they are."""
    path = shared_dir() / "data" / "upstream-examples"
    if not path.is_dir():
        pytest.fail(f"shared data not found at {path}: the repository must sit beside ../shared")
    return path
