"""`gpufly doctor` and `gpufly install` as a user runs them: narrow terminals, broken installs, --run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).parent.parent / "fixtures" / "doctor" / "scenarios"


def _facts_file(tmp_path: Path, scenario: str) -> Path:
    path = tmp_path / f"{scenario}.json"
    path.write_text(json.dumps(json.loads((SCENARIOS / f"{scenario}.json").read_text())["facts"]))
    return path


def _crashing_torch(root: Path) -> Path:
    """A torch package whose import aborts the interpreter, with a readable version.py beside it."""
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import os\nos.abort()\n")
    (package / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\n")
    return root


def test_doctor_imports_torch_even_without_a_gpu_and_reports_the_crash(cli, tmp_path) -> None:
    """This machine, probed for real (a torch that aborts keeps it quick); --save carries the bug-report facts."""
    fake = _crashing_torch(tmp_path / "fake")
    saved = tmp_path / "facts.json"
    result = cli("doctor", "--json", "--save", str(saved), env={"PYTHONPATH": str(fake)})
    assert result.code == 1, result.stderr
    data = json.loads(result.stdout)
    torch = next(f for f in data["facts"]["frameworks"] if f["name"] == "torch")
    assert torch["installed"] and torch["import_error"].startswith("crashed with SIGABRT while importing torch")
    failed = [f for f in data["findings"] if f["status"] == "fail"]
    assert [f["check"] for f in failed] == ["torch_import"]
    assert data["facts"]["gpus"] == []
    system = json.loads(saved.read_text())["system"]
    assert system == data["facts"]["system"] and system["os"] and system["cpu"]["model"]


def test_report_stays_fast_and_says_it_did_not_import(cli, tmp_path) -> None:
    fake = _crashing_torch(tmp_path / "fake")
    result = cli("report", env={"PYTHONPATH": str(fake)})
    assert result.code == 0, result.stderr
    assert "frameworks read from installed files; `gpufly doctor` imports them" in result.stdout


def test_fix_commands_are_whole_at_80_columns(cli, tmp_path) -> None:
    path = _facts_file(tmp_path, "driver_too_old")
    result = cli("doctor", "--facts", str(path), env={"COLUMNS": "80"})
    assert result.code == 1
    command = "pip install torch==2.7.* --index-url https://download.pytorch.org/whl/cu118"
    assert any(command in line for line in result.stdout.splitlines()), result.stdout
    assert "…" not in result.stdout
    assert "update the NVIDIA driver to at least 525.60.13, then run: pip install torch==2.14.* --index-url " \
           "https://download.pytorch.org/whl/cu126" in result.stdout


def test_deep_with_saved_facts_says_the_smoke_test_is_skipped(cli, tmp_path) -> None:
    result = cli("doctor", "--deep", "--facts", str(_facts_file(tmp_path, "healthy_gpu")))
    assert result.code == 0
    assert "note: --deep skipped: the smoke test runs on this machine's GPUs, not on saved facts" in result.stderr


@pytest.mark.parametrize("framework, cuda, message", [
    ("jax", "99.1", "error: JAX has no wheels for CUDA 99.1"),
    ("tensorflow", "12.6", "error: no TensorFlow release in gpufly's table is built with CUDA 12.6"),
    ("torch", "abc", "error: cannot read --cuda 'abc'"),
])
def test_install_refuses_a_cuda_it_cannot_honour(cli, tmp_path, framework: str, cuda: str, message: str) -> None:
    result = cli("install", framework, "--cuda", cuda, "--facts", str(_facts_file(tmp_path, "healthy_gpu")))
    assert result.code == 2 and "Traceback" not in result.stderr
    first, second = result.stderr.splitlines()
    assert first == message and second.startswith("hint: ")


def test_install_jax_honours_cuda(cli, tmp_path) -> None:
    facts = str(_facts_file(tmp_path, "healthy_gpu"))
    assert cli("install", "jax", "--cuda", "12.6", "--facts", facts).stdout.splitlines()[0] == \
        'pip install -U "jax[cuda12]"'
    asked = cli("install", "jax", "--cuda", "13.0", "--facts", facts, "--json")
    plan = json.loads(asked.stdout)["plan"]
    assert (plan["command"], plan["needs_driver"]) == ("pip install -U jax", "580")


def _fake_pip(root: Path) -> Path:
    """A `pip` package that `python -m pip` finds first on PYTHONPATH: it records its arguments and exits
    with $FAKE_PIP_EXIT, installing nothing."""
    package = root / "pip"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import json, os, sys\n"
        "with open(os.environ['FAKE_PIP_LOG'], 'w') as log:\n"
        "    json.dump(sys.argv[1:], log)\n"
        "print('fake pip ran')\n"
        "sys.exit(int(os.environ.get('FAKE_PIP_EXIT', '0')))\n")
    return root


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax"])
def test_install_run_runs_the_printed_command(cli, capfd, tmp_path, framework: str) -> None:
    """pip runs as a child of gpufly's process, writing to the terminal itself (capfd reads it there)."""
    log = tmp_path / "pip_args.json"
    env = {"PYTHONPATH": str(_fake_pip(tmp_path / "fake")), "FAKE_PIP_LOG": str(log)}
    result = cli("install", framework, "--run", "--facts", str(_facts_file(tmp_path, "healthy_gpu")), env=env)
    assert result.code == 0, result.stderr
    printed = result.stdout.splitlines()[0]
    assert printed.startswith("pip install ")
    assert ["pip", *json.loads(log.read_text())] == shlex.split(printed)
    assert capfd.readouterr().out == "fake pip ran\n"


