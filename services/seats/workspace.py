"""The seat's workspace over the estate router and the object store (CO-23..CO-26).

Every write is authored by the seat (``author: seat:<handle>``, ``author_kind: agent``) and carries
the seat's lease epoch, so a data node can refuse a write made under an epoch the seat no longer
holds (FL-74): the router wrapper :class:`~shared.router.SeatCalls` adds it. Estate errors become the workspace errors the model sees as tool errors; "nobody
answered" and an unknown outcome become :class:`WorkspaceUnavailable`.

Tracker wakes (CO-10) are published here, by the writer, once the write has landed: an assignee
set to an agent seat other than the writer gets ``external_notification{source: work, reason:
assigned, work_item}`` with the writing turn as ``parent_turn_id`` and the trace context of the
tool call (the current span), at delegation depth 0.

Comment wakes (CO-41) are published here too, once a comment has landed, through the
``comment_wake`` callback (:func:`shared.tools.publish_comment_wakes` bound to the node's bus and
coordination store): the item's assignee and watchers, and the agent seats ``@mentioned``, never
the commenting seat itself, at most six per seat and item per hour.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from shared import estate, logs, objects, telemetry, tools
from shared.bus import Bus, BusUnavailable, wake_envelope
from shared.providers import Embedder
from shared.router import EstateCalls, NobodyAnswered, RouterError, SeatCalls, open_router
from shared.runtime import NodeContext, node_embedder
from shared.tools import (
    WorkspaceConflict,
    WorkspaceError,
    WorkspaceNotFound,
    WorkspaceRefused,
    WorkspaceUnavailable,
)

__all__ = ["CommentWake", "RouterWorkspace", "Wake", "seat_workspace"]

_log = logs.get("seat.workspace")
_wake_log = logs.get("seat.dispatcher")

Wake = Callable[[str, str, str], Awaitable[None]]
"""``wake(assignee, work_item_key, writer)``: publish a tracker wake to ``assignee``'s inbox."""


class CommentWake(Protocol):
    """Publishes the wakes of a comment that has landed (CO-41); answers the seats woken.

    :func:`shared.tools.publish_comment_wakes` with its bus, store, agent seats and turn bound
    (``functools.partial``) is one.

    .. versionadded:: 0.1 (issue 10, CO-41)
    """

    def __call__(
        self, item: Mapping[str, Any], comment: Mapping[str, Any], *, author: str
    ) -> Awaitable[list[str]]:
        """Wake the seats ``comment`` on ``item`` concerns; ``author`` (the seat) is never woken."""
        ...


def _translate(e: Exception) -> WorkspaceError:
    if isinstance(e, estate.Fenced):
        return WorkspaceRefused(f"{e}; this turn no longer holds its seat", "seat")
    if isinstance(e, estate.NotFound):
        return WorkspaceNotFound(str(e), getattr(e, "what", None))
    if isinstance(e, estate.VersionConflict):
        return WorkspaceConflict(str(e), current_version=e.current_version)
    if isinstance(e, estate.InvalidField):
        return WorkspaceRefused(str(e), e.field)
    if isinstance(e, estate.TooLarge):
        return WorkspaceRefused(str(e), getattr(e, "field", None))
    if isinstance(e, estate.EstateUsageError):
        return WorkspaceRefused(str(e))
    if isinstance(e, NobodyAnswered | RouterError | estate.EstateError | objects.ObjectsError):
        return WorkspaceUnavailable(str(e))
    raise e


def _object(res: dict[str, Any]) -> dict[str, Any]:
    obj = res.get("object")
    return dict(obj) if isinstance(obj, dict) else dict(res)


def _data(res: dict[str, Any]) -> Any:
    return res.get("data", res)


