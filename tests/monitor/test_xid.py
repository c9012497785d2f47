"""The `xid` health rule: XID events from the fake NVML judged by NVIDIA's catalog, aged out after 10 minutes,
unchecked (never passed) where the driver refuses them, and shown in `top --once`, `watch`, the exporter and the
records that replay reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufly.hw import FIXTURE_ENV, XID_KEEP_S
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor import History, Snapshot
from gpufly.monitor.backends.live import LiveBackend
from gpufly.monitor.backends.replay import ReplayBackend
from gpufly.monitor.exporter import exporter_registry
from gpufly.monitor.health import CODES, HealthWatch, Level, assess
from gpufly.monitor.logger import snapshots_from_csv
from gpufly.monitor.xids import CATALOG_URL, XIDS, XidLevel, describe
from tests.fakes.nvml import FIXTURES, fake_nvml
from tests.monitor.logs import write_jsonl_and_csv

DOCS = Path(__file__).parent.parent.parent / "docs" / "monitor.md"


class Clock:
    def __init__(self) -> None:
        self.now = 1_733_350_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake() -> FakePynvml:
    """The recorded H100 (busy at its power cap, healthy) and MIG A100."""
    return fake_nvml("monitor/nvml_live.json")


def test_xid_79_fails_the_gpu_and_names_it(fake: FakePynvml) -> None:
    backend = LiveBackend(fake)
    fake.emit(0, 79)
    h100, a100 = backend.snapshot().gpus
    verdict = assess([h100])
    assert (verdict.level, verdict.code) == (Level.FAILING, "xid")
    assert verdict.text() == ("FAILING: XID 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM) in the last 10 "
                              "minutes")
    assert assess([a100]).level is Level.HEALTHY


def test_xid_13_degrades_and_says_it_is_usually_the_application(fake: FakePynvml) -> None:
    backend = LiveBackend(fake)
    fake.emit(0, 13)
    fake.emit(0, 13)
    verdict = assess([backend.snapshot().gpus[0]])
    assert (verdict.level, verdict.code) == (Level.DEGRADED, "xid")
    assert verdict.reasons[0].detail == (
        "2x XID 13 (Graphics Engine Exception; usually the application's fault: an out-of-bounds access or illegal "
        "instruction; NVIDIA: RESTART_APP) in the last 10 minutes")


def test_the_worst_xid_sets_the_level_and_comes_first(fake: FakePynvml) -> None:
    backend = LiveBackend(fake)
    for code in (31, 119, 999):
        fake.emit(0, code)
    fake.emit(0, ecc="double_bit")
    reason = assess([backend.snapshot().gpus[0]]).reasons[0]
    assert reason.level is Level.FAILING
    assert re.findall(r"XID \d+|double-bit", reason.detail) == ["XID 119", "double-bit", "XID 31", "XID 999"]
    assert f"XID 999 (not in gpufly's table; see {CATALOG_URL})" in reason.detail


def test_xids_age_out_of_the_verdict_after_ten_minutes(fake: FakePynvml) -> None:
    clock, watch = Clock(), HealthWatch()
    backend = LiveBackend(fake, clock=clock)
    fake.emit(0, 48)
    assert watch.update(backend.snapshot())[0].code == "xid"
    clock.now += XID_KEEP_S - 1
    assert watch.update(backend.snapshot())[0].level is Level.FAILING, "still within the window"
    clock.now += 2
    assert watch.update(backend.snapshot())[0].level is Level.HEALTHY


def test_a_refused_registration_leaves_the_rule_unchecked_with_the_drivers_answer(fake: FakePynvml) -> None:
    fake.device_data(0)["not_supported"].append("nvmlDeviceRegisterEvents")
    fake.emit(0, 79)
    verdict = assess([LiveBackend(fake).snapshot().gpus[0]])
    assert verdict.level is Level.HEALTHY, "nothing was seen: no verdict is made up"
    assert ("xid: nvmlDeviceRegisterEvents: NVML_ERROR_NOT_SUPPORTED (the driver delivers no events here, as on "
            "WSL, in vGPU guests, on some consumer cards)") in verdict.unchecked


def test_a_reader_that_does_not_watch_events_is_unchecked_too(fake: FakePynvml) -> None:
    from gpufly.hw import GpuReader, Nvml

    nvml = Nvml(fake)
    nvml.open()
    assert "xid: XID events not watched by this reader" in assess([GpuReader(nvml).sample(0)]).unchecked


# --- where it shows


def _scrape(history: History, watch: HealthWatch) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(exporter_registry(history, health=watch)).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_the_exporter_labels_the_health_xid_and_counts_each_event_once(fake: FakePynvml) -> None:
    history, watch, backend = History(), HealthWatch(), LiveBackend(fake)
    fake.emit(0, 79)
    fake.emit(0, 13)
    fake.emit(0, 999)
    for _ in range(3):
        snapshot = backend.snapshot()
        history.add(snapshot)
        watch.update(snapshot)
    fake.emit(0, 13)
    snapshot = backend.snapshot()
    history.add(snapshot)
    watch.update(snapshot)
    found = _scrape(history, watch)
    health = {labels["gpu"]: (labels["reason"], value) for labels, value in found["gpufly_gpu_health"]}
    assert health == {"0": ("xid", 2.0), "1": ("none", 0.0)}
    assert "xid" in CODES
    xids = {(labels["gpu"], labels["xid"]): value for labels, value in found["gpufly_gpu_xid_events_total"]}
    assert xids == {("0", "13"): 2.0, ("0", "79"): 1.0, ("0", "other"): 1.0}, "a code outside the table is other"


def test_watch_records_keep_the_xids_and_replay_judges_them_again(fake: FakePynvml, tmp_path: Path) -> None:
    backend = LiveBackend(fake, clock=Clock())
    fake.emit(0, 79)
    snapshots = [backend.snapshot(), backend.snapshot()]
    write_jsonl_and_csv(snapshots, tmp_path)
    last = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[-1])
    h100 = last["gpus"][0]
    assert h100["health"]["code"] == "xid"
    assert h100["xid_events"] == [{"kind": "xid", "xid": 79, "time": 1_733_350_000.0, "seq": 1}]
    replayed = list(ReplayBackend(tmp_path / "run.jsonl", loop=False))[-1]
    assert assess([replayed.gpus[0]]).code == "xid" and replayed.gpus[1].xid_events == []
    from_csv = snapshots_from_csv((tmp_path / "run.csv").read_text())[-1]
    assert [(e.xid, e.time, e.seq) for e in from_csv.gpus[0].xid_events] == [(79, 1_733_350_000.0, 1)]
    assert from_csv.gpus[1].xid_events == [] and assess([from_csv.gpus[0]]).code == "xid"


def test_a_recording_made_before_xids_replays_with_the_rule_unchecked() -> None:
    snapshot = Snapshot.from_dict({"time": 1.0, "gpus": [{"index": 0, "name": "H100"}]})
    assert "xid: XID events not watched by this reader" in assess(snapshot.gpus).unchecked


def _fixture_with_xid(tmp_path: Path, xid: int) -> dict[str, str]:
    data = json.loads((FIXTURES / "monitor" / "nvml_live.json").read_text())
    data["devices"][0]["events"] = [{"xid": xid}]
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(data))
    return {FIXTURE_ENV: str(path)}


def test_top_once_and_watch_show_the_xid(cli, tmp_path: Path) -> None:
    env = _fixture_with_xid(tmp_path, 79)
    top = cli("top", "--once", env=env)
    assert top.code == 0, top.stderr
    assert "health: FAILING: XID 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM) in the last 10 minutes" in \
        top.stdout.splitlines()[1]
    watch = cli("watch", "--count", "2", "--interval", "0.01", env=env)
    assert watch.code == 0, watch.stderr
    first, second = watch.stdout.splitlines()
    assert "slowdown power cap FAILING (xid)" in first and "FAILING (xid)" in second, "held over the window"
    assert "[1] N/A 10.0 GiB/80.0 GiB 92 W 38 C slowdown none  host" in first, "a healthy GPU says nothing more"


# --- the table behind it


def test_the_table_follows_nvidias_actions_and_the_docs_list_every_row() -> None:
    docs = DOCS.read_text()
    for xid in XIDS:
        assert (xid.level is XidLevel.FAILING) == (xid.action in (
            "RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR")), xid
        assert f"| {xid.code} | {xid.meaning} | {xid.action} | {xid.level.name} |" in docs
    assert len({xid.code for xid in XIDS}) == len(XIDS)
    assert describe(None).level is XidLevel.DEGRADED
