"""What the operator views say (issue 38): the fleet table's seat count agrees with the seat table
below it, and a review the engine overturned reads as such in ``crewlet turn``."""

from __future__ import annotations

from rich.console import Console

from crewlet import fleet_status, turns_cli


def test_node_seat_count_comes_from_the_seat_table() -> None:
    view = {
        "asked": "node-0",
        "nodes": [{"id": "node-0", "roles": ["data"], "seats_held": 0}, {"id": "node-1", "seats_held": 3}],
        "seats": [
            {"seat": s, "node": "node-0", "epoch": 1, "renewed_at": ""}
            for s in ("lead", "dev", "docs", "triage")
        ],
    }
    out = Console(width=200, record=True, markup=False)
    fleet_status._print(view, out)
    rows = {line.split("│")[1].strip(): line for line in out.export_text().splitlines() if "│ node-" in line}
    assert rows["node-0"].split("│")[8].strip() == "4"
    assert rows["node-1"].split("│")[8].strip() == "0"


def test_overturned_review_says_so() -> None:
    notes = (
        "Nothing reached the asker (work item on SUP-1) although a reply is owed (always): answer them there."
    )
    said = turns_cli._decision({"decision": "self_iterate", "notes": notes})
    assert said.startswith("  decision self_iterate (the reviewer said done; overturned: Nothing reached")
    assert turns_cli._decision({"decision": "done", "notes": "fine"}) == "  decision done"
    assert (
        turns_cli._decision({"decision": "self_iterate", "notes": "try again"}) == "  decision self_iterate"
    )
    assert turns_cli._decision({}) == ""
