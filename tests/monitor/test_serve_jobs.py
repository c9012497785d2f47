"""`gpufly serve --attribute` and `--price-per-kwh`: the options as a user types them, and a real server."""

from __future__ import annotations

import pytest

from tests.fakes.nvml import nvml_env
from tests.monitor.serving import RECORDING, serving


@pytest.mark.parametrize(("args", "error", "hint"), [
    (["--attribute", "slurm,kube"], "error: unknown attribution source 'kube'; did you mean kubernetes?",
     "hint: --attribute takes a comma-separated list of: slurm, k8s"),
    (["--attribute", ","], "error: --attribute needs at least one source", "hint: one or more of: slurm, k8s"),
    (["--attribute", "slurm", "--replay", str(RECORDING)],
     "error: --attribute reads this machine's processes; it does nothing with --replay",
     "hint: a recording holds the jobs it was made with, as recorded: drop --attribute"),
    (["--currency", "EUR"], "error: --currency names the currency of --price-per-kwh, which was not given",
     "hint: add --price-per-kwh PRICE, e.g. --price-per-kwh 0.15 --currency EUR"),
    (["--price-per-kwh", "-1"], "error: --price-per-kwh must be a finite price of 0 or more, got -1.0",
     "hint: the price of one kilowatt-hour, e.g. --price-per-kwh 0.15"),
    (["--price-per-kwh", "0.2", "--currency", "$"], "error: --currency must be a three-letter ISO 4217 code, got '$'",
     "hint: e.g. --currency USD, --currency EUR"),
])
def test_bad_attribution_and_price_options_are_one_error_and_one_hint(cli, args: list[str], error: str,
                                                                     hint: str) -> None:
    done = cli("serve", "--port", "0", *args, env=nvml_env("hw/no_driver.json"))
    assert (done.code, done.stderr.splitlines()) == (2, [error, hint])


def test_a_priced_attributing_server_says_so_and_serves_the_cost() -> None:
    with serving("--attribute", "slurm,k8s", "--price-per-kwh", "0.25", "--currency", "EUR", replay=None,
                 env=nvml_env("monitor/nvml_live.json")) as served:
        settings = {key: served.info[key] for key in ("attribute", "price_per_kwh", "currency")}
        assert settings == {"attribute": ["k8s", "slurm"], "price_per_kwh": 0.25, "currency": "EUR"}
        _, _, text = served.get("/metrics")
        assert 'gpufly_gpu_energy_cost_total{' in text and 'currency="EUR"' in text
