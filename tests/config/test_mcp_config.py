"""MCP settings that could only fail at run time, or be ignored without a word, are refused when the
company is validated, each naming its field (CO-34; found by the issue 13 new-user tryout)."""

from __future__ import annotations

from typing import Any

import yaml

from shared.config import validate_company_data
from tests.support.procs import REPO


def _issues(servers: list[dict[str, Any]], **mcp_env: Any) -> dict[str, str]:
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["providers"]["llm"]["default"]["script"] = str(REPO / "examples" / "offline-script.yaml")
    data["mcp_servers"] = servers
    for key, value in mcp_env.items():
        if key == "founder":
            data["roles"][0]["mcp_env"] = value
        else:
            data["units"][0]["roles"][0]["mcp_env"] = value
    company, issues = validate_company_data(data)
    assert company is None
    return {i.path: i.message for i in issues}


def test_transport_keys_urls_and_names_are_checked() -> None:
    got = _issues(
        [
            {"name": "time", "command": "mcp-server-time", "url": "http://127.0.0.1:1/mcp"},
            {
                "name": "web",
                "transport": "http",
                "url": "not a url",
                "args": ["-v"],
                "headers": {"bad header": "x"},
            },
            {"name": "files", "transport": "http", "url": "ftp://127.0.0.1/mcp"},
            {"name": "sh", "command": "sh", "shared": True, "env": {"A=B": "1"}},
        ],
        lead={"time": {"A=B": "x", "": "y"}, "web": {"bad header": "z"}, "sh": {"X": "1"}},
        founder={"time": {"X": "1"}},
    )
    assert got == {
        "mcp_servers[0].url": "a stdio server takes no url",
        "mcp_servers[1].args": "an http server takes no args",
        'mcp_servers[1].headers["bad header"]': "an HTTP header name: no spaces or separators",
        "mcp_servers[1].url": "must be an http:// or https:// URL (got 'not a url')",
        "mcp_servers[2].url": "must be an http:// or https:// URL (got 'ftp://127.0.0.1/mcp')",
        'mcp_servers[3].env["A=B"]': "an environment variable name: letters, digits, _",
        "roles[0].mcp_env": "a human seat runs no MCP servers",
        "units[0].roles[0].mcp_env.sh": "'sh' is shared (one per node): it takes no per-seat mcp_env",
        'units[0].roles[0].mcp_env.time[""]': "an environment variable name: letters, digits, _",
        'units[0].roles[0].mcp_env.time["A=B"]': "an environment variable name: letters, digits, _",
        'units[0].roles[0].mcp_env.web["bad header"]': "an HTTP header name: no spaces or separators",
    }


def test_a_well_formed_mcp_block_is_valid() -> None:
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["providers"]["llm"]["default"]["script"] = str(REPO / "examples" / "offline-script.yaml")
    data["mcp_servers"] = [
        {"name": "time", "command": "mcp-server-time", "env": {"TZ": "UTC"}},
        {
            "name": "web",
            "transport": "http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Team": "a"},
        },
    ]
    data["units"][0]["roles"][0]["mcp_env"] = {"time": {"LANG": "C"}, "web": {"Authorization": "Bearer t"}}
    company, issues = validate_company_data(data)
    assert company is not None, issues
