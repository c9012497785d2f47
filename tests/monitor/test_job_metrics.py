"""Jobs and energy in the exporter: one info series per job, memory and energy per job from the fake NVML's
advancing energy counter, the price of it, and series that end with the job."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufly.errors import GpuflyError
from gpufly.hw import GpuSample, ProcessSample
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor.attribution import Attributor
from gpufly.monitor.backends.live import LiveBackend, ProcessJoiner
from gpufly.monitor.energy import EnergyPrice, JobEnergy, gpu_shares
from gpufly.monitor.exporter import CostCollector, JobCollector, exporter_registry
from gpufly.monitor.sample import JobSample, Snapshot
from gpufly.monitor.sampler import History, Sampler
from tests.fakes.nvml import fake_nvml
from tests.monitor.test_attribution import HOST, PROC, Psutil

Samples = dict[str, list[tuple[dict[str, str], float]]]
SLURM, POD = "4242", "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"


class Node:
    """A fake node: the recorded H100 and A100 (fake NVML), the fake /proc, `gpufly serve`'s collectors."""

    def __init__(self, price: EnergyPrice | None = None) -> None:
        self.nvml: FakePynvml = fake_nvml("monitor/nvml_live.json")
        joiner = ProcessJoiner(PROC, open_process=Psutil, clock=lambda: 0.0, procfs=True,
                               attribute=Attributor(frozenset({"slurm", "k8s"}), PROC, HOST))
        self.energy = JobEnergy()
        self.sampler = Sampler(LiveBackend(self.nvml, hostname="node-1", joiner=joiner), listeners=[self.energy])
        self.registry = exporter_registry(self.sampler.history)
        self.registry.register(JobCollector(self.sampler.history, self.energy))
        if price is not None:
            self.registry.register(CostCollector(self.sampler.history, price, self.energy))

    def run(self, gpu: int, processes: list[dict[str, int]], sm: dict[int, int] | None = None) -> None:
        self.nvml.set_processes(gpu, processes)
        if sm is not None:
            stamp = max((u["time"] for u in self.nvml.device_data(gpu).get("process_utilization", [])), default=0)
            self.nvml.device_data(gpu)["process_utilization"] = [
                {"pid": pid, "sm": share, "time": stamp + 1} for pid, share in sm.items()]

    def burn(self, gpu: int, joules: float) -> None:
        """The GPU's energy counter advances, as NVML's does (millijoules)."""
        self.nvml.device_data(gpu)["energy_mj"] += round(joules * 1000)

    def scrape(self) -> Samples:
        found: Samples = {}
        for family in text_string_to_metric_families(generate_latest(self.registry).decode()):
            for sample in family.samples:
                found.setdefault(sample.name, []).append((sample.labels, sample.value))
        return found


