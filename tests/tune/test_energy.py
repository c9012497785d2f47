"""Energy per trial: NVML's energy counter around the measured steps (a fake NVML here), its cost, its receipts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpufly.errors import GpuflyError
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.hw.nvml import Nvml
from gpufly.tune import Trial, TrialResult
from gpufly.tune.energy import NO_NVML, EnergyWindow, GpuEnergy, energy_line, summary
from gpufly.tune.render import page
from tests.tune.fakes import FakeMachine

UUID_1 = "GPU-00000000-0000-0000-0000-000000000001"


def test_the_counter_of_the_trial_s_gpu_is_read_around_the_measured_steps() -> None:
    fake = FakePynvml.node(2)
    counter = GpuEnergy.open(Nvml(fake), UUID_1)
    assert isinstance(counter, GpuEnergy), counter
    window = EnergyWindow(counter.read_mj)
    fake.device_data(1)["energy_mj"] = 5_000_000
    window.start()
    fake.device_data(1)["energy_mj"] = 5_045_500  # 45.5 J over the measured steps
    fake.device_data(0)["energy_mj"] = 9_999_999_999  # another GPU's counter is not this trial's
    window.stop()
    assert window.joules == pytest.approx(45.5) and window.note is None


@pytest.mark.parametrize(("fake", "uuid", "reason"), [
    (FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), UUID_1, "no NVML: "),
    (FakePynvml.node(1), UUID_1, "NVML lists no GPU with UUID " + UUID_1),
    (FakePynvml.node(2), None, "torch gave no UUID"),
    (FakePynvml.node(2, not_supported=["nvmlDeviceGetTotalEnergyConsumption"]), UUID_1, "no energy counter"),
])
def test_a_gpu_whose_counter_cannot_be_read_says_why(fake: FakePynvml, uuid: str | None, reason: str) -> None:
    counter = GpuEnergy.open(Nvml(fake), uuid)
    assert isinstance(counter, str) and reason in counter


def test_a_counter_that_went_backwards_is_no_figure_not_a_negative_one() -> None:
    readings = iter([1000, 500])
    window = EnergyWindow(lambda: next(readings))
    window.start()
    window.stop()
    assert window.joules is None and window.note is not None and "backwards" in window.note


def test_the_worker_measures_a_gpu_trial_through_gpufly_s_nvml_and_a_cpu_trial_not_at_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import gpufly.hw.nvml
    from gpufly.tune import worker

    fake = FakePynvml.node(2)
    monkeypatch.setattr(gpufly.hw.nvml, "load_pynvml", lambda: fake)
    monkeypatch.setattr(worker, "gpu_uuid", lambda where: UUID_1)
    window = worker.energy_window(True, torch.device("cpu"))
    window.start()
    fake.device_data(1)["energy_mj"] += 12_000
    window.stop()
    figures = worker.energy_figures(window, 600, 1, True, torch.device("cpu"))
    assert figures == {"energy_j": 12.0, "joules_per_unit": pytest.approx(0.02), "energy_note": None}
    cpu = worker.energy_window(False, torch.device("cpu"))
    cpu.start()
    cpu.stop()
    assert worker.energy_figures(cpu, 600, 1, False, torch.device("cpu")) == {
        "energy_j": None, "joules_per_unit": None, "energy_note": NO_NVML}


def test_a_trial_s_row_prices_its_energy_and_its_machine_time_per_million_units() -> None:
    result = TrialResult("amp", {"amp": "bf16"}, "ok", throughput=2000.0, energy_j=900.0, joules_per_unit=0.36)
    row = result.to_dict(price_per_hour=7.2, price_per_kwh=0.25)
    # 1e6 units x 0.36 J = 360 kJ = 0.1 kWh at $0.25; 1e6 units at 2,000/s = 500 s of a $7.20 hour
    assert row["energy_cost_per_million"] == pytest.approx(0.025) and row["time_cost_per_million"] == pytest.approx(1.0)
    bare = TrialResult("x", {}, "ok", throughput=2000.0, energy_note=NO_NVML).to_dict()
    assert bare["energy_j"] is None and bare["energy_cost_per_million"] is None
    assert bare["time_cost_per_million"] is None
    assert bare["energy_note"] == NO_NVML


def _rows() -> list[dict[str, Any]]:
    baseline = TrialResult("baseline", {}, "ok", throughput=1000.0, role="baseline", energy_j=500.0,
                           joules_per_unit=0.5)
    fast = TrialResult("amp=bf16", {"amp": "bf16"}, "ok", throughput=2000.0, energy_j=300.0, joules_per_unit=0.3)
    return [r.to_dict(3.6, 0.2) for r in (baseline, fast)]


def test_the_energy_line_names_the_baseline_and_the_best_with_their_cost() -> None:
    energy = summary(_rows(), price_per_kwh=0.2, price_per_hour=3.6, best="amp=bf16")
    assert energy["measured"] and energy["source"] == "nvmlDeviceGetTotalEnergyConsumption"
    assert energy["best"]["joules_per_unit"] == 0.3 and energy["baseline"]["joules_per_unit"] == 0.5
    line = energy_line(energy)
    assert "baseline: 0.5 J/sample" in line and "best (amp=bf16): 0.3 J/sample" in line
    assert "$0.02778 of energy at $0.2/kWh" in line and "$1 of machine time at $3.6/h" in line
    assert energy_line(summary([{**_rows()[0], "joules_per_unit": None, "energy_note": None}], None, None, None)) \
        == "energy: not measured (no NVML)"


def test_the_html_receipt_carries_the_energy_line() -> None:
    receipt = {"device": "NVIDIA H100", "steps": 40, "energy": summary(_rows(), 0.2, None, None)}
    html = page("cnn", _rows(), None, "r.jsonl", "no winner", receipt)
    assert re.search(r'<p id="receipt">[^<]*energy \(NVML energy counter[^<]*0\.5 J/sample', html)
    cpu = page("cnn", _rows(), None, "r.jsonl", "no winner", {"device": "cpu", "steps": 40,
                                                               "energy": summary([], None, None, None)})
    assert "energy: not measured (no NVML)" in cpu


class MeteredMachine(FakeMachine):
    """The fake machine with a GPU's energy counter: each configuration uses ``joules_per_sample``."""

    def __init__(self, speeds: dict[str, float], joules_per_sample: dict[str, float] | None, **machine: Any) -> None:
        super().__init__(speeds, **machine)
        self.joules_per_sample = joules_per_sample

    def __call__(self, trial: Trial) -> TrialResult:
        result = super().__call__(trial)
        if self.joules_per_sample is None:
            result.energy_note = NO_NVML
            return result
        per_sample = self.joules_per_sample.get(next(iter(trial.knobs), ""), 0.5)
        result.joules_per_unit, result.energy_j = per_sample, per_sample * 1000
        return result


