"""The native knowledge base: spaces and pages, decided and applied (CO-25).

Spaces come from units (``space: KEY``) and are seeded as records. ``write_page{space, title, body,
page_id?, if_match?}`` creates or updates, matched by id, else by ``(space, title)``: the title is
unique per space through its normalised *address*. A page create takes no subject expectation; if
its title was taken meanwhile, the apply folds it into an update of that page (write-page
semantics). Saving a page unchanged writes nothing, so a re-import keeps every version (CO-25).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from ..._errors import InvalidField, NotFound, TooLarge, VersionConflict
from ...log._applier import ApplyFn, ApplyOutcome
from ...log._decide import DecideCtx, Decision, anchor_of, derived_id
from ...log._ids import object_subject, search_bucket
from ...log._record import Record
from ...store import _sql as sql
from ._tables import T_CONTAINERS, T_PAGE_REVISIONS, T_PAGES, Container, Page

__all__ = [
    "PAGE_LIMIT",
    "address_of",
    "KINDS",
    "decide_page",
    "decide_space",
    "find_page",
    "space_by_key",
]

PAGE_LIMIT = 1024 * 1024
"""Largest page body in bytes [our choice: the tool read/write cap of CO-26, 1 MiB]."""
TITLE_LIMIT = 300
REVISIONS_KEPT = 100
SPACE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")


def address_of(title: str) -> str:
    """Return a title's normalised address (case-folded, whitespace collapsed): unique per space."""
    return " ".join(title.split()).casefold()


def space_by_key(conn: Connection, key: str, *, field: str = "space") -> Container:
    """Return the space ``key``.

    Raises:
        InvalidField: not a space key shape; NotFound: no such space.
    """
    if not isinstance(key, str) or not SPACE_RE.match(key):
        raise InvalidField(field, f"{key!r} is not a space key (upper-case letters and digits, e.g. ENG)")
    row = conn.execute(select(T_CONTAINERS).where(T_CONTAINERS.c.key == key)).first()
    if row is None:
        raise NotFound("space", key)
    return Container(**row._mapping)


def find_page(conn: Connection, args: dict[str, Any]) -> Page:
    """Return the page named by ``page_id``, or by ``space`` + ``title``.

    Raises:
        InvalidField, NotFound: neither given, unknown space, or no such page.
    """
    pid = args.get("page_id")
    if pid:
        if not isinstance(pid, str) or not re.fullmatch(r"[0-9a-f-]{36}", pid):
            raise InvalidField("page_id", f"{pid!r} is not a page id")
        row = conn.execute(select(T_PAGES).where(T_PAGES.c.id == pid)).first()
        if row is None:
            raise NotFound("page", pid)
        return Page(**row._mapping)
    space = space_by_key(conn, str(args.get("space") or ""))
    title = args.get("title")
    if not isinstance(title, str) or not title.strip():
        raise InvalidField("title", "give page_id, or space and title")
    row = conn.execute(
        select(T_PAGES).where(T_PAGES.c.container == space.key, T_PAGES.c.address == address_of(title))
    ).first()
    if row is None:
        raise NotFound("page", f"{space.key}/{title}")
    return Page(**row._mapping)


