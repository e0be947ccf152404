"""The company document (Tier B): validation (CO-1), org model (CO-2), secrets (CO-5), compat (CO-43)."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crewlet.cli import app
from shared.config import _company_api as api
from shared.config._issues import ConfigInvalid, Issue

from .conftest import REPO

EXAMPLE = REPO / "examples" / "company.yaml"


def example_data() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def errors(issues: list[Issue]) -> set[tuple[str, str]]:
    return {(i.path, i.type) for i in issues if i.severity == "error"}


def check(data: dict[str, Any], **kw: Any) -> list[Issue]:
    company, issues = api.validate_company_data(data, file="company.yaml", **kw)
    assert (company is None) == any(i.severity == "error" for i in issues)
    return issues


def org_of(data: dict[str, Any]) -> api.OrgModel:
    company, issues = api.validate_company_data(data)
    assert company is not None, [i.line() for i in issues]
    return api.OrgModel.from_company(company)


# --- CO-1: the document and its validation -------------------------------------------------------


def test_example_company_validates_with_its_offline_script() -> None:
    company, issues = api.validate_company_file(EXAMPLE)
    assert issues == []
    assert company is not None
    assert company.name == "Lanternfish Labs"
    assert api.load_company_file(EXAMPLE) == company


def test_example_github_webhook_entry() -> None:
    company = api.load_company_file(EXAMPLE)
    github = [w for w in company.integrations.webhooks if w.source == "github"]
    assert len(github) == 1
    hook = github[0]
    assert (hook.route_to, hook.secret) == ("triage", "${GITHUB_WEBHOOK_SECRET}")
    assert (hook.delivery_header, hook.text_pointer) == ("X-GitHub-Delivery", "/issue/title")
    assert hook.signature_header == "X-Hub-Signature-256"
    forms = company.integrations.webhooks[0]
    assert forms.delivery_header == api.DEFAULT_DELIVERY_HEADER  # CO-9's default
    assert api.OrgModel.from_company(company).webhook_route("github") == "triage"


def test_backstroy_is_one_unknown_field_error() -> None:
    data = example_data()
    data["units"][0]["roles"][0]["backstroy"] = "typo"
    issues = check(data)
    assert [(i.path, i.type) for i in issues] == [("units[0].roles[0].backstroy", "unknown_field")]
    assert issues[0].file == "company.yaml"


def test_references_are_kept_verbatim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-real")
    company, _ = api.validate_company_data(example_data())
    assert company is not None
    assert company.providers.llm["claude"].api_keys == ["${ANTHROPIC_API_KEY}"]


MutateFn = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> MutateFn:
    def mutate(data: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split("/")]
        at: Any = data
        for key in keys[:-1]:
            at = at[key]
        at[keys[-1]] = value

    return mutate


def _append(path: str, value: Any) -> MutateFn:
    def mutate(data: dict[str, Any]) -> None:
        at: Any = data
        for key in path.split("/"):
            at = at[int(key) if key.isdigit() else key]
        at.append(value)

    return mutate


CASES: list[tuple[str, MutateFn, str, str]] = [
    ("dangling lead", _set("units/0/lead", "nobody"), "units[0].lead", "unknown_value"),
    ("lead naming a unit", _set("units/0/lead", "support"), "units[0].lead", "invalid"),
    ("dangling manages", _set("roles/0/manages", ["lead", "ghost"]), "roles[0].manages[1]", "unknown_value"),
    (
        "duplicate handle",
        _append("units/1/roles", {"name": "Second Dev", "handle": "dev"}),
        "units[1].roles[1].handle",
        "conflict",
    ),
    (
        "duplicate derived handle",
        _append("units/1/roles", {"name": "Docs"}),
        "units[1].roles[1].name",
        "conflict",
    ),
    ("handle grammar", _set("units/0/roles/1/handle", "Dev_1"), "units[0].roles[1].handle", "invalid"),
    (
        "derived handle grammar",
        _append("units/1/roles", {"name": "???"}),
        "units[1].roles[1].name",
        "invalid",
    ),
    ("duplicate unit id", _set("units/1/id", "eng"), "units[1].id", "conflict"),
    ("manager cycle", _set("units/0/roles/1/manages", ["lead"]), "units[0].roles[1].manages[0]", "conflict"),
    ("manages itself", _set("units/0/roles/0/manages", ["lead"]), "units[0].roles[0].manages[0]", "conflict"),
    (
        "unknown llm key",
        _set("units/0/roles/0/llm", ["default", "gpt"]),
        "units[0].roles[0].llm[1]",
        "unknown_value",
    ),
    ("unknown llm scalar", _set("units/0/roles/1/llm", "gpt"), "units[0].roles[1].llm", "unknown_value"),
    (
        "unknown per-phase llm",
        _set("units/0/roles/1/llm", {"default": "claude", "review": ["nope"]}),
        "units[0].roles[1].llm.review[0]",
        "unknown_value",
    ),
    ("llm of wrong shape", _set("units/0/roles/1/llm", 7), "units[0].roles[1].llm", "shape"),
    ("project key grammar", _set("units/0/project", "eng"), "units[0].project", "invalid"),
    ("space key grammar", _set("units/0/space", "E"), "units[0].space", "invalid"),
    ("duplicate project key", _set("units/1/project", "ENG"), "units[1].project", "conflict"),
    ("duplicate space key", _set("units/1/space", "ENG"), "units[1].space", "conflict"),
    ("timezone Local", _set("timezone", "Local"), "timezone", "invalid"),
    ("timezone localtime", _set("timezone", "localtime"), "timezone", "invalid"),
    ("timezone unknown", _set("timezone", "Mars/Olympus_Mons"), "timezone", "unknown_value"),
    ("human with placement", _set("roles/0/placement", {"node": "node-1"}), "roles[0].placement", "conflict"),
    (
        "node pin grammar",
        _set("units/0/roles/1/placement", {"node": "-a"}),
        "units[0].roles[1].placement.node",
        "invalid",
    ),
    (
        "node pin is not resolved",
        _set("units/0/roles/1/placement", {"node": "${NODE}"}),
        "units[0].roles[1].placement.node",
        "invalid",
    ),
    (
        "label key too long",
        _set("units/0/roles/1/placement", {"labels": {"k" * 64: "x"}}),
        "units[0].roles[1].placement.labels." + "k" * 64,
        "invalid",
    ),
    (
        "label value with whitespace",
        _set("units/0/roles/1/placement", {"labels": {"zone": " eu"}}),
        "units[0].roles[1].placement.labels.zone",
        "invalid",
    ),
    (
        "webhook to a human",
        _set("integrations/webhooks/0/route_to", "founder"),
        "integrations.webhooks[0].route_to",
        "invalid",
    ),
    (
        "webhook to nothing",
        _set("integrations/webhooks/0/route_to", "nobody"),
        "integrations.webhooks[0].route_to",
        "unknown_value",
    ),
    (
        "duplicate webhook source",
        _set("integrations/webhooks/1/source", "forms"),
        "integrations.webhooks[1].source",
        "conflict",
    ),
    (
        "github unmatched to a human",
        _set("integrations/github/route_unmatched_to", "founder"),
        "integrations.github.route_unmatched_to",
        "invalid",
    ),
    (
        "offline without script",
        _set("providers/llm/default/script", None),
        "providers.llm.default.script",
        "missing",
    ),
    (
        "offline with another model",
        _set("providers/llm/default/model", "gpt-4o"),
        "providers.llm.default.model",
        "invalid",
    ),
    (
        "openai-compatible without base_url",
        _set("providers/llm/local/base_url", None),
        "providers.llm.local.base_url",
        "missing",
    ),
    (
        "vendor without model",
        _set("providers/llm/claude/model", None),
        "providers.llm.claude.model",
        "missing",
    ),
    (
        "unknown provider type",
        _set("providers/llm/claude/type", "gemini"),
        "providers.llm.claude.type",
        "unknown_value",
    ),
    ("no providers", _set("providers/llm", {}), "providers.llm", "missing"),
    ("P2 block", _set("workers", {"researcher": {}}), "workers", "unknown_field"),
    (
        "P2 turn_engine key",
        _set("turn_engine/extension_enabled", True),
        "turn_engine.extension_enabled",
        "unknown_field",
    ),
    ("missing name", _set("name", None), "name", "shape"),
    ("wrong shape", _set("units/0/goals", "ship it"), "units[0].goals", "shape"),
    (
        "string for a number",
        _set("turn_engine/max_tool_rounds", "24"),
        "turn_engine.max_tool_rounds",
        "shape",
    ),
    ("zero budget", _set("token_budget", {"day": 0}), "token_budget.day", "out_of_range"),
    ("unknown kind", _set("roles/0/kind", "robot"), "roles[0].kind", "unknown_value"),
    (
        "coalesce window",
        _set("notification_coalesce_window_seconds", 61),
        "notification_coalesce_window_seconds",
        "out_of_range",
    ),
    (
        "bad cron",
        _set("units/0/schedules", [{"name": "d", "cron": "0 9 * *", "task": "t"}]),
        "units[0].schedules[0].cron",
        "invalid",
    ),
    (
        "mcp_env for no server",
        _set("units/0/mcp_env", {"github": {"T": "x"}}),
        "units[0].mcp_env.github",
        "unknown_value",
    ),
    (
        "text pointer",
        _set("integrations/webhooks/0/text_pointer", "message"),
        "integrations.webhooks[0].text_pointer",
        "invalid",
    ),
]


@pytest.mark.parametrize(("mutate", "path", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_deep_and_shape_check(mutate: MutateFn, path: str, kind: str) -> None:
    data = example_data()
    mutate(data)
    assert errors(check(data)) == {(path, kind)}


def test_missing_keys_are_named() -> None:
    data = example_data()
    del data["name"]
    del data["providers"]
    assert errors(check(data)) == {("name", "missing"), ("providers", "missing")}


def test_every_bad_label_key_is_reported_in_stable_order() -> None:
    # FL-58: a document with three bad keys reports all three, identically on two runs.
    data = example_data()
    data["units"][0]["roles"][1]["placement"] = {"labels": {"a b": "x", "": "y", "k" * 64: "z", "ok": "v"}}
    first = check(data)
    assert len(first) == 3
    assert {i.path for i in first} == {
        'units[0].roles[1].placement.labels["a b"]',
        'units[0].roles[1].placement.labels[""]',
        "units[0].roles[1].placement.labels." + "k" * 64,
    }
    assert check(copy.deepcopy(data)) == first


SEVERAL_MISTAKES = """\
name: Several Mistakes Inc
timezone: localtime
providers:
  llm:
    default: {type: offline, model: crewlet-offline-1}
