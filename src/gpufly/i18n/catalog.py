"""The message catalog's sources: the marked messages found in gpufly's code, gettext's ``.po`` files, and the
compiled ``.mo`` files Python's ``gettext`` reads. ``scripts/build_catalog.py`` runs these; the tests check with
them that every marked message has a translation.

Pure Python (no GNU gettext tools, no Babel): extraction walks each module's AST for ``_("...")`` and
``ngettext("...", "...", n)`` with literal strings, as xgettext does for Python, and reads the sentences of the
data tables that reach the output (DATA_MESSAGES).
"""

from __future__ import annotations

import ast
import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Formatter
from typing import Any

from gpufly.errors import GpuflyError

SOURCE_ROOT = Path(__file__).parent.parent
MARKED_MODULES = (
    "catalog/lookup.py", "cli/advise.py", "cli/bench.py", "cli/doctor.py", "cli/install.py", "cli/report.py",
    "doctor/checks.py", "doctor/extensions.py", "doctor/facts.py",
    "doctor/install/jax.py", "doctor/install/plan.py", "doctor/install/tensorflow.py", "doctor/install/tools.py",
    "doctor/install/torch.py",
    "estimate/advise.py", "estimate/checks.py", "estimate/comms.py", "estimate/job.py", "estimate/memory.py",
    "estimate/parallel.py", "estimate/ranges.py", "estimate/speed.py",
    "profile/attach.py", "profile/render.py",
    "report/actions.py", "report/machine.py", "report/peers.py", "report/reaches.py", "report/receipts.py",
    "report/setup.py",
    "cli/tune.py", "tune/render.py", "tune/verdict.py", "tune/workload.py",
)
"""The modules whose text output is translated (paths under gpufly/); a new one is added here and to the catalog
with ``scripts/build_catalog.py --update``."""
MSGSTR = re.compile(r"msgstr(?:\[(?P<index>\d+)\])? ")
"""A translation line's keyword: msgstr, or msgstr[N] for the Nth plural form."""
DATA_MESSAGES = (
    ("doctor/data/cuda_drivers.json", "minor_version_compatibility.caveat"),
    ("doctor/data/extensions.json", "packages.*.fix_note"),
    ("doctor/data/extensions.json", "packages.*.fix_unpaired"),
    ("doctor/data/extensions.json", "packages.*.kernels_missing"),
    ("doctor/data/extensions.json", "packages.*.gpu_rules.*.why"),
    ("doctor/data/extensions.json", "packages.*.gpu_rules.*.fix"),
    ("doctor/data/extensions.json", "import_messages.*.why"),
    ("doctor/data/jax.json", "warnings.*.text"),
    ("doctor/data/mirrors.json", "mirrors.*.pytorch.note"),
    ("doctor/data/tensorflow.json", "removed_packages.*.note"),
    ("doctor/data/torch_wheels.json", "releases.*.variants.*.note"),
)
"""The sentences of gpufly's data tables that reach text output (each passed through ``_()`` where it is used), as
(file under gpufly/, dotted path with ``*`` for every item of a list)."""
PLURAL_FORMS = {"zh": "nplurals=1; plural=0;"}
"""gettext's plural rule per language: Chinese has one form for every count."""


@dataclass(frozen=True)
class Message:
    """One marked message: its English text (and plural, for ngettext) and where it was found."""

    msgid: str
    plural: str | None = None
    places: tuple[str, ...] = ()


