"""One chaos run: boot the fleet once, then for each round load, fault, heal, go quiet, and check.

A round (about 30 s on two cores): the workload runs for :data:`WARM` seconds, the round's faults
are injected and healed (:class:`~chaos._nemesis.Nemesis`), the workload runs :data:`COOL` seconds
more and pauses; then the fleet is let go quiet — every seat owned once (:func:`owned_once`), every
accepted trigger completed (or left pending), the data nodes' copies at one position, each waited
for at most ``--quiet-timeout`` seconds (the final check twice that) — and the invariants are checked (:mod:`chaos._invariants`). A violation of
the history is reported in the round it first appears (a later round does not report it again).
After the last round a final check requires every trigger completed, none pending.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from tests.fleet.harness import SEATS, SWEEP, TTL, Fleet, wait_for
from tests.support.procs import TOKEN

from ._invariants import (
    INVARIANTS,
    Check,
    digest_violations,
    duplicate_violations,
    estate_violations,
    excused_by_fl89,
    history_checks,
    turn_violations,
    unowned_violations,
)
from ._nemesis import Nemesis
from ._observe import LogHistory, OwnerMonitor, commits_and_acks, copies, present
from ._schedule import Fault, schedule_round
from ._workload import Workload

__all__ = ["Options", "RunResult", "run", "satellite_names"]

WARM = 2.0
"""Seconds of workload before a round's first fault."""
COOL = 1.5
"""Seconds of workload after the round's faults are healed."""
UNOWNED_LIMIT = TTL + 2 * SWEEP
"""Seconds a seat may stay unowned after the last fault is healed (TTL + two sweeps)."""


@dataclass
class Options:
    """What ``python -m chaos`` was asked (see :mod:`chaos.__main__`)."""

    rounds: int = 3
    seed: int = 0
    minutes: float = 0.0
    out: Path | None = None
    only_round: int = 0
    faults: tuple[str, ...] = ()
    node_env: dict[str, str] = field(default_factory=dict)
    keep: bool = False
    quiet_timeout: float = 60.0
    fail_fast: bool = False
    satellites: int = 1

    def rerun(self, round_no: int) -> str:
        """The command that runs round ``round_no`` of this seed alone, with the same options."""
        args = [f"--seed {self.seed}", f"--only-round {round_no}"]
        if self.faults:
            args.append(f"--faults {','.join(self.faults)}")
        if self.satellites != 1:  # the fleet's size changes which node each fault picks
            args.append(f"--satellites {self.satellites}")
        args += [f"--node-env {k}={v}" for k, v in sorted(self.node_env.items())]
        return f'make chaos ARGS="{" ".join(args)}"'


