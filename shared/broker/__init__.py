"""Broker seam: the embedded child nats-server and the one connection per process (FL-2..FL-4, FL-28)."""

from ._connect import MIN_MAX_PAYLOAD, BrokerLink, DomainJetStream, connect, open_broker, wait_jetstream
from ._embedded import (
    APP_PASSWORD,
    APP_USER,
    JS_DOMAIN,
    SYS_PASSWORD,
    SYS_USER,
    EmbeddedBroker,
    nats_server_binary,
    render_server_config,
    uses_accounts,
)
from ._errors import BrokerError, BrokerRefused, BrokerUnreachable, EmbeddedBrokerFailed
from ._membership import (
    MembershipOutcomeUnknown,
    MembershipRefused,
    broker_view,
    findings,
    group_from_jsz,
    member_subject,
    peer_id,
    plan_removal,
    quorum,
)
from ._membership_ops import Membership, MembershipResponder
from ._responder import Responder

__all__ = [
    "APP_PASSWORD",
    "APP_USER",
    "JS_DOMAIN",
    "MIN_MAX_PAYLOAD",
    "SYS_PASSWORD",
    "SYS_USER",
    "BrokerError",
    "BrokerLink",
    "BrokerRefused",
    "BrokerUnreachable",
    "DomainJetStream",
    "EmbeddedBroker",
    "EmbeddedBrokerFailed",
    "Membership",
    "MembershipOutcomeUnknown",
    "MembershipRefused",
    "MembershipResponder",
    "Responder",
    "broker_view",
    "connect",
    "findings",
    "group_from_jsz",
    "member_subject",
    "nats_server_binary",
    "open_broker",
    "peer_id",
    "plan_removal",
    "quorum",
    "render_server_config",
    "uses_accounts",
    "wait_jetstream",
]
