"""Fixtures of the checks that need Debian packages (``make e2e``): Debian's ``chromium`` and
``prometheus`` (with ``promtool``). ``make e2e`` installs them when it can; run directly without
them, every test here fails naming the missing package (never a skip)."""

from __future__ import annotations

import shutil

import pytest

DEBIAN = {"chromium": "chromium", "prometheus": "prometheus", "promtool": "prometheus"}
"""Binary → the Debian package that carries it."""


def debian_binary(name: str) -> str:
    """The path of Debian binary ``name``; fails the test naming its package when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is missing: install the Debian package {DEBIAN[name]!r} (make e2e does it as root)"
        )
    return path
