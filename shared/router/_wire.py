"""The router's wire format over NATS request/reply (ES-38).

A request is one JSON object ``{"v": 1, "op", "args", "op_id", "floors", "read_level",
"min_position", "deadline", "take_anyway", "asker"}`` sent to ``crewlet.estate.rpc.<node_id>``. A
reply is ``{"v": 1, "status": "ran"|"ran_nothing"|"unvouched", "node", "positions", "result"?,
"error"?, "reason"?, "detail"?, "retry_after"?}``. An unknown protocol version is answered
``ran_nothing`` with reason ``protocol`` naming the version. A reply larger than the payload limit
is replaced by a ``too_large`` refusal naming the limit rather than truncated.
"""

from __future__ import annotations

import json
from typing import Any

from shared.estate import PROTOCOL, Answer, Call, TooLarge, to_wire

__all__ = ["RPC_PREFIX", "decode_answer", "decode_call", "encode_answer", "encode_call", "rpc_subject"]

RPC_PREFIX = "crewlet.estate.rpc"


def rpc_subject(node_id: str) -> str:
    """Return ``crewlet.estate.rpc.<node_id>`` (spec/estate.md §0; never a queue group)."""
    return f"{RPC_PREFIX}.{node_id}"


def encode_call(call: Call) -> bytes:
    """Serialise a call (protocol :data:`~shared.estate.PROTOCOL`)."""
    return json.dumps(
        {
            "v": PROTOCOL,
            "op": call.op,
            "args": call.args,
            "op_id": call.op_id,
            "floors": call.floors,
            "read_level": call.read_level,
            "min_position": call.min_position,
            "deadline": call.deadline,
            "take_anyway": call.take_anyway,
            "asker": call.asker,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def decode_call(raw: bytes) -> Call:
    """Parse a call.

    Raises:
        ValueError: not a call, or a protocol version this build does not speak (the message names it).
    """
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("a call is a JSON object")
    if data.get("v") != PROTOCOL:
        raise ValueError(
            f"protocol version {data.get('v')!r} is not spoken here (this node speaks {PROTOCOL})"
        )
    floors = data.get("floors") or {}
    return Call(
        op=str(data.get("op", "")),
        args=dict(data.get("args") or {}),
        op_id=str(data.get("op_id") or ""),
        floors={str(k): int(v) for k, v in floors.items()},
        read_level=data.get("read_level") or "stale",
        min_position=data.get("min_position"),
        deadline=float(data.get("deadline") or 0.0),
        take_anyway=bool(data.get("take_anyway")),
        asker=str(data.get("asker") or ""),
    )


def encode_answer(answer: Answer, *, limit: int) -> bytes:
    """Serialise an answer; one over ``limit`` bytes becomes a ``too_large`` refusal naming the limit."""
    body: dict[str, Any] = {
        "v": PROTOCOL,
        "status": answer.status,
        "node": answer.node,
        "positions": answer.positions,
    }
    for name in ("result", "error", "reason", "detail", "retry_after"):
        value = getattr(answer, name)
        if value not in (None, ""):
            body[name] = value
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    if len(raw) > limit:
        err = TooLarge("answer", limit, len(raw))
        raw = json.dumps(
            {
                "v": PROTOCOL,
                "status": "ran",
                "node": answer.node,
                "positions": answer.positions,
                "error": to_wire(err),
            }
        ).encode()
    return raw


def decode_answer(raw: bytes) -> Answer:
    """Parse an answer.

    Raises:
        ValueError: not an answer.
    """
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("status") not in ("ran", "ran_nothing", "unvouched"):
        raise ValueError("not an estate answer")
    ra = data.get("retry_after")
    return Answer(
        status=data["status"],
        node=str(data.get("node", "")),
        positions={str(k): int(v) for k, v in (data.get("positions") or {}).items()},
        result=data.get("result"),
        error=data.get("error"),
        reason=str(data.get("reason") or ""),
        detail=str(data.get("detail") or ""),
        retry_after=float(ra) if isinstance(ra, int | float) else None,
    )
