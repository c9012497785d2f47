"""Find a GPU by the loose name a person types or the exact name a driver reports."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _

_NOISE_WORDS = ("nvidia", "geforce", "tesla", "amd", "radeon", "instinct", "apple", "generation")
_NOISE = re.compile(r"\b(" + "|".join(_NOISE_WORDS) + r")\b")
_MEMORY_WORDS = re.compile(r"(\d+)\s*g(?:i?b)?\b")
"""A memory size however it is written ("80GB", "16 GB", "a100-80g"), folded to one word: "80gb"."""
_VRAM_TOLERANCE = 0.2
"""Drivers report a little less memory than the datasheet (an "80 GB" H100 shows 79.6 GiB)."""
_MEMORY = re.compile(r"\d+gb")
_QUALIFIER = re.compile(r"\d+gb|sxm\d?|pcie|nvl|oam|hbm\d?e?|gddr\d?x?|edition|workstation|server|founders"
                        r"|tensor|core|gpu|graphics")
"""Words a person may leave out of a name and still mean the same product: a memory size, a form factor or
memory kind, an edition, the vendor's "Tensor Core GPU" or "Graphics". Everything else (more model digits, Ti,
SUPER, Max, Pro, Ultra, XT, D, S, Laptop, Ada) names another product, so a partial name never reaches across it."""
_CONSUMER_PREFIXES = ("rtx", "gtx", "rx")
_CONSUMER_PREFIX = re.compile(r"^(rtx|gtx|rx)(?=\d)")
_LAPTOP = re.compile(r"\b(laptop|mobile|max-q)\b", re.IGNORECASE)


def _words(name: str) -> tuple[str, ...]:
    """A name as lookup words: lower case, vendor words dropped, memory sizes folded, split at punctuation."""
    folded = _MEMORY_WORDS.sub(r"\1gb", _NOISE.sub(" ", name.lower()))
    return tuple(re.findall(r"[a-z0-9]+", folded))


def normalize(name: str) -> str:
    """Fold a GPU name to a lookup key: lower case, vendor words and punctuation dropped, "80G" read as "80gb".

    >>> normalize("NVIDIA GeForce RTX 4090")
    'rtx4090'
    >>> normalize("a100-80g")
    'a10080gb'
    """
    return "".join(_words(name))


def _unprefixed(words: tuple[str, ...]) -> tuple[str, ...]:
    """A consumer card's words without its RTX/GTX/RX prefix, as people type them ("4090")."""
    if len(words) > 1 and words[0] in _CONSUMER_PREFIXES:
        return words[1:]
    return (_CONSUMER_PREFIX.sub("", words[0]), *words[1:]) if words else words


def _spellings(spec: GpuSpec) -> set[tuple[str, ...]]:
    spellings = {_words(text) for text in (spec.id, spec.name, spec.full_name, *spec.aliases)}
    if spec.segment in ("consumer", "laptop"):
        spellings |= {_unprefixed(words) for words in spellings}
    spellings.discard(())
    return spellings


def _reaches(key: str, words: tuple[str, ...], omissible: re.Pattern[str] = _QUALIFIER, *, omit: bool = True) -> bool:
    """Whether ``key`` spells ``words`` with only omissible words left out, anywhere but the first, and the
    omissible words that end the name in any order: "v10016gb" reaches "v100 sxm2 16gb", "a100" reaches
    "a100 80gb sxm", "a100sxm80gb" reaches "a100 80gb sxm", "h20" does not reach "h200" and "4070ti" does not
    reach "4070 ti super". With ``omit`` False nothing may be left out: the key spells the name, its closing
    qualifiers in whatever order ("a100 sxm 80gb" spells "A100 80GB SXM")."""
    if not words:
        return not key
    return key.startswith(words[0]) and _rest_reached(key[len(words[0]):], words[1:], omissible, omit)


def _rest_reached(key: str, words: tuple[str, ...], omissible: re.Pattern[str], omit: bool) -> bool:
    if not words:
        return not key
    if all(omissible.fullmatch(word) for word in words):
        return _in_any_order(key, words, omit)
    first, rest = words[0], words[1:]
    if key.startswith(first) and _rest_reached(key[len(first):], rest, omissible, omit):
        return True
    return omit and bool(omissible.fullmatch(first)) and _rest_reached(key, rest, omissible, omit)


