"""`gpufly fleet run --ray`: the node job on every node of an existing Ray cluster, results as they arrive.

One task per node, pinned there by a hard node-affinity strategy, asking for all of the node's GPUs so nothing
else runs on them while they are measured, and none of its CPUs so a node whose CPUs are all reserved (a head
started with --num-cpus=0) is still reached. A node that Ray lists as dead, whose task fails, or that gives no
result before the deadline is a node with a problem in the report, never the end of the run.
"""

from __future__ import annotations

import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufly.bench import BenchRun
from gpufly.doctor import facts_from_dict
from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.fleet.node_job import NodeJob, run_node_job
from gpufly.fleet.nodes import NodeData

DEFAULT_TIMEOUT_S = 1800.0
"""The quick bench takes about a minute per GPU; eight GPUs, the doctor and a busy node fit in half an hour."""
CONNECT_HINT = ("start one with `ray start --head` (and `ray start --address HEAD:6379` on each node), or pass its "
                "address: gpufly fleet run --ray HEAD:6379")


@dataclass(frozen=True)
class RayNode:
    """A node as Ray lists it, with the name the report will use."""

    id: str
    name: str
    alive: bool
    gpus: int


def _safe(name: str) -> str:
    """A host name as a file-name prefix: its first label, anything unusual replaced."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", name.split(".", 1)[0]) or "node"


def cluster_nodes(listed: Iterable[Mapping[str, Any]]) -> list[RayNode]:
    """Ray's ``ray.nodes()`` entries as named nodes: named by host, and where two share a host name (two
    raylets on one machine, containers with one hostname), by host and the start of Ray's node id.

    >>> [n.name for n in cluster_nodes([{"NodeID": "ab12cd34ef", "NodeManagerHostname": "gpu7.lab", "Alive": True,
    ...                                  "Resources": {"GPU": 8.0}}])]
    ['gpu7']
    """
    entries = list(listed)
    hosts = Counter(_safe(str(entry.get("NodeManagerHostname") or "node")) for entry in entries)
    nodes = []
    for entry in entries:
        node_id = str(entry["NodeID"])
        host = _safe(str(entry.get("NodeManagerHostname") or "node"))
        name = host if hosts[host] == 1 else f"{host}-{node_id[:8]}"
        nodes.append(RayNode(node_id, name, bool(entry.get("Alive")),
                             int((entry.get("Resources") or {}).get("GPU", 0))))
    return sorted(nodes, key=lambda node: node.name)


def node_from_payload(node: RayNode, payload: Any) -> NodeData:
    """A node's returned data through the same strict loaders as saved files. What does not load (a bench that
    returned something else) is the node's problem, and the rest still counts."""
    source = f"ray node {node.id[:12]}"
    if not isinstance(payload, dict) or not isinstance(payload.get("runs"), list):
        return NodeData(node.name, problems=(f"malformed result: {type(payload).__name__} without its runs",),
                        sources=(source,))
    problems = [str(problem) for problem in payload.get("problems") or ()]
    facts = None
    try:
        facts = facts_from_dict(payload.get("facts"), where=f"{node.name} (Ray) facts")
    except GpuflyError as exc:
        problems.append(exc.message)
    runs = []
    for position, run in enumerate(payload["runs"]):
        try:
            runs.append(BenchRun.from_dict(run, source=f"{node.name} (Ray) bench run {position}"))
        except GpuflyError as exc:
            problems.append(exc.message)
    return NodeData(node.name, facts, tuple(runs), tuple(problems), (source,))


def check_reachable(address: str, connect: Callable[..., Any] = socket.create_connection,
                    timeout_s: float = 10.0) -> None:
    """Refuse a HOST:PORT nobody answers on, at once: Ray itself retries a dead address for minutes. "auto" and a
    ray:// client address are left to Ray, which answers those promptly."""
    found = re.fullmatch(r"\[?([^\[\]]+?)\]?:(\d+)", address)
    if address == "auto" or address.startswith("ray://") or found is None:
        return
    try:
        connect((found.group(1), int(found.group(2))), timeout=timeout_s).close()
    except OSError as exc:
        raise GpuflyError(f"cannot join a Ray cluster at {address}: {exc.strerror or exc}",
                          hint=CONNECT_HINT) from None


def _connect(ray: Any, address: str) -> bool:
    """Join the cluster; True when this call connected (and so must disconnect)."""
    if ray.is_initialized():
        return False
    check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GpuflyError(f"cannot join a Ray cluster at {address}: {first}", hint=CONNECT_HINT) from None
    return True


def _failure(ray: Any, exc: Exception) -> str:
    """A failed task in one line: the node job's own error where Ray carries it."""
    cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None else exc
    lines = str(cause).strip().splitlines()
    return f"failed: {type(cause).__name__}: {lines[0]}" if lines else f"failed: {type(cause).__name__}"


def run_on_ray(address: str, job: NodeJob, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               on_node: Callable[[NodeData], None] | None = None,
               clock: Callable[[], float] = time.monotonic) -> list[NodeData]:
    """Run ``job`` on every node of the Ray cluster at ``address`` ("auto": the one this machine belongs to).

    ``on_node`` is called as each node's result arrives (to print it, to save its files); nodes still running
    at the deadline are cancelled and reported as timed out.
    """
    ray = require("ray", "gpufly fleet run --ray")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    report = on_node or (lambda node: None)
    connected = _connect(ray, address)
    try:
        nodes = cluster_nodes(ray.nodes())
        results = []
        for node in (n for n in nodes if not n.alive):
            results.append(NodeData(node.name, problems=("Ray lists the node as dead",),
                                    sources=(f"ray node {node.id[:12]}",)))
            report(results[-1])
        task = ray.remote(max_retries=0, max_calls=1)(run_node_job)
        pending = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
                                num_cpus=0, num_gpus=node.gpus).remote(job): node
                   for node in nodes if node.alive}
        deadline = clock() + timeout_s
        while pending and (left := deadline - clock()) > 0:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            for ref in done:
                node = pending.pop(ref)
                try:
                    data = node_from_payload(node, ray.get(ref))
                except ray.exceptions.RayError as exc:
                    data = NodeData(node.name, problems=(_failure(ray, exc),), sources=(f"ray node {node.id[:12]}",))
                results.append(data)
                report(data)
        for ref, node in pending.items():
            ray.cancel(ref, force=True)
            results.append(NodeData(node.name, problems=(
                f"no result within {timeout_s:g} s (still waiting for its GPUs, or hung); its task was cancelled",),
                sources=(f"ray node {node.id[:12]}",)))
            report(results[-1])
        return sorted(results, key=lambda data: data.name)
    finally:
        if connected:
            ray.shutdown()
