"""Communication between GPUs: the links (NVLink, PCIe, the network between nodes) and the time of the collectives
that tensor, pipeline and data parallelism run over them.

A collective's time follows NCCL's own cost model (NVIDIA/nccl src/graph/tuning.cc, ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``): a base latency, a hardware latency for each step of the ring (steps that cross nodes pay
the network's), and the bytes each GPU sends over the ring's bus bandwidth; NCCL picks the cheaper of its
protocols, LL (low latency, a quarter of the bandwidth) for small messages and Simple for large ones::

    all-reduce      base + 2(N-1) * hop + 2(N-1)/N * bytes / bus bandwidth
    all-gather      base +  (N-1) * hop +  (N-1)/N * bytes / bus bandwidth   (bytes: the gathered whole)
    reduce-scatter  as all-gather                                             (bytes: the whole before scattering)

Across nodes the ring's bus bandwidth is the smaller of the link inside the node and the node's NICs shared among
the rings that cross them at once (NCCL runs one ring per NIC, "rail-optimised").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.estimate.job import Job
from gpufly.i18n import gettext as _

LINK_KINDS = ("nvlink", "pcie")
"""What joins the GPUs inside a node: the GPU's own fabric (NVLink, AMD Infinity Fabric, Xe Link) or PCIe."""
_LINK_ALIASES = {"fabric": "nvlink", "xgmi": "nvlink", "infinity-fabric": "nvlink", "nvswitch": "nvlink",
                 "pci": "pcie", "pci-e": "pcie"}
INTERNODE_FILE = Path(__file__).parent / "data" / "internode.json"

PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
"""GB/s per lane and direction after line encoding (PCI-SIG: 2.5/5 GT/s with 8b/10b, 8/16/32 GT/s with 128b/130b,
64 GT/s PAM4 with FLIT)."""
NVLINK_BUS_SHARE = 0.78
"""Share of an NVLink fabric's per-direction rate a ring reaches: NCCL caps its own bus-bandwidth model on A100 at
235 GB/s of the 300 GB/s per direction (tuning.cc: ``if (compCap80) busBw = std::min(busBw, 235.0f)``), and
nccl-tests' sendrecv_perf on 8 A100 NVLink GPUs measures 195 GB/s (li-plus/playground cuda/nccl.md)."""
PCIE_BUS_SHARE = 0.7
"""Share of PCIe's per-direction rate a ring reaches. Assumed, not measured here: packet headers leave ~85% of the
raw rate for payload at a 256-byte maximum payload, and a ring through the host bridge (no PCIe switch) loses
more; no calibration row has PCIe tensor parallelism."""
RDMA_BUS_SHARE = 0.9
"""Share of an InfiniBand/RoCE NIC's line rate NCCL's IB transport reaches (GPUDirect RDMA; assumed)."""
TCP_BUS_SHARE = 0.6
"""Share of an Ethernet NIC's line rate NCCL's socket transport reaches without RDMA (copies through host memory;
assumed)."""


@dataclass(frozen=True)
class Protocol:
    """One of NCCL's protocols as its cost model prices it: base latency, latency per ring step on each kind of
    hop, and the share of the bus bandwidth it reaches."""

    name: str
    base_s: float
    bandwidth_share: float
    hop_s: dict[str, float]


