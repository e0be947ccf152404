"""Recall's pure parts (AG-8): which diary rows, episodes and profiles a turn sees, and their text.

No embeddings exist yet (the semantic search issue brings them), so the candidate pool of
``personal_memory`` is the live diary's **recency top-50 ∪ word-match top-50** (≤ 100), ranked by
shared words with the trigger, then by age; the digest is at most 4 000 characters.
``similar_prior_work`` is the top 3 of the seat's episodes by shared words with the trigger, then
recency; ``counterparties`` is one profile per trigger sender, ≤ 1 000 characters each. A trigger
is *thin* (AG-8) when it carries no words of its own to match: a tracker wake (source ``work``
without text) or a short webhook (fewer than :data:`THIN_WORDS` words).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from shared.turns import Trigger

__all__ = [
    "COUNTERPARTY_CHARS",
    "DIGEST_CHARS",
    "EPISODES_SHOWN",
    "POOL_EACH",
    "THIN_WORDS",
    "candidates",
    "counterparty_text",
    "digest",
    "episode_text",
    "is_thin",
    "live_diary",
    "normal_hint",
    "senders",
    "similar_episodes",
    "words",
]

POOL_EACH = 50
"""Rows taken by recency, and by word match, into the candidate pool (AG-8: top-50 ∪ recent-50)."""
DIGEST_CHARS = 4_000
"""Most characters of the ``personal_memory`` digest (AG-8 [ours])."""
EPISODES_SHOWN = 3
"""Episodes in ``similar_prior_work`` (AG-8)."""
COUNTERPARTY_CHARS = 1_000
"""Most characters per sender in ``counterparties`` (AG-8 [ours])."""
THIN_WORDS = 4
"""A non-API trigger with fewer words than this is thin: "go read it" (ours)."""

_WORD = re.compile(r"[a-z0-9][a-z0-9_-]{2,}")
_STOP = frozenset(
    "the and for with that this from have has was were are you your our not but all any can will "
    "its into out about what when who how why which there their them they then than been also "
    "please thanks".split()
)


def words(text: str) -> set[str]:
    """Lower-cased words of three or more characters, common ones left out."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def normal_hint(hint: str) -> str:
    """A hint compared case- and space-insensitively (AG-8's repeat rule)."""
    return " ".join(hint.lower().split())


def is_thin(trigger: Trigger) -> bool:
    """True for a trigger that says "go read it" (AG-8): a tracker wake, a short webhook."""
    text = trigger.text.strip()
    if trigger.source == "work" and not text:
        return True
    return trigger.source != "api" and len(words(text)) < THIN_WORDS


def _created(row: dict[str, Any]) -> float:
    value = row.get("created_at") or row.get("ended_at") or row.get("started_at")
    if isinstance(value, (int, float)):
        return float(value)
    return float(row.get("_at", 0)) / 1_000_000


def live_diary(rows: Iterable[dict[str, Any]], now: float | None = None) -> list[dict[str, Any]]:
    """The diary rows still in force (a short entry past ``ttl_until`` is not), newest first."""
    now = time.time() if now is None else now
    out = []
    for row in rows:
        if row.get("_table", "agent_diary") != "agent_diary" or not row.get("content"):
            continue
        ttl = row.get("ttl_until")
        if row.get("kind") == "diary_short" and isinstance(ttl, (int, float)) and ttl < now:
            continue
        out.append(row)
    out.sort(key=_created, reverse=True)
    return out


def _score(row_words: set[str], query: set[str]) -> int:
    return len(row_words & query)


def candidates(diary: Sequence[dict[str, Any]], query: str) -> list[dict[str, Any]]:
    """Recency top-50 ∪ word-match top-50 (≤ 100), best first: shared words, then newest."""
    q = words(query)
    recent = list(diary[:POOL_EACH])
    scored = [(r, _score(words(str(r.get("content", ""))), q)) for r in diary]
    matched = [r for r, s in sorted(scored, key=lambda x: -x[1]) if s > 0][:POOL_EACH]
    pool: dict[str, dict[str, Any]] = {}
    for row in matched + recent:
        pool.setdefault(str(row.get("_subject") or row.get("id")), row)
    ranked = sorted(
        pool.values(), key=lambda r: (_score(words(str(r.get("content", ""))), q), _created(r)), reverse=True
    )
    return ranked


def digest(rows: Sequence[dict[str, Any]], limit: int = DIGEST_CHARS) -> tuple[str, list[dict[str, Any]]]:
    """``- content`` lines until ``limit`` characters; the rows that fit (the *selected* ones)."""
    lines: list[str] = []
    used = 0
    fitted = []
    for row in rows:
        line = "- " + " ".join(str(row.get("content", "")).split())
        if used + len(line) + 1 > limit:
            if not lines:  # one entry longer than the budget still shows, cut
                lines.append(line[: limit - 1] + "…")
                fitted.append(row)
            break
        lines.append(line)
        used += len(line) + 1
        fitted.append(row)
    return "\n".join(lines), fitted


def similar_episodes(episodes: Iterable[dict[str, Any]], handle: str, query: str) -> list[dict[str, Any]]:
    """The seat's top 3 episodes by shared words with ``query``, then the newest."""
    q = words(query)
    own = [e for e in episodes if e.get("agent_handle", handle) == handle]

    def key(e: dict[str, Any]) -> tuple[int, float]:
        text = f"{e.get('task_summary', '')} {e.get('plan_summary', '')}"
        return _score(words(text), q), _created(e)

    return sorted(own, key=key, reverse=True)[:EPISODES_SHOWN]


def episode_text(episodes: Sequence[dict[str, Any]]) -> str:
    """One paragraph per episode: what the task was, what was done, how it was reviewed."""
    out = []
    for e in episodes:
        head = f"- {e.get('work_key') or e.get('turn_id') or '?'}: {' '.join(str(e.get('task_summary', '')).split())}"
        plan = " ".join(str(e.get("plan_summary", "")).split())
        tail = f" (outcome: {e.get('review_outcome') or e.get('outcome') or '?'})"
        out.append(head + (f"\n  Done: {plan[:400]}" if plan else "") + tail)
    return "\n".join(out)


def senders(trigger: Trigger) -> list[str]:
    """The trigger's distinct senders (a merged trigger's parts each count), in order."""
    out: list[str] = []
    for part in trigger.parts or (trigger,):
        if part.sender and part.sender not in out:
            out.append(part.sender)
    return out


def counterparty_text(profiles: Iterable[dict[str, Any]], who: Sequence[str]) -> tuple[str, int]:
    """One block per sender with a profile (≤ 1 000 characters each); the text and the count."""
    by: dict[str, dict[str, Any]] = {}
    for prof in profiles:
        for name in (prof.get("subject_handle"), prof.get("subject_external_id"), prof.get("subject_name")):
            if isinstance(name, str) and name:
                by.setdefault(name, prof)
    blocks = []
    for sender in who:
        found = by.get(sender)
        if found is None:
            continue
        p = found
        traits = p.get("traits")
        traits_text = (
            json.dumps(traits, ensure_ascii=False) if isinstance(traits, (dict, list)) else str(traits or "")
        )
        block = (
            f"### {p.get('subject_name') or sender} ({sender})\n"
            f"Interactions: {p.get('interaction_count', 0)}; last on {p.get('last_work_key') or '-'}\n{traits_text}"
        )
        blocks.append(block[:COUNTERPARTY_CHARS])
    return "\n\n".join(blocks), len(blocks)
