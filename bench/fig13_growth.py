"""Figure 13: how each cost grows with its work, beside its floor's growth measured in the same run.

Four curves, each point a row of the table beside the floor at the same size (issue 16). The
setup of every curve is the setup of the figure it extends, imported from it:

- **turns** (:func:`bench.fig5_turns.rate_row`): turns per second at ``node.max_concurrent`` 32,
  128 and 512 (``conc + conc / 4`` seats, so a seat's own gap between turns does not idle a slot),
  the scripted model answering after 200 ms; unit ``turns/s``. Floor: the bound
  ``conc / (2 × model round trip)`` measured in the same point. The node's CPU per turn
  (``node_cpu_ms_per_turn``, ms) is a second curve without a floor: the cost each turn pays. A
  third is the node's CPU over 5 s (one fair-share sweep period; 1 s in a quick run) with every
  seat held and no turn running (``node_idle_cpu_share``, printed as % of one core, sized by the
  seats held): each held seat fetches its mailboxes whether or not it works.
  Above 500 seats ``CREWLET_AGENT`` is pre-created with ``max_consumers`` raised (figure 2).
- **writes** (:func:`bench.fig6_estate.open_copy`, ``seed``, ``raw_stream``): estate write latency
  (``router.create_work_item`` until this copy applied it, one data node, R1, in-process) with
  1, 10 and 100 writers, each writing back to back (a closed loop); unit ``ms`` per write.
  Floor: the same number of raw R1 ``js.publish`` callers, back to back, on the same server,
  the two phases alternating round by round. One copy serves all three sizes (the tracker grows
  by the writes of the smaller sizes, a few thousand items).
- **search** (:func:`bench.fig7_search._measure`, figure 7's generated pages and loading): knowledge
  search at 1 000, 10 000 and 100 000 pages; unit ``ms`` per query. Floor: the raw FTS5 ``bm25``
  query on the same database, interleaved query by query.
- **mailboxes** (:func:`bench.fig2_mailboxes.concurrent_boots`): mailbox creation at boot for 100,
  1 000 and 5 000 seats (two consumers each), R1, 64 creates in flight; unit ``s``, the boot's
  wall time. Floor: the same ``2 × seats`` raw ``js.add_consumer`` with 64 in flight, on a twin
  stream. Above 500 seats both streams have ``max_consumers`` raised (figure 2).

The growth between successive points ``(n1, c1)`` and ``(n2, c2)`` (size n, median cost c) is
printed for crewlet and for its floor, as:

- ``k = ln(c2 / c1) / ln(n2 / n1)``, the log-log exponent (cost ∝ size^k): 0 flat, 1 linear, 2
  quadratic. For turns/s it is the rate's exponent: the bound's is 1 (twice the slots, twice the
  turns), a node whose rate stops rising has 0;
- the marginal cost ``(c2 - c1) / (n2 - n1)`` per unit of size: turns/s per slot, ms per writer,
  ms per 1 000 pages, ms per seat.

A curve whose crewlet ``k`` exceeds its floor's grows faster than the raw operation does. The
growth is in each point's ``parameters["growth_from_previous"]`` and printed after the table
(:func:`render_growth`). A quick run measures two small points per curve (``QUICK_SIZES``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nats

from shared.router import EstateRouter

from . import fig2_mailboxes, fig5_turns, fig6_estate, fig7_search
from ._ctx import Ctx
from ._env import PROJECT, nats_server
from ._result import Row, failed, fmt_num, row_from

__all__ = ["FULL_SIZES", "QUICK_SIZES", "Step", "growth_steps", "render_growth", "run"]

FULL_SIZES: dict[str, tuple[int, ...]] = {
    "turns": (32, 128, 512),
    "writes": (1, 10, 100),
    "search": (1_000, 10_000, 100_000),
    "mailboxes": (100, 1_000, 5_000),
}
"""The sizes of a full run: ``max_concurrent``, writers, pages, seats."""

QUICK_SIZES: dict[str, tuple[int, ...]] = {
    "turns": (8, 32),
    "writes": (1, 10),
    "search": (1_000, 10_000),
    "mailboxes": (100, 300),
}
"""The sizes of a quick run (``make bench-quick`` in CI): two small points, so a slope still prints."""

_SIZE_UNIT = {"turns": "max_concurrent", "writes": "writers", "search": "pages", "mailboxes": "seats"}
_MARGINAL = {  # (unit of the marginal cost, size step it is per)
    "turns": ("turns/s per slot", 1),
    "turns CPU": ("ms per slot", 1),
    "idle seats CPU": ("% of a core per 100 seats", 100),
    "writes": ("ms per writer", 1),
    "search": ("ms per 1 000 pages", 1000),
    "mailboxes": ("ms per seat", 1),
}


@dataclass(frozen=True)
class Step:
    """The growth of one curve from one size to the next.

    Attributes:
        curve: ``turns``, ``turns CPU``, ``writes``, ``search`` or ``mailboxes``.
        unit: The cost's unit (``turns/s``, ``ms``, ``s``).
        sizes: (n1, n2), in the curve's size unit.
        costs: crewlet's medians (c1, c2).
        floor_costs: the floor's medians (f1, f2); None for a curve without a floor.
        k: crewlet's log-log exponent ``ln(c2/c1) / ln(n2/n1)``.
        floor_k: the floor's; None without a floor.
        marginal: crewlet's ``(c2 - c1) / (n2 - n1)``, scaled to :attr:`marginal_unit`.
        floor_marginal: the floor's; None without a floor.
        marginal_unit: e.g. ``ms per writer``.
    """

    curve: str
    unit: str
    sizes: tuple[int, int]
    costs: tuple[float, float]
    floor_costs: tuple[float, float] | None
    k: float
    floor_k: float | None
    marginal: float
    floor_marginal: float | None
    marginal_unit: str

    def as_json(self) -> dict[str, Any]:
        """The step as plain JSON values (rounded to 4 significant digits)."""
        return {
            "from_size": self.sizes[0],
            "to_size": self.sizes[1],
            "k": _sig(self.k),
            "floor_k": _sig(self.floor_k),
            "marginal": _sig(self.marginal),
            "floor_marginal": _sig(self.floor_marginal),
            "marginal_unit": self.marginal_unit,
        }


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def _exponent(n: tuple[int, int], c: tuple[float, float]) -> float:
    """``ln(c2/c1) / ln(n2/n1)``; ``nan`` when a cost is not positive."""
    if c[0] <= 0 or c[1] <= 0:
        return math.nan
    return math.log(c[1] / c[0]) / math.log(n[1] / n[0])


def _marginal(curve: str, n: tuple[int, int], c: tuple[float, float]) -> float:
    per = _MARGINAL[curve][1]
    scale = 1000.0 if curve == "mailboxes" else 1.0  # the boot is in s, its marginal in ms per seat
    return (c[1] - c[0]) / (n[1] - n[0]) * per * scale


def _step(
    curve: str, unit: str, n: tuple[int, int], c: tuple[float, float], f: tuple[float, float] | None
) -> Step:
    return Step(
        curve=curve,
        unit=unit,
        sizes=n,
        costs=c,
        floor_costs=f,
        k=_exponent(n, c),
        floor_k=None if f is None else _exponent(n, f),
        marginal=_marginal(curve, n, c),
        floor_marginal=None if f is None else _marginal(curve, n, f),
        marginal_unit=_MARGINAL[curve][0],
    )


def _cpu_steps(a: Row, b: Row, n: tuple[int, int]) -> list[Step]:
    """The node's CPU per turn between two turns points, and its CPU while idle against the seats held."""
    out = []
    cpu = [r.parameters.get("node_cpu_ms_per_turn") for r in (a, b)]
    if cpu[0] and cpu[1]:
        out.append(_step("turns CPU", "ms CPU/turn", n, (float(cpu[0]), float(cpu[1])), None))
    idle = [r.parameters.get("node_idle_cpu_share") for r in (a, b)]
    seats = (int(a.parameters["seats"]), int(b.parameters["seats"]))
    if idle[0] and idle[1]:
        out.append(_step("idle seats CPU", "% of a core", seats, (idle[0] * 100, idle[1] * 100), None))
    return out


