"""Broker membership: the metadata group beside what presence says, and removing a dead member (FL-147..FL-150).

Two records say who the broker's members are and they can disagree: the presence leases (what each
live node advertises: ``member``, ``leaf``, ``client``, or a kind this build does not know) and the
JetStream metadata group's own list of voters. Only a member holds the group; a member reads it from
its own child nats-server's monitoring endpoint (``/jsz`` ``meta_cluster``, which lists the other
voters and never the server itself). A follower knows little about the other followers (``current``
is false and ``active`` 0 for a follower that is alive), so a member that is not the leader asks the
leader's node for its view first and falls back to its own. A node that holds no group asks every
live member at once on ``crewlet.fleet.broker.<member id>`` and takes the first answer within
:data:`GROUP_READ_WAIT` seconds (FL-148).

Voters are matched to nodes by raft peer id, which nats-server derives from the server name (= the
node id, FL-4): :func:`peer_id`. A voter nobody has heard of since restarts has no name and lists
as :data:`UNKNOWN_NAME` with its peer id.

Removal (FL-149) goes by peer id. nats-server accepts ``$JS.API.SERVER.REMOVE`` only on a member's
system account (infra-facts S5), and only the metadata leader answers it; so the carrying member opens
a short-lived connection to its own child as the system user (the one place a second connection is
opened: the node's own link is in the ``APP`` account, FL-2), re-asks every :data:`LEADER_REASK`
seconds while nobody answers as leader, and returns once its own view no longer counts the voter.
The whole gesture is bounded by :data:`REMOVAL_DEADLINE`. What is *not* promised: a removed server
name is never re-admitted (a replacement needs a new node id, infra-facts S5); the streams are
re-placed on a new member by nats-server itself once one joins (measured on 2.15.1: under a second),
not by this module.

This module holds the pure parts (peer ids, the view, the findings, the removal judgement); the wire
and the carrying live in :mod:`shared.broker._membership_ops`. Refusals raise :class:`MembershipRefused` with one of :data:`REFUSAL_CODES` (and ``confirm_required``,
``node_live``, ``external``); a carrier that went silent raises :class:`MembershipOutcomeUnknown`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ._errors import BrokerError

__all__ = [
    "GROUP_READ_WAIT",
    "LEADER_REASK",
    "REFUSAL_CODES",
    "REMOVAL_DEADLINE",
    "SUBJECT_PREFIX",
    "UNKNOWN_NAME",
    "MembershipOutcomeUnknown",
    "MembershipRefused",
    "RemovalPlan",
    "broker_view",
    "findings",
    "group_from_jsz",
    "lone_group",
    "member_subject",
    "peer_id",
    "plan_removal",
    "quorum",
]

SUBJECT_PREFIX = "crewlet.fleet.broker."
"""Members answer group reads and carry removals on ``crewlet.fleet.broker.<member id token>``."""
GROUP_READ_WAIT = 5.0
"""Seconds a node waits for the first member's answer to a group read (callers allow 10 s), FL-148."""
REMOVAL_DEADLINE = 125.0
"""Seconds one removal gesture may take: the clustered create budget (2 min) + a 5 s read, FL-149."""
LEADER_REASK = 1.0
"""Seconds between removal requests while no metadata leader answers, FL-149."""
UNKNOWN_NAME = "(name unknown)"
"""How a voter whose server name nobody has heard since restarts is listed (FL-148)."""
REFUSAL_CODES = ("no_meta_group", "not_a_peer", "membership_changing", "no_leader", "removing_self", "failed")
"""The refusal codes of FL-149 (beside ``confirm_required``, ``node_live`` and ``external``)."""
MEMBER_KINDS = ("member", "unknown")
"""Presence kinds counted as a member wherever that is the cautious reading (FL-21)."""

_NAMELESS = "Server name unknown"
"""How nats-server 2.15 names a voter it has not heard from since it restarted (``... (peerID: X)``)."""
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class MembershipRefused(BrokerError):
    """A membership gesture was refused; nothing changed (FL-149).

    Attributes:
        code: ``confirm_required``, ``external``, ``node_live``, or one of :data:`REFUSAL_CODES`.
        status: The HTTP status a route answers with (400 for ``confirm_required``, else 409).
    """

    retryable = False

    def __init__(self, code: str, detail: str, *, status: int = 409) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.status = status


class MembershipOutcomeUnknown(BrokerError):
    """The carrying member went silent mid-removal: the voter may or may not be gone; read the list first."""

    retryable = False