def _in_any_order(key: str, words: tuple[str, ...], omit: bool) -> bool:
    """Whether ``key`` is some of ``words`` (all of them unless ``omit``), each once, in any order."""
    if not key:
        return omit or not words
    return any(key.startswith(word) and _in_any_order(key[len(word):], words[:i] + words[i + 1:], omit)
               for i, word in enumerate(words))


def _model_numbers(spec: GpuSpec) -> set[str]:
    """The bare model numbers a consumer or laptop GPU goes by ("4090" for the RTX 4090, the RTX 4090 D and the
    RTX 4090 Laptop GPU alike): the first word of a spelling, where it is all digits."""
    if spec.segment not in ("consumer", "laptop"):
        return set()
    return {words[0] for words in _spellings(spec) if words[0].isdigit()}


def _defaults(spec: GpuSpec) -> set[str]:
    keys = {normalize(text) for text in spec.default_for}
    if spec.segment in ("consumer", "laptop"):
        keys |= {"".join(_unprefixed(_words(text))) for text in spec.default_for}
    return keys


@dataclass(frozen=True)
class Resolution:
    """What a typed name resolved to: the GPU, and what was assumed to get there.

    ``assumed`` is a sentence ("assuming A100 80GB SXM; also: A100 40GB SXM, ...") when the name covers several
    variants and one is the common default, ("assuming RTX 4090; also: RTX 4090 D, RTX 4090 Laptop") when it is a
    bare model number that several products share, or ("assuming Tesla P100 PCIe 16GB") when it left out a
    qualifier of the one GPU it covers; None when the name spelled that GPU's name. ``alternatives`` are the display
    names of the other variants and products the name covers.
    """

    spec: GpuSpec
    assumed: str | None = None
    alternatives: tuple[str, ...] = ()


