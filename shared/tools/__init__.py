"""Tools seam: the registry, the capability model and the P0 built-ins (CO-16, CO-23..CO-26).

:class:`ToolRegistry` is one tool surface; :meth:`ToolRegistry.execute` turns every ordinary
failure into an error result the model reads. The built-ins act on a :class:`Workspace` (the
tracker, knowledge base and files of one seat), whose refusals are :class:`WorkspaceError`\\ s.
"""

from ._builtins import BUILTIN_TOOL_NAMES, builtin_tools, colleague_tools, submit_work_tool
from ._errors import (
    ToolArgumentsInvalid,
    ToolError,
    ToolFailed,
    ToolRegistryError,
    WorkspaceConflict,
    WorkspaceError,
    WorkspaceNotFound,
    WorkspaceRefused,
    WorkspaceUnavailable,
)
from ._knowledge import FILE_IO_LIMIT_BYTES, check_path, file_tools, knowledge_tools
from ._registry import (
    BUILTIN_TOOL_TIMEOUT_SECONDS,
    Hint,
    Submission,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolHandler,
    ToolOutcome,
    ToolRegistry,
)
from ._schema import validate as validate_arguments
from ._tracker import STATUSES, tracker_tools
from ._workspace import Workspace

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "BUILTIN_TOOL_TIMEOUT_SECONDS",
    "FILE_IO_LIMIT_BYTES",
    "STATUSES",
    "Hint",
    "Submission",
    "Tool",
    "ToolAnnotations",
    "ToolArgumentsInvalid",
    "ToolContext",
    "ToolError",
    "ToolFailed",
    "ToolHandler",
    "ToolOutcome",
    "ToolRegistry",
    "ToolRegistryError",
    "Workspace",
    "WorkspaceConflict",
    "WorkspaceError",
    "WorkspaceNotFound",
    "WorkspaceRefused",
    "WorkspaceUnavailable",
    "builtin_tools",
    "check_path",
    "colleague_tools",
    "file_tools",
    "knowledge_tools",
    "submit_work_tool",
    "tracker_tools",
    "validate_arguments",
]