def growth_steps(rows: Sequence[Row]) -> list[Step]:
    """The growth between successive measured points of each curve in ``rows``.

    A point is a row with ``parameters["curve"]`` and ``parameters["size"]`` and status ``ok``;
    rows of other figures are ignored, and a step is left out when either of its points was not
    measured. A turns point with ``node_cpu_ms_per_turn`` also gives a ``turns CPU`` step, and
    with ``node_idle_cpu_share`` an ``idle seats CPU`` step (sized by the seats held).
    """
    by_curve: dict[str, list[Row]] = {}
    for r in rows:
        if r.status == "ok" and "curve" in r.parameters and r.median is not None and r.floor is not None:
            by_curve.setdefault(str(r.parameters["curve"]), []).append(r)
    steps: list[Step] = []
    for curve, pts in by_curve.items():
        pts.sort(key=lambda r: int(r.parameters["size"]))
        for a, b in zip(pts, pts[1:], strict=False):
            assert a.median is not None and b.median is not None and a.floor and b.floor
            n = (int(a.parameters["size"]), int(b.parameters["size"]))
            steps.append(_step(curve, a.unit, n, (a.median, b.median), (a.floor.median, b.floor.median)))
            if curve == "turns":
                steps += _cpu_steps(a, b, n)
    return steps


