"""A trial: what the worker's process leaves becomes a TrialResult; its timing; and real trials in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpufly.tune import GreedyPlan, ResultsLog, Search, SubprocessRunner, Trial
from gpufly.tune.energy import NO_NVML
from gpufly.tune.trial import error_line, one_group, outcome, wait_for
from gpufly.tune.verdict import DRIFT_TOLERANCE, loss_drift
from gpufly.tune.worker import StepTimer, step_rates

TINY = str(Path(__file__).parent.parent / "fixtures" / "tune" / "tiny.py") + ":workload"


def test_the_worker_s_last_json_line_is_the_measurement() -> None:
    line = json.dumps({"throughput": 500.0, "unit": "samples", "losses": [1.0, 0.9], "eval_loss": 0.8,
                       "world_size": 2, "steps": 2, "eval_metric": None})
    result = outcome(Trial("ddp=2", {"ddp": 2}), 0, f"warming up\n{{\"partial\": 1}}\n{line}\n", "", 3.5)
    assert result.status == "ok" and result.throughput == 500.0 and result.world_size == 2
    assert result.losses == [1.0, 0.9] and result.seconds == 3.5 and result.eval_metric is None


@pytest.mark.parametrize(("code", "stderr", "status", "error"), [
    (1, "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20 GiB\n", "oom",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20 GiB"),
    (1, "Traceback ...\nValueError: fp16 AMP needs a CUDA GPU\n", "failed", "ValueError: fp16 AMP needs a CUDA GPU"),
    (0, "", "failed", "exited with no message"),
])
def test_a_worker_that_died_is_a_failure_with_its_error(code: int, stderr: str, status: str, error: str) -> None:
    result = outcome(Trial("x", {}), code, "", stderr, 1.0)
    assert result.status == status and result.error == error and result.throughput is None


@pytest.mark.parametrize("line", ["{not json", "{}garbage", '{"a"'])
def test_a_last_line_that_only_looks_like_a_result_is_a_failure_not_a_crash(line: str) -> None:
    result = outcome(Trial("x", {}), 0, f"{{ starting\n{line}\n", "", 1.0)
    assert result.status == "failed" and result.error == f"the trial's last line is not a result: {line}"


def test_a_failing_ddp_trial_reports_the_ranks_error_not_the_launchers() -> None:
    stderr = ("[rank0]: Traceback (most recent call last):\n[rank0]: TypeError: BF16 all reduce communication hook "
              "required CUDA 11+\n[rank1]: TypeError: BF16 ...\ntorch.distributed.elastic.multiprocessing.errors."
              "ChildFailedError: \n============================================================\n")
    assert error_line(stderr) == "TypeError: BF16 all reduce communication hook required CUDA 11+"
    assert error_line("RuntimeError: boom\n") == "RuntimeError: boom"


class Ticks:
    """A clock that returns the given readings, one per call."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0)


def test_throughput_counts_every_stall_and_the_median_step_is_kept_beside_it() -> None:
    # Twelve steps of 10 ms and one stall of 500 ms, 10 samples each: the run gave 130 samples in 0.62 s, which
    # is the throughput; the median step (1,000/s) hides the stall and is only a diagnostic.
    seconds = [0.01] * 6 + [0.5] + [0.01] * 6
    throughput, median_step = step_rates(seconds, [10] * len(seconds))
    assert throughput == pytest.approx(130 / 0.62) and median_step == pytest.approx(1000.0)
    assert step_rates([], []) == (None, None)


def test_the_step_timer_skips_the_warm_up_and_counts_the_wait_for_data() -> None:
    # start, then per step: batch fetched, step ended. Step 0 is warm-up.
    timer = StepTimer(warmup=1, clock=Ticks(0.0, 0.5, 1.0, 1.1, 1.2, 1.2, 1.4))
    timer.start()
    for step in range(3):
        timer.fetched()
        timer.ended(step, items=10)
    assert timer.seconds == pytest.approx([0.2, 0.2]) and timer.counts == [10, 10]
    assert timer.data_wait_share() == pytest.approx(0.1 / 0.4)
    assert timer.rates() == pytest.approx((50.0, 50.0))


def test_a_real_trial_runs_in_its_own_process_and_comes_back_measured() -> None:
    """The one real trial of the default run: the worker, the knobs and the JSON line, end to end."""
    result = SubprocessRunner(TINY, steps=8, timeout_s=300)(Trial("amp", {"amp": "bf16", "num_workers": 0}))
    assert result.status == "ok", result.error
    assert result.throughput and result.throughput > 0 and len(result.losses) == 8 and result.world_size == 1
    assert result.eval_loss is not None and result.eval_metric is not None and result.batch_size == 32


