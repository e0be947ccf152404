"""Validation issues shared by both config tiers (CO-1, FL-158).

An issue is one ``{path, type, message}`` record. Issues are collected in one pass and sorted
into a stable order (by file, then path, then type, then message) so two runs over the same
document print the same lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.errors import UsageError

__all__ = [
    "ConfigInvalid",
    "Findings",
    "Issue",
    "IssueType",
    "Severity",
    "format_loc",
    "issues_from_pydantic",
    "sort_issues",
]

IssueType = Literal[
    "missing", "out_of_range", "conflict", "shape", "unknown_field", "unknown_value", "invalid"
]
"""The closed set of issue types (CO-1, kept from the original)."""

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True)
class Issue:
    """One finding about a config file.

    Attributes:
        path: Dotted path inside the document with list indices in brackets, e.g.
            ``units[0].roles[1].handle`` or ``stream.cluster.peers[2]``; ``""`` for the whole file.
        type: One of :data:`IssueType`.
        message: What is wrong and, where there is one, the way out.
        file: The file the document came from, or ``""`` when it came from memory.
        severity: ``"error"`` refuses the document; ``"warning"`` is reported and accepted.
    """

    file: str
    path: str
    type: IssueType
    message: str
    severity: Severity = field(default="error")

    def line(self) -> str:
        """Render as one ``file: path: message`` line (the CLI's output format)."""
        where = self.path or "(document)"
        prefix = f"{self.file}: " if self.file else ""
        tag = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{where}: {tag}{self.message}"

    def as_dict(self) -> dict[str, str]:
        """Return the ``{path, type, message}`` record (plus ``file`` and ``severity``)."""
        return {
            "file": self.file,
            "path": self.path,
            "type": self.type,
            "message": self.message,
            "severity": self.severity,
        }


class Findings:
    """The issues one run of the refusal rules collects about one file, in the order found.

    Attributes:
        file: The file name every issue carries.
        items: The issues so far.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.items: list[Issue] = []

    def err(self, path: str, kind: IssueType, msg: str) -> None:
        """Add an error at ``path``."""
        self.items.append(Issue(self.file, path, kind, msg))

    def warn(self, path: str, kind: IssueType, msg: str) -> None:
        """Add a warning at ``path``."""
        self.items.append(Issue(self.file, path, kind, msg, "warning"))

    def extend(self, issues: Iterable[Issue]) -> None:
        """Add issues found elsewhere, as they are."""
        self.items.extend(issues)


def sort_issues(issues: Iterable[Issue]) -> list[Issue]:
    """Return ``issues`` de-duplicated, in the stable report order."""
    return sorted(set(issues))


class ConfigInvalid(UsageError):
    """A node file or company document was refused.

    Attributes:
        issues: Every error found, in stable order (warnings are not included).
    """

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = sort_issues(i for i in issues if i.severity == "error")
        first = self.issues[0].line() if self.issues else "invalid configuration"
        more = f" (and {len(self.issues) - 1} more)" if len(self.issues) > 1 else ""
        super().__init__(first + more)


_PYDANTIC_TYPES: dict[str, IssueType] = {
    "extra_forbidden": "unknown_field",
    "missing": "missing",
    "literal_error": "unknown_value",
    "enum": "unknown_value",
    "greater_than": "out_of_range",
    "greater_than_equal": "out_of_range",
    "less_than": "out_of_range",
    "less_than_equal": "out_of_range",
    "too_short": "out_of_range",
    "too_long": "out_of_range",
    "string_too_short": "out_of_range",
    "string_too_long": "out_of_range",
    "value_error": "invalid",
    "assertion_error": "invalid",
    "string_pattern_mismatch": "invalid",
}


def format_loc(loc: Sequence[int | str], prefix: str = "") -> str:
    """Render a pydantic error location as ``a.b[0].c`` under ``prefix``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def issues_from_pydantic(errors: Iterable[Mapping[str, Any]], *, file: str, prefix: str = "") -> list[Issue]:
    """Convert ``ValidationError.errors()`` records into issues.

    Args:
        errors: The records of a pydantic ``ValidationError``.
        file: The file the document came from (``""`` for memory).
        prefix: A path the locations are relative to.

    Returns:
        One issue per record; the pydantic type maps onto :data:`IssueType` (``extra_forbidden`` →
        ``unknown_field``, ``missing`` → ``missing``, literal/enum → ``unknown_value``, bounds →
        ``out_of_range``, our validators → ``invalid``, any type mismatch → ``shape``).
    """
    out: list[Issue] = []
    for err in errors:
        loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and p.startswith("function-"))]
        kind = _PYDANTIC_TYPES.get(str(err.get("type", "")), "shape")
        msg = str(err.get("msg", "invalid"))
        if kind == "unknown_field":
            msg = "unknown key"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif msg.startswith("Assertion failed, "):
            msg = msg[len("Assertion failed, ") :]
        out.append(Issue(file, format_loc(loc, prefix), kind, msg))
    return out
