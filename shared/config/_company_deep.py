"""The deep checks of the company document that are not about the org tree.

Providers (CO-3, CO-15), provider references of roles, placement selectors (FL-57, FL-58),
duplicate project/space keys, webhook routes (CO-9, CO-35), MCP servers and ``mcp_env``
(CO-34), tracker types. Like :class:`~shared.config._company_org.OrgDraft` they read plain data
and skip whatever is not well-shaped, so they add to the shape errors instead of repeating them.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from ._company_issues import join_path
from ._company_org import OrgDraft
from ._company_types import EMBEDDING_WIDTH_RANGE, EMBEDDING_WIDTHS, LOCAL_EMBEDDING_MODEL, OFFLINE_MODEL
from ._issues import Issue, IssueType

_HTTP_URL = re.compile(r"^https?://[^\s/]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

__all__ = ["DeepChecks"]


class DeepChecks:
    """The deep checks that are not about the org tree (CO-1, CO-3, CO-9, FL-57/58, CO-34)."""

    def __init__(self, data: dict[str, Any], org: OrgDraft, file: str, compat: bool) -> None:
        self.data, self.org, self.file, self.compat = data, org, file, compat
        self.issues: list[Issue] = []

    def add(self, path: str, kind: IssueType, message: str) -> None:
        """Record one error at ``path`` (a dotted key path of the company document)."""
        self.issues.append(Issue(self.file, path, kind, message))

    def run(self) -> list[Issue]:
        """Run every check below in order and return the issues found (errors; empty when sound)."""
        self.providers()
        self.embeddings()
        self.roles()
        self.unit_keys()
        self.webhooks()
        self.mcp_servers()
        self.tracker_types()
        return self.issues

    def _mapping(self, *keys: str) -> dict[str, Any] | None:
        at: Any = self.data
        for key in keys:
            at = at.get(key) if isinstance(at, dict) else None
        return at if isinstance(at, dict) else None

    def providers(self) -> None:
        """``providers.llm``: at least one provider (CO-3), each entry well formed."""
        llm = self._mapping("providers", "llm")
        if llm is not None and not llm and not self.compat:
            self.add("providers.llm", "missing", "declare at least one LLM provider (CO-3)")
        for key, entry in (llm or {}).items():
            if not isinstance(entry, dict):
                continue
            path = join_path("providers.llm", key)
            kind = entry.get("type")
            model = entry.get("model")
            if kind == "offline":
                if model is not None and model != OFFLINE_MODEL:
                    self.add(
                        f"{path}.model", "invalid", f"the offline provider's model is fixed: {OFFLINE_MODEL}"
                    )
                if entry.get("script") is None:
                    self.add(f"{path}.script", "missing", "an offline provider needs its rules file (script)")
            elif kind in ("anthropic", "openai", "openai-compatible"):
                if model is None:
                    self.add(f"{path}.model", "missing", f"required key 'model' is missing for type {kind}")
                if entry.get("script") is not None:
                    self.add(f"{path}.script", "invalid", "script is only for type offline")
                if kind == "openai-compatible" and entry.get("base_url") is None:
                    self.add(
                        f"{path}.base_url", "missing", "openai-compatible has no vendor default; set base_url"
                    )

    def embeddings(self) -> None:
        """``providers.embeddings`` (AG-10): ``base_url`` for openai-compatible, a width in 64..4 096
        or a model whose width is known, and for ``local`` a ``wordllama`` model whose package is
        installed."""
        entry = self._mapping("providers", "embeddings")
        if entry is None:
            return
        path = "providers.embeddings"
        kind = entry.get("type")
        model = entry.get("model")
        dims = entry.get("dimensions")
        lo, hi = EMBEDDING_WIDTH_RANGE
        if isinstance(dims, int) and not isinstance(dims, bool) and not lo <= dims <= hi:
            self.add(f"{path}.dimensions", "out_of_range", f"an embedding width is {lo}..{hi} (got {dims})")
        if kind in ("openai", "openai-compatible"):
            if model is None:
                self.add(f"{path}.model", "missing", f"required key 'model' is missing for type {kind}")
            elif dims is None and model not in EMBEDDING_WIDTHS:
                self.add(
                    f"{path}.dimensions",
                    "missing",
                    f"the width of model {model!r} is not known; set dimensions ({lo}..{hi})",
                )
            if kind == "openai-compatible" and entry.get("base_url") is None:
                self.add(
                    f"{path}.base_url", "missing", "openai-compatible has no vendor default; set base_url"
                )
        elif kind == "local":
            name = model if isinstance(model, str) else LOCAL_EMBEDDING_MODEL
            if not name.startswith("wordllama/"):
                self.add(
                    f"{path}.model", "invalid", f"type local runs wordllama/... models only (got {name!r})"
                )
            elif importlib.util.find_spec("wordllama") is None:
                self.add(f"{path}.type", "invalid", "type local needs its package: pip install wordllama")
            if entry.get("base_url") is not None:
                self.add(f"{path}.base_url", "invalid", "type local calls no server; remove base_url")

    def _llm_refs(self, value: Any, path: str) -> None:
        keys = self._mapping("providers", "llm")
        if not keys:
            return  # no map, or an empty one: already reported (or, in compat, warned) once
        if isinstance(value, str):
            if value not in keys:
                known = ", ".join(sorted(map(str, keys))) or "none"
                self.add(path, "unknown_value", f"no provider {value!r} in providers.llm (have: {known})")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str):
                    self._llm_refs(item, f"{path}[{i}]")
        elif isinstance(value, dict):
            for phase, item in value.items():
                if isinstance(item, str | list):
                    self._llm_refs(item, join_path(path, phase))

    def roles(self) -> None:
        """Each role's ``llm`` / ``llm_review`` names a declared provider (CO-3, CO-9); placements
        and schedules only on agent roles (FL-57, CO-33)."""
        for role in self.org.roles:
            self._llm_refs(role.data.get("llm"), f"{role.path}.llm")
            self._llm_refs(role.data.get("llm_review"), f"{role.path}.llm_review")
            placement = role.data.get("placement")
            if placement is not None and role.kind == "human":
                self.add(f"{role.path}.placement", "conflict", "only agent seats take a placement (FL-57)")
            if isinstance(placement, dict) and isinstance(placement.get("labels"), dict):
                self._labels(placement["labels"], f"{role.path}.placement.labels")
            self._schedule_names(role.data.get("schedules"), f"{role.path}.schedules")
            if role.kind == "human" and role.data.get("schedules"):
                self.add(
                    f"{role.path}.schedules",
                    "conflict",
                    "a human seat runs no turns, so its schedules would never fire (CO-33); put them on an agent role",
                )
        for unit in self.org.units:
            self._schedule_names(unit.data.get("schedules"), f"{unit.path}.schedules")
        servers = self._server_names()
        holders = [(r.path, r.data) for r in self.org.roles] + [(u.path, u.data) for u in self.org.units]
        for path, data in holders:
            env = data.get("mcp_env")
            if servers is None or not isinstance(env, dict):
                continue
            for key in env:
                if key not in servers:
                    self.add(
                        join_path(f"{path}.mcp_env", key),
                        "unknown_value",
                        f"no mcp_servers entry named {key!r}",
                    )

    def _labels(self, labels: dict[Any, Any], path: str) -> None:
        # FL-58: every bad key is reported, and a value is refused rather than trimmed.
        for key, value in labels.items():
            if not isinstance(key, str):
                continue
            where = join_path(path, key)
            size = len(key.encode("utf-8"))
            if not 1 <= size <= 63:
                self.add(where, "invalid", f"label key must be 1 to 63 bytes of UTF-8 (got {size})")
            elif any(c.isspace() or not c.isprintable() for c in key):
                self.add(where, "invalid", "label key must not hold whitespace or unprintable characters")
            if isinstance(value, str) and value != value.strip():
                self.add(
                    where, "invalid", f"label value {value!r} has surrounding whitespace; it is not trimmed"
                )

    def _schedule_names(self, items: Any, path: str) -> None:
        seen: set[str] = set()
        for i, entry in enumerate(items if isinstance(items, list) else []):
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str):
                if name in seen:
                    self.add(f"{path}[{i}].name", "conflict", f"schedule name {name!r} is used twice here")
                seen.add(name)

    def _server_names(self) -> set[str] | None:
        items = self.data.get("mcp_servers", [])
        if not isinstance(items, list):
            return None
        return {s["name"] for s in items if isinstance(s, dict) and isinstance(s.get("name"), str)}

    def unit_keys(self) -> None:
        """No two units claim the same tracker project or knowledge space key (CO-1)."""
        for attr in ("project", "space"):
            first: dict[str, str] = {}
            for unit in self.org.units:
                key = unit.data.get(attr)
                if isinstance(key, str):
                    if key in first:
                        self.add(
                            f"{unit.path}.{attr}",
                            "conflict",
                            f"{attr} key {key!r} is already used by {first[key]}",
                        )
                    first.setdefault(key, unit.path)

    def _route(self, holder: dict[str, Any], key: str, path: str) -> None:
        ref = holder.get(key)
        if not isinstance(ref, str):
            return
        target = self.org.resolve(ref)
        if target is None:
            self.org.unresolved(path, ref)
            return
        if ref != target[1]:
            self.org.rewrites.append((holder, key, target[1]))
        handle: str | None = target[1]
        if target[0] == "unit":
            handle = self.org.effective_lead(self.org.unit_ids[target[1]].order)[0]
            if handle is None:
                self.add(path, "invalid", f"unit {ref!r} has no effective lead to route to")
                return
        role = self.org.handles.get(handle) if handle else None
        if role is not None and role.kind == "human":
            self.add(
                path, "invalid", f"routes to human seat {handle!r}, which has no inbox; name an agent seat"
            )

    def webhooks(self) -> None:
        """``integrations.webhooks``: unique sources, each well formed (CO-34)."""
        hooks = self._mapping("integrations")
        items = hooks.get("webhooks") if hooks else None
        first: dict[str, int] = {}
        for i, hook in enumerate(items if isinstance(items, list) else []):
            if not isinstance(hook, dict):
                continue
            path = f"integrations.webhooks[{i}]"
            source = hook.get("source")
            if isinstance(source, str):
                if source in first:
                    self.add(
                        f"{path}.source",
                        "conflict",
                        f"source {source!r} is already used by webhooks[{first[source]}]",
                    )
                first.setdefault(source, i)
            self._route(hook, "route_to", f"{path}.route_to")
        github = self._mapping("integrations", "github")
        if github is not None:
            self._route(github, "route_unmatched_to", "integrations.github.route_unmatched_to")
            project = github.get("project")
            projects = {u.data.get("project") for u in self.org.units}
            if isinstance(project, str) and project not in projects:
                self.add(
                    "integrations.github.project",
                    "unknown_value",
                    f"no unit has project {project!r}: GitHub items are mirrored into a unit's project",
                )

    def mcp_servers(self) -> None:
        """``mcp_servers``: unique names; a stdio server needs a command, an http one a url (FL-57/58)."""
        items = self.data.get("mcp_servers")
        seen: set[str] = set()
        for i, server in enumerate(items if isinstance(items, list) else []):
            if not isinstance(server, dict):
                continue
            path = f"mcp_servers[{i}]"
            name = server.get("name")
            if isinstance(name, str):
                if name in seen:
                    self.add(f"{path}.name", "conflict", f"mcp server {name!r} is declared twice")
                seen.add(name)
            transport = server.get("transport", "stdio")
            if transport == "stdio" and server.get("command") is None:
                self.add(f"{path}.command", "missing", "a stdio server needs a command")
            if transport == "http" and server.get("url") is None:
                self.add(f"{path}.url", "missing", "an http server needs a url")
            # the other transport's keys would be ignored without a word: refuse them
            for key in ("url", "headers") if transport == "stdio" else ("command", "args", "env"):
                if server.get(key):
                    article = "an" if transport == "http" else "a"
                    self.add(f"{path}.{key}", "conflict", f"{article} {transport} server takes no {key}")
            url = server.get("url")
            if transport == "http" and isinstance(url, str) and not _HTTP_URL.match(url):
                self.add(f"{path}.url", "shape", f"must be an http:// or https:// URL (got {url!r})")
            self._mcp_pairs(server.get("env"), f"{path}.env", "stdio")
            self._mcp_pairs(server.get("headers"), f"{path}.headers", "http")
        kinds = {
            s["name"]: s.get("transport", "stdio")
            for s in (items if isinstance(items, list) else [])
            if isinstance(s, dict) and isinstance(s.get("name"), str)
        }
        shared = {
            s["name"]
            for s in (items if isinstance(items, list) else [])
            if isinstance(s, dict) and isinstance(s.get("name"), str) and s.get("shared") is True
        }
        holders = [(r.path, r.data, r.kind) for r in self.org.roles] + [
            (u.path, u.data, "unit") for u in self.org.units
        ]
        for holder, data, kind in holders:
            env = data.get("mcp_env")
            if not isinstance(env, dict):
                continue
            if kind == "human" and env:
                self.add(f"{holder}.mcp_env", "conflict", "a human seat runs no MCP servers")
            for name, values in env.items():
                where = join_path(f"{holder}.mcp_env", str(name))
                if name in shared:
                    self.add(
                        where, "conflict", f"{name!r} is shared (one per node): it takes no per-seat mcp_env"
                    )
                elif name in kinds:
                    self._mcp_pairs(values, where, kinds[name])

    def _mcp_pairs(self, values: Any, path: str, transport: str) -> None:
        """Env var names (stdio) or header names (http) the child or the request can carry (CO-34)."""
        if not isinstance(values, dict):
            return
        for key in values:
            if not isinstance(key, str):
                continue
            if transport == "stdio" and not _ENV_NAME.match(key):
                self.add(join_path(path, key), "shape", "an environment variable name: letters, digits, _")
            if transport == "http" and not _HEADER_NAME.match(key):
                self.add(join_path(path, key), "shape", "an HTTP header name: no spaces or separators")

    def tracker_types(self) -> None:
        """``tracker.types``: each slug declared once."""
        tracker = self._mapping("tracker")
        items = tracker.get("types") if tracker else None
        seen: set[str] = set()
        for i, entry in enumerate(items if isinstance(items, list) else []):
            slug = entry.get("slug") if isinstance(entry, dict) else None
            if isinstance(slug, str):
                if slug in seen:
                    self.add(f"tracker.types[{i}].slug", "conflict", f"type {slug!r} is declared twice")
                seen.add(slug)
