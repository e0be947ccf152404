"""crewlet's shared core: config, coordination, broker, estate, objects, providers, telemetry.

Every role service (``services.*``) stands on this package; this package never imports a
service (an import-linter contract in ``pyproject.toml`` holds that). Seams are subpackages
with a short ``__init__`` naming their public API; the work happens in underscore modules.
"""