PROTOCOLS = (
    Protocol("LL", 6.6e-6, 0.25, {"nvlink": 0.6e-6, "pcie": 3.0e-6, "rdma": 2.7e-6, "tcp": 20e-6}),
    Protocol("Simple", 8.4e-6, 1.0, {"nvlink": 3.4e-6, "pcie": 5.7e-6, "rdma": 9.6e-6, "tcp": 40e-6}),
)
"""NCCL's ring latencies from src/graph/tuning.cc: ``baseLat`` Ring LL 6.6 us, Simple 8.4 us and ``hwLat`` Ring
NVLink LL 0.6 / Simple 3.4 us, PCI 1.0 / 5.7 us, as NCCL 2.2x has them (quoted in NVIDIA/nccl#1334); NET Ring LL 2.7
/ Simple 9.6 us (tuning.cc at commit 01afd20a77b5); the LL protocol at a quarter of the bus bandwidth
(``busBw *= 1.0/4.0`` for ring all-reduce). Two departures. PCIe's LL step is 3.0 us, not NCCL's 1.0: nccl-tests
measure 54 us for an 8-byte all-reduce on 8 PCIe RTX 3090s (NVIDIA/nccl#1439) and 42 us on 8 RTX 4090s
(NVIDIA/nccl#1530), where NCCL's model says 21 us; (54 - 6.6 - ~5 us launch) / 14 steps is ~3 us. And a network
without RDMA (NCCL's socket transport) takes 20/40 us per step, an assumption: TCP round trips through the kernel
are tens of microseconds."""


@dataclass(frozen=True)
class Link:
    """One link as a ring sees it: ``bus_gbps`` GB/s per GPU and direction a collective reaches, ``hop`` the
    PROTOCOLS latency key."""

    kind: str
    label: str
    bus_gbps: float
    hop: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "bus_gbps": self.bus_gbps, "hop": self.hop}


@dataclass(frozen=True)
class Internode:
    """A network between nodes from data/internode.json: line rate per NIC and whether NCCL uses RDMA."""

    name: str
    label: str
    gbit_per_nic: float
    rdma: bool
    sources: tuple[str, ...]


@cache
def internode_table() -> dict[str, Internode]:
    """The links between nodes gpufly knows, validated once: each has a label, a positive rate and a source."""
    try:
        data = json.loads(INTERNODE_FILE.read_text())["links"]
    except (OSError, ValueError, KeyError) as exc:
        raise GpuflyError(f"cannot read the inter-node links {INTERNODE_FILE}: {exc}",
                          hint="reinstall gpufly; the file ships with it") from exc
    table = {}
    for name, row in data.items():
        if not row.get("sources") or float(row["gbit_per_nic"]) <= 0:
            raise GpuflyError(f"inter-node link '{name}' in {INTERNODE_FILE} needs a rate and a source",
                              hint="each link lists gbit_per_nic > 0 and sources")
        table[name] = Internode(name, row["label"], float(row["gbit_per_nic"]), bool(row["rdma"]),
                                tuple(row["sources"]))
    return table


def internode(name: str) -> Internode:
    """The network ``--internode NAME`` names (ib-ndr, roce-200, eth-100, ...)."""
    table = internode_table()
    key = name.strip().lower()
    if key in table:
        return table[key]
    raise unknown_choice("inter-node link", name, list(table), hint="--internode " + ", ".join(table))


def link_kind(name: str) -> str:
    """``--link`` as given, resolved to "nvlink" or "pcie"."""
    key = name.strip().lower()
    key = _LINK_ALIASES.get(key, key)
    if key in LINK_KINDS:
        return key
    raise unknown_choice("link", name, [*LINK_KINDS, *_LINK_ALIASES], hint="--link nvlink or --link pcie")


def is_card(gpu: GpuSpec) -> bool:
    """A PCIe add-in card (a bridge at most joins a few of them), not a module on a baseboard (SXM, OAM)."""
    return (gpu.form_factor or "").lower().startswith("pcie")


def bridge_cards(gpu: GpuSpec) -> int:
    """How many cards an NVLink bridge joins: 4 where the catalog says 4-way, else 2."""
    return 4 if "4-way" in (gpu.nvlink or "") else 2


def default_link(gpu: GpuSpec) -> str:
    """The link a job on ``gpu`` uses unless told: a module's fabric (SXM, OAM: every GPU on the baseboard is
    joined by it), PCIe for an add-in card (bridges, where they exist, join only 2 or 4 cards and are often absent)."""
    return "nvlink" if gpu.interconnect_gbps and not is_card(gpu) else "pcie"


