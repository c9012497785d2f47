"""`gpufly top`: process order and filter, the Textual screen through its pilot, and `--once`."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.widgets import DataTable, Static

from gpufly.hw import FIXTURE_ENV, GpuSample, HostSample
from gpufly.monitor.backends.replay import ReplayBackend
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import History
from gpufly.monitor.tui import SPARKLINES, GpuPanel, HelpScreen, TopApp, compact_gpu_lines, spark_lines
from gpufly.monitor.views import SPARK_LEVELS, ProcessView, bar, once_lines, sparkline
from tests.fakes.nvml import FIXTURES, nvml_env

RECORDING = Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl"

# At sample 61 of the recording: alice (H100, 55.5 GiB, SM 92 %), bob (H100, 512 MiB, SM 3 %),
# carol (A100 MIG, 10 GiB, CPU 12 %) and dave (A100 MIG, 18 GiB, CPU 45 %); MIG reports no SM share.
BY_MEMORY = [4242, 7400, 7001, 5150]
BY_UTILIZATION = [4242, 5150, 7400, 7001]  # SM share where known, then CPU% for the MIG processes
BY_PID = [4242, 5150, 7001, 7400]


def _replay_at(sample: int) -> ReplayBackend:
    backend = ReplayBackend(RECORDING, loop=False)
    for _ in range(sample):
        backend.snapshot()
    return backend


def test_process_view_orders_and_filters() -> None:
    snapshot = _replay_at(61).snapshot()
    assert [p.pid for p in ProcessView("memory").rows(snapshot)] == BY_MEMORY
    assert [p.pid for p in ProcessView("utilization").rows(snapshot)] == BY_UTILIZATION
    assert [p.pid for p in ProcessView("pid").rows(snapshot)] == BY_PID
    assert [p.pid for p in ProcessView("memory", "CAROL").rows(snapshot)] == [7001], "user, any case"
    assert [p.pid for p in ProcessView("pid", "python").rows(snapshot)] == [4242, 7400], "process name"
    assert ProcessView("pid", "nobody").rows(snapshot) == []


def test_sparklines_scale_from_zero_to_the_cards_maximum() -> None:
    assert set(sparkline([95.0, 96.0, 95.0], 100.0, 3)) == {"█"}, "steady and high reads as steady and high"
    assert sparkline([10.0, 40.0, 70.0, 100.0], 100.0, 6) == "  ▂▄▆█"
    assert sparkline(list(range(100)), None, 10) == sparkline(list(range(90, 100)), 99, 10)


def test_bars_fill_in_eighths() -> None:
    assert bar(0.25, 8) == "██░░░░░░"
    assert bar(0.0625, 8) == "▌░░░░░░░"
    assert len(bar(0.33, 20)) == 20


def _run(app: TopApp, script: Callable[..., Awaitable[None]], size: tuple[int, int] = (180, 70)) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(pilot)

    asyncio.run(main())


def _screen_text(app: TopApp) -> str:
    return "\n".join(str(static.render()) for static in app.query("Static"))


def test_keys_change_the_sort_and_the_filter_and_the_screen_shows_the_rows() -> None:
    app = TopApp(_replay_at(60), interval=0.5, autostart=False)

    async def script(pilot) -> None:  # type: ignore[no-untyped-def]
        assert app.shown_pids() == BY_MEMORY
        await pilot.press("u")
        assert app.shown_pids() == BY_UTILIZATION
        await pilot.press("p")
        assert app.shown_pids() == BY_PID
        await pilot.press("m")
        assert app.shown_pids() == BY_MEMORY
        await pilot.press("slash", *"carol", "enter")
        assert app.shown_pids() == [7001]
        assert "filter 'carol'" in _screen_text(app)
        await pilot.press("slash")
        await pilot.press(*["backspace"] * 5, *"python", "enter")
        await pilot.pause()
        assert app.view.filter == "python"
        assert app.shown_pids() == [4242, 7400]
        await pilot.press("escape")
        assert app.shown_pids() == BY_MEMORY
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("x")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        text = _screen_text(app)
        assert "GPU 0  NVIDIA H100 80GB HBM3" in text and "slowdown: power cap" in text
        assert "GPU 1  NVIDIA A100-SXM4-80GB  MIG: 2 instances" in text
        assert "host gpu-node-1" in text and "load 3.90 3.50 2.80" in text
        await pilot.press("q")

    _run(app, script)


def test_a_lost_gpu_is_shown_lost_while_the_other_goes_on_and_sparklines_fill() -> None:
    app = TopApp(_replay_at(100), interval=0.5, autostart=False)

    async def script(pilot) -> None:  # type: ignore[no-untyped-def]
        for _ in range(15):
            app.step()
            await pilot.pause()
        h100 = app.query_one("#gpu-0", GpuPanel)
        assert h100.has_class("lost")
        assert "LOST" in str(app.query_one("#gpu-0-text").render())
        assert "GPU 1  NVIDIA A100" in str(app.query_one("#gpu-1-text").render())
        assert set(app.shown_pids()) == {7001, 7400}, "the lost GPU's processes are gone, the A100's remain"
        history = str(app.query_one("#gpu-1-history").render())
        assert history.startswith("util   " + " " * 40), "MIG: no utilization, an empty sparkline"
        power = history.split("power  ")[1]
        assert len(power) == 40 and len(power.strip()) == 16, "one cell per sample taken"

    _run(app, script)


def _panel_lines(app: TopApp) -> list[tuple[str, int]]:
    """Each line the GPU panels and the host panel draw, with the width its widget gives it."""
    statics = [*app.query("GpuPanel Static").results(Static), app.query_one("#host", Static)]
    return [(line, static.content_region.width) for static in statics if static.display
            for line in str(static.render()).splitlines()]


def _assert_fits(app: TopApp, width: int, height: int) -> None:
    table = app.query_one("#processes", DataTable)
    assert table.region.height >= 1 + len(BY_MEMORY), "the header and every process row are on screen"
    assert table.region.y >= 0 and table.region.bottom <= height - 1, "above the footer"
    lines = _panel_lines(app)
    assert lines and all(cell_len(line) <= min(room, width) for line, room in lines), [
        line for line, room in lines if cell_len(line) > min(room, width)]
    sparks = [line for line, _ in lines if set(line) & set(SPARK_LEVELS[1:])]
    assert sparks, "the history is drawn"


@pytest.mark.parametrize(("size", "compact"), [((80, 24), True), ((120, 40), False)])
def test_the_screen_fits_the_terminal_with_the_process_table_always_visible(size: tuple[int, int],
                                                                            compact: bool) -> None:
    app = TopApp(_replay_at(60), interval=0.5, autostart=False)

    async def script(pilot) -> None:  # type: ignore[no-untyped-def]
        for _ in range(12):
            app.step()
        await pilot.pause()
        assert app.compact is compact and app.screen.has_class("compact") is compact
        _assert_fits(app, *size)
        h100 = str(app.query_one("#gpu-0-text").render()).splitlines()
        if compact:
            assert len(h100) == 2, "two lines per GPU"
            assert h100[0].startswith("GPU 0 NVIDIA H100") and "mem" in h100[0]
            assert "HEALTHY" in h100[1] and "power cap" in h100[1] and "util" in h100[1]
        else:
            assert h100[0].startswith("GPU 0  NVIDIA H100 80GB HBM3")
            assert str(app.query_one("#gpu-0-history").render()).startswith("util ")

    _run(app, script, size)


def test_resizing_switches_the_layout() -> None:
    app = TopApp(_replay_at(60), interval=0.5, autostart=False)

    async def script(pilot) -> None:  # type: ignore[no-untyped-def]
        app.step()
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.compact and len(str(app.query_one("#gpu-0-text").render()).splitlines()) == 2
        _assert_fits(app, 80, 24)
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not app.compact
        _assert_fits(app, 120, 40)

    _run(app, script, (120, 40))


def test_full_sparklines_shrink_to_the_width_they_have() -> None:
    history_app = TopApp(_replay_at(60), autostart=False)
    for _ in range(50):
        history_app.sampler.sample_once()
    gpu = history_app.history.latest.gpus[0]  # type: ignore[union-attr]
    for width in (60, 100, 160, 400):
        line = spark_lines(gpu, history_app.history, width)
        assert cell_len(line) <= width and [label for _, label in SPARKLINES if f"{label} " in line]


def test_a_compact_gpu_line_is_cut_to_the_width_never_wrapped() -> None:
    lost = GpuSample(index=3, name="NVIDIA H100 80GB HBM3", lost=True, unavailable="fallen off the bus")
    assert compact_gpu_lines(lost, History(capacity=4), 40) == ["GPU 3 NVIDIA H100 80GB HBM3 LOST: falle…"]
    idle = GpuSample(index=0, name="NVIDIA GeForce RTX 4090 with a very long board name", utilization_gpu_percent=5.0)
    lines = compact_gpu_lines(idle, History(capacity=4), 60)
    assert len(lines) == 2 and all(cell_len(line) <= 60 for line in lines)
    assert lines[0].startswith("GPU 0 NVIDIA GeFo…  util ") and lines[0].endswith("mem ········ N/A/N/A")


class _NoGpu:
    gpu_status = "NVML library not found (no NVIDIA driver installed)"

    def snapshot(self) -> Snapshot:
        return Snapshot(time=1.0, hostname="laptop", gpus=[], gpu_status=self.gpu_status,
                        host=HostSample(cpu_percent=12.0, memory_used_bytes=2**30, memory_total_bytes=2**34))

    def close(self) -> None:
        pass


def test_without_a_gpu_the_screen_says_so_and_shows_the_host() -> None:
    app = TopApp(_NoGpu(), autostart=False)

    async def script(pilot) -> None:  # type: ignore[no-untyped-def]
        no_gpu = app.query_one("#no-gpu")
        assert no_gpu.display
        assert str(no_gpu.render()).startswith("no NVIDIA GPU to monitor on laptop: NVML library not found")
        assert "host laptop" in str(app.query_one("#host").render())
        assert app.shown_pids() == []

    _run(app, script)


def test_once_prints_a_line_per_gpu_and_json_for_scripts(cli) -> None:
    done = cli("top", "--once", "--replay", str(RECORDING))
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == once_lines(ReplayBackend(RECORDING).snapshot())
    assert lines[1].startswith("[0] NVIDIA H100 80GB HBM3 | 40C, 15% |") and "alice/4242" in lines[1]
    assert lines[-1].startswith("host  CPU 55%")
    data = json.loads(cli("top", "--once", "--json", "--replay", str(RECORDING)).stdout)
    assert [g["name"] for g in data["gpus"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
    assert data["gpus"][0]["slowdown"] == "none" and data["no_gpu_line"] is None


def test_once_reads_a_recorded_machine_through_the_nvml_fixture(cli) -> None:
    done = cli("top", "--once", env=nvml_env("monitor/nvml_live.json"))
    assert done.code == 0, done.stderr
    h100, a100 = done.stdout.splitlines()[1:3]
    assert h100.startswith("[0] NVIDIA H100 80GB HBM3 | 71C, 97% | 57.0 GiB / 79.6 GiB | 698 W / 700 W")
    assert "slowdown: power cap" in h100
    assert a100.startswith("[1] NVIDIA A100-SXM4-80GB | 38C, N/A |")


def test_once_shows_a_gpu_the_fixture_marks_lost_and_the_other(cli, tmp_path: Path) -> None:
    fixture = json.loads((FIXTURES / "monitor" / "nvml_live.json").read_text()) | {"lost": [0]}
    (tmp_path / "lost.json").write_text(json.dumps(fixture))
    done = cli("top", "--once", env={FIXTURE_ENV: str(tmp_path / "lost.json")})
    assert done.code == 0, done.stderr
    lost, alive = done.stdout.splitlines()[1:3]
    assert lost == "[0] unknown GPU | LOST (fallen off the bus (NVML_ERROR_GPU_IS_LOST))"
    assert alive.startswith("[1] NVIDIA A100-SXM4-80GB | 38C")


@pytest.mark.parametrize(("args", "message"), [
    (["--json"], "--json prints one snapshot, so it needs --once"),
    (["--interval", "-1"], "--interval must be positive"),
    (["--interval", "inf"], "at most 3600 seconds"),
    (["--interval", "nan"], "at most 3600 seconds"),
    ([], "needs a terminal"),  # stdout is not a terminal here
])
def test_bad_use_is_one_line_with_a_hint(cli, args: list[str], message: str) -> None:
    done = cli("top", *args, env=nvml_env("hw/no_driver.json"))
    assert done.code == 2 and message in done.stderr and "hint:" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_textual_top_names_the_extra(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textual", None)  # as if not installed: importing it raises ImportError
    done = cli("top")
    assert done.code == 2
    error, hint = done.stderr.splitlines()
    assert error == "error: gpufly top needs textual, which is not installed"
    assert hint.startswith("hint: pip install 'gpufly[monitor]'")
    assert cli("top", "--once", "--replay", str(RECORDING)).code == 0, "--once needs no textual"


def test_once_without_a_gpu_says_so_in_one_line_and_shows_the_host(cli) -> None:
    done = cli("top", "--once", env=nvml_env("hw/no_driver.json"))
    assert done.code == 0
    assert [line for line in done.stderr.splitlines() if line] == [done.stderr.strip()]
    assert done.stderr.startswith("no NVIDIA GPU to monitor on ") and "showing the host only" in done.stderr
    assert "NVML library not found" in done.stderr
    assert done.stdout.splitlines()[-1].startswith("host  CPU ")
