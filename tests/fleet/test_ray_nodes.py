"""The Ray runner's pure parts, without a cluster: how nodes are named, and what a node's returned data becomes."""

from __future__ import annotations

from gpufly.fleet import RayNode, cluster_nodes
from gpufly.fleet.ray_run import node_from_payload
from tests.fleet.builders import facts, run


def listed(node_id: str, host: str, alive: bool = True, gpus: float = 8.0) -> dict:
    return {"NodeID": node_id, "NodeManagerHostname": host, "Alive": alive, "Resources": {"GPU": gpus, "CPU": 64.0}}


def test_nodes_are_named_by_short_host_name_and_by_node_id_where_hosts_repeat() -> None:
    nodes = cluster_nodes([listed("aaaa1111ffff", "gpu-02.cluster.local"), listed("bbbb2222ffff", "worker"),
                           listed("cccc3333ffff", "worker", alive=False, gpus=0)])

    assert nodes == [RayNode("aaaa1111ffff", "gpu-02", True, 8), RayNode("bbbb2222ffff", "worker-bbbb2222", True, 8),
                     RayNode("cccc3333ffff", "worker-cccc3333", False, 0)]


def test_a_nodes_data_goes_through_the_saved_files_strict_loaders() -> None:
    node = RayNode("aaaa1111ffff", "gpu-02", True, 2)
    payload = {"facts": facts().to_dict(), "runs": [run(0).to_dict(), run(1).to_dict()], "problems": []}

    data = node_from_payload(node, payload)

    assert (data.name, len(data.runs), data.problems) == ("gpu-02", 2, ())
    assert data.facts is not None and data.facts.driver.version == "550.54.15"


def test_malformed_data_from_a_node_is_its_problem() -> None:
    node = RayNode("aaaa1111ffff", "gpu-02", True, 2)
    broken_run = {**run(0).to_dict(), "results": [{"name": "gemm.bf16", "value": "fast"}]}

    missing = node_from_payload(node, {"facts": facts().to_dict()})
    invalid = node_from_payload(node, {"facts": facts().to_dict(), "runs": [run(0).to_dict(), broken_run],
                                       "problems": []})

    assert missing.problems == ("malformed result: dict without its runs",)
    assert invalid.facts is not None and len(invalid.runs) == 1
    assert invalid.problems[0].startswith("gpu-02 (Ray) bench run 1: results[0].")
