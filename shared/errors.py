"""The root of crewlet's error tree.

Every error crewlet raises on purpose derives from :class:`CrewletError`. "Called it wrong"
(:class:`UsageError`) is kept apart from "the world failed" (:class:`ServiceError`), and every
error says whether repeating the same call is safe (``retryable``)::

    CrewletError
    ├── UsageError                      caller's mistake; never retryable
    │   └── ConfigInvalid               (shared.config) a node file / company document refused
    └── ServiceError                    the world failed
        ├── BrokerError                 (shared.broker)
        │   ├── BrokerUnreachable       no NATS server answered in the connect budget
        │   ├── BrokerRefused           the server is reachable but unfit (e.g. max_payload)
        │   └── EmbeddedBrokerFailed    the child nats-server did not start or died
        └── CoordinationError           (shared.coordination)
            ├── CoordinationUnavailable the store could not be asked: the answer is *unknown* (FL-32)
            │   └── OutcomeUnknown      a write was sent but its fate is unknown (re-read first)
            ├── RevisionConflict        a compare-and-set lost: a definitive *no*
            └── BucketMismatch          an existing bucket has another shape than configured (FL-25)

Seams define their own subclasses next to their code and re-export them.
"""

from __future__ import annotations

__all__ = ["CrewletError", "ServiceError", "UsageError"]


class CrewletError(Exception):
    """Root of every error crewlet raises on purpose.

    Attributes:
        retryable: True when repeating the same call may succeed without changing anything.
    """

    retryable: bool = False


class UsageError(CrewletError):
    """The caller asked for something invalid; repeating it unchanged fails the same way."""

    retryable = False


class ServiceError(CrewletError):
    """Something outside the caller's control failed (a broker, a store, a peer)."""

    retryable = True
