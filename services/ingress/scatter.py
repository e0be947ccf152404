"""The ingress side of history scatter reads (ES-79): ask every live node holding the history, at once.

Used by the turn and event routes (``services/ingress/api/routes/turns.py``, ``events.py``).

Turn reads ask every live node (each keeps its own ``node.db`` turns); event reads ask the live data
nodes (ES-77). "Live" is the presence lease (``shared.leases.fleet_view``). This node answers its own
share in-process; the others over ``crewlet.history.scatter.<node_id>`` on the node's one connection,
within :data:`shared.history.READ_BUDGET` (5 s, a constant of the build; ``ctx.extras
["history_read_budget"]`` overrides it in-process). The alarm ``history_partial`` is raised while the
latest turn read or the latest event read left a live node out, and cleared when both heard from all.
"""

from __future__ import annotations

from typing import Any

from shared import history, leases, logs
from shared.coordination import CoordinationUnavailable
from shared.estate import EventLog
from shared.estate._alarms import Alarms
from shared.records import TurnStore
from shared.runtime import NodeContext

__all__ = ["Scattered", "scatter"]

_log = logs.get("history")
ALARM = "history_partial"
REMEDY = (
    "a live node did not answer a history read within the read budget: its turns and events are "
    "left out of GET /turns and /events until it answers (see coverage.reasons); a node gone for good "
    "ages out of the fleet with its presence lease and takes its turn history with it (ES-80)"
)


class Scattered:
    """One scatter read's answers and coverage.

    Attributes:
        answers: Node → its answer (only nodes that answered this version).
        coverage: Who answered, who is missing, who speaks another version.
        holders: The nodes that were asked.
    """

    def __init__(
        self, answers: dict[str, dict[str, Any]], coverage: history.Coverage, holders: list[str]
    ) -> None:
        self.answers = answers
        self.coverage = coverage
        self.holders = holders

    def coverage_dict(self) -> dict[str, Any]:
        """The ``coverage`` object of the answer (plus ``partial``)."""
        return {**self.coverage.to_dict(), "partial": self.coverage.partial}


def _alarms(ctx: NodeContext) -> Alarms:
    a = ctx.extras.get("history_alarms")
    if not isinstance(a, Alarms):
        a = Alarms()
        ctx.extras["history_alarms"] = a
    return a


def _note_missing(ctx: NodeContext, family: str, missing: set[str]) -> None:
    state = ctx.extras.setdefault("history_missing", {})
    state[family] = missing
    union = sorted(set().union(*state.values()))
    _alarms(ctx).set(ALARM, bool(union), missing=union, remedy=REMEDY)


async def _holders(ctx: NodeContext, *, events: bool, local: bool, cov: history.Coverage) -> list[str]:
    """The live nodes holding this kind of history (this node when ``local``).

    When the lease store cannot be read (no quorum), the nodes of the last view read are asked
    instead and the answer is partial: ``(fleet view)`` is listed missing with the reason, since a
    node that joined meanwhile cannot be known.
    """
    nodes: set[str] = {ctx.node_id} if local else set()
    if ctx.coord is None:
        return sorted(nodes)
    cache: dict[bool, set[str]] = ctx.extras.setdefault("history_holders", {})
    try:
        view = await leases.fleet_view(ctx.coord)
    except CoordinationUnavailable as e:
        cov.reasons["(fleet view)"] = f"lease store unavailable, asked the nodes last seen live: {e}"
        cov.missing.append("(fleet view)")
        nodes |= cache.get(events, set())
    else:
        cache[events] = {
            str(n["id"]) for n in view["nodes"] if not events or "data" in (n.get("roles") or [])
        }
        nodes |= cache[events]
    if not local:
        nodes.discard(ctx.node_id)
    return sorted(nodes)


async def scatter(ctx: NodeContext, what: str, args: dict[str, Any]) -> Scattered:
    """Ask every live node holding ``what`` and wait at most the read budget.

    Args:
        ctx: This node.
        what: One of :data:`shared.history.WHATS`.
        args: The read's arguments (see :mod:`shared.history`).
    """
    is_events = what in history.EVENT_WHATS
    turns = ctx.extras.get("turns")
    turns = turns if isinstance(turns, TurnStore) else None
    log = ctx.extras.get("events")
    log = log if isinstance(log, EventLog) else None
    own = log is not None if is_events else True  # every node keeps turns; a booting one says not_ready
    pre = history.Coverage()
    holders = await _holders(ctx, events=is_events, local=own, cov=pre)

    async def local(req: dict[str, Any]) -> dict[str, Any]:
        return await history.answer_request(req, node_id=ctx.node_id, turns=turns, events=log)

    nc = ctx.link.nc if ctx.link is not None else None

    async def ask(subject: str, body: bytes, timeout: float) -> bytes:
        assert nc is not None
        msg = await nc.request(subject, body, timeout=timeout)
        return bytes(msg.data)

    budget = ctx.extras.get("history_read_budget")
    answers, cov = await history.gather(
        history.request(what, args),
        self_id=ctx.node_id,
        nodes=holders,
        local=local if own else None,
        ask=ask if nc is not None else None,
        budget=float(budget) if isinstance(budget, (int, float)) else history.READ_BUDGET,
    )
    cov.reasons.update(pre.reasons)
    cov.missing += [m for m in pre.missing if m not in cov.missing]
    _note_missing(
        ctx,
        "events" if is_events else "turns",
        set(cov.missing) | ({"(fleet view)"} if pre.reasons else set()),
    )
    return Scattered(answers, cov, holders)
