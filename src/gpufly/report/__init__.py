"""`gpufly report`: this machine and what the other stages found, in one place.

``build_report()`` gathers the sections (each computed by the stage that owns it) into a ``Report``; the CLI
renders it. Imports of the stages are deferred to the call, so importing this package stays cheap.
"""

from __future__ import annotations

from gpufly.report.build import Report, TuneSummary, build_report, profile_summary, quick_bench, tune_summary

__all__ = ["Report", "TuneSummary", "build_report", "profile_summary", "quick_bench", "tune_summary"]
