"""`gpufly fleet report` on generated fleets: identical nodes, an older driver, a slow GPU, a narrow link, and files
that are not what they should be."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpufly.fleet import build_report, read_fleet
from tests.fleet.builders import facts, gpu, result, run, write_fleet


def report_json(cli, *paths: Path, extra: tuple[str, ...] = ()) -> tuple[int, dict]:
    done = cli("fleet", "report", *map(str, paths), "--json", *extra)
    assert done.stderr == ""
    return done.code, json.loads(done.stdout)


def test_identical_nodes_are_uniform(cli, tmp_path: Path) -> None:
    write_fleet(tmp_path, nodes=4, gpus=2)

    done = cli("fleet", "report", str(tmp_path))

    assert done.code == 0, done.stderr
    assert "4 nodes; 32 GPU bench figures compared with identical GPUs (tolerance 10%)" in done.stdout
    assert "uniform: no node or GPU differs from the rest" in done.stdout
    code, data = report_json(cli, tmp_path)
    assert (code, data["uniform"], data["findings"], data["compared"]) == (0, True, [], 32)
    assert [node["name"] for node in data["nodes"]] == ["node01", "node02", "node03", "node04"]
    assert data["nodes"][0]["gpus"] == ["NVIDIA H100 80GB HBM3"] * 2


def test_a_node_with_an_older_driver_is_named(cli, tmp_path: Path) -> None:
    write_fleet(tmp_path, change={"node03": lambda name, f, runs: (facts(driver="535.104.05"), runs)})

    done = cli("fleet", "report", str(tmp_path))

    assert done.code == 1
    assert "[setup] node03: driver 535.104.05; 3 of 4 nodes have 550.54.15" in done.stdout
    _, data = report_json(cli, tmp_path)
    assert [(f["kind"], f["subject"], f["node"]) for f in data["findings"]] == [("setup", "driver", "node03")]


def _slow_gpu(scale: float, spread: float = 0.01, conditions: dict | None = None):
    def change(name, node_facts, runs):
        slow = run(1, [result("gemm.bf16", scale=scale, spread=spread, conditions=conditions)])
        return node_facts, [runs[0], slow]
    return change


def test_a_run_saved_before_start_and_end_conditions_gives_its_reasons_too(tmp_path: Path) -> None:
    def flat(name, node_facts, runs):
        slow = result("gemm.bf16", scale=0.8, conditions={"clocks_event_reasons": ["hw_slowdown"]})
        return node_facts, [runs[0], run(1, [dataclasses.replace(slow, conditions=slow.conditions["end"])])]
    write_fleet(tmp_path, change={"node02": flat})

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert finding.reasons == ("clock events during the run: hw_slowdown",)


def test_a_gpu_20_percent_slow_is_named_with_its_reason(cli, tmp_path: Path) -> None:
    hot = {"temperature_c": 88, "sm_clock_mhz": 1500, "clocks_event_reasons": ["gpu_idle", "sw_thermal_slowdown"]}
    write_fleet(tmp_path, change={"node02": _slow_gpu(0.8, conditions=hot)})

    code, data = report_json(cli, tmp_path)

    assert code == 1
    [finding] = data["findings"]
    assert (finding["kind"], finding["subject"], finding["node"], finding["gpu"]) == ("slow-gpu", "gemm.bf16",
                                                                                     "node02", 1)
    assert "gemm.bf16 (n=8192) 600.0 TFLOP/s, 20% behind the median of 7 identical GPUs (750.0 TFLOP/s)" in \
        finding["message"]
    assert finding["reasons"] == ["clock events during the run: sw_thermal_slowdown",
                                  "SM clock during the run 1500 MHz, 1980 MHz on its siblings",
                                  "temperature during the run 88 °C, 55 °C on its siblings"]


def test_a_slow_gpu_with_nothing_recorded_says_so(tmp_path: Path) -> None:
    write_fleet(tmp_path, change={"node04": _slow_gpu(0.8)})

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert finding.reasons[0].startswith("no recorded cause")


def test_a_lower_power_limit_is_a_reason(tmp_path: Path) -> None:
    def change(name, node_facts, runs):
        return node_facts, [runs[0], run(1, [result("gemm.bf16", scale=0.7)], power_limit_w=400.0)]
    write_fleet(tmp_path, change={"node01": change})

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert finding.reasons == ("power limit 400 W, 700 W on its siblings",)


@pytest.mark.parametrize(("scale", "spread"), [(0.95, 0.01), (0.88, 0.15)],
                         ids=["within-tolerance", "within-its-own-noise"])
def test_a_figure_within_tolerance_or_its_own_interval_is_not_flagged(tmp_path: Path, scale: float,
                                                                       spread: float) -> None:
    write_fleet(tmp_path, change={"node02": _slow_gpu(scale, spread)})

    assert build_report(read_fleet([tmp_path])).uniform


def test_a_stricter_tolerance_flags_a_smaller_shortfall(cli, tmp_path: Path) -> None:
    write_fleet(tmp_path, change={"node02": _slow_gpu(0.95)})

    code, data = report_json(cli, tmp_path, extra=("--tolerance", "0.03"))

    assert code == 1
    assert [f["gpu"] for f in data["findings"]] == [1]


def test_a_slower_latency_is_a_higher_figure(tmp_path: Path) -> None:
    def change(name, node_facts, runs):
        return node_facts, [runs[0], run(1, [result("launch.empty", scale=0.5)])]
    write_fleet(tmp_path, change={"node03": change})

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert (finding.subject, finding.node, finding.gpu) == ("launch.empty", "node03", 1)
    assert "9.0 µs, 100% behind the median of 7 identical GPUs (4.5 µs)" in finding.message


def test_a_link_narrower_than_it_can_be_is_named(cli, tmp_path: Path) -> None:
    narrow = {"node02": lambda name, f, runs: (dataclasses.replace(f, gpus=(gpu(0), gpu(1, pcie_width_current=8))),
                                               runs)}
    write_fleet(tmp_path, change=narrow)

    done = cli("fleet", "report", str(tmp_path))

    assert done.code == 1
    assert ("[link] node02 GPU 1 (NVIDIA H100 80GB HBM3): PCIe link x8 of x16: it trained narrower than it can"
            in done.stdout)


def test_a_slot_narrower_than_its_siblings_is_named(tmp_path: Path) -> None:
    limited = {"node04": lambda name, f, runs: (dataclasses.replace(
        f, gpus=(gpu(0, pcie_width_current=8, pcie_width_max=8), gpu(1))), runs)}
    write_fleet(tmp_path, change=limited)

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert (finding.kind, finding.node, finding.gpu) == ("link", "node04", 0)
    assert "PCIe width at most x8 where 7 of 8 NVIDIA H100 80GB HBM3 reach x16" in finding.message


def test_a_slow_transfer_names_the_narrow_link(tmp_path: Path) -> None:
    def change(name, node_facts, runs):
        node_facts = dataclasses.replace(node_facts, gpus=(gpu(0), gpu(1, pcie_width_current=8)))
        return node_facts, [runs[0], run(1, [result("gemm.bf16"), result("transfer.h2d.pinned", scale=0.5)])]
    write_fleet(tmp_path, change={"node01": change})

    slow = next(f for f in build_report(read_fleet([tmp_path])).findings if f.kind == "slow-gpu")

    assert slow.subject == "transfer.h2d.pinned"
    assert slow.reasons[0].startswith("PCIe link x8 of x16 on the node's GPU 1")


def test_a_two_way_split_is_reported_without_picking_a_side(tmp_path: Path) -> None:
    older = {name: (lambda n, f, runs: (facts(torch="2.4.0+cu121"), runs)) for name in ("node03", "node04")}
    write_fleet(tmp_path, change=older)

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert finding.node is None
    assert finding.message == ("torch differs with no majority: 2.5.1+cu124 on node01, node02; 2.4.0+cu121 on "
                               "node03, node04")


def test_broken_and_foreign_files_are_findings_not_a_crash(cli, tmp_path: Path) -> None:
    write_fleet(tmp_path, nodes=3)
    (tmp_path / "node09.facts.json").write_text('{"driver": ')
    (tmp_path / "package.json").write_text('{"name": "left-pad"}')
    (tmp_path / "node05.facts.json").write_text(json.dumps({"schema_version": 2, "driver": {"found": "yes"}}))
    (tmp_path / "slurm-1234.out").write_text("srun: job step finished\n")

    code, data = report_json(cli, tmp_path)

    assert code == 1
    assert [node["name"] for node in data["nodes"]] == ["node01", "node02", "node03"]
    files = {Path(f["subject"]).name: f["message"] for f in data["findings"] if f["kind"] == "file"}
    assert set(files) == {"node09.facts.json", "package.json", "node05.facts.json"}
    assert "is not doctor facts, a bench run or a fleet record" in files["package.json"]
    assert files["node05.facts.json"] == f'{tmp_path}/node05.facts.json: driver.found must be true or false, got "yes"'
    assert data["skipped_files"] == 1


def test_nodes_with_only_bench_runs_are_compared(tmp_path: Path) -> None:
    for name, scale in (("a", 1.0), ("b", 1.0), ("c", 0.7)):
        run(0, [result("gemm.bf16", scale=scale)]).save(tmp_path / f"{name}.json")

    [finding] = build_report(read_fleet([tmp_path])).findings

    assert (finding.node, finding.gpu) == ("c", 0)


def test_a_gpu_with_no_identical_sibling_is_not_compared(tmp_path: Path) -> None:
    run(0, [result("gemm.bf16")]).save(tmp_path / "a.json")
    run(0, [result("gemm.bf16", scale=0.5)], name="NVIDIA H200").save(tmp_path / "b.json")

    report = build_report(read_fleet([tmp_path]))

    assert (report.uniform, report.compared, report.alone) == (True, 0, 2)


@pytest.mark.parametrize(("args", "message"), [
    (("fleet", "report", "no/such/folder"), "error: no such file or folder: no/such/folder"),
    (("fleet", "report", "{tmp}", "--tolerance", "1.5"), "error: --tolerance 1.5 is not a fraction between 0 and 1"),
    (("fleet", "report", "{tmp}"), "error: no gpufly files found in {tmp}"),
])
def test_bad_input_is_one_error_and_a_hint(cli, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = cli(*(arg.format(tmp=tmp_path) for arg in args))

    assert done.code == 2
    lines = done.stderr.splitlines()
    assert lines[0] == message.format(tmp=tmp_path)
    assert lines[1].startswith("hint: ") and len(lines) == 2


def test_an_expected_node_without_files_is_a_finding(cli, tmp_path: Path) -> None:
    write_fleet(tmp_path, nodes=2)

    code, data = report_json(cli, tmp_path, extra=("--expect", "node01,node02 node03"))

    assert code == 1
    assert [(f["kind"], f["node"], f["message"]) for f in data["findings"]] == [
        ("node", "node03", "node03: no file from this node (its job did not run, or did not save)")]


def test_two_facts_files_for_one_node_use_the_newest_and_say_so(tmp_path: Path) -> None:
    write_fleet(tmp_path, nodes=2)
    older = dataclasses.replace(facts(driver="535.104.05"), collected_at="2026-11-01T00:00:00+00:00")
    older.save(tmp_path / "node01.old.json")

    report = build_report(read_fleet([tmp_path]))

    [finding] = report.findings
    assert finding.kind == "file" and "node01 has 2 facts files; the newest (2026-12-03T12:00:00+00:00) is used" in \
        finding.message
    assert report.nodes[0].driver == "550.54.15"


@pytest.mark.parametrize(("args", "message"), [
    (("fleet", "run"), "error: say which scheduler runs the nodes: --ray"),
    (("fleet", "run", "--ray", "--bench", "gpufly.fleet:quick_bench", "--no-bench"),
     "error: --bench and --no-bench contradict each other"),
    (("fleet", "run", "--ray", "--timeout", "0"), "error: --timeout 0 must be a positive number of seconds"),
    (("fleet", "run", "--ray", "--save", "{tmp}/a-file"), "error: --save {tmp}/a-file is not a folder"),
    (("fleet", "run", "--ray", "--bench", "gpufly.fleet:no_such_bench"), "error: gpufly.fleet has no function "
                                                                         "'no_such_bench'"),
])
def test_fleet_run_refuses_bad_options_before_reaching_a_cluster(cli, tmp_path: Path, args: tuple[str, ...],
                                                                 message: str) -> None:
    (tmp_path / "a-file").write_text("")
    done = cli(*(arg.format(tmp=tmp_path) for arg in args))

    assert done.code == 2
    assert done.stderr.splitlines()[0] == message.format(tmp=tmp_path)


def test_an_address_nobody_answers_on_is_refused_at_once() -> None:
    from gpufly.errors import GpuflyError
    from gpufly.fleet.ray_run import check_reachable

    def refused(address: tuple[str, int], timeout: float) -> None:
        assert address == ("head-node", 6379)
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(GpuflyError, match="cannot join a Ray cluster at head-node:6379: Connection refused"):
        check_reachable("head-node:6379", connect=refused)
    check_reachable("auto", connect=refused)
    check_reachable("ray://head-node:10001", connect=refused)


def test_the_command_line_defaults_are_the_librarys() -> None:
    import inspect

    from gpufly.cli import fleet as command
    from gpufly.fleet import DEFAULT_TIMEOUT_S, DEFAULT_TOLERANCE

    run_defaults = inspect.signature(command.run).parameters
    assert inspect.signature(command.report).parameters["tolerance"].default == DEFAULT_TOLERANCE
    assert (run_defaults["tolerance"].default, run_defaults["timeout"].default) == (DEFAULT_TOLERANCE,
                                                                                    DEFAULT_TIMEOUT_S)


def test_the_benchs_own_interval_decides_where_the_run_recorded_one(tmp_path: Path) -> None:
    def gpus(interval: float, noise: str | None = None):
        def change(name, node_facts, runs):
            return node_facts, [runs[0], run(1, [result("gemm.bf16", scale=0.8, interval=interval, noise=noise)])]
        return change
    write_fleet(tmp_path / "wide", change={"node02": gpus(0.3, noise="interval 60% wide after 3 attempts")})
    write_fleet(tmp_path / "narrow", change={"node02": gpus(0.02, noise="a busy neighbour")})

    wide = build_report(read_fleet([tmp_path / "wide"]))
    [narrow] = build_report(read_fleet([tmp_path / "narrow"])).findings

    assert wide.uniform  # 20% behind, but its 95% interval reaches the others' median
    assert "even its best case (612.0 TFLOP/s, the end of its 95% interval) falls short" in narrow.message
    assert narrow.reasons[-1] == "its figure is marked noisy (a busy neighbour): measure it again on an idle node"
