"""The tool registry and capability model (CO-23), and how one call runs (CO-16 step 6).

A :class:`Tool` has a name, a description, a JSON-Schema argument object, an origin, the
three-valued annotations of CO-23, for built-ins the surface it delivers to, and a handler.
:meth:`ToolRegistry.execute` runs one call and always returns a :class:`ToolOutcome`: an
unknown tool, unparsable or schema-breaking arguments, a :class:`ToolError` from the handler
(workspace refusals included) and a handler that overruns its timeout all become *error
results* the model reads, so the turn goes on. Only a defect (an exception outside the
:class:`ToolError` tree) escapes; the executor records that turn as ``unhandled_exception``
(CO-18: a redelivery would hit the same defect).

Fencing (FL-74) is the executor's: it asks :attr:`Tool.fenced` before a call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from shared.providers import ToolCall, ToolSpec

from ._errors import ToolArgumentsInvalid, ToolError, ToolRegistryError
from ._schema import validate
from ._workspace import Workspace

if TYPE_CHECKING:
    from shared.config import OrgModel

__all__ = [
    "BUILTIN_TOOL_TIMEOUT_SECONDS",
    "Delivery",
    "Hint",
    "Submission",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolHandler",
    "ToolOutcome",
    "ToolRegistry",
]

BUILTIN_TOOL_TIMEOUT_SECONDS = 60.0
"""A built-in call's time limit, in seconds (CO-16, ours)."""

Hint = Literal["yes", "no", "unknown"]
"""A three-valued annotation (CO-23): ``unknown`` is never treated as ``no``."""


@dataclass(frozen=True)
class ToolAnnotations:
    """CO-23's behaviour hints (orig), each ``yes|no|unknown``."""

    read_only: Hint = "unknown"
    destructive: Hint = "unknown"
    idempotent: Hint = "unknown"
    open_world: Hint = "unknown"


@dataclass
class Submission:
    """What ``submit_work`` recorded (CO-16).

    Attributes:
        outcome: ``delivered|no_action|blocked``.
        summary: One paragraph.
        deliveries: What was delivered (keys, page titles, paths).
        evidence: Why it is blocked; "" otherwise.
        open_questions: Questions left for a person.
    """

    outcome: Literal["delivered", "no_action", "blocked"]
    summary: str
    deliveries: list[str] = field(default_factory=list)
    evidence: str = ""
    open_questions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Delivery:
    """One successful delivering call of the turn (CO-23, CO-31).

    Attributes:
        tool: The tool's name.
        surface: Where it delivered: ``work``, ``page``, ``file``, or an MCP server's name.
        keys: The work item keys the call touched (tracker writes), in order; () otherwise.
    """

    tool: str
    surface: str
    keys: tuple[str, ...] = ()