@dataclass
class Entry:
    """A ``.po`` entry: the English text and its translation (``msgstr`` for each plural form)."""

    msgid: str
    plural: str | None = None
    msgstr: list[str] = field(default_factory=lambda: [""])
    places: tuple[str, ...] = ()


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def messages_in(path: Path, relative: str) -> Iterator[Message]:
    """The ``_()`` and ``ngettext()`` calls with literal messages in one module, in the order they appear."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)),
                   key=lambda node: (node.lineno, node.col_offset))
    for node in calls:
        if not isinstance(node.func, ast.Name) or not node.args:
            continue
        place = (f"{relative}:{node.lineno}",)
        if node.func.id == "_" and (text := _literal(node.args[0])) is not None:
            yield Message(text, None, place)
        elif node.func.id == "ngettext" and len(node.args) >= 2:
            singular, plural = _literal(node.args[0]), _literal(node.args[1])
            if singular is not None and plural is not None:
                yield Message(singular, plural, place)


def _walk(node: Any, parts: list[str], where: str) -> Iterator[tuple[str, str]]:
    """The strings at a dotted path in parsed JSON, each with its own path ("packages.3.fix_note")."""
    if not parts:
        if isinstance(node, str) and node:
            yield node, where
        return
    head, rest = parts[0], parts[1:]
    if head == "*" and isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(item, rest, f"{where}.{index}")
    elif isinstance(node, dict) and node.get(head) is not None:
        yield from _walk(node[head], rest, f"{where}.{head}" if where else head)


def data_messages(fields: Iterable[tuple[str, str]] = DATA_MESSAGES, root: Path = SOURCE_ROOT) -> Iterator[Message]:
    """The data tables' sentences named by ``fields``."""
    for relative, path in fields:
        data = json.loads((root / relative).read_text(encoding="utf-8"))
        for text, where in _walk(data, path.split("."), ""):
            yield Message(text, None, (f"{relative}:{where}",))


def extract(modules: Iterable[str] = MARKED_MODULES, fields: Iterable[tuple[str, str]] = DATA_MESSAGES,
            root: Path = SOURCE_ROOT) -> list[Message]:
    """Every marked message of ``modules`` and every sentence of the data ``fields``, once each (with all its
    places), in the order first found."""
    found: dict[str, Message] = {}
    sources = [message for relative in modules for message in messages_in(root / relative, relative)]
    for message in [*sources, *data_messages(fields, root)]:
            seen = found.get(message.msgid)
            found[message.msgid] = message if seen is None else Message(
                seen.msgid, seen.plural or message.plural, seen.places + message.places)
    return list(found.values())


def placeholders(text: str) -> set[str]:
    """The named fields of a format string (``{count}``, ``{gpu.name}`` as ``gpu``); an unbalanced brace raises."""
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in Formatter().parse(text) if name is not None}


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n")
    return f'"{escaped}"'


def _unquote(token: str, where: str) -> str:
    if len(token) < 2 or not token.startswith('"') or not token.endswith('"'):
        raise GpuflyError(f"{where}: expected a quoted string, got {token[:40]!r}")
    try:
        return str(ast.literal_eval(token))
    except (SyntaxError, ValueError) as exc:
        raise GpuflyError(f"{where}: cannot read the string {token[:40]!r}") from exc


def read_po(text: str, name: str = "catalog.po") -> list[Entry]:
    """The entries of a ``.po`` file (the header included, as the entry with an empty msgid)."""
    entries: list[Entry] = []
    current: Entry | None = None
    key: tuple[str, int] | None = None
    places: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{name}:{number}"
        if not line:
            continue
        if line.startswith("#:"):
            places.extend(line[2:].split())
        elif line.startswith("#"):
            continue
        elif line.startswith("msgid_plural "):
            if current is None:
                raise GpuflyError(f"{where}: msgid_plural before msgid")
            current.plural, key = _unquote(line[13:], where), ("plural", 0)
        elif line.startswith("msgid "):
            current = Entry(_unquote(line[6:], where), places=tuple(places))
            entries.append(current)
            places, key = [], ("msgid", 0)
        elif keyword := MSGSTR.match(line):
            if current is None:
                raise GpuflyError(f"{where}: msgstr before msgid")
            index, value = int(keyword["index"] or 0), line[keyword.end():]
            while len(current.msgstr) <= index:
                current.msgstr.append("")
            current.msgstr[index], key = _unquote(value, where), ("msgstr", index)
        elif line.startswith('"') and current is not None and key is not None:
            _continue(current, key, _unquote(line, where))
        else:
            raise GpuflyError(f"{where}: cannot read {line[:40]!r}")
    return entries


