"""What an XID means and how bad it is: NVIDIA's XID catalog, the rows gpufly judges, each with NVIDIA's action.

An XID is the driver's report of a GPU error (``NVRM: Xid (PCI:...): 79, ...`` in the kernel log; NVML delivers the
same code as an ``nvmlEventTypeXidCriticalError`` event). NVIDIA's catalog gives each code a mnemonic, a
description and a "resolution bucket", the immediate action it recommends:
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer; the archive for older GPUs:
https://docs.nvidia.com/deploy/xid-errors/archive/index.html).

gpufly's level follows that action: FAILING where NVIDIA asks for a GPU reset, a node reboot or its NVLink/DBE
workflows (the GPU cannot be trusted until then); DEGRADED where it asks to restart the application or to ignore
the event. Codes NVIDIA's catalog ties to the application (13, 31, 43, 45: out-of-bounds accesses, illegal
addresses, an application terminated) are said to be so: they are DEGRADED, since a GPU that throws them
repeatedly is still worth a look, and NVIDIA's Kubernetes device plugin likewise does not mark a GPU unhealthy for
them (https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/rm/health.go, ``applicationErrorXids``).
A code not in this table is DEGRADED, named "not in gpufly's table" with the catalog's address.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


class XidLevel(IntEnum):
    """How bad an XID is; the same numbers as ``gpufly.monitor.health.Level`` (DEGRADED 1, FAILING 2)."""

    DEGRADED = 1
    FAILING = 2


@dataclass(frozen=True)
class Xid:
    """One row of NVIDIA's catalog as gpufly judges it."""

    code: int
    mnemonic: str
    meaning: str
    """NVIDIA's description, in its words."""
    action: str
    """NVIDIA's immediate action (its resolution bucket), e.g. ``RESET_GPU``, ``RESTART_APP``."""
    level: XidLevel
    note: str = ""
    """Why gpufly judges it so, where NVIDIA's words need it (an application's fault, a follow-on event)."""

    def words(self) -> str:
        """``XID 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM)``; a code outside the table says where to look."""
        if not self.mnemonic:
            return f"XID {self.code} ({self.meaning}; {self.action})"
        extra = f"; {self.note}" if self.note else ""
        return f"XID {self.code} ({self.meaning}{extra}; NVIDIA: {self.action})"


_F, _D = XidLevel.FAILING, XidLevel.DEGRADED
_APP = "usually the application's fault"

XIDS: tuple[Xid, ...] = (
    Xid(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", _D),
    Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP", _D,
        f"{_APP}: an out-of-bounds access or illegal instruction"),
    Xid(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", _D,
        f"{_APP}: an illegal address"),
    Xid(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", _D,
        "PCIe quality, not the application"),
    Xid(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", _D,
        f"{_APP}: it hit a fault and was terminated; NVIDIA says the GPU stays healthy"),
    Xid(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", _D,
        "an application was torn down (Ctrl-C, a kill, a reset) or another XID came first"),
    Xid(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", _F),
    Xid(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", _F,
        "uncorrectable; a GPU reset or node reboot clears it"),
    Xid(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", _F),
    Xid(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", _D,
        "a row remap or page retirement was recorded; it takes effect at the next reset"),
    Xid(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", _F),
    Xid(74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", _F,
        "a GPU reset or node reboot clears it; the fault may be at the link's other end"),
    Xid(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", _F),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", _D,
        "corrected errors at a high rate"),
    Xid(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", _D,
        "the application that hit it must restart, the others are unaffected; reset the GPU when convenient"),
    Xid(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", _F),
    Xid(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", _F),
    Xid(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", _F),
    Xid(120, "GSP_ERROR", "GSP Error", "RESET_GPU", _F),
    Xid(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", _F),
    Xid(143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", _F),
    Xid(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", _D,
        "sums up the action other XIDs need; nvidia-smi -q names it"),
    Xid(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", _F),
)
"""The codes gpufly names, from NVIDIA's catalog (``CATALOG_URL``): mnemonic, description and immediate action as
NVIDIA gives them."""

BY_CODE: dict[int, Xid] = {xid.code: xid for xid in XIDS}


def describe(code: int | None) -> Xid:
    """The catalog row of ``code``; an unknown code is DEGRADED and says where to look it up.

    >>> describe(79).level.name, describe(13).level.name, describe(999).meaning
    ('FAILING', 'DEGRADED', "not in gpufly's table")
    """
    if code is not None and code in BY_CODE:
        return BY_CODE[code]
    return Xid(code if code is not None else -1, "", "not in gpufly's table", f"see {CATALOG_URL}",
               XidLevel.DEGRADED)


def label(code: int | None) -> str:
    """The bounded value of the exporter's ``xid`` label: the code when gpufly's table has it, else ``other``."""
    return str(code) if code is not None and code in BY_CODE else "other"
