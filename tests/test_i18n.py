"""Chinese output through gpufly's gettext catalog: every marked message translated with the same placeholders,
the compiled catalog current, the language chosen as gettext chooses it, and JSON unchanged by the language."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from gettext import GNUTranslations
from pathlib import Path

import pytest

from gpufly import i18n
from gpufly.errors import GpuflyError
from gpufly.i18n.catalog import Entry, catalog_paths, compile_mo, extract, placeholders, read_po, write_po

SCENARIOS = Path(__file__).parent / "fixtures" / "doctor" / "scenarios"
ZH_PO, ZH_MO = catalog_paths("zh", i18n.LOCALE_DIR)
CJK = range(0x4E00, 0xA000)


@pytest.fixture(autouse=True)
def _english_after_each_test(monkeypatch) -> Iterator[None]:
    """The language is process-wide: leave it English for whatever test runs next in this process, and let each
    test here choose the locale it describes."""
    for variable in ("GPUFLY_LANG", *i18n.LOCALE_VARIABLES):
        monkeypatch.delenv(variable, raising=False)
    yield
    i18n.use_language("en")


def _chinese(text: str) -> bool:
    return any(ord(char) in CJK for char in text)


def _zh_catalog() -> dict[str, Entry]:
    return {entry.msgid: entry for entry in read_po(ZH_PO.read_text(encoding="utf-8"), ZH_PO.name) if entry.msgid}


def test_every_marked_message_has_a_chinese_translation_with_the_same_placeholders() -> None:
    catalog = _zh_catalog()
    messages = extract()
    assert len(messages) > 200
    missing = [m.msgid for m in messages if m.msgid not in catalog or not all(catalog[m.msgid].msgstr)]
    assert missing == [], "run python scripts/build_catalog.py --update and translate these"
    mismatched = [(m.msgid, text) for m in messages for text in catalog[m.msgid].msgstr
                  if placeholders(text) != placeholders(m.msgid) | placeholders(m.plural or "")]
    assert mismatched == []


def test_the_catalog_holds_no_message_the_code_no_longer_has() -> None:
    assert set(_zh_catalog()) == {m.msgid for m in extract()}


def test_the_shipped_mo_is_the_compiled_po() -> None:
    assert ZH_MO.read_bytes() == compile_mo(read_po(ZH_PO.read_text(encoding="utf-8")))


def test_the_translations_use_the_words_chinese_ai_developers_use() -> None:
    catalog = _zh_catalog()
    assert "显存" in catalog["VRAM"].msgstr[0]
    assert "算力" in catalog["dense 16-bit"].msgstr[0]
    assert "驱动" in catalog["NVIDIA driver"].msgstr[0]
    fp16 = catalog["FP16 runs at a small fraction of FP32 and there are no tensor cores: mixed precision (AMP) slows "
                   "it down"].msgstr[0]
    assert "张量核心" in fp16 and "混合精度" in fp16


def test_a_compiled_catalog_is_read_by_pythons_gettext_with_plurals() -> None:
    entries = [Entry("", None, ["Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=1; plural=0;\n"]),
               Entry("driver", None, ["驱动"]), Entry("{count} GPU", "{count} GPUs", ["{count} 块 GPU"]),
               Entry("left in English", None, [""])]
    catalog = GNUTranslations(io.BytesIO(compile_mo(entries)))
    assert catalog.gettext("driver") == "驱动"
    assert catalog.ngettext("{count} GPU", "{count} GPUs", 3).format(count=3) == "3 块 GPU"
    assert catalog.gettext("left in English") == "left in English"


def test_a_po_file_reads_back_what_was_written() -> None:
    entries = [Entry("", None, ["Language: zh\n"]), Entry('say "hi"\tthen\\n', None, ['说 "你好"\t然后'], ("a.py:1",)),
               Entry("{count} GPU", "{count} GPUs", ["{count} 块 GPU"], ("b.py:2", "b.py:9"))]
    assert read_po(write_po(entries)) == entries


def test_a_broken_po_line_is_one_error_naming_the_line() -> None:
    with pytest.raises(GpuflyError, match=r"zh.po:2: cannot read"):
        read_po('msgid "a"\nmsgstr: "b"\n', "zh.po")


@pytest.mark.parametrize(("option", "environ", "language"), [
    ("zh", {"LANG": "en_US.UTF-8"}, "zh"),
    ("en", {"GPUFLY_LANG": "zh"}, "en"),
    (None, {"GPUFLY_LANG": "zh_CN", "LANG": "en_US.UTF-8"}, "zh"),
    (None, {"LANG": "zh_CN.UTF-8"}, "zh"),
    (None, {"LANG": "zh_TW.UTF-8"}, "zh"),
    (None, {"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
    (None, {"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
    (None, {"LANGUAGE": "fr:zh_CN", "LC_ALL": "en_US.UTF-8"}, "zh"),
    (None, {"LANGUAGE": "", "LANG": "zh_CN.UTF-8"}, "zh"),
    (None, {"LANG": "C"}, "en"),
    (None, {"LANG": "fr_FR.UTF-8"}, "en"),
    (None, {}, "en"),
])
def test_the_language_is_chosen_as_gettext_chooses_it(option, environ, language) -> None:
    assert i18n.chosen_language(option, environ) == language


@pytest.mark.parametrize(("option", "environ", "where"), [("fr", {}, "--lang"), (None, {"GPUFLY_LANG": "klingon"},
                                                                                  "GPUFLY_LANG")])
def test_a_language_gpufly_does_not_speak_is_an_error_when_asked_for_by_name(option, environ, where) -> None:
    with pytest.raises(GpuflyError, match=where) as raised:
        i18n.chosen_language(option, environ)
    assert raised.value.hint == i18n.LANG_HINT


def _facts(tmp_path: Path, scenario: str) -> str:
    path = tmp_path / f"{scenario}.json"
    path.write_text(json.dumps(json.loads((SCENARIOS / f"{scenario}.json").read_text())["facts"]))
    return str(path)


def test_doctor_speaks_chinese_with_lang_zh_and_keeps_commands_as_they_are(cli, tmp_path) -> None:
    result = cli("doctor", "--facts", _facts(tmp_path, "mixed_gpus"), "--lang", "zh")
    assert result.code == 0, result.stderr
    assert "检查结果" in result.stdout and "修复方法" in result.stdout
    assert "没有一个 torch 版本同时带有这里所有 GPU 的原生代码" in result.stdout
    assert "CUDA_VISIBLE_DEVICES=1" in result.stdout
    assert "--index-url https://download.pytorch.org/whl/" in result.stdout
    assert "no torch build" not in result.stdout


def test_doctor_json_is_the_same_in_every_language(cli, tmp_path) -> None:
    facts = _facts(tmp_path, "driver_too_old")
    english = cli("doctor", "--facts", facts, "--json", "--lang", "en")
    chinese = cli("doctor", "--facts", facts, "--json", "--lang", "zh")
    from_locale = cli("doctor", "--facts", facts, "--json", env={"LANG": "zh_CN.UTF-8"})
    assert english.code == chinese.code == from_locale.code == 1
    assert english.stdout == chinese.stdout == from_locale.stdout
    assert not _chinese(chinese.stdout)


def test_a_chinese_locale_switches_doctor_to_chinese_and_gpufly_lang_overrides_it(cli, tmp_path) -> None:
    facts = _facts(tmp_path, "driver_too_old")
    chinese = cli("doctor", "--facts", facts, env={"LANG": "zh_CN.UTF-8"})
    assert chinese.code == 1 and "失败" in chinese.stdout and "驱动" in chinese.stdout
    english = cli("doctor", "--facts", facts, env={"LANG": "zh_CN.UTF-8", "GPUFLY_LANG": "en"})
    assert english.code == 1 and not _chinese(english.stdout) and "failed" in english.stdout


def test_a_missing_catalog_falls_back_to_english_without_an_error(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path / "no-locale")
    result = cli("doctor", "--facts", _facts(tmp_path, "mixed_gpus"), "--lang", "zh")
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    assert "no torch build has native code for every GPU here" in result.stdout and not _chinese(result.stdout)


def test_an_unknown_lang_is_one_error_and_one_hint(cli, tmp_path) -> None:
    result = cli("doctor", "--facts", _facts(tmp_path, "healthy_gpu"), "--lang", "fr")
    assert result.code == 2
    assert result.stderr.splitlines() == ["error: --lang 'fr' is not a language gpufly speaks",
                                          f"hint: {i18n.LANG_HINT}"]


def test_install_speaks_chinese_and_keeps_the_command(cli, tmp_path) -> None:
    facts = _facts(tmp_path, "driver_too_old")
    chinese = cli("install", "torch", "--facts", facts, "--lang", "zh")
    english = cli("install", "torch", "--facts", facts)
    assert chinese.code == english.code == 0, chinese.stderr
    assert "驱动" in chinese.stdout
    assert chinese.stdout.splitlines()[0] == english.stdout.splitlines()[0]
    assert cli("install", "torch", "--facts", facts, "--json", "--lang", "zh").stdout == cli(
        "install", "torch", "--facts", facts, "--json").stdout


def test_report_speaks_chinese_and_its_json_stays_english(cli) -> None:
    text = cli("report", "--lang", "zh")
    assert text.code == 0, text.stderr
    for heading in ("本机", "环境配置", "实测性能", "下一步做什么"):
        assert heading in text.stdout
    data = json.loads(cli("report", "--json", "--lang", "zh").stdout)
    assert not _chinese(json.dumps(data["setup"], ensure_ascii=False))


def _commands(text: str) -> set[str]:
    """The commands in an install plan's output: what a user copies, whatever the language around them."""
    return set(re.findall(r"(?:uv )?pip install(?: [\x21-\x2b\x2d-\x3a\x3c-\x7e]+)+", text))


