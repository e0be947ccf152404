"""Resolution of a seat's MCP servers (CO-34) and fingerprints (FL-115); pure unit tests."""

from __future__ import annotations

import copy
from typing import Any

from shared import mcp
from shared.config import Company, OrgModel


def doc() -> dict[str, Any]:
    return {
        "name": "Acme",
        "providers": {"llm": {"main": {"type": "offline", "model": "crewlet-offline-1", "script": "s.yaml"}}},
        "mcp_servers": [
            {"name": "gh", "command": "gh-mcp", "args": ["--stdio"], "env": {"A": "entry", "C": "entry"}},
            {
                "name": "web",
                "transport": "http",
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"X-Base": "entry", "Authorization": "entry"},
            },
            {"name": "clock", "command": "mcp-server-time", "shared": True, "env": {"TZ": "UTC"}},
        ],
        "roles": [{"name": "Bob", "handle": "bob"}, {"name": "Hal", "handle": "hal", "kind": "human"}],
        "units": [
            {
                "id": "eng",
                "name": "Engineering",
                "mcp_env": {"gh": {"TOKEN": "outer", "A": "outer"}, "web": {"Authorization": "outer"}},
                "children": [
                    {
                        "id": "core",
                        "name": "Core",
                        "mcp_env": {"gh": {"TOKEN": "inner", "B": "inner"}},
                        "roles": [
                            {"name": "Ada", "handle": "ada", "mcp_env": {"gh": {"TOKEN": "role"}}},
                            {"name": "Cy", "handle": "cy"},
                        ],
                    }
                ],
            }
        ],
    }


def company(data: dict[str, Any] | None = None) -> Company:
    return Company.model_validate(data or doc())


def by_name(servers: list[mcp.ResolvedServer]) -> dict[str, mcp.ResolvedServer]:
    return {s.name: s for s in servers}


def test_merge_order_unit_base_then_inner_unit_then_role() -> None:
    ada = by_name(mcp.resolve(company(), "ada"))
    # entry env, then outer unit, then inner unit, then the role: the role wins per key
    assert ada["gh"].env == {"A": "outer", "C": "entry", "TOKEN": "role", "B": "inner"}
    cy = by_name(mcp.resolve(company(), "cy"))
    assert cy["gh"].env == {"A": "outer", "C": "entry", "TOKEN": "inner", "B": "inner"}


def test_http_servers_take_mcp_env_as_headers() -> None:
    ada = by_name(mcp.resolve(company(), "ada"))
    assert ada["web"].headers == {"X-Base": "entry", "Authorization": "outer"}
    assert ada["web"].env == {}
    assert ada["web"].url == "http://127.0.0.1:9/mcp"
    assert ada["gh"].headers == {}


def test_root_seat_gets_entry_values_only_and_shared_servers_are_not_per_seat() -> None:
    bob = mcp.resolve(company(), "bob")
    assert [s.name for s in bob] == ["gh", "web"]
    assert by_name(bob)["gh"].env == {"A": "entry", "C": "entry"}
    assert all(not s.shared for s in bob)


def test_shared_resolution_has_no_seat_values() -> None:
    shared = mcp.resolve_shared(company())
    assert [(s.name, s.shared, s.env) for s in shared] == [("clock", True, {"TZ": "UTC"})]


def test_human_and_unknown_seats_run_nothing() -> None:
    c = company()
    assert mcp.resolve(c, "hal") == []
    assert mcp.resolve(c, "nobody") == []
    assert not mcp.spawns(c, "hal")
    assert not mcp.spawns(c, "nobody")


def test_resolve_accepts_an_org_model_and_a_seat() -> None:
    c = company()
    org = OrgModel.from_company(c)
    seat = org.seat("ada")
    assert seat is not None
    assert mcp.resolve(org, seat) == mcp.resolve(c, "ada") == mcp.resolve_seat_servers(org, seat)
    assert mcp.seat_mcp_env(org, seat, "gh") == {"TOKEN": "role", "A": "outer", "B": "inner"}