units:
  - name: Engineering
    lead: Boss
    project: eng
    roles:
      - {name: Lead, backstroy: typo, manages: [dev]}
      - {name: Dev, manages: [lead], goal: 5}
      - {name: Dev}
integrations:
  webhooks:
    - {source: forms, route_to: ghost}
learning: {enabled: true}
"""

SEVERAL_EXPECTED = [
    ("integrations.webhooks[0].route_to", "unknown_value"),
    ("providers.llm.default.script", "missing"),
    ("timezone", "invalid"),
    ("units[0].lead", "unknown_value"),
    ("units[0].project", "invalid"),
    ("units[0].roles[0].backstroy", "unknown_field"),
    ("units[0].roles[0].manages[0]", "conflict"),
    ("units[0].roles[1].goal", "shape"),
    ("units[0].roles[2].name", "conflict"),
]


def test_several_mistakes_reported_in_one_pass_in_stable_order() -> None:
    data = yaml.safe_load(SEVERAL_MISTAKES)
    first = check(data)
    assert [(i.path, i.type) for i in first] == SEVERAL_EXPECTED
    assert check(yaml.safe_load(SEVERAL_MISTAKES)) == first


def test_load_company_file_raises_every_issue_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "company.yaml"
    path.write_text(SEVERAL_MISTAKES, encoding="utf-8")
    with pytest.raises(ConfigInvalid) as caught:
        api.load_company_file(path)
    assert [(i.path, i.type) for i in caught.value.issues] == SEVERAL_EXPECTED
    assert {i.file for i in caught.value.issues} == {str(path)}


@pytest.mark.parametrize(
    ("text", "kind"),
    [(None, "missing"), ("", "missing"), ("name: [unclosed\n", "invalid"), ("- a\n- b\n", "shape")],
    ids=["no file", "empty", "syntax error", "not a mapping"],
)
def test_load_company_file_unreadable(tmp_path: Path, text: str | None, kind: str) -> None:
    path = tmp_path / "company.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigInvalid) as caught:
        api.load_company_file(path)
    assert [(i.file, i.type) for i in caught.value.issues] == [(str(path), kind)]


def test_offline_script_is_checked_beside_the_company_file(tmp_path: Path) -> None:
    path = tmp_path / "company.yaml"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ConfigInvalid) as caught:
        api.load_company_file(path)
    assert [(i.file, i.path, i.type) for i in caught.value.issues] == [
        (str(path), "providers.llm.default.script", "missing")
    ]
    script = tmp_path / "offline-script.yaml"
    script.write_text(
        "rules:\n"
        "  - when: {seat: ghost}\n"
        "    steps: [{tool: t, args: {a: '{trigger.nope}', b: '{result[0].key}'}}]\n"
        "    final: '{result[1].key}'\n"
        "    extra: 1\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigInvalid) as caught:
        api.load_company_file(path)
    assert [(i.file, i.path, i.type) for i in caught.value.issues] == [
        (str(script), "rules[0].extra", "unknown_field"),
        (str(script), "rules[0].final", "out_of_range"),
        (str(script), "rules[0].steps[0].args.a", "invalid"),
        (str(script), "rules[0].steps[0].args.b", "out_of_range"),
        (str(script), "rules[0].when.seat", "unknown_value"),
    ]


def test_example_offline_script_loads() -> None:
    script = api.load_offline_script(REPO / "examples" / "offline-script.yaml")
    seats = [r.when.seat for r in script.rules]
    assert seats == ["triage", "triage", None, None, None] + ["triage"] * 4 + ["lead", "dev", "docs"]
    assert [r.when.source for r in script.rules[:5]] == ["github", "github", "github", "work", "work"]
    assert [r.when.text_matches is not None for r in script.rules[5:9]] == [True, True, True, False]
    assert script.rules[9].steps[2].tool == "comment_on_work_item"
    assert script.default.final == "No rule matched; nothing done."


# --- CO-2: the org model -------------------------------------------------------------------------


def test_example_org() -> None:
    org = org_of(example_data())
    assert [s.handle for s in org.seats] == ["lead", "dev", "docs", "triage"]
    assert [h.handle for h in org.humans] == ["founder"]
    assert org.managers_of("dev") == ("lead",)
    assert org.managers_of("docs") == ("lead",)
    assert org.managers_of("lead") == ("founder",)
    assert org.reports_of("founder") == ("lead", "triage")
    assert org.reports_of("lead") == ("dev", "docs")
    assert org.managers_of("triage") == ("founder",)  # triage leads support: not its own manager
    assert org.effective_lead("eng") == "lead"
    assert org.effective_lead("support") == "triage"
    assert org.project_keys == {"ENG": "eng", "SUP": "support"}
    assert org.space_keys == {"ENG": "eng", "SUP": "support"}
    founder = org.seat("founder")
    assert founder is not None and founder.kind == "human" and founder.unit_id is None
    dev = org.seat("dev")
    assert dev is not None and dev.unit_id == "eng" and dev.role.goal.startswith("Fix defects")
    assert org.seat("nobody") is None
    assert org.webhook_route("forms") == "triage"
    assert org.webhook_route("nope") is None


def test_derivation_of_handles_and_unit_ids() -> None:
    assert api.derive_slug("Support Triage") == "support-triage"
    assert api.derive_slug("  R&D -- Team #2 ") == "r-d-team-2"
    data = example_data()
    data["units"][1]["roles"][0].pop("handle")
    data["units"][1].pop("id")
    data["units"][1]["lead"] = "support-triage"
    data["roles"][0]["manages"] = ["lead", "support-triage"]
    data["integrations"]["webhooks"] = []
    data["integrations"]["github"]["route_unmatched_to"] = "support"  # the unit id: its lead
    org = org_of(data)
    assert org.seat("support-triage") is not None
    assert org.effective_lead("support") == "support-triage"
    assert org.resolve("support") == "support-triage"


def test_agent_id_is_uuid5_over_name_and_handle_and_stable_across_processes() -> None:
    import uuid

    here = api.agent_id("Lanternfish Labs", "lead")
    assert here == uuid.uuid5(api.CREWLET_AGENT_NS, "Lanternfish Labs:lead")
    code = "from shared.config._company_api import agent_id; print(agent_id('Lanternfish Labs', 'lead'))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == str(here)
    assert api.agent_id("Lanternfish Labs", "dev") != here
    assert api.agent_id("Lanternfish Lab", "lead") != here
    assert org_of(example_data()).seat("lead").agent_id == here  # type: ignore[union-attr]


def test_manager_cycle_is_a_conflict() -> None:
    data = example_data()
    data["units"][0]["roles"][0]["manages"] = ["dev"]
    data["units"][0]["roles"][1]["manages"] = ["lead"]
    issues = check(data)
    assert [(i.type, i.message) for i in issues] == [("conflict", "manager cycle: lead → dev → lead")]


def test_unit_without_lead_inherits_the_effective_lead() -> None:
    data = example_data()
    data["units"][0]["children"] = [
        {"name": "Release Crew", "roles": [{"name": "Releaser"}], "children": [{"name": "Deep"}]}
    ]
    org = org_of(data)
    assert org.effective_lead("release-crew") == "lead"
    assert org.effective_lead("deep") == "lead"
    assert org.managers_of("releaser") == ("lead",)
    unit = org.unit("release-crew")
    assert unit is not None and unit.lead is None and unit.parent_id == "eng" and unit.children == ("deep",)


def test_lead_rule_skips_roles_managed_inside_the_unit() -> None:
    data = example_data()
    data["units"][0]["roles"][2]["manages"] = ["dev"]  # docs manages dev
    org = org_of(data)
    assert org.managers_of("dev") == ("docs",)
    assert org.managers_of("docs") == ("lead",)


def test_several_managers_and_unit_expansion() -> None:
    data = example_data()
    data["units"][1]["roles"][0]["manages"] = ["dev"]  # from another unit: lead keeps dev too
    data["roles"][0]["manages"] = ["eng", "support"]  # units expand to every seat in them
    org = org_of(data)
    assert org.managers_of("dev") == ("founder", "lead", "triage")
    assert org.reports_of("founder") == ("lead", "dev", "docs", "triage")


def test_lead_managing_its_own_unit_is_not_a_cycle() -> None:
    data = example_data()
    data["units"][0]["roles"][0]["manages"] = ["eng"]
    org = org_of(data)
    assert org.reports_of("lead") == ("dev", "docs")


def test_seat_wins_over_unit_with_the_same_name() -> None:
    data = example_data()
    data["units"][1]["children"] = [{"id": "dev", "name": "Dev Unit", "roles": [{"name": "Helper"}]}]
    data["roles"][0]["manages"] = ["dev"]
    org = org_of(data)
    assert org.reports_of("founder") == ("dev",)
    assert org.managers_of("helper") == ("triage",)  # inherited lead of support


def test_deep_checks_run_beside_shape_errors() -> None:
    data = example_data()
    data["units"][0]["roles"][1]["goal"] = ["not", "a", "string"]
    data["units"][0]["lead"] = "nobody"
    data["roles"] = "not a list"
    assert errors(check(data)) == {
        ("roles", "shape"),
        ("units[0].roles[1].goal", "shape"),
        ("units[0].lead", "unknown_value"),
    }


# --- CO-5: secret references ---------------------------------------------------------------------


def test_resolve_secrets_reports_unset_and_blanks_them() -> None:
    company = api.load_company_file(EXAMPLE)
    env = {"ANTHROPIC_API_KEY": "sk-ant", "LOCAL_LLM_KEY": "local", "GITHUB_WEBHOOK_SECRET": "gh"}
    resolved, unresolved = api.resolve_secrets(company, env)
    assert unresolved == [("integrations.webhooks[0].secret", "FORMS_WEBHOOK_SECRET")]
    assert resolved.integrations.webhooks[0].secret == ""
    assert resolved.integrations.webhooks[1].secret == "gh"
    assert resolved.providers.llm["claude"].api_keys == ["sk-ant"]
    assert company.providers.llm["claude"].api_keys == ["${ANTHROPIC_API_KEY}"]  # untouched
    assert api.inert_paths(resolved) == api.inert_paths(company) == []  # integrations.github is built (CO-35)


# --- CO-43: the upstream documents, as they are --------------------------------------------------


def test_upstream_minimal_strict(upstream_dir: Path) -> None:
    company, issues = api.validate_company_file(upstream_dir / "minimal.company.yaml")
    assert company is None
    assert errors(issues) == {("providers", "missing"), ("units[0].lead", "unknown_value")}
    lead = next(i for i in issues if i.path == "units[0].lead")
    assert "'engineer'" in lead.message and "--compat" in lead.message


def test_upstream_minimal_compat(upstream_dir: Path) -> None:
    company, issues = api.validate_company_file(upstream_dir / "minimal.company.yaml", compat=True)
    assert company is not None
    assert [(i.path, i.type, i.severity) for i in issues] == [("providers.llm", "missing", "warning")]
    assert company.units[0].lead == "engineer"
    org = api.OrgModel.from_company(company)
    assert [s.handle for s in org.seats] == ["engineer"]
    assert org.effective_lead("core") == "engineer"


def test_upstream_fixture_strict(upstream_dir: Path) -> None:
    path = upstream_dir / "fixture.company.yaml"
    with pytest.raises(ConfigInvalid) as caught:
        api.load_company_file(path)
    assert [(i.path, i.type) for i in caught.value.issues] == [
        ("extensions", "unknown_field"),
        ("units[0].children[0].lead", "unknown_value"),
        ("units[0].knowledge", "unknown_field"),
        ("units[1].children[0].lead", "unknown_value"),
    ]
    assert {i.file for i in caught.value.issues} == {str(path)}


def test_upstream_fixture_compat(upstream_dir: Path) -> None:
    path = upstream_dir / "fixture.company.yaml"
    company, issues = api.validate_company_file(path, compat=True)
    assert company is not None
    assert [(i.path, i.type, i.severity) for i in issues] == [
        ("extensions", "unknown_field", "warning"),
        ("units[0].knowledge", "unknown_field", "warning"),
    ]
    source = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert company.policies == source["policies"] and company.mission == source["mission"]
    org = api.OrgModel.from_company(company)
    assert [(u.id, u.parent_id, u.effective_lead) for u in org.units] == [
        ("engineering", None, None),
        ("backend", "engineering", "tech-lead"),
        ("product", None, None),
        ("product-management", "product", "product-manager"),
    ]
    assert [s.name for s in org.seats] == [
        "Tech Lead",
        "Senior Engineer",
        "Junior Engineer",
        "Product Manager",
    ]
    assert org.managers_of("junior-engineer") == ("tech-lead",)
    assert company.units[0].children[0].lead == "tech-lead"  # rewritten to the handle


@pytest.mark.parametrize("name", ["fixture.company.yaml", "minimal.company.yaml"])
def test_upstream_company_documents_load_with_compat_warnings_only(upstream_dir: Path, name: str) -> None:
    path = upstream_dir / name
    result = CliRunner().invoke(app, ["validate", "--compat", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[-1] == f"valid: {path}"
    assert lines[:-1] and all(": warning: " in line for line in lines[:-1])


def test_upstream_node_file_is_not_a_company_document(upstream_dir: Path) -> None:
    # node.config.yaml is upstream's Tier A bootstrap file (Pulsar, PostgreSQL, API); --compat is
    # about the company document, so it is refused by tier, never read as a company.
    result = CliRunner().invoke(app, ["validate", "--compat", str(upstream_dir / "node.config.yaml")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "cannot tell the tier" in result.stderr


def test_compat_still_refuses_typos() -> None:
    data = example_data()
    data["units"][0]["roles"][0]["backstroy"] = "typo"
    data["learning"] = {"enabled": True}
    issues = check(data, compat=True)
    assert [(i.path, i.type, i.severity) for i in issues] == [  # learning validates (AG §13.9)
        ("units[0].roles[0].backstroy", "unknown_field", "error"),
    ]


# --- schema and exports --------------------------------------------------------------------------


def test_json_schema_publishes_the_patterns() -> None:
    schema = api.company_json_schema()
    defs = schema["$defs"]
    assert schema["additionalProperties"] is False
    assert defs["CompanyRole"]["properties"]["handle"]["anyOf"][0]["pattern"] == api.HANDLE_PATTERN
    placement = defs["Placement"]["properties"]
    assert placement["labels"]["propertyNames"]["pattern"] == api.LABEL_KEY_PATTERN
    assert placement["node"]["anyOf"][0]["pattern"] == api.NODE_ID_PATTERN
    assert defs["Unit"]["properties"]["project"]["anyOf"][0]["pattern"] == api.KEY_PATTERN
    assert "name" in schema["required"] and "providers" in schema["required"]


def test_public_names() -> None:
    assert sorted(api.__all__) == sorted(
        [
            "CREWLET_AGENT_NS",
            "DEFAULT_DELIVERY_HEADER",
            "DOCUMENT_LIMIT",
            "EMBEDDING_WIDTHS",
            "EMBEDDING_WIDTH_RANGE",
            "LOCAL_EMBEDDING_MODEL",
            "HANDLE_PATTERN",
            "KEY_PATTERN",
            "LABEL_KEY_PATTERN",
            "NODE_ID_PATTERN",
            "OFFLINE_MODEL",
            "PERSONA_LIMIT",
            "SOURCE_PATTERN",
            "Company",
            "CompanyRole",
            "Contact",
            "Cooldowns",
            "Embeddings",
            "GitHubIntegration",
            "Identities",
            "Integrations",
            "Learning",
            "LearningCounterparty",
            "LearningReflect",
            "LlmPhases",
            "LlmProvider",
            "McpServer",
            "OfflineDefault",
            "OfflineRule",
            "OfflineScript",
            "OfflineStep",
            "OfflineWhen",
            "OrgModel",
            "OrgUnit",
            "Placement",
            "Providers",
            "Schedule",
            "Scheduling",
            "Seat",
            "TokenBudget",
            "Tracker",
            "TrackerType",
            "TurnEngine",
            "Unit",
            "UnitSchedule",
            "Webhook",
            "agent_id",
            "company_json_schema",
            "derive_slug",
            "inert_paths",
            "load_company_file",
            "load_offline_script",
            "offline_script_issues",
            "resolve_secrets",
            "unresolved_issues",
            "validate_company_data",
            "validate_company_file",
            "validate_offline_script_data",
        ]
    )
    for name in api.__all__:
        assert hasattr(api, name), name