@pytest.fixture
def metered(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    import gpufly.tune
    import gpufly.tune.workload
    from gpufly.tune.workload import SearchSpace

    def use(speeds: dict[str, float], joules_per_sample: dict[str, float] | None) -> None:
        monkeypatch.setattr(gpufly.tune.workload, "search_space",
                            lambda *args: SearchSpace({name: [True] for name in speeds}, False))
        monkeypatch.setattr(gpufly.tune, "SubprocessRunner",
                            lambda *args: MeteredMachine(speeds, joules_per_sample, seed_spread=0.02))

    return use


def test_tune_prints_joules_per_sample_and_what_a_million_cost(cli: Any, tmp_path: Path,
                                                               metered: Callable[..., None]) -> None:
    metered({"fast": 1.25}, {"fast": 0.4})
    results, html = tmp_path / "r.jsonl", tmp_path / "t.html"
    text = cli("tune", "cnn", "--results", str(results), "--device", "cpu", "--price-per-kwh", "0.2",
               "--price-per-hour", "3.6", "--html", str(html))
    assert text.code == 0, text.stderr
    out = " ".join(text.stdout.split())
    assert "J/unit" in out and "energy $/M" in out and "time $/M" in out
    assert "energy (NVML energy counter over the measured steps, the whole GPU's): baseline: 0.5 J/sample" in out
    assert "best (fast=True): 0.4 J/sample (per million samples: $0.02222 of energy at $0.2/kWh" in out
    assert "0.4 J/sample" in html.read_text()
    document = json.loads(cli("tune", "cnn", "--results", str(results), "--resume", "--json",
                              "--price-per-kwh", "0.2").stdout)
    assert document["price_per_kwh"] == 0.2 and document["energy"]["measured"]
    fast = next(t for t in document["trials"] if t["configuration"] == "fast=True")
    assert fast["joules_per_unit"] == 0.4 and fast["energy_j"] == 400.0
    assert fast["energy_cost_per_million"] == pytest.approx(0.4 * 1e6 / 3.6e6 * 0.2)


def test_tune_on_a_cpu_says_energy_was_not_measured_rather_than_invent_it(cli: Any, tmp_path: Path,
                                                                         metered: Callable[..., None]) -> None:
    metered({"fast": 1.25}, None)
    text = cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu", "--price-per-kwh", "0.2")
    assert text.code == 0, text.stderr
    assert "energy: not measured (no NVML)" in text.stdout and "J/unit" not in text.stdout
    document = json.loads(cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--resume", "--json").stdout)
    assert document["energy"] == {"measured": False, "source": None, "note": NO_NVML, "price_per_kwh": None,
                                  "price_per_hour": None, "baseline": None, "best": None}
    assert all(t["energy_j"] is None and t["energy_note"] == NO_NVML for t in document["trials"])


def test_free_energy_costs_nothing_as_watch_and_serve_take_it() -> None:
    from gpufly.tune.energy import check_price, energy_cost_per_million

    check_price("--price-per-kwh", 0.0, "0.15", free=True)
    assert energy_cost_per_million(0.36, 0.0) == 0.0
    with pytest.raises(GpuflyError, match="positive number"):
        check_price("--price-per-hour", 0.0, "2.5")
