"""The estate as one seat's turn writes to it: every write carries the seat's lease epoch (FL-74).

A data node checks the epoch against the seat's current one before appending
(``EstateService.fence_check``) and refuses a write made under an older one as ``Fenced``, so a
zombie that wakes after its lease moved cannot land a write, whatever its own in-turn fence believed.
"""

from __future__ import annotations

from typing import Any

from shared.estate import OPS, ReadLevel

from ._api import EstateCalls

__all__ = ["SeatCalls"]


class SeatCalls(EstateCalls):
    """Wraps a router so every write names ``{seat, epoch}`` in its ``fence`` argument.

    Args:
        inner: The node's router.
        seat: The seat handle the writes are made for.
        epoch: The seat's lease epoch held by this turn.
    """

    def __init__(self, inner: EstateCalls, *, seat: str, epoch: int) -> None:
        self.inner = inner
        self.seat = seat
        self.epoch = epoch

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
        """See :meth:`shared.router.EstateRouter.call`; a write also carries the fence."""
        a = dict(args or {})
        spec = OPS.get(op)
        if spec is not None and spec[1] == "write":
            a["fence"] = {"seat": self.seat, "epoch": self.epoch}
        return await self.inner.call(
            op, a, op_id=op_id, read_level=read_level, min_position=min_position, timeout=timeout, node=node
        )
