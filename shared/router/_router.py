"""The estate router: every node reaches the estate through it (ES-32..ES-37).

Order of asking (ES-33): this node's own copy in-process when it is a data node whose copy is in
service; then the node that answered last; then the live data nodes named by presence leases (role
``data``) in a rendezvous-hash order of (asker, node) so askers spread; a node silent in the last
30 s goes last. Who is passed over (ES-34): a node answering ``ran_nothing`` (out of service,
behind the caller's floor, a refused write) is passed at once; a lagging copy is asked again last
with ``take_anyway``.

Repeat rules (ES-35): once a node *may* have run a write, a tracker write moves on under the same op
id (the ledger collapses it); a knowledge write that went unanswered is ``unknown`` and never sent
twice; an ``unvouched`` tracker write is asked of the next node before the caller is told ``unknown``.

Timeouts (ES-36): a read waits up to 10 s on one node, a write 60 s, never past the caller's
deadline. When nobody served, :class:`NobodyAnswered` lists what each data node said.

Floors (ES-37): the router keeps, per log, the furthest position its own writes were told landed;
every request carries the floor of its own domain's log.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import nats.errors
from nats.aio.client import Client

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable
from shared.estate import OPS, STREAMS, Answer, Call, OutcomeUnknown, ReadLevel, from_wire, mint_op_id
from shared.leases import live_data_nodes

from ._api import EstateCalls
from ._errors import AnswerTooLarge, NodeReply
from ._tour import Tour
from ._wire import decode_answer, encode_call, rpc_subject

__all__ = ["READ_WAIT", "SILENT_DEMOTION", "WRITE_WAIT", "EstateRouter", "LocalEstate"]

_log = logs.get("router")

READ_WAIT = 10.0
"""Seconds a read waits on one node before asking the next (ES-36)."""
WRITE_WAIT = 60.0
"""Seconds a write waits on one node (ES-36)."""
SILENT_DEMOTION = 30.0
"""A node silent within this many seconds is asked last (ES-33)."""
_VIEW_TTL = 2.0


class LocalEstate(Protocol):
    """This node's own copy as the router sees it (``shared.estate.EstateService``)."""

    node_id: str

    async def serve(self, call: Call) -> Answer:
        """Run one call."""

    def in_service(self, domain: str | None = None) -> bool:
        """True when the copy of ``domain`` is not out of service."""