def peer_id(server_name: str) -> str:
    """The raft peer id nats-server derives from a server name (its ``getHash``), FL-148.

    The first 8 bytes of SHA-256 of the name, each mapped to ``0-9A-Za-z`` by ``byte % 62``
    (checked against nats-server 2.15.1's ``/jsz``: ``n2`` → ``44jzkV9D``).

    Args:
        server_name: The server name (an embedded member's node id, FL-4).

    Returns:
        The 8-character peer id.
    """
    digest = hashlib.sha256(server_name.encode()).digest()
    return "".join(_DIGITS[b % len(_DIGITS)] for b in digest[:8])


def member_subject(node_id: str) -> str:
    """The subject member ``node_id`` answers on: the id escaped as one subject token (``.`` → ``%2E``)."""
    token = re.sub(r"[^A-Za-z0-9_-]", lambda m: f"%{ord(m.group()):02X}", node_id)
    return SUBJECT_PREFIX + token


def quorum(voters: int) -> int:
    """How many voters a group of ``voters`` needs to decide anything (a strict majority)."""
    return voters // 2 + 1


def group_from_jsz(meta: dict[str, Any], *, self_name: str) -> dict[str, Any]:
    """Build the FL-147 ``group`` from a ``/jsz`` ``meta_cluster`` object read on member ``self_name``.

    Args:
        meta: ``meta_cluster`` as nats-server's monitoring endpoint returns it (``replicas`` lists
            the other voters, and the server itself too while no leader is known; ``active`` is in
            nanoseconds; a voter unheard of since restarts is named ``Server name unknown at this
            time (peerID: X)``).
        self_name: The answering server's name (its node id).

    Returns:
        ``{"cluster", "leader", "peers": [{"name", "peer", "self", "leader", "current", "offline",
        "active"}]}``; ``leader`` is ``""`` when none is known; ``active`` is seconds since the
        answering server last heard from that voter (0 for itself); a nameless voter's ``name`` is
        :data:`UNKNOWN_NAME`.
    """
    leader = str(meta.get("leader") or "")
    peers = [
        {
            "name": self_name,
            "peer": peer_id(self_name),
            "self": True,
            "leader": leader == self_name,
            "current": bool(leader),
            "offline": False,
            "active": 0.0,
        }
    ]
    own = peer_id(self_name)
    for r in meta.get("replicas") or []:
        name = str(r.get("name") or "")
        if name.startswith(_NAMELESS):
            name = ""
        pid = str(r.get("peer") or (peer_id(name) if name else ""))
        if pid == own or name == self_name:
            continue  # while no leader is known nats-server lists the answering server among the replicas
        peers.append(
            {
                "name": name or UNKNOWN_NAME,
                "peer": pid,
                "self": False,
                "leader": bool(name) and name == leader,
                "current": bool(r.get("current", False)),
                "offline": bool(r.get("offline", False)),
                "active": round(int(r.get("active") or 0) / 1e9, 3),
            }
        )
    peers.sort(key=lambda p: (p["name"] == UNKNOWN_NAME, p["name"], p["peer"]))
    return {"cluster": str(meta.get("name") or ""), "leader": leader, "peers": peers}


def lone_group(self_name: str) -> dict[str, Any]:
    """The group of an embedded broker that is not clustered: its one server, voter and leader.

    A single node (``crewlet run``) runs nats-server without a cluster, so there is no metadata
    group to read: the server decides alone. Issue 38: ``fleet broker list`` said "no live member
    to ask" and showed voter ``?`` for the one member it had just asked.

    Returns:
        The FL-147 group shape with ``cluster`` ``""`` and one peer, ``self_name``, leader and
        current.
    """
    me = {
        "name": self_name,
        "peer": peer_id(self_name),
        "self": True,
        "leader": True,
        "current": True,
        "offline": False,
        "active": 0.0,
    }
    return {"cluster": "", "leader": self_name, "peers": [me]}


