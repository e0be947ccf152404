"""History seam: turn records and event logs read across the fleet (ES-79).

Each node keeps its own turns (``shared.records``) and each data node the events it published
(ES-77); an ingress answers ``GET /turns``, ``/events`` and the like by asking every live node over
``crewlet.history.scatter.<node_id>`` within :data:`READ_BUDGET`, merging by time, and naming in
``coverage`` the nodes that answered, did not, or speak another version of this protocol.
"""

from ._protocol import (
    EVENT_WHATS,
    READ_BUDGET,
    SUBJECT_PREFIX,
    VERSION,
    WHATS,
    Coverage,
    answer_request,
    decode,
    encode,
    gather,
    merge_rows,
    merge_tokens,
    request,
    row_key,
    scatter_subject,
)
from ._responder import HistoryResponder

__all__ = [
    "EVENT_WHATS",
    "READ_BUDGET",
    "SUBJECT_PREFIX",
    "VERSION",
    "WHATS",
    "Coverage",
    "HistoryResponder",
    "answer_request",
    "decode",
    "encode",
    "gather",
    "merge_rows",
    "merge_tokens",
    "request",
    "row_key",
    "scatter_subject",
]
