"""Turning pydantic's validation errors into :class:`~shared.config.Issue` records (CO-1).

CO-1 fixes the error record (``{path, type, message}``) and its closed ``type`` set; pydantic has
dozens of error kinds. This module maps one onto the other and renders pydantic's ``loc`` tuples
as document paths (``units[0].roles[1].backstroy``), so every tier-B file (the company document,
the offline rules file) reports mistakes the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, get_args

from pydantic import ValidationError

from ._issues import Issue, IssueType

__all__ = ["issues_from_error", "join_path", "segment"]

_ISSUE_TYPES = frozenset(get_args(IssueType))
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_RANGE = frozenset(
    {
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "too_short",
        "too_long",
        "string_too_short",
        "string_too_long",
        "finite_number",
    }
)
_VALUE = frozenset({"literal_error", "enum"})


def segment(key: object) -> str:
    """Render one path step: ``[3]`` for an index, ``name`` for a plain key, else ``["a b"]``."""
    if isinstance(key, int):
        return f"[{key}]"
    text = str(key)
    if _PLAIN_KEY.match(text):
        return text
    return f"[{json.dumps(text, ensure_ascii=False)}]"


def join_path(base: str, key: object) -> str:
    """Return ``base`` extended by one step (see :func:`segment`)."""
    step = segment(key)
    if not base or step.startswith("["):
        return base + step
    return f"{base}.{step}"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def issues_from_error(
    error: ValidationError,
    *,
    file: str,
    hint: Callable[[tuple[str | int, ...], IssueType, Any], str] | None = None,
) -> list[Issue]:
    """Convert every error in ``error`` into an :class:`Issue`.

    Union tags (loc steps starting with ``~``) and pydantic's ``[key]`` marker are dropped from
    paths. Our own validators raise ``PydanticCustomError`` whose type is already one of the
    CO-1 types and pass through unchanged.

    Args:
        error: What ``model_validate`` raised.
        file: Written into every issue's ``file``.
        hint: Called as ``hint(loc, type, value)`` with the cleaned loc, the issue type and the
            refused value of every ``unknown_field`` and ``shape`` error; a non-empty return is
            appended to the message (used to name upstream keys the compat import drops or
            maps, CO-43).

    Returns:
        The issues, unsorted.
    """
    out: list[Issue] = []
    for err in error.errors(include_url=False):
        loc = tuple(
            step
            for step in err["loc"]
            if not (isinstance(step, str) and (step.startswith("~") or step == "[key]"))
        )
        path = ""
        for step in loc:
            path = join_path(path, step)
        kind = err["type"]
        value = err.get("input")
        issue_type: IssueType
        if kind == "extra_forbidden":
            issue_type = "unknown_field"
            message = f"unknown key '{loc[-1] if loc else ''}'"
        elif kind == "missing":
            issue_type = "missing"
            message = f"required key '{loc[-1] if loc else ''}' is missing"
        elif kind in _VALUE:
            issue_type = "unknown_value"
            expected = (err.get("ctx") or {}).get("expected", "")
            message = f"{value!r} is not one of {expected}"
        elif kind in _RANGE:
            issue_type = "out_of_range"
            message = f"{err['msg']} (got {value!r})"
        elif kind == "string_pattern_mismatch":
            issue_type = "invalid"
            pattern = (err.get("ctx") or {}).get("pattern", "")
            message = f"{value!r} does not match {pattern}"
        elif kind in _ISSUE_TYPES:
            issue_type = kind  # type: ignore[assignment]  # one of ours, checked just above
            message = err["msg"]
        else:
            issue_type = "shape"
            message = f"{err['msg'][0].lower()}{err['msg'][1:]}, got {_describe(value)}"
        if hint is not None and issue_type in ("unknown_field", "shape"):
            extra = hint(loc, issue_type, value)
            if extra:
                message = f"{message}: {extra}"
        out.append(Issue(file, path, issue_type, message))
    return out
