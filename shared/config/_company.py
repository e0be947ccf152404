"""The company document (Tier B) as pydantic models (CO-1, company spec section 6).

These models are the *shape* of the document: every mapping forbids keys it does not define
(``extra="forbid"``), scalars are checked strictly (``"24"`` is not a number), and single-field
rules (handle and project-key grammar, time zones, cron lines, placement node pins) live on the
fields so the JSON Schema publishes them too (FL-58). Rules that tie several places of the
document together (references, duplicates, manager cycles, provider requirements) are the deep
checks in :mod:`shared.config._org` and :mod:`shared.config._company_validate`; build a
:class:`Company` through :func:`~shared.config.validate_company_data`, never by calling
``Company.model_validate`` yourself, or those checks are skipped.

The models carry the P0 and P1 keys of section 6 (P1 keys are accepted, shape-checked and inert
until their feature is built). P2 keys are not defined here, so they are refused as
``unknown_field``; the compatibility import (CO-43) drops them before validation.

The outward connections (tracker types, webhooks, GitHub, MCP servers) are
:mod:`shared.config._company_integrations`, re-exported here.

A model holds the document as written: a role without ``handle`` keeps ``handle=None`` and a
unit without ``id`` keeps ``id=None``; the derived values live on the org model
(:class:`~shared.config.OrgModel`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError

from ._company_integrations import GitHubIntegration, Integrations, McpServer, Tracker, TrackerType, Webhook
from ._company_learning import Learning
from ._company_types import (
    DEFAULT_DELIVERY_HEADER,
    HANDLE_PATTERN,
    KEY_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    NODE_ID_PATTERN,
    OFFLINE_MODEL,
    SOURCE_PATTERN,
    Cron,
    KeyOrKeys,
    PersonaText,
    ShownName,
    TimeZone,
    derive_slug,
    pick_llm,
)
from ._company_types import StrictModel as _Model

__all__ = [
    "DEFAULT_DELIVERY_HEADER",
    "HANDLE_PATTERN",
    "KEY_PATTERN",
    "LABEL_KEY_PATTERN",
    "NODE_ID_PATTERN",
    "OFFLINE_MODEL",
    "SOURCE_PATTERN",
    "Company",
    "CompanyRole",
    "Contact",
    "Cooldowns",
    "Embeddings",
    "GitHubIntegration",
    "Identities",
    "Integrations",
    "LlmPhases",
    "LlmProvider",
    "McpServer",
    "Placement",
    "Providers",
    "Schedule",
    "Scheduling",
    "TokenBudget",
    "Tracker",
    "TrackerType",
    "TurnEngine",
    "Unit",
    "UnitSchedule",
    "Webhook",
    "derive_slug",
]


class Cooldowns(_Model):
    """How long a benched credential rests (CO-42, FL-121).

    Attributes:
        rate_limit_seconds: Bench after a rate limit, in seconds, unless ``Retry-After`` says.
        auth_seconds: Bench after an auth failure, in seconds; doubles on repeats.
    """

    rate_limit_seconds: float = Field(3600, gt=0)
    auth_seconds: float = Field(300, gt=0)


class LlmProvider(_Model):
    """One entry of ``providers.llm`` (CO-3, section 6.2).

    Attributes:
        type: The wire protocol; ``offline`` is the deterministic rules provider (CO-15).
        model: The model id; required except for ``offline``, whose id is fixed
            (:data:`OFFLINE_MODEL`).
        base_url: The endpoint; None for the vendor default. Required for ``openai-compatible``.
        api_keys: Keys, usually ``${VAR}`` references; several rotate. Empty falls back to
            ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY`` for the vendor types.
        timeout_seconds: Per call, in seconds.
        max_output_tokens: Cap on one answer, in tokens.
        temperature: Sent only when set; None leaves the vendor default.
        cooldowns: Credential benching (P1).
        max_concurrent: Calls in flight at once per API key of this entry, in one node process
            (ours, 1..1 024; default 8); further calls wait their turn.
        script: ``offline`` only: the rules file, relative to the company file.
    """

    type: Literal["anthropic", "openai", "openai-compatible", "offline"]
    model: str | None = None
    base_url: str | None = None
    api_keys: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(120, gt=0)
    max_output_tokens: int = Field(4096, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    cooldowns: Cooldowns = Field(default_factory=Cooldowns)
    max_concurrent: int = Field(8, ge=1, le=1024)
    script: str | None = None


class Embeddings(_Model):
    """``providers.embeddings`` (AG-10): the model that embeds pages and queries for semantic search.

    Attributes:
        type: ``openai`` / ``openai-compatible`` (``POST {base_url}/embeddings`` over httpx) or
            ``local`` (a model shipped inside an installed package, run on the CPU: ``wordllama``).
        model: The embedding model id; ``local`` defaults to ``wordllama/l2_supercat_256``.
        api_key: Usually a ``${VAR}``; empty falls back to ``OPENAI_API_KEY``.
        base_url: The endpoint; None for the vendor default. Required for ``openai-compatible``.
        dimensions: The vector width, 64..4 096; None for the model's own (AG-10's table). An
            unknown model needs it.
        batch_size: Inputs per provider call (1..2 048; 128).
        timeout_seconds: Per call, in seconds (30).
        max_input_chars: An input longer than this is cut before it is sent (8 000).
    """

    type: Literal["openai", "openai-compatible", "local"]
    model: str | None = None
    api_key: str = ""
    base_url: str | None = None
    dimensions: int | None = Field(None, ge=1)
    batch_size: int = Field(128, ge=1, le=2048)
    timeout_seconds: float = Field(30, gt=0)
    max_input_chars: int = Field(8000, ge=64)


class Providers(_Model):
    """The ``providers`` block (CO-3).

    Attributes:
        llm: Named provider entries; a role's ``llm`` names keys of this map. At least one is
            required (checked by the validator, which words the error better than a schema can).
        embeddings: The embeddings provider (AG-10); None: no semantic search (AG-13 ``off``).
    """

    llm: dict[str, LlmProvider]
    embeddings: Embeddings | None = None


def _at_least_one(value: int) -> int:
    """A budget ceiling of at least 1 token; ``0`` is refused, not read as "unlimited" (CO-37)."""
    if value < 1:
        raise PydanticCustomError(
            "out_of_range",
            "must be at least 1 (got {value}); omit the key for no cap",
            {"value": value},
        )
    return value


BudgetCap = Annotated[int, AfterValidator(_at_least_one), Field(json_schema_extra={"minimum": 1})]
"""One ``token_budget`` ceiling, in tokens (CO-37)."""


class TokenBudget(_Model):
    """A token ceiling per window on the company clock (CO-37, P1). ``0`` is refused.

    Attributes:
        day: Tokens per local day; None for no cap.
        week: Tokens per ISO week; None for no cap.
        month: Tokens per calendar month; None for no cap.
    """

    day: BudgetCap | None = None
    week: BudgetCap | None = None
    month: BudgetCap | None = None


class Schedule(_Model):
    """A scheduled task on a role (CO-33, P1).

    Attributes:
        name: Unique within its role or unit.
        cron: Five fields, Vixie day semantics.
        task: The task text the seat receives.
        timezone: IANA zone; None for ``scheduling.default_timezone``, or the company
            ``timezone`` when that is unset too (see :meth:`Company.schedule_timezone`).
        enabled: False keeps the schedule without firing it.
        timeout_seconds: Wall-clock cap of the scheduled turn, in seconds.
        catchup: Fire the most recent missed slot after a restart.
    """

    name: str = Field(min_length=1)
    cron: Cron
    task: str = Field(min_length=1)
    timezone: TimeZone | None = None
    enabled: bool = True
    timeout_seconds: float = Field(180, gt=0)
    catchup: bool = True


class UnitSchedule(Schedule):
    """A scheduled task on a unit (CO-33, P1).

    Attributes:
        target: ``each`` direct agent role of the unit, or its effective ``lead``.
    """

    target: Literal["each", "lead"] = "each"


class LlmPhases(_Model):
    """Per-phase provider selection on a role (CO-30, P1): each value a key or a fallback chain."""

    default: KeyOrKeys | None = None
    review: KeyOrKeys | None = None
    auxiliary: KeyOrKeys | None = None
    judge: KeyOrKeys | None = None


RoleLlm = Annotated[
    Annotated[str, Tag("~key")] | Annotated[list[str], Tag("~keys")] | Annotated[LlmPhases, Tag("~phases")],
    Discriminator(
        pick_llm,
        custom_error_type="shape",
        custom_error_message="expected a provider key, a list of keys or a per-phase mapping",
    ),
]


class Identities(_Model):
    """Seat identities on outside systems (CO-35, P1, ours).

    Attributes:
        github_login: The seat's GitHub login, for offline routing; None when it has none.
    """

    github_login: str | None = None


class Contact(_Model):
    """How to reach a human seat (section 6.3; the upstream key set, used from P1 on)."""

    github_login: str | None = None
    email: str | None = None
    slack_user_id: str | None = None
    mattermost_user_id: str | None = None
    atlassian_account_id: str | None = None
    gitlab_username: str | None = None
    plane_user_id: str | None = None


class Placement(_Model):
    """Where an agent seat may run (fleet spec FL-57, FL-58; P1).

    Attributes:
        node: Pin to one node id, compared as written (``${VAR}`` is not resolved here, so it
            fails the node id grammar); None for any node.
        labels: Every key must be on the node with exactly this value. Keys follow the Tier A
            label grammar; a value with surrounding whitespace is refused, never trimmed.
    """

    node: str | None = Field(None, pattern=NODE_ID_PATTERN)
    labels: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": LABEL_KEY_PATTERN},
            "additionalProperties": {"type": "string", "pattern": LABEL_VALUE_PATTERN},
        },
    )


McpEnv = dict[str, dict[str, str]]
"""``mcp_env``: server name -> env vars (stdio) or headers (http) for that seat (CO-34)."""


class CompanyRole(_Model):
    """One ``roles:`` entry: an agent seat or a human (CO-2, section 6.3).

    Attributes:
        name: Display name (required).
        handle: The stable slug; None to derive it from ``name``.
        kind: ``agent`` (a seat with an inbox) or ``human`` (addressable only).
        goal, backstory, responsibilities, behavioral_guidelines: The persona, in every prompt of
            the seat: each text (each list entry) at most 8 000 characters (``PERSONA_LIMIT``).
        manages: Handles or unit ids this role manages (a unit expands to all its seats).
        llm: A provider key, a fallback chain, or (P1) a per-phase mapping; None for the
            company default.
        llm_review: P1 review-phase provider (CO-30).
        placement: Fleet placement; agent seats only.
        contact: Human seats' outside identities.
        learning_enabled: False opts this seat out of the reflect pass (AG-6 gate ``opted_out``);
            None follows ``learning.enabled``.
    """

    name: str = Field(min_length=1)
    handle: str | None = Field(None, pattern=HANDLE_PATTERN)
    kind: Literal["agent", "human"] = "agent"
    goal: PersonaText = ""
    backstory: PersonaText = ""
    responsibilities: list[PersonaText] = Field(default_factory=list)
    behavioral_guidelines: list[PersonaText] = Field(default_factory=list)
    manages: list[str] = Field(default_factory=list)
    email: str | None = None
    llm: RoleLlm | None = None
    llm_review: KeyOrKeys | None = None
    token_budget: TokenBudget | None = None
    mcp_env: McpEnv = Field(default_factory=dict)
    schedules: list[Schedule] = Field(default_factory=list)
    identities: Identities | None = None
    placement: Placement | None = None
    contact: Contact | None = None
    learning_enabled: bool | None = None


class Unit(_Model):
    """A node of the org tree (CO-2, section 6.3).

    Attributes:
        id: The unit's key; None to derive it from ``name``.
        name: Display name (required).
        type: A free label (``team``, ``department``, ...).
        lead: A seat handle; None to inherit the parent's effective lead.
        project: Tracker project key (``^[A-Z][A-Z0-9]{1,9}$``); None for no project.
        space: Knowledge space key (same grammar); None for no space.
        roles: Seats directly in this unit.
        children: Nested units.
    """

    id: str | None = Field(None, pattern=HANDLE_PATTERN)
    name: str = Field(min_length=1)
    type: str = "team"
    lead: str | None = None
    purpose: PersonaText = ""
    goals: list[PersonaText] = Field(default_factory=list)
    project: str | None = Field(None, pattern=KEY_PATTERN)
    space: str | None = Field(None, pattern=KEY_PATTERN)
    roles: list[CompanyRole] = Field(default_factory=list)
    children: list[Unit] = Field(default_factory=list)
    schedules: list[UnitSchedule] = Field(default_factory=list)
    mcp_env: McpEnv = Field(default_factory=dict)


class Scheduling(_Model):
    """The ``scheduling`` block (CO-33, P1). Durations in seconds.

    Attributes:
        enabled: False fires no schedule.
        tick_seconds: How often the scheduler duty looks for due fires.
        jitter_seconds: Spread of fires sharing a cron minute (not applied yet).
        catchup_min_seconds: Lower clamp of the catch-up window after a restart.
        catchup_max_seconds: Upper clamp of the catch-up window.
        default_timezone: IANA zone of every schedule that names none (the upstream key, CO-43);
            None for the company ``timezone``. ``Local``/``localtime`` are refused, as for the
            company clock: every node must read the same wall time.

    .. versionchanged:: 0.1
        ``default_timezone`` added.
    """

    enabled: bool = True
    tick_seconds: float = Field(10, gt=0)
    jitter_seconds: float = Field(0, ge=0)
    catchup_min_seconds: float = Field(120, ge=0)
    catchup_max_seconds: float = Field(7200, ge=0)
    default_timezone: TimeZone | None = None


class TurnEngine(_Model):
    """The ``turn_engine`` block (section 6.5); P2 keys are refused.

    Attributes:
        max_tool_rounds: Executor rounds per turn.
        delegation_depth_limit: Deliveries at or above this depth are refused (CO-11).
        max_iterations: Executor/review loops (P1).
    """

    max_tool_rounds: int = Field(24, ge=1)
    delegation_depth_limit: int = Field(3, ge=1)
    max_iterations: int = Field(3, ge=1)


class Company(_Model):
    """The company document, Tier B (CO-1, section 6.1).

    Attributes:
        name: Part of every agent id; settle it before the first run. No NUL or bidirectional
            control (issue 38).
        mission, vision, policies: Persona text, each at most
            :data:`~shared.config._company_types.PERSONA_LIMIT` characters (an entry of a list).
        timezone: The company clock, an IANA zone (``Local``/``localtime`` refused).
        policies: Full text in every executor prompt.
        providers: LLM providers (CO-3).
        roles: Root-level seats.
        units: The org tree.
        notification_coalesce_window_seconds: CO-38: seconds a seat's inbox keeps collecting after
            the first message of a drain (0: only what is already there), at most 60.
        notification_coalesce_max_batch: CO-38: at most this many deliveries per drain; each
            conversation in it is one turn.
    """

    name: ShownName
    mission: PersonaText = ""
    vision: PersonaText = ""
    timezone: TimeZone = "UTC"
    policies: list[PersonaText] = Field(default_factory=list)
    providers: Providers
    roles: list[CompanyRole] = Field(default_factory=list)
    units: list[Unit] = Field(default_factory=list)
    tracker: Tracker = Field(default_factory=Tracker)
    integrations: Integrations = Field(default_factory=Integrations)
    mcp_servers: list[McpServer] = Field(default_factory=list)
    token_budget: TokenBudget | None = None
    scheduling: Scheduling = Field(default_factory=Scheduling)
    turn_engine: TurnEngine = Field(default_factory=TurnEngine)
    learning: Learning = Field(default_factory=Learning)
    notification_coalesce_window_seconds: float = Field(0, ge=0, le=60)
    notification_coalesce_max_batch: int = Field(20, ge=1, le=100)

    def schedule_timezone(self, schedule: Schedule) -> str:
        """Return the IANA zone a schedule's cron line is read in (CO-33).

        The schedule's own ``timezone``, else ``scheduling.default_timezone``, else the company
        ``timezone`` (``UTC`` unless the document says otherwise). Every scheduler holder reads
        the same zone, so a fire's wall-clock label is the same fleet-wide.

        Args:
            schedule: A role or unit schedule of this company.

        Returns:
            The zone name, already validated as an IANA zone.

        .. versionadded:: 0.1
        """
        return schedule.timezone or self.scheduling.default_timezone or self.timezone