def decide_space(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide a space upsert (a seed from a unit's ``space:``, CO-25)."""
    key = str(args.get("key", ""))
    if not SPACE_RE.match(key):
        raise InvalidField("key", f"{key!r} is not a space key")
    fields = {"name": str(args.get("name") or ""), "unit_id": str(args.get("unit_id") or "")}
    row = conn.execute(select(T_CONTAINERS).where(T_CONTAINERS.c.key == key)).first()
    if row is not None and row.name == fields["name"] and row.unit_id == fields["unit_id"]:
        return Decision("space", key, noop={"key": key, **fields})
    subject = object_subject("pages", "space", key)
    rec = ctx.record(
        kind="space_upsert",
        domain="pages",
        subject=subject,
        payload={"key": key, **fields},
        scope=(f"space:{key}",),
    )
    return Decision("space", key, rec, expect=anchor_of(conn, "pages", subject))


def decide_page(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide ``write_page{space, title, body, page_id?, if_match?}``.

    Raises:
        InvalidField: a missing title or body; TooLarge: body over 1 MiB (``body``);
        NotFound: unknown space or ``page_id``; VersionConflict: a stale ``if_match``.
    """
    title = args.get("title")
    body = args.get("body")
    if not isinstance(title, str) or not title.strip():
        raise InvalidField("title", "a page needs a title")
    if len(title) > TITLE_LIMIT or "\n" in title:
        raise InvalidField("title", f"must be one line of at most {TITLE_LIMIT} characters")
    if not isinstance(body, str):
        raise InvalidField("body", "a page needs a Markdown body (a string)")
    size = len(body.encode())
    if size > PAGE_LIMIT:
        raise TooLarge("body", PAGE_LIMIT, size)
    space = space_by_key(conn, str(args.get("space") or ""))
    if_match = args.get("if_match")
    if if_match is not None and (not isinstance(if_match, int) or isinstance(if_match, bool)):
        raise InvalidField("if_match", "must be the integer version you read")
    title = title.strip()
    address = address_of(title)
    existing: Page | None = None
    if args.get("page_id"):
        existing = find_page(conn, {"page_id": args["page_id"]})
        if existing.container != space.key:
            raise InvalidField("space", f"page {existing.id} is in space {existing.container}")
        clash = conn.execute(
            select(T_PAGES.c.id).where(
                T_PAGES.c.container == space.key, T_PAGES.c.address == address, T_PAGES.c.id != existing.id
            )
        ).first()
        if clash is not None:
            raise VersionConflict(f"another page in {space.key} is titled {title!r}", existing.version)
    else:
        row = conn.execute(
            select(T_PAGES).where(T_PAGES.c.container == space.key, T_PAGES.c.address == address)
        ).first()
        existing = Page(**row._mapping) if row is not None else None
    author = str(args.get("author") or "")
    common = {
        "container": space.key,
        "title": title,
        "address": address,
        "body": body,
        "author": author,
        "author_kind": str(args.get("author_kind") or "operator"),
    }
    if existing is not None:
        if if_match is not None and if_match != existing.version:
            raise VersionConflict(
                f"page {existing.title!r} is at version {existing.version}, not {if_match}", existing.version
            )
        if existing.title == title and existing.body == body:
            return Decision("page", existing.id)
        subject = object_subject("pages", "page", existing.id)
        rec = ctx.record(
            kind="page_write",
            domain="pages",
            subject=subject,
            payload={"page_id": existing.id, "if_match": if_match, **common},
            scope=(f"page:{existing.id}",),
        )
        return Decision("page", existing.id, rec, expect=anchor_of(conn, "pages", subject))
    if if_match not in (None, 0):
        raise VersionConflict(f"no page {title!r} in {space.key} yet", None)
    pid = derived_id("page", ctx.op_id)
    rec = ctx.record(
        kind="page_write",
        domain="pages",
        subject=object_subject("pages", "page", pid),
        payload={"page_id": pid, "create": True, **common},
        scope=(f"page:{pid}", f"space:{space.key}"),
    )
    return Decision("page", pid, rec, expect=None)


def _fts(conn: Connection, page_id: str, container: str, title: str, body: str, *, new: bool = False) -> None:
    # The index row shares the page row's rowid, so replacing it is a keyed delete, not a scan.
    if not new:
        sql.run(
            conn, "DELETE FROM pages_fts WHERE rowid = (SELECT rowid FROM pages WHERE id = ?)", (page_id,)
        )
    sql.run(
        conn,
        "INSERT INTO pages_fts (rowid, page_id, container, title, body) "
        "VALUES ((SELECT rowid FROM pages WHERE id = ?), ?, ?, ?, ?)",
        (page_id, page_id, container, title, body),
    )


def _revision(
    conn: Connection, page_id: str, version: int, title: str, body: str, author: str, at: int
) -> None:
    conn.execute(
        insert(T_PAGE_REVISIONS).values(
            page_id=page_id, version=version, title=title, body=body, author=author, at=at
        )
    )
    if version > REVISIONS_KEPT:
        conn.execute(
            delete(T_PAGE_REVISIONS).where(
                T_PAGE_REVISIONS.c.page_id == page_id, T_PAGE_REVISIONS.c.version <= version - REVISIONS_KEPT
            )
        )


def _page_write(conn: Connection, rec: Record) -> ApplyOutcome:
    p = rec.payload
    pid = str(p["page_id"])
    if conn.execute(select(T_CONTAINERS.c.key).where(T_CONTAINERS.c.key == p["container"])).first() is None:
        return ApplyOutcome("page", pid, NotFound("space", str(p["container"])))
    row = conn.execute(select(T_PAGES).where(T_PAGES.c.id == pid)).first()
    taken = conn.execute(
        select(T_PAGES).where(T_PAGES.c.container == p["container"], T_PAGES.c.address == p["address"])
    ).first()
    if row is None and taken is not None:
        row = taken  # a create whose title was taken meanwhile updates that page (write_page semantics)
    elif row is not None and taken is not None and taken.id != row.id:
        return ApplyOutcome(
            "page", pid, VersionConflict(f"another page is titled {p['title']!r}", int(row.version))
        )
    author = str(p.get("author") or "")
    if row is None:
        conn.execute(
            insert(T_PAGES).values(
                id=pid,
                container=p["container"],
                address=p["address"],
                title=p["title"],
                body=p["body"],
                edit_number=1,
                status="published",
                author=author,
                author_kind=str(p.get("author_kind") or ""),
                created_at=rec.at,
                updated_at=rec.at,
                version=1,
                search_shard=search_bucket(pid),
            )
        )
        _revision(conn, pid, 1, str(p["title"]), str(p["body"]), author, rec.at)
        _fts(conn, pid, str(p["container"]), str(p["title"]), str(p["body"]), new=True)
        return ApplyOutcome("page", pid)
    if p.get("if_match") is not None and int(p["if_match"]) != int(row.version):
        return ApplyOutcome(
            "page",
            str(row.id),
            VersionConflict(
                f"page {row.title!r} is at version {row.version}, not {p['if_match']}", int(row.version)
            ),
        )
    version = int(row.version) + 1
    conn.execute(
        update(T_PAGES)
        .where(T_PAGES.c.id == row.id)
        .values(
            title=p["title"],
            address=p["address"],
            body=p["body"],
            edit_number=int(row.edit_number) + 1,
            author=author,
            author_kind=str(p.get("author_kind") or ""),
            updated_at=rec.at,
            version=version,
        )
    )
    _revision(conn, str(row.id), version, str(p["title"]), str(p["body"]), author, rec.at)
    _fts(conn, str(row.id), str(p["container"]), str(p["title"]), str(p["body"]))
    return ApplyOutcome("page", str(row.id))


def _space(conn: Connection, rec: Record) -> ApplyOutcome:
    p = rec.payload
    key = str(p["key"])
    if conn.execute(select(T_CONTAINERS.c.key).where(T_CONTAINERS.c.key == key)).first() is None:
        conn.execute(
            insert(T_CONTAINERS).values(
                key=key, name=str(p.get("name") or ""), unit_id=str(p.get("unit_id") or ""), version=1
            )
        )
    else:
        conn.execute(
            update(T_CONTAINERS)
            .where(T_CONTAINERS.c.key == key)
            .values(
                name=str(p.get("name") or ""),
                unit_id=str(p.get("unit_id") or ""),
                version=T_CONTAINERS.c.version + 1,
            )
        )
    return ApplyOutcome("space", key)


KINDS: dict[str, ApplyFn] = {
    "page_write": lambda conn, rec, seq: _page_write(conn, rec),
    "space_upsert": lambda conn, rec, seq: _space(conn, rec),
}
"""Pages record kind → its apply (the log's gate records are applied by the log, ES-51)."""
