"""Router seam: every node reaches the estate through :class:`EstateRouter` (ES-32..ES-40).

A data node answers its own calls from its own copy in-process; otherwise the router asks data
nodes over NATS request/reply on ``crewlet.estate.rpc.<node_id>`` (:class:`RpcServer` answers there).
"""

from ._api import EstateCalls, failed_search
from ._errors import AnswerTooLarge, NobodyAnswered, NodeReply, RouterError
from ._fenced import SeatCalls
from ._open import open_router, router_of
from ._router import READ_WAIT, SILENT_DEMOTION, WRITE_WAIT, EstateRouter, LocalEstate
from ._server import RpcServer
from ._wire import decode_answer, decode_call, encode_answer, encode_call, rpc_subject

__all__ = [
    "READ_WAIT",
    "SILENT_DEMOTION",
    "WRITE_WAIT",
    "AnswerTooLarge",
    "EstateCalls",
    "EstateRouter",
    "LocalEstate",
    "NobodyAnswered",
    "NodeReply",
    "RouterError",
    "RpcServer",
    "SeatCalls",
    "decode_answer",
    "decode_call",
    "encode_answer",
    "encode_call",
    "failed_search",
    "open_router",
    "router_of",
    "rpc_subject",
]
