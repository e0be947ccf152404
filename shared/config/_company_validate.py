"""Validating, loading and applying the company document (CO-1, CO-5, CO-43).

Validation is one pass that reports every mistake (CO-1): pydantic checks the shape of the whole
document, and the deep checks run on the plain data beside it, each reading only the parts that
are well-shaped, so a typo in one role does not hide a dangling ``lead`` in another. The result
is sorted with :func:`~shared.config.sort_issues`, so two runs print the same lines.

``${NAME}`` references stay verbatim through validation (no environment is read); they are
resolved at apply time by :func:`resolve_secrets` (CO-5).

The compatibility import (``compat=True``, CO-43) first drops the upstream blocks crewlet does
not run (one ``unsupported`` warning each, as an ``unknown_field`` issue of severity
``warning``) and maps upstream shapes crewlet runs under another name (a plain-number
``token_budget``, one ``mapped`` warning each; see :mod:`shared.config._company_compat`), then
resolves ``lead``/``manages`` by display name too and rewrites them to handles and unit ids, so
the returned company validates strictly. A document with no LLM provider is accepted there with
a warning: its seats read as stopped until a revision adds one (CO-3).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._company import Company
from ._company_compat import drop_p2, p2_hint
from ._company_deep import DeepChecks
from ._company_issues import issues_from_error, join_path
from ._company_org import OrgDraft
from ._env import resolve_tree
from ._issues import ConfigInvalid, Issue, sort_issues
from ._offline_script import validate_offline_script_data
from ._yaml import read_yaml_mapping

__all__ = [
    "DOCUMENT_LIMIT",
    "company_json_schema",
    "inert_paths",
    "load_company_file",
    "offline_script_issues",
    "resolve_secrets",
    "unresolved_issues",
    "validate_company_data",
    "validate_company_file",
]

# Keys whose feature is P1: accepted and inert until built (CO-1, "feature_inert{path}").
# ``token_budget`` is built (CO-37, shared.budgets), ``scheduling`` and ``schedules`` too (CO-33,
# services.workers.scheduler), and so are ``llm_review`` and ``turn_engine.max_iterations`` (CO-30,
# shared.turns), so they are no longer listed.
_P1_COMPANY: tuple[str, ...] = ()

DOCUMENT_LIMIT = 8 * 1024 * 1024
"""The largest company document, in bytes of its JSON (as ``crewlet config import`` sends it): the
node's request body cap (``shared.runtime.MAX_BODY_BYTES``), so a document ``crewlet validate``
passes is one the node takes (issue 38: a 10 MB document printed ``valid:`` and the node refused it)."""


def _too_large(data: Mapping[str, Any], file: str) -> Issue | None:
    try:
        size = len(json.dumps(data, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return None  # the shape checks name what is wrong with it
    if size <= DOCUMENT_LIMIT:
        return None
    return Issue(
        file,
        "",
        "out_of_range",
        f"the document is {size} bytes as JSON; the limit is {DOCUMENT_LIMIT} (8 MiB)",
    )


_P1_ROLE: tuple[str, ...] = ()
_P1_UNIT: tuple[str, ...] = ()


def validate_company_data(
    data: Mapping[str, Any], *, file: str = "", compat: bool = False
) -> tuple[Company | None, list[Issue]]:
    """Validate a company document in one pass (CO-1, CO-2; compat import CO-43).

    Reports every shape error (``unknown_field``, ``missing``, ``shape``, ``unknown_value``,
    ``out_of_range``, ``invalid``) and every deep finding (dangling or name-only references,
    duplicate handles, unit ids, project/space keys and webhook sources, manager cycles as
    ``conflict``, unknown provider keys, provider requirements, placement selectors, webhook
    routes that do not end on an agent seat). ``${NAME}`` references are kept verbatim. A
    document over :data:`DOCUMENT_LIMIT` bytes of JSON is refused alone (``out_of_range``).

    Args:
        data: The parsed YAML document (not modified).
        file: Written into every issue's ``file``.
        compat: Run the compatibility import: drop P2 blocks and map upstream shapes, one
            warning each, resolve references by display name and rewrite them to handles and
            unit ids.

    Returns:
        ``(company, issues)``: the company is None when any issue is an error. Issues (errors and
        warnings) are sorted in the stable report order.
    """
    if not isinstance(data, Mapping):
        return None, [Issue(file, "", "shape", "top level must be a mapping")]
    if (big := _too_large(data, file)) is not None:
        return None, [big]
    work: dict[str, Any] = copy.deepcopy(dict(data))
    issues = drop_p2(work, file) if compat else []
    try:
        Company.model_validate(work)
    except ValidationError as e:
        issues.extend(issues_from_error(e, file=file, hint=p2_hint))
    org = OrgDraft(work, file=file, compat=compat)
    issues.extend(DeepChecks(work, org, file, compat).run())
    issues.extend(org.issues)
    issues = sort_issues(issues)
    if any(i.severity == "error" for i in issues):
        return None, issues
    for where, key, value in org.rewrites:
        where[key] = value  # type: ignore[index]  # dict key or list index, as recorded
    return Company.model_validate(work), issues


def offline_script_issues(
    data: Mapping[str, Any], base: Path, *, file: str = "", compat: bool = False
) -> list[Issue]:
    """Check each offline provider's rules file (CO-15): it exists and is a valid rules file.

    Args:
        data: The company document.
        base: Where a relative ``script`` path resolves (the company file's directory; for a
            revision, the node's company directory).
        file: Written into every issue about the company document.
        compat: Resolve seat references as the compatibility import does (CO-43).

    Returns:
        One issue per problem, each naming ``providers.llm.<key>.script``. A path holding a
        ``${NAME}`` reference is not checked here: it resolves on each node when it applies.
    """
    return _script_issues(data, base, file, compat)


def _script_issues(data: Mapping[str, Any], base: Path, file: str, compat: bool) -> list[Issue]:
    """Check each offline provider's rules file, relative to the company file (CO-15)."""
    providers = data.get("providers")
    llm = providers.get("llm") if isinstance(providers, dict) else None
    if not isinstance(llm, dict):
        return []
    org = OrgDraft(data, compat=compat)
    seats = {r.handle for r in org.roles if r.handle is not None and r.kind == "agent"}
    out: list[Issue] = []
    for key, entry in llm.items():
        if not isinstance(entry, dict) or entry.get("type") != "offline":
            continue
        script = entry.get("script")
        if not isinstance(script, str) or "${" in script:
            continue  # a ${NAME} path resolves per node at apply; the apply checks it there
        path = base / script
        where = join_path(join_path("providers.llm", key), "script")
        try:
            script_data = read_yaml_mapping(path)
        except ConfigInvalid as e:
            out.extend(Issue(file, where, i.type, f"{path}: {i.message}") for i in e.issues)
            continue
        out.extend(validate_offline_script_data(script_data, file=str(path), seats=seats)[1])
    return out


def validate_company_file(
    path: str | Path, *, compat: bool = False, env: Mapping[str, str] | None = None
) -> tuple[Company | None, list[Issue]]:
    """Read and validate a company file, including its offline rules files (CO-1, CO-15).

    The ``crewlet validate`` entry point: it never raises for a bad document.

    Args:
        path: The YAML file.
        compat: See :func:`validate_company_data`.
        env: Given (the CLI's environment), every ``${NAME}`` it leaves unset is a warning
            naming its path (:func:`unresolved_issues`).

    Returns:
        ``(company, issues)`` as :func:`validate_company_data`; every issue names the file it is
        about (the company file, or an offline rules file).
    """
    name = str(path)
    try:
        data = read_yaml_mapping(path)
    except ConfigInvalid as e:
        return None, list(e.issues)
    company, issues = validate_company_data(data, file=name, compat=compat)
    issues = [*issues, *_script_issues(data, Path(path).parent, name, compat)]
    if env is not None and company is not None:  # what the apply resolves: compat's drops are gone
        applied = company.model_dump(mode="json", exclude_unset=True)
        issues += unresolved_issues(applied, env, file=name, where="this shell's environment")
    issues = sort_issues(issues)
    if any(i.severity == "error" for i in issues):
        company = None
    return company, issues


def load_company_file(path: str | Path, *, compat: bool = False) -> Company:
    """Load a company file or refuse it with every error (CO-1).

    Args:
        path: The YAML file; an offline provider's ``script`` is relative to its directory.
        compat: See :func:`validate_company_data`.

    Returns:
        The validated company (warnings, e.g. compat's ``unsupported``, are not returned; use
        :func:`validate_company_file` to see them).

    Raises:
        ConfigInvalid: The file is missing, empty, not YAML, or the document has errors; the
            exception's ``issues`` lists all of them, each naming the file.
    """
    company, issues = validate_company_file(path, compat=compat)
    if company is None:
        raise ConfigInvalid(issues)
    return company


def resolve_secrets(company: Company, env: Mapping[str, str]) -> tuple[Company, list[tuple[str, str]]]:
    """Resolve every ``${NAME}`` in ``company`` from ``env`` at apply time (CO-5).

    Args:
        company: A validated company (references verbatim).
        env: Where names are looked up, usually ``os.environ`` (P1: the secret store first).

    Returns:
        ``(resolved, unresolved)``: a copy with references replaced, an unset one by ``""``;
        and ``(path, name)`` for each unset reference, in document order, for the caller to log
        once per apply as ``secret_unresolved{name, path}``. Never log the resolved copy.

    Raises:
        ConfigInvalid: A resolved value breaks a rule of its key (e.g. a name that resolves to
            ``""``).
    """
    unresolved: list[tuple[str, str]] = []

    def on_unset(path: str, name: str) -> str:
        unresolved.append((path, name))
        return ""

    # exclude_unset keeps which keys the document set (inert_paths reads that).
    resolved = resolve_tree(company.model_dump(mode="json", exclude_unset=True), env, on_unset=on_unset)
    try:
        return Company.model_validate(resolved), unresolved
    except ValidationError as e:
        raise ConfigInvalid(issues_from_error(e, file="")) from None


def unresolved_issues(
    data: Mapping[str, Any], env: Mapping[str, str], *, file: str = "", where: str = "this environment"
) -> list[Issue]:
    """One warning per ``${NAME}`` in ``data`` that ``env`` leaves unset or empty (issue 38).

    Such a value is ``""`` once applied: an LLM key that is not there makes every seat on that
    provider fail ``llm_unavailable``, and ``crewlet validate`` said "valid" and ``config import``
    activated silently. ``${NAME:-default}`` never warns.

    Args:
        data: The company document (plain data).
        env: Where names are looked up (the CLI's environment; the node's secret store over its).
        file: Written into every issue.
        where: Where ``env`` comes from, as the message says it.

    Returns:
        ``missing`` issues of severity ``warning``, each naming the path of the value, in document
        order.
    """
    found: list[Issue] = []
    present = {k: v for k, v in env.items() if v}

    def on_unset(path: str, name: str) -> str:
        message = (
            f"${{{name}}} is not set in {where}: this value is empty once applied "
            f"(set {name}, or store it with crewlet secrets set {name})"
        )
        found.append(Issue(file, path, "missing", message, "warning"))
        return ""

    resolve_tree(dict(data), present, on_unset=on_unset)
    return found


def company_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of the company document (``crewlet schema company``, CO-1).

    Generated from the models the loader uses. It publishes the field patterns (handles, keys,
    placement selectors, FL-58) and may be looser than the validator (the cross-reference rules
    are not expressible), never stricter.
    """
    schema = Company.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "crewlet company document (Tier B)",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def inert_paths(company: Company) -> list[str]:
    """Return the paths of P1 keys the document sets whose features are not built yet (CO-1).

    The apply logs each once as ``feature_inert{path}``.
    """
    out: list[str] = []
    fields = company.model_fields_set
    for key in _P1_COMPANY:
        top, _, sub = key.partition(".")
        if sub:
            holder = getattr(company, top)
            if sub in holder.model_fields_set and getattr(holder, sub) is not None:
                out.append(key)
        elif top in fields and getattr(company, top):
            out.append(key)

    def scan(items: Iterable[Any], path: str, keys: tuple[str, ...]) -> None:
        for i, item in enumerate(items):
            out.extend(f"{path}[{i}].{k}" for k in keys if k in item.model_fields_set and getattr(item, k))

    scan(company.roles, "roles", _P1_ROLE)

    def units(items: list[Any], path: str) -> None:
        scan(items, path, _P1_UNIT)
        for i, unit in enumerate(items):
            scan(unit.roles, f"{path}[{i}].roles", _P1_ROLE)
            units(unit.children, f"{path}[{i}].children")

    units(company.units, "units")
    return out
