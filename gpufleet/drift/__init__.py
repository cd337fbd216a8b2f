"""Drift detection (check-mode runs folded into a per-host, per-component report), fleet skew, the
Prometheus textfile metric, and rolling remediation with drains only where a change disrupts GPU work."""

from gpufleet.drift.metrics import DEFAULT_TEXTFILE, render_textfile, write_textfile
from gpufleet.drift.remediate import (
    HostOutcome,
    HostPlan,
    RemediationResult,
    parse_batch,
    plan_hosts,
    remediate,
)
from gpufleet.drift.report import (
    EXIT_DRIFTED,
    EXIT_ERROR,
    EXIT_IN_SYNC,
    DriftItem,
    DriftReport,
    RawResults,
    build_report,
    render_text,
)
from gpufleet.drift.skew import SkewItem, collect_versions, find_skew

__all__ = [
    "DEFAULT_TEXTFILE",
    "EXIT_DRIFTED",
    "EXIT_ERROR",
    "EXIT_IN_SYNC",
    "DriftItem",
    "DriftReport",
    "HostOutcome",
    "HostPlan",
    "RawResults",
    "RemediationResult",
    "SkewItem",
    "build_report",
    "collect_versions",
    "find_skew",
    "parse_batch",
    "plan_hosts",
    "remediate",
    "render_text",
    "render_textfile",
    "write_textfile",
]
