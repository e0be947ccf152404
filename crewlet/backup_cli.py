"""``crewlet backup``: take a backup through a data node, restore its objects, prove it restores (ES-81..ES-84).

- ``crewlet backup --dir PATH [--url URL] [--token T]``: ``POST /backup?dir=PATH`` on the node at
  ``--url`` (``CREWLET_URL``, default ``http://127.0.0.1:8080``; token ``CREWLET_API_TOKEN``, grant
  ``fleet:operate``). ``PATH`` is a directory *on that node's host*, absent or empty. Prints what the
  manifest says. Exit 0 on success; 1 when the node cannot be reached or failed (5xx); 2 for a
  refusal (non-empty or relative directory, ...), the node's error printed.
- ``crewlet backup list``: the ``backups`` slot through ``GET /backups`` (one line per node).
- ``crewlet backup restore-objects --dir D --node F``: step 3 of the restore runbook (README.md,
  "Restore from a backup"). Talks to no crewlet node: it opens the object store the node file ``F``
  configures (``store.objects``: the NATS bucket through ``stream.url``, starting the node's embedded
  broker when ``stream.type: embedded`` — run it while that node is stopped — or the S3 bucket) and
  uploads every object the manifest names. Before anything is written it checks that every named
  object is in ``D/objects/`` with the manifest's size and SHA-256; one missing or mismatching refuses
  the whole restore (exit 1, naming each). Objects already in the store with the same digest are
  skipped. Exit 0 with the counts. A corrupt ``manifest.json`` (empty, not JSON, a field of the wrong
  type) is one line naming the file and the field, exit 1; a missing or invalid node file prints its
  errors one per line (as ``crewlet validate`` does), exit 2. Only warnings and errors are logged
  (the embedded broker's boot chatter is not printed).
- :func:`verify_command` (mounted by ``crewlet retention verify --restore --dir DIR [--cadence 30d]``,
  ES-83) and :func:`verify_restore`: talk to no node; see :func:`verify_restore`.

On a terminal, ``crewlet backup`` shows a running bar with the elapsed time while the node writes
(the route answers once, at the end) and ``restore-objects`` a bar of objects done out of named, on
stderr; piped or redirected output gets the plain lines only (issue 15).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer

from shared.estate.life._backup import (
    FORMAT,
    MANIFEST,
    ManifestInvalid,
    load_manifest,
)

from ._backup_verify import check_objects, find_newest, verify_restore, when

__all__ = ["DEFAULT_CADENCE", "app", "find_newest", "restore_objects", "verify_command", "verify_restore"]

app = typer.Typer(
    no_args_is_help=False,
    invoke_without_command=True,
    help="Take a backup on a data node (ES-81); restore-objects; list the announcements.",
)
Url = Annotated[str, typer.Option("--url", envvar="CREWLET_URL", help="A data node's base URL")]
Token = Annotated[str, typer.Option("--token", envvar="CREWLET_API_TOKEN", help="API token")]
DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_CADENCE = "30d"
"""ES-83: ``verify --restore`` fails on a newest backup older than this."""
BACKUP_TIMEOUT = 3600.0
"""Seconds ``crewlet backup`` waits for the node to answer (a large estate copies for a while)."""


def _fail(line: str, code: int = 2) -> NoReturn:
    if line:
        typer.echo(line, err=True)
    raise typer.Exit(code)


def _call(
    method: str, url: str, token: str, path: str, *, timeout: float = 30.0, **kw: Any
) -> httpx.Response:
    if not token:
        _fail("no API token: set CREWLET_API_TOKEN or pass --token")
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=timeout) as client:
            r = client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kw)
    except httpx.HTTPError as e:
        _fail(f"cannot reach {url}: {e}", 1)
    if r.status_code < 400:
        return r
    try:
        body = r.json()
        error, detail = body.get("error", ""), body.get("detail", "")
        if not isinstance(detail, str):
            detail = json.dumps(detail)
    except ValueError:
        error, detail = "", r.text
    _fail(f"{url} answered {r.status_code} {error}: {detail}", 1 if r.status_code >= 500 else 2)


@app.callback()
def backup(
    ctx: typer.Context,
    dir: Annotated[  # noqa: A002 - the spec's option name
        str | None, typer.Option("--dir", help="Absolute, empty directory on the node's host")
    ] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Ask one data node to write a backup into DIR on its own host (ES-81)."""
    if ctx.invoked_subcommand is not None:
        return
    if not dir:
        _fail("give --dir PATH: an absolute, empty directory on the node's host")
    from .knowledge_cli import progress_bar

    with progress_bar(f"backup of {url} into {dir}") as bar:  # the node answers once, when done
        bar.add_task("backup", total=None)
        r = _call("POST", url, token, "/backup", params={"dir": dir}, timeout=BACKUP_TIMEOUT)
    m = r.json()
    typer.echo(f"backup of {m['node']} written to {dir} at {when(m['taken_at'])} ({m['duration_seconds']} s)")
    for name, f in m["files"].items():
        typer.echo(f"  {name}: {f['size']} bytes, {f['tables']} tables, sha256 {f['sha256']}")
    typer.echo(f"  objects: {m['objects']['count']} ({m['objects']['bytes']} bytes)")
    for domain, p in m["positions"].items():
        typer.echo(f"  {domain}: {p['stream']} generation {p['generation']} seq {p['seq']}")
    typer.echo(f"  streams: {m['streams']['note']}")


