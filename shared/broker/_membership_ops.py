"""Reading the metadata group over the wire and carrying a removal (FL-148, FL-149).

:class:`Membership` is one node's handle: a member reads its own child's ``/jsz`` (and prefers the
leader's view, which alone knows whether each follower is current); any node asks live members at
once on ``crewlet.fleet.broker.<member>`` and takes the first answer. A removal is judged
(:func:`~shared.broker._membership.plan_removal`), then carried by this node when it is a member
other than the target, else forwarded to a live member other than the target
(:class:`MembershipResponder` answers there). The carrier talks to its own child as the system user
on a connection opened for the gesture and closed after it (nats-server answers membership changes
only on the system account, infra-facts S5).

Wire format (JSON): request ``{"v": 1, "op": "group"}`` or ``{"v": 1, "op": "remove", "peer": ID,
"node": ID|null, "deadline_s": seconds}``; answer ``{"v": 1, "node": <answering member>, "group":
{...}}`` or ``{"v": 1, "node": ..., "error": {"code": ..., "detail": ...}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx
import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared import logs

from ._embedded import SYS_PASSWORD, SYS_USER
from ._errors import BrokerError
from ._membership import (
    GROUP_READ_WAIT,
    LEADER_REASK,
    MEMBER_KINDS,
    REMOVAL_DEADLINE,
    UNKNOWN_NAME,
    MembershipOutcomeUnknown,
    MembershipRefused,
    broker_view,
    group_from_jsz,
    lone_group,
    member_subject,
    peer_id,
    plan_removal,
    quorum,
)
from ._responder import Responder

__all__ = ["Membership", "MembershipResponder"]

_log = logs.get("broker.membership")
_VERSION = 1
_JSZ_TIMEOUT = 2.0
_REMOVE_SUBJECT = "$JS.API.SERVER.REMOVE"
_NOT_A_MEMBER = 10044  # "server is not a member of the cluster"


class GroupUnread(BrokerError):
    """This member's own view of the metadata group could not be read (monitoring down, no group)."""


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


