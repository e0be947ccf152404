"""What the run reads from the fleet: lease owners over time, the history, each data node's copy.

- :class:`OwnerMonitor` samples the lease bucket (``GET /fleet`` on the first node with ingress
  that answers) every half second, so "unowned for how long" and "re-owned how soon" are
  measured, not guessed.
- :class:`LogHistory` reads every incarnation's JSON log (satellites' too) incrementally into one
  :class:`~tests.support.history.History`, shifting the timestamps of an incarnation that ran under
  a skewed clock back onto the true one (the checker compares wall times across processes).
- :func:`copies` and :func:`present` ask each data node's own estate copy over the router's RPC
  subject (``crewlet.estate.rpc.<node>``): its applied positions and digest (``estate.digest``,
  ES-1), and whether it holds a given item or page (``work.get`` / ``pages.get``, stale reads of
  that copy alone).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.errors

from shared.estate import DOMAINS as ESTATE_LOGS
from shared.estate import Call
from shared.router import decode_answer, encode_call, rpc_subject
from tests.fleet.harness import Fleet
from tests.support.history import History
from tests.support.procs import TOKEN

__all__ = ["LogHistory", "OwnerMonitor", "copies", "present"]

DOMAINS: tuple[str, ...] = tuple(ESTATE_LOGS)
"""Every registered log (tracker, pages, memory, usage, vectors): copies are compared only at one
position on all of them, since the digest covers every domain's rows."""


