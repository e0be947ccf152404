"""``python -m chaos [--rounds N] [--seed S] [--minutes M] [--out FILE] [--only-round K] [--faults a,b]
[--node-env KEY=VALUE]... [--keep] [--quiet-timeout S] [--fail-fast] [--satellites N]``: the seeded fault run
(``make chaos ARGS=...``).

Prints each round's invariant table, then ``rounds R, faults F, violations V``; writes the JSON
document to ``--out`` (default ``chaos/results/seed-<S>.json``).

Exit codes: 0 no violation; 1 at least one violation (each printed with the seed, the round and the
command that reruns that round alone), or the fleet could not be booted; 2 a usage error (the
option is named).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ._nemesis import faketime_library
from ._runner import Options, run
from ._schedule import FAULTS

RESULTS = Path(__file__).resolve().parent / "results"

app = typer.Typer(
    add_completion=False,
    help="A seeded, rerunnable fault run against a real fleet: three nodes with every role, plus satellites.",
)


def _usage(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[red]usage:[/red] {message}")
    return typer.Exit(2)


MAX_SATELLITES = 3
"""The most satellites a run boots (each is a node process; a 2-core machine runs four nodes and
three brokers already)."""


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM (or SIGINT) reads as Ctrl-C once: the run's ``finally`` stops every process it
    started, and a second signal (``timeout`` signals the child and then its process group) must
    not cut that cleanup short, so both are ignored from here on."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


@app.command()
def main(
    rounds: Annotated[int, typer.Option(help="Rounds to run (each: load, faults, heal, quiet, checks).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the schedule and the workload's choices.")] = 1,
    minutes: Annotated[
        float, typer.Option(help="Start no new round after this many minutes (0: no limit).")
    ] = 0.0,
    out: Annotated[
        Path | None, typer.Option(help="The JSON file (default chaos/results/seed-<S>.json).")
    ] = None,
    only_round: Annotated[
        int | None, typer.Option(help="Run only this round (from 1) of the seed's schedule.")
    ] = None,
    faults: Annotated[
        str | None, typer.Option(help=f"Comma-separated faults to choose from: {','.join(FAULTS)}.")
    ] = None,
    node_env: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE added to every node's environment (repeatable).")
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the scratch directory (logs, stores).")] = False,
    quiet_timeout: Annotated[
        float, typer.Option(help="Seconds each quiet-phase wait may take (the final check: twice).")
    ] = 60.0,
    fail_fast: Annotated[bool, typer.Option(help="Stop after the first round with a violation.")] = False,
    satellites: Annotated[
        int,
        typer.Option(
            help="Seats-only satellite nodes (FL-144: no data, no ingress) beside the three; "
            "node faults may pick one, the workload never sends to one (0: none)."
        ),
    ] = 1,
) -> None:
    """Run the rounds; exit 1 on any violation, 2 on bad options, 130 when interrupted (SIGINT or
    SIGTERM: every process the run started is stopped first)."""
    signal.signal(signal.SIGTERM, _interrupted)  # a SIGTERM must not leave the fleet running
    signal.signal(signal.SIGINT, _interrupted)
    if rounds < 1:
        raise _usage("--rounds must be at least 1")
    if only_round is not None and only_round < 1:
        raise _usage("--only-round must be a round number from 1")
    if quiet_timeout <= 0:
        raise _usage("--quiet-timeout must be positive")
    if minutes < 0:
        raise _usage("--minutes must not be negative")
    if not 0 <= satellites <= MAX_SATELLITES:
        raise _usage(f"--satellites must be from 0 to {MAX_SATELLITES}")
    chosen = tuple(dict.fromkeys(f.strip() for f in (faults or "").split(",") if f.strip()))
    if faults is not None and not chosen:
        raise _usage(f"--faults: name at least one of {', '.join(FAULTS)}")
    menu = chosen or FAULTS
    unknown = [f for f in menu if f not in FAULTS]
    if unknown:
        raise _usage(f"--faults: unknown {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    env: dict[str, str] = {}
    for item in node_env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _usage(f"--node-env: {item!r} is not KEY=VALUE")
        env[key] = value
    console = Console() if sys.stdout.isatty() else Console(width=150)
    if faketime_library() is None:
        skews = [f for f in menu if f.startswith("skew-")]
        menu = tuple(f for f in menu if not f.startswith("skew-"))
        if skews:
            console.print(
                f"[yellow]libfaketime is not installed (Debian package libfaketime): "
                f"{', '.join(skews)} left out of the menu[/yellow]"
            )
        if not menu:
            raise _usage("--faults: nothing left to run without libfaketime")
    opts = Options(
        rounds=rounds,
        seed=seed,
        minutes=minutes,
        out=out,
        only_round=only_round or 0,
        faults=chosen,
        node_env=env,
        keep=keep,
        quiet_timeout=quiet_timeout,
        fail_fast=fail_fast,
        satellites=satellites,
    )
    console.print(f"chaos: seed {seed}, faults {', '.join(menu)}, satellites {satellites}")
    try:
        result = run(opts, menu, console)
    except AssertionError as e:
        console.print(f"[red]the fleet could not be booted: {e}[/red]")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: every process the run started was stopped[/yellow]")
        raise typer.Exit(130) from None
    path = out or RESULTS / f"seed-{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.doc, indent=2, default=str))
    s = result.doc["summary"]
    for name, lat in result.doc["latencies"].items():
        console.print(
            f"  {name}: n={lat['n']} min {lat['min']} s, median {lat['median']} s, max {lat['max']} s"
        )
    console.print(f"results: {path}")
    console.print(f"rounds {s['rounds']}, faults {s['faults']}, violations {s['violations']}", soft_wrap=True)
    if result.violations:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
