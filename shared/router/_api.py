"""Typed calls for the tracker, the knowledge base and file rows (CO-23..CO-26), over :meth:`call`.

These are what the REST routes and the agent tools use. Reads return ``{"data": ..., "meta":
{"level", "position", "position_token", "served_by", "lag"?}}``; writes return ``{"outcome":
"applied"|"existing"|"pending", "op_id", "position", "position_token", "object"}`` (``existing``:
a create whose ``external`` basis an item already holds, answered with that item, CO-35).
"""

from __future__ import annotations

import abc
from typing import Any

from shared.estate import EstateError, ReadLevel
from shared.providers import Embedder

from ._errors import NobodyAnswered, RouterError
from ._search import knowledge_search

__all__ = ["EstateCalls", "failed_search"]


def failed_search(reason: str) -> dict[str, Any]:
    """The answer of a knowledge search nobody could run (ES-36, ES-65): no hits, ``failed``."""
    return {
        "data": {
            "hits": [],
            "searched": False,
            "failed": True,
            "state": "failed",
            "sentence": f"The knowledge base could not be searched: {reason}",
            "coverage": {"buckets_answered": 0, "buckets_missing": 64},
        },
        "meta": {"level": "none", "served_by": None},
    }


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class EstateCalls(abc.ABC):
    """The estate operations by name; :meth:`call` routes each one."""

    @abc.abstractmethod
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
        """See :meth:`shared.router.EstateRouter.call`."""

    async def _run(self, op: str, fields: dict[str, Any], **route: Any) -> dict[str, Any]:
        """The one call path of every named operation: drop the unset fields, route, type the answer.

        Args:
            op: An operation of :data:`shared.estate.OPS`.
            fields: Its arguments; a None value is left out (the operation's default holds).
            route: What :meth:`call` takes besides (``op_id``, ``read_level``, ``min_position``,
                ``node``), passed on only when the method names it.

        Returns:
            The operation's ``{"data", "meta"}`` (read) or ``{"outcome", ...}`` (write) answer.

        Raises:
            EstateUsageError, OutcomeUnknown, NobodyAnswered: see :meth:`call`.
        """
        result: dict[str, Any] = await self.call(op, _drop_none(fields), **route)
        return result

    # -- tracker (CO-24) -------------------------------------------------------------------

    async def list_work_items(
        self,
        *,
        project: str | None = None,
        status: str | None = None,
        status_group: str | None = None,
        assignee: str | None = None,
        type: str | None = None,
        text: str | None = None,
        limit: int = 20,
        offset: int = 0,
        read_level: ReadLevel = "stale",
        min_position: str | None = None,
        external: str | None = None,
    ) -> dict[str, Any]:
        """``list_work_items``: ``data`` is ``{"items", "count", "limit", "offset"}``.

        Args:
            external: Only the item linked to this outside object (exact basis, e.g.
                ``github:186853002#1``, CO-35); None for no such filter.

        Raises:
            EstateUsageError, NobodyAnswered: see :meth:`call`.

        .. versionchanged:: 0.1 ``external`` (issue 10).
        """
        return await self._run(
            "work.list",
            {
                "project": project,
                "status": status,
                "status_group": status_group,
                "assignee": assignee,
                "type": type,
                "text": text,
                "external": external,
                "limit": limit,
                "offset": offset,
            },
            read_level=read_level,
            min_position=min_position,
        )

    async def get_work_item(
        self,
        key: str,
        *,
        read_level: ReadLevel = "stale",
        min_position: str | None = None,
        pages: dict[str, int | None] | None = None,
    ) -> dict[str, Any]:
        """``get_work_item{key}``: fields, a page of comments and one of history entries, oldest first.

        Args:
            key: The item's key or id.
            read_level: See :meth:`list_work_items`.
            min_position: See :meth:`list_work_items`.
            pages: ``comments_offset``, ``comments_limit``, ``history_offset``, ``history_limit``
                (None or absent: the newest 20 of each); the answer carries ``comments_total``,
                ``comments_offset``, ``history_total``, ``history_offset`` (issue 38).

        Raises:
            InvalidField: malformed key or paging argument; NotFound: unknown item; NobodyAnswered.
        """
        args: dict[str, Any] = {"key": key, **{k: v for k, v in (pages or {}).items() if v is not None}}
        return await self._run("work.get", args, read_level=read_level, min_position=min_position)

    async def create_work_item(
        self,
        project: str,
        title: str,
        *,
        type: str = "task",
        body: str | None = None,
        priority: str = "normal",
        assignee: str | None = None,
        parent: str | None = None,
        author: str = "",
        author_kind: str = "operator",
        op_id: str | None = None,
        external: str | None = None,
        url: str | None = None,
        labels: list[str] | None = None,
    ) -> dict[str, Any]:
        """``create_work_item``; the answer's ``object`` holds the new item with its key.

        Args:
            external: The basis of the outside object the item mirrors (``github:<repository
                id>#<number>``, CO-35; ≤ 200 printable characters, no whitespace). One item per
                basis: when an item already has it, nothing is created and the answer is outcome
                ``existing`` with that item as ``object`` — also when two creates race through
                two data nodes (the apply decides, in log order). None: no link.
            url: An http(s) link to the outside object (≤ 2 000 characters), or None.
            labels: Labels (1..100 characters each, at most 50; duplicates dropped), or None for [].

        Returns:
            ``{"outcome": "applied"|"existing"|"pending", "op_id", "position", "position_token",
            "object"}``.

        Raises:
            InvalidField, NotFound, TooLarge: bad input (``external``, ``url``, ``labels`` named);
            OutcomeUnknown; NobodyAnswered.

        .. versionchanged:: 0.1 ``external``, ``url``, ``labels`` and outcome ``existing`` (issue 10).
        """
        return await self._run(
            "work.create",
            {
                "project": project,
                "title": title,
                "type": type,
                "body": body,
                "priority": priority,
                "assignee": assignee,
                "parent": parent,
                "external": external,
                "url": url,
                "labels": labels,
                "author": author,
                "author_kind": author_kind,
            },
            op_id=op_id,
        )

    async def update_work_item(
        self,
        key: str,
        *,
        if_match: int | None = None,
        title: str | None = None,
        body: str | None = None,
        status: str | None = None,
        priority: str | None = None,
        assignee: str | None = None,
        parent: str | None = None,
        watch: bool | None = None,
        due: str | None = None,
        type: str | None = None,
        author: str = "",
        author_kind: str = "operator",
        op_id: str | None = None,
        labels: list[str] | None = None,
        url: str | None = None,
    ) -> dict[str, Any]:
        """``update_work_item``; fields left None are unchanged.

        Args:
            status: One of ``todo``, ``reopened``, ``in_progress``, ``in_review``, ``done``,
                ``cancelled``, ``closed`` (CO-24; ``reopened`` is in group ``not_started``).
            labels: The new label list, replacing the old one ([] removes every label).
            url: The new http(s) link; ``""`` removes it.

        Raises:
            VersionConflict: a stale ``if_match`` (carries the current version); InvalidField,
            NotFound, TooLarge; OutcomeUnknown; NobodyAnswered.

        .. versionchanged:: 0.1 ``labels``, ``url`` and status ``reopened`` (issue 10).
        """
        return await self._run(
            "work.update",
            {
                "key": key,
                "if_match": if_match,
                "title": title,
                "body": body,
                "status": status,
                "priority": priority,
                "assignee": assignee,
                "parent": parent,
                "watch": watch,
                "due": due,
                "type": type,
                "labels": labels,
                "url": url,
                "author": author,
                "author_kind": author_kind,
            },
            op_id=op_id,
        )

    async def comment_on_work_item(
        self,
        key: str,
        body: str,
        *,
        author: str = "",
        author_kind: str = "operator",
        op_id: str | None = None,
    ) -> dict[str, Any]:
        """``comment_on_work_item{key, body}``.

        Raises:
            InvalidField, NotFound, TooLarge; OutcomeUnknown; NobodyAnswered.
        """
        return await self._run(
            "work.comment",
            {"key": key, "body": body, "author": author, "author_kind": author_kind},
            op_id=op_id,
        )

    async def get_work_catalogue(self, project: str | None = None) -> dict[str, Any]:
        """``get_work_catalogue{project?}``: types, statuses, priorities, projects."""
        return await self._run("work.catalogue", {"project": project})

    async def list_projects(self) -> dict[str, Any]:
        """Every project with its counts."""
        return await self._run("projects.list", {})

    # -- knowledge (CO-25) -----------------------------------------------------------------

    async def write_page(
        self,
        space: str,
        title: str,
        body: str,
        *,
        page_id: str | None = None,
        if_match: int | None = None,
        author: str = "",
        author_kind: str = "operator",
        op_id: str | None = None,
    ) -> dict[str, Any]:
        """``write_page``: create or update (by id, else by space + title).

        Raises:
            InvalidField, NotFound, TooLarge (body over 1 MiB), VersionConflict; OutcomeUnknown (never
            resent, ES-35); NobodyAnswered.
        """
        return await self._run(
            "pages.write",
            {
                "space": space,
                "title": title,
                "body": body,
                "page_id": page_id,
                "if_match": if_match,
                "author": author,
                "author_kind": author_kind,
            },
            op_id=op_id,
        )

    async def get_page(
        self,
        *,
        page_id: str | None = None,
        space: str | None = None,
        title: str | None = None,
        read_level: ReadLevel = "stale",
        min_position: str | None = None,
    ) -> dict[str, Any]:
        """``get_page{page_id | space+title}``.

        Raises:
            InvalidField, NotFound; NobodyAnswered.
        """
        return await self._run(
            "pages.get",
            {"page_id": page_id, "space": space, "title": title},
            read_level=read_level,
            min_position=min_position,
        )

    async def list_pages(
        self,
        *,
        space: str | None = None,
        limit: int = 50,
        offset: int = 0,
        read_level: ReadLevel = "stale",
        min_position: str | None = None,
    ) -> dict[str, Any]:
        """``list_pages{space?, limit}``."""
        return await self._run(
            "pages.list",
            {"space": space, "limit": limit, "offset": offset},
            read_level=read_level,
            min_position=min_position,
        )

    async def search_knowledge(
        self,
        query: str,
        *,
        space: str | None = None,
        limit: int = 5,
        min_position: str | None = None,
        mode: str | None = None,
        embedder: Embedder | None = None,
    ) -> dict[str, Any]:
        """``search_knowledge``: never raises to the model for a failure (CO-25, ES-36).

        The data node asked answers it; above 10 000 pages with more than one live data node it
        divides the 64 buckets among them and merges the slices into the undivided order (ES-62,
        ES-63, :mod:`shared.estate.domains.pages._divided`).

        Returns:
            ``data`` is ``{"hits", "searched", "failed", "state", "sentence"}``; ``state`` is ``ok``,
            ``empty``, ``building`` (ES-65), ``partial`` (ES-64: some slices unanswered) or
            ``failed`` ("could not be searched"). A divided answer adds ``coverage``
            (``buckets_answered``, ``buckets_missing``) and ``divided`` (``coordinator``,
            ``assignment`` and ``scanned``: node → ``[lo, hi]``); a partial one adds ``partial``
            (``buckets_answered``, ``buckets_missing``, ``absent_nodes``, ``semantic_skipped``) and
            its ``sentence`` names how many of the 64 slices were not searched and advises
            searching again or asking a colleague. AG-13 adds ``mode_requested``, ``mode_used``,
            ``semantic`` (``ok|off|skipped|stale``) and ``vector_coverage`` (:mod:`._search`);
            ``mode`` and ``embedder`` (the node's embeddings provider) choose hybrid ranking (AG-12).

        Raises:
            EstateUsageError: the query itself is wrong (empty, unknown space) — a caller's mistake.
        """

        async def run(args: dict[str, Any]) -> dict[str, Any]:
            return await self._run("pages.search", args, min_position=min_position)

        try:
            return await knowledge_search(run, query, space=space, limit=limit, mode=mode, embedder=embedder)
        except NobodyAnswered as e:
            return failed_search(str(e))
        except (RouterError, EstateError) as e:
            if getattr(e, "retryable", False) or isinstance(e, RouterError):
                return failed_search(str(e))
            raise

    async def vectors_pending(self, model: str, dims: int, *, limit: int = 1024) -> dict[str, Any]:
        """``vectors.pending``: changed pages to embed, windows to withdraw, coverage (AG-11, ES-67)."""
        return await self._run("vectors.pending", {"model": model, "dims": dims, "limit": limit})

    async def list_spaces(self) -> dict[str, Any]:
        """Every knowledge space."""
        return await self._run("spaces.list", {})

    # -- file rows (CO-26, ES-74) ----------------------------------------------------------------

    async def list_files(
        self, project: str, *, prefix: str | None = None, min_position: str | None = None
    ) -> dict[str, Any]:
        """``list_files{project, prefix?}``: the current row of every file."""
        return await self._run(
            "files.list", {"project": project, "prefix": prefix}, min_position=min_position
        )

    async def get_file_row(
        self, project: str, path: str, *, version: int | None = None, min_position: str | None = None
    ) -> dict[str, Any]:
        """One file row (current, or ``version``).

        Raises:
            InvalidField (``path``), NotFound; NobodyAnswered.
        """
        return await self._run(
            "files.get",
            {"project": project, "path": path, "version": version},
            min_position=min_position,
        )

    async def put_file_row(
        self,
        project: str,
        path: str,
        *,
        size: int,
        sha256: str,
        object_key: str,
        content_type: str = "application/octet-stream",
        if_match: int | None = None,
        author: str = "",
        author_kind: str = "operator",
        op_id: str | None = None,
    ) -> dict[str, Any]:
        """Write a file row naming an object already stored (ES-74: object first, row second).

        Raises:
            InvalidField, NotFound, VersionConflict; OutcomeUnknown; NobodyAnswered.
        """
        return await self._run(
            "files.put",
            {
                "project": project,
                "path": path,
                "size": size,
                "sha256": sha256,
                "object_key": object_key,
                "content_type": content_type,
                "if_match": if_match,
                "author": author,
                "author_kind": author_kind,
            },
            op_id=op_id,
        )

    # -- admin ----------------------------------------------------------------------------------

    async def estate_status(self, node: str) -> dict[str, Any]:
        """Ask one data node how far its copy is."""
        return await self._run("estate.status", {}, node=node)

    async def estate_digest(self, node: str) -> dict[str, Any]:
        """Ask one data node for a digest of its copy's rows (ES-1 checks compare them)."""
        return await self._run("estate.digest", {}, node=node)