def by(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    return {tuple(labels[k] for k in keys): value for labels, value in samples.get(name, [])}


def test_one_info_series_per_job_and_memory_summed_per_job_and_gpu() -> None:
    node = Node()
    node.run(0, [{"pid": 101, "used_memory": 30 * 2**30}, {"pid": 203, "used_memory": 2**30},
                 {"pid": 301, "used_memory": 2**29}])
    node.run(1, [{"pid": 101, "used_memory": 8 * 2**30}])
    node.sampler.sample_once()
    samples = node.scrape()
    info = {labels["job"]: labels for labels, value in samples["gpufly_job_info"] if value == 1.0}
    assert set(info) == {SLURM, POD} and len(samples["gpufly_job_info"]) == 2
    assert info[SLURM] == {"job": SLURM, "scheduler": "slurm", "user": "alice", "name": "llama-sft",
                                "partition": "gpu", "namespace": "", "container": "", "Hostname": "node-1"}
    assert (info[POD]["name"], info[POD]["namespace"]) == ("infer-7d9f", "serving")
    assert by(samples, "gpufly_job_gpu_memory_bytes", "job", "gpu") == {
        (SLURM, "0"): 30 * 2**30, (POD, "0"): 2**30, (SLURM, "1"): 8 * 2**30}
    assert all("job" not in labels for labels, _ in samples["DCGM_FI_DEV_FB_USED"]), "no job label on GPU series"


def test_job_energy_comes_from_the_counter_split_by_sm_share() -> None:
    node = Node()
    node.run(0, [{"pid": 101, "used_memory": 2**30}, {"pid": 203, "used_memory": 2**30}], sm={101: 60, 203: 20})
    node.sampler.sample_once()
    node.burn(0, 800.0)
    node.run(0, [{"pid": 101, "used_memory": 2**30}, {"pid": 203, "used_memory": 2**30}], sm={101: 60, 203: 20})
    node.sampler.sample_once()
    samples = node.scrape()
    energy = by(samples, "gpufly_job_energy_joules_total", "job")
    assert energy == {(SLURM,): pytest.approx(600.0), (POD,): pytest.approx(200.0)}
    assert by(samples, "gpufly_job_gpu_share", "job", "basis") == {(SLURM, "sm"): 0.75, (POD, "sm"): 0.25}
    assert by(samples, "gpufly_gpu_energy_joules_total", "gpu")[("0",)] == pytest.approx(800.0)


def test_without_a_share_from_nvml_energy_splits_evenly_per_process_and_says_so() -> None:
    node = Node()
    node.run(0, [{"pid": 101, "used_memory": 2**30}, {"pid": 203, "used_memory": 2**30},
                 {"pid": 301, "used_memory": 2**30}, {"pid": 401, "used_memory": 2**30}])
    node.sampler.sample_once()
    node.burn(0, 400.0)
    node.sampler.sample_once()
    samples = node.scrape()
    energy = by(samples, "gpufly_job_energy_joules_total", "job")
    assert energy == {(SLURM,): pytest.approx(100.0), (POD,): pytest.approx(100.0), ("5000",): pytest.approx(100.0)}
    assert {basis for (_, basis) in by(samples, "gpufly_job_gpu_share", "job", "basis")} == {"even"}
    help_text = generate_latest(node.registry).decode()
    assert "evenly per process where NVML gives no share" in help_text


def test_a_job_disappears_with_its_last_process() -> None:
    node = Node()
    node.run(0, [{"pid": 101, "used_memory": 2**30}, {"pid": 203, "used_memory": 2**30}])
    node.sampler.sample_once()
    node.run(0, [{"pid": 203, "used_memory": 2**30}])
    node.burn(0, 100.0)
    node.sampler.sample_once()
    samples = node.scrape()
    assert {labels["job"] for labels, _ in samples["gpufly_job_info"]} == {POD}
    assert {key for (key,) in by(samples, "gpufly_job_energy_joules_total", "job")} == {POD}
    assert {key for (key, _) in by(samples, "gpufly_job_gpu_memory_bytes", "job", "gpu")} == {POD}
    node.run(0, [])
    node.sampler.sample_once()
    assert not any(name.startswith("gpufly_job") for name in node.scrape())


def test_the_price_turns_joules_into_money_per_gpu_and_per_job() -> None:
    node = Node(EnergyPrice(0.30, "EUR"))
    node.run(0, [{"pid": 101, "used_memory": 2**30}])
    node.sampler.sample_once()
    node.burn(0, 3.6e6)  # one kWh
    node.sampler.sample_once()
    samples = node.scrape()
    assert by(samples, "gpufly_gpu_energy_cost_total", "gpu", "currency")[("0", "EUR")] == pytest.approx(0.30)
    assert by(samples, "gpufly_job_energy_cost_total", "job", "currency") == {(SLURM, "EUR"): pytest.approx(0.30)}


def test_a_counter_that_goes_back_or_a_card_without_one_gives_no_job_energy() -> None:
    jobs = [JobSample("slurm", "7", pids=[1])]
    energy = JobEnergy()

    def sample(joules: float | None) -> Snapshot:
        gpu = GpuSample(0, "T4", energy_j=joules, processes=[ProcessSample(1, 0, "compute")])
        return Snapshot(time=0.0, gpus=[gpu], jobs=jobs)

    for joules in (1000.0, 1500.0, 200.0, 260.0, None, 300.0):  # the driver reloaded at 200
        energy.add(sample(joules))
    assert energy.joules() == {"7": pytest.approx(500.0 + 60.0)}


def test_shares_leave_out_processes_outside_any_job() -> None:
    gpu = GpuSample(0, "H100", processes=[ProcessSample(1, 0, "compute", gpu_sm_percent=30.0),
                                          ProcessSample(2, 0, "compute", gpu_sm_percent=10.0)])
    shares = gpu_shares(gpu, {1: "job-a"})
    assert shares.by_job == {"job-a": 0.75} and shares.basis == "sm"
    assert gpu_shares(GpuSample(0, "H100"), {}).by_job == {}


def test_jobs_recorded_by_watch_are_served_from_a_replay() -> None:
    history = History()
    gpu = GpuSample(0, "H100", uuid="GPU-1", processes=[ProcessSample(9, 0, "compute", gpu_memory_bytes=2**20)])
    history.add(Snapshot(time=1.0, hostname="n", gpus=[gpu], jobs=[JobSample("k8s", "uid-1", pids=[9])]))
    registry = exporter_registry(history, "replay")
    registry.register(JobCollector(history))
    text = generate_latest(registry).decode()
    assert 'gpufly_job_gpu_memory_bytes{Hostname="n",UUID="GPU-1",gpu="0",job="uid-1"} 1.048576e+06' in text
    assert "gpufly_job_energy_joules_total" not in text, "no energy without a ledger fed by the sampler"


@pytest.mark.parametrize(("price", "currency", "wrong"), [
    (float("nan"), "USD", "--price-per-kwh must be a finite price of 0 or more, got nan"),
    (-0.1, "USD", "--price-per-kwh must be a finite price of 0 or more, got -0.1"),
    (0.1, "euro", "--currency must be a three-letter ISO 4217 code, got 'euro'"),
])
def test_a_wrong_price_is_refused(price: float, currency: str, wrong: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        EnergyPrice(price, currency)
    assert caught.value.message == wrong


def test_the_fixture_tree_holds_what_its_readme_says() -> None:
    readme = (PROC / "README.md").read_text()
    assert all(f"| {entry.name} |" in readme for entry in PROC.iterdir() if entry.is_dir())


def test_every_job_and_cost_metric_is_documented() -> None:
    node = Node(EnergyPrice(0.1))
    node.run(0, [{"pid": 101, "used_memory": 2**30}])
    node.sampler.sample_once()
    node.burn(0, 10.0)
    node.sampler.sample_once()
    docs = (Path(__file__).parent.parent.parent / "docs" / "monitor.md").read_text()
    served = {name for name in node.scrape() if name.startswith(("gpufly_job", "gpufly_gpu_energy_cost"))}
    assert len(served) == 6
    assert not sorted(name for name in served if f"`{name}`" not in docs)
