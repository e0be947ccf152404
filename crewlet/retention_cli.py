"""``crewlet retention``: the estate's life over time as a node reports it (ES-49, ES-59, ES-86).

- ``status [--json]``: reads the node's ``GET /estate``. When ``backup_floor`` blocks the trim, a
  sentence says so before any table (ES-49). Then per log the four capacity figures read from the
  stream (``bytes``, ``max_bytes`` — ``unlimited`` when the stream has none —, ``reserve_bytes``,
  ``headroom_fraction``) with the trim floor and ``blocked_by``; per log and data node ``SEQ``,
  ``applied_through``, ``GEN`` (``left gen N`` for a left generation), ``TRIM FLOOR``, ``FIRST``,
  ``LIVE``, ``LOG DIVERGED``, ``blocked_by``; each node's store and WAL size, the snapshot volume
  it needs (×4.2 the store, ES-59) and the rejoin window. Every active alarm of the node and every
  blocked trim is printed on stderr with its measurement and remedy.
- ``snapshots [--json]``: each node's snapshot artefact per log (its position, age, sha256) and
  the reason it declined to take one (ES-54).

Both talk to a node: ``--url`` (``CREWLET_URL``, default ``http://127.0.0.1:8080``) with ``--token``
(``CREWLET_API_TOKEN``; grant ``state:read``).

Exit codes: 0 all clear; 1 (``status`` only) while any alarm is active on the node or a log's trim
is blocked (``trim_blocked``); 2 when the node cannot be reached, refuses the token (401/403),
answers an error, or no token is set.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

__all__ = ["app", "fetch_estate", "human_bytes", "problems"]

app = typer.Typer(no_args_is_help=True, help="Trim, snapshots and storage of the estate (ES-86).")

Url = Annotated[str, typer.Option("--url", envvar="CREWLET_URL", help="A node's base URL")]
Token = Annotated[str, typer.Option("--token", envvar="CREWLET_API_TOKEN", help="API token")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the raw GET /estate answer")]
DEFAULT_URL = "http://127.0.0.1:8080"
SNAPSHOT_VOLUME_FACTOR = 4.2
"""ES-59: the snapshot volume needs ×4.2 the estate size (live + WAL + snapshot + backup + rotation)."""


@app.callback()
def _group() -> None:
    """Trim, snapshots and storage of the estate (ES-86)."""


def _fail(line: str, code: int = 2) -> NoReturn:
    typer.echo(line, err=True)
    raise typer.Exit(code)


def fetch_estate(url: str, token: str) -> dict[str, Any]:
    """Return the node's ``GET /estate`` answer.

    Raises:
        typer.Exit: code 2 with a line on stderr when no token is set, the node cannot be
            reached, refuses the token (401/403) or answers anything but 200.
    """
    if not token:
        _fail("no API token: set CREWLET_API_TOKEN or pass --token")
    base = url.rstrip("/")
    try:
        with httpx.Client(timeout=15.0) as client:
            r = client.get(base + "/estate", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as e:
        _fail(f"cannot reach the node at {base}: {type(e).__name__}: {e}")
    if r.status_code == 200:
        body = r.json()
        if not isinstance(body, dict):
            _fail(f"{base}/estate answered something that is not a JSON object")
        return body
    try:
        err = r.json()
        error, detail = str(err.get("error", "")), err.get("detail", "")
        if not isinstance(detail, str):
            detail = json.dumps(detail)
    except (ValueError, AttributeError):
        error, detail = "", r.text
    if r.status_code == 401:
        _fail(f"{base} refused the token (401 {error}: {detail}); set CREWLET_API_TOKEN or pass --token")
    if r.status_code == 403:
        _fail(f"{base} refused the token (403 {error}: {detail}); GET /estate needs the state:read grant")
    _fail(f"{base}/estate answered {r.status_code} {error}: {detail}")


def human_bytes(n: Any) -> str:
    """``12.3 MiB``-style size; ``-`` for a missing value, ``unlimited`` for a negative ceiling."""
    if not isinstance(n, int | float):
        return "-"
    if n < 0:
        return "unlimited"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    s = float(seconds)
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size:
            return f"{s / size:.1f}{unit}".replace(".0", "")
    return f"{s:.0f}s"


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def _blocked(view: dict[str, Any]) -> dict[str, list[str]]:
    """Domain → the terms blocking its trim (only blocked domains)."""
    out: dict[str, list[str]] = {}
    for domain, floor in (view.get("floors") or {}).items():
        if isinstance(floor, dict) and floor.get("blocked_by"):
            out[domain] = [str(t) for t in floor["blocked_by"]]
    return out


def problems(view: dict[str, Any]) -> list[str]:
    """The lines ``status`` prints on stderr: each active alarm, then each blocked trim (ES-86).

    Returns:
        One line per alarm (``alarm KIND: measurement; remedy: ...``) and per blocked log
        (``trim_blocked on DOMAIN: blocked_by TERMS ...``); empty when all is clear.
    """
    lines: list[str] = []
    detail = view.get("alarm_detail") or {}
    for kind in view.get("alarms") or []:
        d = detail.get(kind) or {}
        m = d.get("measurement") or {}
        measured = ", ".join(f"{k}={v}" for k, v in m.items()) or "no measurement"
        lines.append(f"alarm {kind}: {measured}; remedy: {d.get('remedy') or 'see the node log'}")
    asked = view.get("asked")
    for domain, nodes in sorted((view.get("evicted") or {}).items()):
        if asked in nodes:  # this node's own copy is out of service until readmitted (ES-40, ES-51)
            lines.append(
                f"evicted: {asked} stands evicted on {domain}, so its copy serves nothing; remedy: "
                f"`crewlet retention readmit {asked} --confirm {asked}` through another data node"
            )
    owner = (view.get("retention") or {}).get("backup_owner") or ""
    for domain, terms in sorted(_blocked(view).items()):
        floor = view["floors"][domain]
        values = floor.get("terms") or {}
        shown = ", ".join(f"{t}={values.get(t, '?')}" for t in terms)
        remedy = "clear the blocking term"
        if "backup_floor" in terms:
            remedy = "take a backup with `crewlet backup`" + (
                f" (backups are kept by {owner})" if owner else ""
            )
        lines.append(
            f"trim_blocked on {domain}: blocked_by {', '.join(terms)} ({shown}); "
            f"floor stays {floor.get('floor', '-')}; remedy: {remedy}"
        )
    return lines


def _backup_sentence(view: dict[str, Any]) -> str | None:
    """ES-49's sentence when ``backup_floor`` blocks a trim, else None.

    The floor record is the trim's last tick: when the newest verified backup announced since is
    younger than ``retention.backup_max_age``, the sentence says the trim was blocked at that tick and
    the next one (every ``retention.trim_tick``) will use the backup, not that none is recent enough.
    """
    domains = [d for d, terms in sorted(_blocked(view).items()) if "backup_floor" in terms]
    if not domains:
        return None
    ret = view.get("retention") or {}
    backups = [b for b in view.get("backups") or [] if isinstance(b, dict) and b.get("verified")]
    newest = max((b["taken_at"] for b in backups if isinstance(b.get("taken_at"), int | float)), default=0)
    age = (time.time() * 1e6 - newest) / 1e6 if newest else None
    max_age = ret.get("backup_max_age")
    if age is not None and isinstance(max_age, int | float) and age <= max_age:
        return (
            f"The trim of {' and '.join(domains)} was blocked by backup_floor at its last tick; a verified "
            f"backup {_duration(max(0.0, age))} old now exists (retention.backup_max_age {_duration(max_age)}), "
            f"so the next tick (every {_duration(ret.get('trim_tick'))}) will use it."
        )
    if age is not None:
        newest_txt = f"the newest verified backup is {_duration(age)} old"
    else:
        newest_txt = "no verified backup has been announced"
    owner = ret.get("backup_owner") or ""
    return (
        f"No backup recent enough: {newest_txt} (retention.backup_max_age "
        f"{_duration(max_age)}), so backup_floor blocks the trim of "
        f"{' and '.join(domains)}. Take one with `crewlet backup`"
        + (f" (backups are kept by {owner})." if owner else ".")
    )


def _gen(row: dict[str, Any], current: int | None) -> str:
    g = row.get("generation")
    if isinstance(g, int) and isinstance(current, int) and g < current:
        return f"left gen {g}"
    return _cell(g)


def _print_status(view: dict[str, Any], out: Console) -> None:
    """Print ``retention status``: the backup line, evictions, placement, then the logs, each
    domain's copies and the storage tables, and the rejoin window (ES-47..ES-59)."""
    sentence = _backup_sentence(view)
    if sentence:
        out.print(sentence, markup=False, highlight=False)
    for domain, nodes in sorted((view.get("evicted") or {}).items()):
        out.print(
            f"evicted on {domain}: {', '.join(sorted(nodes))} (not counted by the trim; "
            "`crewlet retention readmit NODE --confirm NODE` counts one again)",
            markup=False,
            highlight=False,
        )
    floors = view.get("floors") or {}
    logs = view.get("logs") or {}
    out.print(
        f"estate placement: {view.get('placement', '?')} (layout {view.get('layout', '?')}), "
        f"asked {view.get('asked', '?')}",
        markup=False,
        highlight=False,
    )
    _print_logs(out, logs, floors)
    rows = [r for r in view.get("nodes") or [] if isinstance(r, dict)]
    for domain in sorted({str(r.get("domain")) for r in rows}):
        _print_copies(out, domain, rows, logs, floors)
    ret = view.get("retention") or {}
    _print_storage(out, rows)
    out.print(
        f"rejoin window: {_duration(ret.get('rejoin_window'))} (stream.tracker_retention.rejoin_window: "
        "the budget for a node to become a full copy, ES-59)",
        markup=False,
        highlight=False,
    )
    if view.get("unreadable"):
        out.print(f"unreadable: {', '.join(view['unreadable'])}", markup=False, highlight=False)


