"""The nemesis: inject one scheduled fault into the fleet, hold it, heal it, and time the recovery.

:meth:`Nemesis.run` is synchronous (two overlapping faults run in two threads) and returns a
:class:`FaultRun`: when it was injected and healed, the recovery latencies it measured (seconds),
and notes. Every process it stops it starts again before returning, so a round always ends healed.

Latencies measured (keys of :attr:`FaultRun.latencies`):

- ``seat_reowned_after_kill``: ``kill -9`` → every seat the node held is owned by a peer (lease bucket);
- ``seat_reowned_after_pause``: ``SIGSTOP`` → the same for a stopped node;
- ``writes_resumed_after_leader_loss``: the leader killed → the first write of that stream that
  landed afterwards (a lease renew or claim for the lease bucket, an accepted message for the
  inboxes, an acknowledged tracker or page write for the estate's logs);
- ``broker_reconnected_after_partition_heal``: the cut restored → the node logs ``broker_reconnected``;
- ``node_ready_after_restart``: a restart → the node's ``/ready``;
- ``broker_healthy_after_restart``: a killed member started again → every member's ``/healthz``
  passes (the heal of a member fault, see :meth:`Nemesis._kill_member`).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tests.fleet.harness import TTL, Fleet

from ._observe import LogHistory, OwnerMonitor
from ._schedule import Fault
from ._workload import Op, Workload

__all__ = ["FaultRun", "Nemesis", "faketime_library"]

PAUSE_HOLD = TTL + 2.0
"""Seconds a node stays stopped (past the TTL)."""
CUT_SHORT = TTL / 2
"""Seconds of a short cut (less than the TTL)."""
CUT_LONG = TTL + 3.0
"""Seconds of a long cut (more than the TTL)."""
SKEW_HOLD = 6.0
"""Seconds a node runs under a skewed clock."""
MEMBER_HOLD = 3.0
"""Seconds a killed cluster member stays down."""
READY_TIMEOUT = 120.0
"""Seconds a restarted node may take to answer ``/ready``."""
RECOVERY_TIMEOUT = 60.0
"""Seconds a recovery is waited for before it is reported as not measured."""


def faketime_library() -> Path | None:
    """Debian's ``libfaketime.so.1`` (package ``libfaketime``), or None when it is not installed."""
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"):
        found = sorted(Path("/").glob(pattern.lstrip("/")))
        if found:
            return found[0]
    return None


@dataclass
class FaultRun:
    """What one fault did.

    Attributes:
        fault: The scheduled fault.
        injected_at: Wall time it was injected.
        healed_at: Wall time its heal finished (the node ready again, the link restored...).
        latencies: Measured recovery times in seconds (see the module docstring).
        notes: What happened that a reader of the report should know.
    """

    fault: Fault
    injected_at: float = 0.0
    healed_at: float = 0.0
    latencies: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault.to_json(),
            "describe": self.fault.describe(),
            "injected_at": self.injected_at,
            "healed_at": self.healed_at,
            "latencies": self.latencies,
            "notes": self.notes,
        }


