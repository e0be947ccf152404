"""Prometheus metrics of turns (DESIGN.md: Prometheus metrics at ``/metrics``).

One :class:`TurnMetrics` per process on its own :class:`CollectorRegistry` (not the library's
global one, so two engines in one test never collide). The ingress role mounts
:func:`metrics_app` at ``/metrics``; :meth:`TurnMetrics.render` gives the text for a route
that prefers to answer itself.

Series (labels kept to closed or configured sets; no ids):

- ``crewlet_turns_total{seat, outcome}``; ``crewlet_turn_failures_total{seat, error_kind}``;
- ``crewlet_turn_duration_seconds{seat}`` (histogram); ``crewlet_turns_in_flight`` (gauge);
- ``crewlet_llm_rounds_total{seat, provider_key, model}``;
  ``crewlet_llm_round_duration_seconds{provider_key}`` (histogram);
- ``crewlet_llm_tokens_total{seat, provider_key, model, kind}`` with ``kind`` in ``input``,
  ``output``, ``cache_read``, ``cache_write`` (``cache_*`` are parts of ``input``, CO-12);
- ``crewlet_tool_calls_total{seat, tool, status}`` with ``status`` ``ok`` or ``error``;
- ``crewlet_memory_collapsed_total{table}``, ``crewlet_memory_outbox_depth``,
  ``crewlet_memory_hydration_duration_seconds`` (AG-1, AG-2, AG-7).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import make_asgi_app as _make_asgi_app

__all__ = ["METRICS_CONTENT_TYPE", "TurnMetrics", "default_metrics", "metrics_app"]

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of :meth:`TurnMetrics.render`'s text."""

_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
_ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class TurnMetrics:
    """The turn engine's counters (see the module docstring for the series).

    Args:
        registry: Where the series live; None for a fresh one.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.turns = Counter("crewlet_turns", "Turns finished, by outcome.", ["seat", "outcome"], registry=r)
        self.turn_failures = Counter(
            "crewlet_turn_failures", "Failed turns, by error kind.", ["seat", "error_kind"], registry=r
        )
        self.turn_duration = Histogram(
            "crewlet_turn_duration_seconds", "Turn wall time.", ["seat"], buckets=_TURN_BUCKETS, registry=r
        )
        self.in_flight = Gauge("crewlet_turns_in_flight", "Turns running now.", registry=r)
        self.rounds = Counter(
            "crewlet_llm_rounds", "Provider rounds.", ["seat", "provider_key", "model"], registry=r
        )
        self.round_duration = Histogram(
            "crewlet_llm_round_duration_seconds",
            "Model time per round.",
            ["provider_key"],
            buckets=_ROUND_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "crewlet_llm_tokens",
            "Tokens by kind (cache_* are parts of input).",
            ["seat", "provider_key", "model", "kind"],
            registry=r,
        )
        self.tool_calls = Counter("crewlet_tool_calls", "Tool calls.", ["seat", "tool", "status"], registry=r)
        self.memory_collapsed = Counter(
            "crewlet_memory_collapsed",
            "Memory creates a first writer already made (AG-1).",
            ["table"],
            registry=r,
        )
        self.memory_outbox_depth = Gauge(
            "crewlet_memory_outbox_depth", "Memory writes waiting in this node's outbox (AG-2).", registry=r
        )
        self.memory_hydration = Histogram(
            "crewlet_memory_hydration_duration_seconds",
            "Time to hydrate a seat's memory at acquisition (AG-7).",
            buckets=_ROUND_BUCKETS,
            registry=r,
        )

    def round(
        self,
        *,
        seat: str,
        provider_key: str,
        model: str,
        seconds: float,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Count one provider round: its model time in seconds and its tokens."""
        self.rounds.labels(seat, provider_key, model).inc()
        self.round_duration.labels(provider_key).observe(seconds)
        for kind, value in (
            ("input", input_tokens),
            ("output", output_tokens),
            ("cache_read", cache_read_tokens),
            ("cache_write", cache_write_tokens),
        ):
            self.tokens.labels(seat, provider_key, model, kind).inc(value)

    def tool_call(self, *, seat: str, tool: str, ok: bool) -> None:
        """Count one tool call; ``tool`` is the name the model used (unknown names included)."""
        self.tool_calls.labels(seat, tool, "ok" if ok else "error").inc()

    def turn(self, *, seat: str, outcome: str, error_kind: str | None, seconds: float) -> None:
        """Count one finished turn and its wall time in seconds."""
        self.turns.labels(seat, outcome).inc()
        self.turn_duration.labels(seat).observe(seconds)
        if error_kind:
            self.turn_failures.labels(seat, error_kind).inc()

    def render(self) -> bytes:
        """Return the text exposition format (:data:`METRICS_CONTENT_TYPE`)."""
        return generate_latest(self.registry)


_DEFAULT: TurnMetrics | None = None


def default_metrics() -> TurnMetrics:
    """Return the process's metrics, made on first use."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = TurnMetrics()
    return _DEFAULT


def metrics_app(metrics: TurnMetrics | None = None) -> Any:
    """Return an ASGI app serving ``metrics`` (None: :func:`default_metrics`) for ``/metrics``.

    Mount it with ``app.mount("/metrics", telemetry.metrics_app())``.
    """
    return _make_asgi_app(registry=(metrics or default_metrics()).registry)