@dataclass
class ToolContext:
    """What a handler may use for one call; one per turn, shared by its calls.

    Attributes:
        seat: The calling seat's handle (``"me"`` in arguments means it).
        workspace: The seat's workspace for this turn.
        org: The pinned org model (``lookup_colleague``); None when the caller has none.
        turn_id: The turn's id.
        touched: Work items the turn's successful tracker writes touched, in order:
            ``{"key", "id", "project"}`` (CO-19's ``sole_write`` charging reads it).
        submission: Set by a successful ``submit_work``.
        reply_mode: The turn's reply obligation (CO-31): ``none``, ``tool`` or ``engine``;
            ``submit_work`` checks its outcome against it.
        reply_surfaces: The asker's surfaces (``work``, ``github``, an MCP server's name) a
            ``tool``-owed reply must reach; () for any surface.
        reply_item: The work item a ``tool``-owed reply on the ``work`` surface must touch; "" for
            any item.
        deliveries: The turn's successful delivering calls so far, in order (the executor
            appends; every iteration of the turn counts).
        memory: The seat's memory (a :class:`shared.tools.MemoryAccess`: AG-3..AG-5), or None on
            a node that keeps none (the memory tools then answer an error result).
        persisted: True once ``reflect_and_persist`` succeeded in this turn (the persist decider
            skips such a turn, AG-3).

    .. versionchanged:: 0.1 ``reply_mode``, ``reply_surfaces``, ``reply_item``, ``deliveries``
       (issue 14, CO-31).
    """

    seat: str
    workspace: Workspace
    org: OrgModel | None = None
    turn_id: str = ""
    touched: list[dict[str, Any]] = field(default_factory=list)
    submission: Submission | None = None
    reply_mode: Literal["none", "tool", "engine"] = "none"
    reply_surfaces: tuple[str, ...] = ()
    reply_item: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    memory: Any = None
    persisted: bool = False

    def touch(self, key: str, item: dict[str, Any] | None = None) -> None:
        """Record that a successful write touched work item ``key``."""
        item = item or {}
        self.touched.append({"key": key, "id": item.get("id"), "project": key.rsplit("-", 1)[0]})

    def record_delivery(self, tool: str, surface: str, keys: tuple[str, ...] = ()) -> Delivery:
        """Append a successful delivering call to :attr:`deliveries` and return it."""
        delivery = Delivery(tool, surface, tuple(keys))
        self.deliveries.append(delivery)
        return delivery

    def reaches_asker(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` lands where a ``tool``-owed reply is expected (CO-31): on one of
        :attr:`reply_surfaces` (any when empty) and, on ``work`` with a :attr:`reply_item`, on
        that item."""
        if self.reply_surfaces and delivery.surface not in self.reply_surfaces:
            return False
        return not (delivery.surface == "work" and self.reply_item and self.reply_item not in delivery.keys)

    @property
    def reached_asker(self) -> bool:
        """True when some successful delivering call of the turn reached the asker (CO-31)."""
        return any(self.reaches_asker(d) for d in self.deliveries)


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
"""``async (arguments, context) -> result``; the result must be JSON-serialisable."""


@dataclass(frozen=True)
class Tool:
    """One tool on a surface (CO-23).

    Attributes:
        name: Unique on a surface.
        description: What the model reads.
        parameters: A JSON Schema object, in the subset :mod:`shared.tools._schema` checks.
        handler: Runs the call.
        writes: True when the call changes company state; such calls are fenced (FL-74).
        delivers_to: For built-ins, the surface a successful call delivers to (``work``,
            ``page``, ``file``), or None.
        origin: ``builtin`` or ``mcp:<server>``.
        annotations: CO-23's hints.
        ends_turn: True for ``submit_work``: a success ends the phase.
        timeout_seconds: The call's time limit, in seconds.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler = field(compare=False)
    writes: bool = False
    delivers_to: Literal["work", "page", "file"] | None = None
    origin: str = "builtin"
    annotations: ToolAnnotations = field(default_factory=ToolAnnotations)
    ends_turn: bool = False
    timeout_seconds: float = BUILTIN_TOOL_TIMEOUT_SECONDS

    @property
    def delivers(self) -> bool:
        """Whether a successful call counts as a delivery (CO-23, orig rule): a built-in
        registered as delivering, or a non-built-in not positively annotated read-only."""
        if self.origin == "builtin":
            return self.delivers_to is not None
        return self.annotations.read_only != "yes"

    @property
    def fenced(self) -> bool:
        """Whether the seat fence is checked before a call (FL-74): every write-capable tool,
        and every non-built-in not positively annotated read-only."""
        return self.writes or (self.origin != "builtin" and self.annotations.read_only != "yes")

    def spec(self) -> ToolSpec:
        """The definition the model sees."""
        return ToolSpec(self.name, self.description, self.parameters)


@dataclass(frozen=True)
class ToolOutcome:
    """One call's result (CO-16, section 10's ``tool_execution``).

    Attributes:
        name: The tool name the model used.
        tool: The tool, or None when the name named none.
        arguments: The arguments as the model sent them (parsed), or None when unparsable.
        result: The handler's result, or None for an error.
        is_error: True for an error result.
        error: The error text the model reads; None on success.
        error_code: ``unknown_tool``, ``invalid_arguments``, ``timeout``, or a
            :attr:`ToolError.code`; None on success.
        content: The text sent back to the model (JSON).
    """

    name: str
    tool: Tool | None
    arguments: dict[str, Any] | None
    result: Any
    is_error: bool
    error: str | None
    error_code: str | None
    content: str

    @property
    def delivered(self) -> bool:
        """True when the call succeeded on a delivering tool (CO-23)."""
        return not self.is_error and self.tool is not None and self.tool.delivers


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _failure(
    call: ToolCall, tool: Tool | None, code: str, message: str, field: str | None = None
) -> ToolOutcome:
    body: dict[str, Any] = {"error": message, "code": code}
    if field:
        body["field"] = field
    return ToolOutcome(call.name, tool, call.arguments, None, True, message, code, _dumps(body))


class ToolRegistry:
    """A tool surface: tools by name, in registration order (CO-23).

    Args:
        tools: The tools to register.

    Raises:
        ToolRegistryError: Two tools share a name.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Register ``tool``.

        Raises:
            ToolRegistryError: A tool with that name is already on the surface.
        """
        if tool.name in self._tools:
            raise ToolRegistryError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """Return the tool called ``name``, or None."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        """The tool names, in registration order."""
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """The definitions the model sees, in registration order."""
        return tuple(t.spec() for t in self._tools.values())

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolOutcome:
        """Run one call (CO-16 step 6).

        Args:
            call: The model's call.
            ctx: The turn's tool context.

        Returns:
            The outcome; an error result for an unknown tool, bad arguments, a
            :class:`ToolError` or an overrun of :attr:`Tool.timeout_seconds`.

        Raises:
            Exception: Whatever a handler raised outside the :class:`ToolError` tree (a defect).
        """
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools)
            return _failure(call, None, "unknown_tool", f"unknown tool {call.name!r}; the tools are: {known}")
        if call.arguments is None:
            raw = (call.raw_arguments or "")[:200]
            return _failure(call, tool, "invalid_arguments", f"arguments are not a JSON object: {raw!r}")
        problems = validate(call.arguments, tool.parameters)
        if problems:
            e = ToolArgumentsInvalid(problems)
            return _failure(call, tool, e.code, str(e), e.field)
        try:
            async with asyncio.timeout(tool.timeout_seconds):
                result = await tool.handler(dict(call.arguments), ctx)
        except ToolError as e:
            return _failure(call, tool, e.code, str(e), e.field)
        except TimeoutError:
            return _failure(
                call, tool, "timeout", f"{call.name} did not finish within {tool.timeout_seconds:g} s"
            )
        return ToolOutcome(call.name, tool, call.arguments, result, False, None, None, _dumps(result))
