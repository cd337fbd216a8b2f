"""The dcgm-exporter counters file we ship names only fields upstream lists, with upstream's types."""

from __future__ import annotations

import pytest

from gpufleet import REPO_ROOT
from gpufleet.monitoring import COUNTERS_CSV
from gpufleet.monitoring.counters import parse_counters

UPSTREAM = REPO_ROOT.parent / "shared" / "upstream" / "dcgm-exporter-4.5.3-4.8.2"
needs_shared = pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"reference data {UPSTREAM} is absent")

# The families the issue asks for, one field each at least.
REQUIRED = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
}


def test_parse_counters_reads_only_enabled_lines_unless_asked() -> None:
    text = ("# Format\n# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, off\n"
            "DCGM_FI_DEV_GPU_UTIL,  gauge, GPU utilization (in %).\n")
    assert [(c.field, c.prom_type, c.help) for c in parse_counters(text)] == [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")]
    assert [c.field for c in parse_counters(text, include_commented=True)] == [
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_UTIL"]


def test_shipped_counters_cover_the_required_families_once() -> None:
    fields = [c.field for c in parse_counters(COUNTERS_CSV.read_text())]
    assert len(fields) == len(set(fields)), "duplicate field"
    assert set(fields) >= REQUIRED, REQUIRED - set(fields)
    # Every non-comment line is a counter line: a typo'd line must not be silently ignored.
    text = COUNTERS_CSV.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) == len(fields)


@needs_shared
def test_every_field_exists_upstream_with_its_type() -> None:
    upstream: dict[str, set[str]] = {}
    for csv in sorted(UPSTREAM.glob("*.csv")):
        for c in parse_counters(csv.read_text(), include_commented=True):
            upstream.setdefault(c.field, set()).add(c.prom_type)
    assert "DCGM_FI_DEV_GPU_UTIL" in upstream  # the reader understood upstream's files
    problems = [
        f"{c.field} ({c.prom_type}): upstream has {sorted(upstream.get(c.field, set())) or 'no such field'}"
        for c in parse_counters(COUNTERS_CSV.read_text())
        if c.prom_type not in upstream.get(c.field, set())
    ]
    assert problems == []