def _print_logs(out: Console, logs: dict[str, Any], floors: dict[str, Any]) -> None:
    """The ``logs`` table: each domain's stream, its size against its caps, and its trim floor."""
    cap = Table(title="logs")
    for col in (
        "DOMAIN",
        "STREAM",
        "bytes",
        "max_bytes",
        "reserve_bytes",
        "headroom_fraction",
        "FIRST",
        "LAST",
        "TRIM FLOOR",
        "trim_to",
        "blocked_by",
    ):
        cap.add_column(col)
    for domain in sorted(set(logs) | set(floors)):
        lg = logs.get(domain) or {}
        fl = floors.get(domain) if isinstance(floors.get(domain), dict) else None
        headroom = lg.get("headroom_fraction")
        cap.add_row(
            domain,
            _cell(lg.get("stream")),
            human_bytes(lg.get("bytes")),
            human_bytes(lg.get("max_bytes")),
            human_bytes(lg.get("reserve_bytes")) if lg.get("reserve_bytes") is not None else "-",
            f"{headroom:.3f}" if isinstance(headroom, int | float) else "-",
            _cell(lg.get("first_seq")),
            _cell(lg.get("last_seq")),
            _cell(fl.get("floor")) if fl else "-",
            _cell(fl.get("trim_to")) if fl else "-",
            ", ".join(fl.get("blocked_by") or []) or "-" if fl else "-",
        )
    out.print(cap)