class Catalog:
    """The GPU catalog: an ordered collection of GpuSpec with lookup by the names people type and drivers report.

    A name resolves to the GPUs whose name it spells exactly, plus those whose name it begins where all that is
    left out is a qualifier (memory size, form factor, edition): "a100" covers the four A100 variants, "h20"
    never reaches "H200", "4070 ti" never "4070 Ti SUPER". One GPU resolves; several resolve to the one whose
    data declares it the default for that name (``default_for``), saying what was assumed; otherwise the
    lookup asks, naming the variants.

    A bare model number ("4090", "3080") is how people shorten a whole family of consumer products: the desktop
    card, its Ti, SUPER and D siblings and the laptop GPU. It still resolves to the card it spells (the desktop
    one, or that card's declared default), but says so and names the family's other products, the way "a100"
    names the other A100s; a number none of the family spells ("7900", "1660") asks. A name that spells the
    product ("RTX 4090", "rtx-4090", "4090 D", "A100 80GB SXM") is taken as meant, silently.
    """

    def __init__(self, specs: Iterable[GpuSpec]) -> None:
        self.specs: list[GpuSpec] = list(specs)
        self._by_key: dict[str, list[GpuSpec]] = {}
        self._spellings: list[tuple[tuple[str, ...], GpuSpec]] = []
        self._default: dict[str, list[GpuSpec]] = {}
        self._family: dict[str, list[GpuSpec]] = {}
        for spec in self.specs:
            for number in _model_numbers(spec):
                self._family.setdefault(number, []).append(spec)
            for words in _spellings(spec):
                self._spellings.append((words, spec))
                named = self._by_key.setdefault("".join(words), [])
                if spec not in named:
                    named.append(spec)
            for key in _defaults(spec):
                self._default.setdefault(key, []).append(spec)

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def ambiguous_keys(self) -> dict[str, list[str]]:
        """Exact lookup keys that name more than one GPU (a data error the tests catch), and names declared the
        default for by more than one GPU."""
        keys = {key: [s.id for s in specs] for key, specs in self._by_key.items() if len(specs) > 1}
        keys.update({f"default_for {key}": [s.id for s in specs]
                     for key, specs in self._default.items() if len(specs) > 1})
        return keys

    def get(self, name: str) -> GpuSpec:
        """The one GPU that ``name`` means, or a GpuflyError naming the variants or the closest matches."""
        return self.resolve(name).spec

    def resolve(self, name: str) -> Resolution:
        """The GPU that ``name`` means and what was assumed to get there, or a GpuflyError: one line naming the
        variants when the name covers several and none is their default, or the closest names when none."""
        key = normalize(name)
        found = self.find(name)
        relatives = [spec for spec in self.family(name) if spec not in found]
        chosen: GpuSpec | None = None
        if len(found) == 1:
            chosen = found[0]
            if not relatives:
                exact = chosen in self._by_key.get(key, []) or self._spells(key, chosen)
                return Resolution(chosen, None if exact else _("assuming {gpu}").format(gpu=chosen.name))
        elif found:
            defaults = [spec for spec in self._default.get(key, []) if spec in found]
            chosen = defaults[0] if len(defaults) == 1 else None
        covered = [*found, *relatives]
        if chosen is not None:
            others = tuple(spec.name for spec in covered if spec is not chosen)
            return Resolution(chosen, _("assuming {gpu}; also: {others}").format(gpu=chosen.name,
                                                                                 others=", ".join(others)), others)
        if len(covered) > 1:
            names = ", ".join(spec.name for spec in covered)
            raise GpuflyError(
                f"'{name}' matches several GPUs: {names}",
                hint=f"add the memory size or variant, e.g. '{covered[0].name}'",
            )
        suggestions = self.suggest(name)
        did_you_mean = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise GpuflyError(
            f"unknown GPU '{name}'{did_you_mean}", hint="`gpufly gpus` lists every GPU in the catalog"
        )

    def find(self, name: str) -> list[GpuSpec]:
        """Every GPU that ``name`` could mean: those it names exactly and those it names with only qualifiers
        (memory size, form factor, edition) left out; in catalog order."""
        key = normalize(name)
        if not key:
            return []
        matches = {id(spec) for words, spec in self._spellings if _reaches(key, words)}
        return [spec for spec in self.specs if id(spec) in matches]

    def _spells(self, key: str, spec: GpuSpec) -> bool:
        """Whether ``key`` is one of ``spec``'s names in full, its closing qualifiers in any order."""
        return any(_reaches(key, words, omit=False) for words, named in self._spellings if named is spec)

    def family(self, name: str) -> list[GpuSpec]:
        """The consumer and laptop GPUs that share the bare model number ``name`` is ("4090": the RTX 4090, RTX 4090
        D and RTX 4090 Laptop), in catalog order; empty for any other name ("RTX 4090", "4090 D", "A100").
        Not matches (``find`` never reaches across Ti, SUPER, D or Laptop): the other products a bare number may
        have meant, which ``resolve`` names."""
        key = normalize(name)
        return list(self._family.get(key, [])) if key.isdigit() else []

    def suggest(self, name: str, limit: int = 3) -> list[str]:
        """Display names of the GPUs whose keys are closest to ``name`` (for typos)."""
        close = difflib.get_close_matches(normalize(name), self._by_key, n=limit * 3, cutoff=0.6)
        names: list[str] = []
        for key in close:
            for spec in self._by_key[key]:
                if spec.name not in names:
                    names.append(spec.name)
        return names[:limit]

    def match_device(self, reported_name: str, memory_total_bytes: int | None = None) -> GpuSpec | None:
        """The catalog entry for a GPU a driver reports, or None when the catalog lacks it.

        Only the reported name and its memory-size variants count ("RTX 3080" may be the 10 GB or the
        "RTX 3080 12GB" entry), and a laptop name only ever matches a laptop entry ("RTX 4070 Laptop GPU" never
        becomes the desktop card). The memory size picks the variant and rules out one the catalog lacks (an
        8 GB card under the 16 GB card's name). Never another product: None rather than a guess.
        """
        key = normalize(reported_name)
        laptop = bool(_LAPTOP.search(reported_name))
        exact = [spec for spec in self._by_key.get(key, []) if (spec.segment == "laptop") == laptop]
        if memory_total_bytes is None:
            return exact[0] if len(exact) == 1 else None
        variants = {id(spec): spec for spec in exact}
        for words, spec in self._spellings:
            if _reaches(key, words, _MEMORY) and (spec.segment == "laptop") == laptop:
                variants[id(spec)] = spec
        gib = memory_total_bytes / 2**30
        fitting = [s for s in variants.values() if abs(s.vram_gib - gib) <= _VRAM_TOLERANCE * s.vram_gib]
        return min(fitting, key=lambda spec: abs(spec.vram_gib - gib), default=None)
