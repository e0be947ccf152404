"""The reflect workers (AG-3..AG-6): episodist, persist decider, profiler.

Each is ``async (job) -> bool`` (True when it wrote or decided something, False when its own test
skipped it) and is looked up by name in :data:`WORKERS` at each pass, so a test's fault hook can
replace one (``reflect_worker:<name>``, a ``sitecustomize.py`` on the node's ``PYTHONPATH``).

- **episodist** (AG-4): one ``episodes`` row per settled turn, natural key ``(agent_handle,
  work_key)`` (else ``id``), so a redelivered twin collapses on the broker (FL-75).
- **persist decider** (AG-3): skipped when the turn called ``reflect_and_persist``, or the seat has
  no auxiliary model; else asks it for ``LONG: <fact>``, ``SHORT <days>: <fact>``, ``DOC: <note>``
  (logged only) or ``NOOP`` (default); an over-long proposal is dropped
  (``persist_decider_skipped``).
- **profiler** (AG-5): once per distinct sender; ``interaction_count`` rises once per ``(subject,
  work_key)``; traits (from the auxiliary model when the seat has one) over 4 KiB keep the old.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared import logs
from shared.config import Learning, OrgModel, Seat
from shared.memory import RoutedMemory
from shared.tools import MAX_DIARY_CHARS, SHORT_TTL_DAYS

from ._auxiliary import Auxiliary, auxiliary_keys

__all__ = ["ORDER", "TRAITS_MAX_BYTES", "WORKERS", "Job", "Worker"]

TRAITS_MAX_BYTES = 4096
"""A profile's traits, JSON-encoded, in bytes (AG-5, ours)."""
_DECISION = re.compile(r"^\s*(LONG|SHORT|DOC|NOOP)\b\s*(\d+)?\s*:?\s*(.*)$", re.S | re.I)

_log = logs.get("reflect")


@dataclass
class Job:
    """One pass's inputs, shared by its workers.

    Attributes:
        payload: The ``agent_turn_completed`` payload (:func:`shared.turns.completed_payload`).
        seat: The seat, from the applied org.
        org: The applied org.
        memory: Reads and writes of seats' memory.
        aux: The seat's auxiliary model.
        learning: The company's ``learning`` block.
    """

    payload: dict[str, Any]
    seat: Seat
    org: OrgModel
    memory: RoutedMemory
    aux: Auxiliary
    learning: Learning

    @property
    def turn_id(self) -> str:
        """The reflected turn."""
        return str(self.payload["turn_id"])

    def skipped(self, worker: str, gate: str, **detail: Any) -> bool:
        """Log a worker's own skip (``reflection_skipped``) and answer False."""
        _log.info("reflection_skipped", gate=gate, worker=worker, turn_id=self.turn_id, **detail)
        return False


Worker = Callable[[Job], Awaitable[bool]]


async def episodist(job: Job) -> bool:
    """Write the turn's episode (AG-4); a twin of the same work key collapses."""
    p = job.payload
    handle, work_key = job.seat.handle, str(p.get("work_key") or "")
    row = {
        "id": p["turn_id"],
        "agent_handle": handle,
        "agent_role": p.get("role") or job.seat.name,
        "turn_id": p["turn_id"],
        "work_key": work_key,
        "work_item": p.get("work_item"),
        "conversation_key": p.get("conversation_key"),
        "started_at": p.get("started_at"),
        "ended_at": p.get("ended_at"),
        "duration_ms": p.get("duration_ms"),
        "task_summary": p.get("task_summary", ""),
        "plan_summary": p.get("plan_summary", ""),
        "tool_sequence": list(p["tools_called"]),
        "skills_used": [],
        "outcome": p.get("outcome"),
        "review_outcome": p.get("review_outcome") or p["settled_as"],
        "embedding": None,
        "embedding_model": None,
        "kind": "raw",
        "count": 1,
        "consolidated_into_skill_id": None,
    }
    key = (handle, work_key) if work_key else (str(p["turn_id"]),)
    status = await job.memory.create(handle, "episodes", key, row)
    _log.info("episode_written", turn_id=job.turn_id, seat=handle, work_key=work_key, status=status)
    return True


