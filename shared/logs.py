"""Structured logs (FL-153): the message of every line is the spec's event name.

Every line carries ``component`` (``coord.kv``, ``queue.nats.server``, ``node``, ...) and, once
:func:`configure` has been called with a node id, ``node``. Output is one JSON object per line on
stderr (``logging.format: json``, the default) or a console rendering.

Use::

    log = logs.get("coord.kv")
    log.info("coord_kv_bucket_slow", bucket="crewlet_leases", elapsed_ms=10_004)
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure", "get"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(*, level: str = "info", fmt: str = "json", node: str | None = None) -> None:
    """Set up structlog for this process.

    Args:
        level: ``debug`` | ``info`` | ``warn`` | ``error``.
        fmt: ``json`` (one object per line) or ``console``.
        node: The node id bound on every line, or None before it is known.
    """
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    from shared.telemetry import add_trace_context  # lines inside a span carry its ids (FL-6)

    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_trace_context,
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    if node is not None:
        structlog.contextvars.bind_contextvars(node=node)


def get(component: str) -> Any:
    """Return a logger whose lines carry ``component``.

    Args:
        component: The subsystem name, e.g. ``coord.kv``.

    Returns:
        A structlog bound logger; call ``.info(event_name, **fields)``.
    """
    # lazy: the logger is built at first use, so a later configure() (level, format) applies to it
    return structlog.get_logger(component=component)
