"""The recommender case study as a staged plan: data, then compute, then communication, stage by stage.

`gpufly tune recsys` and benchmarks/tune_speedups.py both run these stages through the tuner's one
``Search`` (``StagePlan``). Each stage is a real trial of the built-in ``recsys`` workload through the same
worker as any tuner trial (its own process, a timeout, the median per-step throughput, the same training
samples), so the table measures the pipeline a user would run, not a special benchmark loop. The stages are
cumulative: each adds its knobs to the last stage that stayed safe, so a change that costs accuracy (the
bigger batch, here) is shown, rejected and not carried into the stages after it.

Cost-performance is samples per dollar: the throughput over an hour divided by the machine's price
per hour, given, or on a GPU the catalog prices, its launch price spread over three years of hours.

Torch-free at import: the trials import torch in their own processes.
"""

from __future__ import annotations

from gpufly.tune.search import Stage, StagePlan

WORKLOAD = "recsys"


def stages(processes: int = 2) -> StagePlan:
    """The case study's stages, in order; the last runs DDP over ``processes`` processes."""
    return StagePlan((
        Stage("naive: per-sample dataset, dense Adam, batch 256", "baseline", {}),
        Stage("+ batched (vectorized) collation", "data", {"batched": True}),
        Stage("+ sparse embedding gradients, SparseAdam", "compute", {"sparse": True}),
        Stage("+ fused embedding bag (one table)", "compute", {"fused": True}),
        Stage("+ batch 2048 (lr x4)", "compute", {"batch_size": 2048, "lr": 4e-3}),
        Stage("+ 1 loader worker, persistent", "data", {"num_workers": 1}),
        Stage(f"+ DDP over {processes} processes", "communication", {"ddp": processes}),
    ))


OWNED_HOURS = 3 * 365 * 24
"""A bought GPU's launch price spread over three years of hours: the ownership cost an hour, when none is given."""


def catalog_price_per_hour(device_name: str, total_memory: int) -> tuple[float, str] | None:
    """On a GPU the catalog knows, (its launch price per owned hour, where that came from); None when the
    catalog has no price for it (data-centre cards have no published price)."""
    from gpufly.catalog import default_catalog

    spec = default_catalog().match_device(device_name, total_memory)
    if spec is None or spec.launch_price_usd is None:
        return None
    price = spec.launch_price_usd / OWNED_HOURS
    return price, (f"{spec.name} launch price ${spec.launch_price_usd:,.0f} over {OWNED_HOURS:,} hours = "
                   f"${price:.3f}/h (catalog; --price-per-hour overrides)")
