"""Ranking people expect (issue 12): the text as typed, then the exact phrase, then every word, then some.

Before issue 12 the words of a query were OR-ed and ranked by BM25 alone (knowledge) or by recency
(``/work?text=``), so a document repeating one word came first. Each case below first checks that
its corpus is one where the old order put the wrong document first, then that the search now
ranks the document holding what was asked for first. An in-process data node on a real
nats-server; the HTTP shape of the refusals is checked in ``test_node.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from shared import estate
from shared.estate import Call
from shared.estate.domains.pages import _read as _pages_read
from shared.estate.store import FastConn, raw_sql
from shared.estate.store._fts import NO_WORDS, lexical_query, tokens

from .conftest import Inproc, seed

Start = Callable[..., Awaitable[Inproc]]


async def _page(node: Inproc, title: str, body: str) -> str:
    ans = await node.svc.serve(Call(op="pages.write", args={"space": "ENG", "title": title, "body": body}))
    assert ans.error is None and ans.result["outcome"] == "applied", ans
    return str(ans.result["object"]["id"])


async def _item(node: Inproc, title: str, body: str = "") -> str:
    args: dict[str, Any] = {"project": "ENG", "title": title}
    if body:
        args["body"] = body
    ans = await node.svc.serve(Call(op="work.create", args=args))
    assert ans.error is None and ans.result["outcome"] == "applied", ans
    return str(ans.result["object"]["key"])


async def _search(node: Inproc, query: str, limit: int = 20) -> list[str]:
    ans = await node.svc.serve(Call(op="pages.search", args={"query": query, "limit": limit}))
    assert ans.error is None, ans
    return [h["title"] for h in ans.result["data"]["hits"]]


async def _list(node: Inproc, text: str) -> list[str]:
    ans = await node.svc.serve(Call(op="work.list", args={"project": "ENG", "text": text, "limit": 100}))
    assert ans.error is None, ans
    return [i["title"] for i in ans.result["data"]["items"]]


async def _or_ranked(node: Inproc, words: list[str]) -> list[str]:
    """Titles in the old knowledge order: the words OR-ed, BM25 alone (title ×2)."""
    sql = "SELECT title FROM pages_fts WHERE pages_fts MATCH :q ORDER BY bm25(pages_fts, 0.0, 0.0, 2.0, 1.0), rowid"
    match = " OR ".join(f'"{w}"' for w in words)
    rows = await node.est.store.read(lambda conn: list(raw_sql(conn, sql, q=match)))
    return [str(r.title) for r in rows]


async def test_20_04_ranks_the_exact_version_above_a_page_repeating_20(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _page(a, "Build log", "build 20 then 20 and 20 20 20")
    await _page(a, "Hosts", "the hosts run ubuntu 20.04 today")
    for n in range(6):  # "04" is common, "20" is not: OR-ed, the repeater won
        await _page(a, f"Release {n}", f"release 04 of batch {n}")
    assert (await _or_ranked(a, ["20", "04"]))[0] == "Build log"
    ranked = await _search(a, "20.04")
    assert ranked[0] == "Hosts" and ranked[1] == "Build log", ranked
    assert len(ranked) == 8  # still every page holding some word


async def test_dont_ranks_the_phrase_as_typed_above_its_scattered_tokens(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _page(a, "Style guide", "don't use passive voice in the manual's headings")
    await _page(a, "Letters", "don t t t")
    assert (await _or_ranked(a, ["don", "t"]))[0] == "Letters"
    assert await _search(a, "don't") == ["Style guide", "Letters"]
    # The curly apostrophe is not the text as typed in either page: the phrase class and BM25 decide.
    assert set(await _search(a, "don’t")) == {"Style guide", "Letters"}


async def test_multi_agent_on_the_work_list_puts_the_hyphenated_item_first(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _item(a, "multi-agent orchestration")
    await _item(a, "Multi agent setup")
    await _item(a, "agent for multi tenancy", "notes")
    await _item(a, "unrelated", "nothing here")
    await _item(a, "agent agent agent")  # the newest: the old text filter (newest change first) led with it
    old = await a.svc.serve(Call(op="work.list", args={"project": "ENG"}))
    assert old.result["data"]["items"][0]["title"] == "agent agent agent"
    assert await _list(a, "multi-agent") == [
        "multi-agent orchestration",  # the text as typed
        "Multi agent setup",  # the exact phrase
        "agent for multi tenancy",  # every word
        "agent agent agent",  # some word
    ]
    # Paging keeps the ranked order.
    page = await a.svc.serve(
        Call(op="work.list", args={"project": "ENG", "text": "multi-agent", "limit": 2, "offset": 2})
    )
    assert [i["title"] for i in page.result["data"]["items"]] == [
        "agent for multi tenancy",
        "agent agent agent",
    ]
    # Other filters still apply beside the ranking.
    done = await a.svc.serve(
        Call(op="work.list", args={"project": "ENG", "text": "multi-agent", "status": "done"})
    )
    assert done.result["data"]["items"] == []


async def test_phrase_then_every_word_then_some_word_in_knowledge(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _page(a, "Some", "voice voice voice voice")
    await _page(a, "Every", "the voice of a passive reader")
    await _page(a, "Phrase", "prefer active over passive voice when you write a long manual for operators")
    assert await _search(a, "passive voice") == ["Phrase", "Every", "Some"]
    assert await _search(a, "PASSIVE   Voice!") == ["Phrase", "Every", "Some"]
    # A single word: BM25 alone, as before.
    assert (await _search(a, "voice"))[0] == "Some"


async def _hits(node: Inproc, query: str, limit: int, space: str | None = None) -> list[dict[str, Any]]:
    args: dict[str, Any] = {"query": query, "limit": limit}
    if space:
        args["space"] = space
    ans = await node.svc.serve(Call(op="pages.search", args=args))
    assert ans.error is None, ans
    return list(ans.result["data"]["hits"])


async def _reference(node: Inproc, query: str, limit: int, space: str | None = None) -> list[dict[str, Any]]:
    """The one-statement search (every match joined with its page, ordered, cut): the reference order."""
    lexical = lexical_query(query, field="q")
    return await node.est.store.read(
        lambda conn: _pages_read._one_statement(FastConn(conn), lexical, space, limit, None)
    )


async def test_ties_at_the_cut_go_by_page_id_as_in_one_statement(inproc: Start) -> None:
    """Issue 16: the search ranks by the index alone and reads pages for the best few; pages tied on
    class and BM25 across the cut still come by page id, exactly as the one-statement search."""
    a = await inproc("a")
    await seed(a, "ENG", "OPS")
    titled = [await _page(a, f"Alpha {n}", "alpha beta gamma") for n in ("one", "two")]
    tied = [await _page(a, f"Note {n}", "alpha beta gamma") for n in range(25)]
    for title, body in [("Zeta", "zeta alpha"), ("Zeta only", "zeta zeta"), ("Ops", "alpha beta")]:
        ops = await a.svc.serve(Call(op="pages.write", args={"space": "OPS", "title": title, "body": body}))
        assert ops.error is None, ops
    for n in range(4):  # a tie inside the candidates: "delta" at limit 2
        await _page(a, f"Delta {n}", "delta")
    for n in range(12):
        await _page(a, f"Deep {n}", "delta" + " filler" * (n + 1))
    queries = ["alpha", "alpha beta", "beta alpha", "alpha zeta", "gamma zeta", "zeta", "alpha-beta"]
    for query in [*queries, "delta", "delta filler", "filler delta"]:
        for limit in (1, 2, 5, 20):
            for space in (None, "ENG", "OPS"):
                want = await _reference(a, query, limit, space)
                assert await _hits(a, query, limit, space) == want, (query, limit, space)
    best = [h["page_id"] for h in await _hits(a, "alpha", 5, "ENG")]
    assert best == sorted(titled) + sorted(tied)[:3], best  # the title counts twice; then the ties by id


async def test_a_page_not_published_is_never_a_hit(inproc: Start) -> None:
    """Index rows whose page is not published are left out: the best match, and tied ones."""
    a = await inproc("a")
    await seed(a, "ENG")
    best = [await _page(a, f"Alpha beta {n}", "alpha beta") for n in range(3)]  # the title counts twice
    ids = [await _page(a, f"Note {n}", "alpha beta") for n in range(22)]
    hidden = best[:2] + ids[:12]
    marks = ", ".join("?" * len(hidden))
    await a.est.store.write(
        lambda conn: conn.exec_driver_sql(
            f"UPDATE pages SET status = 'draft' WHERE id IN ({marks})", tuple(hidden)
        )
    )
    for query in ["alpha", "alpha beta", "beta zeta"]:
        hits = await _hits(a, query, 5)
        assert hits == await _reference(a, query, 5), query
        assert len(hits) == 5 and not {h["page_id"] for h in hits} & set(hidden), hits


async def test_a_search_answers_alike_on_the_event_loop_and_on_a_reader_thread(inproc: Start) -> None:
    """Issue 16: searches run inline while they are cheap here, on a reader thread once they are not."""
    a = await inproc("a")
    await seed(a, "ENG")
    for n in range(6):
        await _page(a, f"Beacon {n}", "lighthouse keeper" + " log" * n)
    inline = await _hits(a, "lighthouse log", 5)
    calls: list[str] = []
    store = a.est.store
    read_inline, read = store.read_inline, store.read

    async def spy_inline(fn: Any) -> Any:
        calls.append("inline")
        return await read_inline(fn)

    async def spy_read(fn: Any) -> Any:
        calls.append("thread")
        return await read(fn)

    store.read_inline, store.read = spy_inline, spy_read  # type: ignore[method-assign]
    try:
        assert await _hits(a, "lighthouse log", 5) == inline
        a.svc._search_cost = 1.0  # a second of CPU per search lately: a large index
        assert await _hits(a, "lighthouse log", 5) == inline
    finally:
        store.read_inline, store.read = read_inline, read  # type: ignore[method-assign]
    # inline first (a busy file would send that one on to a reader thread too), then a reader thread
    assert calls[0] == "inline" and calls.count("inline") == 1 and calls[-1] == "thread", calls
    assert a.svc._search_cost < 1.0  # the search's own cost pulls the mean down


async def test_a_search_in_an_unknown_or_malformed_space_is_refused(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _page(a, "Beacon", "lighthouse")
    missing = await a.svc.serve(Call(op="pages.search", args={"query": "lighthouse", "space": "OPS"}))
    assert missing.error is not None and isinstance(estate.from_wire(missing.error), estate.NotFound), missing
    bad = await a.svc.serve(Call(op="pages.search", args={"query": "lighthouse", "space": "ops team"}))
    assert bad.error is not None, bad
    err = estate.from_wire(bad.error)
    assert isinstance(err, estate.InvalidField) and err.field == "space", bad
    assert [h["title"] for h in await _hits(a, "lighthouse", 5, "ENG")] == ["Beacon"]


async def test_query_text_is_never_fts5_syntax(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _page(a, "Music", "rock and roll near the stage")
    await _item(a, "rock and roll", "near the stage")
    for q in [
        "rock AND roll",
        "NEAR(rock roll)",
        '"rock',
        "rock* OR title:roll",
        "roll^ -rock",
        "'; DROP TABLE pages; --",
    ]:
        found = await a.svc.serve(Call(op="pages.search", args={"query": q}))
        assert found.error is None, (q, found)
        listed = await a.svc.serve(Call(op="work.list", args={"text": q}))
        assert listed.error is None, (q, listed)
    assert await _search(a, "rock AND roll") == ["Music"]
    assert await _list(a, "title:roll") == ["rock and roll"]
    assert await _search(a, "DROP TABLE") == []


async def test_an_empty_and_a_wordless_query_are_refused_alike(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    await _page(a, "Beacon", "lighthouse")
    key = await _item(a, "Beacon")
    errors = []
    for q in ["", "   ", "?!...", "—‘’…", "_-_"]:
        ans = await a.svc.serve(Call(op="pages.search", args={"query": q}))
        assert ans.error is not None, q
        errors.append(ans.error)
    assert all(e == {"code": "invalid", "field": "q", "detail": f"q: {NO_WORDS}"} for e in errors), errors
    # /work?text=: empty is no filter (the plain list); blanks or punctuation only are refused naming text.
    plain = await a.svc.serve(Call(op="work.list", args={"text": ""}))
    assert [i["key"] for i in plain.result["data"]["items"]] == [key]
    for text in ["   ", "?!...", "_-_"]:
        ans = await a.svc.serve(Call(op="work.list", args={"text": text}))
        assert ans.error == {"code": "invalid", "field": "text", "detail": f"text: {NO_WORDS}"}, (text, ans)
    # Through the wire and back, the refusal is one InvalidField naming its field.
    err = estate.from_wire(errors[0])
    assert isinstance(err, estate.InvalidField) and err.field == "q" and err.detail == NO_WORDS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ubuntu 20.04", ["ubuntu", "20", "04"]),
        ("don't", ["don", "t"]),
        ("multi-agent", ["multi", "agent"]),
        ("foo_bar", ["foo", "bar"]),
        ("école e\u0301cole", ["école", "e\u0301cole"]),
        ("?!...", []),
        ("", []),
    ],
)
def test_tokens_follow_the_index_tokenizer(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_the_three_expressions_quote_every_token() -> None:
    q = lexical_query('Ubuntu "20.04" ubuntu', field="q")
    assert q.some == '"Ubuntu" OR "20" OR "04"'
    assert q.every == '"Ubuntu" AND "20" AND "04"'
    assert q.phrase == '"Ubuntu 20 04 ubuntu"'
    assert q.literal == 'ubuntu "20.04" ubuntu' and q.graded
    assert lexical_query("ubuntu 20", field="q").literal is None  # only blanks between: the phrase class
    single = lexical_query("lighthouse", field="q")
    assert not single.graded and single.rank_sql("pages_fts", ("p.title", "p.body"), lambda v: "?") == "0"
    with pytest.raises(estate.InvalidField) as refused:
        lexical_query("?!...", field="text")
    assert refused.value.field == "text" and refused.value.detail == NO_WORDS
