"""fio JSON parsing (a real json,normal capture) and the storage gates; non-finite values refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.parsers import ParseError
from gpufleet.validation.fio import FioGate, gate_fio, parse_fio

CAPTURE = Path(__file__).parent / "fixtures" / "fio" / "cbt-rawfio_nvme8n13_fio-3.42_randwrite-4k-qd1_json+normal.txt"


def _doc() -> dict[str, Any]:
    text = CAPTURE.read_text()
    start = text.index("\n{\n") + 1
    doc: dict[str, Any] = json.JSONDecoder().raw_decode(text, start)[0]
    return doc


def test_real_capture_between_text() -> None:
    r = parse_fio(CAPTURE.read_text())
    assert r.version == "fio-3.42-6-g219f"
    (job,) = r.jobs
    assert (job.name, job.rw) == ("/dev/nvme8n13", "randwrite")
    assert job.write is not None and job.read is not None
    assert (job.write.io_bytes, job.write.bw_bytes, job.write.iops, job.write.runtime_ms, job.write.clat_p99_ns) == (
        50966528, 5096143.0, 1244.175582, 10001, 1695744.0)
    assert r.total("read") is None  # nothing read: a read gate has no data, it does not pass
    assert r.total("write") == (5096143.0, 1244.175582)


@pytest.mark.parametrize(("gate", "status"), [
    (FioGate("write", min_iops=1000), "pass"),
    (FioGate("write", min_iops=1245), "fail"),
    (FioGate("write", min_bw_bytes=5.2e6), "fail"),
    (FioGate("read", min_iops=1), "no-data"),
])
def test_gates(gate: FioGate, status: str) -> None:
    assert gate_fio(parse_fio(CAPTURE.read_text()), gate).status == status


def test_mutated_jobs_are_summed() -> None:
    doc = _doc()
    doc["jobs"].append(json.loads(json.dumps(doc["jobs"][0]).replace("nvme8n13", "nvme8n14")))
    doc["jobs"][1]["write"]["iops"] = 100.5
    r = parse_fio(json.dumps(doc, indent=2))
    assert r.total("write") == (2 * 5096143.0, 1244.175582 + 100.5)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["jobs"][0]["write"].update(bw_bytes=float("nan")), "non-finite number NaN"),
    (lambda d: d["jobs"][0]["write"].update(iops=float("inf")), "non-finite number Infinity"),
    (lambda d: d["jobs"][0]["write"].update(iops="1244"), "expected a number"),
    (lambda d: d["jobs"][0]["write"].update(runtime=-1), "finite number >= 0"),
    (lambda d: d["jobs"][0].update(error=5, error_string="Input/output error"), "failed: error 5"),
    (lambda d: d.update(jobs=[]), "no job"),
])
def test_refused(mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(ParseError, match=message):
        parse_fio(json.dumps(doc, indent=2))


def test_not_json_and_truncated() -> None:
    with pytest.raises(ParseError, match="no JSON document"):
        parse_fio("fio: pid=1, err=5/file:io_u.c:1889, func=io_u error, error=Input/output error\n")
    with pytest.raises(ParseError, match="truncated"):
        parse_fio(CAPTURE.read_text()[:2000])
    with pytest.raises(ValueError, match="finite"):
        FioGate("read", min_iops=float("nan"))


def test_inspect_fio_cli(tmp_path: Path) -> None:
    ok = CliRunner().invoke(app, ["inspect", "fio", str(CAPTURE), "--json", "--min-write-iops", "1000"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["gates"][0]["status"] == "pass"
    fail = CliRunner().invoke(app, ["inspect", "fio", str(CAPTURE), "--json", "--min-write-mbps", "100"])
    assert fail.exit_code == 1 and json.loads(fail.stdout)["gates"][0]["status"] == "fail"
    bad = tmp_path / "nan.json"
    doc = _doc()
    doc["jobs"][0]["write"]["iops"] = float("nan")
    bad.write_text(json.dumps(doc, indent=2))
    res = CliRunner().invoke(app, ["inspect", "fio", str(bad), "--json"])
    assert res.exit_code == 1 and "non-finite" in json.loads(res.stdout)["error"]["message"]
