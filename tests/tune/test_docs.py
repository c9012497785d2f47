"""What docs/tune.md tells a user to write works as it says: the example workload takes the seed the tuner gives
it (so the baseline's second seed measures a drift), and `gpufly.apply` on a run with no winner is the error the
page says it is."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

from gpufly.errors import GpuflyError
from gpufly.tune import GreedyPlan, ResultsLog, Search
from tests.tune.fakes import FakeMachine

DOC = Path(__file__).parent.parent.parent / "docs" / "tune.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return next(block for block in blocks if "def workload(options)" in block)


def test_the_example_workload_leaves_the_seed_to_the_tuner_and_keeps_its_samples() -> None:
    """The example called torch.manual_seed(0), which gives the baseline's second seed the same losses and leaves
    the tuner no seed drift to judge accuracy with ("no seed drift known ... fixed tolerances")."""
    source = _example()
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "manual_seed"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"]
    assert calls == [], "torch.manual_seed in the factory overrides the tuner's seed"
    module = ModuleType("tune_doc_example")
    exec(compile(source, str(DOC), "exec"), module.__dict__)  # the documentation's own example
    built = {}
    for seed in (0, 1):
        torch.manual_seed(seed)  # as the trial's worker does before it calls the factory
        built[seed] = module.workload({})
    first, second = built[0], built[1]
    assert torch.equal(first.dataset.tensors[0], second.dataset.tensors[0]), "the same samples whatever the seed"
    assert torch.equal(first.dataset.tensors[1], second.dataset.tensors[1])
    weights = [next(w.model.parameters()) for w in (first, second)]
    assert not torch.equal(*weights), "the seed the tuner gives moves the initial weights"


def test_the_apply_section_says_what_a_run_without_a_winner_gives(tmp_path: Path) -> None:
    text = " ".join(DOC.read_text().split())
    assert "takes the fastest trial that stayed safe" not in text
    assert "When the run named no winner (`too noisy`, `undecided`" in text and "raises a `GpuflyError`" in text
    results = tmp_path / "noisy.jsonl"
    Search(GreedyPlan({"fast": [True]}), ResultsLog(results), FakeMachine({"fast": 1.25}, noise=0.3)).run()
    import gpufly

    with pytest.raises(GpuflyError, match=r"the run named no winner \(too noisy\)"):
        gpufly.apply(results, torch.nn.Linear(2, 2))


def test_a_workload_that_seeds_itself_is_told_what_the_docs_say(tmp_path: Path) -> None:
    """The same losses for both seeds (the factory seeded itself): the second seed's row says to leave the seed to
    the tuner, as the documentation's example does."""
    search = Search(GreedyPlan({"fast": [True]}), ResultsLog(tmp_path / "r.jsonl"), FakeMachine({"fast": 1.2}))
    search.run()
    seed = next(r for r in search.results if r.role == "seed")
    assert seed.error is not None and "no torch.manual_seed in the factory" in seed.error
    assert "Do not call `torch.manual_seed` in the function" in " ".join(DOC.read_text().split())
