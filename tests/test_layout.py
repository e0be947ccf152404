"""The layout limits of issue 26 hold, and their checkers catch a breach.

The tree: no module over 500 lines and no function over 80 lines in ``shared/``, ``services/``,
``crewlet/`` (:mod:`tests.support.layout`). The checkers: a planted 501-line module and an 81-line
function are reported (500 and 80 are not); a planted two-module import circle fails
``lint-imports`` with the contract types ``pyproject.toml`` uses (``acyclic_siblings`` and
``layers``), counting an import made only for type checking, and the same package without the
circle passes. ``make test`` runs ``lint-imports`` over the real tree before pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.layout import ALLOW, MAX_FUNCTION_LINES, MAX_MODULE_LINES, check_module, oversize

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_no_module_or_function_in_the_tree_is_over_its_limit() -> None:
    over = oversize(REPO)
    assert not over, "over the size limits (split along what the code does):\n" + "\n".join(map(str, over))


def test_every_allowance_names_something_still_over_its_limit() -> None:
    found = {o.key for o in oversize(REPO, allow={})}
    assert set(ALLOW) <= found, f"stale allow-list entries: {sorted(set(ALLOW) - found)}"


def _module(path: Path, lines: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"X{i} = {i}\n" for i in range(lines)), encoding="utf-8")
    return path


def _function(path: Path, lines: int) -> Path:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    path.write_text(f"def f() -> int:\n{body}    return 0\n", encoding="utf-8")
    return path


def test_a_501_line_module_is_over_and_a_500_line_one_is_not(tmp_path: Path) -> None:
    _module(tmp_path / "shared" / "big.py", MAX_MODULE_LINES + 1)
    _module(tmp_path / "shared" / "fits.py", MAX_MODULE_LINES)
    over = oversize(tmp_path, roots=["shared"], allow={})
    assert [(o.key, o.lines) for o in over] == [("shared/big.py", 501)]
    assert oversize(tmp_path, roots=["shared"], allow={"shared/big.py": "a generated table"}) == []


def test_an_81_line_function_is_over_and_an_80_line_one_is_not(tmp_path: Path) -> None:
    long = check_module(_function(tmp_path / "long.py", MAX_FUNCTION_LINES + 1), "long.py")
    fits = check_module(_function(tmp_path / "fits.py", MAX_FUNCTION_LINES), "fits.py")
    assert [(o.key, o.lines) for o in long] == [("long.py::f", 81)]
    assert fits == []


def test_a_nested_function_counts_in_its_outer_one(tmp_path: Path) -> None:
    inner = "".join(f"            y{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 2))
    path = tmp_path / "nested.py"
    path.write_text(
        f"class C:\n    def outer(self) -> None:\n        def inner() -> None:\n{inner}\n        x = 1\n",
        encoding="utf-8",
    )
    assert [o.key for o in check_module(path, "nested.py")] == ["nested.py::C.outer"]


_CONFIG = """\
[importlinter]
root_package = plantedpkg

[importlinter:contract:circles]
name = No import circle between the modules of one package
type = acyclic_siblings
ancestors =
    plantedpkg

[importlinter:contract:floors]
name = Floors, top to bottom
type = layers
containers =
    plantedpkg
layers =
    high
    low
"""


def _planted(tmp_path: Path, *, circle: bool) -> subprocess.CompletedProcess[str]:
    pkg = tmp_path / "plantedpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A planted package."""\n', encoding="utf-8")
    (pkg / "high.py").write_text("from plantedpkg import low\n\nVALUE = low.VALUE + 1\n", encoding="utf-8")
    back = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from plantedpkg import high\n"
    (pkg / "low.py").write_text((back if circle else "") + "\nVALUE = 1\n", encoding="utf-8")
    config = tmp_path / "contracts.ini"
    config.write_text(_CONFIG, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("circle", [True, False], ids=["circle", "no-circle"])
def test_lint_imports_fails_on_a_planted_circle_and_passes_without_it(tmp_path: Path, circle: bool) -> None:
    run = _planted(tmp_path, circle=circle)
    report = run.stdout + run.stderr
    if circle:
        assert run.returncode == 1, report
        assert "No import circle between the modules of one package BROKEN" in report
        assert "Floors, top to bottom BROKEN" in report
    else:
        assert run.returncode == 0, report
        assert "2 kept, 0 broken" in report
