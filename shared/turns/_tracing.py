"""Attributes of the turn's spans (CO-21): which key goes on which span.

Names and keys come from :mod:`shared.telemetry`; this module decides what each span of a turn
carries, so the executor reads as a loop rather than as a list of attributes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from shared import telemetry
from shared.config import Seat
from shared.providers import ChatRequest, Completion

from ._result import TurnResult
from ._trigger import Trigger

__all__ = ["chat_attributes", "content_attributes", "turn_end_attributes", "turn_start_attributes"]


def turn_start_attributes(seat: Seat, trigger: Trigger, turn_id: str, epoch: int) -> dict[str, Any]:
    """``agent.turn``'s attributes known at the start."""
    attributes: dict[str, Any] = {
        telemetry.GEN_AI_OPERATION_NAME: "invoke_agent",
        telemetry.GEN_AI_AGENT_NAME: seat.handle,
        "gen_ai.agent.id": str(seat.agent_id),
        "crewlet.turn_id": turn_id,
        "crewlet.work_key": trigger.work_key,
        "crewlet.seat.handle": seat.handle,
        "crewlet.agent_id": str(seat.agent_id),
        "crewlet.trigger.id": trigger.event_id,
        "crewlet.trigger.type": trigger.type,
        "crewlet.trigger.source": trigger.source,
        "crewlet.epoch": epoch,
        "crewlet.delegation_depth": trigger.delegation_depth,
    }
    if trigger.delivery_id:
        attributes["crewlet.trigger.delivery_id"] = trigger.delivery_id
    if trigger.parent_turn_id:
        attributes["crewlet.parent_turn_id"] = trigger.parent_turn_id
    return attributes


def turn_end_attributes(result: TurnResult) -> dict[str, Any]:
    """``agent.turn``'s attributes known at the end: outcome, charge and token totals (equal to
    the turn record's, CO-21)."""
    attributes: dict[str, Any] = {
        "crewlet.outcome": result.outcome,
        "crewlet.rounds": len(result.rounds),
        "crewlet.tool_calls": len(result.tool_calls),
        telemetry.GEN_AI_USAGE_INPUT_TOKENS: result.input_tokens,
        telemetry.GEN_AI_USAGE_OUTPUT_TOKENS: result.output_tokens,
        "crewlet.cache_read_tokens": result.cache_read_tokens,
        "crewlet.cache_write_tokens": result.cache_write_tokens,
    }
    if result.error_kind:
        attributes["crewlet.error_kind"] = result.error_kind
    if result.work_item is not None:
        attributes["crewlet.work_item"] = result.work_item.key
        attributes["crewlet.work_item_basis"] = result.work_item.basis
    if result.provider_keys:
        attributes["crewlet.provider_keys"] = list(result.provider_keys)
    return attributes


def chat_attributes(completion: Completion, request_model: str) -> dict[str, Any]:
    """A ``chat <model>`` span's attributes after the call (GenAI conventions)."""
    return {
        telemetry.GEN_AI_PROVIDER_NAME: telemetry.provider_name(completion.provider_type),
        telemetry.GEN_AI_REQUEST_MODEL: request_model,
        telemetry.GEN_AI_RESPONSE_MODEL: completion.model,
        telemetry.GEN_AI_USAGE_INPUT_TOKENS: completion.input_tokens,
        telemetry.GEN_AI_USAGE_OUTPUT_TOKENS: completion.output_tokens,
        telemetry.GEN_AI_RESPONSE_FINISH_REASONS: [completion.stop_reason],
        "crewlet.cache_read_tokens": completion.cache_read_tokens,
        "crewlet.cache_write_tokens": completion.cache_write_tokens,
        "crewlet.provider_key": completion.provider_key,
    }


def content_attributes(request: ChatRequest, completion: Completion) -> dict[str, Any]:
    """Prompt and answer text for a ``chat`` span; only under ``telemetry.capture_content``."""
    output = {
        "role": "assistant",
        "text": completion.text,
        "tool_calls": [dataclasses.asdict(c) for c in completion.tool_calls],
        "finish_reason": completion.stop_reason,
    }
    return {
        telemetry.GEN_AI_SYSTEM_INSTRUCTIONS: request.system,
        telemetry.GEN_AI_INPUT_MESSAGES: json.dumps(
            [dataclasses.asdict(m) for m in request.messages], ensure_ascii=False
        ),
        telemetry.GEN_AI_OUTPUT_MESSAGES: json.dumps([output], ensure_ascii=False),
    }
