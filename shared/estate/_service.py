"""One data node's estate, answering calls (ES-25..ES-29, ES-34, ES-37, ES-39, ES-40, ES-65).

:class:`EstateService` is what the router asks — in-process on a data node, over NATS from peers.
Before running anything it checks its copy: out of service (applier faulted or halted, ES-40) →
``ran_nothing: not_serving``; lagging (ES-39) → ``ran_nothing: lagging`` unless ``take_anyway``.
Every call then waits up to 2 s for the asker's floors and ``min_position`` (ES-27, ES-37), else
``behind``. Reads are served at the level asked (ES-25) and report the level and lag actually served.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from shared import logs

from . import _files, _pages, _pages_read, _tracker, _tracker_read
from ._applier import Applier
from ._decide import DecideCtx, Decision, Rules, ViewFn
from ._errors import EstateError, Fenced, InvalidField, OutcomeUnknown, Refused, to_wire
from ._ids import GENERATION, Position, mint_op_id, validate_op_id
from ._log import StateLog
from ._protocol import OPS, Answer, Call, Status
from ._store import EstateStore
from ._writer import Writer

__all__ = ["EstateService", "FLOOR_WAIT"]

_log = logs.get("statelog")

FLOOR_WAIT = 2.0
"""Seconds an answering node waits to have applied the asker's floors (ES-37)."""
_LEVELS = ("linearizable", "session", "stale", "consistent_prefix")

DecideFn = Callable[[Connection, DecideCtx, dict[str, Any]], Decision]
ReadFn = Callable[[Connection, dict[str, Any]], Any]


@dataclass(frozen=True)
class _Write:
    decide: DecideFn
    view: ViewFn


def _writes() -> dict[str, _Write]:
    return {
        "work.create": _Write(_tracker.decide_create, _tracker_read.task_view),
        "work.update": _Write(_tracker.decide_update, _tracker_read.task_view),
        "work.comment": _Write(_tracker.decide_comment, _tracker_read.comment_view),
        "project.upsert": _Write(_tracker.decide_project, lambda c, i: {"id": i}),
        "files.put": _Write(_files.decide_file_put, _files.file_row_view),
        "pages.write": _Write(_pages.decide_page, _pages_read.page_view),
        "space.upsert": _Write(_pages.decide_space, lambda c, i: {"key": i}),
    }


