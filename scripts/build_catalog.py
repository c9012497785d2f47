"""Build gpufly's message catalogs: extract the marked messages, merge them into each language's .po, compile .mo.

The .po files under src/gpufly/locale/LANG/LC_MESSAGES/ are the sources translators edit; the .mo files beside
them are what Python's gettext reads at run time, shipped as package data. Pure Python (gpufly.i18n.catalog): no
GNU gettext tools or Babel needed.

    python scripts/build_catalog.py            # compile every .po into its .mo
    python scripts/build_catalog.py --update   # first add new messages (untranslated) and drop removed ones
    python scripts/build_catalog.py --check    # exit 1 if a .po lacks a message or a .mo is stale (for CI)

A message's place comments (#: file:line) are written by --update; a translator fills in the empty msgstr lines,
then runs this script again.
"""

from __future__ import annotations

import argparse
import sys

from gpufly.i18n import LANGUAGES, LOCALE_DIR
from gpufly.i18n.catalog import catalog_paths, compile_mo, extract, merge, read_po, write_po


def build(language: str, update: bool, check: bool) -> list[str]:
    """Update (if asked) and compile one language's catalog; the problems --check finds, as lines."""
    po, mo = catalog_paths(language, LOCALE_DIR)
    entries = read_po(po.read_text(encoding="utf-8"), po.name) if po.exists() else []
    messages = extract()
    merged = merge(messages, entries, language)
    problems = []
    if update and not check:
        po.parent.mkdir(parents=True, exist_ok=True)
        po.write_text(write_po(merged), encoding="utf-8")
        entries = merged
    untranslated = [entry.msgid for entry in merged[1:] if not all(entry.msgstr)]
    known = {entry.msgid for entry in entries}
    problems += [f"{po}: not in the catalog: {message.msgid!r}" for message in messages if message.msgid not in known]
    problems += [f"{po}: untranslated: {msgid!r}" for msgid in untranslated]
    compiled = compile_mo(entries)
    if check:
        if not mo.exists() or mo.read_bytes() != compiled:
            problems.append(f"{mo}: stale; run python scripts/build_catalog.py")
    else:
        mo.write_bytes(compiled)
        print(f"{mo}: {len(entries) - 1} messages, {len(untranslated)} untranslated")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="merge the code's messages into each .po first")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a missing or stale entry")
    options = parser.parse_args()
    problems = [line for language in LANGUAGES if language != "en"
                for line in build(language, options.update, options.check)]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems and options.check else 0


if __name__ == "__main__":
    sys.exit(main())