def _rendezvous(asker: str, node: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{asker}\x1f{node}".encode()).digest()[:8], "big")


class EstateRouter(EstateCalls):
    """Routes estate calls to data nodes.

    Args:
        nc: The process's one connection.
        coord: The coordination store (presence leases name the data nodes).
        node_id: This node's id (the asker).
        local: Returns this node's own copy when it is a data node with an open estate, else None.
        read_wait: Seconds per node for a read (ES-36: 10).
        write_wait: Seconds per node for a write (ES-36: 60).

    Attributes:
        floors: Stream → the furthest sequence this process's writes were told landed (ES-37).
        last_answered: The node that answered last (asked first among peers, ES-33).
    """

    def __init__(
        self,
        nc: Client | None,
        coord: Coordination | None,
        *,
        node_id: str,
        local: Callable[[], LocalEstate | None] | None = None,
        read_wait: float = READ_WAIT,
        write_wait: float = WRITE_WAIT,
    ) -> None:
        self._nc = nc
        self._coord = coord
        self.node_id = node_id
        self._local = local or (lambda: None)
        self._read_wait = read_wait
        self._write_wait = write_wait
        self.floors: dict[str, int] = {}
        self.last_answered: str | None = None
        self._silent: dict[str, float] = {}
        self._view: tuple[float, list[str]] | None = None

    # -- who to ask ---------------------------------------------------------------------------

    async def data_nodes(self) -> list[str]:
        """Return the live data nodes named by presence leases (cached for 2 s).

        Raises:
            CoordinationUnavailable: presence could not be read and nothing is cached.
        """
        now = time.monotonic()
        if self._view is not None and now - self._view[0] < _VIEW_TTL:
            return list(self._view[1])
        if self._coord is None:
            return []
        try:
            nodes = await live_data_nodes(self._coord)
        except CoordinationUnavailable:
            if self._view is not None:
                return list(self._view[1])
            raise
        self._view = (now, nodes)
        return nodes

    def forget_view(self) -> None:
        """Drop the cached presence view (the next call re-reads it)."""
        self._view = None

    async def order(self, domain: str | None) -> list[str]:
        """Return the nodes to ask, in order (ES-33); this node first when its copy serves."""
        local = self._local()
        out: list[str] = []
        if local is not None and local.in_service(domain):
            out.append(self.node_id)
        try:
            peers = [n for n in await self.data_nodes() if n != self.node_id]
        except CoordinationUnavailable:
            peers = []
        peers.sort(key=lambda n: _rendezvous(self.node_id, n))
        if self.last_answered in peers:
            peers.remove(self.last_answered)
            peers.insert(0, self.last_answered)
        now = time.monotonic()
        peers.sort(
            key=lambda n: now - self._silent.get(n, -1e9) < SILENT_DEMOTION
        )  # stable: silent ones last
        return out + peers

    # -- asking ---------------------------------------------------------------------------------

    async def _ask(self, node: str, call: Call, wait: float) -> Answer:
        local = self._local()
        if node == self.node_id and local is not None:
            # asyncio.timeout, not wait_for: same deadline and TimeoutError, without wait_for's
            # extra task per call (~30 µs of a ~100 µs local read, issue 16)
            async with asyncio.timeout(wait):
                return await local.serve(call)
        if self._nc is None:
            raise nats.errors.NoRespondersError
        msg = await self._nc.request(rpc_subject(node), encode_call(call), timeout=wait)
        try:
            return decode_answer(msg.data)
        except ValueError as e:
            raise AnswerTooLarge(f"{node} answered something that is not an estate answer: {e}") from None

    async def call(
        self,
        op: str,
        args: dict[str, Any] | None = None,
        *,
        op_id: str | None = None,
        read_level: ReadLevel = "stale",
        min_position: str | None = None,
        timeout: float | None = None,
        node: str | None = None,
    ) -> Any:
        """Run one estate operation wherever it can be served.

        Args:
            op: An operation of :data:`shared.estate.OPS`.
            args: Its arguments.
            op_id: A write's operation id; minted here when None so every node asked sees the same id.
            read_level: The consistency level of a read (ES-25).
            min_position: A position token the answer must include (ES-27).
            timeout: The caller's deadline in seconds from now; caps every per-node wait. None: three
                per-node waits (30 s for a read, 180 s for a write).
            node: Ask only this node (admin calls: status, digest).

        Returns:
            The operation's result: ``{"data", "meta"}`` for reads, ``{"outcome", "op_id",
            "position", "position_token", "object"}`` for writes.

        Raises:
            EstateUsageError: the call was wrong (not found, invalid field, conflict, ``op_reused``...).
            OutcomeUnknown: a write whose fate is unknown (retry with the same ``op_id``).
            NobodyAnswered: no data node served it; carries what each said.
        """
        spec = OPS.get(op)
        if spec is None:
            raise ValueError(f"unknown estate operation {op!r}")
        domain, kind = spec
        if kind == "write" and not op_id:
            op_id = mint_op_id(op.replace(".", "-"))
        stream = STREAMS.get(domain or "", "")
        floors = {stream: self.floors[stream]} if stream in self.floors else {}
        per_node = self._write_wait if kind == "write" else self._read_wait
        # [our choice] with no deadline from the caller, three nodes' worth of waiting
        deadline = time.time() + (timeout if timeout is not None else 3 * per_node)
        # a knowledge write that may have run is never sent twice (ES-35)
        once = kind == "write" and domain == "pages"
        tour = await self._tour(domain, node)
        while (turn := await tour.next_target()) is not None:
            target, anyway = turn
            remaining = deadline - time.time()
            if remaining <= 0:
                tour.note(NodeReply(target, "not_asked", "the caller's deadline was spent"))
                continue
            wait = min(per_node, remaining)
            c = Call(
                op=op,
                args=dict(args or {}),
                op_id=op_id or "",
                floors=floors,
                read_level=read_level,
                min_position=min_position,
                deadline=deadline,
                take_anyway=anyway,
                asker=self.node_id,
            )
            ans = await self._try(target, c, wait, tour, once=once)
            if ans is None:
                continue
            if ans.status == "ran":
                return self._ran(target, ans, kind)
            tour.passed(target, anyway, ans)
            if ans.status == "unvouched" and domain == "pages":
                raise from_wire(ans.error or {"code": "unknown", "op_id": op_id, "detail": ans.detail})
        raise tour.gave_up(domain, op_id)

    async def _tour(self, domain: str | None, node: str | None) -> Tour:
        """The first targets of a call (ES-33): ``node`` alone, this node's serving copy, or the peers."""
        replies: list[NodeReply] = []
        local = self._local()
        peers_later = False
        if node:
            targets = [node]
        elif local is not None and local.in_service(domain):
            # this node's own copy first (ES-33); the peers are ordered only if it does not serve,
            # so a local call pays no presence read or sort (issue 16)
            targets, peers_later = [self.node_id], True
        else:
            targets = await self.order(domain)
            if local is not None and not local.in_service(domain):
                replies.append(
                    NodeReply(self.node_id, "not_serving", "this node's own copy is out of service")
                )

        async def peers() -> list[str]:
            return [t for t in await self.order(domain) if t != self.node_id]

        return Tour(targets, replies, peers_later=peers_later, peers=peers)

    async def _try(self, target: str, c: Call, wait: float, tour: Tour, *, once: bool) -> Answer | None:
        """Ask one node; a failure to answer is noted on the tour and gives None (ES-36).

        Raises:
            OutcomeUnknown: ``once`` (a knowledge write) and the node may have run it (ES-35).
        """
        try:
            ans = await self._ask(target, c, wait)
        except (TimeoutError, nats.errors.TimeoutError):
            self._silent[target] = time.monotonic()
            tour.note(NodeReply(target, "timeout", f"no answer within {wait:.1f} s"))
            if once:
                raise OutcomeUnknown(
                    c.op_id, f"{target} did not answer; a knowledge write is never sent twice (ES-35)"
                ) from None
            return None
        except nats.errors.NoRespondersError:
            tour.note(NodeReply(target, "no_responders", "nothing listens on its estate subject"))
            return None
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError) as e:
            tour.note(NodeReply(target, "broker_unreachable", type(e).__name__))
            return None  # the request never left this process: nothing ran
        except (nats.errors.Error, AnswerTooLarge) as e:
            tour.note(NodeReply(target, "broker_unreachable", f"{type(e).__name__}: {e}"))
            if once:
                raise OutcomeUnknown(
                    c.op_id, f"{target}: {type(e).__name__}; a knowledge write is never sent twice"
                ) from None
            return None
        self._silent.pop(target, None)
        return ans

    def _ran(self, target: str, ans: Answer, kind: str) -> Any:
        """The result of an answer that ran: its refusal raised, a write's floor raised (ES-37)."""
        self.last_answered = target if target != self.node_id else self.last_answered
        if ans.error is not None:
            raise from_wire(ans.error)
        if kind == "write" and isinstance(ans.result, dict):
            self._note_floor(ans.result.get("position"))
        return ans.result

    def _note_floor(self, position: Any) -> None:
        if isinstance(position, dict) and position.get("stream") in STREAMS.values():
            stream = str(position["stream"])
            self.floors[stream] = max(self.floors.get(stream, 0), int(position.get("seq") or 0))

    def note_position(self, token_or_dict: Any) -> None:
        """Raise this process's floor to a position it learnt of (ES-31: a wake's trigger position)."""
        if isinstance(token_or_dict, str):
            from shared.estate import Position

            p = Position.parse(token_or_dict)
            self._note_floor(p.as_dict())
        else:
            self._note_floor(token_or_dict)