def test_install_for_uv_writes_the_same_commands_in_chinese_sentences(cli, tmp_path) -> None:
    """A translated sentence's punctuation (Chinese semicolons and commas) must not be taken into the command
    rewritten for uv, nor an English sentence's ", run with ..." (both read as the same commands)."""
    facts = _facts(tmp_path, "mixed_gpus")
    chinese = cli("install", "torch", "--facts", facts, "--tool", "uv", "--mirror", "sjtu", "--lang", "zh")
    english = cli("install", "torch", "--facts", facts, "--tool", "uv", "--mirror", "sjtu")
    assert chinese.code == english.code == 0, chinese.stderr
    assert _commands(chinese.stdout) == _commands(english.stdout)
    mirror = "https://mirror.sjtu.edu.cn/pytorch-wheels"
    assert f"uv pip install torch==2.14.* --index-url {mirror}/cu126, run with" in english.stdout
    assert _commands(english.stdout) == {f"uv pip install torch==2.14.* --index-url {mirror}/{build}"
                                         for build in ("cu126", "cu130", "cu132")} | {
        f"uv pip install torch==2.5.* --index-url {mirror}/cu124"}


def test_the_data_tables_sentences_are_translated_where_they_are_shown(cli, tmp_path) -> None:
    """flash-attn built for another torch: the explanation and the fix's note from gpufly's extension table read
    in Chinese, the commands stay as they are."""
    from tests.doctor.test_extensions import scenario

    facts, extensions, _expect = scenario(SCENARIOS.parent / "extensions" /
                                          "flash_attn_undefined_symbol_after_torch_upgrade.json")
    path = tmp_path / "flash.json"
    path.write_text(json.dumps(replace(facts, extensions=tuple(extensions)).to_dict()))
    result = cli("doctor", "--facts", str(path), "--lang", "zh")
    assert result.code == 1, result.stderr
    assert "它的编译代码是针对另一个 torch 编译的" in result.stdout
    assert "加上 --no-build-isolation 后" in result.stdout
    assert "pip install --no-cache-dir --no-build-isolation flash-attn==2.5.8" in result.stdout
    assert "_ZN3c104cuda9SetDeviceEi" in result.stdout


