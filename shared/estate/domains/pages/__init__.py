"""The pages domain: the native knowledge base on the ``pages`` log (CO-25, ES-60..ES-63).

Owns the tables ``containers``, ``pages``, ``page_revisions`` and the ``pages_fts`` index; the
operations ``pages.*``, ``space.upsert`` and ``spaces.list``; the record kinds ``page_write`` and
``space_upsert``; and the divided search (:class:`DividedSearch`, :class:`SliceResponder`) that
spreads ``pages.search`` over the data nodes. It may import :mod:`shared.estate.log`,
:mod:`shared.estate.store`, the estate's base modules and :mod:`shared.bus` (the slice responder),
never another domain.
"""

from __future__ import annotations

from .._seam import EstateDomain, ReadOp, WriteOp
from ._divided import DIVIDE_AT, SLICE_WAIT, DividedSearch, SliceResponder, assign, merge_hits, slice_subject
from ._hybrid import RRF_K, fuse, fuse_answer, merge_lexical, search
from ._pages import KINDS, PAGE_LIMIT, address_of, decide_page, decide_space
from ._read import get_page, list_pages, list_spaces, page_view, search_pages
from ._tables import PAGES_FTS, Container, Page, PageRevision

__all__ = [
    "DIVIDE_AT",
    "DOMAIN",
    "PAGE_LIMIT",
    "RRF_K",
    "fuse",
    "fuse_answer",
    "merge_lexical",
    "SLICE_WAIT",
    "DividedSearch",
    "SliceResponder",
    "address_of",
    "assign",
    "merge_hits",
    "search_pages",
    "slice_subject",
]

DOMAIN = EstateDomain(
    name="pages",
    log="pages",
    tables=(Container, Page, PageRevision),
    ddl=(PAGES_FTS,),
    writes={
        "pages.write": WriteOp(decide_page, page_view),
        "space.upsert": WriteOp(decide_space, lambda c, i: {"key": i}),
    },
    reads={
        "pages.get": ReadOp(lambda c, r, a: get_page(c, a)),
        "pages.list": ReadOp(lambda c, r, a: list_pages(c, a)),
        "pages.search": ReadOp(lambda c, r, a: search(c, a), search=True),
        "spaces.list": ReadOp(lambda c, r, a: list_spaces(c)),
    },
    apply=KINDS,
    corpus="pages",
)