def test_install_run_that_fails_exits_non_zero_with_one_clear_line(cli, tmp_path) -> None:
    log = tmp_path / "pip_args.json"
    env = {"PYTHONPATH": str(_fake_pip(tmp_path / "fake")), "FAKE_PIP_LOG": str(log), "FAKE_PIP_EXIT": "3"}
    result = cli("install", "torch", "--run", "--facts", str(_facts_file(tmp_path, "healthy_gpu")), env=env)
    printed = result.stdout.splitlines()[0]
    assert result.code == 1 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: `{printed}` failed: pip exited with 3"]
    assert log.exists()


def test_install_run_without_a_command_runs_nothing(cli, tmp_path) -> None:
    """An RTX 5090 on driver 470: no torch build runs until the driver is updated, so pip never starts."""
    log = tmp_path / "pip_args.json"
    env = {"PYTHONPATH": str(_fake_pip(tmp_path / "fake")), "FAKE_PIP_LOG": str(log)}
    data = json.loads(_facts_file(tmp_path, "new_gpu_old_wheel").read_text())
    data["driver"].update(version="470.82.01", cuda_version="11.4")
    path = tmp_path / "rtx5090_r470.json"
    path.write_text(json.dumps(data))
    result = cli("install", "torch", "--run", "--facts", str(path), env=env)
    assert result.code == 1 and not log.exists()
    assert result.stderr.splitlines() == [
        "error: nothing to run: no build works with this driver",
        "hint: update the NVIDIA driver to at least 580, then run: pip install torch==2.14.* --index-url "
        "https://download.pytorch.org/whl/cu132"]


def test_save_writes_the_facts_it_diagnosed(cli, tmp_path) -> None:
    source = _facts_file(tmp_path, "minor_compat_sass")
    saved = tmp_path / "saved.json"
    result = cli("doctor", "--facts", str(source), "--save", str(saved))
    assert result.code == 0, result.stderr
    assert f"facts written to {saved}" in result.stdout
    written = json.loads(saved.read_text())
    expected = {"schema_version": 2, "extensions": [], **json.loads(source.read_text())}
    for gpu in expected["gpus"]:
        gpu.setdefault("ecc_enabled", None)
    assert written == expected
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temporary file left behind"


def test_a_version_1_facts_file_is_read_and_saved_as_version_2(cli, tmp_path) -> None:
    source = _facts_file(tmp_path, "healthy_gpu")
    saved = tmp_path / "saved.json"
    assert cli("doctor", "--facts", str(source), "--save", str(saved)).code == 0
    written = json.loads(saved.read_text())
    assert written["schema_version"] == 2 and written["system"]["cpu"] == {"model": None, "logical_cores": None,
                                                                             "flags": []}


def test_doctor_shows_the_facts_a_bug_report_needs(cli, tmp_path) -> None:
    path = str(_facts_file(tmp_path, "minor_compat_sass"))
    text = cli("doctor", "--facts", path, env={"COLUMNS": "100"}).stdout
    machine = text[text.index("machine:"):].splitlines()
    assert machine == [
        "machine:",
        "  OS        Ubuntu 24.04.3 LTS, kernel 6.8.0-85-generic, glibc 2.39",
        "  compiler  GCC 13.3.0",
        "  CPU       AMD Ryzen 9 7950X 16-Core Processor, 32 logical cores; AVX2 yes, AVX-512 yes (avx512f "
        "avx512bw avx512_vnni avx512_bf16), AMX no",
        "  Python    3.11.7 linux x86_64",
        "  driver    580.82.07 (CUDA 13.0)",
        "  torch     2.14.0+cu132: CUDA runtime 13.2 (in the wheel), cuDNN 9.13.0 and NCCL 2.28.3 loaded",
        "  toolkit   nvcc 12.4 on the system (used to build extensions, not by the wheels)",
    ]
    facts = json.loads(cli("doctor", "--facts", path, "--json").stdout)["facts"]
    assert facts["system"]["cpu"]["flags"][:2] == ["avx", "avx2"] and facts["system"]["libc"] == "glibc 2.39"
    torch = facts["frameworks"][0]
    assert (torch["cuda_version"], torch["cudnn_version"], torch["nccl_version"]) == ("13.2", "9.13.0", "2.28.3")
    assert facts["toolkit"]["nvcc_version"] == "12.4"


def test_import_timeout_must_be_positive(cli) -> None:
    result = cli("doctor", "--import-timeout", "0")
    assert result.code == 2
    assert result.stderr.splitlines()[0] == "error: --import-timeout must be a positive number of seconds, got 0"


@pytest.mark.parametrize("target, message", [
    ("/dev/full", "cannot write /dev/full: it is not a regular file (a device, pipe or socket)"),
    ("{tmp}", "cannot write {tmp}: it is a folder"),
    ("{tmp}/missing/facts.json", "cannot write {tmp}/missing/facts.json: No such file or directory"),
], ids=["a device node", "a folder", "a missing folder"])
def test_save_refuses_what_it_cannot_write_whole(cli, tmp_path, target: str, message: str) -> None:
    """A device node such as /dev/full is refused, not replaced by a file: one error line, exit code 2."""
    if target == "/dev/full" and not Path(target).exists():
        pytest.skip("/dev/full is not on this system")
    target, message = target.format(tmp=tmp_path), message.format(tmp=tmp_path)
    result = cli("doctor", "--facts", str(_facts_file(tmp_path, "healthy_gpu")), "--save", target)
    assert result.code == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"error: {message}",
                                          "hint: save to a file in a folder you can write, e.g. --save facts.json"]
