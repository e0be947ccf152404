"""The size limits of issue 26: no module over 500 lines, no function over 80 lines.

Walks ``shared/``, ``services/`` and ``crewlet/`` (or any roots given) and reports every module
longer than :data:`MAX_MODULE_LINES` lines and every function or method longer than
:data:`MAX_FUNCTION_LINES` lines, counted from its ``def`` line (decorators excluded) to its last
line, everything nested inside it included. :data:`ALLOW` names the few exceptions, each with its
reason; only generated tables belong there.

Run it as a script for a report: ``python -m tests.support.layout`` (exit 1 when over).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALLOW", "MAX_FUNCTION_LINES", "MAX_MODULE_LINES", "ROOTS", "Oversize", "oversize"]

MAX_MODULE_LINES = 500
"""A module may have this many lines; one more is over."""
MAX_FUNCTION_LINES = 80
"""A function may span this many lines, nested functions and classes included; one more is over."""
ROOTS = ("shared", "services", "crewlet")
"""The packages the limits apply to, relative to the repository root."""

ALLOW: dict[str, str] = {}
"""Exceptions: ``path`` (a module) or ``path::qualname`` (a function) → why it may be longer.
Only generated tables belong here; keep it empty otherwise."""


@dataclass(frozen=True)
class Oversize:
    """One module or function over its limit.

    Attributes:
        key: ``path`` for a module, ``path::qualname`` for a function (the :data:`ALLOW` key).
        lines: Its length in lines.
        limit: The limit it is over.
    """

    key: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.key}: {self.lines} lines (limit {self.limit})"


def _functions(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def check_module(path: Path, key: str) -> list[Oversize]:
    """The limits one module breaks, as :class:`Oversize` records keyed under ``key``."""
    source = path.read_text(encoding="utf-8")
    out: list[Oversize] = []
    n = len(source.splitlines())
    if n > MAX_MODULE_LINES:
        out.append(Oversize(key, n, MAX_MODULE_LINES))
    for qualname, fn in _functions(ast.parse(source, filename=str(path))):
        span = (fn.end_lineno or fn.lineno) - fn.lineno + 1
        if span > MAX_FUNCTION_LINES:
            out.append(Oversize(f"{key}::{qualname}", span, MAX_FUNCTION_LINES))
    return out


def oversize(base: Path, roots: Iterable[str] = ROOTS, allow: dict[str, str] | None = None) -> list[Oversize]:
    """Every module and function under ``base/<root>`` over its limit, minus the allowed ones.

    Args:
        base: The directory the roots are in (the repository root).
        roots: The package directories to walk.
        allow: Exceptions by key; None for :data:`ALLOW`.

    Returns:
        The oversize modules and functions, sorted by key.
    """
    allowed = ALLOW if allow is None else allow
    found: list[Oversize] = []
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            key = path.relative_to(base).as_posix()
            found += [o for o in check_module(path, key) if o.key not in allowed]
    return sorted(found, key=lambda o: o.key)


if __name__ == "__main__":
    over = oversize(Path(__file__).resolve().parents[2])
    print("\n".join(map(str, over)) or "within the limits")
    sys.exit(1 if over else 0)
