"""Divided knowledge search: the 64 buckets split among the live data nodes (ES-61..ES-64, FL-146).

Every data node holds every page, stamped with a search bucket (``search_shard``, ES-60). A search
stays whole on the node that answers it (ES-61) while the corpus has at most :data:`DIVIDE_AT`
pages or presence names one live data node. Above that (ES-62) the answering node coordinates:

1. **Assignment.** The live data node ids (presence leases with role ``data``, read at most every
   :data:`VIEW_TTL` seconds, this node always among them) are sorted and given contiguous bucket
   ranges, the remainder to the first ones (:func:`assign`: 64 over 3 → 0..21, 22..42, 43..63).
   Nodes without ``data`` never receive a range. Adding or losing a node re-divides on the next
   search once presence says so.
2. **Scan.** The coordinator scans its own range in-process (``pages.search`` with ``buckets``,
   through the copy's own checks: floors, lag, service state) and sends each peer one core NATS
   request on ``crewlet.search.slice.<peer>`` (:func:`slice_subject`; no stream, consumer, ack or
   audit record) carrying the query, the limit, the asker's floors and the whole assignment table;
   each peer answers its own row only (:class:`SliceResponder`), the same way.
3. **Merge (ES-63).** ``bm25()`` reads the whole FTS5 table's statistics on every node while a slice
   keeps only its range's rows, so scores compare across nodes. Each slice returns its best
   ``limit`` hits with their ranking class; the coordinator merges by ``(rank_class, bm25, page
   id)`` — exactly the undivided ``ORDER BY`` — and keeps ``limit``: the divided answer equals the
   undivided one. (No vector estate exists yet, so there is no second list to fuse and
   ``semantic_skipped`` is always false.)
4. **Partial answers (ES-64).** A peer that does not answer within :data:`SLICE_WAIT` (kept under
   the router's 10 s read wait on the coordinator, ES-36, so the asker hears the partial answer
   instead of timing out), answers nothing (no responders, refused, failed), or whose index has not
   finished its first lap (``building``), has its buckets counted missing. The answer then carries
   ``partial: {buckets_answered, buckets_missing, absent_nodes, semantic_skipped}`` and a sentence
   naming how many of the 64 slices were not searched and advising to search again or ask a
   colleague; it is logged as ``search_scoped``. It is never "nothing matched" and never an error.

A divided answer's ``data`` also carries ``coverage`` (``buckets_answered``, ``buckets_missing``)
and ``divided``: ``{"coordinator", "assignment": {node: [lo, hi]}, "scanned": {node: [lo, hi]}}``,
``scanned`` being the range each node reported it ran. Each node counts the slices it scanned in
``crewlet_search_slices_total{lo, hi}`` and the coordinated answers in
``crewlet_search_divided_total{outcome}`` (``whole`` / ``partial``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client import REGISTRY, Counter

from shared import logs
from shared.broker import Responder
from shared.coordination import Coordination, CoordinationUnavailable
from shared.leases import live_data_nodes

from ..._errors import EstateError
from ..._protocol import Answer, Call
from ...log._ids import BUCKETS
from ...store._fts import lexical_query
from ...store._store import EstateStore, FastConn
from .. import vectors
from ._hybrid import fuse_answer, merge_lexical
from ._read import bucket_range

__all__ = [
    "COUNT_TTL",
    "DIVIDE_AT",
    "SLICE_PREFIX",
    "SLICE_WAIT",
    "VIEW_TTL",
    "DividedSearch",
    "SliceResponder",
    "assign",
    "merge_hits",
    "slice_subject",
]

_log = logs.get("search")

DIVIDE_AT = 10_000
"""A corpus of at most this many pages is searched whole by the node asked (ES-61, ES-62)."""
SLICE_WAIT = 4.0
"""Seconds the coordinator waits for a peer's slice (ES-64; under the router's 10 s read wait, ES-36)."""
VIEW_TTL = 2.0
"""Seconds the live data nodes read from presence are reused."""
COUNT_TTL = 2.0
"""Seconds the page count that decides ES-61 is reused."""
SLICE_PREFIX = "crewlet.search.slice"
_VERSION = 1
Serve = Callable[[Call], Awaitable[Answer]]


def slice_subject(node_id: str) -> str:
    """Return ``crewlet.search.slice.<node id>``, the id escaped into one subject token.

    Node ids may hold ``.`` (FL-9), which would split the token: ``%`` becomes ``%25`` and ``.``
    becomes ``%2E`` (``%`` is outside the node id grammar, so the escape is one to one).
    """
    return f"{SLICE_PREFIX}.{node_id.replace('%', '%25').replace('.', '%2E')}"


def assign(nodes: list[str], buckets: int = BUCKETS) -> dict[str, tuple[int, int]]:
    """Divide ``buckets`` among ``nodes`` (ES-62): sorted ids, contiguous ranges, remainder first.

    Args:
        nodes: The live data node ids (any order; duplicates count once).
        buckets: How many buckets (64, fixed: ES-60).

    Returns:
        Node id → ``(lo, hi)`` inclusive, in sorted id order; 64 over 3 nodes gives 22, 21, 21
        buckets. With more nodes than buckets the last nodes get no range (they are left out).

    Raises:
        ValueError: no node.
    """
    ids = sorted(set(nodes))
    if not ids:
        raise ValueError("a divided search needs at least one data node")
    size, extra = divmod(buckets, len(ids))
    out: dict[str, tuple[int, int]] = {}
    lo = 0
    for i, node in enumerate(ids):
        n = size + (1 if i < extra else 0)
        if n == 0:
            continue
        out[node] = (lo, lo + n - 1)
        lo += n
    return out


def merge_hits(slices: list[list[dict[str, Any]]], limit: int) -> list[dict[str, Any]]:
    """Merge slices' hits into the undivided order and keep ``limit`` (ES-63).

    Each hit carries ``rank_class``, ``bm25`` (raw, lower is better) and ``page_id``; the order is
    ``search_pages``' ``ORDER BY rank_class, score, p.id``. The returned hits are the public shape
    (``page_id, space, title, snippet, score``), without the merge's fields.
    """
    every = [h for hits in slices for h in hits]
    every.sort(key=lambda h: (int(h["rank_class"]), float(h["bm25"]), str(h["page_id"])))
    return [
        {k: v for k, v in h.items() if k not in ("rank_class", "bm25", "search_shard")} for h in every[:limit]
    ]


def _counter(name: str, doc: str, labels: list[str]) -> Counter:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    if isinstance(existing, Counter):
        return existing
    return Counter(name, doc, labels)


_SLICES = _counter(
    "crewlet_search_slices", "Search slices this node scanned, by bucket range (ES-62).", ["lo", "hi"]
)
_DIVIDED = _counter(
    "crewlet_search_divided", "Divided searches this node coordinated, by outcome (ES-64).", ["outcome"]
)


def _slice_call(call: Call, lo: int, hi: int) -> Call:
    return Call(
        op="pages.search",
        args={**call.args, "buckets": [lo, hi]},
        floors=dict(call.floors),
        read_level=call.read_level,
        min_position=call.min_position,
        deadline=call.deadline,
        take_anyway=call.take_anyway,
        asker=call.asker,
    )


def _answer_dict(ans: Answer) -> dict[str, Any]:
    return {
        "status": ans.status,
        "node": ans.node,
        "result": ans.result,
        "error": ans.error,
        "reason": ans.reason,
        "detail": ans.detail,
    }


async def _run_slice(serve: Serve, call: Call, lo: int, hi: int) -> Answer:
    _SLICES.labels(lo=str(lo), hi=str(hi)).inc()
    return await serve(_slice_call(call, lo, hi))


class DividedSearch:
    """A data node's ``pages.search``, divided among the live data nodes when the corpus is large.

    Args:
        nc: The node's one connection (None: never divides).
        coord: The coordination store; presence names the live data nodes (None: never divides).
        node_id: This node's id.
        store: This node's estate file (the page count of ES-61).
        serve: The copy's own call handler (``EstateService.serve``); every other operation, every
            whole search and every slice goes to it.
        divide_at: The page count above which a search is divided (ES-61: :data:`DIVIDE_AT`).
        slice_wait: Seconds to wait for a peer's slice (:data:`SLICE_WAIT`).
    """

    def __init__(
        self,
        nc: Client | None,
        coord: Coordination | None,
        *,
        node_id: str,
        store: EstateStore,
        serve: Serve,
        divide_at: int = DIVIDE_AT,
        slice_wait: float = SLICE_WAIT,
    ) -> None:
        self._nc = nc
        self._coord = coord
        self.node_id = node_id
        self._store = store
        self._serve = serve
        self.divide_at = divide_at
        self.slice_wait = slice_wait
        self._view: tuple[float, list[str]] | None = None
        self._count: tuple[float, int] | None = None

    async def live_data_nodes(self) -> list[str]:
        """Return the sorted live data node ids, this node included (presence, reused :data:`VIEW_TTL` s).

        A presence store that cannot be read leaves the last view standing, or this node alone.
        """
        now = time.monotonic()
        if self._view is not None and now - self._view[0] < VIEW_TTL:
            return list(self._view[1])
        nodes = {self.node_id}
        if self._coord is not None:
            try:
                nodes.update(await live_data_nodes(self._coord))
            except CoordinationUnavailable:
                return list(self._view[1]) if self._view is not None else [self.node_id]
        view = sorted(nodes)
        self._view = (now, view)
        return list(view)

    async def indexed(self) -> int:
        """Return how many pages this copy holds (reused :data:`COUNT_TTL` s; ES-61's measure)."""
        now = time.monotonic()
        if self._count is not None and now - self._count[0] < COUNT_TTL:
            return self._count[1]
        n = await self._store.read(
            lambda conn: int(conn.exec_driver_sql("SELECT count(*) FROM pages").scalar() or 0)
        )
        self._count = (now, n)
        return n

    async def serve(self, call: Call) -> Answer:
        """Answer one call: a knowledge search divided when ES-62 says so, anything else as the copy does.

        Never raises for a peer's silence or failure: that is a partial answer (ES-64).
        """
        if call.op != "pages.search" or "buckets" in call.args or self._nc is None:
            return await self._serve(call)
        nodes = await self.live_data_nodes()
        if len(nodes) <= 1 or await self.indexed() <= self.divide_at:
            return await self._serve(call)  # ES-61: whole, from this copy
        query = call.args.get("query")
        try:  # refuse a bad query here, as the whole search would, before asking anyone
            lexical_query(query if isinstance(query, str) else "", field="q")
        except EstateError:
            return await self._serve(call)
        try:
            return await self._divided(call, assign(nodes))
        except Exception as e:  # noqa: BLE001 - never a 500 for a search: fall back to the whole scan
            _log.error("search_divide_failed", error=f"{type(e).__name__}: {e}")
            return await self._serve(call)

    async def _ask_peer(self, peer: str, call: Call, table: dict[str, tuple[int, int]]) -> Answer:
        assert self._nc is not None
        remaining = call.deadline - time.time() if call.deadline else self.slice_wait
        wait = max(0.1, min(self.slice_wait, remaining))
        body = {
            "v": _VERSION,
            "args": {
                k: v
                for k, v in call.args.items()
                if k in ("query", "space", "limit", "mode", "vector", "model", "dims")
            },
            "assignment": {n: list(r) for n, r in table.items()},
            "floors": call.floors,
            "min_position": call.min_position,
            "read_level": call.read_level,
            "deadline": call.deadline,
            "asker": call.asker or self.node_id,
        }
        try:
            msg = await self._nc.request(slice_subject(peer), json.dumps(body).encode(), timeout=wait)
        except (TimeoutError, nats.errors.TimeoutError):
            return Answer("ran_nothing", peer, reason="timeout", detail=f"no answer within {wait:.1f} s")
        except nats.errors.NoRespondersError:
            return Answer(
                "ran_nothing", peer, reason="no_responders", detail="nothing listens on its slice subject"
            )
        except nats.errors.Error as e:
            return Answer("ran_nothing", peer, reason="broker_unreachable", detail=f"{type(e).__name__}: {e}")
        try:
            raw = json.loads(msg.data)
            return Answer(
                status=raw["status"],
                node=str(raw.get("node") or peer),
                result=raw.get("result"),
                error=raw.get("error"),
                reason=str(raw.get("reason") or ""),
                detail=str(raw.get("detail") or ""),
            )
        except (ValueError, TypeError, KeyError) as e:
            return Answer("ran_nothing", peer, reason="protocol", detail=f"not a slice answer: {e}")

    async def _divided(self, call: Call, table: dict[str, tuple[int, int]]) -> Answer:
        limit = call.args.get("limit", 5)
        peers = [n for n in table if n != self.node_id]
        asks = {p: asyncio.create_task(self._ask_peer(p, call, table)) for p in peers}
        try:
            if self.node_id in table:
                lo, hi = table[self.node_id]
                own = await _run_slice(self._serve, call, lo, hi)
                if own.status != "ran" or own.error is not None or not isinstance(own.result, dict):
                    return own  # refused or wrong here as the whole search would be: the router decides
            else:  # more nodes than buckets and this one got none: the answer's meta comes from a peer
                own = None
            answers = {p: await t for p, t in asks.items()}
        finally:
            for t in asks.values():
                t.cancel()
        if own is not None:
            answers[self.node_id] = own
        hits: list[list[dict[str, Any]]] = []
        lexs: list[list[dict[str, Any]]] = []
        sems: list[list[tuple[str, int, float]]] = []
        cover = [0, 0]
        scanned: dict[str, list[int]] = {}
        absent: dict[str, str] = {}
        answered = 0
        meta: dict[str, Any] | None = own.result.get("meta") if own is not None else None
        for node in table:
            ans = answers[node]
            lo, hi = table[node]
            data = ans.result.get("data") if isinstance(ans.result, dict) else None
            if ans.status != "ran" or ans.error is not None or not isinstance(data, dict):
                absent[node] = ans.reason or (str(ans.error.get("code")) if ans.error else "failed")
                continue
            hits.append([h for h in data.get("hits", []) if isinstance(h, dict)])
            lexs.append([h for h in data.get("lexical") or [] if isinstance(h, dict)])
            sems.append([(str(c[0]), int(c[1]), float(c[2])) for c in data.get("semantic") or []])
            vc = data.get("vector_coverage") or [0, 0]
            cover = [cover[0] + int(vc[0]), cover[1] + int(vc[1])]
            scanned[node] = [lo, hi]
            if meta is None and isinstance(ans.result, dict):
                meta = ans.result.get("meta")
            if data.get("state") == "building":  # ES-64: an index short of its first lap is missing
                absent[node] = "building"
                continue
            answered += hi - lo + 1
        n = int(limit) if isinstance(limit, int) else 5
        fused: dict[str, Any] = {}
        if "vector" in call.args and call.args.get("mode") in (
            "hybrid",
            "semantic",
        ):  # AG-12: merge, fuse once
            lex, sem = merge_lexical(lexs), vectors.merge_semantic(sems)
            mode = str(call.args["mode"])
            match = lexical_query(str(call.args.get("query", "")), field="q").some
            fused = await self._store.read(
                lambda conn: fuse_answer(FastConn(conn), lex, sem, n, cover[0], cover[1], mode, match=match)
            )
            merged = fused.pop("hits")
        else:
            merged = merge_hits(hits, n)
        missing = BUCKETS - answered
        result = {
            "data": {**self._data(call, merged, answered, missing, absent, table, scanned), **fused},
            "meta": {**(meta or {}), "served_by": self.node_id},
        }
        _DIVIDED.labels(outcome="partial" if missing else "whole").inc()
        if missing:
            _log.warning(
                "search_scoped",
                buckets_answered=answered,
                buckets_missing=missing,
                absent_nodes={n: absent[n] for n in sorted(absent)},
            )
        return Answer("ran", self.node_id, positions=own.positions if own is not None else {}, result=result)

    def _data(
        self,
        call: Call,
        hits: list[dict[str, Any]],
        answered: int,
        missing: int,
        absent: dict[str, str],
        table: dict[str, tuple[int, int]],
        scanned: dict[str, list[int]],
    ) -> dict[str, Any]:
        q = str(call.args.get("query", ""))
        data: dict[str, Any] = {
            "hits": hits,
            "searched": answered > 0 or bool(hits),
            "failed": False,
            "state": "ok" if hits else "empty",
            "coverage": {"buckets_answered": answered, "buckets_missing": missing},
            "divided": {
                "coordinator": self.node_id,
                "assignment": {n: list(r) for n, r in table.items()},
                "scanned": scanned,
            },
        }
        if not missing:
            data["sentence"] = (
                f"{len(hits)} page(s) matched." if hits else f"Nothing in the knowledge base matched {q!r}."
            )
            return data
        names = ", ".join(sorted(absent))
        scope = (
            f"This answer is partial: {missing} of the 64 search slices were not searched "
            f"({names} did not answer in time or could not search). Search again, or ask a colleague."
        )
        data["partial"] = {
            "buckets_answered": answered,
            "buckets_missing": missing,
            "absent_nodes": sorted(absent),
            "semantic_skipped": False,
        }
        data["state"] = "partial"
        if hits:
            data["sentence"] = f"{len(hits)} page(s) matched in the slices searched. {scope}"
        elif answered:
            data["sentence"] = f"No page matched {q!r} in the {answered} of 64 slices searched. {scope}"
        else:
            data.update(searched=False, failed=True, state="failed")
            data["sentence"] = f"The knowledge base could not be searched: no slice answered. {scope}"
        return data


class SliceResponder(Responder):
    """Answers peers' slice requests on ``crewlet.search.slice.<node id>`` (ES-62).

    A request is ``{"v": 1, "args": {query, space?, limit?}, "assignment": {node: [lo, hi]},
    "floors", "min_position", "read_level", "deadline", "asker"}``; the reply is ``{"v": 1,
    "status", "node", "result"?, "error"?, "reason"?, "detail"?}``: the copy's own answer to
    ``pages.search`` over this node's row of the table only (``ran_nothing`` / ``not_assigned`` when
    the table gives it none; ``protocol`` for a request it cannot read).

    Args:
        nc: The node's one connection.
        node_id: This node's id (the subject it answers and the row it reads).
        serve: The copy's own call handler (``EstateService.serve``).
    """

    def __init__(self, nc: Client, *, node_id: str, serve: Serve) -> None:
        super().__init__(nc, slice_subject(node_id))
        self._node = node_id
        self._serve = serve

    async def _slice(self, raw: bytes) -> Answer:
        try:
            req = json.loads(raw)
            if not isinstance(req, dict) or req.get("v") != _VERSION:
                raise ValueError(
                    f"slice protocol {req.get('v') if isinstance(req, dict) else None!r} is not spoken here"
                )
            row = (req.get("assignment") or {}).get(self._node)
            if row is None:
                return Answer(
                    "ran_nothing", self._node, reason="not_assigned", detail="no range for this node"
                )
            lo, hi = bucket_range(row)
            call = Call(
                op="pages.search",
                args=dict(req.get("args") or {}),
                floors={str(k): int(v) for k, v in (req.get("floors") or {}).items()},
                read_level=req.get("read_level") or "stale",
                min_position=req.get("min_position"),
                deadline=float(req.get("deadline") or 0.0),
                asker=str(req.get("asker") or ""),
            )
        except (ValueError, TypeError, AttributeError, EstateError) as e:
            return Answer("ran_nothing", self._node, reason="protocol", detail=str(e))
        return await _run_slice(self._serve, call, lo, hi)

    async def answer(self, msg: Msg) -> None:
        """Scan this node's range for one peer's search and reply once (never raises)."""
        try:
            ans = await self._slice(msg.data)
        except Exception as e:  # noqa: BLE001 - a peer is always answered, never left to time out
            _log.error("search_slice_failed", error=f"{type(e).__name__}: {e}")
            ans = Answer("ran_nothing", self._node, reason="failed", detail=f"{type(e).__name__}: {e}")
        data = json.dumps({"v": _VERSION, **_answer_dict(ans)}, ensure_ascii=False).encode()
        if len(data) > self.payload_limit:
            err = {"code": "too_large", "detail": f"the slice answer is over {self.payload_limit} bytes"}
            data = json.dumps({"v": _VERSION, "status": "ran", "node": self._node, "error": err}).encode()
        await self.respond(msg, data)