class Membership:
    """One node's view of, and hand on, the broker's metadata group (FL-147..FL-149).

    Args:
        nc: The node's one connection (requests to members ride it).
        node_id: This node's id (= its server name when it is a member, FL-4).
        kind: This node's broker kind (``member``, ``leaf``, ``client``).
        client_url: The child nats-server's client URL (members), for the system-user connection.
        monitor_url: The child's HTTP monitoring base URL (clustered members), else ``""``.
    """

    def __init__(
        self, nc: Client, *, node_id: str, kind: str, client_url: str = "", monitor_url: str = ""
    ) -> None:
        self._nc = nc
        self.node_id = node_id
        self.kind = kind
        self._client_url = client_url
        self._monitor_url = monitor_url.rstrip("/")
        self._responder: MembershipResponder | None = None

    @property
    def holds_group(self) -> bool:
        """True for a clustered member: its child holds the metadata group."""
        return self.kind == "member" and bool(self._monitor_url)

    # -- reading --------------------------------------------------------------------------------

    async def own_group(self) -> dict[str, Any]:
        """This member's own view of the group, from its child's ``/jsz``.

        Returns:
            The FL-147 group (:func:`~shared.broker._membership.group_from_jsz`).

        Raises:
            GroupUnread: not a clustered member, monitoring did not answer in 2 s, or no group yet.
        """
        if not self.holds_group:
            raise GroupUnread(f"{self.node_id} is a {self.kind}, not a clustered member: it holds no group")
        try:
            async with httpx.AsyncClient(timeout=_JSZ_TIMEOUT) as client:
                r = await client.get(self._monitor_url + "/jsz")
                r.raise_for_status()
                meta = r.json().get("meta_cluster")
        except (httpx.HTTPError, ValueError) as e:
            raise GroupUnread(
                f"{self.node_id}'s broker monitoring did not answer: {type(e).__name__}: {e}"
            ) from None
        if not isinstance(meta, dict):
            raise GroupUnread(f"{self.node_id}'s broker reports no metadata group")
        return group_from_jsz(meta, self_name=self.node_id)

    async def _ask(self, members: list[str], req: dict[str, Any], *, timeout: float) -> dict[str, Any] | None:
        """Send ``req`` to every member at once; the first answer without an error, else the last error, else None."""
        if not members:
            return None
        answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def on_answer(msg: Msg) -> None:
            with contextlib.suppress(ValueError):
                doc = json.loads(msg.data)
                if isinstance(doc, dict):
                    answers.put_nowait(doc)

        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox, cb=on_answer)
        last: dict[str, Any] | None = None
        try:
            data = _encode(req)
            for m in members:
                await self._nc.publish(member_subject(m), data, reply=inbox)
            deadline = time.monotonic() + timeout
            for _ in members:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    doc = await asyncio.wait_for(answers.get(), remaining)
                except TimeoutError:
                    break
                if "error" not in doc:
                    return doc
                last = doc
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return last

    async def read_group(
        self, presence: list[dict[str, Any]]
    ) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """Read the metadata group (FL-148).

        An unclustered member (a single node's embedded broker) is its own group: one voter, the
        leader (:func:`~shared.broker._membership.lone_group`). A clustered member takes the
        leader's view when the leader is a live node that answers within
        :data:`GROUP_READ_WAIT` seconds, else its own; a node without a group (or whose own read
        failed) asks every live member at once and takes the first answer.

        Args:
            presence: Live presence rows (``id``, ``broker``).

        Returns:
            ``(group, group_from, group_error)``: the group and whose view it is, or
            ``(None, None, why)``.
        """
        members = sorted(
            str(p["id"])
            for p in presence
            if str(p["id"]) != self.node_id and (p.get("broker") in MEMBER_KINDS or p.get("broker") is None)
        )
        if self.kind == "member" and not self._monitor_url:  # one server, no cluster: it is the group
            return lone_group(self.node_id), self.node_id, None
        own_error = ""
        if self.holds_group:
            try:
                own = await self.own_group()
            except GroupUnread as e:
                own_error = str(e)
            else:
                leader = own["leader"]
                if leader and leader != self.node_id and leader in members:
                    ans = await self._ask([leader], {"v": _VERSION, "op": "group"}, timeout=GROUP_READ_WAIT)
                    if ans is not None and isinstance(ans.get("group"), dict):
                        return ans["group"], str(ans.get("node") or leader), None
                return own, self.node_id, None
        if not members:
            why = own_error or "no live member to ask: only a broker member holds the metadata group"
            return None, None, why
        ans = await self._ask(members, {"v": _VERSION, "op": "group"}, timeout=GROUP_READ_WAIT)
        if ans is None:
            why = f"no member answered within {GROUP_READ_WAIT:.0f} s (asked {', '.join(members)})"
            return None, None, f"{own_error}; {why}" if own_error else why
        if "error" in ans:
            err = ans["error"]
            return None, None, f"{ans.get('node')}: {err.get('detail') if isinstance(err, dict) else err}"
        return ans["group"], str(ans.get("node") or ""), None

    async def view(self, presence: list[dict[str, Any]]) -> dict[str, Any]:
        """The ``GET /fleet/broker`` answer for this node (FL-147); see :func:`broker_view`.

        Args:
            presence: Live presence rows as :func:`shared.leases.fleet_view` lists them.
        """
        if self.kind == "client":
            return broker_view(
                node=self.node_id, kind=self.kind, presence=[], group=None, group_from=None, group_error=None
            )
        group, source, error = await self.read_group(presence)
        return broker_view(
            node=self.node_id,
            kind=self.kind,
            presence=presence,
            group=group,
            group_from=source,
            group_error=error,
        )

    # -- removing -------------------------------------------------------------------------------

    async def remove(
        self,
        presence: list[dict[str, Any]],
        *,
        node: str | None = None,
        peer: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Judge and carry (or forward) the removal of one voter (FL-149).

        Args:
            presence: Live presence rows.
            node: The voter's node id, or None (then ``peer``).
            peer: The voter's raft peer id, or None.
            force: Remove although the node holds a live presence lease as a member.

        Returns:
            ``{"node", "peer", "by", "group"}``: the node id (None when nobody can name it), the
            peer id, the member that carried it, and the group after (that member's view).

        Raises:
            MembershipRefused: see :func:`plan_removal`, plus ``no_leader``, ``membership_changing``
                and ``failed`` from the carrier.
            MembershipOutcomeUnknown: the carrying member went silent.
        """
        deadline = time.monotonic() + REMOVAL_DEADLINE
        plan = plan_removal(await self.view(presence), node=node, peer=peer, force=force)
        _log.info(
            "broker_removal_started",
            target=plan.node or UNKNOWN_NAME,
            peer=plan.peer,
            carriers=list(plan.carriers),
            forced_live=plan.forced_live,
        )
        for carrier in plan.carriers:
            if carrier == self.node_id and self.holds_group:
                group = await self.carry(plan.peer, node=plan.node, deadline=deadline)
                return {"node": plan.node, "peer": plan.peer, "by": self.node_id, "group": group}
            remaining = deadline - time.monotonic()
            req = {
                "v": _VERSION,
                "op": "remove",
                "peer": plan.peer,
                "node": plan.node,
                "deadline_s": remaining,
            }
            try:
                msg = await self._nc.request(
                    member_subject(carrier), _encode(req), timeout=max(remaining, 0.1) + 5.0
                )
            except nats.errors.NoRespondersError:
                continue  # it never heard the request: nothing happened there; ask the next one
            except nats.errors.TimeoutError:
                raise MembershipOutcomeUnknown(
                    f"{carrier} carried the removal of {plan.node or plan.peer} and went silent: the voter may or "
                    "may not be gone; read the list before asking again"
                ) from None
            ans = json.loads(msg.data)
            if "error" in ans:
                err = ans["error"]
                raise MembershipRefused(str(err.get("code", "failed")), str(err.get("detail", "")))
            return {"node": plan.node, "peer": plan.peer, "by": carrier, "group": ans.get("group")}
        raise MembershipRefused(
            "removing_self",
            f"no live member other than {plan.node or plan.peer} answered on its membership subject "
            f"(asked {', '.join(plan.carriers)})",
        )

    async def carry(self, peer: str, *, node: str | None, deadline: float) -> dict[str, Any]:
        """Remove voter ``peer`` through this member's child as the system user (FL-149).

        Re-asks every :data:`LEADER_REASK` seconds while no leader answers, and returns once this
        member's own view no longer counts the voter.

        Args:
            peer: The voter's raft peer id.
            node: Its node id, or None (for the log).
            deadline: ``time.monotonic()`` instant the gesture ends at.

        Returns:
            This member's view of the group after the removal.

        Raises:
            MembershipRefused: ``removing_self`` (the voter is this member), ``no_leader`` (nobody
                answered as leader before the deadline), ``membership_changing``, ``failed``.
        """
        if peer == peer_id(self.node_id):
            raise MembershipRefused("removing_self", f"{self.node_id} cannot carry its own removal")
        who = node or peer
        sysnc = await self._system_connection()
        attempts = 0
        accepted = False
        group: dict[str, Any] | None = None
        try:
            while True:
                remaining = deadline - time.monotonic()
                with contextlib.suppress(GroupUnread):
                    group = await self.own_group()
                if group is not None and not any(p["peer"] == peer for p in group["peers"]):
                    _log.info(
                        "broker_member_removed", target=who, peer=peer, by=self.node_id, attempts=attempts
                    )
                    return group
                if remaining <= 0:
                    raise self._out_of_time(who, peer, group, accepted=accepted, attempts=attempts)
                if accepted:  # the leader took it: wait for this member to stop counting the voter
                    await asyncio.sleep(min(0.25, remaining))
                    continue
                attempts += 1
                try:
                    msg = await sysnc.request(
                        _REMOVE_SUBJECT, _encode({"peer_id": peer}), timeout=min(2.0, remaining)
                    )
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    _log.info("broker_removal_reask", target=who, peer=peer, attempts=attempts)
                    await asyncio.sleep(max(0.0, min(LEADER_REASK, deadline - time.monotonic())))
                    continue
                accepted = _leader_took(json.loads(msg.data), who)
        finally:
            with contextlib.suppress(Exception):
                await sysnc.close()

    async def _system_connection(self) -> Client:
        """A connection to this member's own child as the system user (no reconnects).

        Raises:
            MembershipRefused: ``failed``: the child could not be reached.
        """
        try:
            return await nats.connect(
                servers=[self._client_url],
                user=SYS_USER,
                password=SYS_PASSWORD,
                name=f"{self.node_id}-membership",
                allow_reconnect=False,
                connect_timeout=2,
                error_cb=_quiet,
            )
        except (OSError, TimeoutError, nats.errors.Error) as e:
            raise MembershipRefused(
                "failed",
                f"{self.node_id} could not reach its broker as the system user: {type(e).__name__}: {e}",
            ) from None

    def _out_of_time(
        self, who: str, peer: str, group: dict[str, Any] | None, *, accepted: bool, attempts: int
    ) -> MembershipRefused:
        if accepted:
            return MembershipRefused(
                "failed",
                f"the leader accepted the removal of {who} but {self.node_id} still counted it after "
                f"{REMOVAL_DEADLINE:.0f} s; read the list",
            )
        arithmetic = ""
        if group is not None:
            voters = len(group["peers"])
            current = sum(1 for p in group["peers"] if p["current"])
            arithmetic = f"; {self.node_id} sees {voters} voters, {current} current, and a decision needs {quorum(voters)}"
        return MembershipRefused(
            "no_leader",
            f"no metadata leader answered the removal of {who} ({peer}) within {REMOVAL_DEADLINE:.0f} s "
            f"({attempts} attempts){arithmetic}: a group without a quorum cannot change its own membership, "
            "so bring enough members back first (FL-150)",
        )

    # -- answering ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Answer group reads and carry removals on this member's subject (no-op on a non-member)."""
        if self.holds_group and self._responder is None:
            self._responder = MembershipResponder(self)
            await self._responder.start()

    async def stop(self) -> None:
        """Stop answering (waits for a removal in hand up to 10 s)."""
        if self._responder is not None:
            await self._responder.stop()
            self._responder = None

    @property
    def nc(self) -> Client:
        """The node's connection."""
        return self._nc


async def _quiet(e: Exception) -> None:
    _log.debug("broker_membership_connection_error", error=f"{type(e).__name__}: {e}")


class MembershipResponder(Responder):
    """A member's answers on ``crewlet.fleet.broker.<member>``: its own group view, and removals it carries.

    Args:
        membership: The member's :class:`Membership`.
    """

    def __init__(self, membership: Membership) -> None:
        super().__init__(membership.nc, member_subject(membership.node_id))
        self._m = membership

    async def answer(self, msg: Msg) -> None:
        """Answer one request (see the module docstring for the wire format); never raises."""
        me = self._m.node_id
        try:
            req = json.loads(msg.data)
            op = req.get("op") if isinstance(req, dict) else None
            if op == "group":
                ans: dict[str, Any] = {"v": _VERSION, "node": me, "group": await self._m.own_group()}
            elif op == "remove":
                deadline = time.monotonic() + max(0.0, float(req.get("deadline_s") or REMOVAL_DEADLINE))
                group = await self._m.carry(str(req["peer"]), node=req.get("node"), deadline=deadline)
                ans = {"v": _VERSION, "node": me, "group": group}
            else:
                ans = {"v": _VERSION, "node": me, "error": {"code": "failed", "detail": f"unknown op {op!r}"}}
        except MembershipRefused as e:
            ans = {"v": _VERSION, "node": me, "error": {"code": e.code, "detail": e.detail}}
        except GroupUnread as e:
            ans = {"v": _VERSION, "node": me, "error": {"code": "no_meta_group", "detail": str(e)}}
        except Exception as e:  # noqa: BLE001 - a peer is always answered, never left to time out
            _log.error("broker_membership_answer_failed", error=f"{type(e).__name__}: {e}")
            ans = {
                "v": _VERSION,
                "node": me,
                "error": {"code": "failed", "detail": f"{type(e).__name__}: {e}"},
            }
        await self.respond(msg, _encode(ans))


def _leader_took(ans: Any, who: str) -> bool:
    """Read the leader's answer to a removal: True when it took it (or no longer counts the voter).

    Raises:
        MembershipRefused: ``membership_changing`` (another change is in progress), ``failed``.
    """
    err = ans.get("error") if isinstance(ans, dict) else None
    if not err:
        return True
    code = int(err.get("err_code") or 0)
    desc = str(err.get("description") or "")
    if code == _NOT_A_MEMBER:
        return True  # the leader no longer counts it; this member catches up
    if "progress" in desc.lower() or "membership change" in desc.lower():
        raise MembershipRefused(
            "membership_changing",
            f"the group is already changing its membership ({desc}); read the list and try again",
        )
    raise MembershipRefused("failed", f"nats-server refused the removal of {who}: {desc} ({code})")
