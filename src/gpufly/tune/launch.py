"""The commands that run a tuner configuration across nodes: torchrun agents meeting at a c10d rendezvous.

Pure: it builds argument lists and script text and runs nothing. The tuner's own two-agent loopback trials
(``gpufly.tune.trial``) use the same builder as the commands ``gpufly tune --launcher torchrun|slurm`` prints for
a real cluster, so what the tests run on 127.0.0.1 is what a user pastes, with the head node's address in place
of the loopback one.

Every node runs the same torchrun command (c10d numbers the nodes as they arrive, so no ``--node-rank``); the
request (workload, knobs, steps) goes in ``GPUFLY_TUNE_REQUEST``, which torchrun passes to every rank, since it
does not pass stdin on. Rank 0 prints the trial's JSON line, as in a local trial.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

WORKER_MODULE = "gpufly.tune.worker"
REQUEST_ENV = "GPUFLY_TUNE_REQUEST"
DEFAULT_PORT = 29500
"""torchrun's own default rendezvous port, the one cluster firewalls tend to open."""
HEAD_PLACEHOLDER = "$HEAD_NODE_ADDR"
"""Where the printed torchrun commands put the head node's address: a shell variable the user sets on each node."""
SLURM_HEAD = "$head"
"""In the sbatch script: the job's first node, from ``scontrol show hostnames``."""
LAUNCHERS = ("torchrun", "slurm")
_SHELL_VARIABLE = re.compile(r"\$\{?[A-Za-z_]\w*")


@dataclass(frozen=True)
class Layout:
    """How many nodes, and how many processes (one per GPU on a cluster) each node's torchrun starts."""

    nodes: int
    processes_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node


@dataclass(frozen=True)
class Rendezvous:
    """Where the agents meet: the host that serves the c10d store (an address, or a shell variable holding one),
    its port, and an id that no other job on that store shares."""

    host: str
    port: int
    run_id: str

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


def torchrun_args(layout: Layout, rendezvous: Rendezvous, *, launcher: tuple[str, ...] = ("torchrun",),
                  local_addr: str | None = None, is_host: bool | None = None) -> list[str]:
    """One agent's command line. ``is_host`` says whether this agent serves the rendezvous store; left out, torch
    decides from the host name (on loopback both agents would think so, and one would fall back late).
    ``--max-restarts=0``: a trial that fails is a result, not something to retry.

    >>> torchrun_args(Layout(2, 8), Rendezvous("$HEAD_NODE_ADDR", 29500, "tune-cnn"))[1:5]
    ['--nnodes=2', '--nproc-per-node=8', '--rdzv-backend=c10d', '--rdzv-endpoint=$HEAD_NODE_ADDR:29500']
    """
    args = [*launcher, f"--nnodes={layout.nodes}", f"--nproc-per-node={layout.processes_per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={rendezvous.endpoint}", f"--rdzv-id={rendezvous.run_id}",
            "--max-restarts=0"]
    if local_addr is not None:
        args.append(f"--local-addr={local_addr}")
    if is_host is not None:
        args.append(f"--rdzv-conf=is_host={'true' if is_host else 'false'}")
    return [*args, "-m", WORKER_MODULE]


def loopback_agents(layout: Layout, port: int, run_id: str, python: str) -> list[list[str]]:
    """The ``layout.nodes`` agents of a trial on this machine, as if each were a node: all meet at 127.0.0.1:``port``,
    the first serves the store, and each gives its ranks 127.0.0.1 as the master address (the host's own name may
    not resolve in a sandbox)."""
    launcher = (python, "-m", "torch.distributed.run")
    rendezvous = Rendezvous("127.0.0.1", port, run_id)
    return [torchrun_args(layout, rendezvous, launcher=launcher, local_addr="127.0.0.1", is_host=node == 0)
            for node in range(layout.nodes)]


def request(workload: str, knobs: dict[str, Any], steps: int, world_size: int, device: str | None = "cuda",
            seed: int = 0) -> dict[str, Any]:
    """The worker's request for a run over ``world_size`` processes: the knobs with ``ddp`` set to it (the
    worker wraps the model in DistributedDataParallel when it sees more than one process)."""
    ddp = {"ddp": world_size} if world_size > 1 else {}
    without = {name: value for name, value in knobs.items() if name != "ddp"}
    return {"workload": workload, "knobs": {**without, **ddp}, "steps": steps, "device": device, "seed": seed}