def _fabric_label(gpu: GpuSpec) -> str:
    text = gpu.nvlink or _("GPU fabric")
    return re.split(r"[,:(]", text)[0].strip()


def intra_link(gpu: GpuSpec, kind: str, count: int) -> Link:
    """The link between ``count`` GPUs of a node: the GPU's fabric at its per-direction rate (the catalog gives
    both directions together) times NVLINK_BUS_SHARE, or PCIe at its generation and width times PCIE_BUS_SHARE.
    Raises for a fabric the GPU lacks, or a bridge asked to join more cards than it can."""
    if kind == "nvlink":
        if not gpu.interconnect_gbps:
            raise GpuflyError(f"the catalog gives no NVLink (or other GPU fabric) bandwidth for the {gpu.name}",
                              hint="--link pcie")
        if is_card(gpu) and count > bridge_cards(gpu):
            raise GpuflyError(f"an NVLink bridge joins {bridge_cards(gpu)} {gpu.name} cards, not {count}",
                              hint=f"--link pcie, or --gpu {bridge_cards(gpu)}x{gpu.name.replace(' ', '')}")
        per_direction = gpu.interconnect_gbps / 2
        return Link("nvlink", _("{fabric} ({rate:,.0f} GB/s each way)").format(
            fabric=_fabric_label(gpu), rate=per_direction), per_direction * NVLINK_BUS_SHARE, "nvlink")
    generation, lanes = gpu.pcie_gen or 4, gpu.pcie_lanes or 16
    per_direction = PCIE_GBPS_PER_LANE.get(generation, PCIE_GBPS_PER_LANE[4]) * lanes
    return Link("pcie", _("PCIe {generation}.0 x{lanes} ({rate:,.0f} GB/s each way)").format(
        generation=generation, lanes=lanes, rate=per_direction), per_direction * PCIE_BUS_SHARE, "pcie")


def default_internode(gpu: GpuSpec) -> tuple[str, int | None]:
    """The network a cluster of ``gpu`` nodes has unless told, and its NICs per node (None: one per GPU): the
    vendor's reference design for data-centre modules (DGX/HGX H100 and later: a 400 Gb/s NIC per GPU; DGX A100:
    200 Gb/s HDR per GPU), else one 100 Gb/s Ethernet NIC per node."""
    if gpu.segment == "datacenter" and not is_card(gpu) and gpu.interconnect_gbps:
        if gpu.launch_year >= 2022:
            return ("ib-ndr" if gpu.vendor == "nvidia" else "roce-400"), None
        return ("ib-hdr" if gpu.vendor == "nvidia" else "roce-200"), None
    return "eth-100", 1


def network_link(net: Internode, nics: int) -> Link:
    """The network as a node's rings see it: ``nics`` NICs at their line rate times the transport's share."""
    per_nic = net.gbit_per_nic / 8
    share = RDMA_BUS_SHARE if net.rdma else TCP_BUS_SHARE
    return Link("network", _("{network}, {nics}x {rate:g} Gb/s per node").format(
        network=net.label, nics=nics, rate=net.gbit_per_nic), per_nic * nics * share, "rdma" if net.rdma else "tcp")


