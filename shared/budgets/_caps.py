"""Budget scopes and their caps, derived from the company in memory (CO-37, FL-119).

Caps are never stored: every node reads them from the company revision it applied, so a revision
that raises a ceiling takes effect on each node as it applies it. Scopes are ``org`` (the company's
``token_budget``) and ``agent:<agent id>`` (the seat's role ``token_budget``; the derived agent id,
not the handle, so a renamed display name keeps its counters, FL-119).

Counter keys in the ``budgets`` slot are ``<scope key>.<period>.<window>``, with the scope key
``org`` or ``agent-<agent id>``: JetStream KV keys allow only ``[-/_=.A-Za-z0-9]``, so the colon of
the API's scope name cannot appear in a key.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from shared.config import Company, OrgModel, TokenBudget

from ._windows import PERIODS, Period

__all__ = ["ORG", "Caps", "Scope", "caps_of", "scope_key"]

ORG = "org"
"""The organisation-wide scope's name."""


def scope_key(scope: str) -> str:
    """Return the KV key prefix of a scope name: ``org`` → ``org``, ``agent:<id>`` → ``agent-<id>``."""
    kind, sep, rest = scope.partition(":")
    return f"{kind}-{rest}" if sep else scope


def _limits(budget: TokenBudget | None) -> dict[Period, int]:
    if budget is None:
        return {}
    return {p: v for p in PERIODS if (v := getattr(budget, p)) is not None}


@dataclass(frozen=True)
class Scope:
    """One budget scope and its caps.

    Attributes:
        name: ``org`` or ``agent:<agent id>`` (the API's name).
        key: The KV key prefix (see :func:`scope_key`).
        handle: The seat's handle for an agent scope; None for ``org`` or a seat the company does
            not define.
        caps: Period → ceiling in tokens, for the capped periods only (an absent period is
            unlimited).
    """

    name: str
    key: str
    handle: str | None = None
    caps: dict[Period, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Caps:
    """The caps of one company revision.

    Attributes:
        timezone: The company clock (IANA zone) windows are cut on.
        org: The ``org`` scope.
        seats: Agent id (string) → scope, for every agent seat, capped or not.
    """

    timezone: str
    org: Scope
    seats: dict[str, Scope]

    def agent(self, agent_id: str | uuid.UUID) -> Scope:
        """Return the scope of ``agent_id``; an unknown seat has no caps (nothing to charge)."""
        aid = str(agent_id)
        found = self.seats.get(aid)
        return found if found is not None else Scope(f"agent:{aid}", f"agent-{aid}")

    def capped(self) -> list[Scope]:
        """Return ``org`` then every agent scope with at least one cap, in document order."""
        return [self.org, *(s for s in self.seats.values() if s.caps)]

    def resolve(self, scope: str) -> Scope | None:
        """Return the scope named ``scope`` (``org``, ``agent:<agent id>`` or ``agent:<handle>``).

        Returns:
            The scope, or None when it names no agent seat of the company.
        """
        if scope == ORG:
            return self.org
        kind, sep, rest = scope.partition(":")
        if kind != "agent" or not sep or not rest:
            return None
        if rest in self.seats:
            return self.seats[rest]
        return next((s for s in self.seats.values() if s.handle == rest), None)


def caps_of(source: Company | OrgModel | None) -> Caps:
    """Return the caps of a company (CO-37): ``token_budget`` on the company and on each agent role.

    Args:
        source: A validated company, its org model, or None (no company applied: nothing is capped).

    Returns:
        The caps; a scope whose ``token_budget`` is absent has ``caps == {}`` (unlimited).
    """
    if source is None:
        return Caps("UTC", Scope(ORG, ORG), {})
    org = source if isinstance(source, OrgModel) else OrgModel.from_company(source)
    company = org.company
    seats = {
        str(s.agent_id): Scope(
            f"agent:{s.agent_id}", f"agent-{s.agent_id}", s.handle, _limits(s.role.token_budget)
        )
        for s in org.seats
    }
    return Caps(company.timezone, Scope(ORG, ORG, None, _limits(company.token_budget)), seats)