def _decision_prompt(p: dict[str, Any]) -> tuple[str, str]:
    system = (
        "You keep a private diary for one agent seat. Decide whether the finished turn below taught a "
        "durable, declarative fact worth keeping (who prefers what, what blocks what), not an "
        "instruction. Answer with exactly one line: 'LONG: <fact>' to keep it, 'SHORT <days>: <fact>' "
        "to keep it for 1..365 days, 'DOC: <note>' when it belongs in the knowledge base instead, or "
        "'NOOP' when nothing is worth keeping."
    )
    user = (
        f"Task: {p.get('task_summary', '')}\nWhat was done: {p.get('plan_summary', '')}\n"
        f"Outcome: {p.get('outcome')} (review: {p.get('review_outcome')})\n"
        f"Tools: {', '.join(p['tools_called']) or 'none'}"
    )
    return system, user


async def persist_decider(job: Job) -> bool:
    """Ask the auxiliary model whether the turn leaves a diary entry (AG-3)."""
    p, name = job.payload, "persist_decider"
    if p["reflect_and_persist_ran"]:
        return job.skipped(name, "already_persisted")
    if p.get("review_outcome") == "self_iterate":
        return job.skipped(name, "not_settled")
    if not auxiliary_keys(job.seat):
        return job.skipped(name, "no_auxiliary_model")
    system, user = _decision_prompt(p)
    text = await job.aux.ask(
        job.seat, name, system, user, max_tokens=job.learning.reflect.summarize_max_tokens
    )
    m = _DECISION.match(text or "")
    verdict = m.group(1).upper() if m else "NOOP"
    if verdict == "NOOP":
        _log.info("persist_decided", turn_id=job.turn_id, decision="NOOP")
        return True
    content = m.group(3).strip() if m else ""
    if verdict == "DOC":
        _log.info("persist_decided", turn_id=job.turn_id, decision="DOC", note=content[:200])
        return True
    lo, hi = SHORT_TTL_DAYS
    days = int(m.group(2)) if m and m.group(2) else None
    if (
        not content
        or len(content) > MAX_DIARY_CHARS
        or (verdict == "SHORT" and not (days and lo <= days <= hi))
    ):
        _log.info(
            "persist_decider_skipped", turn_id=job.turn_id, decision=verdict, chars=len(content), days=days
        )
        return False
    kind = "diary_long" if verdict == "LONG" else "diary_short"
    now = time.time()
    row_id = job.memory.diary_id(str(job.seat.agent_id), content)
    row = {
        "id": row_id,
        "agent_handle": job.seat.handle,
        "kind": kind,
        "content": content,
        "source": name,
        "turn_id": p["turn_id"],
        "created_at": now,
        "ttl_until": now + days * 86400 if kind == "diary_short" and days else None,
        "retrieval_count": 0,
        "last_retrieved_at": None,
    }
    status = await job.memory.create(job.seat.handle, "agent_diary", (row_id,), row)
    _log.info("persist_decided", turn_id=job.turn_id, decision=verdict, status=status)
    return True


