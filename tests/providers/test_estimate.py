"""What a round may cost before it runs (CO-37, FL-119): ``LlmProvider.estimate``.

Offline: exactly the completion's ``input_tokens + output_tokens``. HTTP backends:
``ceil(utf8 bytes(system + messages + tools) / 3)`` plus the answer cap, with no call made.
"""

from __future__ import annotations

import dataclasses
import json
import math

from shared import providers
from shared.providers import (
    AssistantMessage,
    ChatRequest,
    RequestContext,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from shared.providers._base import prompt_text
from tests.providers.test_offline import LEAD, SCRIPT
from tests.support.llm_servers import OpenAIServer

TOOLS = (ToolSpec("create_work_item", "Create an item.", {"type": "object", "properties": {}}),)


async def test_offline_estimate_is_exactly_what_the_round_counts_at_every_step() -> None:
    offline = providers.OfflineProvider("o", script=SCRIPT)
    request = ChatRequest("système", (UserMessage("go ✓"),), TOOLS, context=LEAD)
    seen = 0
    for _ in range(3):  # two tool steps, then the final text
        estimate = offline.estimate(request)
        done = await offline.complete(request)
        assert estimate == done.input_tokens + done.output_tokens
        assert offline.estimate(request) == estimate  # no side effects
        seen += 1
        if not done.tool_calls:
            break
        call = done.tool_calls[0]
        request = dataclasses.replace(
            request,
            messages=(
                *request.messages,
                AssistantMessage("", done.tool_calls),
                ToolResultMessage(call.id, call.name, json.dumps({"key": "ENG-7"})),
            ),
        )
    assert seen == 3 and done.text.startswith("[offline] Done ENG-7")
    for context in (RequestContext(seat="dev", source="work", reason="assigned"), None):
        plain = ChatRequest("s", (UserMessage("x"),), context=context)
        done = await offline.complete(plain)
        assert offline.estimate(plain) == done.input_tokens + done.output_tokens


def test_http_estimate_is_a_third_of_the_prompt_bytes_plus_the_answer_cap() -> None:
    request = ChatRequest("système", (UserMessage("héllo"),), TOOLS)
    size = len(prompt_text(request).encode("utf-8"))
    assert prompt_text(request) == request.system + json.dumps(
        [dataclasses.asdict(m) for m in request.messages] + [dataclasses.asdict(t) for t in TOOLS],
        ensure_ascii=False,
        sort_keys=True,
    )
    with OpenAIServer() as server:
        openai = providers.OpenAICompatibleProvider(
            "a", model="m", base_url=server.base_url, max_output_tokens=1000
        )
        claude = providers.AnthropicProvider("c", model="m", base_url=server.base_url)
        assert openai.estimate(request) == math.ceil(size / 3) + 1000
        assert claude.estimate(request) == math.ceil(size / 3) + providers.DEFAULT_MAX_OUTPUT_TOKENS
        capped = dataclasses.replace(request, max_output_tokens=50)
        assert openai.estimate(capped) == math.ceil(size / 3) + 50
        assert server.seen == []  # no call made


def test_chain_estimate_is_the_first_usable_members() -> None:
    offline = providers.OfflineProvider("o", script=SCRIPT)
    other = providers.OpenAICompatibleProvider("x", model="m", base_url="http://127.0.0.1:9/v1")
    request = ChatRequest("s", (UserMessage("x"),), context=LEAD)
    assert providers.ProviderChain(["o", "x"], [offline, other]).estimate(request) == offline.estimate(
        request
    )
    assert providers.ProviderChain(["x", "o"], [other, offline]).estimate(request) == other.estimate(request)
    assert providers.ProviderChain(["gone"], []).estimate(request) == 0
