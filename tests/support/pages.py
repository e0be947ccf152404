"""Bulk-load generated knowledge pages straight onto a fleet's pages log (tests and benchmarks).

Publishing 12 000 or 100 000 pages one ``POST /knowledge/pages`` at a time would take minutes;
these records are what a page create decides (``page_write`` with ``create: true``, ES-60's
bucket follows from the page id), published in batches of 1 000 with the op id as
``Nats-Msg-Id``, so every data node's applier builds the same rows it would from the API.
"""

from __future__ import annotations

import asyncio
import time

from nats.js import JetStreamContext

from shared import estate
from shared.estate.domains.pages import address_of
from shared.estate.log import derived_id

__all__ = ["page_record", "publish_pages"]


def page_record(i: int, space: str, title: str, body: str, *, now: int, writer: str) -> estate.Record:
    """The ``page_write`` record creating page number ``i`` (``now`` in microseconds since the epoch)."""
    op = estate.mint_op_id(f"{writer}-page-{i}")
    pid = derived_id("page", op)
    return estate.Record(
        kind="page_write",
        domain="pages",
        subject=estate.object_subject("pages", "page", pid),
        op_id=op,
        writer=writer,
        generation=1,
        at=now,
        payload={
            "page_id": pid,
            "create": True,
            "container": space,
            "title": title,
            "address": address_of(title),
            "body": body,
            "author": writer,
            "author_kind": "operator",
        },
        scope=(f"page:{pid}", f"space:{space}"),
    )


async def publish_pages(js: JetStreamContext, pages: list[tuple[str, str, str]], *, writer: str) -> int:
    """Publish ``(space, title, body)`` pages in batches of 1 000; return the log's last sequence."""
    now = int(time.time() * 1_000_000)
    last = 0
    step = 1000
    for start in range(0, len(pages), step):
        recs = [
            page_record(start + i, *p, now=now, writer=writer)
            for i, p in enumerate(pages[start : start + step])
        ]
        acks = await asyncio.gather(
            *(
                js.publish(
                    r.subject, r.encode(), headers={"Nats-Msg-Id": r.op_id}, stream=estate.STREAMS["pages"]
                )
                for r in recs
            )
        )
        last = max(last, *(int(a.seq) for a in acks))
    return last