def satellite_names(n: int) -> tuple[str, ...]:
    """The ids of ``n`` satellites: ``("s",)`` for one, ``("s1", "s2", ...)`` for more, ``()`` for none.

    Raises:
        ValueError: ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f"satellites: {n} is negative")
    return ("s",) if n == 1 else tuple(f"s{i}" for i in range(1, n + 1))


@dataclass
class RunResult:
    """The outcome: the JSON document written, and the number of violations."""

    doc: dict[str, Any]
    violations: int


def run(opts: Options, menu: tuple[str, ...], console: Console) -> RunResult:
    """Run the chaos rounds of ``opts`` with the faults of ``menu``; write the JSON; return the result.

    Raises:
        AssertionError: the fleet could not boot (the run then has nothing to check).
    """
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="crewlet-chaos-"))
    rounds = [opts.only_round] if opts.only_round else list(range(1, opts.rounds + 1))
    doc: dict[str, Any] = {
        "seed": opts.seed,
        "menu": list(menu),
        "node_env": opts.node_env,
        "satellites": list(satellite_names(opts.satellites)),
        "ttl_seconds": TTL,
        "sweep_seconds": SWEEP,
        "schedule": {},
        "rounds": [],
        "latencies": {},
        "scratch": str(scratch),
    }
    violations = 0
    fleet = Fleet(scratch, satellites=satellite_names(opts.satellites))
    workload = monitor = None
    nemesis: Nemesis | None = None
    try:
        fleet.llm.tool_seats.update(("qa", "pm"))
        nodes = (*fleet.names, *fleet.satellites)  # a node fault may hit a satellite like any node
        for name in nodes:
            fleet.env[name] = dict(opts.node_env)
        t0 = time.monotonic()
        fleet.boot(timeout=180)
        try:  # a fleet that never settles still runs its rounds: their checks say what is wrong
            wait_for("every seat owned once", lambda: not owned_once(fleet), timeout=2 * opts.quiet_timeout)
        except AssertionError as e:
            doc["boot_not_settled"] = str(e)
            console.print(f"[yellow]the fleet did not settle after boot: {e}[/yellow]")
        doc["boot_seconds"] = round(time.monotonic() - t0, 2)
        console.print(f"fleet booted, every seat owned, in {doc['boot_seconds']} s (scratch {scratch})")
        skews: dict[str, int] = {}
        history = LogHistory(fleet, skews)
        monitor = OwnerMonitor(fleet)
        workload = Workload(fleet, random.Random(f"{opts.seed}:workload"))
        nemesis = Nemesis(fleet, monitor, history, workload, dict(opts.node_env), skews, console)
        nemesis.recovery_timeout = opts.quiet_timeout
        state = _State()
        for k in rounds:
            if opts.minutes and time.monotonic() - started > opts.minutes * 60:
                doc["stopped_early"] = f"the {opts.minutes:g}-minute budget ran out before round {k}"
                console.print(f"[yellow]{doc['stopped_early']}[/yellow]")
                break
            faults = schedule_round(opts.seed, k, menu, nodes)
            doc["schedule"][str(k)] = [f.describe() for f in faults]
            r0 = time.monotonic()
            found = _round(k, faults, fleet, workload, monitor, nemesis, history, state, console, opts)
            found["seconds"] = round(time.monotonic() - r0, 1)
            doc["rounds"].append(found)
            violations += _report(found, opts, console)
            if violations and opts.fail_fast:
                doc["stopped_early"] = f"--fail-fast: a violation in round {k}"
                break
        if not (violations and opts.fail_fast):
            final = _final(fleet, workload, history, state, console, opts)
            doc["final"] = final
            violations += _report(final, opts, console)
        doc["latencies"] = _latencies(doc["rounds"])
        doc["workload"] = _workload_summary(workload)
        doc["operations"] = workload.snapshot()
    finally:
        if nemesis is not None:
            nemesis.closing.set()
        if workload is not None:
            workload.stop()
        if monitor is not None:
            monitor.stop()
        _stop(fleet)
        if not opts.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    done = len(doc["rounds"])
    faults_n = sum(len(r["faults"]) for r in doc["rounds"])
    doc["summary"] = {
        "rounds": done,
        "faults": faults_n,
        "violations": violations,
        "seconds": round(time.monotonic() - started, 1),
        "seconds_per_round": round(sum(r["seconds"] for r in doc["rounds"]) / done, 1) if done else None,
    }
    return RunResult(doc, violations)


@dataclass
class _State:
    """What carries over from round to round."""

    seen: set[str] = field(default_factory=set)  # history / turn violation lines already reported
    verified: set[str] = field(default_factory=set)  # acknowledged writes found on every node
    reaccepted: int = 0  # replays already reported


def _round(
    k: int,
    faults: list[Fault],
    fleet: Fleet,
    workload: Workload,
    monitor: OwnerMonitor,
    nemesis: Nemesis,
    history: LogHistory,
    state: _State,
    console: Console,
    opts: Options,
) -> dict[str, Any]:
    console.rule(f"round {k}: {' + '.join(f.describe() for f in faults)}")
    start = time.time()
    workload.resume(k)
    time.sleep(WARM)
    runs = nemesis.run(faults)
    healed = max(r.healed_at for r in runs)
    time.sleep(COOL)
    workload.pause()
    checks, quiet = _quiet_and_check(
        fleet,
        workload,
        history,
        state,
        monitor=monitor,
        since=start,
        healed=healed,
        timeout=opts.quiet_timeout,
    )
    return {
        "round": k,
        "faults": [r.to_json() for r in runs],
        "healed_after_seconds": round(healed - start, 1),
        "quiet": quiet,
        "checks": [c.to_json() for c in checks],
    }


def _final(
    fleet: Fleet, workload: Workload, history: LogHistory, state: _State, console: Console, opts: Options
) -> dict[str, Any]:
    console.rule("final check: every accepted trigger completed")
    checks, quiet = _quiet_and_check(
        fleet, workload, history, state, monitor=None, since=0.0, healed=0.0, timeout=2 * opts.quiet_timeout
    )
    return {"round": "final", "faults": [], "quiet": quiet, "checks": [c.to_json() for c in checks]}


def _quiet_and_check(
    fleet: Fleet,
    workload: Workload,
    history: LogHistory,
    state: _State,
    *,
    monitor: OwnerMonitor | None,
    since: float,
    healed: float,
    timeout: float,
) -> tuple[list[Check], dict[str, Any]]:
    quiet: dict[str, Any] = {}
    checks = {name: Check(name) for name in INVARIANTS}
    t0 = time.monotonic()
    try:
        wait_for("every seat owned once", lambda: not owned_once(fleet), timeout=timeout, every=0.25)
        quiet["owned_once_seconds"] = round(time.monotonic() - t0, 1)
    except AssertionError:
        checks["no seat unowned past TTL + 2 sweeps"].violations.append(
            f"not every seat owned once {timeout:.0f} s after the heal: {owned_once(fleet)}"
        )
    # every accepted trigger completed, or pending after the timeout
    accepted = dict(workload.accepted)
    deadline = time.monotonic() + timeout
    while True:
        h = history.refresh()
        counts, done, ledgered = commits_and_acks(h)
        pending = sorted(set(accepted) - done)
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    quiet["pending"] = pending
    quiet["handled_seconds"] = round(time.monotonic() - t0, 1)
    final = monitor is None
    quiet["ledgered_without_commit_line"] = sorted(ledgered)
    # a ledgered trigger was worked: the history checker, which counts commit lines, is told so
    allowed = sorted(ledgered) if final else sorted({*pending, *ledgered})
    # 1-5: the history checker (an event worked twice after a failed ledger read or write is FL-89's fail-open)
    ledger_failed = {str(e.fields.get("key")) for e in h.named("ledger_write_failed")}
    # FL-89's read side: an unreadable ledger runs the turn (its line names the constituents)
    ledger_failed |= {str(k) for e in h.named("ledger_read_failed") for k in e.fields.get("keys") or ()}
    lines = [v for v in h.violations(accepted=accepted, pending=allowed) if v not in state.seen]
    lines, excused = excused_by_fl89(lines, ledger_failed)
    quiet["excused_fl89"] = excused
    state.seen.update(excused)
    for c in history_checks(lines):
        checks[c.name].violations += c.violations
    if excused:
        checks["handled once"].note = f"{len(excused)} worked twice after a failed ledger write (FL-89)"
    # 6: one completed turn per accepted trigger (and a replayed delivery never starts a new trigger)
    worked = {**counts, **{e: 1 for e in ledgered}}
    turns = [v for v in turn_violations(accepted, worked, allowed, ledger_failed) if v not in state.seen]
    replays = workload.replays_reaccepted[state.reaccepted :]
    state.reaccepted += len(replays)
    turns += [f"replayed delivery {d} started new triggers again (not deduplicated)" for d in replays]
    checks["one completed turn per accepted trigger"].violations += turns
    checks[
        "one completed turn per accepted trigger"
    ].note = f"{len(accepted)} accepted, {len(pending)} pending"
    for c in checks.values():
        state.seen.update(c.violations)
    # 7, 8: the estate copies, once at one position (the data nodes': a satellite keeps none)
    names = tuple(fleet.names)
    level, digests = _level(fleet, names, timeout)
    quiet["positions"] = {n: c["position"] for n, c in digests.items()}
    if not level:
        checks["copies identical at one position"].violations.append(
            f"copies never reached one position within {timeout:.0f} s: {quiet['positions']}"
        )
    checks["copies identical at one position"].violations += digest_violations(digests)
    objects = sorted(set(workload.acked) - state.verified)
    found = _present(fleet, names, objects)
    if isinstance(found, str):
        checks["acknowledged writes on every data node"].violations.append(found)
    else:
        checks["acknowledged writes on every data node"].violations += estate_violations(objects, found)
        state.verified.update(o for o in objects if all(o in have for have in found.values()))
    checks["acknowledged writes on every data node"].note = f"{len(objects)} new acknowledged writes"
    # 9: no seat unowned past TTL + 2 sweeps after the heal
    if monitor is not None:
        samples = monitor.unowned_since(since, SEATS)
        checks["no seat unowned past TTL + 2 sweeps"].violations += unowned_violations(
            samples, healed, UNOWNED_LIMIT
        )
        checks["no seat unowned past TTL + 2 sweeps"].note = f"{len(samples)} samples"
    # 10: no duplicate work item per trigger
    items = _items(fleet)
    if isinstance(items, str):
        checks["no duplicate work item per trigger"].violations.append(items)
    else:
        titles = [t for e, t in workload.titles.items() if e in accepted]
        checks["no duplicate work item per trigger"].violations += duplicate_violations(items, titles)
        checks["no duplicate work item per trigger"].note = f"{len(items)} items"
    quiet["seconds"] = round(time.monotonic() - t0, 1)
    return list(checks.values()), quiet


def owned_once(fleet: Fleet) -> str:
    """ "" when every seat is owned exactly once by the live nodes (satellites included), and the
    lease bucket agrees with what they hold (:meth:`Fleet.converged` without the fair-share
    condition: a rebalance may still be under way, which the next round's load runs beside; and
    with a satellite beside three members the share is ``ceil(9 / 4) = 3``, so a satellite that
    came up last may rightly hold nothing). Else what is not yet true."""
    held = fleet.held()
    owners = fleet.owners()
    claimed = sorted(s for seats in held.values() for s in seats)
    if claimed != sorted(SEATS):
        return f"held {held}"
    if any(owners.get(s) != n for n, seats in held.items() for s in seats):
        return f"bucket {owners} disagrees with held {held}"
    return ""


def _stop(fleet: Fleet) -> None:
    """Stop every process of the fleet by PID, also when an interrupted nemesis thread is still
    adding an incarnation to ``fleet.procs`` meanwhile (the stop is then simply made again)."""
    for attempt in range(5):
        try:
            fleet.stop()
            return
        except RuntimeError:  # the process table changed during the stop
            if attempt == 4:
                raise
            time.sleep(1.0)


def _level(fleet: Fleet, names: tuple[str, ...], timeout: float) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Wait until every node answers at one position twice running; return (level, copies)."""
    deadline = time.monotonic() + timeout
    last: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        now = copies(fleet, names)
        positions = {tuple(c["position"]) for c in now.values()}
        if len(now) == len(names) and len(positions) == 1 and now == last:
            return True, now
        last = now
        time.sleep(1.0)
    return False, last


