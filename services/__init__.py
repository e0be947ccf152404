"""Role services. Each of ``data``, ``ingress``, ``seats``, ``workers`` is a package exposing
``service(ctx) -> RoleService``; they never import each other (an import-linter contract)."""
