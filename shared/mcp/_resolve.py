"""Which MCP servers a seat runs, with what settings, and when they must restart (CO-34, FL-115).

Every agent seat gets every ``mcp_servers`` entry of the company: a ``shared: false`` entry is
one instance per seat (started when the seat is claimed, stopped when it is released, FL-65/66),
a ``shared: true`` entry is one instance per node. A human seat runs none.

Per-seat credentials come from ``mcp_env.<server>`` (CO-34): the seat's unit chain is the base,
outermost unit first so an inner unit overrides its parent, then the role overrides per key.
The merged values are environment variables for a stdio server and HTTP headers for an http one,
laid over the entry's own ``env`` / ``headers`` (the seat's value wins: it is the seat's
identity). A shared server has no seat, so it gets the entry's own values only.

The company given here should be the *resolved* one (``${VAR}`` replaced, see
:func:`shared.config.resolve_secrets`): the fingerprint is taken over resolved values, so a
rotated secret moves it and an apply restarts exactly the children whose credentials changed
(FL-115). ``tool_prefix`` and ``tool_annotations`` are not in the fingerprint: they change what
the model sees, not the process, and are swapped in without a restart.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

from shared.config import Company, McpServer, OrgModel, Seat

__all__ = [
    "ResolvedServer",
    "fingerprint_of",
    "resolve",
    "resolve_seat_servers",
    "resolve_shared",
    "seat_mcp_env",
    "spawns",
]


@dataclass(frozen=True)
class ResolvedServer:
    """One MCP server as one instance runs it: the entry plus the seat's ``mcp_env`` (CO-34).

    Attributes:
        name: The ``mcp_servers`` entry name (unique in the company).
        transport: ``stdio`` (a child process) or ``http`` (streamable HTTP at ``url``).
        shared: True for the node's one instance, False for a per-seat instance.
        command: The executable of a stdio server; None for http.
        args: Its arguments.
        env: The environment a stdio child gets on top of the allow-listed basics: the entry's
            ``env`` overlaid by the seat's merged ``mcp_env``. Empty for http.
        url: The endpoint of an http server; None for stdio.
        headers: Request headers of an http server: the entry's ``headers`` overlaid by the
            seat's merged ``mcp_env``. Empty for stdio.
        tool_prefix: Prepended to each tool name on the surface; None for none.
        tool_annotations: Hint overrides per bare or prefixed tool name (CO-34, CO-23).
        startup_timeout_seconds: Spawn + ``initialize`` + tool listing must fit in this, seconds.
        request_timeout_seconds: One tool call must answer within this, seconds.
        fingerprint: sha256 hex over what the running process depends on (see
            :func:`fingerprint_of`); equal fingerprints mean "no restart needed" (FL-115).
    """

    name: str
    transport: Literal["stdio", "http"]
    shared: bool
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str] = field(compare=False)
    url: str | None
    headers: dict[str, str] = field(compare=False)
    tool_prefix: str | None
    tool_annotations: dict[str, dict[str, bool]] = field(compare=False)
    startup_timeout_seconds: float
    request_timeout_seconds: float
    fingerprint: str


def fingerprint_of(
    *,
    name: str,
    transport: str,
    command: str | None,
    args: tuple[str, ...],
    env: dict[str, str],
    url: str | None,
    headers: dict[str, str],
    startup_timeout_seconds: float,
    request_timeout_seconds: float,
) -> str:
    """Return the sha256 hex of the settings a running instance depends on (FL-115).

    Canonical JSON (sorted keys) over name, transport, command, args, env, url, headers and
    both timeouts; a change to any of them means the instance must restart to take it.
    """
    doc = {
        "name": name,
        "transport": transport,
        "command": command,
        "args": list(args),
        "env": env,
        "url": url,
        "headers": headers,
        "startup_timeout_seconds": startup_timeout_seconds,
        "request_timeout_seconds": request_timeout_seconds,
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _build(entry: McpServer, seat_values: dict[str, str]) -> ResolvedServer:
    env = {**entry.env, **seat_values} if entry.transport == "stdio" else {}
    headers = {**entry.headers, **seat_values} if entry.transport == "http" else {}
    command = entry.command if entry.transport == "stdio" else None
    args = tuple(entry.args) if entry.transport == "stdio" else ()
    url = entry.url if entry.transport == "http" else None
    startup = float(entry.startup_timeout_seconds)
    request = float(entry.request_timeout_seconds)
    return ResolvedServer(
        name=entry.name,
        transport=entry.transport,
        shared=entry.shared,
        command=command,
        args=args,
        env=env,
        url=url,
        headers=headers,
        tool_prefix=entry.tool_prefix or None,
        tool_annotations={k: dict(v) for k, v in entry.tool_annotations.items()},
        startup_timeout_seconds=startup,
        request_timeout_seconds=request,
        fingerprint=fingerprint_of(
            name=entry.name,
            transport=entry.transport,
            command=command,
            args=args,
            env=env,
            url=url,
            headers=headers,
            startup_timeout_seconds=startup,
            request_timeout_seconds=request,
        ),
    )


def _org_of(company: Company | OrgModel) -> OrgModel:
    return company if isinstance(company, OrgModel) else OrgModel.from_company(company)


def seat_mcp_env(org: OrgModel, seat: Seat, server: str) -> dict[str, str]:
    """Return the seat's merged ``mcp_env.<server>`` (CO-34).

    Outermost unit first, each inner unit overriding per key, then the role overriding per key.

    Args:
        org: The org model holding ``seat``.
        seat: The seat.
        server: The ``mcp_servers`` entry name.

    Returns:
        Variable or header name -> value; empty when nothing on the chain names ``server``.
    """
    chain = []
    unit_id = seat.unit_id
    while unit_id is not None:
        unit = org.unit(unit_id)
        if unit is None:
            break
        chain.append(unit)
        unit_id = unit.parent_id
    merged: dict[str, str] = {}
    for unit in reversed(chain):
        merged.update(unit.unit.mcp_env.get(server, {}))
    merged.update(seat.role.mcp_env.get(server, {}))
    return merged


def _seat_of(org: OrgModel, seat: Seat | str) -> Seat | None:
    return org.seat(seat) if isinstance(seat, str) else seat


def resolve(company: Company | OrgModel, seat: Seat | str) -> list[ResolvedServer]:
    """Return the per-seat (``shared: false``) servers of one seat, in document order (CO-34).

    Args:
        company: The (secret-resolved) company, or its org model (cheaper: no rebuild).
        seat: The seat or its handle.

    Returns:
        One :class:`ResolvedServer` per ``shared: false`` entry with the seat's ``mcp_env``
        merged in; empty for a human seat or an unknown handle.

    Raises:
        ConfigInvalid: ``company`` was built without the validator and breaks an org rule.
    """
    org = _org_of(company)
    found = _seat_of(org, seat)
    if found is None or found.kind != "agent":
        return []
    return [
        _build(entry, seat_mcp_env(org, found, entry.name))
        for entry in org.company.mcp_servers
        if not entry.shared
    ]


def resolve_seat_servers(company: Company | OrgModel, seat: Seat | str) -> list[ResolvedServer]:
    """Same as :func:`resolve` (the name the seats role uses)."""
    return resolve(company, seat)


def resolve_shared(company: Company | OrgModel) -> list[ResolvedServer]:
    """Return the node's shared (``shared: true``) servers, in document order (CO-34).

    A shared server belongs to no seat, so no ``mcp_env`` applies: its own ``env`` / ``headers``
    only.

    Args:
        company: The (secret-resolved) company or its org model.
    """
    doc = company.company if isinstance(company, OrgModel) else company
    return [_build(entry, {}) for entry in doc.mcp_servers if entry.shared]


def spawns(company: Company | OrgModel, seat: Seat | str) -> bool:
    """Return True when claiming ``seat`` forks at least one per-seat stdio child (FL-56).

    This is what the claim limiter counts: the sweep's "four claims" are sized against spawning
    MCP process trees, so a seat without per-seat stdio servers does not spend that budget.

    Args:
        company: The (secret-resolved) company or its org model.
        seat: The seat or its handle; a human seat or an unknown handle spawns nothing.

    Raises:
        ConfigInvalid: ``company`` was built without the validator and breaks an org rule.
    """
    doc = company.company if isinstance(company, OrgModel) else company
    if not any(not e.shared and e.transport == "stdio" for e in doc.mcp_servers):
        return False
    org = _org_of(company)
    found = _seat_of(org, seat)
    return found is not None and found.kind == "agent"
