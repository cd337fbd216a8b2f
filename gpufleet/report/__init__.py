"""Validation reports: JSON, Markdown and bandwidth-versus-message-size plots (``gpufleet validate --report``)."""

from gpufleet.report.plot import PlotData, plot_bandwidth
from gpufleet.report.report import build_report, render_markdown, write_report

__all__ = ["PlotData", "build_report", "plot_bandwidth", "render_markdown", "write_report"]
