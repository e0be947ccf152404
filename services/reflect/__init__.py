"""The reflect dispatcher (AG-3..AG-6): after every settled turn, memory rows for its seat.

Not a role: every node joins the fleet-wide group ``crewlet-reflect`` on
``crewlet.events.agent_turn_completed`` (it needs no data, FL-86). :class:`ReflectDispatcher` is the
member; :mod:`._gates` the gates; :mod:`._workers` the episodist, the persist decider and the
profiler (looked up by name in :data:`WORKERS`, where a test's fault hook ``reflect_worker:<name>``
replaces one); :class:`Auxiliary` the seat's auxiliary model, charged to the seat.
"""

from ._auxiliary import Auxiliary, auxiliary_keys
from ._dispatcher import ReflectDispatcher
from ._gates import DUPLICATE_RING, GATES, RecentKeys
from ._workers import ORDER, TRAITS_MAX_BYTES, WORKERS

__all__ = [
    "DUPLICATE_RING",
    "GATES",
    "ORDER",
    "TRAITS_MAX_BYTES",
    "WORKERS",
    "Auxiliary",
    "RecentKeys",
    "ReflectDispatcher",
    "auxiliary_keys",
]
