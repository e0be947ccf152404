"""The steady workload: signed GitHub deliveries, API messages, tracker writes, page writes.

One scheduler thread submits an operation every ``1 / rate`` seconds to a small pool (so one answer
held up by a stopped node does not slow the rate), through a live node with ingress chosen at random
(never a satellite: it serves only probes and ``/metrics``, FL-144). Every answer is recorded as an
:class:`Op`: ``accepted`` (the write or trigger was acknowledged), ``refused`` (a definite no: 4xx,
503 with a reason, the connection refused), or ``unknown`` (the request was sent and no definite
answer came back: a timeout, a reset, a 5xx saying so).

- **webhook**: a real delivery from ``shared/data/github-webhooks`` as it is, ``POST /webhooks/github``
  signed with the fleet's secret, a new ``X-GitHub-Delivery`` id — or, one time in four, the id and
  body of an earlier delivery again (a replay, within :data:`REPLAY_WINDOW` of the first: if the
  first was accepted, the replay must answer ``duplicate``, FL-122). A 202's ``routed[].event_id`` are accepted triggers.
- **message**: ``POST /seats/<seat>/messages`` with a unique text; the 202's ``event_id`` is an
  accepted trigger. Seats in :data:`TOOL_SEATS` create a work item titled with that text.
- **work**: ``POST /work`` (project ENG); a 201 is an acknowledged tracker write (``item:<key>``).
- **page**: ``POST /knowledge/pages`` (space ENG); a 200 is an acknowledged page write (``page:<id>``).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fleet.harness import SEATS, Fleet, sign
from tests.support.procs import SHARED, TOKEN

__all__ = ["TOOL_SEATS", "Op", "Workload"]

DELIVERIES = SHARED / "data" / "github-webhooks"
TOOL_SEATS = ("qa", "pm")
"""Seats whose turns create one work item titled with the trigger's text (the scripted model's rule)."""
TIMEOUT = 10.0
"""Seconds one request may take before its outcome is ``unknown``."""
REPLAY_WINDOW = 240.0
"""Seconds after its first send within which a delivery is replayed: inside the 5-minute dedupe
window of the ``claims`` bucket (FL-122), past which a redelivery is by design accepted again."""
WEIGHTS = {"message": 4, "webhook": 2, "work": 3, "page": 2}
"""Relative frequency of each operation."""


@dataclass
class Op:
    """One recorded operation and its answer.

    Attributes:
        round: The round it ran in (0: before the first fault).
        at: Wall time it was sent (seconds).
        kind: ``message``, ``webhook``, ``work`` or ``page``.
        via: The node asked.
        outcome: ``accepted``, ``refused``, ``duplicate``, ``ignored`` or ``unknown``.
        status: The HTTP status (0 when none came back).
        detail: The delivery id, event ids, object, or the error.
    """

    round: int
    at: float
    kind: str
    via: str
    outcome: str
    status: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


class Workload:
    """The steady workload against ``fleet`` (started paused: :meth:`resume` lets it run).

    Args:
        fleet: The booted fleet.
        rng: The run's seeded generator (choices only; timing is the machine's).
        rate: Operations per second.
    """

    def __init__(self, fleet: Fleet, rng: random.Random, rate: float = 4.0) -> None:
        self.fleet = fleet
        self.rng = rng
        self.rate = rate
        self.round = 0
        self.ops: list[Op] = []
        self.accepted: dict[str, str] = {}  # event id → seat
        self.titles: dict[str, str] = {}  # event id → the unique text of a tool seat's trigger
        self.acked: dict[str, int] = {}  # "item:KEY" / "page:ID" → round
        self.replays_reaccepted: list[str] = []
        self.avoid: set[str] = set()  # nodes being restarted: not asked
        self._deliveries = sorted(p for p in DELIVERIES.glob("*.json") if p.name != "ping.event.json")
        self._sent: list[tuple[str, Path, str, float]] = []  # (delivery id, payload, first outcome, sent at)
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="chaos-load")
        self._n = 0
        self._thread = threading.Thread(target=self._loop, name="chaos-workload", daemon=True)
        self._thread.start()

    # -- control -----------------------------------------------------------------------------

    def resume(self, round_no: int) -> None:
        self.round = round_no
        self._running.set()

    def pause(self, settle: float = TIMEOUT) -> None:
        """Stop submitting, and wait up to ``settle`` seconds for the answers in flight."""
        self._running.clear()
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and self._inflight():
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._running.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _inflight(self) -> int:
        with self._lock:
            return self._n

    def _loop(self) -> None:
        every = 1.0 / self.rate
        while not self._stop.is_set():
            if not self._running.wait(0.2):
                continue
            kinds = list(WEIGHTS)
            kind = self.rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
            seat = self.rng.choice(SEATS)
            replay = kind == "webhook" and bool(self._recent()) and self.rng.random() < 0.25
            with self._lock:
                self._n += 1
            self._pool.submit(self._one, kind, seat, replay)
            self._stop.wait(every)

    # -- one operation -----------------------------------------------------------------------

    def _via(self) -> str | None:
        """A live node with ingress (never a satellite: it serves only probes), not being restarted."""
        live = sorted(n for n in self.fleet.live() if n in self.fleet.names and n not in self.avoid)
        return self.rng.choice(live) if live else None

    def _one(self, kind: str, seat: str, replay: bool) -> None:
        try:
            via = self._via()
            if via is None:
                return
            op = Op(self.round, time.time(), kind, via, "unknown")
            try:
                if kind == "message":
                    self._message(op, seat)
                elif kind == "webhook":
                    self._webhook(op, replay)
                elif kind == "work":
                    self._write(op, "/work", {"project": "ENG", "title": f"chaos work {uuid.uuid4()}"})
                else:
                    body = {"space": "ENG", "title": f"chaos page {uuid.uuid4()}", "body": "written by chaos"}
                    self._write(op, "/knowledge/pages", body)
            except httpx.ConnectError as e:
                op.outcome, op.detail = "refused", {"error": f"{type(e).__name__}: {e}"}
            except httpx.HTTPError as e:
                op.outcome, op.detail = "unknown", {"error": f"{type(e).__name__}: {e}"}
            with self._lock:
                self.ops.append(op)
        finally:
            with self._lock:
                self._n -= 1

    def _post(self, via: str, path: str, **kw: Any) -> httpx.Response:
        url = self.fleet.nodes[via].url + path
        return httpx.post(url, timeout=TIMEOUT, **kw)

    def _classify(self, op: Op, r: httpx.Response) -> dict[str, Any]:
        op.status = r.status_code
        try:
            body = r.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        if r.status_code >= 500:
            # 503 with a reason code is a definite refusal; other 5xx (and "unknown outcome") are not
            code = str(body.get("code") or body.get("error") or "")
            op.outcome = "refused" if r.status_code == 503 and "unknown" not in r.text else "unknown"
            op.detail = {"code": code, "text": r.text[:200]}
        elif r.status_code >= 400:
            op.outcome, op.detail = "refused", {"text": r.text[:200]}
        return body

    def _message(self, op: Op, seat: str) -> None:
        text = f"chaos r{op.round} {uuid.uuid4()}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        r = self._post(op.via, f"/seats/{seat}/messages", json={"text": text}, headers=headers)
        body = self._classify(op, r)
        if r.status_code == 202:
            event_id = str(body["event_id"])
            op.outcome, op.detail = "accepted", {"event_id": event_id, "seat": seat}
            with self._lock:
                self.accepted[event_id] = seat
                if seat in TOOL_SEATS:
                    self.titles[event_id] = text

    def _webhook(self, op: Op, replay: bool) -> None:
        recent = self._recent() if replay else []
        replay = bool(recent)
        if replay:
            delivery, path, first, _ = self.rng.choice(recent)
        else:
            delivery, path, first = str(uuid.uuid4()), self.rng.choice(self._deliveries), ""
        body = path.read_bytes()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": path.name.split(".")[0],
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(body),
        }
        r = self._post(op.via, "/webhooks/github", content=body, headers=headers)
        answer = self._classify(op, r)
        op.detail = {**op.detail, "delivery": delivery, "payload": path.name, "replay": replay}
        if r.status_code == 202:
            # a trigger the inbox stream collapsed ("duplicate": the claim failed open, FL-33, and
            # the delivery was processed again) is no new trigger: its event id never runs
            entries = answer.get("routed") or []
            routed = {str(x["event_id"]): str(x["seat"]) for x in entries if not x.get("duplicate")}
            op.outcome = "accepted"
            op.detail["routed"] = routed
            op.detail["collapsed"] = sum(1 for x in entries if x.get("duplicate"))
            with self._lock:
                self.accepted.update(routed)
                if replay and first == "accepted" and routed:
                    self.replays_reaccepted.append(delivery)
        elif r.status_code == 200:
            op.outcome = str(answer.get("status") or "ignored")
        if not replay:
            with self._lock:
                self._sent.append((delivery, path, op.outcome, op.at))
        elif op.outcome == "accepted":
            with self._lock:  # a replay accepted after an unknown first answer is the first acceptance
                self._sent = [(d, p, "accepted" if d == delivery else f, t) for d, p, f, t in self._sent]

    def _recent(self) -> list[tuple[str, Path, str, float]]:
        """Deliveries first sent within :data:`REPLAY_WINDOW` seconds: a replay of one must be a duplicate."""
        now = time.time()
        with self._lock:
            return [x for x in self._sent if now - x[3] < REPLAY_WINDOW]

    def _write(self, op: Op, path: str, body: dict[str, Any]) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        r = self._post(op.via, path, json=body, headers=headers)
        answer = self._classify(op, r)
        if r.status_code in (200, 201):
            obj = answer.get("item") or answer.get("page") or {}
            if answer.get("outcome") == "applied" and isinstance(obj, dict):
                name = f"item:{obj['key']}" if "key" in obj else f"page:{obj['id']}"
                op.outcome, op.detail = "accepted", {"object": name}
                with self._lock:
                    self.acked[name] = op.round
            else:
                op.outcome, op.detail = "unknown", {"text": r.text[:200]}

    # -- what was recorded -------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(o) for o in self.ops]

    def first_accepted(self, kind: str, after: float) -> float | None:
        """Wall time of the first operation of ``kind`` sent after ``after`` and accepted."""
        with self._lock:
            got = [o.at for o in self.ops if o.kind == kind and o.at > after and o.outcome == "accepted"]
        return min(got) if got else None

    def record(self, op: Op) -> None:
        """Record an operation the nemesis made itself (the message a drain interrupts)."""
        with self._lock:
            self.ops.append(op)
            if op.outcome == "accepted":
                self.accepted[str(op.detail["event_id"])] = str(op.detail["seat"])
