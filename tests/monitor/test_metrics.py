"""The metric table is the one place a GPU metric is declared: serve, top (panel and --once) and watch follow it.

Adding a row (here a test row over a field no table row exports) must show the metric in all three with no
other edit; with its ``GpuSample`` field and NVML read in gpufly/hw/gpu.py and a line in docs/monitor.md
(checked in test_exporter.py), a new metric is three files.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufly.hw import GpuSample
from gpufly.monitor import GPU_METRICS, GpuMetric, History, Snapshot
from gpufly.monitor.exporter import exporter_registry
from gpufly.monitor.logger import csv_rows, csv_text
from gpufly.monitor.metrics import more_text, number
from gpufly.monitor.views import gpu_lines, once_lines

ADDED = GpuMetric("memory_clock_max_mhz", "gpufly_gpu_test_added", "A metric a contributor adds.", "added",
                  number(" MHz"))
TABLE = (*GPU_METRICS, ADDED)


def _gpu() -> GpuSample:
    """A GPU with every numeric field set to its own value, so each figure can be found in the output."""
    gpu = GpuSample(index=0, name="NVIDIA H100 80GB HBM3", throttle_reasons=[])
    for number_field, value in zip((f for f in fields(GpuSample) if f.type in ("float | None", "int | None")),
                                   range(101, 1000), strict=False):
        setattr(gpu, number_field.name, value)
    return gpu


def _snapshot() -> Snapshot:
    return Snapshot(time=1_700_000_000.0, hostname="node", gpus=[_gpu()])


def test_every_table_row_is_a_gpu_sample_field() -> None:
    names = {f.name for f in fields(GpuSample)}
    assert {metric.field for metric in TABLE} <= names
    assert len({metric.exporter for metric in TABLE}) == len(TABLE), "one row per exported name"


def test_serve_exports_every_row() -> None:
    history = History()
    history.add(_snapshot())
    text = generate_latest(exporter_registry(history, metrics=TABLE)).decode()
    served = {family.name: (family.documentation, [sample.value for sample in family.samples])
              for family in text_string_to_metric_families(text)}
    for metric in TABLE:
        assert served[metric.exporter] == (metric.help, [pytest.approx(metric.value(_gpu()))])


@pytest.mark.parametrize("view", ["panel", "once"])
def test_top_shows_every_row_its_fixed_layout_does_not(view: str) -> None:
    snapshot = _snapshot()
    text = "\n".join(gpu_lines(snapshot.gpus[0], metrics=TABLE) if view == "panel" else once_lines(snapshot, TABLE))
    assert f"added {snapshot.gpus[0].memory_clock_max_mhz} MHz" in text
    for metric in TABLE:
        if metric.more:
            assert metric.text(snapshot.gpus[0]) in text


def test_the_more_line_lists_exactly_the_rows_the_layout_leaves_out() -> None:
    gpu = _gpu()
    assert more_text(gpu, TABLE) == ", ".join(metric.text(gpu) for metric in TABLE if metric.more)
    drawn = tuple(metric for metric in TABLE if not metric.more)
    assert more_text(gpu, drawn) is None
    assert not any("more:" in line for line in gpu_lines(gpu, metrics=drawn)), "no empty more: line"


def test_watch_writes_every_row_to_csv() -> None:
    header, row = csv_text(csv_rows(_snapshot()), header=True).splitlines()
    cells = dict(zip(header.split(","), row.split(","), strict=True))
    for metric in TABLE:
        assert cells[f"gpu_{metric.field}"] == str(getattr(_gpu(), metric.field))
