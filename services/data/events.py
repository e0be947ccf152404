"""The events this data node publishes about estate writes it ran (ES-77).

One event per write that ran here, keyed by the write's op id (so a retried write is one row):
``work_item.created|updated|commented``, ``page.written``, ``file.written``. Seeds are not events.
"""

from __future__ import annotations

from typing import Any

from shared.estate import Call, EventLog, op_id_instant

__all__ = ["EventLog", "estate_event"]

_TYPES = {
    "work.create": ("work_item.created", "tracker"),
    "work.update": ("work_item.updated", "tracker"),
    "work.comment": ("work_item.commented", "tracker"),
    "pages.write": ("page.written", "knowledge"),
    "files.put": ("file.written", "files"),
}


def estate_event(node_id: str, op: str, call: Call, answer: dict[str, Any]) -> dict[str, Any] | None:
    """Return the event of one write that ran here, or None for writes that are not events (seeds)."""
    kind = _TYPES.get(op)
    if kind is None:
        return None
    op_id = str(answer.get("op_id") or call.op_id)
    obj = answer.get("object") or {}
    author = str(call.args.get("author") or "")
    return {
        "event_time": op_id_instant(op_id) * 1000,
        "event_id": op_id,
        "event_type": kind[0],
        "source": "estate",
        "category": kind[1],
        "task_id": obj.get("key") or obj.get("work_item") if kind[1] == "tracker" else None,
        "sender": author or None,
        "data": {
            "op_id": op_id,
            "outcome": answer.get("outcome"),
            "position": answer.get("position_token"),
            "object": {k: obj.get(k) for k in ("id", "key", "title", "space", "path", "version") if k in obj},
            "writer": node_id,
        },
        "parties": {author: "author"} if author else {},
    }
