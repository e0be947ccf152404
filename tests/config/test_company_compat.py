"""The compatibility import of upstream shapes (CO-43) and ``scheduling.default_timezone`` (CO-33)."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from croniter import croniter
from typer.testing import CliRunner

from crewlet.cli import app
from services.workers.scheduler import due_fires
from shared.config import _company_api as api
from shared.config._issues import Issue

SHAPES = Path(__file__).parent / "data" / "compat-shapes.company.yaml"

# Every block of SHAPES the compat import drops (d) or maps (m), by path: one warning each.
SHAPES_PATHS = {
    "skill_variables": "d",
    "token_budget": "m",
    "turn_engine.plan_max_tool_rounds_ceiling": "d",
    "units[0].children[0].integrations": "d",
    "units[0].children[0].learning": "d",
    "units[0].children[0].roles[0].integrations": "d",
    "units[0].children[0].roles[0].sandbox": "d",
    "units[0].children[0].roles[0].skill_variables": "d",
    "units[0].children[0].roles[0].token_budget": "m",
}

# Upstream turn_engine keys crewlet does not model (upstream's TurnEngine; section 6.5).
UPSTREAM_TURN_ENGINE = [
    "plan_max_tool_rounds",
    "plan_max_tool_rounds_ceiling",
    "execute_max_tool_rounds_ceiling",
    "onboarding_max_tool_rounds",
    "onboarding_max_tool_rounds_ceiling",
    "extension_enabled",
    "extension_round_step",
    "subagent_max_turns",
    "subagent_timeout_seconds",
    "subagent_budget_fraction",
    "subagent_max_parallel",
    "subagent_batch_timeout_seconds",
    "subagent_min_per_child_tokens",
    "executor_always_on_tools",
    "sandbox_budget_fraction",
    "sandbox_min_budget_tokens",
    "conversation_session",
]


def shapes_data() -> dict[str, Any]:
    data = yaml.safe_load(SHAPES.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def base() -> dict[str, Any]:
    """A small valid company with one nested unit, one seat and one schedule without a zone."""
    return {
        "name": "Tiny",
        "providers": {"llm": {"default": {"type": "openai", "model": "gpt-4o"}}},
        "units": [
            {
                "id": "eng",
                "name": "Engineering",
                "children": [
                    {
                        "id": "backend",
                        "name": "Backend",
                        "lead": "dev",
                        "roles": [
                            {
                                "name": "Dev",
                                "handle": "dev",
                                "schedules": [
                                    {"name": "smoke", "cron": "0 9 * * 1-5", "task": "Run the smoke tests"}
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    }


def check(data: dict[str, Any], *, compat: bool) -> tuple[api.Company | None, list[Issue]]:
    company, issues = api.validate_company_data(data, file="c.yaml", compat=compat)
    assert (company is None) == any(i.severity == "error" for i in issues)
    return company, issues


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


# --- the test document, through the CLI ----------------------------------------------------------


def test_shapes_compat_cli_warns_once_per_block_and_exits_0() -> None:
    result = run_cli("validate", "--compat", str(SHAPES))
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[-1] == f"valid: {SHAPES}"
    warned = lines[:-1]
    prefix = f"{SHAPES}: "
    assert all(line.startswith(prefix) and ": warning: " in line for line in warned), warned
    paths = Counter(line[len(prefix) :].split(": warning: ")[0] for line in warned)
    assert paths == Counter(list(SHAPES_PATHS))  # exactly one line per dropped or mapped block
    for line in warned:
        path, message = line[len(prefix) :].split(": warning: ")
        word = "mapped:" if SHAPES_PATHS[path] == "m" else "unsupported:"
        assert message.startswith(word), line


def test_shapes_strict_cli_exits_2_naming_each_block_with_the_compat_hint() -> None:
    result = run_cli("validate", str(SHAPES))
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    prefix = f"{SHAPES}: "
    lines = result.stderr.splitlines()
    assert all(line.startswith(prefix) for line in lines), lines
    paths = Counter(line[len(prefix) :].split(": ", 1)[0] for line in lines)
    assert paths == Counter(list(SHAPES_PATHS))  # scheduling.default_timezone is not among them
    assert all("--compat" in line for line in lines), lines


def test_shapes_compat_result() -> None:
    company, issues = api.validate_company_file(SHAPES, compat=True)
    assert company is not None, [i.line() for i in issues]
    assert {(i.path, i.type, i.severity) for i in issues} == {
        (path, "shape" if kind == "m" else "unknown_field", "warning") for path, kind in SHAPES_PATHS.items()
    }
    assert company.token_budget == api.TokenBudget(month=1_000_000)
    lead = company.units[0].children[0].roles[0]
    assert lead.token_budget == api.TokenBudget(month=200_000)
    assert company.scheduling.default_timezone == "Asia/Tokyo"
    assert company.turn_engine.max_tool_rounds == 20
    org = api.OrgModel.from_company(company)
    assert [(u.id, u.parent_id, u.effective_lead) for u in org.units] == [
        ("engineering", None, None),
        ("backend", "engineering", "tech-lead"),
    ]
    assert [s.handle for s in org.seats] == ["tech-lead", "engineer"]
    assert company.schedule_timezone(lead.schedules[0]) == "Asia/Tokyo"
    assert company.schedule_timezone(company.units[0].children[0].schedules[0]) == "Asia/Tokyo"


def test_compat_validation_does_not_modify_the_input() -> None:
    data = shapes_data()
    before = copy.deepcopy(data)
    check(data, compat=True)
    assert data == before


# --- each shape on its own -----------------------------------------------------------------------


@pytest.mark.parametrize("key", UPSTREAM_TURN_ENGINE)
def test_each_upstream_turn_engine_key(key: str) -> None:
    data = base()
    data["turn_engine"] = {"max_tool_rounds": 20, key: 1}
    _, strict = check(data, compat=False)
    assert [(i.path, i.type) for i in strict] == [(f"turn_engine.{key}", "unknown_field")]
    assert "--compat" in strict[0].message
    company, compat = check(data, compat=True)
    assert company is not None and company.turn_engine.max_tool_rounds == 20
    assert [(i.path, i.type, i.severity) for i in compat] == [
        (f"turn_engine.{key}", "unknown_field", "warning")
    ]


@pytest.mark.parametrize("key", ["integrations", "skill_variables", "learning"])
def test_unit_blocks_dropped_at_any_depth(key: str) -> None:
    data = base()
    data["units"][0][key] = {"x": 1}
    data["units"][0]["children"][0][key] = {"x": 1}
    paths = {f"units[0].{key}", f"units[0].children[0].{key}"}
    _, strict = check(data, compat=False)
    assert {(i.path, i.type) for i in strict} == {(p, "unknown_field") for p in paths}
    _, compat = check(data, compat=True)
    assert {(i.path, i.severity) for i in compat} == {(p, "warning") for p in paths}


@pytest.mark.parametrize("key", ["integrations", "sandbox", "skill_variables", "learning"])
def test_role_blocks_dropped_at_root_and_at_depth(key: str) -> None:
    data = base()
    data["roles"] = [{"name": "Founder", "handle": "founder", key: {"x": 1}}]
    data["units"][0]["children"][0]["roles"][0][key] = {"x": 1}
    paths = {f"roles[0].{key}", f"units[0].children[0].roles[0].{key}"}
    _, strict = check(data, compat=False)
    assert {(i.path, i.type) for i in strict} == {(p, "unknown_field") for p in paths}
    assert all("--compat" in i.message for i in strict)
    company, compat = check(data, compat=True)
    assert company is not None
    assert {(i.path, i.severity) for i in compat} == {(p, "warning") for p in paths}


def test_a_typo_beside_a_dropped_block_stays_an_error() -> None:
    data = base()
    role = data["units"][0]["children"][0]["roles"][0]
    role["sandbox"] = {"enabled": True}
    role["sandbx"] = {"enabled": True}
    data["turn_engine"] = {"plan_max_tool_rounds_ceilin": 32}
    _, issues = check(data, compat=True)
    assert [(i.path, i.type, i.severity) for i in issues] == [
        ("turn_engine.plan_max_tool_rounds_ceilin", "unknown_field", "error"),
        ("units[0].children[0].roles[0].sandbox", "unknown_field", "warning"),
        ("units[0].children[0].roles[0].sandbx", "unknown_field", "error"),
    ]
    assert all("--compat" not in i.message for i in issues if i.severity == "error")


def test_plain_number_token_budget_maps_onto_the_month() -> None:
    data = base()
    data["token_budget"] = 5000
    _, strict = check(data, compat=False)
    assert [(i.path, i.type) for i in strict] == [("token_budget", "shape")]
    assert "--compat" in strict[0].message and "token_budget.month" in strict[0].message
    company, issues = check(data, compat=True)
    assert company is not None and company.token_budget == api.TokenBudget(month=5000)
    assert [(i.path, i.type, i.severity) for i in issues] == [("token_budget", "shape", "warning")]
    assert issues[0].message.startswith("mapped:") and "token_budget.month" in issues[0].message


def test_upstream_zero_token_budget_means_no_cap() -> None:
    data = base()
    data["token_budget"] = 0
    data["units"][0]["children"][0]["roles"][0]["token_budget"] = 0
    company, issues = check(data, compat=True)
    assert company is not None
    assert company.token_budget is None
    assert company.units[0].children[0].roles[0].token_budget is None
    assert [(i.path, i.severity) for i in issues] == [
        ("token_budget", "warning"),
        ("units[0].children[0].roles[0].token_budget", "warning"),
    ]


@pytest.mark.parametrize("value", [-5, 1.5, True, "1000"])
def test_other_token_budget_values_stay_errors_without_the_hint(value: Any) -> None:
    data = base()
    data["token_budget"] = value
    for compat in (False, True):
        _, issues = check(data, compat=compat)
        assert [(i.path, i.severity) for i in issues] == [("token_budget", "error")]
        assert "--compat" not in issues[0].message


def test_token_budget_mapping_stays_the_strict_shape() -> None:
    data = base()
    data["token_budget"] = {"day": 100, "month": 3000}
    company, issues = check(data, compat=True)
    assert issues == [] and company is not None
    assert company.token_budget == api.TokenBudget(day=100, month=3000)


# --- CO-33: scheduling.default_timezone, in strict mode too ----------------------------------------


def test_default_timezone_is_a_strict_key() -> None:
    data = base()
    data["scheduling"] = {"default_timezone": "America/New_York"}
    company, issues = check(data, compat=False)
    assert issues == [] and company is not None
    assert company.scheduling.default_timezone == "America/New_York"


@pytest.mark.parametrize(
    ("zone", "kind"), [("Local", "invalid"), ("localtime", "invalid"), ("Mars/Olympus", "unknown_value")]
)
def test_default_timezone_is_checked_like_the_company_clock(zone: str, kind: str) -> None:
    data = base()
    data["scheduling"] = {"default_timezone": zone}
    _, issues = check(data, compat=False)
    assert [(i.path, i.type) for i in issues] == [("scheduling.default_timezone", kind)]


@pytest.mark.parametrize(
    ("company_tz", "default_tz", "schedule_tz", "expected"),
    [
        (None, None, None, "UTC"),
        ("Europe/Lisbon", None, None, "Europe/Lisbon"),
        ("Europe/Lisbon", "Asia/Tokyo", None, "Asia/Tokyo"),
        ("Europe/Lisbon", "Asia/Tokyo", "America/New_York", "America/New_York"),
    ],
)
def test_schedule_zone_selection(
    company_tz: str | None, default_tz: str | None, schedule_tz: str | None, expected: str
) -> None:
    data = base()
    if company_tz:
        data["timezone"] = company_tz
    if default_tz:
        data["scheduling"] = {"default_timezone": default_tz}
    if schedule_tz:
        data["units"][0]["children"][0]["roles"][0]["schedules"][0]["timezone"] = schedule_tz
    company, _ = check(data, compat=False)
    assert company is not None
    sched = company.units[0].children[0].roles[0].schedules[0]
    assert company.schedule_timezone(sched) == expected


def test_schedule_without_a_zone_fires_at_the_default_zone_wall_time() -> None:
    data = base()
    data["timezone"] = "Europe/Lisbon"
    data["scheduling"] = {"default_timezone": "Asia/Tokyo"}
    company, _ = check(data, compat=False)
    assert company is not None
    sched = company.units[0].children[0].roles[0].schedules[0]
    # Monday 2025-01-06 08:59:50 in Tokyo is 2025-01-05 23:59:50 UTC.
    instant = datetime(2025, 1, 5, 23, 59, 50, tzinfo=UTC)
    zone = ZoneInfo(company.schedule_timezone(sched))
    nxt = croniter(sched.cron, instant.astimezone(zone)).get_next(datetime)
    assert (nxt.hour, nxt.minute, nxt.tzinfo) == (9, 0, zone)
    assert nxt.astimezone(UTC) == datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
    # The scheduler's tick uses the same zone: one fire, labelled with Tokyo's wall clock.
    org = api.OrgModel.from_company(company)
    tick = timedelta(seconds=10)
    fires = due_fires(org, since=instant, until=instant + timedelta(seconds=20), first=False, tick=tick)
    assert [(f.target, f.label, f.at) for f in fires] == [
        ("dev", "20250106T0900", datetime(2025, 1, 6, 0, 0, tzinfo=UTC))
    ]


def test_without_default_timezone_schedules_keep_the_company_clock() -> None:
    data = base()  # no timezone anywhere: UTC, as before default_timezone existed
    company, _ = check(data, compat=False)
    assert company is not None
    org = api.OrgModel.from_company(company)
    tick = timedelta(seconds=10)
    tokyo_nine = datetime(2025, 1, 5, 23, 59, 50, tzinfo=UTC)
    assert (
        due_fires(org, since=tokyo_nine, until=tokyo_nine + timedelta(seconds=20), first=False, tick=tick)
        == []
    )
    utc_nine = datetime(2025, 1, 6, 8, 59, 50, tzinfo=UTC)
    fires = due_fires(org, since=utc_nine, until=utc_nine + timedelta(seconds=20), first=False, tick=tick)
    assert [f.label for f in fires] == ["20250106T0900"]
