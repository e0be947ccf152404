"""Config seam: the node file (Tier A) and the company document (Tier B).

Both tiers are validated strictly, in one pass, into ``{path, type, message}`` issues in a stable
order (CO-1, FL-158); a refused file raises :class:`ConfigInvalid` listing every issue.
"""

from ._company_api import *  # noqa: F403 - the Tier B API names its own __all__
from ._company_api import __all__ as _company_all
from ._issues import ConfigInvalid, Issue, IssueType, Severity, sort_issues
from ._node import (
    ALL_ROLES,
    DEFAULT_NODE_ID,
    ApiConfig,
    ApiToken,
    CoordinationConfig,
    NodeConfig,
    NodeSection,
    ObjectsConfig,
    Role,
    SecretsConfig,
    SecretsKey,
    StoreConfig,
    StreamConfig,
)
from ._node_load import load_node_file, node_config_from_data
from ._node_rules import count_peers
from ._yaml import read_yaml_mapping

__all__ = [
    "ALL_ROLES",
    "DEFAULT_NODE_ID",
    "ApiConfig",
    "ApiToken",
    "ConfigInvalid",
    "CoordinationConfig",
    "Issue",
    "IssueType",
    "NodeConfig",
    "NodeSection",
    "ObjectsConfig",
    "Role",
    "SecretsConfig",
    "SecretsKey",
    "Severity",
    "StoreConfig",
    "StreamConfig",
    "count_peers",
    "load_node_file",
    "node_config_from_data",
    "read_yaml_mapping",
    "sort_issues",
    *_company_all,
]