def test_spawns_only_with_a_per_seat_stdio_server() -> None:
    assert mcp.spawns(company(), "ada")
    only_http_and_shared = doc()
    only_http_and_shared["mcp_servers"] = [
        s for s in only_http_and_shared["mcp_servers"] if s["name"] != "gh"
    ]
    for unit in [only_http_and_shared["units"][0], only_http_and_shared["units"][0]["children"][0]]:
        unit["mcp_env"].pop("gh", None)
    only_http_and_shared["units"][0]["children"][0]["roles"][0]["mcp_env"] = {}
    assert not mcp.spawns(company(only_http_and_shared), "ada")
    none = doc()
    none["mcp_servers"] = []
    none["units"][0]["mcp_env"] = {}
    none["units"][0]["children"][0]["mcp_env"] = {}
    none["units"][0]["children"][0]["roles"][0]["mcp_env"] = {}
    assert not mcp.spawns(company(none), "ada")
    assert mcp.resolve(company(none), "ada") == []


def test_fingerprint_moves_only_when_the_resolved_config_moves() -> None:
    base = by_name(mcp.resolve(company(), "ada"))
    again = by_name(mcp.resolve(company(), "ada"))
    assert {n: s.fingerprint for n, s in base.items()} == {n: s.fingerprint for n, s in again.items()}

    # a presentation-only change (prefix, annotations) keeps every fingerprint
    cosmetic = doc()
    cosmetic["mcp_servers"][0]["tool_prefix"] = "gh_"
    cosmetic["mcp_servers"][0]["tool_annotations"] = {"search": {"readOnlyHint": True}}
    moved = by_name(mcp.resolve(company(cosmetic), "ada"))
    assert moved["gh"].fingerprint == base["gh"].fingerprint
    assert moved["gh"].tool_prefix == "gh_"

    # the role's credential rotates: only ada's gh moves, cy's does not, web does not
    rotated = doc()
    rotated["units"][0]["children"][0]["roles"][0]["mcp_env"]["gh"]["TOKEN"] = "rotated"
    after = by_name(mcp.resolve(company(rotated), "ada"))
    assert after["gh"].fingerprint != base["gh"].fingerprint
    assert after["web"].fingerprint == base["web"].fingerprint
    cy_before = by_name(mcp.resolve(company(), "cy"))["gh"].fingerprint
    assert by_name(mcp.resolve(company(rotated), "cy"))["gh"].fingerprint == cy_before

    # an inner-unit value shadowed by the role does not move ada's fingerprint, but moves cy's
    shadowed = doc()
    shadowed["units"][0]["children"][0]["mcp_env"]["gh"]["TOKEN"] = "inner-2"
    assert by_name(mcp.resolve(company(shadowed), "ada"))["gh"].fingerprint == base["gh"].fingerprint
    assert by_name(mcp.resolve(company(shadowed), "cy"))["gh"].fingerprint != cy_before

    # url, headers, args, timeouts move it
    for path, value in [
        (("mcp_servers", 1, "url"), "http://127.0.0.1:10/mcp"),
        (("mcp_servers", 0, "args"), ["--other"]),
        (("mcp_servers", 0, "request_timeout_seconds"), 5),
        (("mcp_servers", 0, "startup_timeout_seconds"), 5),
    ]:
        data = copy.deepcopy(doc())
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        name = data["mcp_servers"][path[1]]["name"]
        assert by_name(mcp.resolve(company(data), "ada"))[name].fingerprint != base[name].fingerprint, path


def test_shared_fingerprint_moves_with_env_headers_url() -> None:
    before = mcp.resolve_shared(company())[0].fingerprint
    data = doc()
    data["mcp_servers"][2]["env"] = {"TZ": "Europe/Paris"}
    assert mcp.resolve_shared(company(data))[0].fingerprint != before
    assert mcp.resolve_shared(company())[0].fingerprint == before


def test_timeouts_are_carried() -> None:
    data = doc()
    data["mcp_servers"][0]["startup_timeout_seconds"] = 7
    data["mcp_servers"][0]["request_timeout_seconds"] = 9.5
    gh = by_name(mcp.resolve(company(data), "ada"))["gh"]
    assert (gh.startup_timeout_seconds, gh.request_timeout_seconds) == (7.0, 9.5)
    default = by_name(mcp.resolve(company(), "ada"))["gh"]
    assert (default.startup_timeout_seconds, default.request_timeout_seconds) == (120.0, 300.0)
