# ruff: noqa: E402  (logging is configured before the engine modules bind their loggers)
"""Measure the executor's own overhead per turn (run: ``python -m tests.turns.overhead``).

A zero-latency provider answers from precomputed completions (round 1: ``create_work_item``;
round 2: ``submit_work``), the workspace is the in-memory one, so what is left is the engine:
prompt assembly, prefetch, schema validation, records, spans, metrics. The floor, measured in
the same run, is a bare loop making the same awaits (two provider calls, the prefetch search,
the work item create) with nothing around them. Medians over N turns; ratios, not absolute
times, are the result (DESIGN.md: benchmarks print each figure beside its floor).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from typing import ClassVar

from shared import logs, telemetry

# Before anything binds a module-level logger (they keep the configuration of their first use).
logs.configure(
    level=os.environ.get("CREWLET_BENCH_LOG", "error"), fmt="json", processors=[telemetry.add_trace_context]
)

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from shared import providers, telemetry, turns
from shared.providers import ChatRequest, Completion, ToolCall
from tests.turns.helpers import example_org
from tests.turns.workspace import Estate

ROUNDS = (
    Completion(
        "",
        (ToolCall("c1", "create_work_item", {"project": "SUP", "title": "Crash", "assignee": "lead"}),),
        "tool_use",
        "zero",
        1000,
        20,
        provider_key="zero",
    ),
    Completion(
        "",
        (ToolCall("c2", "submit_work", {"outcome": "delivered", "summary": "Filed it"}),),
        "tool_use",
        "zero",
        1100,
        20,
        provider_key="zero",
    ),
)


REVIEW = Completion(
    "",
    (ToolCall("r1", "submit_review", {"decision": "done", "notes": "fine"}),),
    "tool_use",
    "zero",
    1200,
    10,
    provider_key="zero",
)


class ZeroLatency(providers.LlmProvider):
    """Answers instantly: round n gets ``ROUNDS[n]`` (counted from the conversation)."""

    type: ClassVar[str] = "zero"

    async def complete(self, request: ChatRequest) -> Completion:
        if [t.name for t in request.tools] == ["submit_review"]:  # the review phase (CO-30)
            return REVIEW
        return ROUNDS[(len(request.messages) - 1) // 2]


class Drop(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _trigger() -> turns.Trigger:
    return turns.Trigger(event_id=str(uuid.uuid4()), text="Crash when config file is empty\nDetails.")


async def engine_turns(n: int, tracer: object | None, metrics: telemetry.TurnMetrics | None) -> list[float]:
    org = example_org()
    zero = ZeroLatency("zero", model="zero")
    chain = providers.ProviderChain(["zero"], [zero])
    eng = turns.TurnEngine(
        org,
        providers.ProviderSet({"zero": zero}),
        recorder=turns.MemoryRecorder(),
        tracer=tracer,  # type: ignore[arg-type]
        metrics=metrics,
    )
    out = []
    for _ in range(n):
        estate = Estate()
        t0 = time.perf_counter()
        result = await eng.run("triage", _trigger(), workspace=estate.workspace("triage"), chain=chain)
        out.append(time.perf_counter() - t0)
        assert result.outcome == "delivered", result.error
    return out


async def bare_turns(n: int) -> list[float]:
    zero = ZeroLatency("zero", model="zero")
    out = []
    for _ in range(n):
        estate = Estate()
        ws = estate.workspace("triage")
        request = ChatRequest("system", (providers.UserMessage("task"),))
        t0 = time.perf_counter()
        await ws.search_pages("Crash when config file is empty")
        first = await zero.complete(request)
        await ws.create_work_item("SUP", "task", "Crash", "", "lead")
        request = ChatRequest(
            "system",
            (*request.messages, providers.AssistantMessage("", first.tool_calls), providers.UserMessage("r")),
        )
        await zero.complete(request)
        out.append(time.perf_counter() - t0)
    return out


def _ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


async def main(n: int) -> None:
    await engine_turns(20, None, None)  # warm up imports and caches
    bare = _ms(await bare_turns(n))
    plain = _ms(await engine_turns(n, None, None))
    sdk = TracerProvider()
    sdk.add_span_processor(BatchSpanProcessor(Drop()))
    traced = _ms(await engine_turns(n, sdk.get_tracer("crewlet.turns"), telemetry.TurnMetrics()))
    sdk.shutdown()
    level = os.environ.get("CREWLET_BENCH_LOG", "error")
    print(f"turns per variant: {n} (2 rounds, 2 tool calls, prefetch on, memory recorder, log level {level})")
    print(f"bare loop, same awaits          median {bare:8.3f} ms   (floor)")
    print(
        f"engine, no-op tracer, no metrics median {plain:8.3f} ms   x{plain / bare:.0f} of floor, +{plain - bare:.3f} ms"
    )
    print(
        f"engine, SDK spans batched, metrics median {traced:6.3f} ms   x{traced / bare:.0f} of floor, +{traced - bare:.3f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
