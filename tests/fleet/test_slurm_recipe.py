"""The Slurm recipe in docs/fleet.md, run as written, with stand-ins for srun, scontrol, nvidia-smi and the
doctor and bench: the files it names aggregate into one report, and a node that wrote nothing is named."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from tests.fleet.builders import facts, run

DOCS = Path(__file__).parents[2] / "docs" / "fleet.md"
NODES = ("node01", "node02", "node03")
STAND_INS = {
    "srun": """#!/bin/bash
# Each task of the step on each node: srun's options dropped, SLURMD_NODENAME set as srun sets it.
while [[ $1 == -* ]]; do shift; done
for node in $FAKE_NODES; do SLURMD_NODENAME=$node "$@"; done
""",
    "scontrol": """#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] && printf '%s\\n' $FAKE_NODES
""",
    "nvidia-smi": """#!/bin/bash
[[ $1 == --list-gpus ]] && printf 'GPU 0: NVIDIA H100 80GB HBM3\\nGPU 1: NVIDIA H100 80GB HBM3\\n'
""",
    "gpufly": f"""#!{sys.executable}
# doctor and bench copy a generated file to --save (a node in FAKE_SILENT writes nothing); fleet is recorded.
import json, os, shutil, sys
args = sys.argv[1:]
if args[0] == "fleet":
    with open(os.environ["FAKE_FLEET_ARGS"], "w") as out:
        json.dump(args, out)
    sys.exit(0)
if os.environ["SLURMD_NODENAME"] in os.environ.get("FAKE_SILENT", "").split():
    sys.exit(1)
save = args[args.index("--save") + 1]
templates = os.environ["FAKE_TEMPLATES"]
if args[0] == "doctor":
    shutil.copy(os.path.join(templates, "facts.json"), save)
    sys.exit(1)  # as the doctor does when it has findings
index = int(args[args.index("--device") + 1].split(":")[1])
with open(os.path.join(templates, "bench.json")) as source:
    run = json.load(source)
run["device"]["index"] = index
with open(save, "w") as out:
    json.dump(run, out)
""",
}


def recipe() -> str:
    found = re.search(r"<!-- slurm-recipe -->\n```bash\n(.*?)```\n<!-- /slurm-recipe -->", DOCS.read_text(), re.S)
    assert found, "docs/fleet.md has no marked Slurm recipe"
    return found.group(1)


def run_recipe(tmp_path: Path, silent: str = "") -> list[str]:
    """Run the recipe in ``tmp_path`` as sbatch would; the `gpufly fleet ...` arguments it ended with."""
    bin_dir, templates = tmp_path / "bin", tmp_path / "templates"
    bin_dir.mkdir()
    templates.mkdir()
    for name, text in STAND_INS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    facts().save(templates / "facts.json")
    run(0).save(templates / "bench.json")
    (tmp_path / "job.sbatch").write_text(recipe())
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": "node[01-03]", "FAKE_NODES": " ".join(NODES), "FAKE_SILENT": silent,
           "FAKE_TEMPLATES": str(templates), "FAKE_FLEET_ARGS": str(tmp_path / "fleet-args.json")}
    done = subprocess.run(["bash", "job.sbatch"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((tmp_path / "fleet-args.json").read_text())


def test_the_files_the_recipe_writes_aggregate(cli, tmp_path: Path) -> None:
    args = run_recipe(tmp_path)

    assert sorted(p.name for p in (tmp_path / "fleet-4242").iterdir()) == sorted(
        [f"{node}.facts.json" for node in NODES] + [f"{node}.bench.cuda{i}.json" for node in NODES for i in (0, 1)])
    done = cli(*args, "--json")
    assert done.code == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [(node["name"], node["bench_runs"]) for node in data["nodes"]] == [(node, 2) for node in NODES]
    assert (data["uniform"], data["compared"]) == (True, 24)


def test_a_node_whose_task_wrote_nothing_is_named(cli, tmp_path: Path) -> None:
    args = run_recipe(tmp_path, silent="node02")

    done = cli(*args, "--json")

    assert done.code == 1
    [finding] = json.loads(done.stdout)["findings"]
    assert (finding["kind"], finding["node"]) == ("node", "node02")

