"""The company document as ``crewlet config`` reads it on this machine (CO-1, CO-15, CO-43).

Owns the checks run before anything is sent (:func:`check_document`, the lines ``crewlet validate``
prints), the offline scripts' paths made absolute (:func:`absolute_scripts`), and the summary rows
of a stored document (:func:`org_rows`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from shared.config import (
    Company,
    ConfigInvalid,
    Issue,
    OrgModel,
    read_yaml_mapping,
    validate_company_data,
    validate_offline_script_data,
)

__all__ = ["absolute_scripts", "check_document", "org_rows"]


def absolute_scripts(document: dict[str, Any], base: Path) -> dict[str, Any]:
    """Return a copy of ``document`` whose relative offline ``script`` paths are absolute.

    An offline provider's rules file (``providers.llm.<key>.script``, CO-15) is relative to the
    company file. A node resolves it against the path as given (relative to the directory its own
    seed came from), so a document sent from elsewhere must carry absolute paths: this assumes
    the node can read this machine's files (a node on loopback, or a shared filesystem).

    Args:
        document: The company document as read from the file (not modified).
        base: The company file's directory.

    Returns:
        A deep copy with each relative ``script`` replaced by ``base / script``, resolved.
    """
    out = copy.deepcopy(document)
    providers = out.get("providers")
    llm = providers.get("llm") if isinstance(providers, dict) else None
    if isinstance(llm, dict):
        for entry in llm.values():
            script = entry.get("script") if isinstance(entry, dict) else None
            if isinstance(script, str) and script and not Path(script).is_absolute():
                entry["script"] = str((base / script).resolve())
    return out


def check_document(
    path: Path, *, compat: bool = False
) -> tuple[dict[str, Any] | None, Company | None, list[Issue]]:
    """Read and validate a company file the way ``crewlet validate`` does (CO-1, CO-15, CO-43).

    Args:
        path: The company file.
        compat: Accept the upstream example's older shape (CO-43): unsupported blocks become
            ``unsupported`` warnings.

    Returns:
        ``(document, company, issues)``: the parsed document (None when the file could not be read
        as a YAML mapping), the validated :class:`~shared.config.Company` (None when any issue is
        an error) and every issue, errors and warnings, each naming its file and path. Offline
        providers' rules files are read and checked too, relative to the company file.
    """
    name = str(path)
    try:
        document = read_yaml_mapping(path)
    except ConfigInvalid as e:
        return None, None, list(e.issues)
    company, issues = validate_company_data(document, file=name, compat=compat)
    if company is None:
        return document, None, issues
    seats = {s.handle for s in OrgModel.from_company(company).seats}
    for key, entry in company.providers.llm.items():
        if entry.type != "offline" or not entry.script:
            continue
        script = path.parent / entry.script
        try:
            script_data = read_yaml_mapping(script)
        except ConfigInvalid as e:
            issues += [
                Issue(name, f"providers.llm.{key}.script", i.type, f"{script}: {i.message}") for i in e.issues
            ]
            continue
        issues += validate_offline_script_data(script_data, file=str(script), seats=seats)[1]
    if any(i.severity == "error" for i in issues):
        company = None
    return document, company, issues


def org_rows(document: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows naming the company, its units, seats and providers."""
    llm = (document.get("providers") or {}).get("llm") or {}
    providers = [f"{k} ({v.get('type', '?')})" if isinstance(v, dict) else str(k) for k, v in llm.items()]
    rows = [("company", str(document.get("name", ""))), ("providers", ", ".join(providers) or "none")]
    # compat: a document stored in the upstream shape still reads; masked credentials are strings
    company, issues = validate_company_data(document, compat=True)
    if company is None:
        first = next(i.line() for i in issues if i.severity == "error")
        return [*rows, ("org", f"not readable by this build ({first})")]
    org = OrgModel.from_company(company)

    def listed(names: list[str]) -> str:
        return f"{len(names)}: {', '.join(names)}" if names else "0"

    return [
        *rows[:1],
        ("units", listed([u.id for u in org.units])),
        ("agent seats", listed([s.handle for s in org.seats])),
        ("human seats", listed([s.handle for s in org.humans])),
        *rows[1:],
    ]
