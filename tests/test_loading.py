"""One loader for `module:function` and `file.py:function`, as fit, profile and tune take them; and the child
process that runs a user's function, so that no way it ends (an exit, a signal, a hang) can end gpufly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.loading import call_in_child, load_function, process_group, run_it_yourself, split_ref


def test_a_file_function_is_loaded_and_its_folder_is_importable(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    (tmp_path / "build.py").write_text("from helper import VALUE\n\ndef make():\n    return VALUE + 1\n")
    assert load_function(f"{tmp_path / 'build.py'}:make")() == 42


def test_a_module_function_is_loaded_from_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my_pkg_for_loading").mkdir()
    (tmp_path / "my_pkg_for_loading" / "__init__.py").write_text("def make():\n    return 'made'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert load_function("my_pkg_for_loading:make")() == "made"


@pytest.mark.parametrize(("ref", "files", "message", "hint"), [
    ("nocolon", {}, "not a function reference", "package.module:function"),
    ("missing.py:f", {}, "no such file: missing.py", "file.py:function"),
    ("b.py:mkae", {"b.py": "def make():\n    pass\n"}, "has no function 'mkae'", "did you mean make?"),
    ("b.py:VALUE", {"b.py": "VALUE = 1\n"}, "is not a function (type int)", None),
    ("b.py:f", {"b.py": "raise RuntimeError('boom')\n"}, "importing b.py failed: RuntimeError: boom", None),
    ("no_such_module_xyz:f", {}, "module not found: no_such_module_xyz", None),
    (".relative:f", {}, "is not an absolute module name", None),
])
def test_each_way_it_can_be_missing_is_one_error(tmp_path: Path, monkeypatch, ref: str, files: dict[str, str],
                                                  message: str, hint: str | None) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(GpuflyError) as caught:
        load_function(ref)
    assert message in caught.value.message
    if hint:
        assert hint in (caught.value.hint or "")


def test_a_syntax_error_is_raised_as_it_is_so_the_caller_can_show_the_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def f(:\n")
    with pytest.raises(SyntaxError):
        load_function(f"{tmp_path / 'bad.py'}:f")


def test_split_ref_takes_the_last_colon() -> None:
    assert split_ref("C:/models/x.py:build") == ("C:/models/x.py", "build")


def test_a_missing_optional_library_names_its_extra() -> None:
    with pytest.raises(GpuflyError) as caught:
        require("no_such_library_for_gpufly", "gpufly top")
    assert caught.value.message == "gpufly top needs no_such_library_for_gpufly, which is not installed"
    assert caught.value.hint == "pip install no_such_library_for_gpufly"


def test_a_missing_part_of_an_optional_library_names_its_extra() -> None:
    with pytest.raises(GpuflyError) as caught:
        require("textual.no_such_part", "gpufly top")
    assert caught.value.message == "gpufly top needs textual, which is not installed"
    assert caught.value.hint == "pip install 'gpufly[monitor]' (or 'gpufly[all]' for every optional part but torch)"


HOSTILE = '''
import ctypes
import os
import sys
import time

from gpufly.errors import GpuflyError


def answers(value):
    print("a print of the user's code")
    os.write(1, b"and a write to file descriptor 1\\n")
    return {"value": value}


def exits():
    sys.exit(9)


def exits_at_once():
    os._exit(5)


def interrupted():
    raise KeyboardInterrupt


def segfaults():
    ctypes.string_at(0)


def hangs():
    time.sleep(600)


def raises():
    raise ValueError("first line\\nsecond line")


def refuses():
    raise GpuflyError("a clear message", "a clear hint", exit_code=3)


def unpicklable():
    return lambda: None
'''


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch) -> str:
    """A module of functions that each leave their process a different way, importable from the current folder
    (as the child's ``python -c`` has it)."""
    (tmp_path / "hostile_for_gpufly.py").write_text(HOSTILE)
    monkeypatch.chdir(tmp_path)
    return "hostile_for_gpufly"


def test_a_child_s_answer_comes_back_and_its_prints_go_to_stderr(hostile: str, capfd) -> None:
    assert call_in_child(f"{hostile}:answers", {"value": 42}, "the test", 600, "no hint") == {"value": 42}
    captured = capfd.readouterr()
    assert "a print of the user's code" in captured.err and "descriptor 1" in captured.err
    assert captured.out == "", "stdout carries the answer alone"


@pytest.mark.parametrize(("function", "message"), [
    ("exits", "the test called sys.exit(9)"),
    ("exits_at_once", "the test ended its process with exit code 5 before it answered"),
    ("interrupted", "the test raised KeyboardInterrupt"),
    ("segfaults", "the test crashed the process it ran in (SIGSEGV)"),
    ("raises", "the test raised ValueError: first line"),
    ("unpicklable", "the test returned what cannot be sent back to gpufly: "),
])
def test_every_way_a_child_can_end_is_one_error(hostile: str, function: str, message: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        call_in_child(f"{hostile}:{function}", {}, "the test", 600, "the hint")
    assert caught.value.message.startswith(message) and caught.value.hint == "the hint"
    assert "\n" not in caught.value.message


def test_a_gpufly_error_in_the_child_is_raised_as_it_was(hostile: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        call_in_child(f"{hostile}:refuses", {}, "the test", 600, "the hint")
    assert (caught.value.message, caught.value.hint, caught.value.exit_code) == ("a clear message", "a clear hint", 3)


def test_a_child_that_hangs_is_stopped_at_the_timeout(hostile: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        call_in_child(f"{hostile}:hangs", {}, "the test", 0.5, "the hint")
    assert caught.value.message == "the test did not finish within 0.5 s, and was stopped"


def gone(pid: int, deadline_s: float = 60.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie, dead but not yet reaped) within a generous deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_leaving_a_process_group_by_an_exception_kills_all_of_it() -> None:
    """The child (a shell) and what it started (sleep) die: the kill reaches the whole group."""
    with pytest.raises(RuntimeError), process_group(["sh", "-c", "sleep 600 & echo $!; wait"],
                                                    stdout=subprocess.PIPE, text=True) as shell:
        grandchild = int(shell.stdout.readline())
        raise RuntimeError("the caller failed")
    assert gone(shell.pid) and gone(grandchild)


PARENT = """
import subprocess, sys
from gpufly.loading import process_group
with process_group(["sleep", "600"]) as child:
    print(child.pid, flush=True)
    child.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_parent_even_by_sigkill() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        assert gone(child), "the kernel killed the child when its parent died"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_the_command_to_run_a_function_yourself() -> None:
    assert run_it_yourself("pkg.models:build") == "python -c 'from pkg.models import build; build()'"
    assert run_it_yourself("a/b/m.py:make") == "cd a/b && python -c 'from m import make; make()'"
