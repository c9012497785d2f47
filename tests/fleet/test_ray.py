"""`gpufly fleet run --ray` on a Ray cluster simulated on this machine (ray.cluster_utils.Cluster: several raylets,
each its own node to Ray), with a tiny fake bench in place of the real one. Skipped where Ray is not installed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufly.fleet import NodeJob, build_report, read_fleet, run_on_ray

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow
FAKE_BENCH = str(Path(__file__).with_name("fake_bench.py")) + ":tiny_bench"
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""Ray's local mode binds and advertises 127.0.0.1 (not the machine's address), and sends no usage report."""


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[cluster_utils.Cluster]:
    for name, value in LOOPBACK_ONLY.items():
        monkeypatch.setenv(name, value)
    started = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                                          "include_dashboard": False})
    try:
        yield started
    finally:
        started.shutdown()


def test_every_node_reports_and_a_failing_bench_is_a_finding(cli, cluster, tmp_path: Path) -> None:
    cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1, resources={"fleet_test_fail": 1})
    cluster.wait_for_nodes()

    done = cli("fleet", "run", "--ray", cluster.address, "--bench", FAKE_BENCH, "--save", str(tmp_path / "fleet"),
               "--timeout", "600", "--json")

    assert done.code == 1, done.stderr
    data = json.loads(done.stdout)
    assert len(data["nodes"]) == 3
    assert [node["bench_runs"] for node in data["nodes"]].count(1) == 2
    assert all(node["gpus"] == [] for node in data["nodes"])  # the doctor ran on every node: no GPU here
    [failed] = data["findings"]
    assert failed["kind"] == "node"
    assert failed["message"].endswith("the bench did not run: RuntimeError: the fake bench was told to fail on "
                                      "this node")
    assert len(done.stderr.splitlines()) == 3  # one line per node, as each arrived
    saved = build_report(read_fleet([tmp_path / "fleet"]))
    assert [(f.kind, f.message) for f in saved.findings] == [("node", failed["message"])]
    assert saved.compared == 2


def test_a_hung_node_times_out_and_a_dead_node_is_named(cluster) -> None:
    cluster.add_node(num_cpus=1, resources={"fleet_test_hang": 1})
    gone = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    cluster.remove_node(gone)
    arrived = []

    nodes = run_on_ray(cluster.address, NodeJob(bench=FAKE_BENCH, import_frameworks=False), timeout_s=45,
                       on_node=arrived.append)

    assert len(nodes) == 3
    problems = sorted(problem for node in nodes for problem in node.problems)
    assert problems == ["Ray lists the node as dead",
                        "no result within 45 s (still waiting for its GPUs, or hung); its task was cancelled"]
    assert sorted(node.name for node in arrived) == sorted(node.name for node in nodes)
