"""deploy/k8s/ (FL-8, FL-9, FL-17, FL-132): every manifest validates against the schemas of a pinned
Kubernetes version (the ``kubernetes-validate`` package, strict: unknown fields refused), the
orchestrator settings of FL-132 are there, the node files resolve with the manifests' environment,
and the ConfigMaps carry the deploy/ files as they are. Fast: no cluster, no processes but one
``nats-server -t``."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.config import load_node_file
from tests.support.procs import REPO, TEST_KEY, VENV_BIN

K8S = REPO / "deploy" / "k8s"
K8S_VERSION = "1.34.0"
"""The Kubernetes version the manifests are validated against (schemas bundled with kubernetes-validate)."""
LONGEST_TURN = 600
"""Seconds: the longest turn the fleet plans for (compose.yaml's ``stop_grace_period: 10m``)."""


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """``(file, document)`` for every document of every resource kustomization.yaml lists."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    out = []
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            if doc:
                out.append((name, doc))
    return out


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in manifests() if d["kind"] == kind}


def crewlet_workloads() -> dict[str, dict[str, Any]]:
    """The data nodes' StatefulSet and the satellites' Deployment, by name."""
    return {
        "crewlet-node": by_kind("StatefulSet")["crewlet-node"],
        "crewlet-satellite": by_kind("Deployment")["crewlet-satellite"],
    }


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(c)


def env_of(c: dict[str, Any], pod: str) -> dict[str, str]:
    """The container's environment as the kubelet would set it, with made-up secrets and ``pod``
    as the pod name; an optional secret is left out."""
    secrets = {"api-token": "k" * 32, "secrets-key": TEST_KEY, "s3-access-key": "a", "s3-secret-key": "b"}
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            assert e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            env[e["name"]] = pod
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "crewlet-secrets"
            if ref["key"] in secrets:
                env[e["name"]] = secrets[ref["key"]]
            else:
                assert ref.get("optional") is True, ref
    return env


def test_every_manifest_validates_against_the_pinned_kubernetes() -> None:
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert files == set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]), (
        "kustomization lists every manifest"
    )
    kinds = []
    for name, doc in manifests():
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{name}: {doc['kind']} {doc['metadata']['name']}: {e}") from None
        kinds.append(doc["kind"])
    assert sorted(kinds) == sorted(
        [
            "ConfigMap",
            "ConfigMap",
            "Service",
            "StatefulSet",
            "Service",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "PodDisruptionBudget",
            "Deployment",
        ]
    )


def _broken(mutate: Any) -> dict[str, Any]:
    doc = copy.deepcopy(by_kind("StatefulSet")["crewlet-node"])
    mutate(doc)
    return doc


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__("livenesProbe", {}),
            "livenesProbe",
        ),
        (lambda d: d["spec"]["template"]["spec"].__setitem__("terminationGracePeriodSeconds", "615"), "615"),
        (lambda d: d["spec"].pop("selector"), "selector"),
    ],
)
def test_a_broken_manifest_is_refused(mutate: Any, says: str) -> None:
    """The check can fail: a misspelt field, a wrong type, a missing required field."""
    with pytest.raises(kubernetes_validate.ValidationError) as e:
        kubernetes_validate.validate(_broken(mutate), K8S_VERSION, strict=True)
    assert says in str(e.value)


@pytest.mark.parametrize("name", ["crewlet-node", "crewlet-satellite"])
def test_fl132_probes_prestop_and_grace(name: str) -> None:
    """Liveness on /health, readiness on /ready, a preStop sleep of a few readiness periods (an
    ingress drain is nearly instant), a termination grace longer than the longest turn plus that
    sleep; the token and keyring only from the Secret."""
    workload = crewlet_workloads()[name]
    c = container(workload)
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    period = c["readinessProbe"]["periodSeconds"] * c["readinessProbe"].get("failureThreshold", 3)
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    sleep = int(command[1])
    assert 2 * period <= sleep <= 60, (sleep, period)
    grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= LONGEST_TURN + sleep, grace
    literal = {e["name"] for e in c["env"] if "value" in e}
    assert not literal & {"CREWLET_API_TOKEN", "CREWLET_SECRETS_KEY", "AWS_SECRET_ACCESS_KEY"}
    refs = {e["name"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert {"CREWLET_API_TOKEN", "CREWLET_SECRETS_KEY"} <= refs


def test_compose_plans_for_the_same_longest_turn() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert compose["x-node"]["stop_grace_period"] == f"{LONGEST_TURN // 60}m"


def test_data_nodes_have_stable_ids_and_a_volume_per_store() -> None:
    """FL-9: the id is the StatefulSet pod name (stable, distinct, never generated); the store is a
    PVC from the claim template mounted where CREWLET_STORE_DIR points; rolling updates one pod at
    a time (FL-132); satellites keep a scratch store (FL-17)."""
    sts = crewlet_workloads()["crewlet-node"]
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] in by_kind("Service")
    assert by_kind("Service")[sts["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
    assert sts["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert by_kind("PodDisruptionBudget")["crewlet-node"]["spec"]["maxUnavailable"] == 1
    c = container(sts)
    env = env_of(c, "crewlet-node-0")
    assert env["CREWLET_NODE_ID"] == "crewlet-node-0"
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts[env["CREWLET_STORE_DIR"]] in claims
    sat = crewlet_workloads()["crewlet-satellite"]
    sc = container(sat)
    scratch = {m["mountPath"]: m["name"] for m in sc["volumeMounts"]}[env_of(sc, "x")["CREWLET_STORE_DIR"]]
    assert any(v["name"] == scratch and "emptyDir" in v for v in sat["spec"]["template"]["spec"]["volumes"])


@pytest.mark.parametrize("name", ["crewlet-node", "crewlet-satellite"])
def test_the_node_files_resolve_with_the_manifests_environment(name: str) -> None:
    """The mounted deploy/crewlet file, resolved with the pod's environment: the pod's id, the NATS
    members of the StatefulSet, the port the probes ask."""
    workload = crewlet_workloads()[name]
    c = container(workload)
    args = c["args"]
    node_file = args[args.index("--node") + 1]
    mount = next(m for m in c["volumeMounts"] if node_file.startswith(m["mountPath"] + "/"))
    assert mount["name"] == "files"
    local = {
        "node.yaml": REPO / "deploy" / "crewlet" / "node.yaml",
        "satellite.yaml": REPO / "deploy" / "crewlet" / "satellite.yaml",
    }[Path(node_file).name]
    pod = f"{name}-0"
    cfg, _ = load_node_file(local, env=env_of(c, pod))
    assert cfg.node.id == pod
    nats = by_kind("StatefulSet")["nats"]
    members = [f"nats://nats-{i}.{nats['spec']['serviceName']}:4222" for i in range(nats["spec"]["replicas"])]
    assert cfg.stream.url == ",".join(members)
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    assert cfg.api.port == port and c["readinessProbe"]["httpGet"]["port"] == "http"
    assert sorted(cfg.roles) == (
        ["seats"] if name == "crewlet-satellite" else ["data", "ingress", "seats", "workers"]
    )


def test_nats_members_run_the_cluster_conf() -> None:
    """The NATS StatefulSet runs deploy/nats/cluster.conf (from the ConfigMap), names each member
    after its pod, routes to every member through the headless service, stores on a PVC, and uses
    the compose image; nats-server accepts that config with that environment."""
    sts = by_kind("StatefulSet")["nats"]
    c = container(sts)
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert c["image"] == compose["x-nats"]["image"]
    args = c["args"]
    assert args[:2] == ["-c", "/etc/nats/cluster.conf"]
    # a drained member enters lame-duck mode first and two of three stay up through a disruption
    assert "--signal ldm" in " ".join(c["lifecycle"]["preStop"]["exec"]["command"])
    assert by_kind("PodDisruptionBudget")["nats"]["spec"]["maxUnavailable"] == 1
    service = sts["spec"]["serviceName"]
    routes = [f"nats://nats-{i}.{service}:6222" for i in range(sts["spec"]["replicas"])]
    assert args[args.index("--routes") + 1] == ",".join(routes)
    assert by_kind("Service")[service]["spec"]["publishNotReadyAddresses"] is True
    env = {e["name"]: e for e in c["env"]}
    assert env["SERVER_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    data = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["data"]
    assert env["NATS_STORE_DIR"]["value"].startswith(data + "/")
    assert "data" in {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    conf = by_kind("ConfigMap")["crewlet-nats"]["data"]["cluster.conf"]
    assert conf == (REPO / "deploy" / "nats" / "cluster.conf").read_text()
    out = subprocess.run(
        [
            str(VENV_BIN / "nats-server"),
            "-c",
            str(REPO / "deploy" / "nats" / "cluster.conf"),
            *args[2:],
            "-t",
        ],
        env={
            "PATH": os.environ.get("PATH", ""),
            "SERVER_NAME": "nats-0",
            "NATS_STORE_DIR": "/data/jetstream",
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr


def test_the_configmaps_carry_the_deploy_files_as_they_are() -> None:
    """config.yaml is what deploy/k8s/render.py renders from deploy/ and examples/ (no drift)."""
    spec = importlib.util.spec_from_file_location("k8s_render", K8S / "render.py")
    assert spec and spec.loader
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    assert render.render() == (K8S / "config.yaml").read_text(), "run python deploy/k8s/render.py"
    files = by_kind("ConfigMap")["crewlet-files"]["data"]
    assert files["node.yaml"] == (REPO / "deploy" / "crewlet" / "node.yaml").read_text()
    assert files["company.yaml"] == (REPO / "examples" / "company.yaml").read_text()
    assert "offline-script.yaml" in files  # beside company.yaml, as compose mounts it
    assert json.dumps(files)  # plain strings
