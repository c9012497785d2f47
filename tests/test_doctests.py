"""The examples in docstrings run."""

from __future__ import annotations

import doctest

import pytest

import gpufly.catalog.lookup
import gpufly.errors


@pytest.mark.parametrize("module", [gpufly.errors, gpufly.catalog.lookup], ids=lambda m: m.__name__)
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
