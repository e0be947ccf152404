"""The eviction and readmission gestures (ES-51), run on one data node for the operator's CLI.

A gesture is judged once, before anything is written:

- ``evict`` of the node answering the request is refused (``self_evict``, even with ``force``:
  a node never evicts itself, so the last data node cannot be evicted from under its own API);
- ``evict`` is refused while the node holds a live presence lease (``node_live``; ``force``
  passes it), and when the leases cannot be read (``leases_unreadable``; ``force`` passes it and the
  gesture is logged ``statelog_evict_forced_unjudged``);
- ``readmit`` is refused while the node is below a trim floor on any log (``below_floor``,
  answering its position, the ``floor``, ``first_seq`` and ``generation``): it must adopt a
  snapshot first;
- the node id must follow the node-id rule, and ``confirm`` must repeat it exactly.

It then writes one gate record per counted log (tracker and pages, never vectors), each
answered ``applied`` (with its position), ``pending`` (on the log, not yet applied here within the
budget), ``unknown`` (sent, no acknowledgement: rerun with the same ``--op-id``) or ``not written``
(with the reason and the action). The node-side budget is one minute, and it is spent in a task
of its own, so a CLI that goes away mid-gesture does not cut it short. Rerunning with the same
gesture id (``--op-id``) finishes a partial gesture exactly once: record ids derive from the
gesture (see :func:`shared.estate._gates.gate_op_id`), the broker collapses a repeat inside its
2-minute window and the ledger answers one outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from typing import Any

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable

from .._errors import InvalidField, Refused
from ..domains import LOGS
from ..log._gates import gate_record
from ..log._ids import is_compacted, mint_op_id, validate_op_id
from ..log._log import AppendConflict, AppendUnanswered
from ..store import _sql as sql

__all__ = ["GESTURE_BUDGET", "GestureRefused", "run_gesture"]

_log = logs.get("statelog")
GESTURE_BUDGET = 60.0
"""Seconds the node spends writing and applying a gesture's records (ES-51)."""
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class GestureRefused(Exception):
    """A gesture judged and refused before anything was written.

    Attributes:
        code: ``self_evict``, ``node_live``, ``leases_unreadable``, ``below_floor``, ``confirm_mismatch``,
            ``invalid_node``, ``op_id_invalid``.
        detail: The sentence for the operator.
        facts: Extra fields (positions for ``below_floor``).
    """

    def __init__(self, code: str, detail: str, **facts: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.facts = facts


async def _live(coord: Coordination, node: str) -> bool:
    return await coord.get("leases", f"node.{node}") is not None


def _counted() -> tuple[str, ...]:
    """The logs a node is counted on (ES-47, ES-51): every registered log but the compacted ones
    (``usage``, ES-69), which are never trimmed and keep one message per subject (a gate record
    there would be overwritten by the next node's)."""
    return tuple(d for d in LOGS if not is_compacted(d))


async def _judge(
    est: Any, coord: Coordination | None, *, action: str, node: str, confirm: str, force: bool, writer: str
) -> bool:
    if not _NODE_RE.match(node):
        raise GestureRefused("invalid_node", f"{node!r} is not a node id (letters, digits, '.', '_', '-')")
    if confirm != node:
        raise GestureRefused("confirm_mismatch", f"--confirm must repeat the node id exactly ({node!r})")
    forced_unjudged = False
    if action == "evict" and node == writer:
        raise GestureRefused(
            "self_evict",
            f"{node} is the node answering this request: a node never evicts itself (it is live, and its "
            "own copy would go out of service); stop it, then ask another data node",
        )
    if action == "evict":
        try:
            live = coord is not None and await _live(coord, node)
        except CoordinationUnavailable as e:
            if not force:
                raise GestureRefused(
                    "leases_unreadable", f"the leases cannot be read ({e}); --force evicts without judging"
                ) from None
            forced_unjudged = True
            live = False
        if live and not force:
            raise GestureRefused(
                "node_live",
                f"{node} holds a live presence lease: stop it first, or pass --force to evict a running node",
            )
    else:
        for domain in _counted():
            below = await _below_floor(est, coord, domain, node)
            if below is not None:
                raise GestureRefused(
                    "below_floor",
                    f"{node} is below the {domain} log's trim floor: it must adopt a snapshot before it is readmitted",
                    domain=domain,
                    **below,
                )
    return forced_unjudged


async def _below_floor(est: Any, coord: Coordination | None, domain: str, node: str) -> dict[str, Any] | None:
    pos = 0
    floor = 0
    if coord is not None:
        with contextlib.suppress(CoordinationUnavailable, ValueError, KeyError):
            e = await coord.get("positions", f"{domain}.{node}")
            if e is not None:
                pos = int(json.loads(e.value).get("seq", 0))
        with contextlib.suppress(CoordinationUnavailable, ValueError, KeyError):
            f = await coord.get("trim_floors", domain)
            if f is not None:
                floor = int(json.loads(f.value).get("floor", 0))
    first, _last = await est.log.head(domain)
    if pos + 1 < first or pos < floor:
        return {"position": pos, "floor": floor, "first_seq": first, "generation": 1}
    return None


async def _one_log(est: Any, domain: str, rec: Any, deadline: float) -> dict[str, Any]:
    def seen(conn: Any) -> Any:
        return sql.one(
            conn, "SELECT seq FROM statelog_ledger WHERE domain = ? AND op_id = ?", (domain, rec.op_id)
        )

    row = await est.store.read(seen)
    if row is not None:
        return {"log": domain, "outcome": "applied", "position": int(row[0]), "op_id": rec.op_id}
    try:
        seq, duplicate = await est.log.append(rec, expect=None)
    except AppendUnanswered as e:
        return {
            "log": domain,
            "outcome": "unknown",
            "op_id": rec.op_id,
            "detail": str(e),
            "action": "rerun with the same --op-id",
        }
    except (Refused, AppendConflict) as e:
        return {
            "log": domain,
            "outcome": "not written",
            "op_id": rec.op_id,
            "reason": str(e),
            "action": "rerun with the same --op-id once the log answers",
        }
    applier = est.appliers[domain]
    ok = await applier.wait_applied(seq, max(0.0, deadline - time.monotonic()))
    return {
        "log": domain,
        "outcome": "applied" if ok else "pending",
        "position": seq,
        "duplicate": duplicate,
        "op_id": rec.op_id,
    }


async def run_gesture(
    est: Any,
    coord: Coordination | None,
    *,
    action: str,
    node: str,
    confirm: str,
    writer: str,
    force: bool = False,
    gesture: str = "",
    budget: float = GESTURE_BUDGET,
) -> dict[str, Any]:
    """Judge, then write the gate record of ``action`` on ``node`` to every counted log (ES-51).

    Args:
        est: This data node's open :class:`~shared.estate.Estate`.
        coord: The coordination store (presence, positions, floors), or None on a solo local node.
        action: ``evict`` or ``readmit``.
        node: The node the gesture is about; ``confirm`` must repeat it.
        writer: This node's id (the records' writer).
        force: ``evict`` only: pass the live-lease and unreadable-lease refusals.
        gesture: A gesture id to finish (``--op-id``); ``""`` mints a fresh one.
        budget: Seconds for writing and applying (60).

    Returns:
        ``{"gesture", "action", "node", "forced_unjudged", "logs": [per-log answer]}`` (see the
        module docstring for each log's ``outcome``).

    Raises:
        GestureRefused: judged and refused; nothing was written.
    """
    if action not in ("evict", "readmit"):
        raise GestureRefused("invalid_action", f"{action!r} is not evict or readmit")
    if gesture:
        try:
            validate_op_id(gesture, field="op_id")
        except InvalidField as e:
            raise GestureRefused(
                "op_id_invalid", f"--op-id {gesture!r} was not minted by this engine: {e}"
            ) from None
    forced = await _judge(est, coord, action=action, node=node, confirm=confirm, force=force, writer=writer)
    gesture = gesture or mint_op_id(f"{action}-{node}")
    if forced:
        _log.warning("statelog_evict_forced_unjudged", node=node, gesture=gesture)
    at = int(time.time() * 1_000_000)
    deadline = time.monotonic() + budget
    counted = _counted()
    recs = [
        gate_record(domain=d, action=action, node=node, gesture=gesture, writer=writer, at=at)
        for d in counted
    ]
    # its own task: a caller that goes away does not cut the gesture short (ES-51)
    task = asyncio.ensure_future(
        asyncio.gather(*(_one_log(est, d, r, deadline) for d, r in zip(counted, recs, strict=True)))
    )
    logs_out = await asyncio.shield(task)
    _log.info(
        f"statelog_node_{'evicted' if action == 'evict' else 'readmitted'}",
        node=node,
        gesture=gesture,
        outcomes={x["log"]: x["outcome"] for x in logs_out},
    )
    return {
        "gesture": gesture,
        "action": action,
        "node": node,
        "forced_unjudged": forced,
        "logs": list(logs_out),
    }
