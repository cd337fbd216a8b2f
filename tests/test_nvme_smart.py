"""NVMe SMART parsing (smartctl --json real captures; nvme smart-log -o json from its documented fields) and the
SSD findings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.parsers import ParseError
from gpufleet.validation.health import CommandOutput, NodeAction, check_smart, check_smart_outputs
from gpufleet.validation.smart import SmartThresholds, parse_smart

SMART = Path(__file__).parent / "fixtures" / "smart"
FAILING = SMART / "samsung-970-evo-500gb_smartctl7.0_media-errors-7.json"
HEALTHY = SMART / "intel-ssdpeknw010t8_smartctl7.1_healthy.json"


def _mutate(path: Path, **log: Any) -> str:
    doc = json.loads(path.read_text())
    doc["nvme_smart_health_information_log"].update(log)
    return json.dumps(doc)


def test_real_captures() -> None:
    ok = parse_smart(HEALTHY.read_text())
    assert (ok.source, ok.model, ok.available_spare_pct, ok.spare_threshold_pct, ok.percentage_used,
            ok.media_errors, ok.smart_passed) == ("smartctl", "INTEL SSDPEKNW010T8", 100, 10, 0, 0, True)
    assert check_smart(ok) == []
    bad = parse_smart(FAILING.read_text())
    assert (bad.device, bad.media_errors, bad.error_log_entries, bad.percentage_used, bad.temperature_c) == (
        "/dev/nvme0", 7, 62, 3, 35)
    assert [(f.check, f.severity, f.action) for f in check_smart(bad)] == [
        ("ssd-media-errors", "warning", NodeAction.MONITOR)]


@pytest.mark.parametrize(("log", "expected"), [
    ({"critical_warning": 0x04}, [("ssd-critical-warning-2", "critical", NodeAction.ISOLATE)]),
    ({"critical_warning": 0x0A}, [("ssd-critical-warning-1", "warning", NodeAction.MONITOR),
                                  ("ssd-critical-warning-3", "critical", NodeAction.ISOLATE)]),
    ({"available_spare": 9}, [("ssd-spare", "critical", NodeAction.ISOLATE)]),
    ({"available_spare": 20}, [("ssd-spare", "warning", NodeAction.MONITOR)]),
    ({"percentage_used": 85}, [("ssd-wear", "info", NodeAction.MONITOR)]),
    ({"percentage_used": 104}, [("ssd-wear", "warning", NodeAction.MONITOR)]),
    ({"media_errors": 1}, [("ssd-media-errors", "warning", NodeAction.MONITOR)]),
])
def test_mutated_real_capture(log: dict[str, Any], expected: list[tuple[str, str, NodeAction]]) -> None:
    findings = check_smart(parse_smart(_mutate(HEALTHY, **log)))
    assert [(f.check, f.severity, f.action) for f in findings] == expected


def test_smart_status_failed_and_thresholds() -> None:
    doc = json.loads(HEALTHY.read_text())
    doc["smart_status"]["passed"] = False
    (f,) = check_smart(parse_smart(json.dumps(doc)))
    assert (f.check, f.severity, f.to_json()["taint"]) == (
        "ssd-smart-status", "critical", "gpufleet.io/gpu-unhealthy=isolate:NoExecute")
    worn = parse_smart(_mutate(HEALTHY, percentage_used=50))
    assert check_smart(worn) == []
    assert [f.severity for f in check_smart(worn, limits=SmartThresholds(percent_used_info=40))] == ["info"]


def test_nvme_cli_form() -> None:
    # Built from nvme-cli's documented key names (libnvme struct nvme_smart_log), not a capture: none was found.
    doc = {"critical_warning": {"value": 1}, "temperature": 313, "avail_spare": 5, "spare_thresh": 10,
           "percent_used": 12, "media_errors": 0, "num_err_log_entries": 3, "power_on_hours": 100}
    r = parse_smart(json.dumps(doc))
    assert (r.source, r.temperature_c, r.critical_warning, r.warning_bits) == (
        "nvme-cli", 40, 1, ["available spare below threshold"])
    assert {f.check for f in check_smart(r, "/dev/nvme1")} == {"ssd-critical-warning-0", "ssd-spare"}


@pytest.mark.parametrize(("text", "message"), [
    (_mutate(HEALTHY, percentage_used=float("nan")), "non-finite number NaN"),
    (_mutate(HEALTHY, media_errors=float("inf")), "non-finite number Infinity"),
    (_mutate(HEALTHY, available_spare="100"), "expected a number"),
    (_mutate(HEALTHY, available_spare=True), "expected a number"),
    (_mutate(HEALTHY, media_errors=-1), "negative"),
    (_mutate(HEALTHY, critical_warning=256), "one byte"),
    (_mutate(HEALTHY, percentage_used=1.5), "finite integer"),
    ('{"json_format_version": [1, 0], "smartctl": {}, "device": {"protocol": "ATA"}}', "without an NVMe health log"),
    ('{"hello": 1}', "neither smartctl"),
    ("not json", "not JSON"),
])
def test_refused(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_smart(text)


def test_bundle_outputs_and_cli(tmp_path: Path) -> None:
    findings = check_smart_outputs({"nvme0": CommandOutput(0, FAILING.read_text()),
                                    "nvme1": CommandOutput(1, "garbage")})
    assert [(f.check, f.severity) for f in findings] == [("ssd-media-errors", "warning"), ("ssd-smart", "warning")]
    res = CliRunner().invoke(app, ["inspect", "nvme-smart", str(FAILING), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["findings"][0]["check"] == "ssd-media-errors"
    bad = tmp_path / "nan.json"
    bad.write_text(_mutate(HEALTHY, percentage_used=float("nan")))
    res = CliRunner().invoke(app, ["inspect", "nvme-smart", str(bad), "--json"])
    assert res.exit_code == 1 and "non-finite" in json.loads(res.stdout)["error"]["message"]