@dataclass(frozen=True)
class Topology:
    """The links of a job: ``intra`` between the GPUs of a node, ``inter`` between nodes (None on one node)."""

    intra: Link
    gpus_per_node: int
    nodes: int = 1
    inter: Link | None = None

    def ring_bandwidth(self, ranks_per_node: int, nodes: int) -> float:
        """Bytes/s per GPU of a ring with ``ranks_per_node`` members on each of ``nodes`` nodes: across nodes the
        node's NICs are shared by every ring that crosses them at once (one per group of ranks_per_node GPUs)."""
        if nodes <= 1 or self.inter is None:
            return self.intra.bus_gbps * 1e9
        network = self.inter.bus_gbps / max(1, self.gpus_per_node // max(1, ranks_per_node))
        return (network if ranks_per_node == 1 else min(self.intra.bus_gbps, network)) * 1e9

    def to_dict(self) -> dict[str, Any]:
        return {"intra": self.intra.to_dict(), "inter": self.inter.to_dict() if self.inter else None,
                "gpus_per_node": self.gpus_per_node, "nodes": self.nodes}


STEPS = {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 1}
"""Ring steps per member beyond the first: an all-reduce is a reduce-scatter then an all-gather."""


def collective_s(kind: str, nbytes: float, topology: Topology, ranks_per_node: int, nodes: int = 1) -> float:
    """Seconds of one ring collective over ``ranks_per_node`` GPUs on each of ``nodes`` nodes, the cheaper of
    NCCL's protocols; ``nbytes`` is the whole buffer (the reduced or gathered tensor). One GPU: no time."""
    ranks = ranks_per_node * nodes
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    factor = STEPS[kind]
    steps, inter_steps = factor * (ranks - 1), factor * (nodes - 1)
    bandwidth = topology.ring_bandwidth(ranks_per_node, nodes)
    volume = steps / ranks * nbytes
    inter_hop = topology.inter.hop if topology.inter is not None else topology.intra.hop
    return min(p.base_s + (steps - inter_steps) * p.hop_s[topology.intra.hop] + inter_steps * p.hop_s[inter_hop]
               + volume / (bandwidth * p.bandwidth_share) for p in PROTOCOLS)


def send_s(nbytes: float, link: Link) -> float:
    """Seconds to send ``nbytes`` from one GPU to the next over ``link`` (a pipeline stage's activations)."""
    return min(p.base_s + p.hop_s[link.hop] + nbytes / (link.bus_gbps * 1e9 * p.bandwidth_share) for p in PROTOCOLS)


def topology(gpu: GpuSpec, job: Job) -> tuple[Topology, tuple[str, ...]]:
    """The links ``job`` runs over on ``gpu``, and a sentence for each default taken (the link inside a node when
    --link is not given on several GPUs, the network and NICs when --internode/--nics are not given on several
    nodes), so the output can say what it assumed."""
    said = []
    kind = job.link or default_link(gpu)
    if not job.link and job.gpus > 1:
        why = (_("its fabric joins every GPU of a baseboard") if kind == "nvlink"
               else _("a PCIe card; an NVLink bridge, where the card takes one, is --link nvlink"))
        said.append(_("--link {kind}: the {gpu}'s default ({why})").format(kind=kind, gpu=gpu.name, why=why))
    intra = intra_link(gpu, kind, job.gpus)
    if job.nodes <= 1:
        return Topology(intra, job.gpus), tuple(said)
    name, default_nics = default_internode(gpu)
    net = internode(job.internode or name)
    nics = job.nics or (default_nics if not job.internode else None) or (job.gpus if net.rdma else 1)
    if not job.internode:
        said.append(_network_default(gpu, net.name, nics, default_nics is None))
    elif not job.nics:
        why = (_("a NIC per GPU, as RDMA clusters are built (DGX/HGX rails)") if net.rdma
               else _("one Ethernet NIC per node"))
        said.append(_("--nics {nics}: {why}; give --nics for your nodes").format(nics=nics, why=why))
    return Topology(intra, job.gpus, job.nodes, network_link(net, nics)), tuple(said)


def _network_default(gpu: GpuSpec, name: str, nics: int, reference: bool) -> str:
    why = (_("the reference design of a {gpu} node, a NIC per GPU (DGX/HGX)").format(gpu=gpu.name) if reference
           else _("one Ethernet NIC per node, the plain default for nodes of PCIe cards"))
    return _("--internode {name} --nics {nics}: {why}; give --internode and --nics for your cluster").format(
        name=name, nics=nics, why=why)
