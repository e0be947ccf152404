"""The reviewer's surface and prompts, and the prior-work ledger (CO-30, CO-31, CO-32).

The reviewer runs after each executor iteration with no domain tools: only ``submit_review``
(:func:`review_tool`). Its system prompt is the seat's, with the ``your_turn`` and
``available_tools`` sections replaced by the review contract and ``submit_review`` (byte-stable
for one seat within one epoch, like the executor's, CO-17); its user message holds the task, the
reply obligation, the executor's result and the work done so far (:func:`review_prompt`).

When the reviewer asks for another pass (``self_iterate``), or a claim was refuted before review,
the next executor iteration starts a fresh conversation whose user message carries the
**prior-work ledger** (:func:`iteration_prompt`): every earlier tool call with each argument value
elided to :data:`LEDGER_VALUE_CHARS` characters, writes marked done (not to be repeated) and reads
marked re-runnable, plus the tail of the earlier iterations' text (at most
:data:`PRIOR_TEXT_CHARS` characters) and the reason for the new pass. So side effects are not
repeated (CO-30).

:func:`artifact_hash` identifies what an iteration handed in, for the ``stall`` guard (two
``self_iterate`` reviews of the same artifact end the turn).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from shared.config import OrgModel, Seat
from shared.tools import Submission, Tool, ToolAnnotations, ToolContext, ToolRegistry

from ._prompt import Prompt, _render, _system
from ._result import Review, ToolExecution
from ._trigger import ReplyMode

__all__ = [
    "CORRECTIVE_LIMIT",
    "LEDGER_VALUE_CHARS",
    "PRIOR_TEXT_CHARS",
    "REVIEW_MAX_ROUNDS",
    "artifact_hash",
    "corrective",
    "iteration_prompt",
    "ledger",
    "review_prompt",
    "review_tool",
]

LEDGER_VALUE_CHARS = 200
"""Each argument value in the prior-work ledger is cut to this many characters (CO-30)."""
PRIOR_TEXT_CHARS = 4000
"""The earlier iterations' text carried into the next one: at most this many characters, from
the tail (CO-30)."""
CORRECTIVE_LIMIT = 2
"""Corrective messages in a row before the phase is rescued (CO-32, orig)."""
REVIEW_MAX_ROUNDS = 6
"""The review phase's round cap (ours): its one tool needs one round; correctives take three,
and a few more leave room for a ``submit_review`` with bad arguments."""

_REVIEW_CONTRACT = (
    "You are reviewing the turn you just worked, before it ends. You have one tool, "
    "`submit_review`; call it once with your decision:\n"
    "- `done`: the task is handled and, where a reply is owed, the asker has it;\n"
    "- `self_iterate`: something is missing or wrong; say exactly what in `notes`. Another "
    "executor pass follows with your notes and a ledger of the work already done (its writes "
    "are kept and must not be repeated);\n"
    "- `failed`: the task cannot be done; say why in `notes`.\n"
    "Put the answer for the asker in `final_artifact` when it should differ from the executor's."
)

_REPLY_TEXT: dict[str, str] = {
    "none": "No reply is owed: nobody waits for an answer to this trigger.",
    "tool": "A reply is owed through a tool, where the asker asked{where}.",
    "engine": "A reply is owed; the engine hands the final answer to the asker.",
}


def review_tool(sink: Callable[[Review], None]) -> Tool:
    """Return ``submit_review`` (CO-30): the reviewer's only tool; a success ends the phase.

    Args:
        sink: Receives the decoded :class:`~shared.turns.Review` of each successful call.
    """

    async def submit(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        review = Review(
            decision=args["decision"],
            notes=args["notes"],
            completed_work=args.get("completed_work", ""),
            final_artifact=args.get("final_artifact", ""),
        )
        sink(review)
        return {"accepted": True, "decision": review.decision}

    return Tool(
        "submit_review",
        "Decide how the turn ends: done (handled), self_iterate (another pass; notes say what "
        "to do) or failed (cannot be done; notes say why). Call it once.",
        {
            "type": "object",
            "properties": {
                "decision": {"type": "string", "enum": ["done", "self_iterate", "failed"]},
                "notes": {"type": "string", "minLength": 1},
                "completed_work": {"type": "string"},
                "final_artifact": {"type": "string"},
            },
            "required": ["decision", "notes"],
            "additionalProperties": False,
        },
        submit,
        ends_turn=True,
        annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
    )


def corrective(tool: str) -> str:
    """The corrective user message after a round with no tool call (CO-32)."""
    return (
        f"You answered without calling a tool. This phase ends only with a call to `{tool}`: "
        f"call `{tool}` now (or the tool you still need first)."
    )


def _elide(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= LEDGER_VALUE_CHARS:
        return json.dumps(text, ensure_ascii=False) if isinstance(value, str) else text
    cut = text[:LEDGER_VALUE_CHARS]
    return f"{json.dumps(cut, ensure_ascii=False)}…(+{len(text) - LEDGER_VALUE_CHARS} chars)"


def _arguments(call: ToolExecution) -> str:
    if call.arguments is None:
        return _elide(call.raw_arguments or "")
    return "{" + ", ".join(f"{k}: {_elide(v)}" for k, v in call.arguments.items()) + "}"


def ledger(calls: Sequence[ToolExecution], tools: ToolRegistry, *, results: bool = False) -> str:
    """Render the prior-work ledger (CO-30): one line per call, oldest first.

    A write (a tool that is fenced or delivers: tracker, pages, files, unannotated MCP tools)
    that succeeded is ``[done]``; a read is ``[re-runnable]``; a call that failed is
    ``[failed]`` with its error. The phase-closing calls (``submit_work``, ``submit_review``)
    are left out.

    Args:
        calls: The turn's tool executions so far.
        tools: The executor's surface (to tell writes from reads).
        results: Add each successful call's result text, cut like an argument (the reviewer's
            view).

    Returns:
        The lines, or "" when there are none.
    """
    lines: list[str] = []
    for call in calls:
        tool = tools.get(call.name)
        if call.name in ("submit_work", "submit_review") or call.phase != "execute":
            continue
        if call.is_error:
            mark = "failed"
        elif tool is not None and (tool.fenced or tool.delivers):
            mark = "done"
        else:
            mark = "re-runnable"
        line = f"- [{mark}] {call.name} {_arguments(call)}"
        if call.is_error:
            line += f" → error: {(call.error or '')[:LEDGER_VALUE_CHARS]}"
        elif results:
            line += f" → {_elide(call.content)}"
        lines.append(line)
    return "\n".join(lines)


def _submission(submission: Submission | None, final_text: str) -> str:
    lines = []
    if submission is not None:
        lines.append(f"Outcome: {submission.outcome}")
        lines.append(f"Summary: {submission.summary}")
        if submission.deliveries:
            lines.append("Deliveries: " + ", ".join(submission.deliveries))
        if submission.evidence:
            lines.append(f"Evidence: {submission.evidence}")
        if submission.open_questions:
            lines.append("Open questions: " + "; ".join(submission.open_questions))
    if final_text.strip():
        lines.append(f"Final text:\n{final_text.strip()}")
    return "\n".join(lines)


def _reply(mode: ReplyMode, surfaces: Sequence[str], item: str) -> str:
    where = ""
    if surfaces:
        where = " (" + " or ".join(surfaces) + (f", on {item}" if item else "") + ")"
    return _REPLY_TEXT[mode].format(where=where)


def review_prompt(
    org: OrgModel,
    seat: Seat,
    task_text: str,
    *,
    tools: ToolRegistry,
    review_surface: Sequence[Tool],
    calls: Sequence[ToolExecution],
    submission: Submission | None,
    final_text: str,
    reply_mode: ReplyMode,
    reply_surfaces: Sequence[str] = (),
    reply_item: str = "",
) -> Prompt:
    """Render the reviewer's prompt (CO-30).

    Args:
        org: The pinned org snapshot.
        seat: The agent seat.
        task_text: The trigger rendered as the executor's ``task`` section.
        tools: The executor's surface (for the ledger's write/read marks).
        review_surface: The reviewer's tools (``submit_review``).
        calls: The turn's tool executions so far.
        submission: The executor's last submission.
        final_text: The executor's last text.
        reply_mode: The turn's reply obligation (CO-31).
        reply_surfaces: Where a ``tool`` reply must land; () for anywhere.
        reply_item: The item a ``work`` reply must touch; "".

    Returns:
        The prompt; system sections as the executor's with ``your_turn`` and
        ``available_tools`` for the review; user sections ``task``, ``reply_obligation``,
        ``executor_result``, ``work_done``.
    """
    system, system_sections = _system(org, seat, review_surface, your_turn=_REVIEW_CONTRACT)
    user, user_sections = _render(
        [
            ("task", "Task", task_text),
            ("reply_obligation", "Reply obligation", _reply(reply_mode, reply_surfaces, reply_item)),
            ("executor_result", "Executor result", _submission(submission, final_text)),
            ("work_done", "Work done this turn", ledger(calls, tools, results=True) or "(no tool calls)"),
        ]
    )
    return Prompt(system, system_sections, user, user_sections)


def iteration_prompt(
    task: Prompt, *, calls: Sequence[ToolExecution], tools: ToolRegistry, prior_text: str, reason: str
) -> Prompt:
    """The next executor iteration's prompt (CO-30): the same system prompt; the first user
    message is the task again plus ``prior_work`` (the ledger), ``prior_text`` (the tail of
    earlier text, at most :data:`PRIOR_TEXT_CHARS` characters) and ``next_pass`` (why).

    Args:
        task: The first iteration's prompt.
        calls: The turn's tool executions so far.
        tools: The executor's surface.
        prior_text: The earlier iterations' assistant text, oldest first.
        reason: The reviewer's notes or the correction.
    """
    work = ledger(calls, tools)
    ledger_text = (
        "Calls made earlier in this turn. [done] writes already happened: do not repeat them. "
        "[re-runnable] reads may be run again if you need their result.\n\n" + work
        if work
        else "No tool calls were made earlier in this turn."
    )
    extra, extra_sections = _render(
        [
            ("prior_work", "Prior work", ledger_text),
            ("prior_text", "Your earlier text", prior_text.strip()[-PRIOR_TEXT_CHARS:]),
            ("next_pass", "This pass", reason),
        ]
    )
    return Prompt(task.system, task.system_sections, task.user + extra, task.user_sections + extra_sections)


def artifact_hash(submission: Submission | None, final_text: str) -> str:
    """SHA-256 (hex) of what an executor iteration handed in: its submission and final text
    (CO-30's ``stall`` guard compares these across ``self_iterate`` reviews)."""
    data = {
        "outcome": submission.outcome if submission else None,
        "summary": submission.summary if submission else None,
        "deliveries": submission.deliveries if submission else None,
        "evidence": submission.evidence if submission else None,
        "final_text": final_text.strip(),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
