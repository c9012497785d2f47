"""The communication model: links from the catalog, NCCL's ring cost, and what tensor parallelism pays per token."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.catalog import default_catalog
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.comms import (
    PROTOCOLS,
    Topology,
    collective_s,
    default_internode,
    default_link,
    internode,
    internode_table,
    intra_link,
    link_kind,
    network_link,
    topology,
)
from gpufly.estimate.job import Job
from gpufly.estimate.speed import decode_communication, decode_step_s
from gpufly.models.hf_config import load_config_file, spec_from_config

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
LLAMA = spec_from_config(load_config_file(CONFIGS / "llama-3.1-8b"), "Llama 3.1 8B", "test")


@pytest.fixture(scope="module")
def gpus() -> dict[str, GpuSpec]:
    return {spec.id: spec for spec in default_catalog()}


def test_modules_default_to_their_fabric_and_cards_to_pcie(gpus) -> None:
    assert default_link(gpus["h100-sxm"]) == "nvlink"
    assert default_link(gpus["a100-sxm4-80gb"]) == "nvlink"
    assert default_link(gpus["a100-pcie-80gb"]) == "pcie", "a bridge is optional and joins two cards at most"
    assert default_link(gpus["rtx-4090"]) == "pcie"


def test_link_bandwidth_comes_from_the_catalog(gpus) -> None:
    nvlink = intra_link(gpus["a100-sxm4-80gb"], "nvlink", 8)
    assert nvlink.bus_gbps == pytest.approx(600 / 2 * 0.78), "both directions in the catalog, one per ring step"
    pcie = intra_link(gpus["a100-pcie-80gb"], "pcie", 4)
    assert pcie.bus_gbps == pytest.approx(1.969 * 16 * 0.7) and "PCIe 4.0 x16" in pcie.label
    assert intra_link(gpus["h100-pcie"], "pcie", 2).bus_gbps == pytest.approx(2 * pcie.bus_gbps, rel=0.01)


def test_a_bridge_joins_two_cards_and_a_card_without_one_has_no_nvlink(gpus) -> None:
    assert intra_link(gpus["a100-pcie-80gb"], "nvlink", 2).kind == "nvlink"
    with pytest.raises(GpuflyError, match="bridge joins 2"):
        intra_link(gpus["a100-pcie-80gb"], "nvlink", 4)
    with pytest.raises(GpuflyError, match="no NVLink"):
        intra_link(gpus["rtx-4090"], "nvlink", 2)


def test_link_names_resolve_and_unknown_ones_suggest() -> None:
    assert link_kind("NVLink") == "nvlink" and link_kind("xgmi") == "nvlink" and link_kind("pci") == "pcie"
    with pytest.raises(GpuflyError, match="did you mean nvlink"):
        link_kind("nvlnk")
    with pytest.raises(GpuflyError, match="did you mean"):
        internode("ib-nd")


def test_every_internode_link_has_a_source_and_a_rate() -> None:
    table = internode_table()
    assert {"ib-ndr", "ib-hdr", "roce-200", "eth-100"} <= set(table)
    assert all(link.sources and link.gbit_per_nic > 0 for link in table.values())
    assert table["ib-ndr"].rdma and not table["eth-100"].rdma


def test_reference_designs_set_the_network_default(gpus) -> None:
    assert default_internode(gpus["h100-sxm"]) == ("ib-ndr", None)
    assert default_internode(gpus["a100-sxm4-80gb"]) == ("ib-hdr", None)
    assert default_internode(gpus["rtx-4090"]) == ("eth-100", 1)


def test_ring_all_reduce_follows_the_alpha_beta_formula(gpus) -> None:
    """Large messages: 2(N-1)/N * bytes / bandwidth dominates; small ones: base + 2(N-1) steps of latency."""
    topo = Topology(intra_link(gpus["h100-sxm"], "nvlink", 8), 8)
    big = 1e9
    bandwidth = topo.intra.bus_gbps * 1e9
    assert collective_s("all-reduce", big, topo, 8) == pytest.approx(2 * 7 / 8 * big / bandwidth, rel=0.02)
    assert collective_s("all-gather", big, topo, 8) == pytest.approx(collective_s("all-reduce", big, topo, 8) / 2,
                                                                     rel=0.01)
    ll = PROTOCOLS[0]
    assert collective_s("all-reduce", 8, topo, 2) == pytest.approx(ll.base_s + 2 * ll.hop_s["nvlink"], rel=0.01)
    assert collective_s("all-reduce", 8, topo, 1) == 0.0


def test_small_all_reduces_cost_more_over_pcie_and_with_more_gpus(gpus) -> None:
    nvlink = Topology(intra_link(gpus["a100-sxm4-80gb"], "nvlink", 4), 4)
    pcie = Topology(intra_link(gpus["a100-pcie-80gb"], "pcie", 4), 4)
    message = 8192 * 2
    assert collective_s("all-reduce", message, pcie, 4) > 2 * collective_s("all-reduce", message, nvlink, 4)
    assert collective_s("all-reduce", message, pcie, 4) > collective_s("all-reduce", message, pcie, 2)


def test_across_nodes_the_nics_bound_the_ring(gpus) -> None:
    h100 = gpus["h100-sxm"]
    intra = intra_link(h100, "nvlink", 8)
    fast = Topology(intra, 8, 2, network_link(internode("ib-ndr"), 8))
    slow = Topology(intra, 8, 2, network_link(internode("eth-100"), 1))
    assert fast.ring_bandwidth(8, 2) == pytest.approx(min(intra.bus_gbps, 8 * 50 * 0.9) * 1e9)
    assert slow.ring_bandwidth(8, 2) == pytest.approx(12.5 * 0.6 * 1e9)
    assert slow.ring_bandwidth(1, 2) == pytest.approx(12.5 * 0.6 * 1e9 / 8), "8 rings share the one NIC"
    assert collective_s("all-reduce", 1e9, slow, 8, 2) > 10 * collective_s("all-reduce", 1e9, fast, 8, 2)


def test_topology_says_the_defaults_it_took(gpus) -> None:
    topo, said = topology(gpus["h100-sxm"], Job(task="full", gpus=8, nodes=2))
    assert topo.inter is not None and "InfiniBand NDR" in topo.inter.label
    assert any("--internode ib-ndr --nics 8" in line for line in said)
    assert any("--link nvlink" in line for line in said)
    _topo, given = topology(gpus["h100-sxm"], Job(task="full", gpus=8, nodes=2, link="nvlink", internode="eth-100",
                                                   nics=2))
    assert given == ()


def test_tensor_parallel_decode_pays_per_layer_all_reduces_that_depend_on_the_link(gpus) -> None:
    """Issue 17 pattern 1: PCIe cards gain less from tensor parallelism than NVLink modules."""
    job = Job(engine="vllm", gpus=4, context=1024)
    over_pcie = decode_communication(LLAMA, gpus["a100-pcie-80gb"], job)
    over_nvlink = decode_communication(LLAMA, gpus["a100-sxm4-80gb"], job)
    assert over_pcie[0].name == "tensor-parallel all-reduce" and f"{(LLAMA.layers or 0) * 2} all-reduces" in (
        over_pcie[0].note)
    assert over_pcie[0].seconds > 2 * over_nvlink[0].seconds
    one = decode_step_s(LLAMA, gpus["a100-pcie-80gb"], Job(engine="vllm", context=1024), 512)
    four = decode_step_s(LLAMA, gpus["a100-pcie-80gb"], job, 512)
    assert 1 < one / four < 2.5, "far from 4x: the engine's fixed cost and the all-reduces do not shrink"


def test_layer_splitting_engines_pay_no_all_reduce(gpus) -> None:
    assert decode_communication(LLAMA, gpus["a100-pcie-80gb"], Job(engine="llama.cpp", gpus=4, quant="q4_k_m")) == ()