class Nemesis:
    """Injects and heals faults on ``fleet``.

    Args:
        fleet: The booted fleet.
        monitor: The lease-owner monitor (for re-ownership times).
        history: The incremental history (for the first lease write after a leader loss).
        workload: The workload (its nodes to avoid, its accepted writes).
        env: Extra environment of every node process (``--node-env``).
        skews: Label → clock offset, filled for every incarnation started under a skewed clock.
        console: Where progress is printed.
    """

    def __init__(
        self,
        fleet: Fleet,
        monitor: OwnerMonitor,
        history: LogHistory,
        workload: Workload,
        env: dict[str, str],
        skews: dict[str, int],
        console: Console,
    ) -> None:
        self.fleet = fleet
        self.monitor = monitor
        self.history = history
        self.workload = workload
        self.env = env
        self.skews = skews
        self.console = console
        self.faketime = faketime_library()
        self.recovery_timeout = RECOVERY_TIMEOUT
        self.closing = threading.Event()  # set when the run ends: no node is started any more

    def run(self, faults: list[Fault]) -> list[FaultRun]:
        """Run ``faults`` (overlapping: each starts ``delay`` seconds after the first); all healed."""
        runs = [FaultRun(f) for f in faults]
        threads = [threading.Thread(target=self._one, args=(r,), daemon=True) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return runs

    def _one(self, run: FaultRun) -> None:
        time.sleep(run.fault.delay)
        handler = getattr(self, "_" + run.fault.kind.replace("-", "_"))
        try:
            handler(run)
        except Exception as e:  # a fault that could not be injected or healed is reported, not hidden
            if self.closing.is_set():  # interrupted: the run stops every process; nothing to heal
                run.notes.append("interrupted")
                return
            run.notes.append(f"nemesis error: {type(e).__name__}: {e}")
            self.console.print(f"[red]nemesis: {run.fault.describe()} failed: {e}[/red]")
            self._heal_all()
        run.healed_at = run.healed_at or time.time()

    # -- helpers -----------------------------------------------------------------------------

    def _restart(self, run: FaultRun, name: str, *, skew: int = 0) -> None:
        """Start node ``name`` again (its store kept), under ``skew`` seconds of clock offset."""
        env = dict(self.env)
        if skew:
            if self.faketime is None:
                raise RuntimeError("libfaketime is not installed")
            env.update(LD_PRELOAD=str(self.faketime), FAKETIME=f"{skew:+d}", FAKETIME_DONT_FAKE_MONOTONIC="1")
        if self.closing.is_set():
            raise RuntimeError(f"the run is ending: {name} is not started again")
        self.fleet.env[name] = env
        self.workload.avoid.add(name)
        try:
            t0 = time.monotonic()
            node = self.fleet.start(name)
            label = max((lb for lb in self.fleet.procs if lb.split("#")[0] == name), key=_incarnation)
            if skew:
                self.skews[label] = skew
            try:
                node.wait_ready(READY_TIMEOUT)
            except AssertionError:
                if node.popen.poll() is None:
                    raise
                run.notes.append(f"{label} exited before ready (exit {node.popen.returncode}); started again")
                self.fleet.start(name).wait_ready(READY_TIMEOUT)
                if skew:
                    later = max((lb for lb in self.fleet.procs if lb.split("#")[0] == name), key=_incarnation)
                    self.skews[later] = skew
            run.latencies.setdefault("node_ready_after_restart", round(time.monotonic() - t0, 2))
        finally:
            self.workload.avoid.discard(name)

    def _stop_gracefully(self, name: str, timeout: float = 60.0) -> int | None:
        node = self.fleet.nodes[name]
        self.workload.avoid.add(name)
        node.signal(signal.SIGTERM)
        code = node.wait(timeout)
        if code is None:
            node.signal(signal.SIGKILL)
            code = node.wait(10)
        return code

    def _heal_all(self) -> None:
        """Best effort after a nemesis error: every link restored, member started, node running."""
        assert self.fleet.cluster is not None
        for proxy in self.fleet.proxies.values():
            proxy.restore()
        for m in self.fleet.cluster.members:
            if not m.running:
                self.fleet.cluster.start(m.name)
        for name in list(self.fleet.paused):
            self.fleet.resume(name)
        for name, node in self.fleet.nodes.items():
            if node.popen.poll() is not None:
                self._restart(FaultRun(Fault("kill", name)), name)

    # -- the faults --------------------------------------------------------------------------

    def _kill(self, run: FaultRun) -> None:
        name = run.fault.victim
        seats = self.fleet.held().get(name, [])
        run.injected_at = time.time()
        self.workload.avoid.add(name)
        self.fleet.nodes[name].signal(signal.SIGKILL)
        self.fleet.nodes[name].wait(10)
        if seats:
            got = self.monitor.wait_owned(
                seats, not_by=name, after=run.injected_at, timeout=self.recovery_timeout
            )
            run.latencies["seat_reowned_after_kill"] = round(got - run.injected_at, 2) if got else None
        run.notes.append(f"{name} held {seats}")
        self._restart(run, name)
        run.healed_at = time.time()

    def _pause(self, run: FaultRun) -> None:
        name = run.fault.victim
        seats = self.fleet.held().get(name, [])
        run.injected_at = time.time()
        self.fleet.pause(name)
        time.sleep(PAUSE_HOLD)
        if seats:
            got = self.monitor.wait_owned(
                seats, not_by=name, after=run.injected_at, timeout=self.recovery_timeout
            )
            run.latencies["seat_reowned_after_pause"] = round(got - run.injected_at, 2) if got else None
        self.fleet.resume(name)
        time.sleep(TTL)  # the resumed node lets go of its seats, or its watchdog ends it (FL-100)
        node = self.fleet.nodes[name]
        if node.popen.poll() is not None:
            run.notes.append(f"{name} ended by its watchdog after SIGCONT (exit {node.popen.returncode})")
            self._restart(run, name)
        run.healed_at = time.time()

    def _drain(self, run: FaultRun) -> None:
        name = run.fault.victim
        held = self.fleet.held().get(name, [])
        peers = [n for n in self.fleet.live() if n != name and n in self.fleet.names]  # with ingress
        run.injected_at = time.time()
        if held and peers:
            seat = held[0]
            self.fleet.llm.delays[seat] = 4.0
            before = len(self.fleet.llm.requests(seat))
            try:
                event_id = self.fleet.post_message(seat, f"chaos drain r{self.workload.round}", via=peers[0])
                self.workload.record(
                    Op(
                        self.workload.round,
                        time.time(),
                        "message",
                        peers[0],
                        "accepted",
                        202,
                        {"event_id": event_id, "seat": seat, "drain": True},
                    )
                )
                self.fleet.llm.wait_first_round(seat, before, timeout=20)
                run.notes.append(f"SIGTERM while {seat} ran the turn of {event_id}")
            except AssertionError as e:
                run.notes.append(f"no turn under way at SIGTERM: {e}")
            finally:
                self.fleet.llm.delays.pop(seat, None)
        code = self._stop_gracefully(name)
        run.notes.append(f"{name} drained, exit {code}")
        self._restart(run, name)
        run.healed_at = time.time()

    def _cut(self, run: FaultRun, hold: float) -> None:
        name = run.fault.victim
        proxy = self.fleet.proxies[name]
        run.injected_at = time.time()
        proxy.cut()
        time.sleep(hold)
        proxy.restore()
        restored = time.time()
        run.healed_at = restored
        got = None
        deadline = time.monotonic() + self.recovery_timeout
        while got is None and time.monotonic() < deadline:
            seen = [
                e.at
                for e in self.history.refresh().named("broker_reconnected")
                if e.proc.split("#")[0] == name and e.at > restored - 0.5
            ]
            got = min(seen) if seen else None
            if got is None:
                time.sleep(0.25)
        run.latencies["broker_reconnected_after_partition_heal"] = round(got - restored, 2) if got else None

    def _cut_short(self, run: FaultRun) -> None:
        self._cut(run, CUT_SHORT)

    def _cut_long(self, run: FaultRun) -> None:
        self._cut(run, CUT_LONG)

    def _skew(self, run: FaultRun) -> None:
        name = run.fault.victim
        run.injected_at = time.time()
        self._stop_gracefully(name)
        self._restart(run, name, skew=run.fault.skew)
        time.sleep(SKEW_HOLD)
        self._stop_gracefully(name)
        self._restart(run, name)
        run.healed_at = time.time()

    def _skew_small(self, run: FaultRun) -> None:
        self._skew(run)

    def _skew_large(self, run: FaultRun) -> None:
        self._skew(run)

    def _member(self, run: FaultRun) -> None:
        self._kill_member(run, run.fault.target, stream="")

    def _stream_leader(self, run: FaultRun) -> None:
        leader = self.fleet.stream_leader(run.fault.target)
        run.notes.append(f"{run.fault.target} led by {leader or 'nobody'}")
        self._kill_member(run, leader or "n1", stream=run.fault.target)

    def _kv_leader(self, run: FaultRun) -> None:
        self._stream_leader(run)

    def _kill_member(self, run: FaultRun, member: str, *, stream: str) -> None:
        cluster = self.fleet.cluster
        assert cluster is not None
        run.injected_at = time.time()
        cluster.kill(member)
        run.notes.append(f"member {member} killed")
        try:
            if stream:
                got = self._first_write(stream, run.injected_at, max(MEMBER_HOLD, self.recovery_timeout))
                run.latencies["writes_resumed_after_leader_loss"] = (
                    round(got - run.injected_at, 2) if got else None
                )
            else:
                time.sleep(MEMBER_HOLD)
        finally:
            cluster.start(member)
            cluster.wait_ready(RECOVERY_TIMEOUT)
            # Healed is when the broker is whole again, not when the member's process is back: the
            # elections the kill started (the lease bucket's took up to 14 s) and the member's
            # catch-up end when every member's /healthz passes. A seat lost meanwhile could not be
            # claimed by anybody; measuring "unowned after the heal" from the restart blamed the
            # engine for the broker's election (round 100 of seed 7: 18 s).
            healthy = cluster.wait_healthy(RECOVERY_TIMEOUT)
            if healthy is None:
                run.notes.append(f"the cluster was not healthy {RECOVERY_TIMEOUT:.0f} s after the restart")
            else:
                run.latencies["broker_healthy_after_restart"] = round(healthy, 2)
        run.healed_at = time.time()

    def _first_write(self, stream: str, after: float, timeout: float) -> float | None:
        """Wall time of the first write of ``stream`` that landed after ``after``."""
        kind = {"CREWLET_AGENT": "message", "CREWLET_TRACKER_LOG": "work", "CREWLET_PAGES_LOG": "page"}.get(
            stream
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if kind is not None:
                got = self.workload.first_accepted(kind, after + 0.5)
            else:
                writes = [
                    e.at
                    for e in self.history.refresh().named("seat_renewed", "seat_claimed")
                    if e.at > after + 0.5
                ]
                got = min(writes) if writes else None
            if got is not None:
                return got
            time.sleep(0.5)
        return None


def _incarnation(label: str) -> int:
    return int(label.split("#")[1]) if "#" in label else 0
