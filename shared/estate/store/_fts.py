"""Lexical queries for the FTS5 index: the knowledge search and the tracker's text filter (CO-24, CO-25).

Issue 12, "Ranking people expect": OR-ing a query's words let a document repeating one word outrank
the one holding what was asked for (``20.04`` put "build 20 … 20 20 20" above "ubuntu 20.04",
``don't`` put "don t t t" above "don't use passive voice", ``multi-agent`` put "agent agent agent"
above "multi-agent orchestration"). Both searches therefore rank every hit in a class, best class
first, and by BM25 within a class (then their own tie-breaks):

0. **the text itself**: the query as typed (blanks collapsed, ASCII case ignored) is in the title or
   the body, and the tokens match as a phrase: ``don't`` finds "don't use passive voice" here and
   "don t t t" only in class 1. Used only when the query joins tokens with something other than a
   blank (``don't``, ``20.04``, ``multi-agent``); otherwise it is the phrase class;
1. **the phrase**: the query's tokens in order and adjacent in one column (``"ubuntu 20 04"``
   matches "ubuntu 20.04");
2. **every token**: all the query's tokens, anywhere in the document;
3. **some token**: at least one of them. This is the match set: a document with none is no hit.

A single-token query has no classes (BM25 alone). Tokens follow the index's tokenizer
(``unicode61 remove_diacritics 2``, ``FTS_DDL``): runs of letters, digits, marks and private-use
characters; every other character separates, so ``20.04`` is ``20``, ``04`` and ``don't`` is
``don``, ``t``. Every token is double-quoted (an FTS5 string) and the text of class 0 is a bound
parameter, so no query text is ever read as FTS5 syntax (``AND``, ``NEAR``, ``*``, ``:``, ``^``,
parentheses, quotes) or as SQL. A query without a token (empty, blanks, punctuation only such as
``?!...``) is refused with :class:`~shared.estate.InvalidField` naming the caller's field and
saying :data:`NO_WORDS`: one error shape for all of them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import InvalidField

__all__ = ["MAX_TOKENS", "NO_WORDS", "LexicalQuery", "lexical_query", "tokens"]

MAX_TOKENS = 32
"""Tokens of a query that are searched for; later ones are ignored."""

NO_WORDS = "give at least one word (letters or digits) to search for"
"""The refusal's detail for a query without a token (empty, blanks or punctuation only)."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _is_token_char(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "LNM" or cat == "Co"


def tokens(text: str, *, limit: int = MAX_TOKENS) -> list[str]:
    """Return the first ``limit`` tokens of ``text``, in order, as the index's tokenizer splits it.

    ``unicode61``'s token characters are letters, numbers and private-use characters, and with
    ``remove_diacritics`` combining marks stay in the word they mark; every other character
    separates tokens. SQLite's Unicode tables are older than Python's, so a rare character may be
    judged differently; the query stays safe either way, because FTS5 re-tokenizes every quoted
    token itself.
    """
    out: list[str] = []
    start = -1
    for i, ch in enumerate(text):
        if _is_token_char(ch):
            if start < 0:
                start = i
            continue
        if start >= 0:
            out.append(text[start:i])
            start = -1
            if len(out) >= limit:
                return out
    if start >= 0 and len(out) < limit:
        out.append(text[start:])
    return out


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


@dataclass(frozen=True)
class LexicalQuery:
    """The FTS5 ``MATCH`` expressions of one query (the classes are in the module docstring).

    Attributes:
        some: Every distinct token, OR-ed: the match set.
        every: Every distinct token, AND-ed (class 2).
        phrase: Every token in order as one FTS5 phrase (class 1).
        literal: The query as typed from its first token to its last, blanks collapsed, ASCII
            lower-cased (class 0); None when that is only the tokens joined by blanks (class 0
            would be the phrase class) or the query has more than :data:`MAX_TOKENS` tokens.
        graded: False for a single token: no class to compute, BM25 alone.
    """

    some: str
    every: str
    phrase: str
    literal: str | None
    graded: bool

    def rank_sql(self, table: str, columns: tuple[str, str], bind: Callable[[str], str]) -> str:
        """Return the SQL expression of a hit's class: ``0`` for an ungraded query, else 0..3.

        Args:
            table: The FTS5 table the outer query matches with :attr:`some` and reads ``rowid`` of.
            columns: The hit's title and body columns as the outer query names them (the
                content rows, e.g. ``("p.title", "p.body")``), for class 0.
            bind: Takes a value to bind and returns its placeholder (``?`` or ``:name``); called
                in the order the placeholders appear in the returned SQL.
        """
        if not self.graded:
            return "0"

        def within(expr: str) -> str:
            return f"{table}.rowid IN (SELECT rowid FROM {table} WHERE {table} MATCH {bind(expr)})"

        sql = "CASE "
        if self.literal is not None:
            title, body = columns
            sql += (
                f"WHEN {within(self.phrase)} AND (instr(lower({title}), {bind(self.literal)}) > 0 "
                f"OR instr(lower(coalesce({body}, '')), {bind(self.literal)}) > 0) THEN 0 "
            )
        sql += f"WHEN {within(self.phrase)} THEN 1 WHEN {within(self.every)} THEN 2 ELSE 3 END"
        return sql


def _trim(text: str) -> str:
    """``text`` without the non-token characters at its ends, blanks collapsed, ASCII lower-cased."""
    chars = " ".join(text.split())
    start, end = 0, len(chars)
    while start < end and not _is_token_char(chars[start]):
        start += 1
    while end > start and not _is_token_char(chars[end - 1]):
        end -= 1
    return chars[start:end].translate(_ASCII_LOWER)


def lexical_query(text: str, *, field: str) -> LexicalQuery:
    """Build the FTS5 expressions of ``text`` (issue 12, "Ranking people expect").

    Args:
        text: What the caller typed.
        field: The caller's name for it (``q`` for the knowledge search, ``text`` for ``/work``),
            named by the refusal.

    Raises:
        InvalidField: ``text`` holds no token (empty, blanks or punctuation only), naming ``field``.
    """
    found = tokens(text)
    if not found:
        raise InvalidField(field, NO_WORDS)
    distinct: dict[str, str] = {}
    for t in found:  # FTS5 folds case itself; the first spelling stands for the others
        distinct.setdefault(t.lower(), t)
    quoted = [_quote(t) for t in distinct.values()]
    literal = _trim(text)
    plain = " ".join(found).translate(_ASCII_LOWER)
    graded = len(found) > 1
    return LexicalQuery(
        some=" OR ".join(quoted),
        every=" AND ".join(quoted),
        phrase=_quote(" ".join(found)),
        literal=literal if graded and literal != plain and len(found) < MAX_TOKENS else None,
        graded=graded,
    )
