"""The operator UI in a real headless Chromium against a real 3-node fleet (DESIGN.md "Operator UI";
FL-117 the fleet view, FL-10/FL-56 a lapsed lease and its seats re-placed, CO-20 turns, ES-79 traces).

Debian's ``chromium`` is driven by Python Playwright. The fleet (:class:`tests.fleet.harness.Fleet`:
a 3-member nats-server cluster, nodes ``a``, ``b``, ``c``, lease TTL 3 s) boots the way
``tests/fleet/conftest.py`` boots it; the browser reads node ``a``'s ``/ui/``. Screenshots of every tab
go to ``.e2e-output/ui/`` at the repository root (its path is printed). Every process — the
nodes, the cluster, the proxies, the scripted model, the browser — is stopped in a finalizer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.conftest import debian_binary
from tests.fleet.harness import TTL, Fleet, wait_for
from tests.support.procs import REPO, TOKEN

OUT = REPO / ".e2e-output" / "ui"
"""Where the screenshots go (gitignored)."""
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MS = 1000


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three converged nodes ``a``, ``b``, ``c`` (all roles) on a 3-member cluster; ``triage`` files work."""
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        f.llm.tool_seats.add("triage")  # its turns call create_work_item: the Work tab gets a row
        f.boot()  # all three at once, as an orchestrator starts them
        f.wait_converged(60)
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium under Playwright, closed (and its driver stopped) at the end."""
    path = debian_binary("chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def shots(request: pytest.FixtureRequest) -> Path:
    """The screenshot directory; its path is printed past pytest's capture."""
    OUT.mkdir(parents=True, exist_ok=True)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        print(f"\nUI screenshots: {OUT}")
    return OUT


