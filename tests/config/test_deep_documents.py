"""A document nested absurdly deep is refused by name, never a traceback (issue 38): ``crewlet
validate`` and ``crewlet config import --dry-run`` printed a ``RecursionError`` traceback for a
company whose ``name`` was a list nested 500 deep (the node's ``PUT /config`` already said 400)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crewlet.cli import app
from shared.config import ConfigInvalid, read_yaml_mapping


@pytest.mark.parametrize("depth", [70, 500, 5000])
def test_validate_refuses_deep_nesting(tmp_path: Path, depth: int) -> None:
    doc = tmp_path / "deep.yaml"
    doc.write_text("name: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigInvalid) as e:
        read_yaml_mapping(doc)
    assert "nested too deeply (more than 64 levels)" in str(e.value.issues[0].message)
    for args in (["validate", "--company", str(doc)], ["config", "import", str(doc), "--dry-run"]):
        out = CliRunner().invoke(app, args, env={"CREWLET_API_TOKEN": "t" * 32})
        assert out.exit_code == 2, (args, out.stdout, out.stderr)
        assert "nested too deeply (more than 64 levels)" in out.stdout + out.stderr
        assert "Traceback" not in out.stdout + out.stderr and "RecursionError" not in out.stdout + out.stderr


def test_sixty_levels_are_fine(tmp_path: Path) -> None:
    doc = tmp_path / "ok.yaml"
    doc.write_text("name: " + "[" * 60 + "]" * 60 + "\n")
    assert isinstance(read_yaml_mapping(doc), dict)
