"""The knowledge base's tables (spec/estate.md §21, CO-25): spaces (``containers``), pages, page
revisions, and the lexical index ``pages_fts`` (derived data, maintained by apply).
"""

from __future__ import annotations

from sqlalchemy import UniqueConstraint
from sqlmodel import Field

from ...store._schema import EstateModel, table_of

__all__ = ["Container", "PAGES_FTS", "Page", "PageRevision", "T_CONTAINERS", "T_PAGES", "T_PAGE_REVISIONS"]


class Container(EstateModel, table=True):
    """``containers``: a knowledge space (CO-25), one per unit with ``space:``."""

    __tablename__ = "containers"
    key: str = Field(primary_key=True)
    name: str = ""
    unit_id: str = ""
    settings: str = "{}"
    version: int = 1


class Page(EstateModel, table=True):
    """``pages`` (CO-25, §21): title unique per container through its normalised ``address``."""

    __tablename__ = "pages"
    __table_args__ = (UniqueConstraint("container", "address"),)
    id: str = Field(primary_key=True)
    container: str
    address: str
    title: str
    body: str
    edit_number: int = 1
    status: str = "published"
    author: str = ""
    author_kind: str = ""
    created_at: int
    updated_at: int
    version: int = 1
    scoped_through: int = 0
    search_shard: int = 0


class PageRevision(EstateModel, table=True):
    """``page_revisions``: every save keeps one (CO-25; the newest 100 per page, §21)."""

    __tablename__ = "page_revisions"
    page_id: str = Field(primary_key=True)
    version: int = Field(primary_key=True)
    title: str
    body: str
    author: str
    at: int


PAGES_FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(page_id UNINDEXED, container UNINDEXED, title, body, "
    "tokenize='unicode61 remove_diacritics 2')"
)
"""The lexical index (CO-25: SQLite FTS5 with ``bm25()``)."""

T_CONTAINERS = table_of(Container)
T_PAGES = table_of(Page)
T_PAGE_REVISIONS = table_of(PageRevision)
