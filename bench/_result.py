"""Figures, their floors and the ratio between them; the table and the JSON file of one run.

Every figure is measured beside its floor in the same run on the same machine (DESIGN.md "Tests and
benchmarks"): absolute times on a shared 2-core machine move ±50% between runs, ratios taken in one
run hold. A :class:`Row` holds one figure: its median and p99, the floor's median and p99, and
``ratio``, which always reads "how many floors this figure costs" (≥ 1 is slower than the floor):

- for a time or a size, ``median / floor median``;
- for a rate (``turns/s``, ``req/s``), ``floor median / median`` (the floor is then a ceiling).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "RATE_UNITS",
    "Floor",
    "Row",
    "Status",
    "failed",
    "not_measured",
    "p99",
    "render_table",
    "row_from",
    "write_json",
]

Status = Literal["ok", "not_measured", "failed"]
"""``ok``: measured; ``not_measured``: deliberately skipped (with a reason, not a failure);
``failed``: the figure could not be measured (the run exits non-zero)."""

RATE_UNITS = frozenset({"turns/s", "req/s"})
"""Units where bigger is better; their ratio is inverted so that it still reads "floors per figure"."""


def p99(xs: Sequence[float]) -> float:
    """The 99th percentile of ``xs`` (nearest rank; the maximum below 100 samples).

    Raises:
        ValueError: ``xs`` is empty.
    """
    if not xs:
        raise ValueError("no samples")
    ordered = sorted(xs)
    rank = max(1, math.ceil(0.99 * len(ordered)))
    return ordered[rank - 1]


def p01(xs: Sequence[float]) -> float:
    """The 1st percentile of ``xs`` (the tail of a rate: 99 % of windows did better)."""
    if not xs:
        raise ValueError("no samples")
    ordered = sorted(xs)
    rank = max(1, math.ceil(0.01 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Floor:
    """The floor a figure is compared with, measured in the same run.

    Attributes:
        name: What the floor is (``raw KV CAS on the same bucket``).
        median: Its median, in the figure's unit.
        p99: Its p99 (for a rate: the 1st percentile, the slow tail), in the figure's unit.
        samples: How many samples the floor has.
    """

    name: str
    median: float
    p99: float
    samples: int


@dataclass
class Row:
    """One figure of the run.

    Attributes:
        figure: Its id and name (``1a lease claim, R1``).
        unit: ``ms``, ``ms/seat``, ``s``, ``turns/s``, ``req/s`` or ``MB``.
        median: The figure's median; None when not measured.
        p99: Its p99 (for a rate: the 1st percentile of windows); None when not measured.
        floor: The floor measured beside it; None when not measured.
        ratio: See the module docstring; None when not measured.
        samples: How many samples the median is over.
        parameters: What was run (sizes, replicas, concurrency, how, what the floor is).
        status: See :data:`Status`.
        note: Why a figure was not measured or failed; otherwise what dominates it, when known.
    """

    figure: str
    unit: str
    median: float | None
    p99: float | None
    floor: Floor | None
    ratio: float | None
    samples: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    status: Status = "ok"
    note: str = ""


def row_from(
    figure: str,
    unit: str,
    values: Sequence[float],
    floor_name: str,
    floor_values: Sequence[float],
    *,
    parameters: dict[str, Any] | None = None,
    note: str = "",
) -> Row:
    """Build a measured row from raw samples of the figure and of its floor.

    Args:
        figure: The figure's id and name.
        unit: The unit of both sample lists.
        values: The figure's samples.
        floor_name: What the floor is.
        floor_values: The floor's samples, in the same unit.
        parameters: What was run.
        note: Free text for the report.

    Returns:
        The row; ``failed`` when either sample list is empty or the floor's median is not positive.
    """
    params = dict(parameters or {})
    if not values or not floor_values:
        return failed(figure, unit, f"no samples (figure {len(values)}, floor {len(floor_values)})", params)
    rate = unit in RATE_UNITS
    med = statistics.median(values)
    fmed = statistics.median(floor_values)
    tail = p01 if rate else p99
    fl = Floor(floor_name, fmed, tail(floor_values), len(floor_values))
    if fmed <= 0 or (rate and med <= 0):
        return Row(figure, unit, med, tail(values), fl, None, len(values), params, "failed", "zero median")
    ratio = fmed / med if rate else med / fmed
    return Row(figure, unit, med, tail(values), fl, ratio, len(values), params, "ok", note)


def not_measured(figure: str, unit: str, reason: str, parameters: dict[str, Any] | None = None) -> Row:
    """A row deliberately not measured (not a failure of the run)."""
    return Row(figure, unit, None, None, None, None, 0, dict(parameters or {}), "not_measured", reason)


def failed(figure: str, unit: str, reason: str, parameters: dict[str, Any] | None = None) -> Row:
    """A row that could not be measured: the run exits non-zero."""
    return Row(figure, unit, None, None, None, None, 0, dict(parameters or {}), "failed", reason)


def fmt_num(x: float | None) -> str:
    """A figure for the tables: ``—`` for none, ``n/a`` for NaN, three significant-ish digits."""
    if x is None:
        return "—"
    if math.isnan(x):
        return "n/a"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def render_table(rows: Sequence[Row]) -> str:
    """The run's rows as a Markdown table (figure, unit, median, p99, floor, its median and p99, ratio)."""
    head = "| figure | unit | median | p99 | floor | floor median | floor p99 | ratio |"
    lines = [head, "|---|---|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if r.status != "ok":
            lines.append(
                f"| {r.figure} | {r.unit} | — | — | {r.status.replace('_', ' ')}: {r.note} | — | — | — |"
            )
            continue
        f = r.floor
        assert f is not None
        ratio = f"×{fmt_num(r.ratio)}" if r.ratio is not None else "—"
        lines.append(
            f"| {r.figure} | {r.unit} | {fmt_num(r.median)} | {fmt_num(r.p99)} | {f.name} | "
            f"{fmt_num(f.median)} | {fmt_num(f.p99)} | {ratio} |"
        )
    return "\n".join(lines)


def write_json(path: Path, rows: Sequence[Row], *, name: str, quick: bool, elapsed: float) -> None:
    """Write the run as JSON: ``{"run": {...}, "figures": [row, ...]}`` (each row as :class:`Row`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "run": {
            "name": name,
            "quick": quick,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_seconds": round(elapsed, 1),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": len(os.sched_getaffinity(0)),
        },
        "figures": [asdict(r) for r in rows],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
