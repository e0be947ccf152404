"""The offline provider's rules file, checked for shape (CO-15).

The offline provider is deterministic and rule-driven: ``rules[]`` each ``{when, steps, final}``
plus ``default: {final}``. This module checks the file's shape and its templates: ``args`` and
``final`` may use only the placeholders CO-15 lists (and ``memory.recalled``, AG-8: the first entry
of the prompt's ``Personal memory``), and ``result[n]`` must name an earlier step.

Reading rules (issue 38): ``when.text_matches`` is a regular expression (Python ``re.search``
over the trigger text; refused with its path when it does not compile), so a rule can catch a
question; ``{result[n].<field>}`` whose value is a list renders one short line per entry (a work
item as ``SUP-1 title (status, assignee)``, a knowledge hit as ``SPACE/title``, ``(none)`` when
empty), and ``{result[n].<field>:open}`` keeps only the work items not done, cancelled or closed.
What the provider *does* with the rules lives with the provider, not here.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._company_issues import issues_from_error, join_path
from ._issues import ConfigInvalid, Issue, sort_issues
from ._yaml import read_yaml_mapping

__all__ = [
    "OfflineDefault",
    "OfflineRule",
    "OfflineScript",
    "OfflineStep",
    "OfflineWhen",
    "load_offline_script",
    "validate_offline_script_data",
]

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ALLOWED = re.compile(
    r"^(trigger\.(text|first_line|work_item\.key|sender)|seat\.handle|seat\.managers\[0\]|memory\.recalled"
    r"|seat\.reports\[\d+\]|result\[(?P<step>\d+)\]\.[A-Za-z_][A-Za-z0-9_]*(:open)?)$"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class OfflineWhen(_Model):
    """A rule's condition; every given key must match, an empty one matches every call.

    Attributes:
        seat: The seat's handle.
        trigger: The trigger type (``external_notification``, ``task_assigned``, ...).
        source: The trigger's ``source`` (``api``, ``work``, ``webhook:forms``, ...).
        reason: The trigger's ``reason`` (``assigned``, ...).
        text_contains: A substring of the trigger text.
        text_matches: A regular expression found in the trigger text (``re.search``), e.g.
            ``"\\?\\s*$"`` for a question; at most 500 characters, must compile (issue 38).
    """

    seat: str | None = None
    trigger: str | None = None
    source: str | None = None
    reason: str | None = None
    text_contains: str | None = None
    text_matches: str | None = Field(default=None, max_length=500)

    @field_validator("text_matches")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"not a regular expression: {e}") from None
        return value


class OfflineStep(_Model):
    """One tool call the rule makes: the tool's name and its templated arguments."""

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class OfflineRule(_Model):
    """One rule: the first whose ``when`` matches drives the turn."""

    when: OfflineWhen = Field(default_factory=OfflineWhen)
    steps: list[OfflineStep] = Field(default_factory=list)
    final: str


class OfflineDefault(_Model):
    """The answer when no rule matches."""

    final: str = "No rule matched; nothing done."


class OfflineScript(_Model):
    """The offline provider's rules file (CO-15)."""

    rules: list[OfflineRule] = Field(default_factory=list)
    default: OfflineDefault = Field(default_factory=OfflineDefault)


def _templates(value: Any, path: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _templates(v, join_path(path, k))]
    if isinstance(value, list):
        return [t for i, v in enumerate(value) for t in _templates(v, f"{path}[{i}]")]
    return []


def _check_template(text: str, path: str, steps_before: int, file: str) -> list[Issue]:
    out: list[Issue] = []
    for match in _PLACEHOLDER.finditer(text):
        allowed = _ALLOWED.match(match.group(1))
        if allowed is None:
            out.append(Issue(file, path, "invalid", f"placeholder {match.group(0)} is not one CO-15 allows"))
        elif allowed.group("step") is not None and int(allowed.group("step")) >= steps_before:
            out.append(
                Issue(
                    file,
                    path,
                    "out_of_range",
                    f"{match.group(0)} names step {allowed.group('step')}, "
                    f"but only {steps_before} step(s) run before this point",
                )
            )
    return out


def validate_offline_script_data(
    data: Mapping[str, Any], *, file: str = "", seats: Collection[str] | None = None
) -> tuple[OfflineScript | None, list[Issue]]:
    """Validate an offline rules document (CO-15).

    Args:
        data: The parsed YAML document.
        file: Written into every issue's ``file``.
        seats: The company's agent seat handles; when given, ``when.seat`` must name one.

    Returns:
        ``(script, issues)``; the script is None when there is any issue. Issues are sorted.
    """
    issues: list[Issue] = []
    script: OfflineScript | None = None
    try:
        script = OfflineScript.model_validate(dict(data))
    except ValidationError as e:
        issues.extend(issues_from_error(e, file=file))
    rules = data.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict):
            continue
        path = f"rules[{i}]"
        raw_steps = rule.get("steps")
        steps: list[Any] = raw_steps if isinstance(raw_steps, list) else []
        for j, step in enumerate(steps):
            if isinstance(step, dict):
                for where, text in _templates(step.get("args"), f"{path}.steps[{j}].args"):
                    issues.extend(_check_template(text, where, j, file))
        if isinstance(rule.get("final"), str):
            issues.extend(_check_template(rule["final"], f"{path}.final", len(steps), file))
        when = rule.get("when")
        seat = when.get("seat") if isinstance(when, dict) else None
        if seats is not None and isinstance(seat, str) and seat not in seats:
            issues.append(Issue(file, f"{path}.when.seat", "unknown_value", f"no agent seat {seat!r}"))
    default = data.get("default")
    if isinstance(default, dict) and isinstance(default.get("final"), str):
        issues.extend(_check_template(default["final"], "default.final", 0, file))
    issues = sort_issues(issues)
    return (None if issues else script), issues


def load_offline_script(path: str | Path, *, seats: Collection[str] | None = None) -> OfflineScript:
    """Load an offline rules file (CO-15).

    Args:
        path: The YAML file (a company's ``script:`` is relative to the company file).
        seats: See :func:`validate_offline_script_data`.

    Raises:
        ConfigInvalid: The file is missing, not YAML, or breaks a rule; every issue names it.
    """
    script, issues = validate_offline_script_data(read_yaml_mapping(path), file=str(path), seats=seats)
    if script is None:
        raise ConfigInvalid(issues)
    return script