class OwnerMonitor:
    """Samples seat → owner from the lease bucket every ``every`` seconds in a thread.

    Attributes:
        samples: ``(wall time, {seat: node})`` for every answered sample.
    """

    def __init__(self, fleet: Fleet, every: float = 0.5) -> None:
        self.fleet = fleet
        self.every = every
        self.samples: list[tuple[float, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-owners", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        while not self._stop.wait(self.every):
            for name, node in list(self.fleet.live().items()):
                if name not in self.fleet.names:  # a satellite has no ingress: no /fleet
                    continue
                try:
                    r = httpx.get(node.url + "/fleet", headers=headers, timeout=2.0)
                    if r.status_code != 200:
                        continue
                    owners = {str(s["seat"]): str(s["node"]) for s in r.json()["seats"] if s.get("epoch")}
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    continue
                with self._lock:
                    self.samples.append((time.time(), owners))
                break

    def since(self, at: float) -> list[tuple[float, dict[str, str]]]:
        with self._lock:
            return [s for s in self.samples if s[0] >= at]

    def unowned_since(self, at: float, seats: Iterable[str]) -> list[tuple[float, list[str]]]:
        """``(wall time, seats missing from the bucket)`` for every sample since ``at``."""
        want = list(seats)
        return [(t, [s for s in want if s not in owners]) for t, owners in self.since(at)]

    def wait_owned(self, seats: Iterable[str], *, not_by: str, after: float, timeout: float) -> float | None:
        """Wall time of the first sample after ``after`` in which every seat of ``seats`` is owned by
        a node other than ``not_by``; None when none came within ``timeout`` seconds."""
        want = list(seats)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, owners in self.since(after):
                if all(owners.get(s) not in (None, not_by) for s in want):
                    return t
            time.sleep(self.every / 2)
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class LogHistory:
    """Every incarnation's log, read incrementally (only new bytes are parsed on each refresh).

    Args:
        fleet: The fleet whose ``procs`` (label → process) are read.
        skews: Label → the clock offset (seconds) the incarnation ran under; its timestamps are
            shifted back by it.
    """

    def __init__(self, fleet: Fleet, skews: dict[str, int]) -> None:
        self.fleet = fleet
        self.skews = skews
        self._read: dict[str, tuple[int, History]] = {}
        self._lock = threading.Lock()

    def refresh(self) -> History:
        """The whole history so far, in time order."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> History:
        events = []
        for label, node in list(self.fleet.procs.items()):
            offset, part = self._read.get(label, (0, History()))
            path = Path(node.log_path)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end:
                lines = data[:end].decode(errors="replace").splitlines()
                skew = self.skews.get(label, 0)
                part.add(label, [_unskew(line, skew) for line in lines] if skew else lines)
            self._read[label] = (offset + end, part)
            events += part.events
        events.sort(key=lambda e: e.at)
        return History(events)


def _unskew(line: str, skew: int) -> str:
    if not line.startswith("{"):
        return line
    try:
        data = json.loads(line)
        stamp = datetime.fromisoformat(str(data["timestamp"]))
        data["timestamp"] = (stamp - timedelta(seconds=skew)).isoformat()
        if isinstance(data.get("sent_wall"), int | float):
            data["sent_wall"] = float(data["sent_wall"]) - skew
    except (ValueError, KeyError, TypeError):
        return line
    return json.dumps(data)


def commits_and_acks(h: History) -> tuple[dict[str, int], set[str], set[str]]:
    """What the history says was worked.

    Returns:
        ``(counts, done, ledgered)``: event id → ``seat_turn_committed`` lines naming it; the event
        ids completed (a commit line whose delivery was acked, or a ledgered one below); and the
        event ids with no commit line that a successor skipped as ``already_worked`` and acked —
        the ledger (written only after a turn's side effects, FL-88) says a turn completed, and the
        process that ran it was killed before it could log the commit line.
    """
    acked = {
        (e.seat, e.fields.get("stream_seq"))
        for e in h.named("inbox_acked")
        if e.fields.get("outcome") in ("ack", "term")
    }
    counts: dict[str, int] = {}
    done: set[str] = set()
    for e in h.named("seat_turn_committed"):
        for event_id in e.fields.get("event_ids") or []:
            counts[str(event_id)] = counts.get(str(event_id), 0) + 1
            if (e.seat, e.fields.get("stream_seq")) in acked:
                done.add(str(event_id))
    ledgered: set[str] = set()
    for e in h.named("turn_trigger_skipped"):
        if e.fields.get("reason") != "already_worked" or (e.seat, e.fields.get("stream_seq")) not in acked:
            continue
        ledgered.update(str(x) for x in e.fields.get("event_ids") or [] if str(x) not in counts)
    return counts, done | ledgered, ledgered


async def _ask(nc: Any, node: str, call: Call, timeout: float = 5.0) -> Any:
    msg = await nc.request(rpc_subject(node), encode_call(call), timeout=timeout)
    return decode_answer(msg.data)


def _servers(fleet: Fleet) -> list[str]:
    assert fleet.cluster is not None
    return [m.url for m in fleet.cluster.members if m.running]


def copies(fleet: Fleet, nodes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Node → ``{"position": [applied tracker, applied pages], "sha256": digest}`` (``estate.digest``).

    A node that does not answer is left out (the caller retries).
    """

    async def run() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        nc = await nats.connect(servers=_servers(fleet), connect_timeout=2, max_reconnect_attempts=1)
        try:
            for node in nodes:
                try:
                    answer = await _ask(nc, node, Call(op="estate.digest", args={}))
                    res = answer.result
                    out[node] = {
                        "position": [res["domains"][d]["applied"] for d in DOMAINS],
                        "sha256": res["digest"]["sha256"],
                    }
                except (nats.errors.Error, TimeoutError, KeyError, TypeError):
                    continue
        finally:
            await nc.close()
        return out

    return asyncio.run(run())


def present(fleet: Fleet, nodes: Iterable[str], objects: Iterable[str]) -> dict[str, set[str]]:
    """Node → the ``objects`` (``item:KEY``, ``page:ID``) its own copy holds (stale reads of it alone).

    Raises:
        RuntimeError: a node could not be asked (not answered, or its copy refused the read).
    """
    wanted = sorted(set(objects))

    async def run() -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        nc = await nats.connect(servers=_servers(fleet), connect_timeout=2, max_reconnect_attempts=1)
        try:
            for node in nodes:
                have: set[str] = set()
                for name in wanted:
                    kind, _, ident = name.partition(":")
                    op, args = (
                        ("work.get", {"key": ident}) if kind == "item" else ("pages.get", {"page_id": ident})
                    )
                    call = Call(op=op, args=args, read_level="stale", take_anyway=True, asker="chaos")
                    try:
                        answer = await _ask(nc, node, call)
                    except (nats.errors.Error, TimeoutError) as e:
                        raise RuntimeError(f"node {node} did not answer {op}: {type(e).__name__}") from None
                    if answer.status != "ran":
                        raise RuntimeError(f"node {node} ran nothing for {op}: {answer.reason}")
                    if answer.result is not None and not answer.error:
                        have.add(name)
                out[node] = have
        finally:
            await nc.close()
        return out

    return asyncio.run(run())
