"""The company document's outward connections (Tier B, section 6.1): the tracker's work item types,
the generic signed inbound webhooks (CO-9), the GitHub integration (CO-35) and the MCP servers
(CO-34).

Shape only, like every model of :mod:`shared.config._company` (which re-exports these): a
webhook's ``route_to`` or GitHub's ``route_unmatched_to`` naming a real seat, and unique sources
and server names, are the deep checks of :mod:`shared.config._org` and
:mod:`shared.config._company_validate`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._company_types import DEFAULT_DELIVERY_HEADER, KEY_PATTERN, SOURCE_PATTERN
from ._company_types import StrictModel as _Model

__all__ = ["GitHubIntegration", "Integrations", "McpServer", "Tracker", "TrackerType", "Webhook"]

_HEADER_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
_POINTER_PATTERN = r"^(/([^~]|~[01])*)*$"
_SERVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_TYPE_SLUG_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"


class TrackerType(_Model):
    """A work item type added to or renaming a built-in one (section 6.1)."""

    slug: str = Field(pattern=_TYPE_SLUG_PATTERN)
    name: str = Field(min_length=1)
    archived: bool = False


class Tracker(_Model):
    """The ``tracker`` block (section 6.1)."""

    types: list[TrackerType] = Field(default_factory=list)


class Webhook(_Model):
    """One generic signed inbound webhook, ``POST /webhooks/inbound/{source}`` (CO-9).

    Attributes:
        source: The route's last segment; unique among webhooks.
        secret: HMAC-SHA256 key, usually ``${VAR}``; empty (or unresolved) makes the route
            answer 503.
        route_to: A seat handle, or a unit id meaning its effective lead; must end on an
            agent seat.
        text_pointer: JSON Pointer to the message text in the body.
        delivery_header: Header carrying the delivery id that is claimed once.
        signature_header: Header carrying ``sha256=<hex>``.
    """

    source: str = Field(pattern=SOURCE_PATTERN)
    secret: str = ""
    route_to: str
    text_pointer: str = Field("/text", pattern=_POINTER_PATTERN)
    delivery_header: str = Field(DEFAULT_DELIVERY_HEADER, pattern=_HEADER_PATTERN)
    signature_header: str = Field("X-Hub-Signature-256", pattern=_HEADER_PATTERN)


class GitHubIntegration(_Model):
    """``integrations.github`` (CO-35): ``POST /webhooks/github``.

    Attributes:
        enabled: False keeps the block without serving ``/webhooks/github``.
        webhook_secret: Usually ``${VAR}``.
        route_unmatched_to: Seat handle or unit id for deliveries no seat matches; None skips them.
        project: The tracker project GitHub issues and pull requests are mirrored into (ours); None:
            the project of the unit holding the ``route_unmatched_to`` seat, else the first unit's.
    """

    enabled: bool = True
    webhook_secret: str = ""
    route_unmatched_to: str | None = None
    project: str | None = Field(default=None, pattern=KEY_PATTERN)


class Integrations(_Model):
    """The ``integrations`` block."""

    webhooks: list[Webhook] = Field(default_factory=list)
    github: GitHubIntegration | None = None


class McpServer(_Model):
    """One ``mcp_servers`` entry (CO-34; :mod:`shared.mcp` runs it).

    Attributes:
        transport: ``stdio`` needs ``command``; ``http`` needs ``url``.
        shared: True for one server per node; False for one per seat.
        startup_timeout_seconds: In seconds.
        request_timeout_seconds: In seconds.
    """

    name: str = Field(pattern=_SERVER_NAME_PATTERN)
    transport: Literal["stdio", "http"] = "stdio"
    shared: bool = False
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    tool_prefix: str | None = None
    tool_annotations: dict[str, dict[str, bool]] = Field(default_factory=dict)
    startup_timeout_seconds: float = Field(120, gt=0)
    request_timeout_seconds: float = Field(300, gt=0)
