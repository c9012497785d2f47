"""deploy/kubernetes, the Kustomize base for `gpufly serve` on every GPU node, checked without a cluster.

How it is validated: kubeconform is not installable here (not in the package lists this project may
use), and the ``kubernetes`` Python client carries no OpenAPI schemas, so each object is checked with
``jsonschema`` against a vendored subset of the Kubernetes OpenAPI definitions and of the Prometheus
Operator's ServiceMonitor CRD, written for the fields the base uses (tests/fixtures/monitor/kubernetes.schema.json:
no other key allowed, so a misspelt one fails). Where kubectl is installed, ``kubectl kustomize`` renders
the base and the rendered objects are checked too. Then structure checks: the selectors meet, the ports
line up, and the container's arguments parse as `gpufly serve` options.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer
import yaml
from typer.main import get_command

from gpufly.cli.serve import serve
from gpufly.monitor.attribution import RUNTIME_SPECS

BASE = Path(__file__).parent.parent.parent / "deploy" / "kubernetes"
SCHEMA = json.loads((Path(__file__).parent.parent / "fixtures" / "monitor" / "kubernetes.schema.json").read_text())
KUSTOMIZE_TIMEOUT_S = 120


def base_objects() -> dict[str, dict[str, Any]]:
    """Each resource the kustomization lists, by kind."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    objects = [yaml.safe_load((BASE / name).read_text()) for name in kustomization["resources"]]
    return {obj["kind"]: obj for obj in objects}


def rendered() -> list[dict[str, Any]]:
    done = subprocess.run(["kubectl", "kustomize", str(BASE)], capture_output=True, text=True,
                          timeout=KUSTOMIZE_TIMEOUT_S, check=True)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_every_resource_matches_its_schema() -> None:
    objects = base_objects()
    assert set(objects) == {"Namespace", "DaemonSet", "Service", "ServiceMonitor"}
    for obj in objects.values():
        jsonschema.validate(obj, SCHEMA)


def test_the_schema_refuses_a_misspelt_field() -> None:
    daemonset = base_objects()["DaemonSet"]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(daemonset, SCHEMA)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_the_base_into_the_gpufly_namespace() -> None:
    objects = rendered()
    assert sorted(obj["kind"] for obj in objects) == ["DaemonSet", "Namespace", "Service", "ServiceMonitor"]
    for obj in objects:
        jsonschema.validate(obj, SCHEMA)
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpufly"
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "gpufly"


def test_selectors_meet_and_ports_line_up() -> None:
    objects = base_objects()
    daemonset, service, monitor = objects["DaemonSet"], objects["Service"], objects["ServiceMonitor"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    port_names = {port["name"] for port in container["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= port_names
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= {p["name"] for p in
                                                                               service["spec"]["ports"]}


def test_the_exporter_sees_host_pids_and_its_arguments_are_serve_options() -> None:
    pod = base_objects()["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True, "NVML's pids are the host's: the process join needs them"
    (container,) = pod["containers"]
    assert container["command"] == ["gpufly"] and container["args"][0] == "serve"
    app = typer.Typer()
    app.command()(serve)
    context = get_command(app).make_context("serve", list(container["args"][1:]))
    assert context.params["host"] == "0.0.0.0" and context.params["attribute"] == "k8s"
    assert [port["containerPort"] for port in container["ports"]] == [context.params["port"]]


def test_every_mount_names_a_volume_and_the_runtime_state_is_read_only() -> None:
    pod = base_objects()["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {volume["name"] for volume in pod["volumes"]}
    mounts = container["volumeMounts"]
    assert {mount["name"] for mount in mounts} == volumes
    assert all(mount["readOnly"] for mount in mounts)
    for template, _ in RUNTIME_SPECS:  # every spec --attribute=k8s reads is under a mount
        assert any(f"/{template}".startswith(mount["mountPath"] + "/") for mount in mounts), template
