"""The ``offline`` backend (CO-15): deterministic, rule-driven, no network, labelled.

On each call it reads the conversation: the first rule of the script whose ``when`` matches the
request's :class:`~shared.providers.RequestContext` drives the turn; it emits that rule's next
step as one tool call (id ``offline-<n>``, ``n`` the step's index), and after the last step (or
from ``default`` when no rule matches) the rule's ``final`` as a text answer. ``args`` and
``final`` are templates over ``trigger.text``, ``trigger.first_line``,
``trigger.work_item.key``, ``trigger.sender``, ``seat.handle``, ``seat.managers[0]``,
``seat.reports[n]``, ``result[n].<field>`` (the parsed JSON result of step ``n``) and
``memory.recalled`` (the first entry of the prompt's ``Personal memory`` section, AG-8: what the
seat's recall put before it, so a demo turn can quote a line it remembered); the config seam
already refused any other placeholder. A value that is absent (no manager, a failed step
without that field) renders as "".

Answering by reading (issue 38): ``when.text_matches`` is a regular expression searched in the
trigger text. A ``result[n].<field>`` whose value is a list (``list_work_items``' ``items``,
``search_knowledge``' ``hits``) renders as short lines joined by ``"; "``: a work item as
``SUP-1 title (status, assignee)``, a hit as ``SPACE/title``, anything else as its text, and
``(none)`` for an empty list; the ``:open`` suffix drops the work items whose status is ``done``,
``cancelled`` or ``closed``.

Everything it writes is visibly not a model's work (CO-15): the final text and every string
argument named ``body`` start with ``[offline] ``, and so do work item titles (ours: the brief
asks for titles too; page titles are left alone because a page title is its address —
``Notes SUP-1`` in the golden path). ``model`` is always ``crewlet-offline-1``.

Phases (CO-30..CO-32, ours): the executor's turn ends with ``submit_work``. Unless the rule's
steps call ``submit_work`` themselves, the ``final`` text comes together with a ``submit_work``
call (id ``offline-submit-<k>``) whose summary is that text: outcome ``delivered`` when the rule
made steps, else ``no_action``; when the engine refuses it (CO-31: ``reply_owed`` →
``delivered``; any other refusal → ``blocked`` with the refusal as evidence) the next call submits
again. A later executor iteration (its prompt carries the prior-work ledger) makes no steps: the
ledger says they are done. A review request (only ``submit_review`` offered) is answered with the
rule's ``submit_review`` step when it has one, else ``submit_review{decision: done}``;
``submit_review`` steps are never run by the executor.

Token counts (CO-15, ours): ``input = ceil(utf8 bytes(system + messages + tools JSON) / 4)``,
``output = ceil(utf8 bytes(output) / 4)``, cache figures 0 (the prompt text is
:func:`~shared.providers._base.prompt_text`). :meth:`OfflineProvider.estimate` is exact: the same
two figures, computed without answering. No randomness, no clock: the same
conversation yields byte-identical answers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, ClassVar

from shared.config import OFFLINE_MODEL, OfflineRule, OfflineScript

from ._base import LlmProvider, prompt_text
from ._types import (
    AssistantMessage,
    ChatRequest,
    Completion,
    RequestContext,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["OFFLINE_LABEL", "OfflineProvider"]

OFFLINE_LABEL = "[offline] "
"""The prefix on every text the offline provider writes (CO-15)."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_INDEXED = re.compile(r"^(seat\.reports|result)\[(\d+)\](?:\.([A-Za-z_][A-Za-z0-9_]*))?(:open)?$")
_CLOSED = frozenset({"done", "cancelled", "closed"})
_TITLED_TOOLS = frozenset({"create_work_item", "update_work_item"})
_STEP_ID = re.compile(r"^offline-(\d+)$")
_SUBMIT_ID = "offline-submit-"
_LEDGER_HEADING = "## Prior work\n"


def _label(text: str) -> str:
    return text if text.startswith(OFFLINE_LABEL) else OFFLINE_LABEL + text


def _tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / 4)


