"""`gpufly watch --attribute slurm,k8s --price-per-kwh`: each GPU process's job in the records (a fake /proc tree),
and the run's energy and cost per GPU and per job at the end, ended jobs included."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor.attribution import Attributor
from gpufly.monitor.backends.live import LiveBackend, ProcessJoiner
from gpufly.monitor.energy import EnergyPrice, JobLedger, run_summary
from gpufly.monitor.logger import SampleLog
from gpufly.monitor.sampler import History, Sampler
from tests.fakes.nvml import fake_nvml, nvml_env
from tests.monitor.test_attribution import HOST, PROC, Psutil

SLURM, POD = "4242", "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"


class Run:
    """`gpufly watch`'s loop over the recorded H100 and A100 and the fake /proc: a log, a ledger, a history."""

    def __init__(self, output: Path, price: EnergyPrice | None = None) -> None:
        self.nvml: FakePynvml = fake_nvml("monitor/nvml_live.json")
        self.now = 1_733_350_000.0
        joiner = ProcessJoiner(PROC, open_process=Psutil, clock=lambda: 0.0, procfs=True,
                               attribute=Attributor(frozenset({"slurm", "k8s"}), PROC, HOST))
        self.log = SampleLog(output)
        self.ledger = JobLedger(price)
        self.sampler = Sampler(LiveBackend(self.nvml, hostname="node-1", joiner=joiner, clock=lambda: self.now),
                               history=History(capacity=2), listeners=[self.ledger, self.log])

    def sample(self, gpu: int, pids: list[int], burn_j: float = 0.0) -> None:
        """The processes on ``gpu`` now, after its energy counter advanced by ``burn_j``, then one sample."""
        self.nvml.set_processes(gpu, [{"pid": pid, "used_memory": 2**30} for pid in pids])
        self.nvml.device_data(gpu)["energy_mj"] += round(burn_j * 1000)
        self.now += 1.0
        self.sampler.sample_once()


def test_each_gpu_process_carries_its_job_in_jsonl_and_csv(tmp_path: Path) -> None:
    for suffix in (".jsonl", ".csv"):
        run = Run(tmp_path / f"run{suffix}")
        run.nvml.set_processes(1, [{"pid": 203, "used_memory": 2**30}])
        run.sample(0, [101, 301])
        run.log.close()
    line = json.loads((tmp_path / "run.jsonl").read_text())
    jobs = {(p["gpu_index"], p["pid"]): p["job"] for gpu in line["gpus"] for p in gpu["processes"]}
    assert jobs == {(0, 101): SLURM, (0, 301): None, (1, 203): POD}, "a login session is in no job"
    assert [(job["scheduler"], job["key"], job["user"]) for job in line["jobs"]] == [
        ("slurm", SLURM, "alice"), ("k8s", POD, "")]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run.csv").read_text())))
    assert [row["gpu_jobs"] for row in rows] == [SLURM, POD]


def test_the_summary_gives_energy_and_cost_per_job_ended_jobs_included(tmp_path: Path) -> None:
    run = Run(tmp_path / "run.jsonl", EnergyPrice(0.30, "EUR"))
    run.sample(0, [101, 203])
    run.sample(0, [101, 203], burn_j=3.6e6)  # one kWh, split evenly: NVML gives no SM share here
    run.sample(0, [203], burn_j=1.8e6)  # the Slurm job ended; the pod has the GPU to itself
    run.sample(0, [], burn_j=100.0)  # an idle GPU's energy is nobody's
    totals = {total.job.key: total for total in run.ledger.totals()}
    assert totals[SLURM].energy_j == pytest.approx(1.8e6) and totals[SLURM].cost == pytest.approx(0.15)
    assert totals[POD].energy_j == pytest.approx(3.6e6) and totals[POD].currency == "EUR"
    assert (totals[SLURM].samples, totals[SLURM].gpus, totals[SLURM].job.name) == (2, [0], "llama-sft")
    assert (totals[SLURM].first_seen, totals[SLURM].last_seen) == (run.now - 3, run.now - 2)
    summary = run_summary(run.sampler.history.latest, run.sampler.history.energy_since_start_j, run.ledger,
                          run.ledger.price)
    lines = summary.lines(attributed=True)
    assert lines[0] == "energy: GPU 0 (NVIDIA H100 80GB HBM3): 1.5000 kWh (5400100 J), 0.4500 EUR"
    assert "job: slurm job 4242 (alice, llama-sft, gpu): GPUs 0, 0.5000 kWh (1800000 J), 0.1500 EUR over 2 samples" \
        in lines
    assert "job: pod 5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9 (serving, infer-7d9f): GPUs 0, 1.0000 kWh (3600000 J), " \
        "0.3000 EUR over 3 samples" in lines
    assert summary.to_dict()["jobs"][0]["key"] == SLURM


