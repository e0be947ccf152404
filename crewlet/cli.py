"""The ``crewlet`` command line (CO-28, FL-24 §CLI).

Commands:

- ``crewlet validate [FILE] [--node F] [--company F] [--json] [--compat]``: exit 0 when valid, 2 with
  one ``file: path: message`` line per error when not (FL-158, CO-1).
- ``crewlet init [DIR]``: a minimal company of one's own, its offline rules and a node file
  (:mod:`crewlet.init_cli`).
- ``crewlet run``: one node, all roles, embedded broker, the example company as a seed (CO-29, CO-4);
  ``--import-company F`` activates a file at boot.
- ``crewlet node --node F --company F``: any legal role set (``--company`` is a seed, FL-109).
- ``crewlet fleet status``: the fleet as a node's ``GET /fleet`` says (FL-7).
- ``crewlet fleet broker list|remove``: the broker's membership through a node (FL-147, FL-149;
  :mod:`crewlet.broker_cli`).
- ``crewlet schema company|node``: the JSON Schema of either tier.
- ``crewlet config import|show|export|revisions|diff|activate``: the company's revisions through a
  running node (CO-4, CO-28, FL-104..FL-109; :mod:`crewlet.config_cli`).
- ``crewlet secrets set|list|get|unset|keygen|rekey``: the secret store (FL-151, CO-40;
  :mod:`crewlet.secrets_cli`).
- ``crewlet knowledge import DIR``, ``crewlet knowledge search QUERY``: publish Markdown pages, search
  them (:mod:`crewlet.knowledge_cli`).
- ``crewlet backup --dir PATH``, ``crewlet backup list|restore-objects``: backups (ES-81..ES-84;
  :mod:`crewlet.backup_cli`).
- ``crewlet budgets show|reset``: the fleet's shared token budgets (FL-120; :mod:`crewlet.budgets_cli`).
- ``crewlet schedules [list]``: every schedule and its next fire (CO-33; :mod:`crewlet.schedules_cli`).
- ``crewlet send HANDLE TEXT [--task] [--work-item KEY] [--wait]``: a message or task to a seat, and
  its reply (CO-8, CO-28; :mod:`crewlet.send_cli`).
- ``crewlet turns [--seat H] [--limit N]``, ``crewlet turn ID``: turn records (CO-20, CO-28;
  :mod:`crewlet.turns_cli`).
- ``crewlet usage [--from D] [--to D] [--seat H] [--group-by G]``: the fleet's spend by day, seat,
  node, model, phase or worker, nodes that left included (AG-48; :mod:`crewlet.usage_cli`).
- ``crewlet work list|show KEY|create|comment``: the tracker (CO-24; :mod:`crewlet.work_cli`).
- ``crewlet files list|put|get``: a project's files (ES-70; :mod:`crewlet.files_cli`).
- ``crewlet objects status``: the object store and the collector's findings (FL-5, ES-75;
  :mod:`crewlet.objects_cli`).
- ``crewlet migrate [--check]``: a stopped data node's store brought to this build's schema (CO-28,
  FL-145; :mod:`crewlet.migrate_cli`; local, never the broker).

Every refusal is printed as lines naming the file and the path inside it; no command prints a
traceback for bad input.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from shared import logs
from shared.config import (
    ConfigInvalid,
    Issue,
    NodeConfig,
    load_node_file,
    node_config_from_data,
    read_yaml_mapping,
)
from shared.secrets import keyring_missing

from . import (
    backup_cli,
    broker_cli,
    budgets_cli,
    config_cli,
    files_cli,
    fleet_status,
    gate_cli,
    init_cli,
    knowledge_cli,
    memory_cli,
    migrate_cli,
    objects_cli,
    retention_cli,
    schedules_cli,
    search_cli,
    secrets_cli,
    send_cli,
    turns_cli,
    usage_cli,
    work_cli,
)
from ._help import plain_help

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help="crewlet: run an AI agent company.")
fleet_app = typer.Typer(no_args_is_help=True, help="Fleet surfaces.")
app.add_typer(fleet_app, name="fleet")
fleet_app.add_typer(broker_cli.app, name="broker")
app.add_typer(knowledge_cli.app, name="knowledge")
app.add_typer(search_cli.app, name="search")
app.add_typer(files_cli.app, name="files")
app.command("init")(init_cli.init)
app.add_typer(secrets_cli.app, name="secrets")
app.add_typer(config_cli.app, name="config")
app.add_typer(backup_cli.app, name="backup")
app.add_typer(retention_cli.app, name="retention")
app.add_typer(budgets_cli.app, name="budgets")
app.add_typer(schedules_cli.app, name="schedules")
app.add_typer(work_cli.app, name="work")
app.add_typer(objects_cli.app, name="objects")
app.add_typer(memory_cli.app, name="memory")
retention_cli.app.command("verify")(backup_cli.verify_command)
retention_cli.app.command("evict")(gate_cli.evict_cmd)
retention_cli.app.command("readmit")(gate_cli.readmit_cmd)
retention_cli.app.command("ack")(gate_cli.ack_cmd)

EXIT_INVALID = 2
_NODE_KEYS = {
    "node",
    "stream",
    "coordination",
    "store",
    "api",
    "telemetry",
    "logging",
    "secrets",
    "retention",
}
_COMPANY_KEYS = {"name", "units", "providers", "roles", "mission", "integrations"}


def examples_dir() -> Path:
    """Return the repository's ``examples/`` directory (the example company and node file)."""
    return Path(__file__).resolve().parent.parent / "examples"


