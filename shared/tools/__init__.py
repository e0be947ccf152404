"""Tools seam: the registry, the capability model and the P0 built-ins (CO-16, CO-23..CO-26).

:class:`ToolRegistry` is one tool surface; :meth:`ToolRegistry.execute` turns every ordinary
failure into an error result the model reads. The built-ins act on a :class:`Workspace` (the
tracker, knowledge base and files of one seat), whose refusals are :class:`WorkspaceError`\\ s.
:func:`publish_comment_wakes` wakes the seats a tracker comment concerns (CO-41).
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
from ._memory import (
    DIARY_KINDS,
    EPISODE_LIMIT_MAX,
    MAX_DIARY_CHARS,
    SHORT_TTL_DAYS,
    MemoryAccess,
    memory_tools,
    words,
)
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
from ._wakes import (
    COMMENT_WAKE_WINDOW,
    COMMENT_WAKES_PER_HOUR,
    CommentWakeReason,
    claim_comment_wake,
    comment_wake_targets,
    mentioned_handles,
    publish_comment_wakes,
)
from ._workspace import Workspace

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "BUILTIN_TOOL_TIMEOUT_SECONDS",
    "COMMENT_WAKES_PER_HOUR",
    "COMMENT_WAKE_WINDOW",
    "DIARY_KINDS",
    "EPISODE_LIMIT_MAX",
    "FILE_IO_LIMIT_BYTES",
    "MAX_DIARY_CHARS",
    "SHORT_TTL_DAYS",
    "STATUSES",
    "CommentWakeReason",
    "Hint",
    "MemoryAccess",
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
    "claim_comment_wake",
    "colleague_tools",
    "comment_wake_targets",
    "file_tools",
    "knowledge_tools",
    "memory_tools",
    "mentioned_handles",
    "publish_comment_wakes",
    "submit_work_tool",
    "tracker_tools",
    "validate_arguments",
    "words",
]
