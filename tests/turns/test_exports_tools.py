"""Pin the public API of ``shared.tools`` (STYLE: a test pins ``__all__``)."""

from __future__ import annotations

from shared import tools

EXPECTED = [
    "BUILTIN_TOOL_NAMES",
    "BUILTIN_TOOL_TIMEOUT_SECONDS",
    "COMMENT_WAKES_PER_HOUR",
    "COMMENT_WAKE_WINDOW",
    "CommentWakeReason",
    "DIARY_KINDS",
    "EPISODE_LIMIT_MAX",
    "FILE_IO_LIMIT_BYTES",
    "Hint",
    "MAX_DIARY_CHARS",
    "MemoryAccess",
    "SHORT_TTL_DAYS",
    "STATUSES",
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


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(tools.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(tools, name) is not None
