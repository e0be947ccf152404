"""The one work item a turn is charged to (CO-19, CO-36): the trigger's item, else the asker's
item of an agent-to-agent ask, else the one item the turn's tracker writes touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._trigger import Trigger

__all__ = ["WorkItemCharge", "work_item_charge"]


@dataclass(frozen=True)
class WorkItemCharge:
    """The one work item a turn is charged to (CO-19).

    Attributes:
        key: ``SUP-1``.
        id: The item's id when known, else None.
        project: ``SUP``.
        basis: ``trigger`` (the wake named it), ``asked_by`` (an agent-to-agent ask: the asker's
            item, CO-36) or ``sole_write`` (the turn's successful tracker writes touched exactly
            this one item).
        backend: ``native`` at P0.

    .. versionchanged:: 0.1 ``asked_by`` (issue 14, CO-19/CO-36).
    """

    key: str
    id: str | None
    project: str
    basis: Literal["trigger", "asked_by", "sole_write"]
    backend: str = "native"


def _asked_by_item(trigger: Trigger) -> Mapping[str, Any] | None:
    """The asker's work item an ``a2a_request`` carries (``payload.asked_by.work_item``, CO-36)."""
    if trigger.type != "a2a_request" or not trigger.payload:
        return None
    asked = trigger.payload.get("asked_by")
    item = asked.get("work_item") if isinstance(asked, Mapping) else None
    if isinstance(item, Mapping) and isinstance(item.get("key"), str) and item["key"]:
        return item
    return None


def work_item_charge(
    trigger: Trigger, item: Mapping[str, Any] | None, touched: Sequence[Mapping[str, Any]]
) -> tuple[list[str], WorkItemCharge | None]:
    """Settle a turn's charge (CO-19): the trigger's item (``trigger``), else the asker's item of
    an agent-to-agent ask (``asked_by``, CO-36), else the one item the turn's writes touched
    (``sole_write``), else none.

    Args:
        trigger: The turn's trigger.
        item: The trigger's item as the workspace returned it, or None.
        touched: The successful tracker writes' ``{"key", "id", "project"}``, in order.

    Returns:
        ``(touched keys in first-touch order, the charge or None)``.
    """
    seen: dict[str, dict[str, Any]] = {}
    for t in touched:
        if t["key"]:
            seen.setdefault(t["key"], dict(t))
            if t.get("id"):
                seen[t["key"]]["id"] = t["id"]
    asked = _asked_by_item(trigger)
    charge: WorkItemCharge | None = None
    if trigger.work_item_key:
        key = trigger.work_item_key
        item_id = (item or {}).get("id") or (seen.get(key) or {}).get("id")
        charge = WorkItemCharge(key, item_id, key.rsplit("-", 1)[0], "trigger")
    elif asked is not None:
        key = asked["key"]
        project = asked.get("project")
        charge = WorkItemCharge(
            key,
            asked.get("id") if isinstance(asked.get("id"), str) else None,
            project if isinstance(project, str) and project else key.rsplit("-", 1)[0],
            "asked_by",
        )
    elif len(seen) == 1:
        key, one = next(iter(seen.items()))
        charge = WorkItemCharge(key, one.get("id"), one["project"], "sole_write")
    return list(seen), charge