def _k(x: float | None) -> str:
    if x is None:
        return "—"
    return "n/a" if math.isnan(x) else f"{x:+.2f}"


def render_growth(rows: Sequence[Row]) -> str:
    """The growth of every curve in ``rows`` as a Markdown table; "" when there is none.

    Columns: the curve and its unit, the sizes, crewlet's and the floor's medians at both sizes,
    crewlet's and the floor's log-log exponent ``k``, and the marginal cost of both.
    """
    steps = growth_steps(rows)
    if not steps:
        return ""
    lines = [
        "| curve | unit | size | crewlet | floor | k crewlet | k floor | marginal crewlet | marginal floor | marginal unit |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in steps:
        size_unit = "seats" if s.curve == "idle seats CPU" else _SIZE_UNIT[s.curve.split()[0]]
        fl = "—" if s.floor_costs is None else f"{fmt_num(s.floor_costs[0])} → {fmt_num(s.floor_costs[1])}"
        lines.append(
            f"| {s.curve} | {s.unit} | {s.sizes[0]:,} → {s.sizes[1]:,} {size_unit} | "
            f"{fmt_num(s.costs[0])} → {fmt_num(s.costs[1])} | {fl} | {_k(s.k)} | {_k(s.floor_k)} | "
            f"{fmt_num(s.marginal)} | {fmt_num(s.floor_marginal)} | {s.marginal_unit} |"
        )
    return "\n".join(lines)


# --- the curves -----------------------------------------------------------------------------------


def _point(row: Row, curve: str, size: int) -> Row:
    row.parameters.update({"curve": curve, "size": size, "size_unit": _SIZE_UNIT[curve]})
    return row


def _turns(ctx: Ctx, label: Callable[[str], str], sizes: Sequence[int]) -> list[Row]:
    rows = []
    totals = {8: 80, 32: ctx.n(160, 480), 128: 960, 512: 2048}
    for conc in sizes:
        seats = conc + conc // 4
        total = totals.get(conc, 4 * conc)
        text = label(f"turns/s at max_concurrent {conc} ({seats} seats), 200 ms model")
        ctx.say(f"figure 13: {text}")
        row = fig5_turns.rate_row(
            ctx, f"turns-{conc}", text, seats, conc, total, idle_probe_s=ctx.n(1.0, 5.0)
        )
        rows.append(_point(row, "turns", conc))
    return rows


async def _writers(url: str, ctx: Ctx, sizes: Sequence[int], rounds: int) -> dict[int, dict[str, Any]]:
    """Per writer count: write and publish latencies (s), and both phases' rates (per s)."""
    nc = await nats.connect(url)
    est = await fig6_estate.open_copy(nc, "d1", ctx.sub("estate") / "d1", 1)
    out: dict[int, dict[str, Any]] = {}
    try:
        await fig6_estate.seed(est)
        router = EstateRouter(nc, None, node_id="d1", local=lambda: est.service)
        await fig6_estate.raw_stream(nc, 1)
        js = nc.jetstream()
        payload = b"x" * 256

        async def write(tag: str, ops: int, into: list[float]) -> None:
            for j in range(ops):
                t0 = time.perf_counter()
                await router.create_work_item(PROJECT, f"Growth item {tag}-{j}", body="Written by the bench")
                into.append(time.perf_counter() - t0)

        async def publish(ops: int, into: list[float]) -> None:
            for _ in range(ops):
                t0 = time.perf_counter()
                await js.publish("benchraw.w", payload)
                into.append(time.perf_counter() - t0)

        for n in sizes:
            ops = max(4, ctx.n(60, 200) // n)  # per writer and round
            ctx.say(f"figure 13: {n} writers, {rounds} rounds of {ops} writes each (+ warmup)")
            await asyncio.gather(*(write(f"w{n}-{w}", 2, []) for w in range(n)))
            await asyncio.gather(*(publish(2, []) for _ in range(n)))
            fig: list[float] = []
            floor: list[float] = []
            fig_s = floor_s = 0.0
            for r in range(rounds):
                t0 = time.perf_counter()
                await asyncio.gather(*(publish(ops, floor) for _ in range(n)))
                t1 = time.perf_counter()
                await asyncio.gather(*(write(f"{n}-{r}-{w}", ops, fig) for w in range(n)))
                t2 = time.perf_counter()
                floor_s += t1 - t0
                fig_s += t2 - t1
            out[n] = {
                "fig": fig,
                "floor": floor,
                "writes_per_s": round(len(fig) / fig_s, 1),
                "publishes_per_s": round(len(floor) / floor_s, 1),
                "ops_per_writer_per_round": ops,
            }
    finally:
        await est.close()
        await nc.close()
    return out


def _writes(ctx: Ctx, label: Callable[[str], str], sizes: Sequence[int]) -> list[Row]:
    rounds = ctx.n(2, 3)
    texts = {n: label(f"estate write latency, {n} writer{'s' if n > 1 else ''}, R1") for n in sizes}
    base: dict[str, Any] = {"in_process": True, "replicas": 1, "rounds": rounds, "closed_loop": True}
    try:
        with contextlib.ExitStack() as stack:
            srv = nats_server(stack, ctx.sub("writes-nats"))
            got = asyncio.run(_writers(srv.url, ctx, sizes, rounds))
    except Exception as e:  # noqa: BLE001 - the curve fails, the figure goes on
        return [_point(failed(texts[n], "ms", f"{type(e).__name__}: {e}", base), "writes", n) for n in sizes]
    rows = []
    for n in sizes:
        g = got[n]
        params = {
            **base,
            "writers": n,
            "ops_per_writer_per_round": g["ops_per_writer_per_round"],
            "writes_per_s": g["writes_per_s"],
            "publishes_per_s": g["publishes_per_s"],
        }
        row = row_from(
            texts[n],
            "ms",
            [x * 1000 for x in g["fig"]],
            f"raw R1 publish, {n} publisher{'s' if n > 1 else ''}",
            [x * 1000 for x in g["floor"]],
            parameters=params,
        )
        rows.append(_point(row, "writes", n))
    return rows


def _search(ctx: Ctx, label: Callable[[str], str], sizes: Sequence[int]) -> list[Row]:
    rows = []
    queries, warmup = ctx.n(30, 200), ctx.n(5, 20)
    for pages in sizes:
        text = label(f"knowledge search, {pages:,} generated pages")
        params: dict[str, Any] = {"pages": pages, "queries": queries, "words_per_query": 3, "limit": 5}
        ctx.say(f"figure 13: {text}")
        try:
            with contextlib.ExitStack() as stack:
                srv = nats_server(stack, ctx.sub(f"search-nats-{pages}"))
                fig, floor, info = asyncio.run(
                    fig7_search._measure(srv.url, ctx.sub(f"search-{pages}"), pages, queries, warmup)
                )
        except Exception as e:  # noqa: BLE001
            rows.append(_point(failed(text, "ms", f"{type(e).__name__}: {e}", params), "search", pages))
            continue
        params.update(info)
        row = row_from(
            text,
            "ms",
            [x * 1000 for x in fig],
            "raw FTS5 bm25 query, same db",
            [x * 1000 for x in floor],
            parameters=params,
        )
        rows.append(_point(row, "search", pages))
    return rows


async def _boots(url: str, seats: int, boots: int) -> tuple[list[float], list[float]]:
    nc = await nats.connect(url)
    try:
        fig, floor = await fig2_mailboxes.concurrent_boots(nc, 1, seats, boots)
    finally:
        await nc.close()
    return [x * seats for x in fig], [x * seats for x in floor]


def _mailboxes(ctx: Ctx, label: Callable[[str], str], sizes: Sequence[int]) -> list[Row]:
    rows = []
    with contextlib.ExitStack() as stack:
        try:
            srv = nats_server(stack, ctx.sub("mailboxes-nats"))
        except Exception as e:  # noqa: BLE001
            return [
                _point(failed(label(f"mailbox creation at boot, {n:,} seats"), "s", str(e)), "mailboxes", n)
                for n in sizes
            ]
        for seats in sizes:
            boots = 1 if ctx.quick or seats > 1000 else (3 if seats <= 100 else 2)
            text = label(f"mailbox creation at boot, {seats:,} seats, R1, 64 in flight")
            params: dict[str, Any] = {
                "seats": seats,
                "consumers_per_seat": 2,
                "boots": boots,
                "in_flight": 64,
            }
            if seats > 500:
                params["workaround"] = "CREWLET_AGENT pre-created with max_consumers raised (figure 2)"
            ctx.say(f"figure 13: {text}")
            try:
                fig, floor = asyncio.run(_boots(srv.url, seats, boots))
            except Exception as e:  # noqa: BLE001
                rows.append(_point(failed(text, "s", f"{type(e).__name__}: {e}", params), "mailboxes", seats))
                continue
            params["ms_per_seat"] = round(statistics.median(fig) / seats * 1000, 3)
            row = row_from(
                text, "s", fig, "raw add_consumer ×2 per seat, 64 in flight", floor, parameters=params
            )
            rows.append(_point(row, "mailboxes", seats))
    return rows


def run(ctx: Ctx) -> list[Row]:
    """Measure the four curves (rows 13a..); each point's growth from the previous is in its parameters."""
    sizes = QUICK_SIZES if ctx.quick else FULL_SIZES
    letters = iter("abcdefghijklmnopqrstuvwxyz")

    def label(text: str) -> str:
        return f"13{next(letters)} {text}"

    rows: list[Row] = []
    curves: list[tuple[str, Callable[[Ctx, Callable[[str], str], Sequence[int]], list[Row]]]] = [
        ("turns", _turns),
        ("writes", _writes),
        ("search", _search),
        ("mailboxes", _mailboxes),
    ]
    for name, fn in curves:
        t0 = time.monotonic()
        rows += fn(ctx, label, sizes[name])
        ctx.say(f"figure 13: {name} curve done in {time.monotonic() - t0:.0f} s")
    where = {  # step curve -> (point curve, the parameter its sizes are in, where the step goes)
        "turns CPU": ("turns", "size", "cpu_growth_from_previous"),
        "idle seats CPU": ("turns", "seats", "idle_cpu_growth_from_previous"),
    }
    for s in growth_steps(rows):
        curve, size_key, key = where.get(s.curve, (s.curve, "size", "growth_from_previous"))
        for r in rows:
            if r.parameters.get("curve") == curve and r.parameters.get(size_key) == s.sizes[1]:
                r.parameters[key] = s.as_json()
    return rows
