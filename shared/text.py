"""Text that can be written: finding a string no UTF-8 writer can encode (issue 17).

``json.loads`` turns ``"\\ud800"`` (a lone UTF-16 surrogate) into a Python string that SQLite,
NATS and every UTF-8 encoder refuse. Such a string may arrive through an HTTP body or through a
model's tool call; wherever it is found it is refused naming its field, before anything is written.

Some text can be written but should not be *shown* as it is (issue 38): a bidirectional override or
isolate (U+202A..U+202E, U+2066..U+2069) makes ``\u202etxt.exe`` read as ``exe.txt``, and a NUL
ends the string for C readers. :func:`hidden_character` finds them; names people read (file
paths, work item titles, the company name) refuse them, naming the field.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HIDDEN_CHARACTERS", "hidden_character", "not_text", "safe_text"]

HIDDEN_CHARACTERS = frozenset(["\x00", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))])
"""NUL and the bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069)."""


def hidden_character(text: str) -> str | None:
    """Why ``text`` would not be shown as it reads, or None.

    Args:
        text: A name people read (a path, a title).

    Returns:
        E.g. ``"holds U+202E (a bidirectional control, which reorders how the text is shown) at
        character 1"``, or ``"holds NUL (U+0000) at character 3"``; None when it holds neither.
    """
    for i, ch in enumerate(text, 1):
        if ch in HIDDEN_CHARACTERS:
            if ch == "\x00":
                return f"holds NUL (U+0000) at character {i}"
            return (
                f"holds U+{ord(ch):04X} (a bidirectional control, which reorders how the text is "
                f"shown) at character {i}"
            )
    return None


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate written as its escape (``\\ud800``): safe to encode and
    echo back in a refusal that names the offending key."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def not_text(value: Any, path: str = "") -> tuple[str, str] | None:
    """Find the first string (a key or a value) in ``value`` that cannot be encoded as UTF-8.

    Args:
        value: A parsed JSON value (str, dict, list, or anything else, which is fine).
        path: The dotted path of ``value`` itself; ``""`` for the top.

    Returns:
        ``(path, why)`` for the first lone surrogate found — ``path`` dotted like a validation
        error's (``op_id``, ``labels.1``, ``payload.title``; ``body`` for a bare string at the top;
        a key is named ``<path> (a key)``, its lone surrogates escaped by :func:`safe_text`, so the
        path itself can always be encoded) — else None.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            code = ord(value[e.start])
            why = f"not valid text: a lone surrogate U+{code:04X} at character {e.start + 1}; send UTF-8 text"
            return path or "body", why
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        name = safe_text(k) if isinstance(k, str) else str(k)
        where = f"{path}.{name}" if path else name
        bad = (not_text(k, f"{where} (a key)") if isinstance(k, str) else None) or not_text(v, where)
        if bad:
            return bad
    return None
