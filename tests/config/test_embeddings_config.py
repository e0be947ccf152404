"""``providers.embeddings`` validates for real (AG-10): the refusals name the key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crewlet.cli import app
from shared.config import _company_api as api
from shared.config import _company_deep

from .test_company import EXAMPLE, errors, example_data


def _with(entry: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(example_data())
    data["providers"]["embeddings"] = entry
    return data


def test_validate_names_base_url_and_dimensions(tmp_path: Path) -> None:
    data = _with({"type": "openai-compatible", "model": "x"})
    path = tmp_path / "company.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    (tmp_path / "offline-script.yaml").write_text((EXAMPLE.parent / "offline-script.yaml").read_text())
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "providers.embeddings.base_url" in result.output
    assert "providers.embeddings.dimensions" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("dims", [1, 63, 4097])
def test_a_width_out_of_range_is_refused_by_name(dims: int) -> None:
    issues = api.validate_company_data(
        _with({"type": "openai", "model": "text-embedding-3-small", "dimensions": dims})
    )[1]
    assert ("providers.embeddings.dimensions", "out_of_range") in errors(issues)


def test_known_models_and_local_validate() -> None:
    for entry in (
        {"type": "openai", "model": "text-embedding-3-small"},
        {"type": "openai-compatible", "model": "scripted-hash-256", "base_url": "http://127.0.0.1:1/v1"},
        {"type": "openai-compatible", "model": "mine", "base_url": "http://h/v1", "dimensions": 64},
        {"type": "local"},
    ):
        company, issues = api.validate_company_data(_with(entry))
        assert company is not None, [i.line() for i in issues]


def test_local_without_its_package_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_company_deep.importlib.util, "find_spec", lambda name, *a: None)
    issues = api.validate_company_data(_with({"type": "local"}))[1]
    lines = [i.line() for i in issues]
    assert ("providers.embeddings.type", "invalid") in errors(issues)
    assert any("pip install wordllama" in line for line in lines)


def test_local_runs_wordllama_models_only() -> None:
    issues = api.validate_company_data(_with({"type": "local", "model": "bert/base"}))[1]
    assert ("providers.embeddings.model", "invalid") in errors(issues)
