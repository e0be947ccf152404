"""Reset OpenTelemetry's process-wide tracer provider after each test (STYLE: reset OTel
globals between tests; the global can otherwise be set only once per process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.util._once import Once

from tests.support.otlp import OtlpReceiver


@pytest.fixture(autouse=True)
def reset_otel_globals() -> Iterator[None]:
    yield
    provider = trace._TRACER_PROVIDER
    if provider is not None and hasattr(provider, "shutdown"):
        provider.shutdown()
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """A loopback OTLP/HTTP receiver, stopped after the test."""
    rcv = OtlpReceiver()
    try:
        yield rcv
    finally:
        rcv.stop()
