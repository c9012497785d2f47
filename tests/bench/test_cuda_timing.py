"""The CUDA-graph timer's control flow, on a fake torch.cuda whose clock is the number of GPU calls run: warm-up
eager and on a side stream, one capture of ``inner`` calls, timed replays; eager events where capture fails."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from gpufly.bench.benchmark import Kernel
from gpufly.bench.cuda import measure_graph, measure_graph_or_events

CALL_S = 0.004  # what one call costs on the fake GPU's timeline


class FakeCuda:
    """Events read a clock that advances CALL_S per call run; a graph re-runs what it captured on replay."""

    def __init__(self, refuse_capture: bool = False) -> None:
        self.clock = 0.0
        self.capturing: list[int] | None = None
        self.log: list[str] = []
        self.refuse_capture = refuse_capture
        self.streams = 0

    def call(self) -> None:
        if self.capturing is not None:
            self.capturing.append(1)  # recorded into the graph, not run
            return
        self.clock += CALL_S
        self.log.append("eager")

    # torch.cuda's surface, as far as the timers use it
    def synchronize(self, *args: Any) -> None:
        self.log.append("sync")

    def Event(self, enable_timing: bool = False) -> Any:
        cuda = self
        event = SimpleNamespace(at=None)
        event.record = lambda: setattr(event, "at", cuda.clock)
        event.elapsed_time = lambda other: (other.at - event.at) * 1000
        return event

    def Stream(self) -> Any:
        self.streams += 1
        return SimpleNamespace(wait_stream=lambda other: None)

    def current_stream(self) -> Any:
        return SimpleNamespace(wait_stream=lambda other: None)

    @contextlib.contextmanager
    def stream(self, stream: Any):  # type: ignore[no-untyped-def]
        self.log.append("side-stream")
        yield

    def CUDAGraph(self) -> Any:
        cuda = self
        graph = SimpleNamespace(calls=0)

        def replay() -> None:
            cuda.clock += CALL_S * graph.calls
            cuda.log.append("replay")

        graph.replay = replay
        return graph

    @contextlib.contextmanager
    def graph(self, graph: Any):  # type: ignore[no-untyped-def]
        if self.refuse_capture:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.capturing = []
        self.log.append("capture")
        try:
            yield
        finally:
            graph.calls, self.capturing = len(self.capturing), None


def _torch(cuda: FakeCuda) -> Any:
    return SimpleNamespace(cuda=cuda)


def test_a_graph_captures_inner_calls_once_and_times_each_replay() -> None:
    cuda = FakeCuda()
    timing = measure_graph(_torch(cuda), cuda.call, warmup=4, repeats=6, inner=50)
    assert timing.median_s == pytest.approx(CALL_S)
    assert timing.repeats == 6 and timing.inner == 50
    assert cuda.log.count("capture") == 1 and cuda.log.count("replay") == 7  # one untimed replay first
    assert cuda.log.count("eager") == 4 + 3  # warm-up, then the side stream's three calls
    assert cuda.log.index("side-stream") < cuda.log.index("capture")


def test_a_refused_capture_falls_back_to_eager_events_and_says_so() -> None:
    cuda = FakeCuda(refuse_capture=True)
    kernel = Kernel(cuda.call, work=1.0, inner=10)
    timing = measure_graph_or_events(_torch(cuda), kernel, warmup=2, repeats=5)
    assert timing.median_s == pytest.approx(CALL_S)
    assert kernel.params["timing"].startswith("events (CUDA graph capture failed: RuntimeError")
    assert "replay" not in cuda.log


def test_a_captured_kernel_records_its_timer() -> None:
    cuda = FakeCuda()
    kernel = Kernel(cuda.call, work=1.0, inner=10)
    measure_graph_or_events(_torch(cuda), kernel, warmup=2, repeats=5)
    assert kernel.params["timing"] == "cuda_graph"
