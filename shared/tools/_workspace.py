"""The workspace the built-in tools act on: tracker, knowledge base, files (CO-24..CO-26).

A :class:`Workspace` is bound to one author: the seat running the turn (every write records
``author: seat:<handle>``, CO-24), so the caller builds one per turn. The single-node and fleet
implementations adapt the estate (a direct store or the router to data nodes); tests use an
in-memory one. Every method raises :class:`~shared.tools.WorkspaceError` subclasses for the
failures a model can act on; anything else is a defect.

Shapes are plain JSON-able dicts, so a tool result is what the workspace answered:

- a work item: ``{"key": "SUP-1", "id": str, "project": "SUP", "type", "title", "body",
  "status", "assignee", "reporter", "version": int, ...}`` (``get_work_item`` adds
  ``"comments": [...]``);
- a comment: ``{"id", "key" (the item's), "body", "author", ...}``;
- a page: ``{"id", "space", "title", "body", "version": int, ...}``;
- search: ``{"hits": [{"page_id", "space", "title", "snippet", "score"}, ...]}``;
- a file row: ``{"project", "path", "version": int, "size": int (bytes), "sha256", ...}``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Workspace"]


@runtime_checkable
class Workspace(Protocol):
    """The tracker, knowledge base and files as one seat's tools see them (CO-23..CO-26)."""

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
        """Create a work item (CO-24).

        Args:
            project: The project key (``SUP``).
            type: A declared type (``task``, ``bug``, ...).
            title: The title.
            body: Markdown; may be "".
            assignee: A seat handle, or None for unassigned.
            labels: Labels, or None for none.
            external: The basis of the outside object the item mirrors (``github:<repo id>#<n>``);
                a second create with one answers the existing item (CO-35).

        Returns:
            The new item (``key`` ``KEY-N``, ``version`` 1).

        Raises:
            WorkspaceNotFound: No such project (``field="project"``).
            WorkspaceRefused: An undeclared type, an unknown assignee.
            WorkspaceUnavailable: The estate did not answer.
        """
        ...

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
        """Change some fields of an item; None leaves a field as it is (CO-24).

        Args:
            key: The item's key.
            status: ``todo|in_progress|in_review|done|cancelled|closed``.
            assignee: A seat handle.
            title: The new title.
            body: The new body (needs ``if_match``, CO-24).
            if_match: The version the caller read; None for last-writer-wins.

        Returns:
            The item after the write.

        Raises:
            WorkspaceNotFound: No such item.
            WorkspaceConflict: ``if_match`` is stale (carries the current version).
            WorkspaceRefused: An unknown status, a body change without ``if_match``, the
                hand-off bound (CO-10).
            WorkspaceUnavailable: The estate did not answer.
        """
        ...

    async def comment_on_work_item(self, key: str, body: str) -> dict[str, Any]:
        """Add a comment (CO-24). Returns the comment. Raises WorkspaceNotFound, WorkspaceUnavailable."""
        ...

    async def get_work_item(self, key: str) -> dict[str, Any]:
        """Return an item with its last 20 comments (CO-24). Raises WorkspaceNotFound."""
        ...

    async def list_work_items(
        self, project: str | None = None, assignee: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the items matching every filter given (None: no filter), newest first."""
        ...

    async def search_pages(
        self, q: str, space: str | None = None, *, mode: str | None = None, limit: int = 5
    ) -> dict[str, Any]:
        """Rank pages by BM25 over title and body (CO-25), fused with vector similarity when the
        company has embeddings (AG-12; ``mode`` hybrid | lexical | semantic, AG-13); returns
        ``{"hits": [...], "mode_used", "semantic", ...}``."""
        ...

    async def read_page(self, space: str, title: str) -> dict[str, Any]:
        """Return the page titled ``title`` in ``space`` (CO-25). Raises WorkspaceNotFound."""
        ...

    async def write_page(self, space: str, title: str, body: str) -> dict[str, Any]:
        """Create or update the page ``(space, title)`` (CO-25); returns the page."""
        ...

    async def put_file(self, project: str, path: str, content: bytes) -> dict[str, Any]:
        """Store a file (object first, then the row, CO-26); returns the file row.

        Raises:
            WorkspaceRefused: A bad path (absolute, ``..``, over 512 characters) or too large.
        """
        ...

    async def get_file(self, project: str, path: str) -> bytes:
        """Return a file's bytes (CO-26). Raises WorkspaceNotFound."""
        ...

    async def list_files(self, project: str) -> list[dict[str, Any]]:
        """Return the project's file rows, by path (CO-26)."""
        ...
