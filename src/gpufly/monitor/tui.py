"""`gpufly top`: the Textual screen. GPU panels with bars and sparklines, a host panel, the process table.

Below ``COMPACT_WIDTH`` x ``COMPACT_HEIGHT`` (an 80x24 terminal) each GPU takes two lines without a border and
the host one, so the process table keeps most of the screen. In either layout the process table sits outside
the scrolling GPU list, so it is always on screen, and every sparkline is cut to the width it has: a line
never wraps.

The screen never calls NVML itself: a ``Sampler`` thread fills ``History`` and a timer redraws from
``History.latest``, so a slow driver call cannot freeze the keys. Tests drive it with a replay
backend and ``autostart=False``, stepping the sampler by hand through Textual's pilot.
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.geometry import Size
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static

from gpufly.hw import GpuSample
from gpufly.monitor.format import NA, fmt_bytes, fmt_number, no_gpu_line, slowdown_text
from gpufly.monitor.health import Health, HealthWatch, assess
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import Backend, History, Sampler
from gpufly.monitor.views import (
    PROCESS_COLUMNS,
    SORTS,
    ProcessView,
    bar,
    gpu_lines,
    host_lines,
    process_cells,
    ratio,
    sparkline,
)

SPARKLINES: tuple[tuple[str, str], ...] = (
    ("utilization_gpu_percent", "util"),
    ("memory_used_bytes", "memory"),
    ("power_w", "power"),
)
"""The history drawn under each GPU panel, each scaled from 0 to the card's own maximum."""
SPARK_WIDTH = 40
"""The longest sparkline: 40 samples, 40 s at the default interval."""
COMPACT_WIDTH = 100
COMPACT_HEIGHT = 30
"""Below either, the compact layout: two lines per GPU, one for the host."""
PANEL_FRAME = 4
"""Columns a full GPU panel spends on its border and padding."""
SCROLLBAR = 2
"""Columns the GPU list's scrollbar may take (Textual's default vertical scrollbar size)."""


