"""Who a comment wakes and what the wake carries (CO-41, CO-10, CO-6): pure functions, no I/O."""

from __future__ import annotations

from typing import Any

import pytest

from shared import tools
from shared.bus import Envelope, wake_envelope
from shared.turns import Trigger

AGENTS = {"lead", "dev", "docs", "triage"}  # the example company's agent seats; "founder" is human


def _targets(body: str, *, author: str = "operator:ops", **item: Any) -> list[tuple[str, str]]:
    return list(tools.comment_wake_targets(item, body, author=author, agent_seats=AGENTS))


def test_assignee_and_watchers_are_commented_in_order() -> None:
    item: dict[str, Any] = {"assignee": "lead", "watchers": ["docs", "dev"]}
    assert _targets("Any news?", **item) == [
        ("lead", "commented"),
        ("docs", "commented"),
        ("dev", "commented"),
    ]


def test_a_watcher_written_as_seat_ref_is_that_seat() -> None:
    assert _targets("hi", assignee=None, watchers=["seat:docs", "operator:ops"]) == [("docs", "commented")]


def test_mentions_follow_in_order_of_appearance_once_each() -> None:
    body = "@docs please pair with @dev; @docs again, and @dev."
    assert _targets(body, assignee=None, watchers=[]) == [("docs", "mentioned"), ("dev", "mentioned")]


def test_the_first_reason_wins() -> None:
    body = "@lead and @dev: see above"
    assert _targets(body, assignee="lead", watchers=["dev"]) == [("lead", "commented"), ("dev", "commented")]


@pytest.mark.parametrize("author", ["lead", "seat:lead"])
def test_the_author_is_never_woken(author: str) -> None:
    body = "Note to self @lead, and @dev"
    assert _targets(body, author=author, assignee="lead", watchers=["lead"]) == [("dev", "mentioned")]


def test_only_agent_seats_are_woken() -> None:
    body = "@founder, @nobody and @triage"
    assert _targets(body, assignee="founder", watchers=["founder"]) == [("triage", "mentioned")]


@pytest.mark.parametrize(
    "body",
    [
        "run `@dev` in the shell",
        "``code with ` and @dev``",
        "```\n@dev inside a fence\n```",
        "~~~python\nprint('@dev')\n~~~",
        "   ```\n@dev an unclosed fence runs to the end",
        "write to x@dev.example.org",
        "@Dev is not a handle (handles are lower case)",
        "no mention at all",
    ],
)
def test_code_and_non_handles_are_not_mentions(body: str) -> None:
    assert tools.mentioned_handles(body) == []
    assert _targets(body, assignee=None) == []


@pytest.mark.parametrize(
    ("body", "handles"),
    [
        ("@dev", ["dev"]),
        ("(@dev), then @docs.", ["dev", "docs"]),
        ("`x` @dev `y`", ["dev"]),
        ("```\n@docs\n```\nafter the fence @dev", ["dev"]),
        ("@dev's patch", ["dev"]),
        ("@devops is another team", ["devops"]),  # a whole handle, never its prefix "dev"
    ],
)
def test_mentions_in_prose(body: str, handles: list[str]) -> None:
    assert tools.mentioned_handles(body) == handles


def test_the_bound_is_six_an_hour() -> None:
    assert tools.COMMENT_WAKES_PER_HOUR == 6
    assert tools.COMMENT_WAKE_WINDOW.total_seconds() == 3600


def test_the_assignment_wake_is_unchanged() -> None:
    env = wake_envelope("SUP-1", "triage", parent_turn_id="turn-1")
    assert env.type == "external_notification" and env.source == "work"
    assert env.payload == {
        "source": "work",
        "reason": "assigned",
        "work_item": {"key": "SUP-1"},
        "text": "",
        "sender": "triage",
    }
    assert env.work_item == "SUP-1" and env.parent_turn_id == "turn-1" and env.delegation_depth == 0


def test_a_comment_wake_carries_the_comment_and_reads_back_as_a_trigger() -> None:
    env = wake_envelope(
        "ENG-3",
        "operator:ops",
        parent_turn_id="turn-7",
        reason="mentioned",
        comment_id="c-1",
        comment_text="@dev can you look?",
        conversation_key="github:octo/lantern#12",
    )
    assert env.payload == {
        "source": "work",
        "reason": "mentioned",
        "work_item": {"key": "ENG-3"},
        "text": "@dev can you look?",
        "sender": "operator:ops",
        "comment": {"id": "c-1", "body": "@dev can you look?", "author": "operator:ops"},
        "conversation_key": "github:octo/lantern#12",
    }
    assert env.delegation_depth == 0 and env.work_item == "ENG-3"
    trigger = Trigger.from_envelope(Envelope.decode(env.encode()).to_dict())
    assert (trigger.source, trigger.reason, trigger.work_item_key) == ("work", "mentioned", "ENG-3")
    assert trigger.text == "@dev can you look?" and trigger.sender == "operator:ops"
    assert trigger.conversation_key == "github:octo/lantern#12"
    assert trigger.parent_turn_id == "turn-7" and trigger.delegation_depth == 0
    assert trigger.payload["comment"]["id"] == "c-1"


def test_without_a_conversation_key_none_is_set() -> None:
    env = wake_envelope("ENG-3", "lead", reason="commented", comment_id="c-2", comment_text="done")
    assert "conversation_key" not in env.payload
    assert Trigger.from_envelope(env.to_dict()).conversation_key is None


def test_a_comment_wake_needs_its_comment_and_an_assignment_has_none() -> None:
    with pytest.raises(ValueError, match="comment's id"):
        wake_envelope("ENG-3", "lead", reason="commented")
    with pytest.raises(ValueError, match="no comment"):
        wake_envelope("ENG-3", "lead", comment_id="c-3")