def _print_issues(issues: list[Issue], *, as_json: bool, tier: str) -> None:
    errors = [i for i in issues if i.severity == "error"]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "valid": not errors,
                    "tier": tier,
                    "errors": [i.as_dict() for i in errors],
                    "warnings": [i.as_dict() for i in issues if i.severity == "warning"],
                },
                indent=2,
            )
        )
        return
    for i in issues:
        typer.echo(i.line(), err=i.severity == "error")


def _validate_company(path: str, *, compat: bool, env: bool = False) -> tuple[Any, Any, list[Issue]]:
    """Validate a company file (and its offline scripts); return ``(company, org, issues)``; with
    ``env``, every ``${NAME}`` this process's environment leaves unset is a warning too."""
    from shared.config import OrgModel, validate_company_file

    company, issues = validate_company_file(path, compat=compat, env=os.environ if env else None)
    if company is None:
        return None, None, issues
    return company, OrgModel.from_company(company), issues


def _detect_tier(path: str) -> str:
    try:
        data = read_yaml_mapping(path)
    except ConfigInvalid:
        return "unknown"
    keys = set(data)
    node, company = bool(keys & _NODE_KEYS), bool(keys & _COMPANY_KEYS)
    if node and not company:
        return "node"
    if company and not node:
        return "company"
    return "unknown"