def _print_copies(
    out: Console, domain: str, rows: list[dict[str, Any]], logs: dict[str, Any], floors: dict[str, Any]
) -> None:
    """The ``<domain> copies`` table: each node's copy of the domain, its generation and liveness."""
    fl = floors.get(domain) if isinstance(floors.get(domain), dict) else None
    gens = [
        r["generation"] for r in rows if r.get("domain") == domain and isinstance(r.get("generation"), int)
    ]
    current = max(
        [*gens, *([fl["generation"]] if fl and isinstance(fl.get("generation"), int) else [])],
        default=None,
    )
    t = Table(title=f"{domain} copies")
    for col in (
        "NODE",
        "SEQ",
        "applied_through",
        "GEN",
        "TRIM FLOOR",
        "FIRST",
        "LIVE",
        "LOG DIVERGED",
        "blocked_by",
    ):
        t.add_column(col)
    for r in rows:
        if r.get("domain") != domain:
            continue
        first = r.get("log_first")
        if first is None:
            first = (logs.get(domain) or {}).get("first_seq")
        live = r.get("live")
        t.add_row(
            _cell(r.get("node")),
            _cell(r.get("seq")),
            _cell(r.get("applied_through")),
            _gen(r, current),
            _cell(fl.get("floor")) if fl else "-",
            _cell(first),
            ("yes" if live else "no") if live is not None else "?",
            ("yes" if r.get("log_diverged") else "no") if r.get("log_diverged") is not None else "-",
            ", ".join(fl.get("blocked_by") or []) or "-" if fl else "-",
        )
    out.print(t)


