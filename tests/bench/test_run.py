"""The runner: failures become recorded errors and the run goes on; results are saved as they come."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.bench.benchmark import Benchmark, Kernel, Unsupported
from gpufly.bench.cpu import thread_counts
from gpufly.bench.results import load_run
from gpufly.bench.run import annotate, check_names, check_runnable, parse_device, parse_only, run_benchmarks, select
from gpufly.errors import GpuflyError
from tests.bench.fakes import FakeDevice, FakeHost, slow_benchmark


def _failing(name: str, exc: BaseException) -> Benchmark:
    def build() -> Kernel:
        raise exc

    return Benchmark(name, "gemm", "flops_per_s", build, {"n": 8192})


def test_a_failing_benchmark_is_recorded_and_the_run_goes_on() -> None:
    device = FakeDevice()
    plan = [slow_benchmark(device, "gemm.bf16", 0.01, 1e12),
            _failing("gemm.fp8", Unsupported("fp8 matmul needs compute capability 8.9 or newer")),
            _failing("gemm.int8", RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore text")),
            _failing("gemm.tf32", ValueError("bad layout")),
            slow_benchmark(device, "memory.copy", 0.02, 2e10, metric="bytes_per_s", group="memory")]
    run = run_benchmarks(device, plan, host=FakeHost())
    assert [r.name for r in run.results] == ["gemm.bf16", "memory.copy"]
    assert [(e.name, e.error) for e in run.errors] == [
        ("gemm.fp8", "fp8 matmul needs compute capability 8.9 or newer"),
        ("gemm.int8", "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ("gemm.tf32", "ValueError: bad layout"),
    ]
    assert run.errors[0].params == {"n": 8192}
    assert device.recovered == 3 and run.finished_at is not None


def test_results_are_saved_as_they_come(tmp_path: Path) -> None:
    device = FakeDevice()
    seen = []

    def on_done(entry) -> None:
        seen.append(len(json.loads(save.read_text())["results"]))
        if len(seen) == 2:
            raise KeyboardInterrupt

    save = tmp_path / "run.json"
    plan = [slow_benchmark(device, f"gemm.n{i}", 0.01, 1e12) for i in range(4)]
    with pytest.raises(KeyboardInterrupt):
        run_benchmarks(device, plan, save=save, on_done=on_done, settings={"quick": True}, host=FakeHost())
    assert seen == [1, 2]
    interrupted = load_run(save)
    assert [r.name for r in interrupted.results] == ["gemm.n0", "gemm.n1"]
    assert interrupted.finished_at is None and interrupted.settings["quick"] is True


def test_progress_callbacks_see_every_benchmark() -> None:
    device = FakeDevice()
    plan = [slow_benchmark(device, f"gemm.n{i}", 0.01, 1e12) for i in range(3)] + [_failing("gemm.x", OSError())]
    started, done = [], []
    run_benchmarks(device, plan, on_start=lambda i, b: started.append((i, b.name)), on_done=done.append,
                   host=FakeHost())
    assert started == [(0, "gemm.n0"), (1, "gemm.n1"), (2, "gemm.n2"), (3, "gemm.x")]
    assert len(done) == 4 and done[-1].error == "OSError"


def test_settings_are_held_while_building_and_timing_and_then_restored() -> None:
    device = FakeDevice()
    state = {"tf32": False}
    seen = {}

    class Tf32:
        def __enter__(self) -> None:
            state["tf32"] = True

        def __exit__(self, *exc: object) -> None:
            state["tf32"] = False

    def build() -> Kernel:
        seen["build"] = state["tf32"]
        return Kernel(lambda: seen.setdefault("run", state["tf32"]), 1e9)

    run_benchmarks(device, [Benchmark("gemm.tf32", "gemm", "flops_per_s", build, settings=Tf32)], host=FakeHost())
    assert seen == {"build": True, "run": True} and state["tf32"] is False


def test_only_picks_groups_and_names() -> None:
    device = FakeDevice()
    plan = [slow_benchmark(device, name, 0.01, 1, group=name.split(".")[0])
            for name in ("gemm.fp32", "gemm.bf16", "memory.copy", "launch.eager")]
    chosen, missing = select(plan, device.groups, ["gemm.bf16", "memory"])
    assert [b.name for b in chosen] == ["gemm.bf16", "memory.copy"] and missing == []
    chosen, missing = select(plan, ("gemm", "memory", "threads"), ["transfer", "gemm.fp64", "threads"])
    assert chosen == []
    assert [(e.name, e.error) for e in missing] == [
        ("transfer", "the transfer benchmarks need a CUDA GPU"), ("gemm.fp64", "no 'gemm.fp64' benchmark here"),
        ("threads", "no 'threads' benchmark here")]
    assert select(plan, device.groups, []) == (plan, [])


def test_only_refuses_unknown_groups_with_a_suggestion() -> None:
    assert parse_only(" gemm, memory ") == ["gemm", "memory"]
    with pytest.raises(GpuflyError, match="did you mean gemm"):
        parse_only("gem")
    with pytest.raises(GpuflyError):
        parse_only(",")


def test_device_names() -> None:
    assert parse_device("cpu", cuda_count=2) == ("cpu", 0)
    assert parse_device("CUDA", cuda_count=2) == ("cuda", 0)
    assert parse_device("cuda:1", cuda_count=2) == ("cuda", 1)
    assert parse_device(None, cuda_count=1) == ("cuda", 0)
    with pytest.raises(GpuflyError, match="no CUDA GPU"):
        parse_device("cuda:0", cuda_count=0)
    with pytest.raises(GpuflyError, match="no GPU 3"):
        parse_device("cuda:3", cuda_count=2)
    with pytest.raises(GpuflyError, match="unknown device"):
        parse_device("tpu", cuda_count=0)


def test_notes_for_thread_scaling_and_cuda_graphs() -> None:
    device = FakeDevice()
    plan = [slow_benchmark(device, "threads.gemm.fp32.t1", 0.04, 1e9, group="threads"),
            slow_benchmark(device, "threads.gemm.fp32.t4", 0.01, 1e9, group="threads"),
            slow_benchmark(device, "launch.step_eager", 300e-6, 1, metric="seconds", group="launch"),
            slow_benchmark(device, "launch.step_graph", 44e-6, 1, metric="seconds", group="launch")]
    results = annotate(run_benchmarks(device, plan, host=FakeHost()).results)
    notes = {r.name: r.note for r in results}
    assert notes["threads.gemm.fp32.t1"] is None
    assert notes["threads.gemm.fp32.t4"] == "4.00x of 1 thread"
    assert notes["launch.step_graph"] == "saves 256.0 us per step (256.00 us per kernel)"


def test_thread_counts() -> None:
    assert thread_counts(1) == [1]
    assert thread_counts(2) == [1, 2]
    assert thread_counts(16) == [1, 2, 4, 8, 16]


class _PhasedKernel:
    """A kernel on the fake clock: its first ``sweep_calls`` calls (the sweep) take ``sweep_s`` each, every later
    call the next of ``final_s`` per attempt (the last again once they run out); ``per_attempt`` calls each."""

    def __init__(self, clock, sweep_calls: int, sweep_s: float, final_s: list[float], per_attempt: int) -> None:
        self.clock, self.sweep_calls, self.sweep_s = clock, sweep_calls, sweep_s
        self.final_s, self.per_attempt, self.calls = final_s, per_attempt, 0

    def __call__(self) -> None:
        later = self.calls - self.sweep_calls
        seconds = self.sweep_s if later < 0 else self.final_s[min(later // self.per_attempt, len(self.final_s) - 1)]
        self.clock.advance(seconds)
        self.calls += 1


def _swept(device: FakeDevice, final_s: list[float]) -> Benchmark:
    """gemm.fp32 swept at one size (n=512, 4e9 FLOP a call): the sweep sees 0.01 s a call (400 GFLOP/s)."""
    warmup, repeats, sweep_repeats = 2, 5, 3

    def build(n: int) -> Kernel:
        kernel = _PhasedKernel(device.clock, warmup + sweep_repeats, 0.01, final_s, warmup + repeats)
        return Kernel(kernel, 4e9, {"shape": f"n={n}"})

    return Benchmark("gemm.fp32", "gemm", "flops_per_s", build, warmup=warmup, repeats=repeats, sizes=(512,),
                     sweep_repeats=sweep_repeats)


def test_a_figure_far_from_its_own_sweep_is_measured_again_then_marked_noisy_with_the_sweeps_figure() -> None:
    device = FakeDevice()
    run = run_benchmarks(device, [_swept(device, [0.12])], host=FakeHost())
    figure = run.results[0]
    assert figure.value == pytest.approx(4e9 / 0.12) and figure.attempts == 3 and figure.noisy
    assert figure.noise.startswith("the sweep measured 400 GFLOP/s at this size, 12x this figure, after 3 attempts")
    assert figure.to_dict()["noise"] == figure.noise


def test_a_figure_that_agrees_with_its_sweep_once_measured_again_is_not_noisy() -> None:
    device = FakeDevice()
    figure = run_benchmarks(device, [_swept(device, [0.12, 0.011])], host=FakeHost()).results[0]
    assert figure.value == pytest.approx(4e9 / 0.011) and figure.attempts == 2 and not figure.noisy


def test_a_figure_within_the_agreement_factor_is_measured_once() -> None:
    device = FakeDevice()
    figure = run_benchmarks(device, [_swept(device, [0.014])], host=FakeHost()).results[0]
    assert figure.attempts == 1 and not figure.noisy


def test_a_typo_in_a_benchmark_name_is_refused_with_the_closest_names() -> None:
    device = FakeDevice()
    plan = [slow_benchmark(device, name, 0.01, 1, group=name.split(".")[0])
            for name in ("gemm.fp32", "gemm.fp16", "memory.copy", "llm.fp32.decode.m1.k4096.n4096")]
    with pytest.raises(GpuflyError, match=r"gemm\.fp33") as raised:
        check_names(plan, ("gemm", "memory", "llm"), ["gemm.fp33"])
    assert raised.value.hint.startswith("did you mean gemm.fp32")
    for fine in (["gemm", "gemm.fp32"], ["llm.fp32.decode"], ["transfer.h2d"], ["threads"]):
        check_names(plan, ("gemm", "memory", "llm"), fine)


def test_a_run_that_measures_nothing_never_replaces_the_saved_file(tmp_path: Path) -> None:
    device = FakeDevice()
    save = tmp_path / "keep.json"
    save.write_text('{"kept": true}')
    plan = [_failing("gemm.fp8", Unsupported("fp8 needs 8.9")), _failing("gemm.int8", RuntimeError("out of memory"))]
    run = run_benchmarks(device, plan, save=save, host=FakeHost())
    assert run.results == [] and len(run.errors) == 2
    assert save.read_text() == '{"kept": true}'
    fresh = tmp_path / "new.json"
    run_benchmarks(device, plan, save=fresh, host=FakeHost())
    assert not fresh.exists()


def test_a_run_that_measures_something_is_saved_with_the_errors_before_it(tmp_path: Path) -> None:
    device = FakeDevice()
    save = tmp_path / "run.json"
    plan = [_failing("gemm.fp8", Unsupported("fp8 needs 8.9")), slow_benchmark(device, "gemm.bf16", 0.01, 1e12)]
    run_benchmarks(device, plan, save=save, host=FakeHost())
    saved = load_run(save)
    assert [r.name for r in saved.results] == ["gemm.bf16"] and [e.name for e in saved.errors] == ["gemm.fp8"]


def test_a_benchmark_the_plan_knows_cannot_run_is_recorded_without_being_built() -> None:
    device = FakeDevice()
    built = []

    def build() -> Kernel:
        built.append(True)
        return Kernel(lambda: None, 1.0)

    plan = [Benchmark("gemm.fp8", "gemm", "flops_per_s", build, unsupported="a CPU emulates fp8")]
    run = run_benchmarks(device, plan, host=FakeHost())
    assert built == [] and [(e.name, e.error) for e in run.errors] == [("gemm.fp8", "a CPU emulates fp8")]
    assert device.recovered == 0


def _plan_with_fp8(device: FakeDevice) -> list[Benchmark]:
    import dataclasses

    fp8 = dataclasses.replace(slow_benchmark(device, "gemm.fp8", 0.01, 1), unsupported="a CPU emulates fp8")
    return [slow_benchmark(device, "gemm.fp32", 0.01, 1), fp8,
            slow_benchmark(device, "memory.copy", 0.01, 1, group="memory")]


def test_a_selection_the_device_cannot_run_is_refused_before_anything_is_measured() -> None:
    device = FakeDevice()
    plan = _plan_with_fp8(device)
    with pytest.raises(GpuflyError, match=r"--only gemm\.fp8: not measurable on this device: a CPU emulates fp8") \
            as raised:
        check_runnable(plan, ("gemm", "memory", "transfer"), ["gemm.fp8"])
    assert raised.value.hint == "the gemm benchmarks this device runs: gemm.fp32" and raised.value.exit_code == 2
    with pytest.raises(GpuflyError, match=r"gemm\.fp8"):
        check_runnable(plan, ("gemm", "memory"), ["memory", "gemm.fp8"])
    with pytest.raises(GpuflyError, match="nothing this device can measure") as raised:
        check_runnable(plan, ("gemm", "memory"), ["transfer"])
    assert "transfer: the transfer benchmarks need a CUDA GPU" in raised.value.message
    for fine in ([], ["gemm"], ["gemm.fp32"], ["memory", "transfer"]):
        check_runnable(plan, ("gemm", "memory"), fine)


def _square(name: str, value: float, n: int, *, threads: int | None = None, sweep: bool = False,
            busy: bool = False):
    from gpufly.bench.results import BenchResult
    from gpufly.bench.timing import summarize

    params = {"dtype": "fp32", "m": n, "n": n, "k": n, "shape": f"n={n}"}
    if threads is not None:
        params["threads"] = threads
    if sweep:
        params["sweep"] = [{"size": n, "median_s": 1.0, "value": value}]
    conditions = {"start": {"load_average_1m": 1.3, "cpu_cores": 2, "busy_processes": [
        {"pid": 13551, "name": "python", "cpu_percent": 100.4}] if busy else []}, "end": {}}
    return BenchResult(name=name, group=name.split(".")[0], metric="flops_per_s", value=value, unit="FLOP/s",
                       params=params, timing=summarize([1.0] * 9, warmup=1), value_low=value * 0.97,
                       value_high=value * 1.01, conditions=conditions)


def test_a_ceiling_far_below_the_same_kernel_elsewhere_in_the_run_is_marked_noisy() -> None:
    # the probe's run: gemm.fp32 (best of its sweep, n=1536, 2 threads by default) read 120.8 GFLOP/s beside a python
    # process at 100% CPU, and threads.gemm.fp32.t2 (n=1024, 2 threads) read 269.8 a minute later
    results = [_square("gemm.fp32", 120.8e9, 1536, sweep=True, busy=True),
               _square("threads.gemm.fp32.t1", 130.8e9, 1024, threads=1),
               _square("threads.gemm.fp32.t2", 269.8e9, 1024, threads=2)]
    annotated = {r.name: r for r in annotate(results, threads=2)}
    ceiling = annotated["gemm.fp32"]
    assert ceiling.noisy and ceiling.noise is not None
    assert ceiling.noise.startswith("threads.gemm.fp32.t2 measured 270 GFLOP/s for the same kernel (fp32, n=1024, "
                                    "2 threads) in this run, 2.23x this ceiling; python (pid 13551) at 100% CPU")
    assert not annotated["threads.gemm.fp32.t1"].noisy and not annotated["threads.gemm.fp32.t2"].noisy
    # at one thread by default, the two-thread figure is another kernel; within 1.5x, nothing is said
    assert not {r.name: r for r in annotate(results, threads=1)}["gemm.fp32"].noisy
    agreeing = [_square("gemm.fp32", 250e9, 1536, sweep=True), results[2]]
    assert not any(r.noisy for r in annotate(agreeing, threads=2))


def test_a_fixed_size_figure_is_checked_only_against_the_same_size() -> None:
    low = _square("threads.gemm.fp32.t2", 100e9, 1024, threads=2)
    same = _square("gemm.fp32", 300e9, 1024, sweep=True)
    other = _square("gemm.fp32", 300e9, 2048, sweep=True)
    assert {r.name: r for r in annotate([same, low], threads=2)}["threads.gemm.fp32.t2"].noisy
    assert not any(r.noisy for r in annotate([other, low], threads=2))