def test_an_empty_message_stays_empty_in_every_language() -> None:
    i18n.use_language("zh")
    assert i18n.gettext("") == ""
    assert i18n.active_language() == "zh"


def test_fit_speaks_chinese_with_lang_zh_and_keeps_names_flags_and_numbers(cli) -> None:
    chinese = cli("fit", "llama-3.1-8b", "--gpu", "4090", "--lang", "zh")
    english = cli("fit", "llama-3.1-8b", "--gpu", "4090")
    assert chinese.code == english.code == 0, chinese.stderr
    assert "RTX 4090 放得下" in chinese.stdout and "每块 GPU 还剩 6.8 GiB 显存" in chinese.stdout
    for words in ("每块 GPU 的显存占用", "权重", "KV 缓存", "上下文长度 4,096", "--quant int4", "17.19"):
        assert words in chinese.stdout
    assert "fits on" not in chinese.stdout and "Memory per GPU" not in chinese.stdout
    assert "fits on RTX 4090, with 6.8 GiB free per GPU" in english.stdout and not _chinese(english.stdout)


def test_fit_json_is_the_same_in_every_language(cli) -> None:
    english = cli("fit", "qwen2.5-7b", "--gpu", "4090", "--task", "qlora", "--json")
    chinese = cli("fit", "qwen2.5-7b", "--gpu", "4090", "--task", "qlora", "--json", "--lang", "zh")
    assert english.code == chinese.code == 0, chinese.stderr
    assert english.stdout == chinese.stdout and not _chinese(chinese.stdout)