def _print_storage(out: Console, rows: list[dict[str, Any]]) -> None:
    """The ``storage`` table: one line per node (its newest row): store, WAL, snapshot volume, age."""
    st = Table(title="storage")
    for col in ("NODE", "store", "WAL", f"snapshot volume (x{SNAPSHOT_VOLUME_FACTOR})", "report age"):
        st.add_column(col)
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:  # one line per node: its newest row
        node = str(r.get("node"))
        if node not in seen or (r.get("at") or 0) > (seen[node].get("at") or 0):
            seen[node] = r
    for node, r in sorted(seen.items()):
        store = r.get("store_bytes")
        st.add_row(
            node,
            human_bytes(store),
            human_bytes(r.get("wal_bytes")),
            human_bytes(int(store * SNAPSHOT_VOLUME_FACTOR)) if isinstance(store, int) else "-",
            _duration(r.get("age_seconds")) + (" (stale)" if r.get("stale") else ""),
        )
    out.print(st)


@app.command("status")
def status_cmd(url: Url = DEFAULT_URL, token: Token = "", as_json: AsJson = False) -> None:
    """Print the trim floors, each log's capacity, every copy's position and storage (ES-86).

    Exits 1 while any alarm is active on the node or a trim is blocked (each printed on stderr
    with its measurement and remedy), 2 when the node cannot be asked.
    """
    view = fetch_estate(url, token)
    if as_json:
        typer.echo(json.dumps(view, indent=2))
    else:
        _print_status(view, Console(width=160))
    lines = problems(view)
    for line in lines:
        typer.echo(line, err=True)
    if lines:
        raise typer.Exit(1)


@app.command("snapshots")
def snapshots_cmd(url: Url = DEFAULT_URL, token: Token = "", as_json: AsJson = False) -> None:
    """List each node's snapshot artefact per log, its age and the reason it skipped (ES-54)."""
    view = fetch_estate(url, token)
    rows = [r for r in view.get("nodes") or [] if isinstance(r, dict)]
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {k: r.get(k) for k in ("node", "domain", "snapshot", "snapshot_skip", "seq", "stale")}
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    t = Table(title="snapshots")
    for col in ("NODE", "DOMAIN", "SNAPSHOT SEQ", "TAKEN", "AGE", "SIZE", "SHA256", "SKIP"):
        t.add_column(col)
    for r in sorted(rows, key=lambda x: (str(x.get("node")), str(x.get("domain")))):
        snap = r.get("snapshot") if isinstance(r.get("snapshot"), dict) else None
        taken = snap.get("taken_at") if snap else None
        t.add_row(
            _cell(r.get("node")),
            _cell(r.get("domain")),
            _cell(snap.get("seq")) if snap else "none",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(taken / 1e6)) + "Z"
            if isinstance(taken, int)
            else "-",
            _duration(snap.get("age_seconds")) if snap else "-",
            human_bytes(snap.get("bytes")) if snap else "-",
            str(snap.get("sha256") or "-")[:16] if snap else "-",
            r.get("snapshot_skip") or ("-" if r.get("snapshot_skip") is not None else "not reported"),
        )
    Console(width=160).print(t)


if __name__ == "__main__":
    app()
