"""The org checks of CO-2 over plain document data (used by the validator).

:class:`OrgDraft` reads a company document as *plain data*, defensively, so the validator can
run the org checks (handle and unit id derivation and grammar, duplicates, dangling
``lead``/``manages``, manager cycles) even when other parts of the same document have shape
errors (CO-1: one run reports every mistake). :class:`~shared.config.OrgModel` is built on it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._company_types import HANDLE_PATTERN, derive_slug
from ._issues import Issue, IssueType

__all__ = ["OrgDraft", "Target"]

_HANDLE_RE = re.compile(HANDLE_PATTERN)


@dataclass
class _RawRole:
    order: int
    path: str
    data: dict[str, Any]
    name: str | None
    handle: str | None
    handle_path: str
    kind: str
    unit: int | None
    manages: set[str] = field(default_factory=set)


@dataclass
class _RawUnit:
    order: int
    path: str
    data: dict[str, Any]
    name: str | None
    uid: str | None
    id_path: str
    parent: int | None
    roles: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    lead: str | None = None
    lead_path: str | None = None


Target = tuple[Literal["seat", "unit"], str]
"""A resolved reference: ``("seat", handle)`` or ``("unit", unit_id)``."""


def _dicts(value: Any, path: str) -> list[tuple[int, str, dict[str, Any]]]:
    if not isinstance(value, list):
        return []
    return [(i, f"{path}[{i}]", v) for i, v in enumerate(value) if isinstance(v, dict)]


class OrgDraft:
    """The org checks of CO-2 over plain document data (used by the validator).

    Reads only what is well-shaped and skips the rest (pydantic reports that), so its findings
    add to the shape errors instead of repeating them.

    Attributes:
        issues: Every org finding, unsorted.
        rewrites: Compat only: ``(container, key, canonical)`` for each reference that resolved
            by display name, to be written back before the final model is built.
    """

    def __init__(self, data: Mapping[str, Any], *, file: str = "", compat: bool = False) -> None:
        self._file = file
        self._compat = compat
        self.issues: list[Issue] = []
        self.rewrites: list[tuple[dict[str, Any] | list[Any], str | int, str]] = []
        self.roles: list[_RawRole] = []
        self.units: list[_RawUnit] = []
        self.handles: dict[str, _RawRole] = {}
        self.unit_ids: dict[str, _RawUnit] = {}
        self._role_names: dict[str, _RawRole] = {}
        self._unit_names: dict[str, _RawUnit] = {}
        self.edges: dict[str, dict[str, tuple[int, str]]] = {}
        self._edge_count = 0
        for _, path, role in _dicts(data.get("roles"), "roles"):
            self._add_role(path, role, None)
        for _, path, unit in _dicts(data.get("units"), "units"):
            self._add_unit(path, unit, None)
        self._register()
        self._resolve_leads()
        self._resolve_manages()
        self._add_lead_edges()
        self._find_cycles()

    def _issue(self, path: str, kind: IssueType, message: str) -> None:
        self.issues.append(Issue(self._file, path, kind, message))

    def _add_role(self, path: str, data: dict[str, Any], unit: int | None) -> None:
        name = data.get("name") if isinstance(data.get("name"), str) else None
        written = data.get("handle")
        handle: str | None
        if isinstance(written, str):
            handle, handle_path = written, f"{path}.handle"
        elif name is not None:
            handle, handle_path = derive_slug(name), f"{path}.name"
            if not _HANDLE_RE.match(handle):
                self._issue(
                    handle_path,
                    "invalid",
                    f"name {name!r} derives handle {handle!r}, which does not match "
                    f"{HANDLE_PATTERN}; give the role a handle",
                )
                handle = None
        else:
            handle, handle_path = None, path
        kind = "human" if data.get("kind") == "human" else "agent"
        self.roles.append(_RawRole(len(self.roles), path, data, name, handle, handle_path, kind, unit))
        if unit is not None:
            self.units[unit].roles.append(len(self.roles) - 1)

    def _add_unit(self, path: str, data: dict[str, Any], parent: int | None) -> None:
        name = data.get("name") if isinstance(data.get("name"), str) else None
        written = data.get("id")
        uid: str | None
        if isinstance(written, str):
            uid, id_path = written, f"{path}.id"
        elif name is not None:
            uid, id_path = derive_slug(name), f"{path}.name"
            if not _HANDLE_RE.match(uid):
                self._issue(
                    id_path,
                    "invalid",
                    f"name {name!r} derives unit id {uid!r}, which does not match "
                    f"{HANDLE_PATTERN}; give the unit an id",
                )
                uid = None
        else:
            uid, id_path = None, path
        index = len(self.units)
        self.units.append(_RawUnit(index, path, data, name, uid, id_path, parent))
        if parent is not None:
            self.units[parent].children.append(index)
        for _, rpath, role in _dicts(data.get("roles"), f"{path}.roles"):
            self._add_role(rpath, role, index)
        for _, cpath, child in _dicts(data.get("children"), f"{path}.children"):
            self._add_unit(cpath, child, index)

    def _register(self) -> None:
        for role in self.roles:
            if role.handle is not None:
                first = self.handles.setdefault(role.handle, role)
                if first is not role:
                    self._issue(
                        role.handle_path,
                        "conflict",
                        f"handle {role.handle!r} is already used by {first.path}; "
                        "handles must be unique across the company",
                    )
            if role.name is not None:
                self._role_names.setdefault(role.name, role)
        for unit in self.units:
            if unit.uid is not None:
                first_unit = self.unit_ids.setdefault(unit.uid, unit)
                if first_unit is not unit:
                    self._issue(
                        unit.id_path,
                        "conflict",
                        f"unit id {unit.uid!r} is already used by {first_unit.path}",
                    )
            if unit.name is not None:
                self._unit_names.setdefault(unit.name, unit)

    def resolve(self, ref: str) -> Target | None:
        """Resolve a reference: seat handle, unit id, then (compat) role name, unit name."""
        if ref in self.handles:
            return ("seat", ref)
        if ref in self.unit_ids:
            return ("unit", ref)
        if self._compat:
            role = self._role_names.get(ref)
            if role is not None and role.handle is not None:
                return ("seat", role.handle)
            unit = self._unit_names.get(ref)
            if unit is not None and unit.uid is not None:
                return ("unit", unit.uid)
        return None

    def unresolved(self, path: str, ref: str) -> None:
        """Report ``ref`` at ``path`` as naming nothing, with a hint when a name matches."""
        message = f"{ref!r} names no seat handle or unit id"
        role = self._role_names.get(ref)
        unit = self._unit_names.get(ref)
        if role is not None and role.handle is not None:
            message += f"; the role named {ref!r} has handle {role.handle!r}"
        elif unit is not None and unit.uid is not None:
            message += f"; the unit named {ref!r} has id {unit.uid!r}"
        if (role or unit) and not self._compat:
            message += " (display names resolve only in a --compat import)"
        self._issue(path, "unknown_value", message)

    def _note_rewrite(
        self, ref: str, target: Target, where: dict[str, Any] | list[Any], key: str | int
    ) -> None:
        if ref != target[1]:
            self.rewrites.append((where, key, target[1]))

    def _resolve_leads(self) -> None:
        for unit in self.units:
            lead = unit.data.get("lead")
            if not isinstance(lead, str):
                continue
            path = f"{unit.path}.lead"
            target = self.resolve(lead)
            if target is None:
                self.unresolved(path, lead)
            elif target[0] == "unit":
                self._issue(path, "invalid", f"lead {lead!r} is a unit; a lead must be a seat handle")
            else:
                unit.lead, unit.lead_path = target[1], path
                self._note_rewrite(lead, target, unit.data, "lead")

    def effective_lead(self, index: int) -> tuple[str | None, str | None]:
        """Return ``(handle, path of the lead key)`` for unit ``index``, walking up the tree."""
        at: int | None = index
        while at is not None:
            unit = self.units[at]
            if unit.lead is not None:
                return unit.lead, unit.lead_path
            at = unit.parent
        return None, None

    def subtree_handles(self, index: int) -> list[str]:
        """Return the handles of every role in unit ``index`` and its descendants."""
        out: list[str] = []
        stack = [index]
        while stack:
            unit = self.units[stack.pop()]
            out.extend(h for r in unit.roles if (h := self.roles[r].handle) is not None)
            stack.extend(reversed(unit.children))
        return out

    def _edge(self, manager: str, report: str, path: str) -> None:
        self._edge_count += 1
        self.edges.setdefault(manager, {}).setdefault(report, (self._edge_count, path))

    def _resolve_manages(self) -> None:
        for role in self.roles:
            entries = role.data.get("manages")
            if not isinstance(entries, list):
                continue
            for j, ref in enumerate(entries):
                if not isinstance(ref, str):
                    continue
                path = f"{role.path}.manages[{j}]"
                target = self.resolve(ref)
                if target is None:
                    self.unresolved(path, ref)
                    continue
                self._note_rewrite(ref, target, entries, j)
                if target[0] == "seat":
                    role.manages.add(target[1])
                else:
                    unit = self.unit_ids[target[1]]
                    # A lead managing its own unit does not manage itself.
                    role.manages.update(h for h in self.subtree_handles(unit.order) if h != role.handle)
                if role.handle is not None:
                    for report in sorted(role.manages - set(self.edges.get(role.handle, {}))):
                        self._edge(role.handle, report, path)

    def _add_lead_edges(self) -> None:
        for unit in self.units:
            lead, lead_path = self.effective_lead(unit.order)
            if lead is None or lead_path is None:
                continue
            members = [self.roles[r] for r in unit.roles]
            for member in members:
                if member.handle is None or member.handle == lead:
                    continue
                if any(o is not member and member.handle in o.manages for o in members):
                    continue
                self._edge(lead, member.handle, lead_path)

    def _find_cycles(self) -> None:
        nodes = sorted(set(self.edges) | {r for e in self.edges.values() for r in e}, key=self._rank)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        components: list[list[str]] = []

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for nxt in sorted(self.edges.get(node, {}), key=self._rank):
                if nxt not in index:
                    visit(nxt)
                    low[node] = min(low[node], low[nxt])
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                components.append(comp)

        for node in nodes:
            if node not in index:
                visit(node)
        for comp in components:
            members = set(comp)
            inner = [
                (seq, path, a, b)
                for a in comp
                for b, (seq, path) in self.edges.get(a, {}).items()
                if b in members
            ]
            if not inner:
                continue
            _, path, a, b = min(inner)
            cycle = [a, *self._walk(b, a, members)]
            self._issue(path, "conflict", "manager cycle: " + " → ".join(cycle))

    def _walk(self, start: str, goal: str, members: set[str]) -> list[str]:
        # Shortest path start → goal inside one strongly connected component (for the message).
        previous: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue and goal not in previous:
            node = queue.popleft()
            for nxt in sorted(self.edges.get(node, {}), key=self._rank):
                if nxt in members and nxt not in previous:
                    previous[nxt] = node
                    queue.append(nxt)
        path: list[str] = []
        at: str | None = goal
        while at is not None:
            path.append(at)
            at = previous.get(at)
        return list(reversed(path))

    def _rank(self, handle: str) -> int:
        role = self.handles.get(handle)
        return role.order if role else 0
