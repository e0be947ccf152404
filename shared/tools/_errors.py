"""Errors of the tools seam (CO-16, CO-23).

Every error a tool handler raises on purpose derives from :class:`ToolError`; the registry turns
it into an error *result* the model reads, so the turn goes on (CO-16). Only a defect (an
exception outside this tree) escapes the registry::

    CrewletError
    └── ToolError                         (shared.tools) the seam's base
        ├── ToolFailed                    a built-in refused (binary file, blocked without evidence)
        ├── ToolArgumentsInvalid          arguments broke the tool's schema (also a UsageError)
        ├── ToolRegistryError             two tools with one name on a surface (also a UsageError)
        └── WorkspaceError(message, field) the tracker / knowledge base / files refused
            ├── WorkspaceNotFound         no such item, page, file or project
            ├── WorkspaceConflict         a stale ``if_match``; carries the current version
            ├── WorkspaceRefused          a value the workspace does not accept (type, status...)
            └── WorkspaceUnavailable      the estate could not be reached (retryable)

:class:`WorkspaceError` is what a :class:`~shared.tools.Workspace` implementation raises (the
estate router is adapted to it); ``field`` names the argument at fault, when one is.
"""

from __future__ import annotations

from shared.errors import CrewletError, UsageError

__all__ = [
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolFailed",
    "ToolRegistryError",
    "WorkspaceConflict",
    "WorkspaceError",
    "WorkspaceNotFound",
    "WorkspaceRefused",
    "WorkspaceUnavailable",
]


class ToolError(CrewletError):
    """Base of every error of the tools seam.

    Attributes:
        code: A short machine-readable class name the model sees (``not_found``, ...).
        field: The argument at fault, or None.
    """

    code = "tool_error"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ToolFailed(ToolError):
    """A built-in tool refused the call (its own rule, not the schema's)."""

    code = "refused"


class ToolArgumentsInvalid(ToolError, UsageError):
    """The arguments broke the tool's JSON Schema.

    Attributes:
        problems: One ``"<path>: <message>"`` line per problem, in schema order.
    """

    code = "invalid_arguments"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        first = problems[0].split(":", 1)[0] if problems else None
        super().__init__("invalid arguments: " + "; ".join(problems), field=first or None)


class ToolRegistryError(ToolError, UsageError):
    """A surface was built wrong (two tools with one name)."""

    code = "registry"


class WorkspaceError(ToolError):
    """The workspace (tracker, knowledge base, files) refused or failed a request.

    Args:
        message: What went wrong, for the model to read.
        field: The argument at fault (``key``, ``if_match``, ``type``...), or None.
    """

    code = "workspace_error"


class WorkspaceNotFound(WorkspaceError):
    """No such work item, page, file or project."""

    code = "not_found"


class WorkspaceConflict(WorkspaceError):
    """A stale ``if_match`` (CO-24): another write came first.

    Attributes:
        current_version: The version now stored, or None when unknown.
    """

    code = "conflict"

    def __init__(
        self, message: str, field: str | None = "if_match", *, current_version: int | None = None
    ) -> None:
        super().__init__(message, field)
        self.current_version = current_version


class WorkspaceRefused(WorkspaceError):
    """A value the workspace does not accept (an undeclared type, an unknown status, a path
    with ``..``, the hand-off bound)."""

    code = "refused"


class WorkspaceUnavailable(WorkspaceError):
    """The estate could not be reached or did not answer; repeating later may succeed."""

    code = "unavailable"
    retryable = True
