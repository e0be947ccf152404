"""A seat's memory as the tools and the reflect dispatcher use it (AG-2..AG-5): writes through the
node's :class:`MemoryWriter`, reads through the estate router at the writer's floor (ES-37).

:class:`RoutedMemory` is the node's one implementation of :class:`shared.tools.MemoryAccess`. A read
first raises the router's ``CREWLET_MEMORY`` floor to the highest sequence this node published for
the seat, so a turn (or a reflect pass) sees its own writes on whichever data node answers.
"""

from __future__ import annotations

from typing import Any

from shared.estate import EstateUsageError
from shared.estate.domains.memory import diary_id
from shared.router import EstateRouter, RouterError
from shared.tools import ToolFailed

from ._writer import MemoryWrite, MemoryWriter

__all__ = ["MEMORY_STREAM", "RoutedMemory"]

MEMORY_STREAM = "CREWLET_MEMORY"
"""The memory domain's log stream (AG-1)."""


class RoutedMemory:
    """Reads and writes of seats' memory on one node (AG-2).

    Args:
        writer: The node's memory writer (``ctx.extras["memory"]``).
        router: The node's estate router (reads go to whichever data node answers).
    """

    def __init__(self, writer: MemoryWriter, router: EstateRouter) -> None:
        self.writer = writer
        self.router = router

    async def rows(self, handle: str, tables: list[str], limit: int = 500) -> list[dict[str, Any]]:
        """``handle``'s rows of ``tables``, newest first (``memory.rows``), at this node's floor.

        Raises:
            ToolFailed: no data node answered, or the read was refused (named).
        """
        floor = self.writer.floor(handle)
        if floor:
            self.router.note_position({"stream": MEMORY_STREAM, "seq": floor})
        try:
            got = await self.router.call("memory.rows", {"handle": handle, "tables": tables, "limit": limit})
        except (RouterError, EstateUsageError) as e:
            raise ToolFailed(f"seat memory could not be read: {e}", None) from None
        data = got.get("data", {}) if isinstance(got, dict) else {}
        return list(data.get("rows") or [])

    async def create(self, handle: str, table: str, key: tuple[str, ...], row: dict[str, Any]) -> str:
        """Create an immutable row (first writer wins, AG-1); returns the write's status."""
        return (await self.writer.create(handle, table, key, row)).status

    async def update(self, handle: str, table: str, key: tuple[str, ...], change: Any) -> MemoryWrite:
        """Compare-and-set one mutable row (:meth:`MemoryWriter.update`)."""
        return await self.writer.update(handle, table, key, change)

    def diary_id(self, agent_id: str, content: str) -> str:
        """uuid5(agent id, content as written): a byte-identical entry collapses (AG-1, FL-75)."""
        return diary_id(agent_id, content)
