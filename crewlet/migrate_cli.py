"""``crewlet migrate [--check]``: bring a data node's store files to this build's schema without starting it (CO-28, FL-145).

A node's store directory (``store.dir``) holds two SQLite files: ``estate.db`` (the replicated
estate: tracker, knowledge base, file rows, ledger, FTS5 index; :mod:`shared.estate`) and
``node.db`` (the node's own events and turn records). A node creates and upgrades both when it
boots (``EstateStore.open``: ``create_all``, then :func:`shared.estate.upgrade` adds the columns and
indexes an older file lacks; the event log and the turn store create their tables). This command
runs the same steps on a stopped node's store:

- ``crewlet migrate [--node F | --data-dir D] [--json]`` applies every pending step and prints what
  it did (a missing file is created). A store a running node holds (its ``.lock``) is refused.
- ``--check`` changes nothing: it lists the pending steps (``<file>: create`` for a missing file,
  ``<file>: table T``, ``<file>: column T.C``, ``<file>: index I``) and exits 1 when there are any,
  0 when the store is current (CO-28 Check: a fresh store exits 1, a migrated one 0).

Pending steps are found by comparing the file with this build's schema built in memory (tables,
their columns, named indexes, the FTS5 tables). Nothing is ever dropped or rewritten.

The store: ``--node F`` (its ``store.dir``) or ``--data-dir D`` read as ``crewlet run --data-dir D``
reads it: the store is ``D/$CREWLET_NODE_ID`` (``node-0``), or the one node store below ``D``, or
``D`` itself when it holds the store files; default ``.crewlet/node-0``, where ``crewlet run`` keeps
it. A directory with no store yet is a fresh store and says so (a mistyped path shows up as "no
store here yet" with the path it would create, never silently elsewhere). A scratch store (a node
without ``data``: ``store.scratch: true`` in the node file, or the ``.scratch`` mark such a node
leaves) is refused naming ``store.scratch`` (FL-145). This command is local: it opens the node's
own files, never the broker.

Exit codes: 0 applied (or current with ``--check``); 1 pending steps with ``--check``, or a file
could not be opened or written (named); 2 usage: an invalid node file, a scratch store, a store in
use, conflicting options.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

__all__ = ["migrate", "pending_steps"]

EXIT_PENDING = 1
EXIT_USAGE = 2
SCRATCH_REFUSAL = (
    "store.scratch: true: a node without data keeps a scratch store, wiped at every boot, so it has no "
    "schema to migrate (FL-145); migrate a data node's store"
)


def _fail(line: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(line, err=True)
    raise typer.Exit(code)


def _reference(kind: str) -> sqlite3.Connection:
    """This build's schema of ``estate.db`` or ``node.db``, created in an in-memory database."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    raw = sqlite3.connect(":memory:", check_same_thread=False)
    engine = create_engine("sqlite://", creator=lambda: raw, poolclass=StaticPool)
    if kind == "estate":
        from shared.estate.domains import FTS_DDL
        from shared.estate.store import (
            EstateModel,
            upgrade,  # noqa: F401  (imports every table of the estate)
        )

        with engine.begin() as conn:
            EstateModel.metadata.create_all(conn)
            for ddl in FTS_DDL:
                conn.exec_driver_sql(ddl)
    else:
        from shared.estate._events import _NodeModel
        from shared.records._store import _SCHEMA

        with engine.begin() as conn:
            _NodeModel.metadata.create_all(conn)
        raw.executescript(_SCHEMA)
    return raw


def _shape(con: sqlite3.Connection) -> tuple[dict[str, list[str]], set[str]]:
    tables: dict[str, list[str]] = {}
    for (name,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ):
        tables[str(name)] = [str(r[1]) for r in con.execute(f'PRAGMA table_info("{name}")')]
    indexes = {
        str(r[0])
        for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        )
    }
    return tables, indexes


FILES = (("estate.db", "estate"), ("node.db", "node"))
"""The store's SQLite files and which schema each holds."""


def pending_steps(store_dir: Path) -> list[str]:
    """The steps ``crewlet migrate`` would apply to ``store_dir``, in order (empty: current).

    Returns:
        Lines ``<file>: create``, ``<file>: table T``, ``<file>: column T.C`` or ``<file>: index I``.

    Raises:
        sqlite3.Error: a file exists but does not open as SQLite (read-only).
    """
    steps: list[str] = []
    for name, kind in FILES:
        path = store_dir / name
        if not path.exists():
            steps.append(f"{name}: create")
            continue
        ref = _reference(kind)
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            want_tables, want_indexes = _shape(ref)
            have_tables, have_indexes = _shape(con)
        finally:
            con.close()
            ref.close()
        for table, cols in want_tables.items():
            if table not in have_tables:
                steps.append(f"{name}: table {table}")
                continue
            steps += [f"{name}: column {table}.{c}" for c in cols if c not in have_tables[table]]
        steps += [f"{name}: index {i}" for i in sorted(want_indexes - have_indexes)]
    return steps


