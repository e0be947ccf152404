"""The example company's offline script answers questions by reading and covers every seat (issue 38).

Engine-level turns over the in-memory estate (no processes): what ``crewlet send triage "What is
open on SUP?" --wait`` prints, that a question files nothing, that a report is still filed, and
that work assigned to ``dev`` and ``docs`` ends delivered rather than failing.
"""

from __future__ import annotations

from shared.config import validate_offline_script_data
from tests.turns.helpers import api_trigger, engine, example_org, wake
from tests.turns.workspace import Estate


async def _file(estate: Estate, title: str) -> str:
    eng = engine(example_org())
    result = await eng.run("triage", api_trigger(title), workspace=estate.workspace("triage"))
    assert result.outcome == "delivered", result
    return result.reply or ""


async def test_what_is_open_lists_the_open_items_and_files_nothing() -> None:
    estate = Estate()
    assert await _file(estate, "Crash when config file is empty") == (
        "[offline] Filed SUP-1 for the engineering lead."
    )
    assert await _file(estate, "Docs link is broken") == "[offline] Filed SUP-2 for the engineering lead."
    estate.items["SUP-2"]["status"] = "done"
    reply = await _file(estate, "What is open on SUP?")
    assert reply == "[offline] Open on SUP: SUP-1 [offline] Crash when config file is empty (todo, lead)"
    assert sorted(estate.items) == ["SUP-1", "SUP-2"]  # the question filed nothing


async def test_nothing_open_says_none() -> None:
    estate = Estate()
    assert await _file(estate, "what is open?") == "[offline] Open on SUP: (none)"
    assert estate.items == {}


async def test_other_questions_name_the_top_knowledge_pages() -> None:
    estate = Estate()
    ws = estate.workspace("lead")
    await ws.write_page("ENG", "Release checklist", "How we cut a release: tag, build, publish.")
    await ws.write_page("SUP", "Refund policy", "Refunds within 30 days.")
    reply = await _file(estate, "How do we cut a release")
    assert reply == "[offline] From the knowledge base: ENG/Release checklist"
    assert await _file(estate, "Anything about lunch menus?") == "[offline] From the knowledge base: (none)"
    assert estate.items == {}


async def test_dev_and_docs_assigned_work_is_delivered() -> None:
    estate = Estate()
    await _file(estate, "Crash when config file is empty")
    await _file(estate, "Docs link is broken")
    eng = engine(example_org())
    dev = await eng.run("dev", wake("SUP-1"), workspace=estate.workspace("dev"))
    assert (dev.outcome, dev.reply) == ("delivered", "[offline] Started SUP-1.")
    assert estate.items["SUP-1"]["status"] == "in_progress"
    assert estate.comments["SUP-1"][-1]["body"].startswith("[offline] Plan: reproduce SUP-1")
    docs = await eng.run("docs", wake("SUP-2"), workspace=estate.workspace("docs"))
    assert (docs.outcome, docs.reply) == ("delivered", "[offline] Drafted docs for SUP-2.")
    assert ("ENG", "Docs draft SUP-2") in estate.pages


def test_a_rule_with_a_bad_regex_is_refused_naming_its_path() -> None:
    script, issues = validate_offline_script_data(
        {"rules": [{"when": {"text_matches": "(unclosed"}, "final": "x"}]}, file="s.yaml"
    )
    assert script is None
    assert [(i.path, i.file) for i in issues] == [("rules[0].when.text_matches", "s.yaml")]
    assert "not a regular expression" in issues[0].message