class RouterWorkspace:
    """A :class:`shared.tools.Workspace` for one seat's turn.

    Args:
        router: The node's estate router.
        store: The company's object store (file bytes).
        seat: The seat handle writes are authored by.
        epoch: The seat's lease epoch, sent with every write (FL-74).
        agent_seats: Handles of the company's agent seats (who a wake may go to).
        wake: Publishes an assignment wake (CO-10); None disables them.
        comment_wake: Publishes a comment's wakes (CO-41); None (the default) disables them.
        basis: The external object the turn's trigger is about (``github:<repo id>#<number>``), or
            None. An item the seat creates without naming one carries it, so a seat that files the
            GitHub issue it was woken for gets the linked item back, never a second one (CO-35).

    .. versionchanged:: 0.1 ``comment_wake`` and ``basis`` (issue 10, CO-41, CO-35).
    """

    def __init__(
        self,
        router: EstateCalls,
        store: objects.ObjectStore | None,
        *,
        seat: str,
        epoch: int,
        agent_seats: set[str],
        wake: Wake | None,
        comment_wake: CommentWake | None = None,
        basis: str | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self._embedder = embedder
        self._r = SeatCalls(router, seat=seat, epoch=epoch)  # every write carries the epoch (FL-74)
        self._store = store
        self._seat = seat
        self._epoch = epoch
        self._agents = agent_seats
        self._wake = wake
        self._comment_wake = comment_wake
        self._basis = basis
        self.author = f"seat:{seat}"

    async def _woken(self, item: dict[str, Any], before: str | None) -> None:
        assignee = item.get("assignee")
        key = item.get("key")
        if (
            self._wake is not None
            and isinstance(assignee, str)
            and isinstance(key, str)
            and assignee != before
            and assignee != self._seat
            and assignee in self._agents
        ):
            await self._wake(assignee, key, self._seat)

    async def create_work_item(
        self,
        project: str,
        type: str,
        title: str,
        body: str,
        assignee: str | None,
        *,
        labels: list[str] | None = None,
        external: str | None = None,
    ) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace`; ``external`` defaults to the trigger's basis (CO-35)."""
        try:
            res = await self._r.create_work_item(
                project,
                title,
                type=type,
                body=body,
                assignee=assignee,
                author=self.author,
                author_kind="agent",
                labels=labels,
                external=external or self._basis,
            )
        except Exception as e:  # noqa: BLE001 - translated for the model
            raise _translate(e) from None
        item = _object(res)
        await self._woken(item, None)
        return item

    async def update_work_item(
        self,
        key: str,
        *,
        status: str | None = None,
        assignee: str | None = None,
        title: str | None = None,
        body: str | None = None,
        if_match: int | None = None,
        labels: list[str] | None = None,
    ) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace`."""
        before: str | None = None
        try:
            if assignee is not None:
                current = _data(await self._r.get_work_item(key, read_level="linearizable"))
                before = current.get("assignee") if isinstance(current, dict) else None
            res = await self._r.update_work_item(
                key,
                status=status,
                assignee=assignee,
                title=title,
                body=body,
                if_match=if_match,
                labels=labels,
                author=self.author,
                author_kind="agent",
            )
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        item = _object(res)
        if assignee is not None:
            await self._woken(item, before)
        return item

    async def comment_on_work_item(self, key: str, body: str) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace`; then the comment's wakes (CO-41)."""
        try:
            comment = _object(
                await self._r.comment_on_work_item(key, body, author=self.author, author_kind="agent")
            )
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        await self._comment_woken(key, comment)
        return comment

    async def _comment_woken(self, key: str, comment: dict[str, Any]) -> None:
        """Wake who the comment concerns; the comment has landed, so nothing here fails the tool."""
        if self._comment_wake is None or not isinstance(comment.get("id"), str) or "body" not in comment:
            return  # disabled, or a pending write whose comment this node has not applied yet
        try:
            item = _data(await self._r.get_work_item(key, read_level="linearizable"))
        except Exception as e:  # noqa: BLE001 - best effort: the comment stands without its wakes
            _log.warning("comment_wake_failed", seat=self._seat, work_item=key, error=str(e))
            return
        if isinstance(item, dict):
            await self._comment_wake(item, comment, author=self._seat)

    async def get_work_item(self, key: str) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace`."""
        try:
            data = _data(await self._r.get_work_item(key))
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        return dict(data) if isinstance(data, dict) else {"item": data}

    async def list_work_items(
        self, project: str | None = None, assignee: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """See :class:`shared.tools.Workspace`."""
        try:
            data = _data(await self._r.list_work_items(project=project, assignee=assignee, status=status))
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        items = data.get("items", []) if isinstance(data, dict) else data
        return [dict(i) for i in items]

    async def search_pages(
        self, q: str, space: str | None = None, *, mode: str | None = None, limit: int = 5
    ) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace` (a failed search answers "could not be searched";
        hybrid with the node's embeddings provider, AG-12, AG-13)."""
        try:
            data = _data(
                await self._r.search_knowledge(
                    q, space=space, limit=limit, mode=mode, embedder=self._embedder
                )
            )
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        return dict(data) if isinstance(data, dict) else {"hits": data}

    async def read_page(self, space: str, title: str) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace`."""
        try:
            data = _data(await self._r.get_page(space=space, title=title))
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        return dict(data)

    async def write_page(self, space: str, title: str, body: str) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace` (an unanswered knowledge write is unknown, never resent)."""
        try:
            return _object(
                await self._r.write_page(space, title, body, author=self.author, author_kind="agent")
            )
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None

    async def put_file(self, project: str, path: str, content: bytes) -> dict[str, Any]:
        """See :class:`shared.tools.Workspace`: the object first, then the row (ES-74)."""
        if self._store is None:
            raise WorkspaceUnavailable("no object store is open on this node")
        try:
            estate.validate_path(path)
            await self._r.get_work_catalogue(project)  # the project must exist before any byte is stored
            sha = hashlib.sha256(content).hexdigest()
            info = await self._store.put(estate.object_key_for(sha), content)
            return _object(
                await self._r.put_file_row(
                    project,
                    path,
                    size=info.size,
                    sha256=info.sha256 or sha,
                    object_key=info.key,
                    author=self.author,
                    author_kind="agent",
                )
            )
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None

    async def get_file(self, project: str, path: str) -> bytes:
        """See :class:`shared.tools.Workspace`."""
        if self._store is None:
            raise WorkspaceUnavailable("no object store is open on this node")
        try:
            row = _data(await self._r.get_file_row(project, path))
            chunks = await self._store.get(str(row["object_key"]))
            return b"".join([c async for c in chunks])
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None

    async def list_files(self, project: str) -> list[dict[str, Any]]:
        """See :class:`shared.tools.Workspace`."""
        try:
            data = _data(await self._r.list_files(project))
        except Exception as e:  # noqa: BLE001
            raise _translate(e) from None
        files = data.get("files", []) if isinstance(data, dict) else data
        return [dict(f) for f in files]


def seat_workspace(
    ctx: NodeContext, bus: Bus, handle: str, epoch: int, turn_id: str, *, basis: str | None = None
) -> RouterWorkspace:
    """The seat's tool workspace for one turn: fenced writes, assignment and comment wakes
    (CO-10, CO-41), and the trigger's external basis for items it files (CO-35).

    The wakes are logged by the dispatcher's logger (``seat.dispatcher``), as they always were.
    """
    org = ctx.org
    agents = {s.handle for s in org.seats} if org is not None else set()

    async def wake(assignee: str, key: str, writer: str) -> None:
        headers: dict[str, str] = {}
        telemetry.inject(headers)  # the execute_tool span is current: the woken turn joins this trace
        env = wake_envelope(key, writer, parent_turn_id=turn_id)
        try:
            await bus.publish_to_seat(
                assignee, env, msg_id=f"wake:{key}:{assignee}:{turn_id}", headers=headers
            )
            _wake_log.info("tracker_wake_published", seat=assignee, work_item=key, writer=writer)
        except BusUnavailable as e:
            _wake_log.warning("tracker_wake_failed", seat=assignee, work_item=key, error=str(e))

    return RouterWorkspace(
        open_router(ctx),
        ctx.objects,
        seat=handle,
        epoch=epoch,
        agent_seats=agents,
        wake=wake,
        comment_wake=functools.partial(
            tools.publish_comment_wakes,
            bus,
            ctx.coord,
            agent_seats=agents,
            parent_turn_id=turn_id,
        ),
        basis=basis,
        embedder=node_embedder(ctx),
    )
