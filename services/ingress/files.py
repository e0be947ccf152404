"""Project files as the ingress serves them (CO-26, ES-70, ES-74): rows through the router, bytes
through the node's object store.

:func:`object_store_of` finds (or opens and claims) the node's object store; :func:`open_file`
reads a file's row and starts its bytes; :func:`store_file` stores the bytes first (content-addressed,
``sha256/<2 hex>/<sha256>``) and appends the row second, so a listed file always has its bytes and a
failed upload leaves at most an unnamed object (ES-74). Estate and router failures propagate as
they are (the route maps them); object store failures raise :class:`~shared.objects.ObjectsError`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

from shared import estate, objects
from shared.router import router_of
from shared.runtime import NodeContext

__all__ = ["object_store_of", "open_file", "store_file"]

_open_lock = asyncio.Lock()


async def object_store_of(ctx: NodeContext) -> objects.ObjectStore:
    """Return the node's object store (``ctx.objects``, opened and claimed at boot by the node runner).

    A context without one (a test harness, a runner that skipped it) opens and claims it here on first
    use and keeps it in ``ctx.objects`` so the runner closes it at shutdown.

    Raises:
        ObjectsError: the store could not be opened, or another store is recorded (ES-71).
    """
    if ctx.objects is not None:
        return ctx.objects
    async with _open_lock:
        if ctx.objects is None:
            opened = await objects.open_object_store(ctx.cfg, ctx.link)
            if ctx.coord is not None:
                await objects.claim_objects_slot(ctx.coord, opened)
            ctx.objects = opened
        return ctx.objects


async def open_file(ctx: NodeContext, row: dict[str, Any]) -> AsyncIterator[bytes]:
    """The bytes of the file ``row`` names (``{"object_key", ...}``), its first chunk already read.

    The first chunk is read before the caller sends its headers: a store that fails at once raises
    here, rather than cutting a 200 short after its headers.

    Raises:
        ObjectsError: the store could not be opened or does not have the object.
    """
    store = await object_store_of(ctx)
    chunks = (await store.get(str(row["object_key"]))).__aiter__()
    first = await anext(chunks, None)

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield first
        async for chunk in chunks:
            yield chunk

    return body()


async def store_file(
    ctx: NodeContext,
    key: str,
    path: str,
    data: bytes,
    *,
    content_type: str,
    if_match: int | None,
    author: str,
) -> dict[str, Any]:
    """Store ``data`` as ``path`` of project ``key``: the project checked, the object put, the row
    appended (``work:write`` by ``author``; ``if_match`` the version read, 0 = must be new).

    Returns:
        The row write's answer (``{"outcome", "op_id", "position", "object": row}``).

    Raises:
        EstateError | RouterError: the project is unknown, or the row write was refused.
        ObjectsError: the bytes could not be stored.
    """
    est = router_of(ctx)
    await est.get_work_catalogue(key)  # the project must exist before any byte is stored
    sha = hashlib.sha256(data).hexdigest()
    store = await object_store_of(ctx)
    info = await store.put(estate.object_key_for(sha), data)
    return await est.put_file_row(
        key,
        path,
        size=info.size,
        sha256=info.sha256 or sha,
        object_key=info.key,
        content_type=content_type,
        if_match=if_match,
        author=author,
        author_kind="operator",
    )
