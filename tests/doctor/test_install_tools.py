"""The chosen build written for pip, uv, pixi and conda; PyTorch's wheel variants; `gpufly install --tool`,
`--mirror` and `--for` as a user runs them; and no printed command that is deprecated or stale."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from gpufly.doctor.install import (
    TOOLS,
    PipIndex,
    Target,
    choose_jax,
    choose_sources,
    choose_tensorflow,
    choose_torch,
    for_tool,
    mirror_names,
)
from gpufly.doctor.install.tools import PipInstall, installer_facts
from gpufly.errors import GpuflyError
from tests.doctor.test_install import DRIVER_470, DRIVER_535, DRIVER_570, DRIVER_580, GTX_1080_TI, RTX_4090, RTX_5090

LINUX = Target("linux", "x86_64", "3.12.3")
OFFICIAL = "https://download.pytorch.org/whl/"
TUNA = "https://pypi.tuna.tsinghua.edu.cn/simple"
SCENARIOS = Path(__file__).parent.parent / "fixtures" / "doctor" / "scenarios"


def _facts_file(tmp_path: Path, scenario: str, **env: str) -> Path:
    facts = json.loads((SCENARIOS / f"{scenario}.json").read_text())["facts"]
    facts["env"].update(env)
    path = tmp_path / f"{scenario}.json"
    path.write_text(json.dumps(facts))
    return path


# --- parsing what the planners write --------------------------------------------------------------

def test_every_planner_command_parses_into_its_parts() -> None:
    assert PipInstall.parse(f"pip install torch==2.14.* --index-url {OFFICIAL}cu126") == \
        PipInstall(("torch==2.14.*",), f"{OFFICIAL}cu126")
    assert PipInstall.parse('pip install -U "jax[cuda12]"') == PipInstall(("jax[cuda12]",), None, upgrade=True)
    assert PipInstall.parse("pip install 'tensorflow[and-cuda]==2.17.*'") == \
        PipInstall(("tensorflow[and-cuda]==2.17.*",))
    assert PipInstall.parse("conda create -n tf python=3.9 && conda activate tf") is None
    assert PipInstall.parse("pip install --pre torch") is None


# --- each tool's form -----------------------------------------------------------------------------

def test_pip_without_a_mirror_is_the_planners_command_unchanged() -> None:
    for plan in (choose_torch([GTX_1080_TI], DRIVER_580), choose_jax([RTX_4090], DRIVER_580),
                 choose_tensorflow([RTX_4090], DRIVER_580)):
        written = for_tool(plan, "pip", target=LINUX)
        assert (written.command, written.snippet, written.tool) == (plan.command, None, "pip")


def test_uv_uses_torch_backend_and_says_which_uv_takes_it() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_580, python_version="3.12")
    written = for_tool(plan, "uv", target=LINUX)
    assert written.command == "uv pip install torch==2.14.* --torch-backend=cu126"
    assert any(w.startswith("--torch-backend=cu126 needs uv 0.7.14 or newer") and
               w.endswith(f"with an older uv: uv pip install torch==2.14.* --index-url {OFFICIAL}cu126")
               for w in written.warnings)
    newest = for_tool(choose_torch([RTX_5090], DRIVER_580), "uv", target=LINUX)
    assert newest.command == "uv pip install torch==2.14.* --torch-backend=cu132"
    assert any(w.startswith("--torch-backend=cu132 needs uv 0.11.29 or newer") for w in newest.warnings)


def test_uv_falls_back_to_the_index_for_a_build_it_has_no_backend_for() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, release="2.5", cuda="12.4")
    written = for_tool(plan, "uv", target=LINUX)
    assert written.command == f"uv pip install torch==2.5.* --index-url {OFFICIAL}cu124"
    assert not any("--torch-backend" in w for w in written.warnings)


def test_uv_project_snippet_pins_torch_to_an_explicit_index_and_the_mirror_as_default() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_580)
    written = for_tool(plan, "uv", choose_sources("tuna", None), LINUX)
    assert written.snippet_file == "pyproject.toml"
    assert written.snippet == (
        '[project]\ndependencies = ["torch==2.14.*"]\n\n[tool.uv.sources]\ntorch = [{ index = "pytorch-cu126" }]\n\n'
        f'[[tool.uv.index]]\nname = "pytorch-cu126"\nurl = "{OFFICIAL}cu126"\nexplicit = true\n\n'
        f'[[tool.uv.index]]\nname = "pypi-mirror"\nurl = "{TUNA}"\ndefault = true\n')
    assert written.command == f"uv pip install torch==2.14.* --torch-backend=cu126 --index-url {TUNA}"


def test_uv_names_an_index_set_for_pip_because_it_does_not_read_pip_config() -> None:
    sources = choose_sources(None, PipIndex(TUNA, "/home/u/.config/pip/pip.conf"))
    written = for_tool(choose_jax([RTX_4090], DRIVER_580), "uv", sources, LINUX)
    assert written.command == f"uv pip install -U 'jax[cuda13]' --index-url {TUNA}"
    assert any(w.startswith("uv does not read pip's configuration: the index set by /home/u/.config/pip/pip.conf")
               for w in written.warnings)


def test_pixi_gets_pypi_dependencies_with_the_index_and_the_mirror_in_pypi_options() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_580)
    written = for_tool(plan, "pixi", choose_sources("tuna", None), LINUX)
    assert (written.command, written.snippet_file) == ("pixi install", "pixi.toml")
    assert written.snippet == (
        '[dependencies]\npython = "3.12.*"\n\n[pypi-dependencies]\n'
        f'torch = {{ version = "==2.14.*", index = "{OFFICIAL}cu126" }}\n\n[pypi-options]\nindex-url = "{TUNA}"\n')
    tensorflow = for_tool(choose_tensorflow([RTX_4090], DRIVER_580), "pixi", target=LINUX)
    assert 'tensorflow = { version = "*", extras = ["and-cuda"] }' in tensorflow.snippet


def test_conda_gets_an_environment_file_with_the_wheel_in_its_pip_section() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_580)
    written = for_tool(plan, "conda", choose_sources("sjtu", None), LINUX)
    assert (written.command, written.snippet_file) == ("conda env create -f environment.yml", "environment.yml")
    assert written.snippet == ("name: gpufly-torch\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.12\n"
                               "  - pip\n  - pip:\n      - --index-url https://mirror.sjtu.edu.cn/pytorch-wheels/cu126\n"
                               "      - torch==2.14.*\n")


def test_the_driver_update_advice_and_the_alternatives_are_written_for_the_tool_too() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_470)
    written = for_tool(plan, "uv", choose_sources("nju", None), LINUX)
    assert written.command == "uv pip install torch==2.7.* --torch-backend=cu118"  # not on nju: PyTorch's index
    assert written.advice == ("update the NVIDIA driver to at least 525.60.13, then run: "
                              "uv pip install torch==2.14.* --index-url https://mirrors.nju.edu.cn/pytorch/whl/cu126")
    assert written.alternatives[0].command == \
        "uv pip install torch==2.14.* --index-url https://mirrors.nju.edu.cn/pytorch/whl/cu126"


def test_a_plan_without_a_command_keeps_none_and_gets_no_snippet() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_470, release="2.14")
    for tool in TOOLS:
        written = for_tool(plan, tool, choose_sources("tuna", None), LINUX)
        assert (written.command, written.snippet) == (None, None)
        expected = {"pip": "then run: pip install torch==2.14.*", "uv": "then run: uv pip install torch==2.14.*",
                    "pixi": 'then run: in pixi.toml [pypi-dependencies]: torch = { version = "==2.14.*"',
                    "conda": "then run: in the conda environment: pip install torch==2.14.*"}[tool]
        assert expected in written.advice


def test_the_windows_conda_recipe_is_left_as_it_is() -> None:
    plan = choose_tensorflow([RTX_4090], DRIVER_580, platform="windows")
    written = for_tool(plan, "uv", choose_sources("tuna", None), Target("windows", "AMD64", "3.12.1"))
    assert written.alternatives[1].command == plan.alternatives[1].command


def test_an_unknown_tool_is_refused() -> None:
    with pytest.raises(GpuflyError) as raised:
        for_tool(choose_jax([], None), "poetry")
    assert raised.value.message == "unknown tool 'poetry'" and raised.value.hint == "one of: pip, uv, pixi, conda"


# --- PyTorch's wheel variants ---------------------------------------------------------------------

def test_releases_with_wheel_variants_name_that_option() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, release="2.10", cuda="12.8")
    notes = [w for w in for_tool(plan, "pip", target=LINUX).warnings if "wheel variants" in w]
    assert len(notes) == 1
    assert "INSTALLER_DOWNLOAD_URL=https://wheelnext.astral.sh" in notes[0]
    assert "uv pip install torch==2.10.*" in notes[0] and "is not checked" in notes[0]


def test_a_windows_target_is_told_the_windows_variant_installer() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, platform="windows", release="2.10", cuda="12.8")
    notes = [w for w in for_tool(plan, "uv", target=Target("windows", "AMD64", "3.12.1")).warnings
             if "wheel variants" in w]
    assert "irm https://astral.sh/uv/install.ps1 | iex" in notes[0]


@pytest.mark.parametrize("release", ["2.9", "2.14"])
def test_releases_without_a_sourced_variant_build_do_not_mention_it(release: str) -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, release=release)
    assert not any("wheel variants" in w for w in for_tool(plan, "uv", target=LINUX).warnings)


def test_every_installer_fact_has_a_source() -> None:
    facts = installer_facts()
    assert all(row["source"].startswith("https://") for row in facts["uv_torch_backends"]["rows"])
    assert all(row["source"].startswith("https://") for row in facts["torch_wheel_variants"]["releases"])
    for section in ("conda_pip_section", "pixi_pypi", "uv_project"):
        assert facts[section]["source"].startswith("https://")


# --- never a deprecated or stale command ----------------------------------------------------------

STALE = re.compile(r"tensorflow-gpu|/cu(?:9\d|10\d|11[0-7])\b|torch_stable\.html|pip install.*\s(?:-f|--find-links)\s")
MACHINES = [
    ([GTX_1080_TI], DRIVER_580), ([RTX_5090], DRIVER_570), ([RTX_4090], DRIVER_535), ([GTX_1080_TI], DRIVER_470),
    ([RTX_4090, GTX_1080_TI], DRIVER_580), ([], None),
]


def _printed(plan) -> list[str]:
    return [text for text in (plan.command, plan.snippet, plan.advice, *(a.command for a in plan.alternatives))
            if text]


@pytest.mark.parametrize(("tool", "mirror"), list(itertools.product(TOOLS, (None, *mirror_names()))))
def test_no_printed_command_is_deprecated_or_stale(tool: str, mirror: str | None) -> None:
    sources = choose_sources(mirror, None)
    for (gpus, driver), platform in itertools.product(MACHINES, ("linux", "windows")):
        target = Target(platform, "x86_64", "3.12.1")
        for plan in (choose_torch(gpus, driver, platform), choose_tensorflow(gpus, driver, platform),
                     choose_jax(gpus, driver, platform)):
            for text in _printed(for_tool(plan, tool, sources, target)):
                assert not STALE.search(text), text


def test_the_stale_pattern_catches_what_it_is_for() -> None:
    for stale in ("pip install tensorflow-gpu", "pip install torch --index-url https://download.pytorch.org/whl/cu113",
                  "pip install torch -f https://download.pytorch.org/whl/torch_stable.html"):
        assert STALE.search(stale)
    assert not STALE.search(f"pip install torch==2.7.* --index-url {OFFICIAL}cu118")


# --- the command line -----------------------------------------------------------------------------

def test_install_for_another_machine_plans_from_its_facts_and_not_this_machines_pip_config(cli,
                                                                                           tmp_path) -> None:
    facts = _facts_file(tmp_path, "healthy_gpu")
    result = cli("install", "torch", "--for", str(facts), env={"PIP_INDEX_URL": TUNA})
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"for the machine in {facts}:"
    assert lines[1] == f"pip install torch==2.14.* --index-url {OFFICIAL}cu126"
    assert TUNA not in result.stdout


def test_install_here_honours_the_pip_index_already_set(cli, tmp_path) -> None:
    facts = _facts_file(tmp_path, "healthy_gpu")
    result = cli("install", "jax", "--tool", "uv", "--facts", str(facts), "--json",
                         env={"PIP_INDEX_URL": TUNA})
    plan = json.loads(result.stdout)["plan"]
    assert plan["command"] == f"uv pip install -U 'jax[cuda12]' --index-url {TUNA}"
    assert plan["tool"] == "uv" and plan["snippet_file"] == "pyproject.toml"


@pytest.mark.parametrize("tool", TOOLS)
def test_install_with_a_mirror_and_each_tool_prints_the_tools_form(cli, tmp_path, tool: str) -> None:
    facts = _facts_file(tmp_path, "healthy_gpu")
    result = cli("install", "torch", "--tool", tool, "--mirror", "sjtu", "--for", str(facts))
    assert result.code == 0, result.stderr
    assert "https://mirror.sjtu.edu.cn/pytorch-wheels/cu126" in result.stdout
    assert "note: torch cu126 from the sjtu PyTorch wheel mirror (--mirror sjtu)" in result.stdout


def test_install_pixi_prints_the_snippet_then_the_command(cli, tmp_path) -> None:
    result = cli("install", "tensorflow", "--tool", "pixi", "--mirror", "tencent",
                         "--for", str(_facts_file(tmp_path, "healthy_gpu")))
    lines = result.stdout.splitlines()
    assert lines[1] == "in pixi.toml:"
    assert lines[lines.index("then run:") + 1] == "pixi install"
    assert 'index-url = "https://mirrors.cloud.tencent.com/pypi/simple"' in lines


def test_install_refuses_an_unknown_mirror_in_one_line_with_the_names(cli) -> None:
    result = cli("install", "torch", "--mirror", "tsinghua-university")
    assert result.code == 2 and result.stdout == ""
    error, hint = result.stderr.splitlines()
    assert error.startswith("error: unknown mirror 'tsinghua-university'")
    assert hint.startswith("hint: gpufly knows these mirrors: tuna, aliyun, ustc, tencent, huawei, sjtu, nju")


@pytest.mark.parametrize(("args", "message"), [
    (("--tool", "poetry"), "error: unknown tool 'poetry'"),
    (("--run", "--for", "FACTS"), "error: --run installs here, but --for plans for another machine"),
    (("--run", "--tool", "uv"), "error: --run runs pip commands only, not uv's"),
    (("--for", "FACTS", "--facts", "FACTS"), "error: --facts and --for both name a facts file"),
])
def test_install_refuses_options_that_do_not_go_together(cli, tmp_path, args, message: str) -> None:
    facts = str(_facts_file(tmp_path, "healthy_gpu"))
    result = cli("install", "torch", *(facts if a == "FACTS" else a for a in args))
    assert result.code == 2
    assert result.stderr.splitlines()[0] == message
