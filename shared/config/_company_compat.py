"""The compatibility import of upstream company documents (CO-43).

Upstream documents carry blocks crewlet does not run (P2: learning, workers, chat and other
trackers, extensions, ...). A strict validation refuses them as ``unknown_field`` and names them;
the compat import drops them first, with one ``unsupported`` warning each (an ``unknown_field``
issue of severity ``warning``). Only the keys listed here are dropped: anything else unknown
stays an error in compat too, so a typo is never silently lost.
"""

from __future__ import annotations

from typing import Any

from ._company_issues import join_path
from ._issues import Issue

__all__ = ["drop_p2", "p2_hint"]

# P2 keys per place in the document (section 6.1, 6.5, CO-43): refused in a strict validation,
# dropped with a warning by the compatibility import. Anything else unknown stays an error even
# in compat, so a typo is never silently dropped.
_P2_KEYS: dict[str, frozenset[str]] = {
    "company": frozenset(
        {"workers", "learning", "knowledge", "skill_variables", "extensions", "notification_rate_limit"}
    ),
    "providers": frozenset({"sandbox"}),
    "integrations": frozenset({"plane", "mattermost", "gitlab", "slack", "jira", "confluence"}),
    "unit": frozenset({"knowledge", "channel"}),
    "role": frozenset({"knowledge", "channel", "llm_auxiliary", "llm_judge"}),
    "turn_engine": frozenset(
        {
            "extension_enabled",
            "execute_max_tool_rounds_ceiling",
            "extension_round_step",
            "onboarding_max_tool_rounds",
            "onboarding_max_tool_rounds_ceiling",
            "delegation",
            "sandbox_min_budget_tokens",
            "conversation_session",
        }
    ),
}


def _place(loc: tuple[str | int, ...]) -> str:
    """Name the kind of mapping ``loc`` points at: company, unit, role, a top block, or other."""
    if not loc:
        return "company"
    if len(loc) == 1 and loc[0] in ("providers", "integrations", "turn_engine"):
        return str(loc[0])
    if len(loc) >= 2 and isinstance(loc[-1], int):
        return {"units": "unit", "children": "unit", "roles": "role"}.get(str(loc[-2]), "other")
    return "other"


def p2_hint(loc: tuple[str | int, ...]) -> str:
    """Explain an unknown key that is a known P2 block (for strict validation messages)."""
    if loc and isinstance(loc[-1], str) and loc[-1] in _P2_KEYS.get(_place(loc[:-1]), frozenset()):
        return "a P2 block crewlet does not run; remove it, or import with --compat to drop it"
    return ""


def drop_p2(data: dict[str, Any], file: str) -> list[Issue]:
    """Compat only: remove P2 blocks in place and warn once per block (CO-43)."""
    warnings: list[Issue] = []

    def drop(where: Any, place: str, path: str) -> None:
        if not isinstance(where, dict):
            return
        for key in sorted(k for k in where if isinstance(k, str) and k in _P2_KEYS[place]):
            del where[key]
            warnings.append(
                Issue(
                    file,
                    join_path(path, key),
                    "unknown_field",
                    "unsupported: dropped by the compat import",
                    "warning",
                )
            )

    drop(data, "company", "")
    for place in ("providers", "integrations", "turn_engine"):
        drop(data.get(place), place, place)
    servers = (
        {
            s["name"]
            for s in data.get("mcp_servers") or []
            if isinstance(s, dict) and isinstance(s.get("name"), str)
        }
        if isinstance(data.get("mcp_servers"), list)
        else set()
    )

    def drop_env(where: dict[str, Any], path: str) -> None:
        env = where.get("mcp_env")
        if isinstance(env, dict):
            for key in sorted(k for k in env if isinstance(k, str) and k not in servers):
                del env[key]
                warnings.append(
                    Issue(
                        file,
                        join_path(f"{path}.mcp_env", key),
                        "unknown_field",
                        "unsupported: mcp_env for an undeclared server, dropped by the compat import",
                        "warning",
                    )
                )

    def roles(items: Any, path: str) -> None:
        for i, role in enumerate(items if isinstance(items, list) else []):
            if isinstance(role, dict):
                drop(role, "role", f"{path}[{i}]")
                drop_env(role, f"{path}[{i}]")

    def units(items: Any, path: str) -> None:
        for i, unit in enumerate(items if isinstance(items, list) else []):
            if isinstance(unit, dict):
                drop(unit, "unit", f"{path}[{i}]")
                drop_env(unit, f"{path}[{i}]")
                roles(unit.get("roles"), f"{path}[{i}].roles")
                units(unit.get("children"), f"{path}[{i}].children")

    roles(data.get("roles"), "roles")
    units(data.get("units"), "units")
    providers = data.get("providers")
    if providers is None or (isinstance(providers, dict) and not providers.get("llm")):
        data["providers"] = {**(providers or {}), "llm": {}}
        warnings.append(
            Issue(
                file,
                "providers.llm",
                "missing",
                "no LLM provider: every seat reads as stopped (provider) until a revision adds one",
                "warning",
            )
        )
    return warnings
