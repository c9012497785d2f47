"""Find a GPU by the loose name a person types or the exact name a driver reports."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError

_NOISE_WORDS = ("nvidia", "geforce", "tesla", "amd", "apple", "generation")
_NOISE = re.compile(r"\b(" + "|".join(_NOISE_WORDS) + r")\b")
_VRAM_TOLERANCE = 0.2
"""Drivers report a little less memory than the datasheet (an "80 GB" H100 shows 79.6 GiB)."""
_MEMORY_SUFFIX = re.compile(r"\d+gb")
_CONSUMER_PREFIX = re.compile(r"^(rtx|gtx|rx)(?=\d)")


def normalize(name: str) -> str:
    """Fold a GPU name to a lookup key: lower case, vendor words and punctuation dropped.

    >>> normalize("NVIDIA GeForce RTX 4090")
    'rtx4090'
    >>> normalize("a100-80g")
    'a10080g'
    """
    folded = _NOISE.sub(" ", name.lower())
    return re.sub(r"[^a-z0-9]+", "", folded)


def _keys(spec: GpuSpec) -> set[str]:
    keys = {normalize(text) for text in (spec.id, spec.name, spec.full_name, *spec.aliases)}
    keys |= {_CONSUMER_PREFIX.sub("", key) for key in keys if spec.segment == "consumer"}
    keys.discard("")
    return keys


class Catalog:
    """The GPU catalog: an ordered collection of GpuSpec with loose-name lookup."""

    def __init__(self, specs: Iterable[GpuSpec]) -> None:
        self.specs: list[GpuSpec] = list(specs)
        self._by_key: dict[str, list[GpuSpec]] = {}
        for spec in self.specs:
            for key in _keys(spec):
                self._by_key.setdefault(key, []).append(spec)

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def ambiguous_keys(self) -> dict[str, list[str]]:
        """Lookup keys that name more than one GPU (a data error the tests catch)."""
        return {key: [s.id for s in specs] for key, specs in self._by_key.items() if len(specs) > 1}

    def get(self, name: str) -> GpuSpec:
        """The one GPU that ``name`` means, or a GpuflyError naming the closest matches."""
        found = self.find(name)
        if len(found) == 1:
            return found[0]
        if found:
            names = ", ".join(spec.name for spec in found)
            raise GpuflyError(
                f"'{name}' matches several GPUs: {names}",
                hint="add the memory size or variant, e.g. 'a100 80gb sxm'",
            )
        suggestions = self.suggest(name)
        did_you_mean = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise GpuflyError(
            f"unknown GPU '{name}'{did_you_mean}", hint="`gpufly gpus` lists every GPU in the catalog"
        )

    def find(self, name: str) -> list[GpuSpec]:
        """Every GPU that ``name`` could mean: an exact key first, else the keys it starts."""
        key = normalize(name)
        if not key:
            return []
        if key in self._by_key:
            return list(self._by_key[key])
        matches: dict[str, GpuSpec] = {}
        for candidate, specs in self._by_key.items():
            if candidate.startswith(key):
                matches.update((spec.id, spec) for spec in specs)
        return [spec for spec in self.specs if spec.id in matches]

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

        Only the reported name and its memory-size variants count ("RTX 3080" may be the 10 GB
        or the "RTX 3080 12GB" entry; "RTX 4070 Laptop GPU" never becomes the desktop card). The
        memory size picks the variant and rules out one the catalog lacks (an 8 GB card under
        the 16 GB card's name).
        """
        key = normalize(reported_name)
        specs = self._by_key.get(key, [])
        if memory_total_bytes is None:
            return specs[0] if len(specs) == 1 else None
        variants = {spec.id: spec for spec in specs}
        for candidate, sized in self._by_key.items():
            if _MEMORY_SUFFIX.fullmatch(candidate.removeprefix(key)) and candidate.startswith(key):
                variants.update((spec.id, spec) for spec in sized)
        gib = memory_total_bytes / 2**30
        fitting = [s for s in variants.values() if abs(s.vram_gib - gib) <= _VRAM_TOLERANCE * s.vram_gib]
        return min(fitting, key=lambda spec: abs(spec.vram_gib - gib), default=None)
