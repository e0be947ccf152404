"""The ``data`` role (FL-15)."""

from __future__ import annotations

from shared.runtime import NodeContext, RoleService

__all__ = ["service"]


def service(ctx: NodeContext) -> RoleService:
    """Build the data role for ``ctx``."""
    return RoleService(name="data")