@pytest.mark.slow
def test_real_trials_in_subprocesses_record_oom_and_drift() -> None:
    run = SubprocessRunner(TINY, steps=20, timeout_s=300)
    baseline = run(Trial("baseline", {}))
    assert baseline.status == "ok", baseline.error
    assert baseline.throughput and baseline.throughput > 0 and len(baseline.losses) == 20
    assert run(Trial("baseline", {})).eval_loss == baseline.eval_loss, "deterministic: same samples, same seed"
    oom = run(Trial("explode", {"explode": True}))
    assert oom.status == "oom" and "out of memory" in (oom.error or "").lower()
    bigger = run(Trial("batch 128", {"batch_size": 128}))
    assert bigger.status == "ok" and len(bigger.losses) == 5, "the same samples in fewer, larger steps"
    timeout = SubprocessRunner(TINY, steps=20, timeout_s=0.01)(Trial("slow", {}))
    assert timeout.status == "timeout"


@pytest.mark.slow
def test_a_user_workload_that_takes_no_options_cannot_be_given_any() -> None:
    target = TINY.replace(":workload", ":no_options")
    result = SubprocessRunner(target, steps=8, timeout_s=300)(Trial("x", {"loss_scale": 2.0}))
    assert result.status == "failed" and "takes no options" in (result.error or "")


@pytest.mark.slow
def test_a_batch_that_leaves_fewer_than_four_steps_is_refused_not_given_more_samples() -> None:
    """32 x 8 samples at batch 128 are 2 steps; topping them up to 4 would train on twice the samples."""
    result = SubprocessRunner(TINY, steps=8, timeout_s=300)(Trial("batch 128", {"batch_size": 128}))
    assert result.status == "failed" and "leaves 2 steps" in (result.error or "") and "--steps 16" in result.error


@pytest.mark.slow
def test_ddp_over_two_cpu_processes_matches_one_process() -> None:
    run = SubprocessRunner(TINY, steps=16, timeout_s=300)
    single, ddp = run(Trial("single", {})), run(Trial("ddp", {"ddp": 2}))
    assert single.status == "ok" and ddp.status == "ok", ddp.error
    assert len(ddp.losses) == len(single.losses) == 16, "the same global batches"
    assert ddp.world_size == 2 and single.world_size == 1, "torchrun really started two processes"
    assert ddp.loss_drift is None, "set by the search, not the runner"
    drift = loss_drift(ddp.eval_loss, single.eval_loss)
    assert drift is not None and drift < 1e-4 < DRIFT_TOLERANCE, "gloo all-reduce of the half-batch gradients"
    compressed = run(Trial("fp16", {"ddp": 2, "ddp_hook": "fp16", "bucket_mb": 5}))
    assert compressed.status == "ok" and compressed.world_size == 2, compressed.error
    assert (loss_drift(compressed.eval_loss, single.eval_loss) or 0) < DRIFT_TOLERANCE
    powersgd = run(Trial("powersgd", {"ddp": 2, "ddp_hook": "powersgd"}))
    assert powersgd.status == "ok" and powersgd.world_size == 2, powersgd.error


def test_agents_share_one_process_group_and_the_first_failure_ends_the_wait() -> None:
    """A failed agent is the trial's end: the others would wait for it at the rendezvous until their own timeout,
    so the wait returns at once and the group, the agent still running included, is killed."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        with one_group([sleeper, failing], [(out, err), (out, err)], dict(os.environ)) as agents:
            assert os.getpgid(agents[1].pid) == agents[0].pid != os.getpgid(0), "one group, not the tuner's"
            codes = wait_for(agents, timeout_s=120)
        assert codes == {1: 3}, "returned on the failure, not after the sleeper"
        assert agents[0].returncode == -9, "killed with its group when the block was left"


def test_the_wait_for_agents_that_outlive_the_trial_s_time_is_a_timeout() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    with tempfile.TemporaryFile("w+") as out, one_group([sleeper], [(out, out)], dict(os.environ)) as agents:
        assert wait_for(agents, timeout_s=0.2) is None


def test_ddp_processes_that_do_not_split_over_the_nodes_fail_before_anything_starts() -> None:
    result = SubprocessRunner(TINY, steps=8, nodes=2)(Trial("ddp=3", {"ddp": 3}))
    assert result.status == "failed" and result.error == "ddp=3 processes do not split over 2 nodes"


@pytest.mark.slow
def test_ddp_as_two_nodes_on_loopback_matches_one_process() -> None:
    """Two torchrun agents, one process each, meet at a c10d rendezvous on 127.0.0.1 as two nodes would: the store,
    the rendezvous and gloo's all-reduce cross agents. The run must train as one process does."""
    run = SubprocessRunner(TINY, steps=16, timeout_s=300)
    single = run(Trial("single", {}))
    two_nodes = SubprocessRunner(TINY, steps=16, timeout_s=300, nodes=2)(Trial("ddp over 2 nodes", {"ddp": 2}))
    assert single.status == "ok" and two_nodes.status == "ok", two_nodes.error
    assert two_nodes.world_size == 2 and two_nodes.nodes == 2, "two agents, one rank each"
    assert single.world_size == 1 and single.nodes == 1
    assert len(two_nodes.losses) == len(single.losses) == 16, "the same global batches"
    assert all((loss_drift(a, b) or 0) < DRIFT_TOLERANCE for a, b in zip(two_nodes.losses, single.losses, strict=True))
    drift = loss_drift(two_nodes.eval_loss, single.eval_loss)
    assert drift is not None and drift < 1e-4 < DRIFT_TOLERANCE, "gloo all-reduce of the half-batch gradients"
    assert two_nodes.energy_j is None and two_nodes.energy_note == NO_NVML, "a CPU run measures no energy"


