"""``GET /usage``: spend by seat, phase, model and day for the whole fleet (AG-48, ES-69).

``GET /usage?from=&to=&seat=&schedule=&group_by=day|seat|node|model|phase|worker`` (grant
``state:read``) reads one data node's copy of the ``usage`` domain through the router: every node's
published days, nodes that left the fleet included, summed. Days are company days
(``YYYY-MM-DD`` on the company ``timezone``); ``to`` defaults to today and ``from`` to 29 days
before ``to``. The answer is the domain's (:func:`shared.estate.domains.usage.read_usage`):
``groups``, ``total``, contributing ``nodes`` and ``horizon: {first_day, last_day}`` (what the copy
holds, so a window older than the data says so), beside ``read`` (which node served, at what
position) and ``node`` (the node asked). It is the answer for windows past ``/tokens/breakdown``'s
30 days. Refused with 400 ``invalid`` naming the parameter (``detail.field``): ``from`` after
``to``, a span over 181 days (``to``), an unknown ``group_by``, a day that is no date.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query

from shared import estate
from shared.estate.domains.usage import check_query
from shared.runtime import NodeContext

from ._common import add, estate_call, estate_http_error, grants

__all__ = ["router"]

DEFAULT_DAYS = 30
"""Company days a read spans when ``from`` is not given (``to`` included)."""


class UsageRoutes:
    """The usage read (AG-48) over this node's estate router."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def today(self) -> str:
        """Today on the company clock (the applied org's ``timezone``; UTC before one)."""
        name = str(self.ctx.org.company.timezone) if self.ctx.org is not None else "UTC"
        try:
            zone = ZoneInfo(name)
        except (ValueError, KeyError, OSError):
            zone = ZoneInfo("UTC")
        return datetime.now(zone).date().isoformat()

    async def usage(
        self,
        from_: str | None = Query(None, alias="from"),
        to: str | None = None,
        seat: str | None = None,
        schedule: str | None = None,
        group_by: str = "day",
    ) -> dict[str, Any]:
        end = to or self.today()
        start = from_
        if start is None:
            try:
                start = (date.fromisoformat(end) - timedelta(days=DEFAULT_DAYS - 1)).isoformat()
            except ValueError:
                start = end  # the check below names ``to``
        args = {"from": start, "to": end, "seat": seat, "schedule": schedule, "group_by": group_by}
        try:
            args = check_query(args)  # refused here, without asking a data node
        except estate.EstateError as e:
            raise estate_http_error(e) from None
        res: dict[str, Any] = await estate_call(self.ctx, lambda est: est.call("usage.query", args))
        return {"node": self.ctx.node_id, **res["data"], "read": res["meta"]}


def router(ctx: NodeContext) -> APIRouter:
    """Build the usage route."""
    r = APIRouter(tags=["usage"])
    read, _ = grants(ctx, "state:read", "state:read")
    add(r, "/usage", UsageRoutes(ctx).usage, methods=["GET"], dependencies=read)
    return r
