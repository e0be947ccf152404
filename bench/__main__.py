"""``python -m bench [--quick] [--only 1,5] [--name NAME]``: run the figures, print the table, write the JSON.

Every figure is printed beside its floor measured in the same run, as a ratio (see
``bench/README.md``). The table goes to stdout (Markdown), progress to stderr, and the rows to
``bench/results/<name>.json`` (``quick`` or ``full`` unless ``--name`` says otherwise).

Exit status: 0 when every figure was measured or deliberately not measured (``not_measured``,
with its reason); 1 when any figure could not be measured (``failed``). No timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

# The in-process seams log JSON lines; the bench driver keeps only errors (the node processes a
# figure starts log as a user's node would).
from shared import logs  # noqa: E402

logs.configure(level="error", fmt="json")

from . import (  # noqa: E402
    fig1_leases,
    fig2_mailboxes,
    fig3_handover,
    fig4_takeover,
    fig5_turns,
    fig6_estate,
    fig7_search,
    fig8_webhooks,
    fig9_memory,
    fig10_config,
    fig11_estate_life,
    fig12_divided_search,
    fig13_growth,
    fig14_memory_hydration,
    fig15_hybrid,
)
from ._ctx import Ctx  # noqa: E402
from ._result import Row, failed, render_table, write_json  # noqa: E402

FIGURES: dict[str, tuple[str, Callable[[Ctx], list[Row]]]] = {
    "1": ("lease claim and renew", fig1_leases.run),
    "2": ("mailbox creation per seat", fig2_mailboxes.run),
    "3": ("clean handover", fig3_handover.run),
    "4": ("takeover after kill -9", fig4_takeover.run),
    "5": ("engine cost per turn and throughput", fig5_turns.run),
    "6": ("estate write and read", fig6_estate.run),
    "7": ("knowledge search", fig7_search.run),
    "8": ("signed webhook ingest", fig8_webhooks.run),
    "9": ("memory of idle seats", fig9_memory.run),
    "10": ("config activation until applied", fig10_config.run),
    "11": ("estate catch-up and snapshots", fig11_estate_life.run),
    "12": ("divided knowledge search", fig12_divided_search.run),
    "13": ("how each cost grows with its work", fig13_growth.run),
    "14": ("memory hydration where a seat lands", fig14_memory_hydration.run),
    "15": ("knowledge found by meaning: hybrid search, embedding throughput", fig15_hybrid.run),
}
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    """Run the chosen figures; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="each figure at its smallest size (make test)")
    ap.add_argument("--only", default="", help="comma-separated figure numbers (default: all thirteen)")
    ap.add_argument("--name", default="", help="results file name (default: quick or full)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, stores)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    opts = ap.parse_args(argv)
    chosen = [f.strip() for f in opts.only.split(",") if f.strip()] or list(FIGURES)
    unknown = [f for f in chosen if f not in FIGURES]
    if unknown:
        ap.error(f"unknown figure(s) {unknown}; choose from {list(FIGURES)}")
    name = opts.name or ("quick" if opts.quick else "full")
    scratch = Path(tempfile.mkdtemp(prefix="crewlet-bench-"))
    started = time.monotonic()
    rows: list[Row] = []
    try:
        for key in chosen:
            title, fn = FIGURES[key]
            flags: frozenset[str] = frozenset()
            ctx = Ctx(quick=opts.quick, root=scratch / f"fig{key}", verbose=not opts.quiet, flags=flags)
            ctx.root.mkdir(parents=True, exist_ok=True)
            ctx.say(f"figure {key}: {title}")
            t0 = time.monotonic()
            try:
                got = fn(ctx)
            except Exception as e:  # noqa: BLE001 - one figure failing must not hide the others
                traceback.print_exc(file=sys.stderr)
                got = [failed(f"{key} {title}", "—", f"{type(e).__name__}: {e}")]
            if not got:
                got = [failed(f"{key} {title}", "—", "the figure returned no rows")]
            rows += got
            ctx.say(f"figure {key} done in {time.monotonic() - t0:.0f} s")
            write_json(
                RESULTS / f"{name}.json",
                rows,
                name=name,
                quick=opts.quick,
                elapsed=time.monotonic() - started,
            )
    finally:
        if opts.keep:
            print(f"scratch kept: {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    write_json(RESULTS / f"{name}.json", rows, name=name, quick=opts.quick, elapsed=elapsed)
    mode = "quick (smallest sizes, few samples)" if opts.quick else "full"
    print(f"\ncrewlet bench, {mode} run, {elapsed:.0f} s, {len(os.sched_getaffinity(0))} CPUs\n")
    print(render_table(rows))
    growth = fig13_growth.render_growth(rows)
    if growth:
        print(
            "\nGrowth between successive sizes (figure 13; k: cost ∝ size^k, for turns/s the rate's exponent)\n"
        )
        print(growth)
    bad = [r for r in rows if r.status == "failed"]
    print(f"\nJSON: {RESULTS / f'{name}.json'}")
    if bad:
        print(f"\n{len(bad)} figure(s) could not be measured:", file=sys.stderr)
        for r in bad:
            print(f"  {r.figure}: {r.note}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
