"""The examples in docstrings run."""

from __future__ import annotations

import doctest

import pytest

import gpufly.catalog.lookup
import gpufly.cli.render
import gpufly.errors
import gpufly.monitor.backends.live
import gpufly.monitor.format
import gpufly.monitor.views
import gpufly.tune.engine
import gpufly.tune.worker

MODULES = [gpufly.errors, gpufly.catalog.lookup, gpufly.monitor.format, gpufly.monitor.views, gpufly.tune.engine,
           gpufly.monitor.backends.live, gpufly.tune.worker,
           gpufly.cli.render]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
