"""Broker seam: the embedded child nats-server and the one connection per process (FL-2..FL-4, FL-28)."""

from ._connect import MIN_MAX_PAYLOAD, BrokerLink, connect, open_broker, wait_jetstream
from ._embedded import EmbeddedBroker, nats_server_binary, render_server_config
from ._errors import BrokerError, BrokerRefused, BrokerUnreachable, EmbeddedBrokerFailed
from ._responder import Responder

__all__ = [
    "MIN_MAX_PAYLOAD",
    "BrokerError",
    "BrokerLink",
    "BrokerRefused",
    "BrokerUnreachable",
    "EmbeddedBroker",
    "EmbeddedBrokerFailed",
    "Responder",
    "connect",
    "nats_server_binary",
    "open_broker",
    "render_server_config",
    "wait_jetstream",
]
