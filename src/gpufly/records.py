"""One way to read gpufly's saved files back into dataclasses: strict types, and errors that name the field.

Every file gpufly writes and reads again (doctor facts, bench runs, profiles, monitor recordings, tuner
results) is a tree of dataclasses. ``from_dict`` turns a parsed JSON document into that tree through msgspec
(``msgspec.convert`` in strict mode: no "3" for 3, no true for 1, lists become tuples where the field is a
tuple), then runs each field's own value check (``field(metadata={"check": fn})``, for a version or a compute
capability that is a string but not a readable one). Whatever is wrong is one GpuflyError naming the field as
the file spells it: ``facts.json: env.cuda_visible_devices must be a string, got 0``.

msgspec was chosen over pydantic and cattrs because it does exactly this job with the least weight: one
small compiled module with no dependencies that imports in a few milliseconds (pydantic's core is an order
of magnitude larger and slower to import, and gpufly's start-up matters), strict conversion into plain
stdlib dataclasses (cattrs accepts true for an int and needs a separate error transformer for paths), and a
JSON path in every error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from gpufly.errors import GpuflyError

T = TypeVar("T")
Check = Callable[[Any], object]
"""A field's value check: raises GpuflyError (with a hint) for a value of the right type that makes no sense."""

_ERROR = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`(?:, got `(?P<got>[^`]+)`)?(?P<rest>.*)$", re.S)
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")
_KINDS = {"str": "a string", "int": "a whole number", "float": "a number", "bool": "true or false",
          "object": "an object", "array": "a list", "null": "null"}


def checked(check: Check) -> dict[str, Check]:
    """Field metadata that gives a field a value check: ``field(default=None, metadata=checked(parse_version))``."""
    return {"check": check}


def finite_number(value: float) -> None:
    """A value check for a measured figure: NaN and infinity are not measurements (JSON readers accept both).

    >>> finite_number(2.5)
    >>> finite_number(float("inf"))
    Traceback (most recent call last):
    gpufly.errors.GpuflyError: inf is not a finite number
    """
    if not math.isfinite(value):
        raise GpuflyError(f"{value} is not a finite number", hint="a measured figure is a finite number")


def shown(value: Any) -> str:
    """A value as the JSON file spells it: null, "yes", 570 (cut at 60 characters)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Bad(Exception):
    """Internal: the value at ``path`` ("gpus[0].name") does not fit; ``message`` says how."""

    def __init__(self, path: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{path} {message}")
        self.path, self.message, self.hint = path, message, hint


def from_dict(cls: type[T], data: Any, where: str, *, hint: str | None = None,
              unknown: Literal["error", "ignore"] = "error") -> T:
    """The dataclass ``cls`` from a parsed JSON object, or a GpuflyError naming the field that is wrong.

    ``where`` names the source in messages (a file name); ``hint`` is the hint for every error that has none of
    its own. ``unknown="ignore"`` drops fields this version does not know, for files that newer versions may
    extend (a recording); ``"error"`` refuses them, for files a person may have edited by hand (facts).

    >>> @dataclasses.dataclass
    ... class Gpu:
    ...     index: int
    ...     name: str | None = None
    >>> from_dict(Gpu, {"index": 0, "name": "H100"}, "gpu.json")
    Gpu(index=0, name='H100')
    >>> from_dict(Gpu, {"index": "0"}, "gpu.json")
    Traceback (most recent call last):
    gpufly.errors.GpuflyError: gpu.json: index must be a whole number, got "0"
    """
    import msgspec

    try:
        if not isinstance(data, dict):
            raise _Bad("", f"must be an object, got {shown(data)}")
        if unknown == "error":
            _refuse_unknown(cls, data, "")
        try:
            value = msgspec.convert(data, cls, strict=True)
        except msgspec.ValidationError as exc:
            raise _translate(str(exc), data) from None
        _run_checks(value, "")
    except _Bad as bad:
        message = f"{where}: {bad.path} {bad.message}" if bad.path else f"{where} {bad.message}"
        raise GpuflyError(message, hint=bad.hint or hint) from None
    return value


def to_dict(record: Any) -> dict[str, Any]:
    """A dataclass tree as plain JSON-ready data (tuples become lists when dumped)."""
    return dataclasses.asdict(record)


# -- unknown fields ---------------------------------------------------------------------------------------


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=False)


def _dataclasses_in(hint: Any) -> Iterator[tuple[str, type]]:
    """The dataclass types a field's annotation holds, with how the path goes into them ("" or "[]")."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        for arg in get_args(hint):
            yield from _dataclasses_in(arg)
    elif origin in (tuple, list):
        args = [arg for arg in get_args(hint) if arg is not Ellipsis]
        for arg in args:
            for _, cls in _dataclasses_in(arg):
                yield "[]", cls
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        yield "", hint


def _refuse_unknown(cls: type, data: dict[str, Any], path: str) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    extra = sorted(set(data) - set(names))
    if extra:
        raise _Bad(path or "", f"has unknown field(s) {', '.join(extra)}", hint=f"its fields: {', '.join(names)}")
    hints = _hints(cls)
    for name in names:
        value = data.get(name)
        inner = f"{path}.{name}" if path else name
        for how, sub in _dataclasses_in(hints[name]):
            if how == "" and isinstance(value, dict):
                _refuse_unknown(sub, value, inner)
            elif how == "[]" and isinstance(value, list | tuple):
                for index, item in enumerate(value):
                    if isinstance(item, dict):
                        _refuse_unknown(sub, item, f"{inner}[{index}]")


# -- value checks ----------------------------------------------------------------------------------------


def _run_checks(record: Any, path: str) -> None:
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        return
    for spec in dataclasses.fields(record):
        value = getattr(record, spec.name)
        inner = f"{path}.{spec.name}" if path else spec.name
        check = spec.metadata.get("check")
        items = list(enumerate(value)) if isinstance(value, tuple | list) else [(None, value)]
        for index, item in items:
            item_path = inner if index is None else f"{inner}[{index}]"
            if check is not None and item is not None:
                try:
                    check(item)
                except GpuflyError as exc:
                    raise _Bad(item_path, f"is not valid: {exc.message}", hint=exc.hint) from None
            _run_checks(item, item_path)


# -- msgspec's errors in a person's words ----------------------------------------------------------------


def _value_at(data: Any, path: str) -> Any:
    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        try:
            data = data[key] if key else data[int(index)]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _kind(want: str) -> str:
    """'str | null' -> 'a string'; '<A>' (another dataclass) -> 'an object'."""
    names = [part.strip() for part in want.split("|") if part.strip() != "null"]
    kinds = [_KINDS.get(name, "an object") for name in names] or ["null"]
    return " or ".join(dict.fromkeys(kinds))


def _translate(error: str, data: Any) -> _Bad:
    parts = _ERROR.match(error)
    message, raw_path = (parts["message"], parts["path"] or "") if parts else (error, "")
    path = raw_path.lstrip(".")
    missing = _MISSING.match(message)
    if missing:
        return _Bad(f"{path}.{missing['name']}" if path else missing["name"], "is missing (a required field)")
    expected = _EXPECTED.match(message)
    if expected is None:
        return _Bad(path, message[0].lower() + message[1:] if message else "is not valid")
    value = _value_at(data, raw_path)
    rest = expected["rest"].strip()
    if rest.startswith(">= 0") or rest.startswith("> 0"):
        return _Bad(path, f"must not be negative, got {shown(value)}" if rest.startswith(">=")
                    else f"must be positive, got {shown(value)}",
                    hint="counts, sizes, indexes and ids are never negative; a figure that could not be read is null")
    if rest:
        return _Bad(path, f"must be {_kind(expected['want'])} {rest}, got {shown(value)}")
    return _Bad(path, f"must be {_kind(expected['want'])}, got {shown(value)}")
