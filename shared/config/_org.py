"""The org model: handles, references, leads and the manager graph (CO-2).

:class:`OrgModel` is the resolved, read-only view of a *valid* :class:`~shared.config.Company`
that the engine uses: seats, humans, units, managers and reports, effective leads, routing. It is
built on :class:`~shared.config._company_org.OrgDraft`, the same code the validator runs, so
the validator and the engine cannot disagree about the org.

Rules (CO-2): a role without ``handle`` derives one from ``name`` (:func:`derive_slug`), a unit
without ``id`` likewise. References resolve seat handle, then unit id, then (compat only, CO-43)
exact role name, then unit name; a seat wins over a unit. ``manages`` naming a unit expands to
every role in it and its descendants. A unit without ``lead`` inherits its parent's effective
lead, and that lead manages each direct role of the unit that no other role of the unit manages
(except itself). A role may have several managers; a cycle is a ``conflict``.

Not guaranteed: a unit's lead need not sit in that unit, and a human may lead or manage.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from ._company import Company, CompanyRole, Unit, Webhook
from ._company_org import OrgDraft
from ._issues import ConfigInvalid

__all__ = ["CREWLET_AGENT_NS", "OrgModel", "OrgUnit", "Seat", "agent_id"]

CREWLET_AGENT_NS = uuid.UUID("4f3d2a1c-8b6e-5c7d-9e0f-1a2b3c4d5e6f")
"""The fixed namespace of agent ids (CO-2, ours; it need not equal upstream's). Never change it:
every agent id in every store is derived from it."""


def agent_id(company_name: str, handle: str) -> uuid.UUID:
    """Return a seat's agent id: ``uuid5(CREWLET_AGENT_NS, f"{company_name}:{handle}")`` (CO-2).

    The same on every node and every restart; renaming the company or the handle mints a new one.
    """
    return uuid.uuid5(CREWLET_AGENT_NS, f"{company_name}:{handle}")


@dataclass(frozen=True)
class Seat:
    """One role of the org, agent or human (CO-2).

    Attributes:
        handle: The stable slug, written or derived.
        name: Display name.
        kind: ``agent`` seats have an inbox and run turns; ``human`` ones never do.
        unit_id: The unit the role sits in; None for a root-level role.
        agent_id: :func:`agent_id` of the company name and handle.
        role: The document entry.
    """

    handle: str
    name: str
    kind: Literal["agent", "human"]
    unit_id: str | None
    agent_id: uuid.UUID
    role: CompanyRole


@dataclass(frozen=True)
class OrgUnit:
    """One unit of the org tree, resolved (CO-2).

    Attributes:
        id: The unit id, written or derived.
        parent_id: None for a top-level unit.
        lead: The unit's own ``lead`` handle; None when it inherits.
        effective_lead: Its own lead or the nearest ancestor's; None when no ancestor has one.
        project: Tracker project key; None for none.
        space: Knowledge space key; None for none.
        roles: Handles of the roles directly in the unit, in document order.
        children: Ids of the child units, in document order.
        unit: The document entry.
    """

    id: str
    name: str
    type: str
    parent_id: str | None
    lead: str | None
    effective_lead: str | None
    project: str | None
    space: str | None
    roles: tuple[str, ...]
    children: tuple[str, ...]
    unit: Unit


class OrgModel:
    """The resolved org of a valid company, read-only (CO-2).

    Build it with :meth:`from_company`; the engine pins one per applied revision (CO-4).

    Attributes:
        company: The document it was built from.
        seats: Agent seats in document order (root roles first, then units depth-first).
        humans: Human seats in document order.
        units: Every unit, depth-first in document order.
        project_keys: Tracker project key -> unit id.
        space_keys: Knowledge space key -> unit id.
    """

    def __init__(self, company: Company, draft: OrgDraft) -> None:
        self.company = company
        # Same order as OrgDraft: root roles, then units depth-first, each with its roles.
        unit_models: list[Unit] = []
        pending = list(reversed(company.units))
        while pending:
            unit = pending.pop()
            unit_models.append(unit)
            pending.extend(reversed(unit.children))
        role_models = list(company.roles)
        for unit in unit_models:
            role_models.extend(unit.roles)
        every: list[Seat] = []
        for raw, model in zip(draft.roles, role_models, strict=True):
            assert raw.handle is not None  # a valid company derives every handle
            unit_id = draft.units[raw.unit].uid if raw.unit is not None else None
            every.append(
                Seat(raw.handle, model.name, model.kind, unit_id, agent_id(company.name, raw.handle), model)
            )
        self._by_handle = {s.handle: s for s in every}
        self.seats = tuple(s for s in every if s.kind == "agent")
        self.humans = tuple(s for s in every if s.kind == "human")
        units: list[OrgUnit] = []
        for raw_unit, unit_model in zip(draft.units, unit_models, strict=True):
            assert raw_unit.uid is not None
            parent = draft.units[raw_unit.parent].uid if raw_unit.parent is not None else None
            units.append(
                OrgUnit(
                    id=raw_unit.uid,
                    name=unit_model.name,
                    type=unit_model.type,
                    parent_id=parent,
                    lead=raw_unit.lead,
                    effective_lead=draft.effective_lead(raw_unit.order)[0],
                    project=unit_model.project,
                    space=unit_model.space,
                    roles=tuple(h for r in raw_unit.roles if (h := draft.roles[r].handle)),
                    children=tuple(u for c in raw_unit.children if (u := draft.units[c].uid)),
                    unit=unit_model,
                )
            )
        self.units = tuple(units)
        self._units = {u.id: u for u in units}
        self.project_keys = {u.project: u.id for u in units if u.project}
        self.space_keys = {u.space: u.id for u in units if u.space}
        rank = {s.handle: i for i, s in enumerate(every)}
        self._reports = {m: tuple(sorted(r, key=rank.__getitem__)) for m, r in draft.edges.items()}
        managers: dict[str, list[str]] = {}
        for m, reports in draft.edges.items():
            for r in reports:
                managers.setdefault(r, []).append(m)
        self._managers = {r: tuple(sorted(ms, key=rank.__getitem__)) for r, ms in managers.items()}
        self._webhooks = {w.source: w for w in company.integrations.webhooks}

    @classmethod
    def from_company(cls, company: Company) -> OrgModel:
        """Build the org model of ``company``.

        Args:
            company: A company from :func:`~shared.config.validate_company_data` or
                :func:`~shared.config.load_company_file`.

        Raises:
            ConfigInvalid: ``company`` was built without the validator and breaks an org rule
                (dangling reference, duplicate handle, manager cycle).
        """
        draft = OrgDraft(company.model_dump(mode="json"))
        if draft.issues:
            raise ConfigInvalid(draft.issues)
        return cls(company, draft)

    def seat(self, handle: str) -> Seat | None:
        """Return the role with ``handle`` (agent or human), or None when there is none."""
        return self._by_handle.get(handle)

    def unit(self, unit_id: str) -> OrgUnit | None:
        """Return the unit with ``unit_id``, or None when there is none."""
        return self._units.get(unit_id)

    def managers_of(self, handle: str) -> tuple[str, ...]:
        """Return the handles managing ``handle`` (explicit ``manages`` and lead rule), in
        document order; empty for an unknown handle."""
        return self._managers.get(handle, ())

    def reports_of(self, handle: str) -> tuple[str, ...]:
        """Return the handles ``handle`` manages, in document order."""
        return self._reports.get(handle, ())

    def effective_lead(self, unit_id: str) -> str | None:
        """Return the unit's own lead or the nearest ancestor's; None when none or unknown unit."""
        unit = self._units.get(unit_id)
        return unit.effective_lead if unit else None

    def resolve(self, ref: str) -> str | None:
        """Resolve a routing target: a seat handle, or a unit id meaning its effective lead.

        Returns:
            The seat handle; None when ``ref`` names nothing or a unit without a lead.
        """
        if ref in self._by_handle:
            return ref
        return self.effective_lead(ref)

    def agent_id(self, handle: str) -> uuid.UUID:
        """Return the agent id of ``handle`` in this company (see :func:`agent_id`)."""
        return agent_id(self.company.name, handle)

    def webhook(self, source: str) -> Webhook | None:
        """Return the ``integrations.webhooks`` entry for ``source``, or None (CO-9)."""
        return self._webhooks.get(source)

    def webhook_route(self, source: str) -> str | None:
        """Return the agent seat a webhook ``source`` delivers to, or None for no such source."""
        hook = self._webhooks.get(source)
        return self.resolve(hook.route_to) if hook else None
