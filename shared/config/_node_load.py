"""Loading the node file (Tier A): ``${VAR}`` resolution, per-process overrides, shape, refusals.

``${VAR}`` references are resolved when the file loads (FL-9); ``${VAR:-default}`` takes
``default`` when the variable is unset or empty (as in the shell and compose), so the deploy/ files
keep the compose fleet's values as defaults. An unset variable without a default is an error
naming the key, with one exception: ``node.id: "${CREWLET_NODE_ID}"`` with the variable unset
falls back to the default id ``node-0`` exactly as an absent ``node.id`` does (the seeds: "an unset
id is node-0 on every node"), and the node remembers the id came from the default so a clustered
member can refuse it (FL-9).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._env import VAR_RE, resolve_tree
from ._issues import ConfigInvalid, Issue, issues_from_pydantic, sort_issues
from ._node import ALL_ROLES, DEFAULT_NODE_ID, NodeConfig
from ._node_rules import check_node
from ._yaml import read_yaml_mapping

__all__ = ["load_node_file", "node_config_from_data"]


def _resolve(
    data: Mapping[str, Any], env: Mapping[str, str], file: str, *, strict_env: bool = True
) -> tuple[dict[str, Any], list[Issue]]:
    issues: list[Issue] = []
    data = dict(data)
    node = data.get("node")
    id_ref_unset = False
    if isinstance(node, dict) and node.get("id") == "${CREWLET_NODE_ID}" and "CREWLET_NODE_ID" not in env:
        node = dict(node)
        node.pop("id")
        data["node"] = node
        id_ref_unset = True

    def unset(path: str, name: str) -> str:
        if not strict_env:  # validating a file meant for another machine: keep the reference, warn
            issues.append(
                Issue(
                    file,
                    path,
                    "missing",
                    f"${{{name}}} is not set here; it must be set where the node runs",
                    "warning",
                )
            )
            return f"${{{name}}}"
        issues.append(
            Issue(
                file, path, "missing", f"${{{name}}} is not set in the environment; set it or write the value"
            )
        )
        return ""

    resolved = resolve_tree(data, env, on_unset=unset)
    _malformed_refs(data, file, issues)
    if id_ref_unset:
        resolved.setdefault("node", {})
    return resolved, issues


def _malformed_refs(data: Any, file: str, issues: list[Issue], path: str = "") -> None:
    """Name every ``${`` that is not a ``${NAME}`` / ``${NAME:-default}`` reference (``${A-b}``,
    ``${ X }``, an unclosed one): left alone it would become a literal value, e.g. a token no one
    meant to set."""
    if isinstance(data, str):
        if "${" in VAR_RE.sub("", data):
            issues.append(
                Issue(
                    file,
                    path,
                    "invalid",
                    "a ${...} reference must be ${NAME} or ${NAME:-default} with NAME of "
                    "letters, digits and _",
                )
            )
    elif isinstance(data, dict):
        for k, v in data.items():
            _malformed_refs(v, file, issues, f"{path}.{k}" if path else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _malformed_refs(v, file, issues, f"{path}[{i}]")


def node_config_from_data(
    data: Mapping[str, Any],
    *,
    file: str = "",
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    check_files: bool = True,
    strict_env: bool = True,
) -> tuple[NodeConfig | None, list[Issue]]:
    """Validate node-file data: resolve ``${VAR}``, check shape, then every Tier A refusal.

    Args:
        data: The parsed YAML mapping.
        file: The file name to put in every issue.
        env: Where ``${VAR}`` and ``CREWLET_NODE_ID`` / ``CREWLET_ROLES`` are read; ``os.environ``
            when None.
        overrides: Per-process overrides (FL-12): ``roles`` (list of names), ``api_host``,
            ``api_port``, ``store_dir``; applied before validation so refusals see them.
        check_files: Whether TLS files must exist (FL-3); off for pure document checks.
        strict_env: True at boot: an unset ``${VAR}`` is an error naming the key. False for
            ``crewlet validate``, which may check a file meant for another machine: an unset
            reference is a warning and stays in place.

    Returns:
        ``(config, issues)``: ``config`` is None when any issue is an error; ``issues`` holds every
        error and warning in stable order (FL-158).
    """
    env = os.environ if env is None else env
    resolved, issues = _resolve(data, env, file, strict_env=strict_env)
    node = resolved.get("node")
    if node is None:
        node = resolved["node"] = {}
    id_from_default = False
    if isinstance(node, dict):
        if not node.get("id"):
            env_id = env.get("CREWLET_NODE_ID", "")
            if env_id:
                node["id"] = env_id
            else:
                node["id"] = DEFAULT_NODE_ID
                id_from_default = True
        if overrides and overrides.get("roles"):
            node["roles"] = list(overrides["roles"])
        elif env.get("CREWLET_ROLES"):
            node["roles"] = [r.strip() for r in env["CREWLET_ROLES"].split(",") if r.strip()]
        if node.get("roles") in (None, []):
            node["roles"] = list(ALL_ROLES)
    if overrides:
        api = resolved.setdefault("api", {})
        store = resolved.setdefault("store", {})
        if isinstance(api, dict):
            if overrides.get("api_host") is not None:
                api["host"] = overrides["api_host"]
            if overrides.get("api_port") is not None:
                api["port"] = overrides["api_port"]
        if isinstance(store, dict) and overrides.get("store_dir") is not None:
            store["dir"] = str(overrides["store_dir"])
    cfg: NodeConfig | None = None
    try:
        cfg = NodeConfig.model_validate({**resolved, "id_from_default": id_from_default, "source": file})
    except ValidationError as e:
        issues += issues_from_pydantic(e.errors(), file=file)
        for key in ("id_from_default", "source"):
            if key in resolved:
                issues.append(Issue(file, key, "unknown_field", "unknown key"))
    issues += check_node(resolved, cfg, file=file, check_files=check_files)
    issues = sort_issues(issues)
    if any(i.severity == "error" for i in issues):
        return None, issues
    if cfg is not None and cfg.node.roles:
        cfg = cfg.model_copy(
            update={"node": cfg.node.model_copy(update={"roles": sorted(set(cfg.node.roles))})}
        )
    return cfg, issues


def load_node_file(
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[NodeConfig, list[Issue]]:
    """Read and validate a node file.

    Args:
        path: The YAML file.
        env: See :func:`node_config_from_data`.
        overrides: See :func:`node_config_from_data`.

    Returns:
        ``(config, warnings)``.

    Raises:
        ConfigInvalid: the file is missing, empty, not YAML, or breaks any Tier A rule; every
            error is listed with the file and the path inside it.
    """
    data = read_yaml_mapping(path)
    cfg, issues = node_config_from_data(data, file=str(path), env=env, overrides=overrides)
    if cfg is None:
        raise ConfigInvalid(issues)
    return cfg, [i for i in issues if i.severity == "warning"]
