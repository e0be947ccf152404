"""The compatibility import of upstream company documents (CO-43).

Upstream documents carry blocks crewlet does not run (P2: workers, chat and other
trackers, extensions, sandboxes, skill variables, the turn engine's extension judge and
sub-agents, ...). A strict validation refuses them as ``unknown_field`` and names them, with a
hint that ``--compat`` drops them; the compat import drops them first, with one ``unsupported``
warning each (an ``unknown_field`` issue of severity ``warning``) naming the dropped key's path.
Only the keys listed in :data:`_P2_KEYS` are dropped: anything else unknown stays an error in
compat too, so a typo is never silently lost.

Where upstream and crewlet name the same feature in a different shape, the compat import maps it
instead, with one ``mapped`` warning (a ``shape`` issue of severity ``warning``):

- ``token_budget`` given as a plain number, on the company (upstream: an org-wide token limit) or
  on a role (a per-agent limit). crewlet's :class:`~shared.config.TokenBudget` caps tokens per
  window on the company clock (CO-37) and has no lifetime total, so the number becomes the
  widest window it has: ``N`` maps to ``{month: N}`` (a calendar-month ceiling). ``0``, which
  upstream reads as "unlimited", maps to no ``token_budget`` at all (crewlet refuses ``0``).
  Any other value (negative, fractional, a string) is left for validation to refuse.

Not dropped and not mapped, because crewlet runs it: ``scheduling.default_timezone`` (the zone of
every schedule that names none, CO-33) is part of the schema in strict mode too.

.. versionchanged:: 0.1
   Also drops ``integrations`` on units and roles (a tracker or chat identity), ``sandbox`` on
   roles, ``skill_variables`` and ``learning`` on units and roles, and every upstream
   ``turn_engine`` key crewlet does not model; maps a plain-number ``token_budget``.
"""

from __future__ import annotations

from typing import Any

from ._company_issues import join_path
from ._issues import Issue, IssueType

__all__ = ["drop_p2", "p2_hint"]

# P2 keys per place in the document (section 6.1, 6.5, CO-43): refused in a strict validation,
# dropped with a warning by the compatibility import. Anything else unknown stays an error even
# in compat, so a typo is never silently dropped.
_P2_KEYS: dict[str, frozenset[str]] = {
    "company": frozenset(
        {"workers", "knowledge", "skill_variables", "extensions", "notification_rate_limit"}
    ),
    "providers": frozenset({"sandbox"}),
    "integrations": frozenset({"plane", "mattermost", "gitlab", "slack", "jira", "confluence"}),
    # integrations on a unit or role: its tracker/wiki home or chat transport identity.
    "unit": frozenset({"knowledge", "channel", "integrations", "skill_variables", "learning"}),
    "role": frozenset(
        {
            "knowledge",
            "channel",
            "llm_auxiliary",
            "llm_judge",
            "integrations",
            "sandbox",
            "skill_variables",
            "learning",
        }
    ),
    # Upstream's turn_engine keys crewlet does not model (section 6.5): the Plan phase, the
    # round-cap extension judge and its ceilings, onboarding, sub-agents, sandboxed Execute and
    # the conversation ledger.
    "turn_engine": frozenset(
        {
            "plan_max_tool_rounds",
            "plan_max_tool_rounds_ceiling",
            "extension_enabled",
            "execute_max_tool_rounds_ceiling",
            "extension_round_step",
            "onboarding_max_tool_rounds",
            "onboarding_max_tool_rounds_ceiling",
            "subagent_max_turns",
            "subagent_timeout_seconds",
            "subagent_budget_fraction",
            "subagent_max_parallel",
            "subagent_batch_timeout_seconds",
            "subagent_min_per_child_tokens",
            "executor_always_on_tools",
            "delegation",
            "sandbox_budget_fraction",
            "sandbox_min_budget_tokens",
            "conversation_session",
        }
    ),
}

_DROPPED = "unsupported: dropped by the compat import"
_P2_HINT = "a P2 block crewlet does not run; remove it, or import with --compat to drop it"
_BUDGET_HINT = (
    "a plain number is upstream's token limit; write {day, week, month}, "
    "or import with --compat to map it onto token_budget.month"
)


def _place(loc: tuple[str | int, ...]) -> str:
    """Name the kind of mapping ``loc`` points at: company, unit, role, a top block, or other."""
    if not loc:
        return "company"
    if len(loc) == 1 and loc[0] in ("providers", "integrations", "turn_engine"):
        return str(loc[0])
    if len(loc) >= 2 and isinstance(loc[-1], int):
        return {"units": "unit", "children": "unit", "roles": "role"}.get(str(loc[-2]), "other")
    return "other"


