"""What a company document may hold that rides every prompt or every read (issue 38).

- A persona text (``goal``, ``backstory``, one ``responsibilities`` entry, ``mission``, ...) is at
  most 8 000 characters: a 3 MB goal validated and was sent with every turn.
- A document over 8 MiB of JSON is refused by ``crewlet validate`` as by the node (whose request
  body cap it is): a 10 MB document printed ``valid:`` and the node then refused it.
- The company name holds no NUL and no bidirectional control.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crewlet.cli import app
from shared.config import DOCUMENT_LIMIT, PERSONA_LIMIT, validate_company_data
from shared.runtime._http_errors import MAX_BODY_BYTES
from tests.support.procs import REPO

EXAMPLE = REPO / "examples" / "company.yaml"


def _example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def _errors(data: dict[str, Any]) -> list[str]:
    company, issues = validate_company_data(data, file="c.yaml")
    lines = [i.line() for i in issues if i.severity == "error"]
    assert (company is None) == bool(lines)
    return lines


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    shutil.copy(EXAMPLE.parent / "offline-script.yaml", tmp_path / "offline-script.yaml")
    path = tmp_path / "company.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.mark.parametrize(
    "where",
    [
        ("units", 0, "roles", 0, "goal"),
        ("units", 0, "roles", 0, "backstory"),
        ("units", 0, "roles", 0, "responsibilities", 0),
        ("units", 0, "purpose"),
        ("mission",),
        ("policies", 0),
    ],
)
def test_a_persona_text_is_at_most_8000_characters(where: tuple[Any, ...]) -> None:
    assert PERSONA_LIMIT == 8000
    data = _example()
    data["units"][0]["roles"][0].setdefault("responsibilities", ["x"])
    data.setdefault("policies", ["x"])
    parent = data
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = "g" * PERSONA_LIMIT  # type: ignore[index]
    assert _errors(data) == []
    parent[where[-1]] = "g" * (PERSONA_LIMIT + 1)  # type: ignore[index]
    errors = _errors(data)
    assert len(errors) == 1 and "is 8001 characters; the limit is 8000" in errors[0], errors
    assert "ggggg" not in errors[0]  # the refusal does not echo the text


def test_validate_refuses_a_long_goal_naming_its_path(tmp_path: Path) -> None:
    data = _example()
    data["units"][0]["roles"][0]["goal"] = "g" * 3_000_000
    out = CliRunner().invoke(app, ["validate", "--company", str(_write(tmp_path, data))])
    assert out.exit_code == 2, out.stdout
    assert "units[0].roles[0].goal: is 3000000 characters; the limit is 8000" in out.stdout + out.stderr
    assert "valid:" not in out.stdout


def test_a_document_over_the_node_body_cap_is_refused_by_validate() -> None:
    """The limit is the node's: the same number as the HTTP body cap that refuses it there."""
    assert DOCUMENT_LIMIT == MAX_BODY_BYTES == 8 * 1024 * 1024
    data = _example()
    data["policies"] = ["p" * 7000] * 1300  # each entry within the persona limit; 9 MB in all
    errors = _errors(data)
    assert len(errors) == 1 and "(document): the document is" in errors[0], errors
    assert "the limit is 8388608 (8 MiB)" in errors[0]
    data["policies"] = ["p" * 7000] * 1000  # 7 MB: fine
    assert _errors(data) == []


@pytest.mark.parametrize("bad", ["Acme\u202e", "\u2066Acme", "Ac\x00me"])
def test_the_company_name_holds_no_hidden_character(tmp_path: Path, bad: str) -> None:
    data = _example()
    data["name"] = bad
    errors = _errors(data)
    assert len(errors) == 1 and errors[0].startswith("c.yaml: name: holds "), errors
    out = CliRunner().invoke(app, ["validate", "--company", str(_write(tmp_path, data))])
    assert out.exit_code == 2 and "name: holds " in out.stdout + out.stderr
