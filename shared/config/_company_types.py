"""Grammars, field validators and shared types of the company document (CO-1, CO-2, FL-58).

The patterns are used both by the validator and by the published JSON Schema, so the two agree.
"""

from __future__ import annotations

import re
import zoneinfo
from typing import Annotated, Any

from croniter import croniter
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError

from shared.text import hidden_character

__all__ = [
    "DEFAULT_DELIVERY_HEADER",
    "HANDLE_PATTERN",
    "KEY_PATTERN",
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "NODE_ID_PATTERN",
    "OFFLINE_MODEL",
    "PERSONA_LIMIT",
    "SOURCE_PATTERN",
    "Cron",
    "KeyOrKeys",
    "PersonaText",
    "ShownName",
    "StrictModel",
    "TimeZone",
    "derive_slug",
    "pick_llm",
]

HANDLE_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
"""Seat handles and unit ids (CO-2)."""
KEY_PATTERN = r"^[A-Z][A-Z0-9]{1,9}$"
"""Tracker project keys and knowledge space keys (section 6.3, ours)."""
NODE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""The node id grammar (FL-9); ``placement.node`` follows it as written (FL-58)."""
LABEL_KEY_PATTERN = r"^[^\s\x00-\x1f\x7f]{1,63}$"
"""Label keys for the JSON Schema (FL-13): no whitespace or control characters. The validator
also counts UTF-8 bytes (1 to 63), which a JSON Schema pattern cannot, so the schema is looser."""
LABEL_VALUE_PATTERN = r"^(\S([\s\S]*\S)?)?$"
"""Label values for the JSON Schema: no surrounding whitespace (FL-58)."""
SOURCE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""Webhook source names: one path segment of ``/webhooks/inbound/{source}`` (ours)."""
OFFLINE_MODEL = "crewlet-offline-1"
"""The fixed model id of the offline provider (CO-15)."""

_SLUG_RUN = re.compile(r"[^a-z0-9]+")


def derive_slug(name: str) -> str:
    """Derive a handle or unit id from a display name (CO-2).

    Lower-cases ``name``, turns every run of characters outside ``[a-z0-9]`` into one ``-`` and
    strips leading and trailing ``-``: ``"Support Triage"`` gives ``support-triage``.

    Args:
        name: The role's or unit's ``name``.

    Returns:
        The slug; it may be empty or break the handle grammar (the validator reports that).
    """
    return _SLUG_RUN.sub("-", name.lower()).strip("-")


def _check_timezone(value: str) -> str:
    # The company clock must be the same on every node, so the host's own zone is refused
    # (section 6.1): "Local"/"localtime" would mean a different clock per machine.
    if value in ("Local", "localtime"):
        raise PydanticCustomError(
            "invalid", "'{value}' is the host's zone; name an IANA zone such as UTC", {"value": value}
        )
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise PydanticCustomError(
            "unknown_value", "'{value}' is not an IANA time zone", {"value": value}
        ) from None
    return value


def _check_cron(value: str) -> str:
    fields = value.split()
    if len(fields) != 5 or not croniter.is_valid(value):
        raise PydanticCustomError("invalid", "'{value}' is not a 5-field cron line", {"value": value})
    return value


TimeZone = Annotated[str, AfterValidator(_check_timezone)]
Cron = Annotated[str, AfterValidator(_check_cron)]

PERSONA_LIMIT = 8000
"""Most characters of one persona text (a ``goal``, ``backstory``, ``mission``, ``purpose``, one
``responsibilities``/``behavioral_guidelines``/``goals``/``policies`` entry, ...): these ride every
prompt of the seats they describe (issue 38: a 3 MB goal validated and was sent on every turn).
``crewlet validate`` and the node apply the same models, so they refuse the same documents."""


def _check_persona(value: str) -> str:
    if len(value) > PERSONA_LIMIT:
        raise PydanticCustomError(
            "out_of_range",
            "is {size} characters; the limit is {limit} (persona text is sent with every prompt)",
            {"size": len(value), "limit": PERSONA_LIMIT},
        )
    return value


def _check_shown(value: str) -> str:
    why = hidden_character(value)
    if why is not None:
        raise PydanticCustomError("invalid", "{why}; write the name as it should read", {"why": why})
    return value


PersonaText = Annotated[
    str, AfterValidator(_check_persona), Field(json_schema_extra={"maxLength": PERSONA_LIMIT})
]
"""A persona text: at most :data:`PERSONA_LIMIT` characters."""
ShownName = Annotated[str, Field(min_length=1), AfterValidator(_check_shown)]
"""A name people read (the company's): no NUL, no bidirectional control (:func:`shared.text.hidden_character`)."""


def _pick_keys(value: Any) -> str | None:
    if isinstance(value, str):
        return "~key"
    if isinstance(value, list):
        return "~keys"
    return None


def pick_llm(value: Any) -> str | None:
    """Tag a role's ``llm`` value for its discriminated union (None: no branch fits): a mapping, or
    an already-built per-phase model (serialisation asks too), is ``~phases``."""
    if isinstance(value, dict) or hasattr(value, "review"):
        return "~phases"
    return _pick_keys(value)


# Union branches carry tags starting with "~"; the issue converter drops them from paths.
KeyOrKeys = Annotated[
    Annotated[str, Tag("~key")] | Annotated[list[str], Tag("~keys")],
    Discriminator(
        _pick_keys,
        custom_error_type="shape",
        custom_error_message="expected a provider key or a list of provider keys",
    ),
]


class StrictModel(BaseModel):
    """Base of every Tier B model: unknown keys refused, scalars checked strictly, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


DEFAULT_DELIVERY_HEADER = "X-Request-Id"
"""CO-9's default delivery id header for generic webhooks."""


EMBEDDING_WIDTHS: dict[str, int] = {
    "text-embedding-3-large": 3072,
    "text-embedding-3-small": 1536,
    "gemini-embedding-001": 3072,
    "embed-v4.0": 1536,
    "wordllama/l2_supercat_256": 256,
    "scripted-hash-256": 256,
}
"""An embedding model's own vector width (AG-10, upstream ``ModelWidths``); another model needs
``providers.embeddings.dimensions``."""

LOCAL_EMBEDDING_MODEL = "wordllama/l2_supercat_256"
"""``type: local``'s default and only family (AG-10): weights shipped inside the ``wordllama`` wheel."""

EMBEDDING_WIDTH_RANGE = (64, 4096)
"""The widths ``providers.embeddings.dimensions`` may name (AG-10)."""