class EstateService:
    """A data node's copy, callable (ES-32: the router's local handler and the RPC server's backend).

    Args:
        node_id: This node's id.
        store: The estate file.
        log: The state logs.
        appliers: Domain → applier.
        rules: Company facts checked at decide time.
        floor_wait: Seconds to wait for floors (ES-37: 2).

    Attributes:
        on_write: Called with ``(op, call, answer)`` after every write that ran (the event log hook).
    """

    def __init__(
        self,
        *,
        node_id: str,
        store: EstateStore,
        log: StateLog,
        appliers: dict[str, Applier],
        rules: Rules | None = None,
        floor_wait: float = FLOOR_WAIT,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.log = log
        self.appliers = appliers
        self.rules = rules or Rules()
        self.writer = Writer(store, log, appliers)
        self._floor_wait = floor_wait
        self._writes = _writes()
        self._not_served_logged: set[str] = set()
        self.on_write: Callable[[str, Call, dict[str, Any]], None] | None = None
        self.fence_check: Callable[[str, int], Awaitable[bool]] | None = None
        """Set by the data role: ``fence_check(seat, epoch)`` is True while ``epoch`` may still write
        for ``seat`` (FL-74). A write whose args carry ``fence: {seat, epoch}`` is refused as
        :class:`Fenced` when it answers False; the check raising (the store could not be asked)
        refuses it retryably (``fence_unknown``)."""
        self._reads: dict[str, ReadFn] = {
            "work.list": _tracker_read.list_items,
            "work.get": _tracker_read.get_item,
            "work.catalogue": lambda c, a: _tracker_read.catalogue(c, self.rules, a),
            "projects.list": lambda c, a: _tracker_read.list_projects(c),
            "files.list": _files.list_files,
            "files.get": _files.get_file,
            "pages.get": _pages_read.get_page,
            "pages.list": _pages_read.list_pages,
            "pages.search": _pages_read.search_pages,
            "spaces.list": lambda c, a: _pages_read.list_spaces(c),
        }

    # -- state -------------------------------------------------------------------------------

    def positions(self) -> dict[str, int]:
        """Stream → the sequence this copy has applied."""
        return {a.stream: a.applied for a in self.appliers.values()}

    def copy_state(self, domain: str) -> str:
        """``serving``, ``lagging`` or ``out_of_service`` for ``domain``'s copy (ES-39, ES-40)."""
        state = self.appliers[domain].copy_state()
        if state == "out_of_service" and domain not in self._not_served_logged:
            self._not_served_logged.add(domain)
            _log.error(
                "estate_partition_not_served", domain=domain, reason=self.appliers[domain].halted or "faulted"
            )
        elif state != "out_of_service":
            self._not_served_logged.discard(domain)
        return state

    def in_service(self, domain: str | None = None) -> bool:
        """True when ``domain``'s copy (every domain's when None) is not out of service."""
        domains = [domain] if domain else list(self.appliers)
        return all(self.copy_state(d) != "out_of_service" for d in domains)

    def lagging(self, domain: str | None) -> bool:
        """True when ``domain``'s copy lags its log (ES-39)."""
        return domain is not None and self.copy_state(domain) == "lagging"

    # -- serving ---------------------------------------------------------------------------------

    def _answer(self, status: Status, **kw: Any) -> Answer:
        return Answer(status=status, node=self.node_id, positions=self.positions(), **kw)

    async def _check_fence(self, call: Call) -> None:
        """Refuse a seat's write made under an epoch it no longer holds (FL-74), before anything is appended."""
        fence = call.args.pop("fence", None)
        if not isinstance(fence, dict) or self.fence_check is None:
            return
        seat, epoch = str(fence.get("seat", "")), fence.get("epoch")
        if not isinstance(epoch, int):
            raise InvalidField("fence.epoch", "must be the seat's lease epoch (an integer)")
        try:
            ok = await self.fence_check(seat, epoch)
        except Exception as e:  # noqa: BLE001 - unknown: refuse retryably, never let a zombie through
            raise Refused(
                "fence_unknown", f"cannot check seat {seat!r}'s epoch: {e}", retry_after=1.0
            ) from None
        if not ok:
            _log.warning("estate_write_fenced", seat=seat, epoch=epoch, op=call.op, op_id=call.op_id)
            raise Fenced(seat, epoch)

    async def serve(self, call: Call) -> Answer:
        """Run one call against this copy; never raises for a refusal (it is in the answer)."""
        spec = OPS.get(call.op)
        if spec is None:
            return self._answer("ran", error=to_wire(InvalidField("op", f"unknown operation {call.op!r}")))
        domain, kind = spec
        if domain is not None:
            state = self.copy_state(domain)
            if state == "out_of_service":
                return self._answer(
                    "ran_nothing",
                    reason="not_serving",
                    detail=f"the {domain} copy on {self.node_id} is out of service",
                )
            if state == "lagging" and not call.take_anyway:
                a = self.appliers[domain]
                return self._answer(
                    "ran_nothing",
                    reason="lagging",
                    detail=f"{a.lag} records behind {a.stream}" if a.drained else "catching up since start",
                )
        try:
            if kind == "write":
                assert domain is not None
                await self._check_fence(call)
                result = await self._write(call, domain)
            else:
                result = await self._read(call, domain)
            return self._answer("ran", result=result)
        except Refused as r:
            return self._answer("ran_nothing", reason=r.refusal, detail=str(r), retry_after=r.retry_after)
        except OutcomeUnknown as u:
            return self._answer("unvouched", error=to_wire(u), detail=str(u))
        except EstateError as e:
            return self._answer("ran", error=to_wire(e))
        except Exception as e:  # noqa: BLE001 - a caller always gets an answer, never a traceback
            _log.error("estate_call_failed", op=call.op, error=f"{type(e).__name__}: {e}")
            if kind == "write":  # it may have been appended: only the ledger can tell (ES-35)
                lost = OutcomeUnknown(call.op_id or "", f"{type(e).__name__}: {e}")
                return self._answer("unvouched", error=to_wire(lost), detail=str(lost))
            return self._answer("ran_nothing", reason="failed", detail=f"{type(e).__name__}: {e}")

    async def _wait_floor(self, domain: str, call: Call) -> None:
        applier = self.appliers[domain]
        target = int(call.floors.get(applier.stream, 0) or 0)
        if call.min_position:
            target = max(target, Position.parse(call.min_position, domain=domain).seq)
        if target and not await applier.wait_applied(target, self._floor_wait):
            raise Refused(
                "behind",
                f"{self.node_id} has applied {applier.stream} to {applier.applied}, short of {target}",
                retry_after=1.0,
                node=self.node_id,
            )

    async def _write(self, call: Call, domain: str) -> dict[str, Any]:
        op_id = validate_op_id(call.op_id) if call.op_id else mint_op_id(call.op.replace(".", "-"))
        await self._wait_floor(domain, call)
        spec = self._writes[call.op]
        ctx = DecideCtx(op_id=op_id, writer=self.node_id, at=int(time.time() * 1_000_000), rules=self.rules)
        answer = await self.writer.write(
            domain, op_id, lambda conn: spec.decide(conn, ctx, call.args), spec.view
        )
        if self.on_write is not None:
            try:
                self.on_write(call.op, call, answer)
            except Exception as e:  # noqa: BLE001 - the event log must never fail a landed write
                _log.warning("estate_event_record_failed", op=call.op, error=f"{type(e).__name__}: {e}")
        return answer

    async def _read(self, call: Call, domain: str | None) -> dict[str, Any]:
        if domain is None:
            return await self._admin(call)
        level = call.read_level
        if level not in _LEVELS:
            raise InvalidField("read_level", f"{level!r} is not one of {', '.join(_LEVELS)}")
        if level == "session" and not call.min_position:
            raise InvalidField(
                "read_level", "session needs min_position; ask linearizable, or stale with min_position"
            )
        applier = self.appliers[domain]
        if applier.stalled():
            raise Refused(
                "stalled", f"the {domain} applier on {self.node_id} is not moving", node=self.node_id
            )
        await self._wait_floor(domain, call)
        if level == "linearizable":
            seq = await self.log.barrier(domain, op_id=mint_op_id(f"barrier-{domain}"), writer=self.node_id)
            budget = max(0.5, min(10.0, call.deadline - time.time())) if call.deadline else 10.0
            if not await applier.wait_applied(seq, budget):
                raise Refused(
                    "behind",
                    f"the barrier at {seq} was not applied within {budget:.1f} s",
                    retry_after=1.0,
                    node=self.node_id,
                )
        seen = applier.applied
        fn = self._reads[call.op]
        data = await self.store.read(lambda conn: fn(conn, call.args))
        if call.op == "pages.search":
            data = self._search_answer(data, call.args)
        pos = Position(applier.stream, GENERATION, seen)
        meta: dict[str, Any] = {
            "level": level,
            "position": pos.as_dict(),
            "position_token": pos.token(),
            "served_by": self.node_id,
        }
        if level == "stale":
            meta["lag"] = {"records": applier.lag}
        return {"data": data, "meta": meta}

    def _search_answer(self, hits: list[dict[str, Any]], args: dict[str, Any]) -> dict[str, Any]:
        building = not self.appliers["pages"].drained
        q = str(args.get("query", ""))
        if hits and building:
            sentence = "Results may be missing pages: the knowledge index here is still being built."
        elif hits:
            sentence = f"{len(hits)} page(s) matched."
        elif building:
            sentence = "The knowledge base is not searchable from here yet: its index is still being built."
        else:
            sentence = f"Nothing in the knowledge base matched {q!r}."
        state = "building" if building else ("ok" if hits else "empty")
        return {"hits": hits, "searched": True, "failed": False, "state": state, "sentence": sentence}

    async def _admin(self, call: Call) -> dict[str, Any]:
        status = {
            "node": self.node_id,
            "domains": {
                d: {
                    "stream": a.stream,
                    "applied": a.applied,
                    "log_last": a.log_last,
                    "lag": a.lag,
                    "state": self.copy_state(d),
                    "drained": a.drained,
                }
                for d, a in self.appliers.items()
            },
        }
        if call.op == "estate.digest":
            status["digest"] = await self.store.digest()
        return status
