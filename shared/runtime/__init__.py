"""Runtime seam: the node context the roles share, the role contract, probes, auth, errors (FL-1, FL-126)."""

from ._auth import require_grant
from ._context import PROTOCOL_VERSION, NodeContext, new_owner
from ._embedding import node_embedder
from ._http_errors import MAX_VERSION, api_error, install_error_handlers
from ._probes import probes_router
from ._role import CompanySnapshot, RoleService
from ._watchdog import EXIT_WEDGED, Beat, Watchdog

__all__ = [
    "node_embedder",
    "EXIT_WEDGED",
    "MAX_VERSION",
    "PROTOCOL_VERSION",
    "Beat",
    "CompanySnapshot",
    "NodeContext",
    "RoleService",
    "Watchdog",
    "api_error",
    "install_error_handlers",
    "new_owner",
    "probes_router",
    "require_grant",
]
