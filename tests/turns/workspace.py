"""An in-memory :class:`shared.tools.Workspace` for the turn tests (never shipped in ``shared``).

It follows the CO-24..CO-26 rules the tools rely on: ``KEY-N`` keys from a per-project counter,
declared types only, the six statuses, ``version`` +1 per write, a stale ``if_match`` refused
with the current version, a body change needing ``if_match``, pages by ``(space, title)``, a
naive word-overlap search standing in for BM25. Several seats share one :class:`Estate`; each
gets its own :class:`MemoryWorkspace` (the author).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from shared.tools import STATUSES, WorkspaceConflict, WorkspaceNotFound, WorkspaceRefused

TYPES = ("task", "bug", "epic", "story", "spike", "chore")


def _id(name: str) -> str:
    # Deterministic ids, so two runs on fresh estates produce identical records (CO-15's check).
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


@dataclass
class Estate:
    """The shared state: projects, items, comments, pages, files."""

    projects: set[str] = field(default_factory=lambda: {"SUP", "ENG"})
    spaces: set[str] = field(default_factory=lambda: {"SUP", "ENG"})
    counters: dict[str, int] = field(default_factory=dict)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    comments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pages: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    writes: list[tuple[str, str, str]] = field(default_factory=list)  # (author, op, key)

    def workspace(self, seat: str) -> MemoryWorkspace:
        """A workspace whose writes are authored by ``seat:<seat>``."""
        return MemoryWorkspace(self, seat)


class MemoryWorkspace:
    """One seat's view of an :class:`Estate`."""

    def __init__(self, estate: Estate, seat: str) -> None:
        self.estate = estate
        self.author = f"seat:{seat}"
        self.calls: list[str] = []

    def _item(self, key: str) -> dict[str, Any]:
        item = self.estate.items.get(key)
        if item is None:
            raise WorkspaceNotFound(f"no work item {key}", "key")
        return item

    async def create_work_item(
        self, project: str, type: str, title: str, body: str, assignee: str | None
    ) -> dict[str, Any]:
        self.calls.append("create_work_item")
        if project not in self.estate.projects:
            raise WorkspaceNotFound(f"no project {project}", "project")
        if type not in TYPES:
            raise WorkspaceRefused(f"type {type!r} is not declared; declared: {', '.join(TYPES)}", "type")
        n = self.estate.counters.get(project, 0) + 1
        self.estate.counters[project] = n
        key = f"{project}-{n}"
        item = {
            "key": key,
            "id": _id(key),
            "project": project,
            "type": type,
            "title": title,
            "body": body,
            "status": "todo",
            "assignee": assignee,
            "reporter": self.author,
            "version": 1,
        }
        self.estate.items[key] = item
        self.estate.writes.append((self.author, "create", key))
        return dict(item)

    async def update_work_item(
        self,
        key: str,
        *,
        status: str | None = None,
        assignee: str | None = None,
        title: str | None = None,
        body: str | None = None,
        if_match: int | None = None,
    ) -> dict[str, Any]:
        self.calls.append("update_work_item")
        item = self._item(key)
        if if_match is not None and if_match != item["version"]:
            raise WorkspaceConflict(
                f"{key} is at version {item['version']}, not {if_match}", current_version=item["version"]
            )
        if body is not None and if_match is None:
            raise WorkspaceRefused("a body change needs if_match", "if_match")
        if status is not None and status not in STATUSES:
            raise WorkspaceRefused(f"unknown status {status!r}", "status")
        for name, value in (("status", status), ("assignee", assignee), ("title", title), ("body", body)):
            if value is not None:
                item[name] = value
        item["version"] += 1
        self.estate.writes.append((self.author, "update", key))
        return dict(item)

    async def comment_on_work_item(self, key: str, body: str) -> dict[str, Any]:
        self.calls.append("comment_on_work_item")
        self._item(key)
        thread = self.estate.comments.setdefault(key, [])
        comment = {"id": _id(f"{key}#{len(thread) + 1}"), "key": key, "body": body, "author": self.author}
        thread.append(comment)
        self.estate.writes.append((self.author, "comment", key))
        return dict(comment)

    async def get_work_item(self, key: str) -> dict[str, Any]:
        self.calls.append("get_work_item")
        return {**self._item(key), "comments": list(self.estate.comments.get(key, []))[-20:]}

    async def list_work_items(
        self, project: str | None = None, assignee: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        self.calls.append("list_work_items")
        out = [
            dict(i)
            for i in self.estate.items.values()
            if (project is None or i["project"] == project)
            and (assignee is None or i["assignee"] == assignee)
            and (status is None or i["status"] == status)
        ]
        return list(reversed(out))

    async def search_pages(
        self, q: str, space: str | None = None, *, mode: str | None = None, limit: int = 5
    ) -> dict[str, Any]:
        self.calls.append("search_pages")
        words = {w.lower() for w in q.split() if len(w) > 3}
        hits = []
        for (sp, title), page in self.estate.pages.items():
            if space is not None and sp != space:
                continue
            text = f"{title} {page['body']}".lower()
            score = sum(1 for w in words if w in text)
            if score:
                hits.append(
                    {
                        "page_id": page["id"],
                        "space": sp,
                        "title": title,
                        "snippet": page["body"][:200],
                        "score": score,
                    }
                )
        hits.sort(key=lambda h: (-h["score"], h["title"]))
        return {"hits": hits[:limit], "mode_used": "lexical", "semantic": "off"}

    async def read_page(self, space: str, title: str) -> dict[str, Any]:
        self.calls.append("read_page")
        page = self.estate.pages.get((space, title))
        if page is None:
            raise WorkspaceNotFound(f"no page {title!r} in {space}", "title")
        return dict(page)

    async def write_page(self, space: str, title: str, body: str) -> dict[str, Any]:
        self.calls.append("write_page")
        if space not in self.estate.spaces:
            raise WorkspaceNotFound(f"no space {space}", "space")
        old = self.estate.pages.get((space, title))
        page = {
            "id": _id(f"page:{space}/{title}"),
            "space": space,
            "title": title,
            "body": body,
            "version": (old["version"] + 1) if old else 1,
            "author": self.author,
        }
        self.estate.pages[(space, title)] = page
        self.estate.writes.append((self.author, "page", f"{space}/{title}"))
        return dict(page)

    async def put_file(self, project: str, path: str, content: bytes) -> dict[str, Any]:
        self.calls.append("put_file")
        if project not in self.estate.projects:
            raise WorkspaceNotFound(f"no project {project}", "project")
        self.estate.files[(project, path)] = content
        self.estate.writes.append((self.author, "file", f"{project}/{path}"))
        return {
            "project": project,
            "path": path,
            "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest(),
        }

    async def get_file(self, project: str, path: str) -> bytes:
        self.calls.append("get_file")
        data = self.estate.files.get((project, path))
        if data is None:
            raise WorkspaceNotFound(f"no file {path} in {project}", "path")
        return data

    async def list_files(self, project: str) -> list[dict[str, Any]]:
        self.calls.append("list_files")
        return [
            {"project": p, "path": path, "size": len(data)}
            for (p, path), data in sorted(self.estate.files.items())
            if p == project
        ]
