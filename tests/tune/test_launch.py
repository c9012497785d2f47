"""The commands that run a configuration across nodes: parsed back as torchrun and Slurm would read them."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufly.tune.launch import (
    HEAD_PLACEHOLDER,
    REQUEST_ENV,
    WORKER_MODULE,
    ClusterPlan,
    Layout,
    job_name,
    loopback_agents,
    request,
    shell_line,
)


def torchrun_parse(argv: list[str]) -> Any:
    """The arguments as torchrun's own parser reads them (``torchrun ARGS``, or ``python -m ... ARGS``)."""
    run = pytest.importorskip("torch.distributed.run")
    start = 1 if argv[0] == "torchrun" else 3
    return run.get_args_parser().parse_args(argv[start:])


def plan(launcher: str, nodes: int = 4, gpus: int = 8, knobs: dict[str, Any] | None = None) -> ClusterPlan:
    layout = Layout(nodes, gpus)
    return ClusterPlan(launcher, layout, request("train.py:build", knobs or {"amp": "bf16"}, 40, layout.world_size),
                       job_name=job_name("train.py:build"))


def test_every_node_runs_the_same_torchrun_command_that_meets_at_the_head_node() -> None:
    command = plan("torchrun", nodes=3, gpus=4).torchrun_command()
    args = torchrun_parse(command["argv"])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("3", "4", "c10d")
    assert args.rdzv_endpoint == f"{HEAD_PLACEHOLDER}:29500" and args.max_restarts == 0
    assert args.module and args.training_script == WORKER_MODULE
    assert args.node_rank == 0, "left at its default: c10d numbers the nodes as they join"
    assert args.rdzv_id == "gpufly-tune-train.py-build"


def test_the_shell_line_pastes_back_into_the_argv_and_the_request() -> None:
    command = plan("torchrun", nodes=2, gpus=8).torchrun_command()
    words = shlex.split(command["shell"])
    assignment, argv = words[0], words[1:]
    name, _, value = assignment.partition("=")
    assert name == REQUEST_ENV and argv == command["argv"]
    sent = json.loads(value)
    assert sent == {"workload": "train.py:build", "knobs": {"amp": "bf16", "ddp": 16}, "steps": 40, "device": "cuda",
                    "seed": 0}
    assert f'"--rdzv-endpoint={HEAD_PLACEHOLDER}:29500"' in command["shell"], "left for the shell to expand"


def test_the_world_size_replaces_any_ddp_in_the_knobs_and_one_process_has_none() -> None:
    assert request("cnn", {"ddp": 2, "amp": "bf16"}, 40, 16)["knobs"] == {"amp": "bf16", "ddp": 16}
    assert request("cnn", {"ddp": 2}, 40, 1)["knobs"] == {}


def _directives(script: str) -> dict[str, str]:
    found = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line.removeprefix("#SBATCH --").partition("=")
            found[key] = value
    return found


def test_the_sbatch_script_asks_one_task_per_node_and_torchrun_agrees_with_it() -> None:
    script = plan("slurm", nodes=4, gpus=8).sbatch_script()
    assert script.startswith("#!/bin/bash\n")
    directives = _directives(script)
    assert directives == {"job-name": "gpufly-tune-train.py-build", "nodes": "4", "ntasks-per-node": "1",
                          "gpus-per-node": "8", "output": "gpufly-tune-train.py-build-%j.out"}
    srun = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1
    argv = shlex.split(srun[0])[1:]
    args = torchrun_parse(argv)
    assert args.nnodes == directives["nodes"] and args.nproc_per_node == directives["gpus-per-node"]
    assert args.rdzv_endpoint == "$head:29500" and args.rdzv_backend == "c10d" and args.rdzv_id == "$SLURM_JOB_ID"
    assert 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)' in script.splitlines()


def test_the_sbatch_script_run_by_bash_hands_srun_the_first_node_as_the_endpoint(tmp_path: Path) -> None:
    """Run the script as Slurm would on its first node, with scontrol and srun standing in: what srun receives is
    what every node's torchrun would, after the shell expanded it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"scontrol": 'test "$1 $2 $3" = "show hostnames gpu-[07-08]" && printf "gpu-07\\ngpu-08\\n"\n',
             "srun": f'printf "%s\\n" "$@" > {tmp_path}/argv\nprintf "%s" "${REQUEST_ENV}" > {tmp_path}/request\n'}
    for name, body in fakes.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/bash\n" + body)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    script = tmp_path / "job.sbatch"
    script.write_text(plan("slurm", nodes=2, gpus=8).sbatch_script())
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[07-08]",
           "SLURM_JOB_ID": "4242"}
    ran = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    args = torchrun_parse(argv)
    assert args.rdzv_endpoint == "gpu-07:29500" and args.rdzv_id == "4242" and args.nnodes == "2"
    assert json.loads((tmp_path / "request").read_text())["knobs"] == {"amp": "bf16", "ddp": 16}


def test_loopback_agents_meet_on_127_0_0_1_and_only_the_first_serves_the_store() -> None:
    agents = loopback_agents(Layout(2, 1), 31234, "gpufly-1-31234-0", "/usr/bin/python3")
    parsed = [torchrun_parse(agent) for agent in agents]
    assert [agent[:3] for agent in agents] == [["/usr/bin/python3", "-m", "torch.distributed.run"]] * 2
    assert {p.rdzv_endpoint for p in parsed} == {"127.0.0.1:31234"} and {p.local_addr for p in parsed} == {"127.0.0.1"}
    assert [p.rdzv_conf for p in parsed] == ["is_host=true", "is_host=false"]
    assert {(p.nnodes, p.nproc_per_node, p.rdzv_id) for p in parsed} == {("2", "1", "gpufly-1-31234-0")}


def test_the_json_plan_holds_the_commands_or_the_script() -> None:
    torchrun = plan("torchrun", nodes=2, gpus=2).to_dict()
    assert torchrun["world_size"] == 4 and torchrun["command"]["argv"][0] == "torchrun" and "sbatch" not in torchrun
    assert torchrun["rendezvous"] == {"backend": "c10d", "port": 29500, "endpoint": f"{HEAD_PLACEHOLDER}:29500"}
    slurm = plan("slurm", nodes=2, gpus=2).to_dict()
    assert _directives(slurm["sbatch"]["script"]) == slurm["sbatch"]["directives"] and "command" not in slurm


def test_a_word_with_quotes_or_spaces_stays_one_literal_word() -> None:
    line = shell_line(["torchrun", "it's a $(trap)"], {"X": "a 'b' $HOME"})
    assert shlex.split(line) == ["X=a 'b' $HOME", "torchrun", "it's a $(trap)"]
    words = shell_line(["torchrun", "it's a $(trap)"])
    echoed = subprocess.run(["bash", "-c", f"printf '%s|' {words}"],
                            capture_output=True, text=True, timeout=30)
    assert echoed.stdout == "torchrun|it's a $(trap)|", echoed.stderr