class OfflineProvider(LlmProvider):
    """``type: offline`` (CO-15).

    Args:
        key: The ``providers.llm`` key.
        script: The validated rules file (:func:`shared.config.load_offline_script`).
    """

    type: ClassVar[str] = "offline"

    def __init__(self, key: str, *, script: OfflineScript, **settings: Any) -> None:
        settings.pop("model", None)
        super().__init__(key, model=OFFLINE_MODEL, **settings)
        self.script = script

    def match(self, context: RequestContext) -> OfflineRule | None:
        """Return the first rule whose ``when`` matches ``context``, or None (``default``)."""
        for rule in self.script.rules:
            when = rule.when
            if when.seat is not None and when.seat != context.seat:
                continue
            if when.trigger is not None and when.trigger != context.trigger_type:
                continue
            if when.source is not None and when.source != context.source:
                continue
            if when.reason is not None and when.reason != context.reason:
                continue
            if when.text_contains is not None and when.text_contains not in context.text:
                continue
            if when.text_matches is not None and re.search(when.text_matches, context.text) is None:
                continue
            return rule
        return None

    async def complete(self, request: ChatRequest) -> Completion:
        """Answer from the script (CO-15); see :meth:`LlmProvider.complete`. Never raises."""
        return self._answer(request)

    def estimate(self, request: ChatRequest) -> int:
        """Exactly what :meth:`complete` counts for ``request``: its ``input_tokens`` plus
        ``output_tokens`` (CO-15 is deterministic, so the budget reservation is exact, CO-37).

        Args:
            request: The round about to run.

        Returns:
            Tokens. No call is made and nothing changes.
        """
        answer = self._answer(request)
        return answer.input_tokens + answer.output_tokens

    def _answer(self, request: ChatRequest) -> Completion:
        """The answer to ``request``: a pure function of the script and the request."""
        context = request.context or RequestContext(seat="")
        rule = self.match(context)
        offered = {t.name for t in request.tools}
        if "submit_review" in offered and "submit_work" not in offered:
            return self._review(request, context, rule)
        results = _step_results(request)
        done = len(results)
        context = _with_memory(context, request)
        steps = [s for s in rule.steps if s.tool != "submit_review"] if rule is not None else []
        if _later_iteration(request):
            steps = []  # the prior-work ledger says they happened (CO-30)
        calls: tuple[ToolCall, ...] = ()
        if done < len(steps):
            step = steps[done]
            args = {
                name: self._arg(step.tool, name, _render_value(value, context, results))
                for name, value in step.args.items()
            }
            calls = (ToolCall(f"offline-{done}", step.tool, args),)
            output = step.tool + calls[0].arguments_json()
            text = ""
        else:
            final = rule.final if rule is not None else self.script.default.final
            text = _label(_render(final, context, results))
            output = text
            if not any(s.tool == "submit_work" for s in steps) and "submit_work" in offered:
                call = _submit_call(request, text, acted=bool(steps))
                calls = (call,)
                output += call.name + call.arguments_json()
        return self._completion(request, text, calls, output)

    def _review(self, request: ChatRequest, context: RequestContext, rule: OfflineRule | None) -> Completion:
        """A review request (CO-30): the rule's ``submit_review`` step, else ``done``."""
        scripted = next((s for s in rule.steps if s.tool == "submit_review"), None) if rule else None
        if scripted is not None:
            args = {k: _render_value(v, context, {}) for k, v in scripted.args.items()}
        else:
            args = {"decision": "done", "notes": OFFLINE_LABEL + "reviewed; the work stands."}
        call = ToolCall("offline-review", "submit_review", args)
        return self._completion(request, "", (call,), call.name + call.arguments_json())

    def _completion(
        self, request: ChatRequest, text: str, calls: tuple[ToolCall, ...], output: str
    ) -> Completion:
        return Completion(
            text=text,
            tool_calls=calls,
            stop_reason="tool_use" if calls else "end",
            model=OFFLINE_MODEL,
            input_tokens=_tokens(prompt_text(request)),
            output_tokens=_tokens(output),
            provider_key=self.key,
            provider_type=self.type,
        )

    @staticmethod
    def _arg(tool: str, name: str, value: Any) -> Any:
        if isinstance(value, str) and (name == "body" or (name == "title" and tool in _TITLED_TOOLS)):
            return _label(value)
        return value


def _step_results(request: ChatRequest) -> dict[int, Any]:
    """Map step index → parsed result for every ``offline-<n>`` call already answered."""
    asked: set[str] = set()
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            asked.update(c.id for c in message.tool_calls if _STEP_ID.match(c.id))
    out: dict[int, Any] = {}
    for message in request.messages:
        if isinstance(message, ToolResultMessage) and message.tool_call_id in asked:
            match = _STEP_ID.match(message.tool_call_id)
            assert match is not None
            out[int(match.group(1))] = _parsed(message.content)
    return out


