"""Alert rules: rendered files up to date, PrometheusRule shape, labels, promtool check + unit tests."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest
import yaml

from gpufleet.monitoring import PROMETHEUS_RULE_FILE, RULES_FILE, RULES_TESTS_FILE
from gpufleet.monitoring.rules import dump, render_prometheus_rule, render_rule_groups
from gpufleet.sandbox.tools import find_promtool
from gpufleet.validation.xid import Action, codes_for

_found = find_promtool()
PROMTOOL = str(_found or "promtool")
# In CI (make test unpacks Debian's prometheus package under .cache/tools) promtool must be there: never skip.
needs_promtool = pytest.mark.skipif(
    _found is None and not os.environ.get("CI"),
    reason="promtool not found (make test unpacks Debian's prometheus package: gpufleet.sandbox.tools)",
)

EXPECTED_ALERTS = {
    "GpuXidIsolate", "GpuXidReboot", "GpuXidResetGpu", "GpuXidApplicationError", "GpuDoubleBitEccError",
    "GpuRowRemapFailure", "GpuThermalThrottling", "GpuPowerThrottling", "GpuMissingFromExporter",
    "DcgmExporterDown", "GpuLowUtilizationDuringJob", "GpufleetDriftDetected", "GpufleetHealthActionApplied",
    "GpufleetHealthActionsHeld", "GpufleetHealthActionLong", "GpufleetHealthReportsMissing",
    "GpufleetHealthWatcherStalled",
}


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]]


def test_shipped_files_are_rendered_from_the_code() -> None:
    assert RULES_FILE.read_text() == dump(render_rule_groups()), "run: python -m gpufleet.monitoring.rules"
    assert PROMETHEUS_RULE_FILE.read_text() == dump(render_prometheus_rule())


def test_prometheusrule_wraps_the_same_groups() -> None:
    doc = yaml.safe_load(PROMETHEUS_RULE_FILE.read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert doc["metadata"]["name"] == "gpufleet-gpu-alerts"
    assert doc["spec"] == yaml.safe_load(RULES_FILE.read_text())


def test_alerts_and_labels() -> None:
    rules = _rules()
    assert {r["alert"] for r in rules} == EXPECTED_ALERTS
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        # "review": the rate limit held findings back; a person decides (docs/validation.md, Actions).
        assert r["labels"]["action"] in {a.value for a in Action} | {"remediate", "review"}, r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    by_name = {r["alert"]: r for r in rules}
    assert by_name["GpuLowUtilizationDuringJob"]["labels"]["severity"] == "info"
    assert by_name["GpufleetDriftDetected"]["expr"] == "max by (host, component) (gpufleet_drift) > 0"


@pytest.mark.parametrize(
    ("alert", "action"),
    [("GpuXidIsolate", Action.ISOLATE), ("GpuXidReboot", Action.REBOOT), ("GpuXidResetGpu", Action.RESET_GPU),
     ("GpuXidApplicationError", Action.APP_ERROR)],
)
def test_xid_alerts_select_the_catalog_codes(alert: str, action: Action) -> None:
    rule = next(r for r in _rules() if r["alert"] == alert)
    m = re.search(r'xid=~"([0-9|]+)"', rule["expr"])
    assert m is not None
    assert sorted(int(c) for c in m.group(1).split("|")) == codes_for(action)
    assert rule["labels"]["action"] == action.value


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    tests = yaml.safe_load(RULES_TESTS_FILE.read_text())
    assert tests["rule_files"] == ["rules.yml"]
    firing: set[str] = set()
    silent: set[str] = set()
    for t in tests["tests"]:
        for case in t.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
    assert firing == EXPECTED_ALERTS
    assert silent == EXPECTED_ALERTS


@needs_promtool
def test_promtool_check_rules() -> None:
    done = subprocess.run([PROMTOOL, "check", "rules", str(RULES_FILE)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in done.stdout


@needs_promtool
def test_promtool_test_rules() -> None:
    done = subprocess.run([PROMTOOL, "test", "rules", str(RULES_TESTS_FILE)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
