"""``dcgmi diag`` parsing (table and ``-j``) on real captures, and the findings validate makes of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.cli import app
from gpufleet.parsers import ParseError
from gpufleet.validation.dcgm_diag import parse_dcgm_diag
from gpufleet.validation.health import (
    CommandOutput,
    Expectations,
    NodeAction,
    NodeData,
    check_dcgm_diag,
    evaluate_node,
)

REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "dcgm"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} is absent")
PASS_R2 = REAL / "a100-sxm4-80gb_p4de_dcgm3.3.3_driver535.104.12_diag-r2.txt"
FAIL_R3 = REAL / "h100-sxm_x8_dcgm3.3.8_driver560.35.03_diag-r3_FAIL-cuinit-fabricmanager-not-running.txt"
JSON_31 = Path(__file__).parent / "fixtures" / "dcgm" / \
    "dcgm3.1.0_8gpu_diag-j_deployment-custom_pass_leading-warning.json.txt"


@needs_shared
def test_real_pass_level2() -> None:
    r = parse_dcgm_diag(PASS_R2.read_text())
    assert (r.source, r.level, r.dcgm_version, r.driver_version) == ("text", 2, "3.3.3", "535.104.12")
    assert r.device_ids == ["20b2"] * 8
    assert [(x.category, x.test) for x in r.results][-2:] == [("Integration", "PCIe"), ("Hardware", "GPU Memory")]
    assert len(r.results) == 11 and all(x.status == "pass" and x.gpus is None for x in r.results)
    assert r.passed and check_dcgm_diag(r) == []


@needs_shared
def test_real_fabric_manager_failure_level3() -> None:
    r = parse_dcgm_diag(FAIL_R3.read_text())
    assert (r.dcgm_version, r.driver_version, r.device_ids) == ("3.3.8", "560.35.03", ["2330"] * 8)
    mem = next(x for x in r.results if x.test == "GPU Memory")
    assert (mem.category, mem.status, mem.gpus, len(mem.warnings)) == ("Hardware", "fail", None, 8)
    # Wrapped cells are joined without inventing spaces: "Restar" + "t DCGM", "initiali" + "ze CUDA".
    assert mem.warnings[3].startswith("GPU 3 Error using CUDA API cuInit Check DCGM and system logs for errors. "
                                      "Reset GPU. Restart DCGM. Rerun diagnostics. Unable to initialize CUDA "
                                      "library: 'system not yet initialized'")
    assert mem.warnings[3].endswith("Refer to https://github.com/nvidia/cuda-samples")
    persist = next(x for x in r.results if x.test == "Persistence Mode")
    assert persist.status == "pass" and persist.info[0].startswith(
        'Persistence mode for GPU 0 is disabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " '
        "as root.,Persistence mode for GPU 1 is disabled.")
    assert {x.test: x.status for x in r.results if x.status == "skip"} == {
        "PCIe": "skip", "Memory Bandwidth": "skip", "EUD Test": "skip"}
    assert not r.passed
    findings = check_dcgm_diag(r)
    crit = [f for f in findings if f.severity == "critical"]
    assert [f.gpu for f in crit] == list(range(8))
    assert {(f.check, f.action) for f in crit} == {("dcgm-hardware-gpu-memory", NodeAction.REMEDIATE)}
    assert "nvidia-fabricmanager" in crit[0].message
    assert crit[0].to_json()["taint"] == "gpufleet.io/gpu-unhealthy=remediate:NoSchedule"
    assert {f.check for f in findings if f.severity == "info"} == {
        "dcgm-integration-pcie", "dcgm-stress-memory-bandwidth", "dcgm-stress-eud-test"}


@needs_shared
@pytest.mark.parametrize(("row", "value", "check", "action", "gpus"), [
    ("| PCIe                      | Pass - All ", "| PCIe                      | Fail - GPU: 3, 5 ",
     "dcgm-integration-pcie", NodeAction.ISOLATE, [3, 5]),
    ("| Page Retirement/Row Remap | Pass       ", "| Page Retirement/Row Remap | Fail       ",
     "dcgm-deployment-page-retirement-row-remap", NodeAction.RESET_GPU, [None]),
    ("| Persistence Mode          | Pass       ", "| Persistence Mode          | Fail       ",
     "dcgm-deployment-persistence-mode", NodeAction.REMEDIATE, [None]),
])
def test_mutated_real_capture(row: str, value: str, check: str, action: NodeAction, gpus: list[int | None]) -> None:
    text = PASS_R2.read_text()
    assert row in text
    r = parse_dcgm_diag(text.replace(row, value))
    crit = [f for f in check_dcgm_diag(r) if f.severity == "critical"]
    assert [(f.check, f.action, f.gpu) for f in crit] == [(check, action, g) for g in gpus]


def test_real_json_with_leading_warning_and_nulls() -> None:
    r = parse_dcgm_diag(JSON_31.read_text())
    assert (r.source, r.dcgm_version) == ("json", "3.1.0")
    assert [x.test for x in r.results[:9]][-3:] == ["Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
    assert all(x.gpus is None for x in r.results[:9])  # "0,1,...,7" on a Deployment test: every GPU
    assert [x.gpus for x in r.results[9:]] == [[g] for g in range(8)]
    assert r.passed and check_dcgm_diag(r) == []


def test_json_failure_per_gpu() -> None:
    doc = json.loads(JSON_31.read_text()[JSON_31.read_text().index("{"):])
    soft = doc["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"][6]
    soft.update(status="FAIL", warnings=[{"warning": "GPU 6 memory test failed", "error_id": 82}])
    r = parse_dcgm_diag(json.dumps(doc))
    (f,) = [f for f in check_dcgm_diag(r) if f.severity == "critical"]
    assert (f.check, f.gpu, f.action) == ("dcgm-custom-software", 6, NodeAction.ISOLATE)
    assert "GPU 6 memory test failed" in f.message


@pytest.mark.parametrize(("text", "message"), [
    ("hello\n", "no dcgmi diag result table"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": '
     '[{"name": "Denylist", "results": [{"gpu_ids": "0", "status": "MAYBE"}]}]}]}}', "unknown status"),
    ('{"DCGM GPU Diagnostic": {"version": "4.2.3"}}', "no test_categories"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
     '[{"name": "x", "results": [{"gpu_ids": NaN, "status": "PASS"}]}]}]}}', "gpu_ids"),
    ("{truncated", "not valid JSON"),
])
def test_refused(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_dcgm_diag(text)


@needs_shared
def test_bundle_folds_into_validate_findings() -> None:
    data = NodeData(host="n1", pool="gpu", nvidia_smi=None, module_version=None, driver_packages=None,
                    fabricmanager_state=None, modules=None, ibstat=None, kernel_log="",
                    dcgm_diag=CommandOutput(rc=226, stdout=FAIL_R3.read_text()))
    health = evaluate_node(data, Expectations(model=None, driver_version=None))
    assert "dcgm-hardware-gpu-memory" in {f.check for f in health.findings if f.severity == "critical"}
    bad = evaluate_node(NodeData(**{**data.__dict__, "dcgm_diag": CommandOutput(rc=1, stdout="Error: host engine")}),
                        Expectations(model=None, driver_version=None))
    assert [(f.check, f.severity) for f in bad.findings if f.check.startswith("dcgm")] == [("dcgm-diag", "warning")]


@needs_shared
def test_inspect_cli_json() -> None:
    res = CliRunner().invoke(app, ["inspect", "dcgm-diag", str(FAIL_R3), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["passed"] is False and out["dcgm_version"] == "3.3.8"
    assert sum(f["severity"] == "critical" for f in out["findings"]) == 8
    bad = CliRunner().invoke(app, ["inspect", "dcgm-diag", str(REPO_ROOT / "README.md"), "--json"])
    assert bad.exit_code == 1 and json.loads(bad.stdout)["error"]["kind"] == "parse error"