def _spark_top(gpu: GpuSample, metric: str) -> float | None:
    return {"utilization_gpu_percent": 100.0, "memory_used_bytes": gpu.memory_total_bytes,
            "power_w": gpu.power_limit_w}.get(metric)


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells, with an ellipsis where it was cut.

    >>> fit("NVIDIA H100 80GB HBM3", 10), fit("short", 10)
    ('NVIDIA H1…', 'short')
    """
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)) + "…" if width > 0 else ""


def spark_lines(gpu: GpuSample, history: History, width: int) -> str:
    """The full panel's history line: one sparkline per metric of ``SPARKLINES``, each as long as ``width``
    cells allow (at most ``SPARK_WIDTH``), so the line never wraps."""
    label_width = max(len(label) for _, label in SPARKLINES) + 1
    gaps = 2 * (len(SPARKLINES) - 1)
    each = max(0, min(SPARK_WIDTH, (width - gaps) // len(SPARKLINES) - label_width))
    sparks = []
    for metric, label in SPARKLINES:
        points = [value for _, value in history.series(gpu.index, metric)]
        sparks.append(f"{label:<{label_width}}{sparkline(points, _spark_top(gpu, metric), each)}")
    return fit("  ".join(sparks), width)


def compact_gpu_lines(gpu: GpuSample, history: History, width: int, health: Health | None = None) -> list[str]:
    """One GPU in two lines of at most ``width`` cells: name, utilization and memory; then its health verdict
    (``health``, or this sample's alone, as ``gpu_lines`` judges it), power, temperature, what slows it down,
    and the utilization sparkline in whatever width is left."""
    if gpu.lost:
        return [fit(f"GPU {gpu.index} {gpu.name} LOST: {gpu.unavailable or 'fallen off the bus'}", width)]
    util = gpu.utilization_gpu_percent
    memory = (f"mem {bar(ratio(gpu.memory_used_bytes, gpu.memory_total_bytes), 8)} "
              f"{fmt_bytes(gpu.memory_used_bytes)}/{fmt_bytes(gpu.memory_total_bytes)}")
    figures = f"  util {bar(None if util is None else util / 100, 8)} {fmt_number(util, '%'):>4}  {memory}"
    name = fit(gpu.name, max(4, width - cell_len(f"GPU {gpu.index} ") - cell_len(figures)))
    first = fit(f"GPU {gpu.index} {name}{figures}", width)
    verdict = health if health is not None else assess([gpu])
    state = (f"  {verdict.level.name}  {fmt_number(gpu.power_w)}/{fmt_number(gpu.power_limit_w, ' W')}  "
             f"{fmt_number(gpu.temperature_c, 'C')}  slowdown: {slowdown_text(gpu)}  util ")
    points = [value for _, value in history.series(gpu.index, "utilization_gpu_percent")]
    spark = sparkline(points, 100.0, max(0, min(SPARK_WIDTH, width - cell_len(state))))
    return [first, fit(state + spark, width)]


def compact_host_line(snapshot: Snapshot, width: int) -> str:
    """The host in one line: CPU, RAM and load."""
    host = snapshot.host
    cpu = host.cpu_percent
    load = " ".join(f"{v:.2f}" for v in host.load_average) if host.load_average else NA
    return fit(f"host {snapshot.hostname}  CPU {bar(None if cpu is None else cpu / 100, 8)} {fmt_number(cpu, '%')}"
               f"  RAM {fmt_bytes(host.memory_used_bytes)}/{fmt_bytes(host.memory_total_bytes)}  load {load}", width)

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
    GpuPanel Static { text-wrap: nowrap; text-overflow: clip; }
    """

    def __init__(self, index: int) -> None:
        super().__init__(id=f"gpu-{index}")
        self.index = index

    def compose(self) -> ComposeResult:
        yield Static(id=f"gpu-{self.index}-text")
        yield Static(id=f"gpu-{self.index}-history", classes="sparks")

    def show(self, gpu: GpuSample, history: History, width: int, compact: bool, health: Health) -> None:
        """Draw ``gpu`` in ``width`` columns of screen: the full panel, or two lines when ``compact``."""
        self.set_class(gpu.lost, "lost")
        text = self.query_one(f"#gpu-{self.index}-text", Static)
        sparks = self.query_one(f"#gpu-{self.index}-history", Static)
        if compact:
            text.update("\n".join(compact_gpu_lines(gpu, history, width, health)))
            sparks.update("")
            return
        text.update("\n".join(gpu_lines(gpu, health=health)))
        sparks.update(spark_lines(gpu, history, width - PANEL_FRAME))


class TopApp(App[None]):
    """The monitor screen over any backend (live NVML, a replay, a fake)."""

    TITLE = "gpufly top"
    CSS = """
    #no-gpu { color: $warning; padding: 0 1; }
    #body { height: auto; max-height: 65%; }
    #gpus { height: auto; }
    #host { border: round $secondary; padding: 0 1; height: auto; text-wrap: nowrap; text-overflow: clip; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    #processes { height: 1fr; min-height: 4; }
    #status { color: $text-muted; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    .compact #body { max-height: 50%; }
    .compact GpuPanel { border: none; padding: 0; margin-bottom: 0; }
    .compact GpuPanel.lost { color: $error; }
    .compact GpuPanel .sparks { display: none; }
    .compact #host { border: none; padding: 0; }
    .compact #status { padding: 0; }
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
        self.health = HealthWatch()
        self.sampler = Sampler(backend, interval=interval, history=self.history, listeners=[self.health])
        self.interval = interval
        self.autostart = autostart
        self.view = ProcessView()
        self._gpu_indices: tuple[int, ...] = ()
        self._terminal: Size | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(id="no-gpu")
        with VerticalScroll(id="body"):
            yield Vertical(id="gpus")
            yield Static(id="host")
        yield DataTable(id="processes", zebra_stripes=True, cursor_type="row")
        yield Input(placeholder="filter by user or name; Enter applies, Esc clears", id="filter")
        yield Footer()

    @property
    def terminal(self) -> Size:
        """The terminal's size: the last resize's (``App.size`` catches up only after the screen has)."""
        return self._terminal or self.size

    @property
    def compact(self) -> bool:
        """Whether the terminal is below the size of the full layout."""
        return self.terminal.width < COMPACT_WIDTH or self.terminal.height < COMPACT_HEIGHT

    def on_resize(self, event: events.Resize) -> None:
        self._terminal = event.size
        self.screen.set_class(self.compact, "compact")
        self.redraw()

    def on_mount(self) -> None:
        self.screen.set_class(self.compact, "compact")
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
        if self.compact:
            host = compact_host_line(snapshot, self.terminal.width - SCROLLBAR)
        else:
            host = "\n".join(host_lines(snapshot))
        self.query_one("#host", Static).update(host)
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
        width = self.terminal.width - SCROLLBAR
        for gpu in snapshot.gpus:
            box.query_one(f"#gpu-{gpu.index}", GpuPanel).show(gpu, self.history, width, self.compact,
                                                              self.health.verdict(gpu))

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