def _resolve(node: Path | None, data_dir: Path | None) -> Path:
    """The store directory to migrate; exits 2 on a bad node file or a scratch store (FL-145)."""
    if node is not None and data_dir is not None:
        _fail("give --node FILE or --data-dir D, not both")
    if node is not None:
        from shared.config import ConfigInvalid, node_config_from_data, read_yaml_mapping

        try:
            data = read_yaml_mapping(str(node))
        except ConfigInvalid as e:
            _fail("\n".join(i.line() for i in e.issues))
        cfg, issues = node_config_from_data(data, file=str(node), check_files=False, strict_env=False)
        if cfg is None:
            _fail("\n".join(i.line() for i in issues if i.severity == "error"))
        if cfg.store.scratch or "data" not in cfg.roles:
            _fail(f"{node}: {SCRATCH_REFUSAL}")
        store = cfg.store_dir
    else:
        node_id = os.environ.get("CREWLET_NODE_ID", "node-0")
        store = (data_dir or Path(".crewlet")) / node_id  # where crewlet run --data-dir D keeps it
        if data_dir is not None and any(
            (data_dir / f).exists() for f in (*(f for f, _ in FILES), ".scratch")
        ):
            store = data_dir  # D is itself a store directory (a node file's store.dir)
        elif data_dir is not None and data_dir.is_dir():
            below = sorted(
                p for p in data_dir.iterdir() if p.is_dir() and any((p / f).exists() for f, _ in FILES)
            )
            if len(below) == 1:  # another node id than this environment's
                store = below[0]
            elif len(below) > 1:
                _fail(
                    f"--data-dir {data_dir} holds several node stores ({', '.join(map(str, below))}): name one"
                )
    if store.exists() and not store.is_dir():
        _fail(f"store.dir {store}: not a directory")
    if (store / ".scratch").exists():
        _fail(f"{store}: {SCRATCH_REFUSAL}")
    return store


def _lock(store: Path) -> Any:
    """Take the store's ``.lock`` exactly as a booting node does (:func:`crewlet._node_store.lock_store`);
    exits 2 naming the holder when a node runs there, 1 when the directory cannot be made."""
    from shared.errors import UsageError

    from ._node_store import StoreInUse, lock_store

    try:
        return lock_store(store)
    except StoreInUse as e:
        _fail(f"{e} (a running node migrates its store at boot)")
    except UsageError as e:
        _fail(str(e), 1)


async def _apply(store: Path) -> None:
    from shared.estate import EstateStore, EventLog
    from shared.records import TurnStore

    est = await EstateStore.open(store / "estate.db")  # create_all + upgrade + FTS, as at boot
    est.close()
    EventLog.open(store / "node.db", node_id="migrate").close()  # the events tables
    TurnStore(store / "node.db", node="migrate").close()  # the turns table and its indexes


def migrate(
    check: Annotated[
        bool, typer.Option("--check", help="List pending steps; exit 1 if any, change nothing")
    ] = False,
    node: Annotated[
        Path | None, typer.Option("--node", "--config", help="The node file (its store.dir)")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="As crewlet run --data-dir: the store is D/<node id>")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Apply the store's pending schema steps without starting the node; ``--check`` lists them (CO-28, FL-145)."""
    store = _resolve(node, data_dir)
    try:
        before = pending_steps(store)
    except sqlite3.Error as e:
        _fail(f"{store}: not a readable store: {e}", 1)
    if check:
        if as_json:
            typer.echo(json.dumps({"store": str(store), "pending": before}, indent=2))
        elif before:
            fresh = not any((store / f).exists() for f, _ in FILES)
            typer.echo(f"{store}: {'no store here yet; ' if fresh else ''}{len(before)} pending step(s):")
            for step in before:
                typer.echo(f"  {step}")
        else:
            typer.echo(f"{store}: current, nothing pending")
        raise typer.Exit(EXIT_PENDING if before else 0)
    handle = _lock(store)
    try:
        if before:
            asyncio.run(_apply(store))
        after = pending_steps(store)
    except Exception as e:  # noqa: BLE001 - a file that will not open is named, never a traceback
        _fail(f"{store}: migration failed: {type(e).__name__}: {e}", 1)
    finally:
        handle.close()
    if as_json:
        typer.echo(json.dumps({"store": str(store), "applied": before, "pending": after}, indent=2))
    elif before:
        typer.echo(f"{store}: applied {len(before)} step(s):")
        for step in before:
            typer.echo(f"  {step}")
    else:
        typer.echo(f"{store}: current, nothing to apply")
    if after:
        _fail(f"{store}: still pending after the migration: {', '.join(after)}", 1)