def _parsed(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


def _later_iteration(request: ChatRequest) -> bool:
    """True when the conversation opens with a later executor iteration's prompt (CO-30)."""
    first = next((m for m in request.messages if isinstance(m, UserMessage)), None)
    return first is not None and _LEDGER_HEADING in first.text


def _submit_call(request: ChatRequest, summary: str, *, acted: bool) -> ToolCall:
    """The ``submit_work`` that ends the executor's turn, after any refused earlier ones."""
    refusals = [
        _parsed(m.content)
        for m in request.messages
        if isinstance(m, ToolResultMessage) and m.tool_call_id.startswith(_SUBMIT_ID) and m.is_error
    ]
    args: dict[str, Any] = {"outcome": "delivered" if acted else "no_action", "summary": summary}
    if refusals:
        last = refusals[-1] if isinstance(refusals[-1], dict) else {}
        if last.get("code") == "reply_owed" and not any(
            isinstance(x, dict) and x.get("code") == "not_delivered" for x in refusals
        ):
            args["outcome"] = "delivered"
        else:
            args["outcome"] = "blocked"
            args["evidence"] = OFFLINE_LABEL + str(last.get("error") or "the engine refused the outcome")
    return ToolCall(f"{_SUBMIT_ID}{len(refusals) + 1}", "submit_work", args)


_MEMORY_HEADING = "## Personal memory\n\n"


def _with_memory(context: RequestContext, request: ChatRequest) -> RequestContext:
    """``context`` with the recalled line in ``_recalled`` (see :func:`_recalled`)."""
    recalled = _recalled(request)
    return _Recalling(**{f: getattr(context, f) for f in context.__dataclass_fields__}, recalled=recalled)


def _recalled(request: ChatRequest) -> str:
    """The first ``- `` line of the first user message's ``Personal memory`` section, or ""."""
    first = next((m for m in request.messages if isinstance(m, UserMessage)), None)
    if first is None or _MEMORY_HEADING not in first.text:
        return ""
    body = first.text.split(_MEMORY_HEADING, 1)[1].split("\n## ", 1)[0]
    line = next((ln for ln in body.splitlines() if ln.startswith("- ")), "")
    return line[2:].strip()


@dataclasses.dataclass(frozen=True)
class _Recalling(RequestContext):
    """A request context plus the line recall put in the prompt (``{memory.recalled}``)."""

    recalled: str = ""


def _lookup(path: str, context: RequestContext, results: dict[int, Any]) -> str:
    if path == "memory.recalled":
        return context.recalled if isinstance(context, _Recalling) else ""
    simple = {
        "trigger.text": context.text,
        "trigger.first_line": context.first_line,
        "trigger.work_item.key": context.work_item_key,
        "trigger.sender": context.sender,
        "seat.handle": context.seat,
        "seat.managers[0]": context.managers[0] if context.managers else "",
    }
    if path in simple:
        return simple[path]
    indexed = _INDEXED.match(path)
    if indexed is None:
        return ""
    where, n, field = indexed.group(1), int(indexed.group(2)), indexed.group(3)
    if where == "seat.reports":
        return context.reports[n] if n < len(context.reports) else ""
    result = results.get(n)
    value = result.get(field) if isinstance(result, dict) and field else None
    if isinstance(value, list):
        return _lines(value, open_only=indexed.group(4) is not None)
    return "" if value is None else str(value)


def _lines(entries: list[Any], *, open_only: bool) -> str:
    """A tool result's list as short lines joined by ``"; "`` (issue 38); ``(none)`` when empty."""
    out: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            out.append(str(entry))
        elif "key" in entry:
            if open_only and entry.get("status") in _CLOSED:
                continue
            who = entry.get("assignee") or "unassigned"
            out.append(f"{entry['key']} {entry.get('title', '')} ({entry.get('status', '')}, {who})")
        elif "title" in entry:
            space = entry.get("space")
            out.append(f"{space}/{entry['title']}" if space else str(entry["title"]))
        else:
            out.append(json.dumps(entry, sort_keys=True))
    return "; ".join(out) if out else "(none)"


def _render(template: str, context: RequestContext, results: dict[int, Any]) -> str:
    return _PLACEHOLDER.sub(lambda m: _lookup(m.group(1), context, results), template)


def _render_value(value: Any, context: RequestContext, results: dict[int, Any]) -> Any:
    if isinstance(value, str):
        return _render(value, context, results)
    if isinstance(value, list):
        return [_render_value(v, context, results) for v in value]
    if isinstance(value, dict):
        return {k: _render_value(v, context, results) for k, v in value.items()}
    return value
