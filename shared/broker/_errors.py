"""Errors of the broker seam (see the tree in :mod:`shared.errors`)."""

from __future__ import annotations

from shared.errors import ServiceError

__all__ = ["BrokerError", "BrokerRefused", "BrokerUnreachable", "EmbeddedBrokerFailed"]


class BrokerError(ServiceError):
    """Base of every broker failure."""


class BrokerUnreachable(BrokerError):
    """No NATS server answered within the connect budget (FL-28); retry once it is up."""


class BrokerRefused(BrokerError):
    """The server answered but is unfit for crewlet (e.g. ``max_payload`` below 8 MB, FL-3).

    Repeating the call does not help until the server's configuration changes.
    """

    retryable = False


class EmbeddedBrokerFailed(BrokerError):
    """The child nats-server could not start, or died (FL-4: fatal to the node)."""

    retryable = False
