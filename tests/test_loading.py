"""One loader for `module:function` and `file.py:function`, as fit, profile and tune take them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.loading import load_function, split_ref


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
