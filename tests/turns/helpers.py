"""Building blocks shared by the turn, provider and telemetry tests: the example company with
its providers swapped for scripted ones, and an engine over it."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import yaml

from shared import config, providers, turns
from shared.config import OrgModel
from tests.support.procs import REPO

EXAMPLES = REPO / "examples"
GITHUB_ISSUE = REPO.parent / "shared" / "data" / "github-webhooks" / "issues.opened.json"


def example_data() -> dict[str, Any]:
    """The example company document (section 6.4) as plain data."""
    data = yaml.safe_load((EXAMPLES / "company.yaml").read_text())
    assert isinstance(data, dict)
    return data


def make_org(data: dict[str, Any], env: dict[str, str] | None = None) -> OrgModel:
    """Validate ``data``, resolve its secrets from ``env`` (default: none set) and build the org."""
    company, issues = config.validate_company_data(copy.deepcopy(data))
    assert company is not None, issues
    resolved, _ = config.resolve_secrets(company, env or {})
    return OrgModel.from_company(resolved)


def example_org() -> OrgModel:
    """The example company, no secrets set: only the offline entry is usable."""
    return make_org(example_data())


def with_providers(
    llm: dict[str, Any], chain: str | list[str], *, seats: tuple[str, ...] = ("lead", "triage")
) -> dict[str, Any]:
    """The example company with ``providers.llm`` replaced and ``seats`` using ``chain``."""
    data = example_data()
    data["providers"]["llm"] = llm
    for unit in data["units"]:
        for role in unit["roles"]:
            if role.get("handle") in seats:
                role["llm"] = chain
    return data


def engine(org: OrgModel, *, env: dict[str, str] | None = None, **kwargs: Any) -> turns.TurnEngine:
    """A turn engine over ``org`` whose offline script is the example one."""
    built = providers.build_providers(org.company, base_dir=EXAMPLES, env=env or {})
    return turns.TurnEngine(org, built, **kwargs)


def api_trigger(text: str = "Please look at this", **kwargs: Any) -> turns.Trigger:
    """An API message trigger with a fresh event id."""
    return turns.Trigger(
        event_id=str(uuid.uuid4()), type="external_notification", source="api", text=text, **kwargs
    )


def wake(key: str) -> turns.Trigger:
    """A tracker wake: ``external_notification{source: work, reason: assigned, work_item}`` (CO-10)."""
    return turns.Trigger(
        event_id=str(uuid.uuid4()),
        type="external_notification",
        source="work",
        reason="assigned",
        work_item={"key": key},
    )


def github_issue_text(path: Path = GITHUB_ISSUE) -> str:
    """The text a GitHub ``issues.opened`` delivery becomes: title, blank line, body."""
    import json

    issue = json.loads(path.read_text())["issue"]
    return f"{issue['title']}\n\n{issue['body']}"