def _node_of_voter(voter: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    for n in nodes.values():
        if n["peer"] == voter["peer"] or (voter["name"] != UNKNOWN_NAME and n["node"] == voter["name"]):
            return n
    return None


def findings(nodes: list[dict[str, Any]], group: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Name every disagreement between presence and the metadata group (FL-147).

    Args:
        nodes: Live nodes as listed (``node``, ``peer``, ``kind``, ``roles``).
        group: The group (:func:`group_from_jsz`), or None when it could not be read (then only
            ``unknown_kind`` findings are made: an unread group is never taken as empty).

    Returns:
        ``[{"kind", "node", "peer", "detail"}]``: ``dead_member`` (a voter matching no live node, or
        whose node came back as a leaf or client), ``not_in_group`` (a live node advertising member
        that the group does not list), ``unknown_kind`` (presence does not say); ``node`` is None
        for a voter nobody can name.
    """
    out: list[dict[str, Any]] = []
    by_id = {n["node"]: n for n in nodes}
    if group is not None:
        voter_peers = {p["peer"] for p in group["peers"]}
        for v in group["peers"]:
            n = _node_of_voter(v, by_id)
            named = v["name"] if v["name"] != UNKNOWN_NAME else None
            if n is None:
                out.append(
                    {
                        "kind": "dead_member",
                        "node": named,
                        "peer": v["peer"],
                        "detail": f"voter {named or UNKNOWN_NAME} ({v['peer']}) matches no live node; "
                        "once it is gone for good, remove it (FL-149)",
                    }
                )
            elif n["kind"] in ("leaf", "client"):
                out.append(
                    {
                        "kind": "dead_member",
                        "node": n["node"],
                        "peer": v["peer"],
                        "detail": f"voter {n['node']} came back as a {n['kind']}: its broker never rejoins; "
                        "remove it (no force needed)",
                    }
                )
        for n in nodes:
            if n["kind"] == "member" and n["peer"] not in voter_peers:
                out.append(
                    {
                        "kind": "not_in_group",
                        "node": n["node"],
                        "peer": n["peer"],
                        "detail": f"{n['node']} advertises member but the metadata group does not count it "
                        "(a removed name is never re-admitted: a replacement needs a new node id)",
                    }
                )
    for n in nodes:
        if n["kind"] == "unknown":
            out.append(
                {
                    "kind": "unknown_kind",
                    "node": n["node"],
                    "peer": n["peer"],
                    "detail": f"{n['node']}'s presence does not say its broker kind; counted as a member",
                }
            )
    return out


def broker_view(
    *,
    node: str,
    kind: str,
    presence: list[dict[str, Any]],
    group: dict[str, Any] | None,
    group_from: str | None,
    group_error: str | None,
) -> dict[str, Any]:
    """Assemble the ``GET /fleet/broker`` answer (FL-147).

    Args:
        node: The answering node's id.
        kind: Its broker kind (``member``, ``leaf``, ``client``).
        presence: Live presence rows as :func:`shared.leases.fleet_view` lists them (``id``,
            ``roles``, ``broker``).
        group: The metadata group, or None when unread (or on an external cluster).
        group_from: The member whose view ``group`` is, or None.
        group_error: Why the group is absent, or None.

    Returns:
        ``{"node", "kind", "external", "nodes", "group"?, "group_from"?, "group_error"?,
        "findings"}``. On an external cluster (``kind == "client"``) ``external`` is true and
        nothing is listed: its membership is its operator's. An absent group is left out, never
        shown as empty.
    """
    if kind == "client":
        return {"node": node, "kind": kind, "external": True, "nodes": [], "findings": []}
    nodes = [
        {
            "node": str(p["id"]),
            "peer": peer_id(str(p["id"])),
            "kind": p.get("broker") if p.get("broker") in ("member", "leaf", "client") else "unknown",
            "roles": list(p.get("roles") or []),
        }
        for p in sorted(presence, key=lambda p: str(p["id"]))
    ]
    out: dict[str, Any] = {"node": node, "kind": kind, "external": False, "nodes": nodes}
    if group is not None:
        out["group"] = group
        out["group_from"] = group_from
    else:
        out["group_error"] = group_error or "the metadata group was not read"
    out["findings"] = findings(nodes, group)
    return out


@dataclass(frozen=True)
class RemovalPlan:
    """A judged removal: what goes and who may carry it (FL-149).

    Attributes:
        peer: The voter's raft peer id.
        node: The voter's node id, or None when nobody can name it.
        carriers: Live members other than the target, in the order to ask (the asking node first
            when it is one of them).
        voters: The group's voter count before the removal.
        live: Voters whose node holds a live presence lease as a member (or unknown kind).
        forced_live: True when ``force`` let a live member's removal through.
    """

    peer: str
    node: str | None
    carriers: tuple[str, ...]
    voters: int
    live: int
    forced_live: bool


def _arithmetic(voters: int, live: int) -> str:
    return (
        f"the group counts {voters} voters and {live} of them are live; it needs {quorum(voters)} to decide "
        "anything, a removal included"
    )


def _voter(voters: list[dict[str, Any]], target_peer: str, node: str | None) -> dict[str, Any]:
    """The metadata group's voter with peer id ``target_peer``.

    Raises:
        MembershipRefused: ``not_a_peer`` (the refusal lists the voters).
    """
    voter = next((v for v in voters if v["peer"] == target_peer), None)
    if voter is None:
        listed = ", ".join(f"{v['name']} ({v['peer']})" for v in voters)
        what = f"node {node!r} (peer {target_peer})" if node is not None else f"peer {target_peer!r}"
        raise MembershipRefused(
            "not_a_peer", f"{what} is not a voter of the metadata group; voters: {listed}"
        )
    return voter


def _quorum_after(voters: int, live: int, target_live: bool, target_node: str | None) -> int:
    """Check that the group decides now and still would without the target (FL-150); returns ``live``.

    Raises:
        MembershipRefused: ``no_leader`` with the arithmetic.
    """
    if live < quorum(voters):
        raise MembershipRefused(
            "no_leader",
            f"{_arithmetic(voters, live)}: bring enough members back first (FL-150)",
        )
    after_voters = voters - 1
    after_live = live - (1 if target_live else 0)
    if after_voters > 0 and after_live < quorum(after_voters):
        raise MembershipRefused(
            "no_leader",
            f"removing live voter {target_node} would leave {after_voters} voters with {after_live} live, "
            f"below the {quorum(after_voters)} they need to decide anything: the group could change nothing "
            "afterwards (FL-150)",
        )
    return live


def _carriers(nodes: dict[str, Any], target_peer: str, asker: str, target_node: str | None) -> list[str]:
    """The live members that may carry the removal, the asking node first (FL-149).

    Raises:
        MembershipRefused: ``removing_self`` (none but the target).
    """
    carriers = sorted(n["node"] for n in nodes.values() if n["kind"] == "member" and n["peer"] != target_peer)
    if asker in carriers:
        carriers.remove(asker)
        carriers.insert(0, asker)
    if not carriers:
        raise MembershipRefused(
            "removing_self",
            f"no live member other than {target_node or target_peer} can carry the removal: a member cannot "
            "see itself dropped",
        )
    return carriers


def plan_removal(
    view: dict[str, Any], *, node: str | None = None, peer: str | None = None, force: bool = False
) -> RemovalPlan:
    """Judge a removal against a :func:`broker_view` answer; pure, nothing is changed (FL-149, FL-150).

    Args:
        view: The asking node's broker view (with its group).
        node: The voter's node id (the removal goes by the peer id it hashes to), or None.
        peer: The voter's peer id, or None (exactly one of ``node``/``peer``).
        force: Remove even though the node holds a live presence lease as a member.

    Returns:
        The plan.

    Raises:
        MembershipRefused: ``external``; ``no_meta_group`` (group unread); ``not_a_peer``;
            ``node_live`` (live member, no force); ``no_leader`` (the group has no quorum now:
            nothing can change its membership); ``no_leader`` with the arithmetic when removing
            a live voter would leave the rest without a quorum; ``removing_self`` (no member but
            the target could carry it).
    """
    if view.get("external"):
        raise MembershipRefused(
            "external",
            "this fleet's broker is an external NATS cluster: its membership is its operator's, not crewlet's",
        )
    group = view.get("group")
    if group is None:
        raise MembershipRefused(
            "no_meta_group", str(view.get("group_error") or "the metadata group was not read")
        )
    target_peer = peer_id(node) if node is not None else str(peer or "")
    voters = group["peers"]
    voter = _voter(voters, target_peer, node)
    nodes = {n["node"]: n for n in view.get("nodes", [])}
    target_node = node
    if target_node is None:
        target_node = voter["name"] if voter["name"] != UNKNOWN_NAME else None
        if target_node is None:
            target_node = next((n["node"] for n in nodes.values() if n["peer"] == target_peer), None)
    row = nodes.get(target_node) if target_node is not None else None
    target_live = row is not None and row["kind"] in MEMBER_KINDS
    if target_live and not force:
        raise MembershipRefused(
            "node_live",
            f"{target_node} holds a live presence lease as a {row['kind'] if row else 'member'}: a running member "
            "removed from the group rejoins it at its next restart; stop it for good first, or pass force "
            "for a member wedged in a way that still renews its lease",
        )
    live_peers = {n["peer"] for n in nodes.values() if n["kind"] in MEMBER_KINDS}
    live = _quorum_after(
        len(voters), sum(1 for v in voters if v["peer"] in live_peers), target_peer in live_peers, target_node
    )
    carriers = _carriers(nodes, target_peer, str(view.get("node", "")), target_node)
    return RemovalPlan(
        peer=target_peer,
        node=target_node,
        carriers=tuple(carriers),
        voters=len(voters),
        live=live,
        forced_live=target_live,
    )