def _plain_budget(value: Any) -> bool:
    """Whether ``value`` is upstream's plain-number ``token_budget`` (an int, 0 = unlimited)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def p2_hint(loc: tuple[str | int, ...], kind: IssueType = "unknown_field", value: Any = None) -> str:
    """Explain a strict refusal that the compat import would resolve (CO-43).

    Args:
        loc: The refused key's location in the document (union tags already removed).
        kind: The issue type: ``unknown_field`` for a key the schema lacks, ``shape`` for a value
            of the wrong type.
        value: The refused value (read for ``shape`` only).

    Returns:
        The text to append to the issue's message, or ``""`` when the compat import would not
        accept it either.
    """
    if not loc or not isinstance(loc[-1], str):
        return ""
    place = _place(loc[:-1])
    if kind == "unknown_field" and loc[-1] in _P2_KEYS.get(place, frozenset()):
        return _P2_HINT
    if kind == "shape" and loc[-1] == "token_budget" and place in ("company", "role"):
        return _BUDGET_HINT if _plain_budget(value) else ""
    return ""


class _Compat:
    """One compat pass over a document: what it drops and maps in place, one warning each.

    Args:
        file: Written into every warning's ``file``.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.servers: set[str] = set()  # declared mcp_servers: mcp_env for any other is dropped
        self.warnings: list[Issue] = []

    def warn(self, path: str, kind: IssueType, message: str) -> None:
        self.warnings.append(Issue(self.file, path, kind, message, "warning"))

    def drop(self, where: Any, place: str, path: str) -> None:
        """Drop the P2 keys of ``place`` from the mapping ``where`` at ``path``."""
        if not isinstance(where, dict):
            return
        for key in sorted(k for k in where if isinstance(k, str) and k in _P2_KEYS[place]):
            del where[key]
            self.warn(join_path(path, key), "unknown_field", _DROPPED)

    def budget(self, where: dict[str, Any], path: str, scope: str) -> None:
        """Map a plain-number ``token_budget`` (see the module docstring)."""
        value = where.get("token_budget")
        if not _plain_budget(value):
            return
        at = join_path(path, "token_budget")
        if value == 0:
            del where["token_budget"]
            self.warn(at, "shape", f"mapped: upstream's 0 means no {scope} token limit; no token_budget")
        else:
            where["token_budget"] = {"month": value}
            self.warn(
                at, "shape", f"mapped: upstream's {scope} token limit {value} becomes token_budget.month"
            )

    def drop_env(self, where: dict[str, Any], path: str) -> None:
        """Drop the ``mcp_env`` entries of a unit or role naming an undeclared server."""
        env = where.get("mcp_env")
        if isinstance(env, dict):
            for key in sorted(k for k in env if isinstance(k, str) and k not in self.servers):
                del env[key]
                self.warn(
                    join_path(f"{path}.mcp_env", key),
                    "unknown_field",
                    "unsupported: mcp_env for an undeclared server, dropped by the compat import",
                )

    def roles(self, items: Any, path: str) -> None:
        """Every role of the list ``items`` at ``path``."""
        for i, role in enumerate(items if isinstance(items, list) else []):
            if isinstance(role, dict):
                self.drop(role, "role", f"{path}[{i}]")
                self.budget(role, f"{path}[{i}]", "per-agent")
                self.drop_env(role, f"{path}[{i}]")

    def units(self, items: Any, path: str) -> None:
        """Every unit of the list ``items`` at ``path``, its roles and children included."""
        for i, unit in enumerate(items if isinstance(items, list) else []):
            if isinstance(unit, dict):
                self.drop(unit, "unit", f"{path}[{i}]")
                self.drop_env(unit, f"{path}[{i}]")
                self.roles(unit.get("roles"), f"{path}[{i}].roles")
                self.units(unit.get("children"), f"{path}[{i}].children")


def drop_p2(data: dict[str, Any], file: str) -> list[Issue]:
    """Compat only: drop or map upstream blocks in place, one warning each (CO-43).

    Args:
        data: The document, modified in place (pass a copy).
        file: Written into every warning's ``file``.

    Returns:
        One warning per dropped or mapped key, naming its path; plus a warning when the document
        has no LLM provider (one is added, empty, so the seats read as stopped, CO-3).
    """
    compat = _Compat(file)
    compat.drop(data, "company", "")
    compat.budget(data, "", "org-wide")
    for place in ("providers", "integrations", "turn_engine"):
        compat.drop(data.get(place), place, place)
    if isinstance(data.get("mcp_servers"), list):
        compat.servers = {
            s["name"] for s in data["mcp_servers"] if isinstance(s, dict) and isinstance(s.get("name"), str)
        }
    compat.roles(data.get("roles"), "roles")
    compat.units(data.get("units"), "units")
    providers = data.get("providers")
    if providers is None or (isinstance(providers, dict) and not providers.get("llm")):
        data["providers"] = {**(providers or {}), "llm": {}}
        compat.warn(
            "providers.llm",
            "missing",
            "no LLM provider: every seat reads as stopped (provider) until a revision adds one",
        )
    return compat.warnings