TWO_NODE_RUNNER = """
import sys
from gpufly.tune import SubprocessRunner, Trial
from gpufly.tune.trial import stop_signals
with stop_signals():
    SubprocessRunner(sys.argv[1], steps=4, device="cpu", timeout_s=600, nodes=2)(Trial("ddp", {"ddp": 2}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_two_node_trial_s_agents_and_ranks_die_with_the_tuner(tmp_path: Path, signum: int) -> None:
    """Both agents are the tuner's children in one group of their own: a stopped tuner kills the group, a killed
    one takes them by their death signal, and each rank goes with its agent."""
    from tests.test_loading import gone
    from tests.tune.test_process_group import BLOCKING, pids, stop

    (tmp_path / "blocking.py").write_text(BLOCKING)
    (tmp_path / "pids").mkdir()
    env = {**os.environ, "GPUFLY_TEST_PIDS": str(tmp_path / "pids"), "GPUFLY_TEST_BLOCK": "all"}
    tuner = subprocess.Popen([sys.executable, "-c", TWO_NODE_RUNNER, f"{tmp_path / 'blocking.py'}:workload"],
                             env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ranks = pids(tmp_path / "pids", "trial", 2)
    agents = set(pids(tmp_path / "pids", "launcher", 2))
    assert len(agents) == 2, "one rank under each of two agents"
    stop(tuner, signum)
    assert all(gone(pid) for pid in [*agents, *ranks])


@pytest.mark.slow
@pytest.mark.gpu
def test_a_gpu_trial_measures_its_energy_from_the_nvml_counter() -> None:
    result = SubprocessRunner("transformer", steps=40, device="cuda", timeout_s=600)(Trial("gpu", {}))
    assert result.status == "ok", result.error
    assert result.energy_j is not None and result.joules_per_unit is not None, result.energy_note
    assert 0 <= result.energy_j <= 1000 * result.seconds, "no GPU draws over a kilowatt"
    assert result.joules_per_unit <= result.energy_j


@pytest.mark.slow
def test_inference_trials_measure_what_quantization_and_pruning_cost() -> None:
    run = SubprocessRunner(TINY, steps=16, timeout_s=300)
    served = run(Trial("serve", {"task": "infer"}))
    assert served.status == "ok" and served.throughput and served.eval_loss is not None, served.error
    quantized = run(Trial("int8", {"task": "infer", "quantize": "int8_dynamic"}))
    assert quantized.status == "ok", quantized.error
    assert 0 < (loss_drift(quantized.eval_loss, served.eval_loss) or 0) < 0.05, "int8 costs a little, measured"
    pruned = run(Trial("prune 90%", {"task": "infer", "prune": 0.9}))
    assert pruned.status == "ok" and (loss_drift(pruned.eval_loss, served.eval_loss) or 0) > 0.05, "90% pruning hurts"


@pytest.mark.slow
def test_real_trials_that_break_the_loss_or_lower_the_metric_are_unsafe_and_not_chosen(tmp_path: Path) -> None:
    search = Search(GreedyPlan({"loss_scale": [3.0], "metric_penalty": [0.5]}), ResultsLog(tmp_path / "r.jsonl"),
                    SubprocessRunner(TINY, steps=12, timeout_s=300))
    chosen = search.run()
    by_name = {r.name: r for r in search.results}
    assert by_name["loss_scale=3.0"].status == "unsafe" and (by_name["loss_scale=3.0"].loss_drift or 0) > 0.02
    penalized = by_name["metric_penalty=0.5"]
    assert penalized.status == "unsafe" and penalized.loss_drift == 0.0, "the loss is the same; the metric is not"
    assert penalized.metric_drop is not None and penalized.metric_drop > 0.01
    assert chosen is None or chosen.name == "baseline", "nothing unsafe is chosen (on a busy machine, nothing at all)"


@pytest.mark.slow
def test_a_trial_asked_to_run_on_a_missing_gpu_says_so() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = SubprocessRunner("recsys", steps=4, device="cuda", timeout_s=300)(Trial("gpu", {"batched": True}))
    assert result.status == "failed" and "no CUDA GPU" in (result.error or "")


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_graphs_and_weight_only_trials_run_on_a_gpu() -> None:
    graphs = SubprocessRunner("transformer", steps=12, timeout_s=600)(Trial("graphs", {"compile": "reduce-overhead"}))
    assert graphs.status == "ok", graphs.error
    recsys = SubprocessRunner("recsys", steps=8, device="cuda", timeout_s=600)(
        Trial("gpu", {"batched": True, "sparse": True, "fused": True, "tf32": True}))
    assert recsys.status == "ok" and recsys.eval_metric is not None, recsys.error
    pytest.importorskip("torchao")
    serve = SubprocessRunner("transformer", steps=8, timeout_s=600)
    for quantize in ("int8_weight_only", "int4_weight_only"):
        quantized = serve(Trial(quantize, {"task": "infer", "quantize": quantize}))
        assert quantized.status == "ok", quantized.error
