"""``crewlet search eval --set FILE [--k 5] [--mode hybrid|lexical|semantic|all]`` (AG-14).

Loads a labelled set into a running company through its API (``POST /knowledge/pages``), waits
until the embedding duty has covered the set's pages (``vector_coverage`` of a hybrid answer; at
most ``--wait`` seconds), runs every query in each mode (``GET /knowledge/search?mode=``), prints
recall@k per mode and per tag, and exits 1 when a declared floor is not met. A query's recall is
the share of its relevant titles found in the first ``k`` hits.

Set file [ours]: ``{space?, pages: [{space?, title, body}], queries: [{q, relevant: [titles],
tags}], floors: {hybrid?, lexical?, semantic?}}``. Refused before anything is sent (exit 2): a
relevant title missing from the pages, a malformed file. Without vectors (the answer says
``semantic: off``) only ``lexical`` runs, the output says so, and a declared floor for a mode that
could not run counts as failed (exit 1). Assertions standing beside the floors: hybrid recall@k ≥
lexical's, and ≥ lexical + 0.10 on queries tagged ``paraphrase``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import yaml
from rich.console import Console

from ._node_api import Token, Url, call

__all__ = ["app", "evaluate", "load_set"]

app = typer.Typer(help="Search quality: recall of a labelled set (AG-14).", no_args_is_help=True)
_MODES = ("hybrid", "lexical", "semantic")
PARAPHRASE_MARGIN = 0.10
"""Hybrid beats lexical by at least this on ``paraphrase`` queries (AG-14)."""


class SetInvalid(ValueError):
    """The set file cannot be run; the message names the place."""


def load_set(path: Path) -> dict[str, Any]:
    """Read and check a set file.

    Raises:
        SetInvalid: unreadable, not the shape, or a relevant title that no page has.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise SetInvalid(f"{path}: {e}") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("pages"), list)
        or not isinstance(data.get("queries"), list)
    ):
        raise SetInvalid(f"{path}: a set has pages: [...] and queries: [...]")
    default = data.get("space")
    titles = set()
    for i, p in enumerate(data["pages"]):
        if (
            not isinstance(p, dict)
            or not isinstance(p.get("title"), str)
            or not isinstance(p.get("body"), str)
        ):
            raise SetInvalid(f"{path}: pages[{i}] needs title and body")
        p.setdefault("space", default)
        if not isinstance(p["space"], str):
            raise SetInvalid(f"{path}: pages[{i}] needs a space (or a top-level space)")
        titles.add(p["title"])
    for i, q in enumerate(data["queries"]):
        if (
            not isinstance(q, dict)
            or not isinstance(q.get("q"), str)
            or not isinstance(q.get("relevant"), list)
        ):
            raise SetInvalid(f"{path}: queries[{i}] needs q and relevant")
        missing = [t for t in q["relevant"] if t not in titles]
        if missing:
            raise SetInvalid(f"{path}: queries[{i}].relevant names {missing[0]!r}, which no page has")
    floors = data.get("floors") or {}
    if not isinstance(floors, dict) or any(m not in _MODES for m in floors):
        raise SetInvalid(f"{path}: floors names modes of {', '.join(_MODES)}")
    return data


def _search(client: httpx.Client, q: str, mode: str, k: int) -> dict[str, Any]:
    r = client.get("/knowledge/search", params={"q": q, "mode": mode, "limit": k}, timeout=60.0)
    r.raise_for_status()
    return dict(r.json())


def evaluate(
    client: httpx.Client, data: dict[str, Any], modes: list[str], k: int
) -> dict[str, dict[str, float]]:
    """Recall@k per mode: ``{mode: {"all": r, <tag>: r, ...}}`` (modes that could not run are absent)."""
    out: dict[str, dict[str, float]] = {}
    for mode in modes:
        per: dict[str, list[float]] = {"all": []}
        ran = True
        for q in data["queries"]:
            ans = _search(client, q["q"], mode, k)
            if mode != "lexical" and ans.get("mode_used") != mode:
                ran = False
                break
            got = {h.get("title") for h in ans.get("hits", [])[:k]}
            r = sum(1 for t in q["relevant"] if t in got) / len(q["relevant"])
            for tag in ["all", *(q.get("tags") or [])]:
                per.setdefault(str(tag), []).append(r)
        if ran:
            out[mode] = {t: round(sum(v) / len(v), 4) for t, v in per.items() if v}
    return out


def _wait_covered(client: httpx.Client, probe: str, wait: float) -> str:
    """Ask in hybrid until the answer says ``ok`` (vectors cover the scope) or ``off`` (none here)."""
    deadline = time.monotonic() + wait
    while True:
        semantic = str(_search(client, probe, "hybrid", 1).get("semantic") or "off")
        if semantic in ("ok", "off") or time.monotonic() > deadline:
            return semantic
        time.sleep(1.0)


@app.command("eval")
def eval_cmd(
    set_file: Annotated[Path, typer.Option("--set", help="The labelled set (YAML)")],
    k: Annotated[int, typer.Option("--k", min=1, max=20, help="Recall at this many hits")] = 5,
    mode: Annotated[str, typer.Option("--mode", help="hybrid | lexical | semantic | all")] = "all",
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for vectors")] = 180.0,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Load a labelled set, measure recall@k per mode and tag, exit 1 below a floor (AG-14)."""
    err = Console(stderr=True)
    try:
        data = load_set(set_file)
    except SetInvalid as e:
        err.print(f"refused: {e}", markup=False)
        raise typer.Exit(2) from None
    if mode not in (*_MODES, "all"):
        err.print("refused: --mode is one of hybrid, lexical, semantic, all", markup=False)
        raise typer.Exit(2)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        for p in data["pages"]:
            code, _ = call("POST", url, token, "/knowledge/pages", body={k2: p[k2] for k2 in ("space", "title", "body")},
                           timeout=60.0, out=err, client=client)  # fmt: skip
            if code != 0:
                raise typer.Exit(code)
        semantic = _wait_covered(client, data["queries"][0]["q"], wait)
        modes = list(_MODES) if mode == "all" else [mode]
        if semantic == "off":
            typer.echo("no vectors here (semantic: off): only lexical runs")
            modes = [m for m in modes if m == "lexical"]
        recall = evaluate(client, data, modes, k)
    failed = _report(recall, data.get("floors") or {}, k)
    raise typer.Exit(1 if failed else 0)


def _report(recall: dict[str, dict[str, float]], floors: dict[str, float], k: int) -> list[str]:
    for m, per in recall.items():
        typer.echo(f"{m}: recall@{k} " + "  ".join(f"{t}={v:.3f}" for t, v in sorted(per.items())))
    failed = []
    for m, floor in floors.items():
        got = recall.get(m, {}).get("all")
        if got is None:
            failed.append(f"{m}: could not run (floor {floor})")
        elif got < float(floor):
            failed.append(f"{m}: recall@{k} {got:.3f} below floor {floor}")
    hyb, lex = recall.get("hybrid"), recall.get("lexical")
    if hyb and lex:
        if hyb["all"] < lex["all"]:
            failed.append(f"hybrid {hyb['all']:.3f} below lexical {lex['all']:.3f}")
        if "paraphrase" in lex and hyb.get("paraphrase", 0.0) < lex["paraphrase"] + PARAPHRASE_MARGIN:
            failed.append(
                f"paraphrase: hybrid {hyb.get('paraphrase', 0):.3f} not lexical {lex['paraphrase']:.3f} + 0.10"
            )
    for f in failed:
        typer.echo(f"FAILED {f}")
    if not failed:
        typer.echo("ok: every floor met")
    return failed
