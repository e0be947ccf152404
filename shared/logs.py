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
from collections.abc import Sequence
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


def configure(
    *, level: str = "info", fmt: str = "json", node: str | None = None, processors: Sequence[Any] = ()
) -> None:
    """Set up structlog for this process.

    This module sits below every other one, telemetry included, so what a line gains from above is
    passed in: the composition root passes :func:`shared.telemetry.add_trace_context`, which puts
    the current span's ids on every line written inside a span (FL-6).

    Args:
        level: ``debug`` | ``info`` | ``warn`` | ``error``.
        fmt: ``json`` (one object per line) or ``console``.
        node: The node id bound on every line, or None before it is known.
        processors: structlog processors run on every line after its level and timestamp are
            added and before it is rendered, in the given order; () for none.
    """
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        *processors,
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=chain,
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