def test_a_job_that_comes_back_keeps_what_it_used_before(tmp_path: Path) -> None:
    run = Run(tmp_path / "run.jsonl")
    run.sample(0, [101])
    run.sample(0, [101], burn_j=50.0)
    run.sample(0, [], burn_j=10.0)
    run.sample(0, [101], burn_j=10.0)
    run.sample(0, [101], burn_j=20.0)
    (total,) = run.ledger.totals()
    assert total.energy_j == pytest.approx(50.0 + 10.0 + 20.0) and total.cost is None
    assert run.ledger.totals()[0] is not total, "totals are copies: the ledger goes on"


# --- the command line


@pytest.mark.parametrize(("args", "error", "hint"), [
    (["--attribute", "slurm", "--replay", "x.jsonl"],
     "error: --attribute reads this machine's processes; it does nothing with --replay",
     "hint: a recording holds the jobs it was made with, as recorded: drop --attribute"),
    (["--currency", "EUR"], "error: --currency names the currency of --price-per-kwh, which was not given",
     "hint: add --price-per-kwh PRICE, e.g. --price-per-kwh 0.15 --currency EUR"),
    (["--attribute", "slurm,kube"], "error: unknown attribution source 'kube'; did you mean kubernetes?",
     "hint: --attribute takes a comma-separated list of: slurm, k8s"),
])
def test_bad_options_are_one_error_and_one_hint(cli, args: list[str], error: str, hint: str) -> None:
    done = cli("watch", "--count", "1", *args, env=nvml_env("hw/no_driver.json"))
    assert (done.code, done.stderr.splitlines()) == (2, [error, hint])


def test_a_priced_watch_ends_with_energy_per_gpu_and_per_recorded_job(cli, tmp_path: Path) -> None:
    recording = tmp_path / "jobs.jsonl"
    run = Run(recording)
    run.sample(0, [101])
    run.sample(0, [101], burn_j=7.2e5)
    run.log.close()
    out = tmp_path / "again.jsonl"
    done = cli("watch", "--replay", str(recording), "--count", "2", "--interval", "0.01", "-o", str(out),
               "--price-per-kwh", "0.5", "--currency", "EUR")
    assert done.code == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"wrote 2 samples to {out}",
        "energy: GPU 0 (NVIDIA H100 80GB HBM3): 0.2000 kWh (720000 J), 0.1000 EUR",
        "energy: GPU 1 (NVIDIA A100-SXM4-80GB): 0.0000 kWh (0 J), 0.0000 EUR",
        "job: slurm job 4242 (alice, llama-sft, gpu): GPUs 0, 0.2000 kWh (720000 J), 0.1000 EUR over 2 samples",
    ]


def test_an_attributing_watch_says_when_no_process_belonged_to_a_job(cli) -> None:
    done = cli("watch", "--count", "1", "--interval", "0.01", "--attribute", "slurm",
               env=nvml_env("monitor/nvml_live.json"))
    assert done.code == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "job: no GPU process belonged to a job"
    assert "energy: GPU 0 (NVIDIA H100 80GB HBM3)" in done.stderr