def _continue(entry: Entry, key: tuple[str, int], more: str) -> None:
    kind, index = key
    if kind == "msgid":
        entry.msgid += more
    elif kind == "plural":
        entry.plural = (entry.plural or "") + more
    else:
        entry.msgstr[index] += more


def write_po(entries: Iterable[Entry]) -> str:
    """The ``.po`` text of ``entries`` (the header first), one string per line as gettext's tools write it."""
    blocks = []
    for entry in entries:
        lines = [f"#: {' '.join(entry.places)}"] if entry.places else []
        if not entry.msgid:
            lines += ['msgid ""', 'msgstr ""', *(_quote(line) for line in entry.msgstr[0].splitlines(keepends=True))]
        elif entry.plural is not None:
            lines += [f"msgid {_quote(entry.msgid)}", f"msgid_plural {_quote(entry.plural)}"]
            lines += [f"msgstr[{i}] {_quote(text)}" for i, text in enumerate(entry.msgstr)]
        else:
            lines += [f"msgid {_quote(entry.msgid)}", f"msgstr {_quote(entry.msgstr[0])}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def header(language: str) -> Entry:
    """The header entry gettext reads the charset and plural rule from."""
    text = (f"Project-Id-Version: gpufly\nLanguage: {language}\nMIME-Version: 1.0\n"
            f"Content-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n"
            f"Plural-Forms: {PLURAL_FORMS.get(language, 'nplurals=2; plural=(n != 1);')}\n")
    return Entry("", None, [text])


def merge(messages: Iterable[Message], old: Iterable[Entry], language: str) -> list[Entry]:
    """The catalog for ``messages``: each keeps the translation it had; new ones come untranslated; messages no
    longer in the code are dropped (they would only mislead a translator)."""
    known = {entry.msgid: entry for entry in old if entry.msgid}
    forms = 1 if language in PLURAL_FORMS else 2
    merged = [header(language)]
    for message in messages:
        before = known.get(message.msgid)
        msgstr = before.msgstr if before is not None else [""] * (forms if message.plural else 1)
        merged.append(Entry(message.msgid, message.plural, list(msgstr), message.places))
    return merged


def compile_mo(entries: Iterable[Entry]) -> bytes:
    """The ``.mo`` bytes of ``entries`` (GNU gettext's format, as msgfmt writes it): untranslated entries are left
    out, so gettext answers them in English."""
    pairs: dict[bytes, bytes] = {}
    for entry in entries:
        if entry.msgid and not all(entry.msgstr):
            continue
        original = entry.msgid if entry.plural is None else f"{entry.msgid}\0{entry.plural}"
        pairs[original.encode("utf-8")] = "\0".join(entry.msgstr).encode("utf-8")
    keys = sorted(pairs)
    count = len(keys)
    ids_start = 7 * 4
    strs_start = ids_start + 8 * count
    data_start = strs_start + 8 * count
    id_table, str_table, blob = [], [], b""
    for key in keys:
        id_table += [len(key), data_start + len(blob)]
        blob += key + b"\0"
    for key in keys:
        value = pairs[key]
        str_table += [len(value), data_start + len(blob)]
        blob += value + b"\0"
    head = struct.pack("<7I", 0x950412DE, 0, count, ids_start, strs_start, 0, data_start)
    return head + struct.pack(f"<{2 * count}I", *id_table) + struct.pack(f"<{2 * count}I", *str_table) + blob


def catalog_paths(language: str, locale_dir: Path) -> tuple[Path, Path]:
    """The ``.po`` source and the compiled ``.mo`` of ``language``."""
    folder = locale_dir / language / "LC_MESSAGES"
    return folder / "gpufly.po", folder / "gpufly.mo"