def test_fit_that_does_not_fit_says_so_in_chinese_with_the_changes_that_would(cli) -> None:
    result = cli("fit", "llama-3.1-70b", "--gpu", "4090", "--lang", "zh")
    assert result.code == 1, result.stderr
    assert "RTX 4090 放不下" in result.stdout and "每块 GPU 还差" in result.stdout
    assert "假如放得下的速度" in result.stdout


def test_a_chinese_locale_switches_recommend_to_chinese_and_gpufly_lang_overrides_it(cli) -> None:
    args = ("recommend", "qwen2.5-7b", "--task", "qlora", "--top", "5")
    chinese = cli(*args, env={"LANG": "zh_CN.UTF-8"})
    assert chinese.code == 0, chinese.stderr
    assert "QLoRA 微调" in chinese.stdout and "按速度排序" in chinese.stdout
    assert "梯度检查点" in chinese.stdout
    english = cli(*args, env={"LANG": "zh_CN.UTF-8", "GPUFLY_LANG": "en"})
    assert english.code == 0 and "Best GPUs, by speed" in english.stdout and not _chinese(english.stdout)
    assert cli(*args, "--json", env={"LANG": "zh_CN.UTF-8"}).stdout == cli(*args, "--json").stdout


def test_models_lists_the_presets_in_chinese(cli) -> None:
    result = cli("models", "--lang", "zh")
    assert result.code == 0, result.stderr
    assert "个预置模型" in result.stdout and "llama-3.1-8b" in result.stdout


def test_an_unknown_lang_for_fit_is_one_error_and_one_hint(cli) -> None:
    result = cli("fit", "llama-3.1-8b", "--gpu", "4090", "--lang", "fr")
    assert result.code == 2
    assert result.stderr.splitlines() == ["error: --lang 'fr' is not a language gpufly speaks",
                                          f"hint: {i18n.LANG_HINT}"]


def test_every_module_that_marks_messages_is_in_the_catalog() -> None:
    """A module that imports the translation functions but is missing from MARKED_MODULES would print English to a
    Chinese reader, and the catalog test above would not see its messages."""
    from gpufly.i18n.catalog import MARKED_MODULES, SOURCE_ROOT

    marking = {path.relative_to(SOURCE_ROOT).as_posix() for path in SOURCE_ROOT.rglob("*.py")
               if re.search(r"^from gpufly\.i18n import .*\bgettext as _", path.read_text(encoding="utf-8"), re.M)}
    assert marking - set(MARKED_MODULES) == set()