@pytest.fixture
def page(browser: Browser, fleet: Fleet) -> Iterator[Page]:
    """A fresh browser context (empty sessionStorage) on node ``a``'s ``/ui/``."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 900})
    pg = ctx.new_page()
    try:
        pg.goto(fleet.nodes["a"].url + "/ui/")
        yield pg
    finally:
        ctx.close()


def sign_in(page: Page, token: str) -> None:
    """Fill the token form the page shows when it has none, and submit it."""
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")


def tab(page: Page, name: str) -> None:
    """Open tab ``name`` (``nodes``, ``seats``, ``turns``, ``work``) by clicking it."""
    page.click(f'#tabs a[data-tab="{name}"]')
    expect(page.locator(f"#view-{name}")).to_be_visible()


def test_a_wrong_token_is_refused_and_the_right_one_shows_every_node(
    page: Page, fleet: Fleet, shots: Path
) -> None:
    sign_in(page, "wrong-token-wrong-token-wrong")
    expect(page.locator("#banner")).to_contain_text("The API refused (401 unauthorized)", timeout=10 * MS)
    expect(page.locator("#login")).to_be_visible()  # asked again
    assert page.evaluate("sessionStorage.getItem('crewlet.token')") is None
    page.screenshot(path=str(shots / "refused.png"), full_page=True)

    sign_in(page, TOKEN)
    expect(page.locator("#nodes-table tbody tr[data-node]")).to_have_count(3, timeout=15 * MS)
    expect(page.locator("#banner")).to_be_hidden()
    ids = page.locator("#nodes-table tbody tr[data-node]").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-node'))"
    )
    assert ids == ["a", "b", "c"]
    view = fleet.view()
    for node in view["nodes"]:  # each row says what the API says of that node
        cells = page.locator(f'#nodes-table tr[data-node="{node["id"]}"] td').all_inner_texts()
        assert cells[1] == ", ".join(node["roles"]) and cells[3] == node["broker"]
        assert cells[5] == node["posture"] and cells[10].endswith("s ago")
        assert int(cells[8]) >= 1  # every node holds seats
    # the token is asked once: a reload keeps it (sessionStorage)
    page.reload()
    expect(page.locator("#nodes-table tbody tr[data-node]")).to_have_count(3, timeout=10 * MS)
    expect(page.locator("#login")).to_be_hidden()
    page.screenshot(path=str(shots / "nodes.png"), full_page=True)


def test_turns_work_and_the_trace_view_after_a_message(page: Page, fleet: Fleet, shots: Path) -> None:
    sign_in(page, TOKEN)
    title = "UI check: rotate the staging logs"
    event_id = fleet.post_message("triage", title)
    fleet.wait_handled(event_id, timeout=60)

    tab(page, "turns")
    turn = page.locator('#turns-table tbody tr[data-seat="triage"]').first
    expect(turn).to_be_visible(timeout=15 * MS)
    cells = turn.locator("td").all_inner_texts()
    assert cells[2] and cells[2] != "—"  # outcome
    assert int(cells[3].split()[0]) > 0  # tokens
    assert cells[4].endswith(" s")  # duration
    assert cells[5] in fleet.names  # the node that ran it
    page.screenshot(path=str(shots / "turns.png"), full_page=True)

    tab(page, "work")
    item = page.locator("#work-table tbody tr[data-key]", has_text=title)
    expect(item).to_have_count(1, timeout=20 * MS)
    key = item.get_attribute("data-key")
    assert key and key.startswith("SUP-")
    page.screenshot(path=str(shots / "work.png"), full_page=True)

    tab(page, "turns")
    link = page.locator('#turns-table tbody tr[data-seat="triage"] a.trace-link').first
    trace_id = link.get_attribute("title")
    assert trace_id
    link.click()
    expect(page.locator("#view-trace")).to_be_visible()
    expect(page.locator("#trace-id")).to_have_text(trace_id)
    # the event log is written a little after the turn: the view refreshes until its rows come
    expect(page.locator("#trace-table tbody tr[data-event]").first).to_be_visible(timeout=30 * MS)
    with fleet.api("a") as c:
        events = c.get(f"/events/trace/{trace_id}").json()["events"]
    shown = page.locator("#trace-table tbody tr[data-event]").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-event'))"
    )
    assert set(shown) <= {e["event_id"] for e in events} and shown
    page.screenshot(path=str(shots / "trace.png"), full_page=True)


def test_a_killed_node_leaves_the_nodes_tab_and_its_seat_moves(
    page: Page, browser: Browser, fleet: Fleet, shots: Path
) -> None:
    on_c = browser.new_context(viewport={"width": 1500, "height": 900}).new_page()  # a page served by c
    on_c.goto(fleet.nodes["c"].url + "/ui/")
    sign_in(on_c, TOKEN)
    expect(on_c.locator("#nodes-table tbody tr[data-node]")).to_have_count(3, timeout=15 * MS)
    sign_in(page, TOKEN)
    expect(page.locator("#nodes-table tbody tr[data-node]")).to_have_count(3, timeout=15 * MS)
    tab(page, "seats")
    owned_by_c = sorted(s["seat"] for s in fleet.view("a")["seats"] if s["node"] == "c")
    assert owned_by_c, "node c holds no seat to move"
    seat = owned_by_c[0]
    row = page.locator(f'#seats-table tbody tr[data-seat="{seat}"]')
    expect(row).to_have_attribute("data-owner", "c", timeout=10 * MS)
    epoch_before = int(row.locator("td").nth(2).inner_text())
    assert row.locator("td").nth(3).inner_text().isdigit()  # inbox depth, from /fleet?inbox=true
    page.screenshot(path=str(shots / "seats.png"), full_page=True)

    t0 = time.monotonic()
    fleet.nodes["c"].signal(9)  # kill -9: no drain, the leases lapse after the TTL
    assert fleet.nodes["c"].wait(10) is not None

    # the page c served cannot reach its node any more, and says so
    expect(on_c.locator("#banner")).to_contain_text("The node is unreachable", timeout=10 * MS)
    on_c.screenshot(path=str(shots / "unreachable.png"), full_page=True)
    on_c.context.close()

    tab(page, "nodes")
    expect(page.locator('#nodes-table tr[data-node="c"]')).to_have_count(0, timeout=int((TTL * 5 + 10) * MS))
    gone = time.monotonic() - t0
    assert gone >= TTL * 0.5, (
        f"node c left the view {gone:.1f} s after the kill, before its lease could lapse"
    )
    expect(page.locator("#nodes-table tbody tr[data-node]")).to_have_count(2)
    page.screenshot(path=str(shots / "nodes-after-kill.png"), full_page=True)

    tab(page, "seats")
    moved = page.locator(
        f'#seats-table tbody tr[data-seat="{seat}"]:not([data-owner="c"]):not([data-owner=""])'
    )
    expect(moved).to_have_count(1, timeout=60 * MS)
    owner = moved.get_attribute("data-owner")
    assert owner in ("a", "b")
    assert moved.locator("td").nth(1).inner_text() == owner
    assert int(moved.locator("td").nth(2).inner_text()) > epoch_before  # a new lease, a higher epoch
    wait_for(f"{seat} owned by {owner} in the API", lambda: fleet.owners().get(seat) == owner, timeout=10)
    page.screenshot(path=str(shots / "seats-after-kill.png"), full_page=True)
    assert "c" not in {n["id"] for n in fleet.view("a")["nodes"]}  # the API agrees