def _present(fleet: Fleet, names: tuple[str, ...], objects: list[str]) -> dict[str, set[str]] | str:
    error = ""
    for _ in range(5):
        try:
            return present(fleet, names, objects)
        except RuntimeError as e:
            error = str(e)
            time.sleep(2.0)
    return f"a data node could not be asked for its copy: {error}"


def _items(fleet: Fleet) -> list[dict[str, Any]] | str:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    error = ""
    for _ in range(5):
        for name, node in fleet.live().items():
            if name not in fleet.names:  # a satellite has no ingress: no /work
                continue
            items: list[dict[str, Any]] = []
            try:
                while True:
                    params: dict[str, Any] = {"project": "SUP", "limit": 100, "offset": len(items)}
                    r = httpx.get(node.url + "/work", params=params, headers=headers, timeout=10)
                    if r.status_code != 200:
                        raise ValueError(f"{r.status_code} {r.text[:200]}")
                    page = r.json()["items"]
                    items += page
                    if len(page) < 100:
                        return items
            except (httpx.HTTPError, ValueError, KeyError) as e:
                error = f"{type(e).__name__}: {e}"
        time.sleep(2.0)
    return f"the tracker could not be listed: {error}"


def _report(found: dict[str, Any], opts: Options, console: Console) -> int:
    """Print a round's table; return its number of violations."""
    table = Table(title=f"round {found['round']}: invariants")
    for col in ("invariant", "verdict", "detail"):
        table.add_column(col)
    bad = 0
    for c in found["checks"]:
        bad += len(c["violations"])
        verdict = "[green]ok[/green]" if c["ok"] else f"[red]VIOLATED ({len(c['violations'])})[/red]"
        detail = "; ".join(c["violations"][:3]) if c["violations"] else c["note"]
        table.add_row(c["invariant"], verdict, detail)
    console.print(table)
    for f in found["faults"]:
        lat = ", ".join(f"{k} {v} s" for k, v in f["latencies"].items())
        console.print(f"  {f['describe']}: {lat or 'no latency measured'}; {'; '.join(f['notes'])}")
    q = found["quiet"]
    console.print(f"  quiet after {q.get('seconds')} s; pending {len(q.get('pending', []))}")
    for line in q.get("excused_fl89", []):
        console.print(f"  excused (FL-89 fail-open, a failed ledger write): {line}", soft_wrap=True)
    if bad:
        where = f"round {found['round']}"
        rerun = opts.rerun(found["round"]) if isinstance(found["round"], int) else "the whole run"
        console.print(
            f"[red bold]VIOLATION: seed {opts.seed}, {where}: {bad} violation(s). Rerun: {rerun}[/red bold]",
            soft_wrap=True,
        )
        found["rerun"] = rerun
    return bad


def _latencies(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Latency name → ``{"n", "min", "median", "max", "values"}`` over every fault of the run."""
    values: dict[str, list[float]] = {}
    for r in rounds:
        for f in r["faults"]:
            for k, v in f["latencies"].items():
                if v is not None:
                    values.setdefault(k, []).append(float(v))
    out = {}
    for k, vs in sorted(values.items()):
        s = sorted(vs)
        out[k] = {"n": len(s), "min": s[0], "median": s[len(s) // 2], "max": s[-1], "values": vs}
    return out


def _workload_summary(workload: Workload) -> dict[str, Any]:
    ops = workload.snapshot()
    by: dict[str, dict[str, int]] = {}
    for o in ops:
        by.setdefault(o["kind"], {}).setdefault(o["outcome"], 0)
        by[o["kind"]][o["outcome"]] += 1
    return {"operations": len(ops), "by_kind": by, "accepted_triggers": len(workload.accepted)}
