"""`gpufly top`: the Textual screen. GPU panels with bars and sparklines, a host panel, the process table.

The screen never calls NVML itself: a ``Sampler`` thread fills ``History`` and a timer redraws from
``History.latest``, so a slow driver call cannot freeze the keys. Tests drive it with a replay
backend and ``autostart=False``, stepping the sampler by hand through Textual's pilot.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static

from gpufly.hw import GpuSample
from gpufly.monitor.format import no_gpu_line
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import Backend, History, Sampler
from gpufly.monitor.views import (
    PROCESS_COLUMNS,
    SORTS,
    ProcessView,
    gpu_lines,
    host_lines,
    process_cells,
    sparkline,
)

SPARKLINES: tuple[tuple[str, str], ...] = (
    ("utilization_gpu_percent", "util"),
    ("memory_used_bytes", "memory"),
    ("power_w", "power"),
)
"""The history drawn under each GPU panel, each scaled from 0 to the card's own maximum."""
SPARK_WIDTH = 40


def _spark_top(gpu: GpuSample, metric: str) -> float | None:
    return {"utilization_gpu_percent": 100.0, "memory_used_bytes": gpu.memory_total_bytes,
            "power_w": gpu.power_limit_w}.get(metric)

HELP_TEXT = """gpufly top: keys

  m   sort processes by GPU memory (largest first)
  u   sort by utilization (GPU SM share; CPU% where NVML has none)
  p   sort by pid
  /   filter processes by user or name (Enter applies, Esc clears)
  ?   this help
  q   quit

Bars: utilization, memory, power against its limit, SM clock against its maximum.
"slowdown" names what holds the clocks down (power cap, thermal, ...) right now.
N/A: the card does not report that field. Press any key to close."""


class HelpScreen(ModalScreen[None]):
    """The keys, on top of the monitor; any key closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: 80; height: auto; border: round $accent; padding: 1 2; background: $panel; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP_TEXT, id="help")

    def on_key(self) -> None:
        self.dismiss()


class GpuPanel(Vertical):
    """One GPU: its figure lines, then a history sparkline per metric."""

    DEFAULT_CSS = """
    GpuPanel { height: auto; border: round $primary; padding: 0 1; margin-bottom: 1; }
    GpuPanel.lost { border: round $error; }
    GpuPanel .sparks { color: $accent; }
    """

    def __init__(self, index: int) -> None:
        super().__init__(id=f"gpu-{index}")
        self.index = index

    def compose(self) -> ComposeResult:
        yield Static(id=f"gpu-{self.index}-text")
        yield Static(id=f"gpu-{self.index}-history", classes="sparks")

    def show(self, gpu: GpuSample, history: History) -> None:
        self.set_class(gpu.lost, "lost")
        self.query_one(f"#gpu-{self.index}-text", Static).update("\n".join(gpu_lines(gpu)))
        sparks = []
        for metric, label in SPARKLINES:
            points = [value for _, value in history.series(gpu.index, metric)]
            sparks.append(f"{label:<6} {sparkline(points, _spark_top(gpu, metric), SPARK_WIDTH)}")
        self.query_one(f"#gpu-{self.index}-history", Static).update("  ".join(sparks))


class TopApp(App[None]):
    """The monitor screen over any backend (live NVML, a replay, a fake)."""

    TITLE = "gpufly top"
    CSS = """
    #no-gpu { color: $warning; padding: 0 1; }
    #gpus { height: auto; }
    #host { border: round $secondary; padding: 0 1; height: auto; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    #processes { height: auto; max-height: 20; }
    #status { color: $text-muted; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "sort('memory')", "Sort: memory"),
        Binding("u", "sort('utilization')", "Sort: util"),
        Binding("p", "sort('pid')", "Sort: pid"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, backend: Backend, interval: float = 1.0, history: int = 600, autostart: bool = True) -> None:
        super().__init__()
        self.history = History(capacity=history)
        self.sampler = Sampler(backend, interval=interval, history=self.history)
        self.interval = interval
        self.autostart = autostart
        self.view = ProcessView()
        self._gpu_indices: tuple[int, ...] = ()

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(id="no-gpu")
        with VerticalScroll(id="body"):
            yield Vertical(id="gpus")
            yield Static(id="host")
            yield DataTable(id="processes", zebra_stripes=True, cursor_type="row")
        yield Input(placeholder="filter by user or name; Enter applies, Esc clears", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#processes", DataTable).add_columns(*PROCESS_COLUMNS)
        self.sampler.sample_once()
        self.redraw()
        if self.autostart:
            self.sampler.start()
            self.set_interval(self.interval, self.redraw)

    def on_unmount(self) -> None:
        self.sampler.stop()

    def step(self) -> Snapshot:
        """Take one sample now and redraw (tests, and any caller that drives the clock itself)."""
        snapshot = self.sampler.sample_once()
        self.redraw()
        return snapshot

    def redraw(self) -> None:
        snapshot = self.history.latest
        if snapshot is None:
            return
        self._show_status(snapshot)
        self._show_gpus(snapshot)
        self.query_one("#host", Static).update("\n".join(host_lines(snapshot)))
        self._show_processes(snapshot)

    def _show_status(self, snapshot: Snapshot) -> None:
        line = no_gpu_line(snapshot)
        no_gpu = self.query_one("#no-gpu", Static)
        no_gpu.update(line or "")
        no_gpu.display = bool(line)
        shown = f"filter '{self.view.filter}'" if self.view.filter else "no filter"
        errors = f"  sampler: {self.sampler.errors[-1]}" if self.sampler.errors else ""
        self.query_one("#status", Static).update(
            f"{snapshot.hostname}  driver {snapshot.driver_version or 'N/A'}  "
            f"sorted by {self.view.sort}, {shown}  (? for keys){errors}")

    def _show_gpus(self, snapshot: Snapshot) -> None:
        indices = tuple(gpu.index for gpu in snapshot.gpus)
        box = self.query_one("#gpus", Vertical)
        if indices != self._gpu_indices:
            box.remove_children()
            box.mount_all([GpuPanel(index) for index in indices])
            self._gpu_indices = indices
            self.call_after_refresh(self.redraw)
            return
        for gpu in snapshot.gpus:
            box.query_one(f"#gpu-{gpu.index}", GpuPanel).show(gpu, self.history)

    def _show_processes(self, snapshot: Snapshot) -> None:
        table = self.query_one("#processes", DataTable)
        table.clear()
        rows = self.view.rows(snapshot)
        for process in rows:
            table.add_row(*process_cells(process), key=f"{process.gpu_index}:{process.pid}")
        table.border_title = f"{len(rows)} processes"

    def shown_pids(self) -> list[int]:
        """The pids in the process table, top to bottom (what a test or a screen reader sees)."""
        table = self.query_one("#processes", DataTable)
        return [int(table.get_row_at(row)[1]) for row in range(table.row_count)]

    def action_sort(self, key: str) -> None:
        if key in SORTS:
            self.view = ProcessView(sort=key, filter=self.view.filter)
            self.redraw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.value = self.view.filter
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.view = ProcessView(sort=self.view.sort, filter=event.value.strip())
        event.input.remove_class("shown")
        self.query_one("#processes", DataTable).focus()
        self.redraw()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.view = ProcessView(sort=self.view.sort)
        self.query_one("#processes", DataTable).focus()
        self.redraw()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
