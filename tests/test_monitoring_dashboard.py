"""The Grafana dashboard is valid JSON whose queries use only our counters and the drift metric."""

from __future__ import annotations

import json
import re
from typing import Any

from gpufleet.monitoring import COUNTERS_CSV, DASHBOARD_FILE, DRIFT_METRIC
from gpufleet.monitoring.counters import parse_counters

METRIC = re.compile(r"\b(DCGM_[A-Z0-9_]+|gpufleet_[a-z_]+)\b")


def _queries(dash: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            out.append(q["query"])
    return out


def test_dashboard_queries_use_only_known_metrics() -> None:
    dash = json.loads(DASHBOARD_FILE.read_text())
    known = {c.field for c in parse_counters(COUNTERS_CSV.read_text())} | {DRIFT_METRIC}
    queries = _queries(dash)
    used = {m for q in queries for m in METRIC.findall(q)}
    assert used - known == set()
    assert all(METRIC.search(q) for q in queries), "a query references no metric"
    assert {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_EXP_XID_ERRORS_COUNT", DRIFT_METRIC,
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION"} <= used


def test_dashboard_structure() -> None:
    dash = json.loads(DASHBOARD_FILE.read_text())
    assert dash["uid"] == "gpufleet-gpus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) == 13
    for p in dash["panels"]:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