def shell_word(word: str) -> str:
    """A word quoted for a POSIX shell: one holding a shell variable in double quotes, so the shell expands it
    (the head node's address); any other as ``shlex.quote`` leaves it, literal.

    >>> shell_word("--rdzv-endpoint=$head:29500"), shell_word("it's")
    ('"--rdzv-endpoint=$head:29500"', '\\'it\\'"\\'"\\'s\\'')
    """
    if not _SHELL_VARIABLE.search(word):
        return shlex.quote(word)
    return '"' + re.sub(r'(["\\`])', r"\\\1", word) + '"'


def shell_line(argv: list[str], environment: dict[str, str] | None = None) -> str:
    """``NAME=value ... argv`` as one shell line; the environment's values are always literal."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in (environment or {}).items()]
    return " ".join([*assignments, *(shell_word(word) for word in argv)])


@dataclass(frozen=True)
class ClusterPlan:
    """What to run on a real cluster for one configuration: the layout, the worker's request and the launcher."""

    launcher: str
    layout: Layout
    request: dict[str, Any]
    port: int = DEFAULT_PORT
    job_name: str = "gpufly-tune"

    @property
    def request_json(self) -> str:
        return json.dumps(self.request, sort_keys=True, separators=(",", ":"))

    def torchrun_command(self) -> dict[str, Any]:
        """The command every node runs, the same on each (c10d numbers the nodes as they join): the argument list,
        its environment, and both as one shell line, to run with HEAD_NODE_ADDR set to the first node's address."""
        argv = torchrun_args(self.layout, Rendezvous(HEAD_PLACEHOLDER, self.port, self.job_name))
        environment = {REQUEST_ENV: self.request_json}
        return {"argv": argv, "environment": environment, "shell": shell_line(argv, environment)}

    def sbatch_directives(self) -> dict[str, str]:
        """One task per node (its torchrun starts a process per GPU), every GPU of the node for it."""
        return {"job-name": self.job_name, "nodes": str(self.layout.nodes), "ntasks-per-node": "1",
                "gpus-per-node": str(self.layout.processes_per_node), "output": f"{self.job_name}-%j.out"}

    def sbatch_script(self) -> str:
        """The batch script: the head node is the job's first host, and srun starts one torchrun per node."""
        argv = torchrun_args(self.layout, Rendezvous(SLURM_HEAD, self.port, "$SLURM_JOB_ID"))
        lines = ["#!/bin/bash", *(f"#SBATCH --{key}={value}" for key, value in self.sbatch_directives().items()),
                 "set -euo pipefail",
                 "# The rendezvous is served from the job's first node (sed, not head -n 1: head leaves early, and the "
                 "SIGPIPE it can give scontrol fails the job under pipefail).",
                 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
                 f"export {REQUEST_ENV}={shlex.quote(self.request_json)}",
                 f"srun {shell_line(argv)}"]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """The plan as ``--json`` prints it: every node's command (argv and a shell line) or the sbatch script."""
        plan: dict[str, Any] = {"launcher": self.launcher, "nodes": self.layout.nodes,
                                "gpus_per_node": self.layout.processes_per_node,
                                "world_size": self.layout.world_size, "request": self.request,
                                "rendezvous": {"backend": "c10d", "port": self.port}}
        if self.launcher == "slurm":
            plan["rendezvous"]["endpoint"] = f"{SLURM_HEAD}:{self.port}"
            plan["sbatch"] = {"directives": self.sbatch_directives(), "script": self.sbatch_script()}
        else:
            plan["rendezvous"]["endpoint"] = f"{HEAD_PLACEHOLDER}:{self.port}"
            plan["command"] = self.torchrun_command()
        return plan


def job_name(workload: str) -> str:
    """A Slurm job name and rendezvous id from the workload: letters, digits, dots, dashes and underscores only.

    >>> job_name("train.py:build"), job_name("/home/me/my model.py:make")
    ('gpufly-tune-train.py-build', 'gpufly-tune-my_model.py-make')
    """
    base = workload.rsplit("/", 1)[-1]
    return "gpufly-tune-" + re.sub(r"[^\w.-]", "_", base.replace(":", "-"))
