"""The ``seats`` role service: ``service(ctx)`` builds its router and lifespan work."""

from .app import service

__all__ = ["service"]
