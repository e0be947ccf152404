"""Seeding the tracker and knowledge base from the company (CO-24, CO-25).

Every unit with ``project: KEY`` becomes a project and every unit with ``space: KEY`` a space, by
ordinary writes through the log. Their operation ids are derived from the unit's fields, so every
data node and every boot mints the same ids and the ledger (or the broker's duplicate window)
collapses them: all copies converge, and a changed unit is a new id that lands once.
"""

from __future__ import annotations

from typing import Any

from ._protocol import Call
from .log._ids import derive_op_id

__all__ = ["company_seed"]


def company_seed(org: Any) -> list[Call]:
    """Return the seed writes for ``org`` (a ``shared.config.OrgModel``; None seeds nothing).

    Returns:
        ``project.upsert`` and ``space.upsert`` calls, one per unit key, in document order.
    """
    if org is None:
        return []
    calls: list[Call] = []
    for unit in getattr(org, "units", ()):
        purpose = str(getattr(unit.unit, "purpose", "") or "")
        if unit.project:
            args = {
                "key": unit.project,
                "name": unit.name,
                "purpose": purpose,
                "unit_id": unit.id,
                "lead": unit.effective_lead or "",
            }
            op = derive_op_id(f"seed-project-{unit.project}", *(f"{k}={v}" for k, v in sorted(args.items())))
            calls.append(Call(op="project.upsert", args=args, op_id=op))
        if unit.space:
            args = {"key": unit.space, "name": unit.name, "unit_id": unit.id}
            op = derive_op_id(f"seed-space-{unit.space}", *(f"{k}={v}" for k, v in sorted(args.items())))
            calls.append(Call(op="space.upsert", args=args, op_id=op))
    return calls