@app.command("list")
def list_cmd(url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Print the ``backups`` slot: each node's newest announced backup (ES-82)."""
    rows = _call("GET", url, token, "/backups").json()["backups"]
    if not rows:
        typer.echo("no backup announced")
    for b in rows:
        pos = ", ".join(f"{d} {p['seq']}@{p['generation']}" for d, p in (b.get("positions") or {}).items())
        typer.echo(f"{b.get('node')}: {when(int(b.get('taken_at', 0)))} {b.get('dir')} [{pos}]")


# -- restore-objects -------------------------------------------------------------------------------


async def restore_objects(
    d: Path, node_file: Path, *, on_object: Callable[[int, int], None] | None = None
) -> dict[str, int]:
    """Upload every object the manifest in ``d`` names into the store ``node_file`` configures (ES-84).

    Args:
        d: A backup directory (holding ``manifest.json`` and ``objects/``).
        node_file: A node file (Tier A) whose ``store.objects`` and ``stream`` name the store.
        on_object: Called after each object with ``(objects done, objects named)`` (the progress bar).

    Returns:
        ``{"uploaded": n, "present": n}`` (objects already there with the same digest are skipped).

    Raises:
        ValueError: no manifest (debris), a corrupt one (:class:`ManifestInvalid`, naming the field),
            one of another ``format``, or an object named in the manifest is missing or differs in
            the artefact (the message names each); raised before anything is written.
        shared.config.ConfigInvalid: ``node_file`` is missing or invalid (``issues`` lists each error).
        shared.objects.ObjectsError / shared.broker.BrokerError: the store could not be reached.
    """
    from shared import broker, objects
    from shared.config import load_node_file

    manifest = load_manifest(d)
    if manifest is None:
        raise ValueError(f"{d} holds no {MANIFEST}: it is debris, not a backup")
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{d / MANIFEST}: field format is {manifest.get('format')!r}; this build reads format {FORMAT}"
        )
    problems = check_objects(d, manifest)
    if problems:
        raise ValueError("refused before anything was written:\n  " + "\n  ".join(problems))
    cfg, _warnings = load_node_file(str(node_file))
    link = await broker.open_broker(cfg) if cfg.store.objects.type == "nats" else None
    store = None
    counts = {"uploaded": 0, "present": 0}
    try:
        store = await objects.open_object_store(cfg, link)
        items = manifest["objects"]["items"]
        for done, o in enumerate(items, start=1):
            if on_object is not None and done > 1:
                on_object(done - 1, len(items))
            head = await store.head(o["key"])
            if head is not None and head.sha256 == o["sha256"] and head.size == o["size"]:
                counts["present"] += 1
                continue
            path = d / o["file"]

            async def pieces(p: Path = path) -> Any:
                with p.open("rb") as f:
                    while piece := f.read(1 << 20):
                        yield piece

            info = await store.put(o["key"], pieces())
            if info.sha256 and info.sha256 != o["sha256"]:
                raise ValueError(
                    f"object {o['key']} stored with sha256 {info.sha256}, expected {o['sha256']}"
                )
            counts["uploaded"] += 1
        if on_object is not None and items:
            on_object(len(items), len(items))
    finally:
        if store is not None:
            await store.close()
        if link is not None:
            await link.close()
    return counts


@app.command("restore-objects")
def restore_objects_cmd(
    dir: Annotated[Path, typer.Option("--dir", help="The backup directory (with manifest.json)")],  # noqa: A002
    node: Annotated[Path, typer.Option("--node", "--config", help="A node file naming the object store")],
) -> None:
    """Copy a backup's objects back into the configured object store (restore runbook, ES-84)."""
    from shared import logs, telemetry
    from shared.config import ConfigInvalid
    from shared.errors import CrewletError, ServiceError

    # no broker boot chatter on a command's output
    logs.configure(level="warn", fmt="console", processors=[telemetry.add_trace_context])
    if not dir.is_dir():
        _fail(f"{dir} is not a directory")
    from .knowledge_cli import progress_bar

    try:
        with progress_bar("restoring objects") as bar:
            task = bar.add_task("restoring objects", total=None)
            counts = asyncio.run(
                restore_objects(
                    dir, node, on_object=lambda n, total: bar.update(task, completed=n, total=total)
                )
            )
    except ManifestInvalid as e:
        _fail(str(e), 1)
    except ConfigInvalid as e:
        for issue in e.issues:
            typer.echo(issue.line(), err=True)
        _fail("" if e.issues else f"{node}: {e}")
    except ValueError as e:
        _fail(f"{dir}: {e}", 1)
    except ServiceError as e:
        _fail(f"the object store could not be reached: {e}", 1)
    except CrewletError as e:
        _fail(f"{type(e).__name__}: {e}", 1)
    typer.echo(
        f"objects restored from {dir}: {counts['uploaded']} uploaded, {counts['present']} already present"
    )


# -- verify --restore ------------------------------------------------------------------------------


def verify_command(
    restore: Annotated[
        bool, typer.Option("--restore", help="Restore the newest backup into scratch and check it")
    ] = False,
    dir: Annotated[  # noqa: A002 - the spec's option name
        Path, typer.Option("--dir", help="A backup directory or a directory of backups")
    ] = Path("."),
    cadence: Annotated[
        str, typer.Option("--cadence", help="Fail past this age (30d, 24h, 90s)")
    ] = DEFAULT_CADENCE,
) -> None:
    """Prove the newest backup under DIR restores; talks to no node (ES-83).

    Typer-ready: mount as ``retention_app.command("verify")(verify_command)``. Exits with
    :func:`verify_restore`'s code; 2 without ``--restore`` or for a malformed ``--cadence``.
    """
    from shared.config._retention import parse_duration

    if not restore:
        _fail("only `verify --restore` is offered: give --restore --dir DIR")
    try:
        seconds = parse_duration(cadence)
    except ValueError as e:
        _fail(f"--cadence: {e}")
    raise typer.Exit(verify_restore(dir, seconds))


if __name__ == "__main__":
    app()
