"""``gpufleet inspect smi-xml|nccl``: JSON to stdout, a clear error and exit 2 for unparsable input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.cli.inspect import app

REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} is absent")
runner = CliRunner()


@needs_shared
def test_smi_xml_json() -> None:
    res = runner.invoke(app, ["smi-xml", str(REAL / "nvidia-smi-xml/tesla-t4_driver515.105.01_telegraf.xml"),
                              "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["driver_version"] == "515.105.01"
    assert d["gpus"][0]["name"] == "Tesla T4"
    assert d["gpus"][0]["power_limit_w"] == 70.0


@needs_shared
def test_nccl_json_and_table() -> None:
    log = REAL / "nccl-tests/h100-sxm-80gb_2x-oci-bm.gpu.h100.8-roce_nccl2.21.5_all_reduce_perf_1G-16G.txt"
    res = runner.invoke(app, ["nccl", str(log), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert (d["collective"], d["nranks"]) == ("all_reduce", 16)
    assert d["rows"][-1]["out_of_place"]["busbw_gbs"] == 464.57
    table = runner.invoke(app, ["nccl", str(log)], env={"COLUMNS": "200"})
    assert table.exit_code == 0
    assert "464.57" in table.stdout
    assert "avg busbw (all sizes; not a gate): 458.452 GB/s" in table.stdout


@needs_shared
def test_failed_log_exits_1_with_reason() -> None:
    log = REAL / "nccl-tests" / (
        "h100-sxm_x8_driver560.35.03_all_reduce_perf_FAIL-cuda-system-not-yet-initialized.txt")
    res = runner.invoke(app, ["nccl", str(log), "--json"])
    # The error contract: exit 1, JSON on stdout (--json), the heading and the problem on stderr.
    assert res.exit_code == 1
    error = json.loads(res.stdout)["error"]
    assert (error["file"], error["kind"]) == (str(log), "parse error")
    assert error["message"].startswith("nccl-tests run failed")
    assert "error: parse error" in res.stderr
    assert f"- {log}: nccl-tests run failed" in res.stderr
    assert "Test CUDA failure common.cu:941 'system not yet initialized'" in res.stderr


def test_truncated_xml_exits_1(tmp_path: Path) -> None:
    f = tmp_path / "cut.xml"
    f.write_text("<?xml version='1.0'?><nvidia_smi_log><driver_version>570")
    res = runner.invoke(app, ["smi-xml", str(f)])
    assert res.exit_code == 1
    assert "not well-formed XML" in res.stderr
