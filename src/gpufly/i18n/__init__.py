"""Text output in the reader's language, through a standard gettext message catalog.

Messages are marked where they are produced (``from gpufly.i18n import gettext as _``):
``_("{count} GPUs found").format(count=n)``, whole sentences with named placeholders, so a translator sees
what a person reads. The catalogs are gettext's ``.po`` sources and compiled
``.mo`` files under ``gpufly/locale/LANG/LC_MESSAGES/`` (built by ``scripts/build_catalog.py``).

The language is chosen once per command, by the CLI, with ``use_language``: ``--lang``, else ``GPUFLY_LANG``, else
the locale in gettext's order (``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``). JSON output is always English
(its keys and values are a machine-readable contract), so a command printing JSON uses English whatever was asked.
A missing catalog falls back to English, without an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from gettext import GNUTranslations, NullTranslations, translation
from pathlib import Path

from gpufly.errors import GpuflyError

DOMAIN = "gpufly"
LOCALE_DIR = Path(__file__).parent.parent / "locale"
LANGUAGES = ("en", "zh")
"""The languages gpufly speaks; English is the messages themselves (no catalog)."""
LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
"""gettext's order: the first one set decides (LANGUAGE may list several, separated by colons)."""
LANG_HINT = "--lang en or --lang zh (GPUFLY_LANG takes the same values)"

_active: NullTranslations = NullTranslations()


def gettext(message: str) -> str:
    """``message`` in the active language (itself in English or where the catalog lacks it). An empty message
    stays empty: gettext would answer it with the catalog's header (a data field may be empty)."""
    return _active.gettext(message) if message else message


def ngettext(singular: str, plural: str, count: int) -> str:
    """The singular or plural form for ``count``, in the active language."""
    return _active.ngettext(singular, plural, count)


def normalize(name: str) -> str | None:
    """A language or locale name (``zh``, ``zh_CN.UTF-8``, ``zh-Hans``, ``en_US``, ``C``) as one of LANGUAGES, or
    None when gpufly does not speak it. The C and POSIX locales are English."""
    base = name.strip().split(".")[0].split("@")[0].replace("-", "_").split("_")[0].lower()
    if base in ("c", "posix"):
        return "en"
    return base if base in LANGUAGES else None


def chosen_language(option: str | None, environ: Mapping[str, str]) -> str:
    """The language of this run: ``option`` (--lang), else GPUFLY_LANG, else the locale, else English.

    An option or GPUFLY_LANG naming a language gpufly does not speak is an error (it was asked for by name); a
    locale gpufly does not speak is English, as gettext falls back.
    """
    for asked, where in ((option, "--lang"), (environ.get("GPUFLY_LANG"), "GPUFLY_LANG")):
        if asked:
            language = normalize(asked)
            if language is None:
                raise GpuflyError(f"{where} {asked!r} is not a language gpufly speaks", hint=LANG_HINT)
            return language
    for variable in LOCALE_VARIABLES:
        value = environ.get(variable)
        if value:
            return next((lang for lang in map(normalize, value.split(":")) if lang is not None), "en")
    return "en"


def use_language(language: str, locale_dir: Path | None = None) -> None:
    """Make ``language`` the one every ``_()`` answers in, from here on; English where its catalog is missing."""
    global _active
    if language == "en":
        _active = NullTranslations()
        return
    _active = translation(DOMAIN, str(locale_dir or LOCALE_DIR), languages=[language], fallback=True)


def active_language() -> str:
    """The language ``_()`` answers in now (English when the catalog was missing)."""
    return _active.info().get("language", "en") if isinstance(_active, GNUTranslations) else "en"


__all__ = ["DOMAIN", "LANGUAGES", "LOCALE_DIR", "active_language", "chosen_language", "gettext", "ngettext",
           "normalize", "use_language"]