@app.command()
def validate(
    file: Annotated[
        str | None, typer.Argument(help="A node file or company document (tier detected)")
    ] = None,
    node: Annotated[str | None, typer.Option("--node", "--config", help="A node file (Tier A)")] = None,
    company: Annotated[str | None, typer.Option("--company", help="A company document (Tier B)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    compat: Annotated[bool, typer.Option("--compat", help="Accept upstream-only keys (CO-43)")] = False,
) -> None:
    """Validate a node file and/or a company document; exit 0 when valid, 2 when not (FL-158)."""
    issues: list[Issue] = []
    tiers: list[str] = []
    if file is not None:
        tier = _detect_tier(file)
        if tier == "node":
            node = node or file
        elif tier == "company":
            company = company or file
        else:
            try:
                read_yaml_mapping(file)
                issues.append(
                    Issue(
                        file,
                        "",
                        "invalid",
                        "cannot tell the tier: top-level keys must be a node "
                        "file's (node, stream, store, ...) or a company's (name, units, ...); "
                        "use --node or --company",
                    )
                )
            except ConfigInvalid as e:
                issues += e.issues
    if node is None and company is None and file is None:
        typer.echo("give a file, --node FILE or --company FILE", err=True)
        raise typer.Exit(EXIT_INVALID)
    if node is not None:
        tiers.append("node")
        try:
            data = read_yaml_mapping(node)
            cfg, node_issues = node_config_from_data(data, file=node, check_files=True, strict_env=False)
            issues += node_issues
            missing = keyring_missing(cfg) if cfg is not None else ""
            if missing:  # what boot would refuse from this file alone (issue 35: validate and boot agree)
                issues.append(Issue(node, "secrets.keys", "invalid", missing))
        except ConfigInvalid as e:
            issues += e.issues
    if company is not None:
        tiers.append("company")
        issues += _validate_company(company, compat=compat, env=True)[2]
    _print_issues(issues, as_json=as_json, tier="+".join(tiers) or "unknown")
    if any(i.severity == "error" for i in issues):
        raise typer.Exit(EXIT_INVALID)
    if not as_json:
        typer.echo("valid: " + ", ".join(x for x in (node, company) if x))


def _fail(issues: list[Issue]) -> None:
    for i in issues:
        typer.echo(i.line(), err=True)
    raise typer.Exit(EXIT_INVALID)


def _start(
    cfg: NodeConfig, company_path: str | None, warnings: list[Issue], *, import_path: str | None = None
) -> None:
    """Validate the seed (``--company``) and ``--import-company`` files, then run the node (CO-4)."""
    company = org = forced = None
    if company_path is not None:
        company, org, issues = _validate_company(company_path, compat=False)
        if company is None:
            _fail(issues)
        warnings += [i for i in issues if i.severity == "warning"]
    if import_path is not None:
        forced, _, issues = _validate_company(import_path, compat=False)
        if forced is None:
            _fail(issues)
        warnings += [i for i in issues if i.severity == "warning"]
        company_path = company_path or import_path
    from shared import telemetry  # lines inside a span carry its ids (FL-6)

    logs.configure(
        level=cfg.logging.level,
        fmt=cfg.logging.format,
        node=cfg.node_id,
        processors=[telemetry.add_trace_context],
    )
    for w in warnings:
        logs.get("config").warning("config_warning", file=w.file, path=w.path, message=w.message)
    from .node import run_node

    del org
    company_dir = str(Path(company_path).resolve().parent) if company_path else "."
    code = asyncio.run(run_node(cfg, company, company_dir=company_dir, import_company=forced))
    raise typer.Exit(code)


@app.command()
def run(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where node data lives")] = Path(".crewlet"),
    port: Annotated[int, typer.Option("--port", "--api-port", help="HTTP port (0 = none)")] = 8080,
    host: Annotated[str, typer.Option("--host", "--api-host", help="HTTP bind address")] = "127.0.0.1",
    company: Annotated[
        str | None, typer.Option("--company", help="Company document (default: the example)")
    ] = None,
    roles: Annotated[
        str | None, typer.Option("--roles", help="Comma-separated roles (default: all four)")
    ] = None,
    log_format: Annotated[str, typer.Option("--log-format", help="json | console")] = "json",
    import_company: Annotated[
        str | None,
        typer.Option("--import-company", help="Activate this company document at boot (CO-4)"),
    ] = None,
) -> None:
    """Run one node with every default: embedded broker, the example company as a seed (CO-4, CO-29).

    The company file is a seed: it is published only when the fleet has no active revision;
    afterwards change the company with ``crewlet config import`` (or ``--import-company``).
    """
    token = os.environ.get("CREWLET_API_TOKEN", "")
    if not token:
        token = secrets.token_urlsafe(24)
        typer.echo(f"CREWLET_API_TOKEN was unset; this run's API token is: {token}", err=True)
    node_id = os.environ.get("CREWLET_NODE_ID", "node-0")
    data = {
        "node": {"id": node_id},
        "store": {"dir": str(data_dir / node_id)},
        "api": {"host": host, "port": port, "auth": {"tokens": [{"id": "operator", "token": token}]}},
        "logging": {"format": log_format},
    }
    overrides = {"roles": [r.strip() for r in roles.split(",") if r.strip()]} if roles else None
    cfg, issues = node_config_from_data(data, file="(crewlet run)", overrides=overrides)
    if cfg is None:
        _fail(issues)
    assert cfg is not None
    _start(
        cfg,
        company or str(examples_dir() / "company.yaml"),
        [i for i in issues if i.severity == "warning"],
        import_path=import_company,
    )


@app.command("node")
def node_cmd(
    node: Annotated[str, typer.Option("--node", "--config", help="The node file (Tier A)")],
    company: Annotated[
        str | None, typer.Option("--company", help="The company document (a seed, CO-4)")
    ] = None,
    roles: Annotated[str | None, typer.Option("--roles", help="Override node.roles (FL-12)")] = None,
    api_host: Annotated[str | None, typer.Option("--api-host", help="Override api.host")] = None,
    api_port: Annotated[int | None, typer.Option("--api-port", help="Override api.port (0 = none)")] = None,
    import_company: Annotated[
        str | None,
        typer.Option("--import-company", help="Activate this company document at boot (CO-4)"),
    ] = None,
) -> None:
    """Run a node from a node file with any legal role set; ``--company`` is a seed (CO-4, FL-109)."""
    overrides: dict[str, Any] = {"api_host": api_host, "api_port": api_port}
    if roles:
        overrides["roles"] = [r.strip() for r in roles.split(",") if r.strip()]
    try:
        cfg, warnings = load_node_file(node, overrides=overrides)
    except ConfigInvalid as e:
        _fail(e.issues)
        return
    _start(cfg, company, warnings, import_path=import_company)


@app.command()
def schema(tier: Annotated[str, typer.Argument(help="company | node")]) -> None:
    """Print the JSON Schema of the company document or the node file."""
    if tier == "node":
        typer.echo(json.dumps(NodeConfig.model_json_schema(), indent=2))
    elif tier == "company":
        from shared.config import company_json_schema

        typer.echo(json.dumps(company_json_schema(), indent=2))
    else:
        typer.echo(f"unknown tier {tier!r}: use company or node", err=True)
        raise typer.Exit(EXIT_INVALID)


@fleet_app.command("status")
def fleet_status_cmd(
    url: Annotated[
        str, typer.Option("--url", envvar="CREWLET_URL", help="A node's base URL")
    ] = "http://127.0.0.1:8080",
    token: Annotated[str, typer.Option("--token", envvar="CREWLET_API_TOKEN", help="API token")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw view")] = False,
) -> None:
    """Print nodes, seat owners, duties and unmanned roles as a node sees them (FL-7)."""
    raise typer.Exit(fleet_status.show(url, token, as_json=as_json))


# the operator commands of issue 15 (CO-28), listed after the node commands in --help
app.command("send")(send_cli.send)
app.command("turns")(turns_cli.turns_cmd)
app.command("turn")(turns_cli.turn_cmd)
app.command("usage")(usage_cli.usage_cmd)
app.command("migrate")(migrate_cli.migrate)
plain_help(app)  # last: --help shows every text above without its spec ids


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