def _subject(job: Job, sender: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """``(subject_handle, subject_external_id, subject_platform, subject_name)``; None when unresolvable."""
    who, platform = str(sender.get("sender") or "").strip(), str(sender.get("platform") or "")
    if not who or not platform:
        return None
    for seat in (*job.org.seats, *job.org.humans):
        role = seat.role
        ids = {seat.handle, role.email or ""}
        for extra in (role.contact, role.identities):
            if extra is not None:
                ids |= {v for v in extra.model_dump().values() if isinstance(v, str)}
        if who.lstrip("@") in ids - {""}:
            return (seat.handle, "", "", seat.name) if seat.handle != job.seat.handle else None
    return ("", who, platform, who)


async def _traits(job: Job, old: dict[str, Any], subject: str, body: str) -> dict[str, Any]:
    if not auxiliary_keys(job.seat) or not body:
        return old
    system = (
        "Update what one agent seat privately knows about a counterparty. Answer only a JSON object of "
        "short traits (preferences, role, tone), merging the old traits with what the new message shows."
    )
    user = f"Counterparty: {subject}\nOld traits: {json.dumps(old)}\nNew message: {body}"
    text = await job.aux.ask(job.seat, "profiler", system, user, max_tokens=300)
    try:
        new = json.loads((text or "").strip().removeprefix("```json").removesuffix("```"))
    except ValueError:
        return old
    if not isinstance(new, dict):
        return old
    size = len(json.dumps(new).encode())
    if size > TRAITS_MAX_BYTES:
        _log.info("profile_traits_refused", turn_id=job.turn_id, subject=subject, bytes=size)
        return old
    return new


def _profile(
    cur: dict[str, Any] | None,
    *,
    observer: str,
    subject: tuple[str, str, str, str],
    traits: dict[str, Any],
    work_key: str,
    now: float,
) -> dict[str, Any] | None:
    """The profile after one interaction; the same row when this work key was counted (a no-op)."""
    if cur is not None and cur.get("last_work_key") == work_key:
        return cur
    return {
        "observer_handle": observer,
        "subject_handle": subject[0],
        "subject_external_id": subject[1],
        "subject_platform": subject[2],
        "subject_name": subject[3],
        "traits": traits,
        "first_seen_at": cur.get("first_seen_at", now) if cur else now,
        "last_updated_at": now,
        "last_corroborated_at": now,
        "interaction_count": int(cur.get("interaction_count", 0)) + 1 if cur else 1,
        "last_work_key": work_key,
    }


async def profiler(job: Job) -> bool:
    """Update the seat's profile of each distinct sender (AG-5)."""
    p, wrote = job.payload, False
    work_key = str(p.get("work_key") or p["turn_id"])
    seen: set[tuple[str, str, str]] = set()
    for sender in p["senders"]:
        subject = _subject(job, sender) if isinstance(sender, dict) else None
        if subject is None or subject[:3] in seen:
            continue
        seen.add(subject[:3])
        key = (job.seat.handle, *subject[:3])
        current = await _current(job, key)
        if current is not None and current.get("last_work_key") == work_key:
            continue  # this (subject, work key) was counted already
        old = current.get("traits") if current is not None else {}
        traits = await _traits(
            job, old if isinstance(old, dict) else {}, subject[3], str(sender.get("body") or "")
        )
        change = functools.partial(
            _profile,
            observer=job.seat.handle,
            subject=subject,
            traits=traits,
            work_key=work_key,
            now=time.time(),
        )
        done = await job.memory.update(job.seat.handle, "counterparty_profiles", key, change)
        _log.info(
            "profile_updated", turn_id=job.turn_id, subject=subject[0] or subject[1], status=done.status
        )
        wrote = True
    return wrote or job.skipped("profiler", "no_senders")


async def _current(job: Job, key: tuple[str, ...]) -> dict[str, Any] | None:
    rows = await job.memory.rows(job.seat.handle, ["counterparty_profiles"])
    for row in rows:
        if (
            row.get("observer_handle"),
            row.get("subject_handle"),
            row.get("subject_external_id"),
            row.get("subject_platform"),
        ) == key:
            return row
    return None


WORKERS: dict[str, Worker] = {
    "episodist": episodist,
    "persist_decider": persist_decider,
    "profiler": profiler,
}
"""The workers by name (looked up at each pass: the fault hook ``reflect_worker:<name>`` replaces one)."""
ORDER = ("episodist", "persist_decider", "profiler")
"""The run order (AG-6; the inline synthesizer and refiner come with AG-17, AG-18)."""
