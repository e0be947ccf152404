"""FL-86 / ES-78: the fleet-wide consumer group table holds against the code, both ways.

The code is read, not run: every ``attach_group(js, NAME, ...)`` call in ``shared/``, ``services/``
and ``crewlet/`` must name a declared group, every declared group must be attached somewhere, and
no other module may create or bind a durable consumer or a queue subscription except the per-seat
mailboxes, the per-node appliers and the object store's ephemeral readers (none of which is a
group any node may join).
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import importlib
from pathlib import Path

import structlog

from shared.bus import CUSTODY_GROUP, CUSTODY_STREAM, GROUPS, REFLECT_GROUP, STREAMS, attach_group, may_join

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("shared", "services", "crewlet")
CONSUMER_CALLS = {"add_consumer", "pull_subscribe", "pull_subscribe_bind"}
NOT_GROUPS = {
    "shared/bus/_groups.py": "attach_group itself",
    "shared/bus/_bus.py": "a seat's mailbox: one lease holder at a time (FL-79)",
    "shared/bus/_delivery.py": "the create-with-retry helper (add_consumer); its callers are scanned by name",
    "shared/estate/log/_applier.py": "one data node's own applier durable (ES-10)",
    "shared/objects/_nats.py": "an ephemeral reader of one object, R1, reaped when idle",
    "shared/memory/_cache.py": "a satellite's ephemeral replay of one seat's memory (AG-7)",
}


def _parse(source: str, rel: str) -> ast.Module:
    """``ast.parse``, once more on a fresh thread when CPython 3.11.7 trips on its own AST
    recursion bookkeeping ("AST constructor recursion depth mismatch", fixed in 3.11.8; CI saw it
    once on an unchanged file): the count starts from the calling thread's state."""
    try:
        return ast.parse(source, filename=rel)
    except SystemError:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(ast.parse, source, filename=rel).result()


def _sources() -> list[tuple[str, ast.Module]]:
    out = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            out.append((rel, _parse(path.read_text(), rel)))
    return out


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _resolve(rel: str, arg: ast.expr) -> str:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name):
        module = importlib.import_module(rel.removesuffix(".py").replace("/", "."))
        return str(getattr(module, arg.id))
    raise AssertionError(f"{rel}: attach_group's group must be a name or a string, not {ast.dump(arg)}")


def _attached() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) == "attach_group":
                assert len(node.args) >= 2, f"{rel}:{node.lineno}: attach_group(js, group, ...)"
                found.setdefault(_resolve(rel, node.args[1]), []).append(f"{rel}:{node.lineno}")
    return found


def test_every_attached_group_is_declared() -> None:
    """Code → table: a group joined anywhere is in GROUPS."""
    attached = _attached()
    assert attached, "nothing attaches a fleet-wide group: the scan is broken"
    undeclared = {g: where for g, where in attached.items() if g not in GROUPS}
    assert not undeclared, f"groups attached but not declared in shared/bus/_groups.py: {undeclared}"


def test_every_declared_group_is_attached() -> None:
    """Table → code: a declared group that nothing joins is a stale row."""
    attached = _attached()
    assert sorted(g for g in GROUPS if g not in attached) == []


def test_no_group_is_joined_around_the_table() -> None:
    """Code → table: durables and queue subscriptions live only where they are not fleet-wide groups."""
    stray = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            queued = name == "subscribe" and any(k.arg == "queue" for k in node.keywords)
            if (name in CONSUMER_CALLS or queued) and rel not in NOT_GROUPS:
                stray.append(f"{rel}:{node.lineno} {name}")
    assert stray == [], f"consumers outside the FL-86 table (declare them, join via attach_group): {stray}"


def test_the_table_rows() -> None:
    """FL-86 accept: custody needs data; its stream is a bus stream."""
    group = GROUPS[CUSTODY_GROUP]
    assert group.needs_data is True
    assert group.stream == CUSTODY_STREAM
    spec = {s.name: s for s in STREAMS}[CUSTODY_STREAM]
    assert spec.retention == "workqueue" and group.subject in spec.subjects
    assert "." not in group.name


def test_may_join() -> None:
    """A stateless node never joins custody; an undeclared group is joined nowhere, by name."""
    with structlog.testing.capture_logs() as logs:
        assert may_join(CUSTODY_GROUP, has_data=True) is True
        assert may_join(CUSTODY_GROUP, has_data=False) is False
        assert may_join(REFLECT_GROUP, has_data=False) is True  # AG-6: every node joins reflect
        assert may_join("crewlet-undeclared", has_data=True) is False
        assert may_join("crewlet-undeclared", has_data=False) is False
    undeclared = [e for e in logs if e["event"] == "fleet_group_undeclared"]
    assert [e["group"] for e in undeclared] == ["crewlet-undeclared", "crewlet-undeclared"]
    assert [e["group"] for e in logs if e["event"] == "fleet_group_not_joined"] == [CUSTODY_GROUP]


class _Untouchable:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the broker was asked ({name}) for a group this node may not join")


def test_attach_refused_without_asking_the_broker() -> None:
    """FL-86 accept: a stateless node never attaches the custody group (nothing is created or bound)."""

    async def go() -> None:
        assert await attach_group(_Untouchable(), CUSTODY_GROUP, has_data=False) is None  # type: ignore[arg-type]
        assert await attach_group(_Untouchable(), "crewlet-undeclared", has_data=True) is None  # type: ignore[arg-type]

    asyncio.run(go())
