"""What every figure is given: the run's size, a scratch directory, and a timer."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["Ctx", "timed"]

T = TypeVar("T")
N = TypeVar("N", int, float)


@dataclass(frozen=True)
class Ctx:
    """One run's settings.

    Attributes:
        quick: Smallest sizes and few samples (``make test``); no timing is asserted.
        root: A scratch directory for this figure (servers' stores, node dirs, logs).
        verbose: Print progress lines to stderr.
        flags: Opt-in switches from the command line (``fig4``: measure figure 4).
    """

    quick: bool
    root: Path
    verbose: bool = True
    flags: frozenset[str] = frozenset()

    def n(self, quick: N, full: N) -> N:
        """``quick`` in a quick run, else ``full``."""
        return quick if self.quick else full

    def sub(self, name: str) -> Path:
        """A fresh subdirectory of :attr:`root`."""
        p = self.root / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def say(self, msg: str) -> None:
        """A progress line on stderr (the table goes to stdout)."""
        if self.verbose:
            import sys

            print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def timed(fn: Callable[[], Awaitable[T]]) -> tuple[float, T]:
    """Await ``fn()`` and return (seconds it took, its result)."""
    t0 = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t0, out
