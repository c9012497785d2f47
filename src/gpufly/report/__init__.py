"""`gpufly report`: this machine and what the other stages found, on one page.

``build_report()`` probes the machine and gathers the sections (each computed by the stage that owns it) into a
``Report``; ``compose()`` does the same from facts already gathered; ``render_html()`` writes the page. Imports of
the stages are deferred to the call, so importing this package stays cheap.
"""

from __future__ import annotations

from gpufly.report.actions import Action, rank
from gpufly.report.build import (
    SECTIONS,
    Report,
    TuneSummary,
    build_report,
    compose,
    profile_summary,
    quick_bench,
    tune_summary,
)
from gpufly.report.fleet import CeilingBar, CeilingChart, FleetSection, ceiling_charts, fleet_section
from gpufly.report.html import render_html
from gpufly.report.machine import GpuEntry, MachineReport, probe_machine
from gpufly.report.peers import LadderPlace, Peer, ladder_place
from gpufly.report.reaches import Reach, ReachSection, reach, reach_section
from gpufly.report.setup import SetupSection, setup_section

__all__ = ["SECTIONS", "Action", "CeilingBar", "CeilingChart", "FleetSection", "GpuEntry", "LadderPlace",
           "MachineReport", "Peer", "Reach", "ReachSection", "Report", "SetupSection", "TuneSummary", "build_report",
           "ceiling_charts", "compose", "fleet_section", "ladder_place", "probe_machine", "profile_summary",
           "quick_bench", "rank", "reach", "reach_section", "render_html", "setup_section", "tune_summary"]
